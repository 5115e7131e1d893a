/**
 * A quantization spec: what the caller asked for, validated once, independent of any tensor.
 * Options arrive as strings (CLI flags, HTTP query) or numbers (gRPC, JSON); `parseSpec`
 * accepts both and applies the defaults documented in the README.
 */
import { QuantdError } from '../errors/index.js';
import { QDTYPE_INFO, type QDType } from './dtypes.js';
import { FLOAT32_EPS, FLOAT32_MIN_NORMAL, fround } from './rounding.js';
import {
  MODES,
  RANGE_SEARCHES,
  SCHEMES,
  parseEnumOption,
  parseIntegerOption,
  parseNumberOption,
  specOptionRow,
  type SpecOptionRow,
} from './spec-options.js';

export type Scheme = (typeof SCHEMES)[number];
export type Mode = (typeof MODES)[number];
export type RangeSearch = (typeof RANGE_SEARCHES)[number];

export interface QuantSpec {
  readonly qdtype: QDType;
  readonly scheme: Scheme;
  readonly mode: Mode;
  /** per_channel only; may be negative (counted from the last dimension) until bound to a shape. */
  readonly axis: number | null;
  /** per_group only. */
  readonly groupSize: number | null;
  readonly quantMin: number;
  readonly quantMax: number;
  /** True when quant_min/quant_max differ from the qdtype's full range. */
  readonly customRange: boolean;
  /** Lower bound of chosen scales, already rounded to float32. */
  readonly eps: number;
  /** How the range of each unit is chosen: plain min/max, or torch's greedy search (2/4-bit). */
  readonly rangeSearch: RangeSearch;
}

/**
 * Options as a transport hands them over, snake_case like the HTTP query, one per row of the
 * spec option table: enum options as text, numeric ones as text or numbers.
 */
export type SpecOptions = {
  [Row in SpecOptionRow as Row['name']]?: Row['kind'] extends 'enum'
    ? string | undefined
    : string | number | undefined;
};

export const DEFAULT_GROUP_SIZE = 128;

const integerOption = (
  name: 'axis' | 'group_size' | 'quant_min' | 'quant_max',
  value: string | number,
): number => parseIntegerOption(specOptionRow(name), value);

function defaultMode(qdtype: QDType): Mode {
  return QDTYPE_INFO[qdtype].float8 ? 'symmetric' : 'affine';
}

export function parseSpec(options: SpecOptions): QuantSpec {
  const qdtype = parseEnumOption(specOptionRow('qdtype'), options.qdtype ?? 'int8');
  const info = QDTYPE_INFO[qdtype];
  const scheme = parseEnumOption(specOptionRow('scheme'), options.scheme ?? 'per_tensor');
  const mode = parseEnumOption(specOptionRow('mode'), options.mode ?? defaultMode(qdtype));

  const quantMin = options.quant_min === undefined ? info.min : integerOption('quant_min', options.quant_min);
  const quantMax = options.quant_max === undefined ? info.max : integerOption('quant_max', options.quant_max);
  if (quantMin < info.min || quantMax > info.max) {
    throw new QuantdError('QUANT_RANGE_INVALID', {
      detail: `[${quantMin}, ${quantMax}] is outside ${qdtype}'s range [${info.min}, ${info.max}]; quant_min/quant_max may narrow the range, never widen it`,
    });
  }
  if (quantMin >= quantMax) {
    throw new QuantdError('QUANT_RANGE_INVALID', {
      detail: `quant_min (${quantMin}) must be smaller than quant_max (${quantMax})`,
    });
  }

  let eps = FLOAT32_EPS;
  if (options.eps !== undefined) {
    const raw = parseNumberOption(specOptionRow('eps'), options.eps);
    eps = fround(raw);
    if (!(eps >= FLOAT32_MIN_NORMAL) || !Number.isFinite(eps)) {
      throw new QuantdError('EPS_INVALID', { value: String(options.eps) });
    }
  }

  let axis: number | null = null;
  if (options.axis !== undefined) {
    if (scheme !== 'per_channel') {
      throw new QuantdError('OPTION_INVALID', {
        option: 'axis',
        detail: `applies to per_channel only, not ${scheme}`,
        value: String(options.axis),
      });
    }
    axis = integerOption('axis', options.axis);
  } else if (scheme === 'per_channel') {
    axis = 0;
  }

  let groupSize: number | null = null;
  if (options.group_size !== undefined) {
    if (scheme !== 'per_group') {
      throw new QuantdError('OPTION_INVALID', {
        option: 'group_size',
        detail: `applies to per_group only, not ${scheme}`,
        value: String(options.group_size),
      });
    }
    groupSize = integerOption('group_size', options.group_size);
    if (groupSize < 2) {
      throw new QuantdError('OPTION_INVALID', {
        option: 'group_size',
        detail: 'must be at least 2 (as torch requires)',
        value: String(options.group_size),
      });
    }
  } else if (scheme === 'per_group') {
    groupSize = DEFAULT_GROUP_SIZE;
  }

  const rangeSearch = parseEnumOption(specOptionRow('range_search'), options.range_search ?? 'minmax');

  const spec: QuantSpec = {
    qdtype,
    scheme,
    mode,
    axis,
    groupSize,
    quantMin,
    quantMax,
    customRange: quantMin !== info.min || quantMax !== info.max,
    eps,
    rangeSearch,
  };
  checkModeFits(spec);
  return spec;
}

/** Which mode goes with which scheme and qdtype: the combinations torch defines, and no others. */
function checkModeFits(spec: QuantSpec): void {
  const { qdtype, scheme, mode } = spec;
  const info = QDTYPE_INFO[qdtype];
  const fail = (detail: string): never => {
    throw new QuantdError('MODE_UNSUPPORTED', { detail });
  };
  if (info.float8 && mode !== 'symmetric') {
    fail(`${qdtype} is quantized symmetrically (zero point 0); mode ${mode} does not apply`);
  }
  if (mode === 'float_qparams' && scheme !== 'per_channel') {
    fail(`mode float_qparams is defined for per_channel only, not ${scheme}`);
  }
  if (scheme === 'per_token' && mode === 'symmetric' && !info.signed) {
    fail(`symmetric per_token needs a signed qdtype; ${qdtype} is unsigned`);
  }
  if (spec.rangeSearch === 'greedy' && (info.bits > 4 || info.float8)) {
    fail(
      `range_search greedy is torch's 2/4-bit search (choose_qparams_optimized); ${qdtype} is ${info.bits}-bit`,
    );
  }
  if (spec.rangeSearch === 'greedy' && scheme === 'per_token') {
    fail('range_search greedy applies to per_tensor, per_channel and per_group');
  }
}

/** The zero point symmetric mode uses: 0 for signed types, the midpoint for unsigned ones. */
export function symmetricZeroPoint(spec: QuantSpec): number {
  const info = QDTYPE_INFO[spec.qdtype];
  if (info.signed) return 0;
  // torch: 128 for uint8, or the down-rounded midpoint when the range is customised.
  if (spec.customRange) return Math.floor((spec.quantMin + spec.quantMax) / 2);
  return 2 ** (info.bits - 1);
}

/** Whether zero points are float (float_qparams, per_token affine) or int32. */
export function hasFloatZeroPoint(spec: Pick<QuantSpec, 'scheme' | 'mode'>): boolean {
  return spec.mode === 'float_qparams' || (spec.scheme === 'per_token' && spec.mode === 'affine');
}

/** Options in the snake_case form the metadata and the HTTP query use (round-trips parseSpec). */
export function specToOptions(spec: QuantSpec): Required<Omit<SpecOptions, 'axis' | 'group_size'>> & {
  axis: number | null;
  group_size: number | null;
} {
  return {
    qdtype: spec.qdtype,
    scheme: spec.scheme,
    mode: spec.mode,
    axis: spec.axis,
    group_size: spec.groupSize,
    quant_min: spec.quantMin,
    quant_max: spec.quantMax,
    eps: spec.eps,
    range_search: spec.rangeSearch,
  };
}
