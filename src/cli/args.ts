/**
 * Command-line parsing: node's util.parseArgs in strict mode, with the one adjustment numeric
 * options need (`--quant-min -8` is read as a value, not as an unknown flag). Every mistake is a
 * USAGE error, which the CLI prints as `error USAGE: ...` and exits 2.
 */
import { parseArgs } from 'node:util';
import { SPEC_OPTION_ROWS, flagKey, type OptionRow, type SpecOptions } from '../core/index.js';
import { QuantdError } from '../errors/index.js';
import { nearest } from './suggest.js';
import { OUTPUT_DTYPE_ROW, RECIPE_OPTION_ROWS, SELECTION_OPTION_ROWS } from '../service/index.js';

type OptionConfig = { type: 'string' | 'boolean'; short?: string; multiple?: boolean };

/** parseArgs' configuration of table rows: flags take a value, except booleans; lists repeat. */
function flagsOf(rows: readonly OptionRow[]): Record<string, OptionConfig> {
  return Object.fromEntries(
    rows.map((row) => [
      flagKey(row),
      row.kind === 'boolean'
        ? { type: 'boolean' }
        : { type: 'string', ...(row.kind === 'strings' && { multiple: true }) },
    ]),
  );
}

const SPEC_OPTIONS = flagsOf([...SPEC_OPTION_ROWS, ...SELECTION_OPTION_ROWS]);
const DTYPE_OPTION = flagsOf([OUTPUT_DTYPE_ROW]);

const OUTPUT_OPTIONS: Record<string, OptionConfig> = {
  output: { type: 'string', short: 'o' },
  quiet: { type: 'boolean', short: 'q' },
  'no-progress': { type: 'boolean' },
  force: { type: 'boolean' },
  remote: { type: 'string' },
  'keep-job': { type: 'boolean' },
  concurrency: { type: 'string' },
  memory: { type: 'string' },
};

/** Whole-model runs: a recipe instead of one spec for all, and the quality report. */
const RECIPE_OPTIONS: Record<string, OptionConfig> = {
  ...flagsOf(RECIPE_OPTION_ROWS),
  report: { type: 'string' },
};

const TRANSFORM_OPTIONS = { ...SPEC_OPTIONS, ...OUTPUT_OPTIONS, ...RECIPE_OPTIONS };

export const COMMAND_OPTIONS: Record<string, Record<string, OptionConfig>> = {
  quantize: {
    ...TRANSFORM_OPTIONS,
    layout: { type: 'string' },
    imatrix: { type: 'string' },
    calibration: { type: 'string' },
  },
  qparams: TRANSFORM_OPTIONS,
  'fake-quantize': { ...TRANSFORM_OPTIONS, ...DTYPE_OPTION },
  dequantize: { ...OUTPUT_OPTIONS, ...DTYPE_OPTION },
  inspect: { json: { type: 'boolean' }, verify: { type: 'boolean' } },
  calibrate: {
    output: { type: 'string', short: 'o' },
    observers: { type: 'string' },
    resume: { type: 'string' },
    'save-state': { type: 'string' },
    statistics: { type: 'string' },
    force: { type: 'boolean' },
    quiet: { type: 'boolean', short: 'q' },
    'no-progress': { type: 'boolean' },
  },
  eval: {
    reference: { type: 'string' },
    text: { type: 'string' },
    'seq-len': { type: 'string' },
    windows: { type: 'string' },
    'layer-windows': { type: 'string' },
    threads: { type: 'string' },
    report: { type: 'string' },
    json: { type: 'boolean' },
    quiet: { type: 'boolean', short: 'q' },
    'no-progress': { type: 'boolean' },
  },
  serve: {},
};

export interface ParsedCommand {
  readonly command: string;
  readonly positionals: string[];
  readonly values: Record<string, string | boolean | string[] | undefined>;
}

const NEGATIVE_NUMBER = /^-(\d|\.\d)/;

/** Joins `--opt -8` into `--opt=-8` for string options, so negative numbers parse as values. */
function joinNegativeValues(args: readonly string[], options: Record<string, OptionConfig>): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    const next = args[i + 1];
    const name = arg.startsWith('--') ? arg.slice(2) : undefined;
    if (name && options[name]?.type === 'string' && next !== undefined && NEGATIVE_NUMBER.test(next)) {
      out.push(`${arg}=${next}`);
      i++;
    } else {
      out.push(arg);
    }
  }
  return out;
}

/** The option parseArgs did not know (`--qdtpye`, `-x`), from its error; undefined for other errors. */
function unknownOption(err: unknown): string | undefined {
  if ((err as NodeJS.ErrnoException).code !== 'ERR_PARSE_ARGS_UNKNOWN_OPTION') return undefined;
  return /Unknown option '([^']+)'/.exec((err as Error).message)?.[1];
}

/** `unknown option --qdtpye; did you mean --qdtype?`, or where to find the options. */
function unknownOptionError(command: string, option: string, known: readonly string[]): QuantdError {
  const typed = option.replace(/^-+/, '');
  const guess = option.startsWith('--') ? nearest(typed, [...known, 'help']) : undefined;
  const hint =
    guess !== undefined ? `did you mean --${guess}?` : `quantd ${command} --help lists its options`;
  return new QuantdError('USAGE', { detail: `quantd ${command}: unknown option ${option}; ${hint}` });
}

export function parseCommand(command: string, args: readonly string[]): ParsedCommand {
  const options = COMMAND_OPTIONS[command];
  if (!options) throw new QuantdError('USAGE', { detail: `unknown command ${command}; run quantd --help` });
  try {
    const { values, positionals } = parseArgs({
      args: joinNegativeValues(args, options),
      options: { ...options, help: { type: 'boolean', short: 'h' } },
      allowPositionals: true,
      strict: true,
    });
    return { command, positionals, values: values as ParsedCommand['values'] };
  } catch (err) {
    const unknown = unknownOption(err);
    if (unknown !== undefined) throw unknownOptionError(command, unknown, Object.keys(options));
    const message = (err as Error).message.split('\n')[0]!;
    throw new QuantdError('USAGE', { detail: `quantd ${command}: ${message}` });
  }
}

/** The spec options of a parsed command, in the snake_case form parseSpec takes. */
export function specOptionsOf(values: ParsedCommand['values']): SpecOptions {
  return Object.fromEntries(
    SPEC_OPTION_ROWS.map((row) => [row.name, values[flagKey(row)] as string | undefined]),
  ) as SpecOptions;
}
