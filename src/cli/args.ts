/**
 * Command-line parsing: node's util.parseArgs in strict mode, with the one adjustment numeric
 * options need (`--quant-min -8` is read as a value, not as an unknown flag). Every mistake is a
 * USAGE error, which the CLI prints as `error USAGE: ...` and exits 2.
 */
import { parseArgs } from 'node:util';
import type { SpecOptions } from '../core/index.js';
import { QuantdError } from '../errors/index.js';

type OptionConfig = { type: 'string' | 'boolean'; short?: string; multiple?: boolean };

const SPEC_OPTIONS: Record<string, OptionConfig> = {
  qdtype: { type: 'string' },
  scheme: { type: 'string' },
  mode: { type: 'string' },
  axis: { type: 'string' },
  'group-size': { type: 'string' },
  'quant-min': { type: 'string' },
  'quant-max': { type: 'string' },
  eps: { type: 'string' },
  'range-search': { type: 'string' },
  include: { type: 'string', multiple: true },
  exclude: { type: 'string', multiple: true },
};

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
  recipe: { type: 'string' },
  rule: { type: 'string', multiple: true },
  skip: { type: 'string', multiple: true },
  'min-size': { type: 'string' },
  'keep-1d': { type: 'boolean' },
  report: { type: 'string' },
};

const TRANSFORM_OPTIONS = { ...SPEC_OPTIONS, ...OUTPUT_OPTIONS, ...RECIPE_OPTIONS };

export const COMMAND_OPTIONS: Record<string, Record<string, OptionConfig>> = {
  quantize: { ...TRANSFORM_OPTIONS, layout: { type: 'string' } },
  qparams: TRANSFORM_OPTIONS,
  'fake-quantize': { ...TRANSFORM_OPTIONS, dtype: { type: 'string' } },
  dequantize: { ...OUTPUT_OPTIONS, dtype: { type: 'string' } },
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
  const str = (key: string): string | undefined => values[key] as string | undefined;
  return {
    qdtype: str('qdtype'),
    scheme: str('scheme'),
    mode: str('mode'),
    axis: str('axis'),
    group_size: str('group-size'),
    quant_min: str('quant-min'),
    quant_max: str('quant-max'),
    eps: str('eps'),
    range_search: str('range-search'),
  };
}

export const USAGE = `quantd — quantize float tensors and safetensors models, bit-exact with PyTorch

usage:
  quantd quantize      IN.safetensors -o OUT.safetensors [spec options] [--include GLOB] [--exclude GLOB]
  quantd quantize      MODEL -o OUT --recipe recipe.json [recipe options]   (MODEL: a file, a shard index or a directory)
  quantd quantize      MODEL.safetensors -o OUT --layout NAME[:key=value,...]   (GGUF, GPTQ, AWQ, NF4/FP4; see below)
  quantd dequantize    IN -o OUT.safetensors [--dtype float32|float16|bfloat16]   (IN: a qtensor file, or a layout's file)
  quantd fake-quantize IN.safetensors -o OUT.safetensors [spec options] [--dtype ...]   (writes NAME, NAME.mask)
  quantd qparams       IN.safetensors -o OUT.safetensors [spec options]               (writes NAME.scale, NAME.zero_point)
  quantd inspect       FILE [--json] [--verify]   (--verify: check the data SHA-256 the file records)
  quantd serve         (HTTP + gRPC server)

spec options:
  --qdtype      int8 (default) | uint8 | int16 | int32 | int4 | uint4 | int2 | uint2 | float8_e4m3fn | float8_e5m2
  --scheme      per_tensor (default) | per_channel | per_token | per_group
  --mode        affine (default; symmetric for fp8) | symmetric | float_qparams (per_channel only)
  --axis N      per_channel axis (default 0; negative counts from the end)
  --group-size N  per_group group size along the last dimension (default 128)
  --quant-min N, --quant-max N   narrow the qdtype's range
  --eps X       smallest scale chosen (default float32 epsilon, 2^-23)
  --range-search minmax (default) | greedy   (torch's choose_qparams_optimized, 2/4-bit)
  --include GLOB, --exclude GLOB  choose tensors by name (repeatable); others pass through

recipe options (whole models; the spec options above become the recipe's default):
  --recipe FILE       JSON: {"default": {spec}, "rules": [{"glob"|"regex": ..., "skip": true | spec}], "min_size", "skip_1d"}
  --rule PAT:SPEC     a rule, before the recipe's: '*.mlp.*:qdtype=int4,scheme=per_group,group_size=128'
                      or '*.embed_tokens.*:skip'; PAT starting with re: is a regex (repeatable)
  --skip GLOB         pass these tensors through (repeatable)
  --min-size N        pass tensors of fewer than N elements through (default 0)
  --keep-1d           quantize 1-D tensors too (norms and biases pass through by default)
  --report FILE       the quality report (JSON; recipe runs write OUT.report.json by default)

run options:
  --concurrency N     tensors processed at once (default: CPU cores)
  --memory SIZE       bytes tensors in flight may hold together, e.g. 2G (default: max(256M, largest tensor))
  --no-progress       no progress bar / progress lines on stderr
  --remote URL        run on a quantd server (its jobs API) instead of in this process
  -q, --quiet         no summary line

Qparams already in the input (NAME.scale, NAME.zero_point) are used instead of being chosen.
On bad input quantd prints "error CODE: message" and exits 2.`;
