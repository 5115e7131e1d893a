/**
 * What the GPTQ, AWQ and bitsandbytes layouts share: which tensors are quantized (the linear
 * projections of a llama-like decoder), option parsing, the streaming driver (read one input
 * tensor or one group of tensors, write its outputs, next; one atomic SafetensorsFileWriter whose
 * plan is fixed up front from the input header) and header inspection for detect().
 */
import { closeSync, openSync, readSync } from 'node:fs';

import { floatDTypeOfSt, type FloatDType, type StDType } from '../../core/dtypes.js';
import { bytesOf, toFloat32, typedView } from '../../core/tensor.js';
import { QuantdError, shapeText } from '../../errors/index.js';
import { SafetensorsFileReader, SafetensorsFileWriter } from '../../format/safetensors-file.js';
import { DEFAULT_HEADER_LIMIT, type TensorEntry, type TensorPlan } from '../../format/safetensors.js';
import type { Progress } from '../model.js';
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

export function float32Of(entry: TensorEntry, data: Uint8Array): Float32Array {
  return toFloat32(data, floatDType(entry));
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
  /** The bytes of each output, in `outputs` order, from the bytes of each input. */
  produce(data: readonly Uint8Array[]): readonly Uint8Array[];
}

/** A job that copies one tensor unchanged. */
export function passThrough(entry: TensorEntry): Job {
  return {
    inputs: [entry],
    outputs: [{ name: entry.name, dtype: entry.dtype, shape: entry.shape }],
    produce: (data) => data,
  };
}

function checkAborted(signal: AbortSignal | undefined): void {
  if (!signal?.aborted) return;
  const reason: unknown = signal.reason;
  if (reason instanceof QuantdError) throw reason;
  throw new QuantdError('CANCELLED', { detail: '' });
}

/**
 * Writes the jobs' outputs to `output` (atomically: a temporary file renamed on commit), one job
 * in memory at a time. Output names must be unique (NAME_COLLISION otherwise).
 */
export async function runJobs(
  reader: SafetensorsFileReader,
  output: string,
  jobs: readonly Job[],
  metadata: Readonly<Record<string, string>>,
  hooks: { readonly onProgress?: (p: Progress) => void; readonly signal?: AbortSignal } = {},
): Promise<number> {
  const plan = jobs.flatMap((j) => j.outputs);
  const seen = new Set<string>();
  for (const t of plan) {
    if (seen.has(t.name)) throw new QuantdError('NAME_COLLISION', { source: reader.path, tensor: t.name });
    seen.add(t.name);
  }
  checkAborted(hooks.signal);
  const writer = await SafetensorsFileWriter.create(output, plan, metadata);
  const bytesTotal = jobs.reduce((a, j) => a + j.inputs.reduce((b, e) => b + e.end - e.begin, 0), 0);
  let bytesDone = 0;
  try {
    for (const [k, job] of jobs.entries()) {
      checkAborted(hooks.signal);
      const data: Uint8Array[] = [];
      for (const entry of job.inputs) data.push(await reader.read(entry));
      const outputs = job.produce(data);
      for (const [i, t] of job.outputs.entries()) await writer.write(t.name, outputs[i]!);
      bytesDone += job.inputs.reduce((b, e) => b + e.end - e.begin, 0);
      hooks.onProgress?.({
        tensorsDone: k + 1,
        tensorsTotal: jobs.length,
        bytesDone,
        bytesTotal,
        tensor: job.inputs[0]?.name ?? '',
      });
    }
    checkAborted(hooks.signal);
    await writer.commit();
  } catch (err) {
    await writer.abort();
    throw err;
  }
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

export const int32Bytes = (a: Int32Array): Uint8Array => bytesOf(a);
export const uint16Bytes = (a: Uint16Array): Uint8Array => bytesOf(a);

export function int32View(bytes: Uint8Array): Int32Array {
  return typedView(Int32Array, bytes);
}

export function float32Bytes(a: Float32Array): Uint8Array {
  return bytesOf(a);
}

/** A malformed file of an interop layout (a companion missing, a dtype or shape wrong). */
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
 * rest of the header from `path` when `head` is shorter; null for anything that is not a
 * safetensors header. Never throws: detect() must only answer yes or no.
 */
export function headerTensors(path: string, head: Uint8Array): Map<string, HeaderTensor> | null {
  try {
    if (head.length < 8) return null;
    const n = new DataView(head.buffer, head.byteOffset, 8).getBigUint64(0, true);
    if (n < 2n || n > BigInt(DEFAULT_HEADER_LIMIT)) return null;
    const length = Number(n);
    let json: Uint8Array;
    if (head.length >= 8 + length) {
      json = head.subarray(8, 8 + length);
    } else {
      json = new Uint8Array(length);
      const fd = openSync(path, 'r');
      try {
        let done = 0;
        while (done < length) {
          const read = readSync(fd, json, done, length - done, 8 + done);
          if (read === 0) return null;
          done += read;
        }
      } finally {
        closeSync(fd);
      }
    }
    const parsed: unknown = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(json));
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return null;
    const out = new Map<string, HeaderTensor>();
    for (const [name, value] of Object.entries(parsed as Record<string, unknown>)) {
      if (name === '__metadata__') continue;
      const v = value as { dtype?: unknown; shape?: unknown } | null;
      if (typeof v?.dtype !== 'string' || !Array.isArray(v.shape)) return null;
      out.set(name, { dtype: v.dtype, shape: v.shape as number[] });
    }
    return out;
  } catch {
    return null;
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
