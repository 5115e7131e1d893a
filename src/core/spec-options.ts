/**
 * The spec options, written out once. Each row holds what every surface needs to know about one
 * option — its wire name (HTTP query, gRPC field, OIP parameter, recipe key), value type, allowed
 * values, default, command-line flag, help text and documentation — and the CLI parser and help,
 * the HTTP query schema and OpenAPI, the gRPC and OIP parameter lists and the recipe validator are
 * all derived from these rows. Adding an option means adding a row here (and its numerics in
 * parseSpec); the model-run options (recipe, rule, ...) are a second table in src/service.
 */
import { QuantdError } from '../errors/index.js';
import { QDTYPES } from './dtypes.js';

export const SCHEMES = ['per_tensor', 'per_channel', 'per_token', 'per_group'] as const;
export const MODES = ['affine', 'symmetric', 'float_qparams'] as const;
export const RANGE_SEARCHES = ['minmax', 'greedy'] as const;

/** How a value is written: one of `values`, a number, a flag, text, or repeatable text. */
export type OptionKind = 'enum' | 'integer' | 'number' | 'boolean' | 'string' | 'strings';

export interface OptionRow {
  /** The wire name, snake_case: HTTP query parameter, gRPC field, OIP parameter, recipe key. */
  readonly name: string;
  readonly kind: OptionKind;
  /** kind enum: the accepted values, in the order messages list them. */
  readonly values?: readonly string[];
  /** The catalogued error for a value outside `values` (default OPTION_INVALID). */
  readonly unknownCode?: 'UNKNOWN_QDTYPE' | 'UNKNOWN_SCHEME' | 'UNKNOWN_MODE' | 'UNKNOWN_DTYPE';
  /** The default when it is one fixed value (documented as the schema's default). */
  readonly default?: string | number | boolean;
  /** How help and docs state the default, where it is not simply `default` (or there is none). */
  readonly defaultText?: string;
  /** The command-line flag, e.g. `--group-size`. */
  readonly flag: `--${string}`;
  /** The placeholder help shows after the flag (`N`, `GLOB`); booleans have none. */
  readonly placeholder?: string;
  /** One line of `quantd --help`. */
  readonly help: string;
  /** The OpenAPI description. */
  readonly doc: string;
  /** A valid value, for documentation (OpenAPI `example`) and the derivation tests. */
  readonly example: string | number | boolean;
  /** Whether the option describes codes already made: dequantize (OIP) takes it, results report it. */
  readonly describesCodes?: boolean;
}

export const SPEC_OPTION_ROWS = [
  {
    name: 'qdtype',
    kind: 'enum',
    values: QDTYPES,
    unknownCode: 'UNKNOWN_QDTYPE',
    default: 'int8',
    flag: '--qdtype',
    placeholder: 'T',
    help: 'the quantized type',
    doc: 'the quantized type of the codes',
    example: 'int4',
    describesCodes: true,
  },
  {
    name: 'scheme',
    kind: 'enum',
    values: SCHEMES,
    unknownCode: 'UNKNOWN_SCHEME',
    default: 'per_tensor',
    flag: '--scheme',
    placeholder: 'S',
    help: 'what shares one scale',
    doc: 'what shares one scale and zero point: the tensor, a channel, a token (row) or a group',
    example: 'per_channel',
    describesCodes: true,
  },
  {
    name: 'mode',
    kind: 'enum',
    values: MODES,
    unknownCode: 'UNKNOWN_MODE',
    defaultText: 'affine; symmetric for fp8',
    flag: '--mode',
    placeholder: 'M',
    help: 'how zero points are chosen; float_qparams: per_channel only',
    doc: 'how the zero point is chosen; float_qparams applies to per_channel only',
    example: 'symmetric',
    describesCodes: true,
  },
  {
    name: 'axis',
    kind: 'integer',
    default: 0,
    flag: '--axis',
    placeholder: 'N',
    help: 'per_channel axis; negative counts from the end',
    doc: 'the channel axis of per_channel (negative counts from the last dimension)',
    example: -1,
    describesCodes: true,
  },
  {
    name: 'group_size',
    kind: 'integer',
    default: 128,
    flag: '--group-size',
    placeholder: 'N',
    help: 'per_group group size along the last dimension',
    doc: 'the group size of per_group, along the last dimension (at least 2)',
    example: 32,
    describesCodes: true,
  },
  {
    name: 'quant_min',
    kind: 'integer',
    defaultText: "the qdtype's minimum",
    flag: '--quant-min',
    placeholder: 'N',
    help: "narrow the qdtype's range (never widen it)",
    doc: "the smallest code; narrows the qdtype's range, never widens it",
    example: -100,
    describesCodes: true,
  },
  {
    name: 'quant_max',
    kind: 'integer',
    defaultText: "the qdtype's maximum",
    flag: '--quant-max',
    placeholder: 'N',
    help: "narrow the qdtype's range (never widen it)",
    doc: "the largest code; narrows the qdtype's range, never widens it",
    example: 100,
    describesCodes: true,
  },
  {
    name: 'eps',
    kind: 'number',
    defaultText: 'float32 epsilon, 2^-23',
    flag: '--eps',
    placeholder: 'X',
    help: 'smallest scale chosen',
    doc: 'the smallest scale chosen (rounded to float32; at least the smallest normal float32)',
    example: 0.0001,
  },
  {
    name: 'range_search',
    kind: 'enum',
    values: RANGE_SEARCHES,
    default: 'minmax',
    flag: '--range-search',
    placeholder: 'R',
    help: "greedy: torch's choose_qparams_optimized, 2/4-bit",
    doc: "how each unit's range is chosen: min/max, or torch's greedy search (choose_qparams_optimized, 2/4-bit qdtypes)",
    example: 'minmax',
  },
] as const satisfies readonly OptionRow[];

export type SpecOptionRow = (typeof SPEC_OPTION_ROWS)[number];
export type SpecOptionName = SpecOptionRow['name'];

/** The spec options' wire names, in table order. */
export const SPEC_OPTION_NAMES: readonly SpecOptionName[] = SPEC_OPTION_ROWS.map((row) => row.name);

/** The spec options that describe codes already made (what dequantize needs to be told). */
export const CODE_SPEC_OPTION_NAMES: readonly SpecOptionName[] = SPEC_OPTION_ROWS.filter(
  (row) => 'describesCodes' in row && row.describesCodes,
).map((row) => row.name);

/** The row of a spec option. */
export function specOptionRow<N extends SpecOptionName>(name: N): Extract<SpecOptionRow, { name: N }> {
  return SPEC_OPTION_ROWS.find((row) => row.name === name) as Extract<SpecOptionRow, { name: N }>;
}

/** The flag's name as node's parseArgs keys it: `group-size`. */
export function flagKey(row: OptionRow): string {
  return row.flag.slice(2);
}

/** How help and docs state the default, or undefined when the option has none. */
export function defaultTextOf(row: OptionRow): string | undefined {
  return row.defaultText ?? (row.default === undefined ? undefined : String(row.default));
}

/** The accepted values as a message lists them: `a, b, c`. */
export function allowedText(row: OptionRow): string {
  return (row.values ?? []).join(', ');
}

/** An integer option's value; a string must be written as one (no `1e3`, no `1.0`). */
export function parseIntegerOption(row: OptionRow, value: string | number): number {
  const n = typeof value === 'number' ? value : /^[+-]?\d+$/.test(value.trim()) ? Number(value) : NaN;
  if (!Number.isSafeInteger(n)) {
    throw new QuantdError('OPTION_INVALID', {
      option: row.name,
      detail: 'must be an integer',
      value: String(value),
    });
  }
  return n;
}

/** A number option's value: any finite number. */
export function parseNumberOption(row: OptionRow, value: string | number): number {
  const n = typeof value === 'number' ? value : value.trim() === '' ? NaN : Number(value);
  if (!Number.isFinite(n)) {
    throw new QuantdError('OPTION_INVALID', {
      option: row.name,
      detail: 'must be a finite number',
      value: String(value),
    });
  }
  return n;
}

/** An enum option's value, or its catalogued error (UNKNOWN_QDTYPE, ..., else OPTION_INVALID). */
export function parseEnumOption<T extends string>(
  row: OptionRow & { values: readonly T[] },
  value: string | number,
): T {
  if ((row.values as readonly (string | number)[]).includes(value)) return value as T;
  if (row.unknownCode) throw new QuantdError(row.unknownCode, { value });
  const choices = row.values.length === 2 ? row.values.join(' or ') : `one of ${allowedText(row)}`;
  throw new QuantdError('OPTION_INVALID', {
    option: row.name,
    detail: `must be ${choices}`,
    value: String(value),
  });
}
