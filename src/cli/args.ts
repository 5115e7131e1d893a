/**
 * Command-line parsing: node's util.parseArgs in strict mode, with the one adjustment numeric
 * options need (`--quant-min -8` is read as a value, not as an unknown flag). Every mistake is a
 * USAGE error, which the CLI prints as `error USAGE: ...` and exits 2.
 */
import { parseArgs } from 'node:util';
import { SPEC_OPTION_ROWS, defaultTextOf, flagKey, type OptionRow, type SpecOptions } from '../core/index.js';
import { QuantdError } from '../errors/index.js';
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
  remote: { type: 'string' },
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
  quantize: { ...TRANSFORM_OPTIONS, layout: { type: 'string' } },
  qparams: TRANSFORM_OPTIONS,
  'fake-quantize': { ...TRANSFORM_OPTIONS, ...DTYPE_OPTION },
  dequantize: { ...OUTPUT_OPTIONS, ...DTYPE_OPTION },
  inspect: { json: { type: 'boolean' }, verify: { type: 'boolean' } },
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

/** The column where help text starts: after the longest `--flag PLACEHOLDER`. */
const HELP_COLUMN = 24;

/** A row's lines in `quantd --help`: flag, help and default, then the values an enum takes. */
function helpLines(row: OptionRow): string[] {
  const head = `  ${row.flag}${row.placeholder ? ` ${row.placeholder}` : ''}`.padEnd(HELP_COLUMN);
  const indent = ' '.repeat(HELP_COLUMN);
  // a flag is off unless given: its default goes without saying
  const defaultText = row.kind === 'boolean' ? undefined : defaultTextOf(row);
  const [first, ...more] = row.help.split('\n');
  const lines = [`${head}${first}${defaultText === undefined ? '' : ` (default ${defaultText})`}`];
  lines.push(...more.map((line) => `${indent}${line}`));
  if (row.values) lines.push(`${indent}${row.placeholder}: ${row.values.join(' | ')}`);
  return lines;
}

const optionHelp = (rows: readonly OptionRow[]): string => rows.flatMap(helpLines).join('\n');

const DTYPES = OUTPUT_DTYPE_ROW.values.join('|');

export const USAGE = `quantd — quantize float tensors and safetensors models, bit-exact with PyTorch

usage:
  quantd quantize      IN.safetensors -o OUT.safetensors [spec options] [--include GLOB] [--exclude GLOB]
  quantd quantize      MODEL -o OUT --recipe recipe.json [recipe options]   (MODEL: a file, a shard index or a directory)
  quantd quantize      MODEL.safetensors -o OUT --layout NAME[:key=value,...]   (GGUF, GPTQ, AWQ, NF4/FP4; see below)
  quantd dequantize    IN -o OUT.safetensors [--dtype ${DTYPES}]   (IN: a qtensor file, or a layout's file)
  quantd fake-quantize IN.safetensors -o OUT.safetensors [spec options] [--dtype ...]   (writes NAME, NAME.mask)
  quantd qparams       IN.safetensors -o OUT.safetensors [spec options]               (writes NAME.scale, NAME.zero_point)
  quantd inspect       FILE [--json] [--verify]   (--verify: check the data SHA-256 the file records)
  quantd serve         (HTTP + gRPC server)

spec options:
${optionHelp(SPEC_OPTION_ROWS)}
${optionHelp(SELECTION_OPTION_ROWS)}
${optionHelp([OUTPUT_DTYPE_ROW])}

recipe options (whole models; the spec options above become the recipe's default):
${optionHelp(RECIPE_OPTION_ROWS)}
  --report FILE         the quality report (JSON; recipe runs write OUT.report.json by default)

run options:
  --concurrency N       tensors processed at once (default: CPU cores)
  --memory SIZE         bytes tensors in flight may hold together, e.g. 2G (default: max(256M, largest tensor))
  --no-progress         no progress bar / progress lines on stderr
  --remote URL          run on a quantd server (its jobs API) instead of in this process
  -q, --quiet           no summary line

Qparams already in the input (NAME.scale, NAME.zero_point) are used instead of being chosen.
On bad input quantd prints "error CODE: message" and exits 2.`;
