/**
 * What the GPTQ, AWQ, bitsandbytes and ONNX layouts share: which tensors are quantized (the
 * linear projections of a llama-like decoder), option parsing, jobs over a safetensors input
 * written into one atomic SafetensorsFileWriter whose plan is fixed up front from the input
 * header (run by ./run-jobs.ts), and header inspection for detect().
 */
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';

import { ST_DTYPE_SIZE, floatDTypeOfSt, type FloatDType, type StDType } from '../../core/dtypes.js';
import { QuantdError, shapeText, throwIfAborted } from '../../errors/index.js';
import type { EncoderCall } from '../../kernels/encoders.js';
import type { StatsOutputError } from '../../core/stats-error.js';
import { SafetensorsFileReader, SafetensorsFileWriter } from '../../format/safetensors-file.js';
import {
  parseHeader,
  readHeaderLength,
  type TensorEntry,
  type TensorPlan,
} from '../../format/safetensors.js';
import { runEncodeJobs, type JobSource, type LayoutHooks } from './run-jobs.js';
import type { LayoutOptions } from './types.js';

/**
 * The weights these layouts quantize: 2-D `*.weight` of the linear projections of a llama-like
 * decoder layer (the modules AutoGPTQ's `inside_layer_modules`, AutoAWQ's `get_named_linears` and
 * transformers' bitsandbytes replacement quantize in llama, mistral, qwen2 ...). Embeddings,
 * lm_head, norms, biases and buffers pass through.
 */
export const LINEAR_WEIGHT = /\.(?:self_attn\.(?:q|k|v|o)_proj|mlp\.(?:gate|up|down)_proj)\.weight$/;

export function isLinearWeight(entry: TensorEntry): boolean {
  return LINEAR_WEIGHT.test(entry.name) && entry.shape.length === 2;
}

/** No tensor of the input is a linear projection weight. */
export function noLinear(): QuantdError {
  return new QuantdError('NO_TENSOR_SELECTED', {
    detail:
      'no 2-D linear projection weight named *.self_attn.{q,k,v,o}_proj.weight or *.mlp.{gate,up,down}_proj.weight',
  });
}

/** `model.layers.0.mlp.up_proj.weight` → `model.layers.0.mlp.up_proj`. */
export function moduleOf(name: string, suffix = '.weight'): string {
  return name.slice(0, name.length - suffix.length);
}

/** The float dtype of a tensor to be quantized, or INPUT_DTYPE_UNSUPPORTED. */
export function floatDType(entry: TensorEntry): FloatDType {
  const dtype = floatDTypeOfSt(entry.dtype);
  if (dtype === undefined) {
    throw new QuantdError('INPUT_DTYPE_UNSUPPORTED', { tensor: entry.name, dtype: entry.dtype });
  }
  return dtype;
}

/** Rejects options the layout does not take; returns the given ones (undefined dropped). */
export function checkOptions(
  layout: string,
  known: Readonly<Record<string, string>>,
  options: LayoutOptions,
): Record<string, string> {
  const given: Record<string, string> = {};
  for (const [key, value] of Object.entries(options)) {
    if (value === undefined) continue;
    if (!Object.hasOwn(known, key)) {
      throw new QuantdError('OPTION_INVALID', {
        option: key,
        detail: `is not an option of the ${layout} layout (its options: ${Object.keys(known).join(', ')})`,
        value,
      });
    }
    given[key] = value;
  }
  return given;
}

/**
 * Runs a layout's option parser; an OPTION_INVALID it throws names the option as LAYOUT:key
 * (`gguf:type`), the way the user wrote it in `--layout gguf:type=...` or `layout=` — not as a
 * command-line flag of its own.
 */
export function inLayout<T>(layout: string, parse: () => T): T {
  try {
    return parse();
  } catch (err) {
    const option = err instanceof QuantdError ? err.params['option'] : undefined;
    if (
      err instanceof QuantdError &&
      err.code === 'OPTION_INVALID' &&
      typeof option === 'string' &&
      !option.includes(':')
    ) {
      throw new QuantdError('OPTION_INVALID', { ...err.params, option: `${layout}:${option}` });
    }
    throw err;
  }
}

export function intOption(
  name: string,
  value: string | undefined,
  fallback: number,
  allowed: (n: number) => boolean,
  expected: string,
): number {
  if (value === undefined) return fallback;
  const n = /^-?\d+$/.test(value.trim()) ? Number(value.trim()) : NaN;
  if (!Number.isSafeInteger(n) || !allowed(n)) {
    throw new QuantdError('OPTION_INVALID', { option: name, detail: `must be ${expected}`, value });
  }
  return n;
}

export function boolOption(name: string, value: string | undefined, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  const v = value.trim().toLowerCase();
  if (v === 'true' || v === '1') return true;
  if (v === 'false' || v === '0') return false;
  throw new QuantdError('OPTION_INVALID', { option: name, detail: 'must be true or false', value });
}

/** One unit of work: some input tensors (in file order) become some output tensors. */
export interface Job {
  readonly inputs: readonly TensorEntry[];
  readonly outputs: readonly TensorPlan[];
  /** How (src/kernels/encoders.ts); none (and no prepare): the one input is copied through. */
  readonly call?: EncoderCall;
  /** Instead of call: the call made when the job runs, from data read then (a layer's statistics). */
  readonly prepare?: () => Promise<EncoderCall>;
  /** Bytes the prepared call holds beside the inputs. */
  readonly prepareBytes?: number;
  /** Receives the encoder's remarks. */
  readonly onNotes?: (notes: readonly string[]) => void;
  /** Receives the layer's output error on the calibration tokens (gptq, awq with calibration). */
  readonly onOutputError?: (error: StatsOutputError) => void;
}

/** A job that copies one tensor unchanged. */
export function passThrough(entry: TensorEntry): Job {
  return { inputs: [entry], outputs: [{ name: entry.name, dtype: entry.dtype, shape: entry.shape }] };
}

export const planBytes = (t: TensorPlan): number =>
  t.shape.reduce((n, d) => n * d, 1) * ST_DTYPE_SIZE[t.dtype];

export const safetensorsSource = (reader: SafetensorsFileReader): JobSource<TensorEntry> => ({
  read: (entry, shared, allocate) => reader.read(entry, shared, allocate),
  readRange: (entry, begin, end, shared, allocate) =>
    reader.read({ ...entry, begin: entry.begin + begin, end: entry.begin + end }, shared, allocate),
  size: (entry) => entry.end - entry.begin,
});

/**
 * Writes the jobs' outputs to `output` (atomically: a temporary file renamed on commit), through
 * the layouts' streaming executor (./run-jobs.ts). Output names must be unique (NAME_COLLISION
 * otherwise).
 */
export async function runJobs(
  reader: SafetensorsFileReader,
  output: string,
  jobs: readonly Job[],
  metadata: Readonly<Record<string, string>>,
  hooks: LayoutHooks = {},
): Promise<number> {
  const plan = jobs.flatMap((j) => j.outputs);
  const seen = new Set<string>();
  for (const t of plan) {
    if (seen.has(t.name)) throw new QuantdError('NAME_COLLISION', { source: reader.path, tensor: t.name });
    seen.add(t.name);
  }
  throwIfAborted(hooks.signal);
  const writer = await SafetensorsFileWriter.create(output, plan, metadata);
  await runEncodeJobs(
    safetensorsSource(reader),
    jobs.map((j) => ({
      inputs: j.inputs,
      outputs: j.outputs.map((t) => ({ name: t.name, bytes: planBytes(t) })),
      ...(j.call && { call: j.call }),
      ...(j.prepare && { prepare: j.prepare, prepareBytes: j.prepareBytes ?? 0 }),
      ...(j.onNotes && { onNotes: j.onNotes }),
      ...(j.onOutputError && { onOutputError: j.onOutputError }),
      label: j.inputs[0]?.name ?? '',
    })),
    writer,
    hooks,
  );
  return plan.length;
}

/** Opens `input`, runs `f`, closes it. */
export async function withReader<T>(input: string, f: (r: SafetensorsFileReader) => Promise<T>): Promise<T> {
  const reader = await SafetensorsFileReader.open(input);
  try {
    return await f(reader);
  } finally {
    await reader.close();
  }
}

/** Metadata of every file these layouts write: transformers refuses safetensors without format "pt". */
export function ptMetadata(extra: Readonly<Record<string, string>> = {}): Record<string, string> {
  return { format: 'pt', ...extra };
}

/** A malformed file of an interop layout (a companion missing, a dtype or shape wrong). */
/** The bytes a file's tensors take together (what a quantized weight costs on disk). */
export const storedBytes = (entries: readonly TensorEntry[]): number =>
  entries.reduce((n, e) => n + e.end - e.begin, 0);

export function layoutInvalid(source: string, tensor: string, detail: string): QuantdError {
  return new QuantdError('LAYOUT_INVALID', { source, tensor, detail });
}

/** Requires `entry` to have `dtype` (one of) and rank `rank`. */
export function expectTensor(
  source: string,
  entry: TensorEntry | undefined,
  name: string,
  dtypes: readonly StDType[],
  rank: number | null,
): TensorEntry {
  if (entry === undefined) throw layoutInvalid(source, name, 'is missing');
  if (!dtypes.includes(entry.dtype)) {
    throw layoutInvalid(source, name, `has dtype ${entry.dtype}, expected ${dtypes.join(' or ')}`);
  }
  if (rank !== null && entry.shape.length !== rank) {
    throw layoutInvalid(source, name, `has shape ${shapeText(entry.shape)}, expected rank ${rank}`);
  }
  return entry;
}

export interface HeaderTensor {
  readonly dtype: string;
  readonly shape: readonly number[];
}

/**
 * The tensors named in a safetensors header, from the file's first bytes (`head`), reading the
 * rest of the header from `path` when `head` is shorter (parsed and validated by the format's
 * own parser); null for anything that is not a valid safetensors header. Never throws:
 * detect() must only answer yes or no.
 */
export function headerTensors(path: string, head: Uint8Array): Map<string, HeaderTensor> | null {
  let fd: number | undefined;
  try {
    fd = openSync(path, 'r');
    const size = fstatSync(fd).size;
    const length = readHeaderLength(head, size, path);
    let json = head.subarray(8, 8 + length);
    if (json.length < length) {
      json = new Uint8Array(length);
      for (let done = 0; done < length;) {
        const read = readSync(fd, json, done, length - done, 8 + done);
        if (read === 0) return null;
        done += read;
      }
    }
    const header = parseHeader(json, size - 8 - length, path);
    return new Map(header.entries.map((e) => [e.name, { dtype: e.dtype, shape: e.shape }]));
  } catch {
    return null;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/** The dtype quantization_config.json should name for compute: the weights' one, if they share one. */
export function commonDType(dtypes: ReadonlySet<FloatDType>): FloatDType {
  return dtypes.size === 1 ? [...dtypes][0]! : 'float32';
}

/** Module names of the 2-D float `.weight` tensors a layout leaves unquantized. */
export function unquantizedModules(
  entries: readonly TensorEntry[],
  quantized: ReadonlySet<string>,
): string[] {
  return entries
    .filter(
      (e) =>
        e.name.endsWith('.weight') &&
        e.shape.length === 2 &&
        floatDTypeOfSt(e.dtype) !== undefined &&
        !quantized.has(e.name),
    )
    .map((e) => moduleOf(e.name));
}
