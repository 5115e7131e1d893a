/**
 * How every interop layout streams a model: the layout describes jobs (some input tensors in file
 * order, the outputs they become, and the encoder that makes them), and this runs them through
 * the one streaming scheduler (../ordered.ts): inputs read in order, encode tasks on the worker
 * pool (several at once within a memory budget), outputs written in order into the layout's
 * atomic output file, which is committed only when every job is written. Nothing heavier than
 * reading and writing runs on the calling thread when the encoding is the pool's.
 */
import { isQuantdError, throwIfAborted } from '../../errors/index.js';
import { BufferArena } from '../../kernels/arena.js';
import {
  referenceEncoding,
  type EncodeReply,
  type EncodeTask,
  type EncoderCall,
  type Encoding,
} from '../../kernels/encoders.js';
import { encodedByRows } from '../../kernels/ggml-rows.js';
import { mergeQuality } from '../../core/quality.js';
import { histogramOf } from '../../core/error-histogram.js';
import type { QualityStats } from '../../core/quality-stats.js';
import type { ErrorHistogram } from '../../core/error-histogram.js';
import type { StatsOutputError } from '../../core/stats-error.js';
import type { Progress } from '../model.js';
import { runInOrder } from '../ordered.js';
import { SLICE_BYTES, copyParts, sliceAllocator, type CopyPart } from '../slices.js';
import { sliceGgmlJob, type JobSlice } from './job-slices.js';

export interface EncodeJob<E> {
  /** The tensors read for this job, in file order. */
  readonly inputs: readonly E[];
  /** What it writes, in order: each output's name and exact byte size. */
  readonly outputs: ReadonlyArray<{ readonly name: string; readonly bytes: number }>;
  /** The encoder making outputs from inputs; none (and no prepare): the one input is copied through. */
  readonly call?: EncoderCall;
  /** Instead of call: a call made when the job runs, from data read then (a layer's statistics). */
  readonly prepare?: () => Promise<EncoderCall>;
  /** Bytes the prepared call holds beside the inputs (for the memory budget). */
  readonly prepareBytes?: number;
  /** Receives the encoder's remarks (for the layout's report). */
  readonly onNotes?: (notes: readonly string[]) => void;
  /** Receives the error measured when the call asked for it (`quality`), and its histogram. */
  readonly onQuality?: (quality: QualityStats, histogram?: ErrorHistogram) => void;
  /** Receives the layer's output error on the calibration tokens, when the encoder measured it. */
  readonly onOutputError?: (error: StatsOutputError) => void;
  /** The name progress reports for this job. */
  readonly label: string;
}

/** A buffer of `bytes` (a SharedArrayBuffer view when `shared`) that the caller recycles. */
export type Allocate = (bytes: number, shared: boolean) => Uint8Array;

export interface JobSource<E> {
  /** The bytes of a tensor (a SharedArrayBuffer view when `shared`), read into `allocate`'s buffer. */
  read(entry: E, shared: boolean, allocate: Allocate): Promise<Uint8Array>;
  /** Bytes [begin, end) of a tensor, likewise (a slice of a weight encoded by slices). */
  readRange?(entry: E, begin: number, end: number, shared: boolean, allocate: Allocate): Promise<Uint8Array>;
  /** The bytes a tensor occupies (for the memory budget and progress). */
  size(entry: E): number;
}

/** An output file being written: a temporary file that commit() renames into place. */
export interface JobSink {
  write(name: string, data: Uint8Array): Promise<void>;
  /** Writes an output in parts, in order (`last`: the part that completes it). */
  writePart?(name: string, data: Uint8Array, last: boolean): Promise<void>;
  commit(): Promise<void>;
  abort(): Promise<void>;
}

export interface LayoutHooks {
  readonly onProgress?: ((p: Progress) => void) | undefined;
  readonly signal?: AbortSignal | undefined;
  /** Where encode tasks run (default: the TypeScript reference on the calling thread). */
  readonly encoding?: Encoding | undefined;
  /**
   * Bytes jobs in flight may hold together (a larger job runs alone). Default: room for as many of
   * the largest job (or slice) as run at once, within DEFAULT_LAYOUT_BUDGET.
   */
  readonly memoryBudget?: number | undefined;
  /**
   * GGUF weights of more than twice this many bytes are read, encoded and written in slices of
   * about this size (default SLICE_BYTES); Infinity keeps every weight whole.
   */
  readonly sliceBytes?: number | undefined;
}

/** Jobs in flight hold at most this much by default: a few large weights of a 7B model at once. */
export const DEFAULT_LAYOUT_BUDGET = 1024 * 1024 * 1024;

/** The least budget: small jobs overlap whatever the largest. */
const MIN_LAYOUT_BUDGET = 32 * 1024 * 1024;

/**
 * What a job holds while it runs: its inputs, its outputs, and the encoder's float32 copy of the
 * inputs plus its own result arrays (at most about twice the input again). A GGUF type encoded
 * by its C kernel makes no float32 copy (src/kernels/ggml-rows.ts): its inputs and outputs only.
 */
function jobCost<E>(job: EncodeJob<E>, source: JobSource<E>, kernels: boolean): number {
  const inputs = job.inputs.reduce((n, e) => n + source.size(e), 0);
  const outputs = job.outputs.reduce((n, o) => n + o.bytes, 0);
  if (job.prepare !== undefined) return 3 * inputs + 2 * outputs + 2 * (job.prepareBytes ?? 0);
  if (job.call === undefined) return inputs;
  if (kernels && byRows(job.call)) return inputs + outputs;
  if (kernels && packedByRows(job.call)) return inputs + 2 * outputs; // src/kernels/packed-rows.ts
  return 3 * inputs + 2 * outputs;
}

/** A GGUF call that workers with kernels encode by rows (src/kernels/ggml-rows.ts). */
function byRows(call: EncoderCall): call is Extract<EncoderCall, { kind: 'ggml' }> {
  return call.kind === 'ggml' && encodedByRows(call);
}

/** GPTQ and AWQ round-to-nearest, which workers with kernels pack by chunks of rows. */
function packedByRows(call: EncoderCall): boolean {
  return (call.kind === 'gptq' || call.kind === 'awq') && call.calibration === undefined;
}

/** `data` itself, or (when `shared`) a copy in a SharedArrayBuffer for the pool's threads. */
export function sharedIf(shared: boolean, data: Uint8Array): Uint8Array {
  if (!shared || data.buffer instanceof SharedArrayBuffer) return data;
  const copy = allocate(data.byteLength, true);
  copy.set(data);
  return copy;
}

function allocate(bytes: number, shared: boolean): Uint8Array {
  return shared ? new Uint8Array(new SharedArrayBuffer(bytes)) : new Uint8Array(bytes);
}

/**
 * Buffers recycled across a run's jobs: a model's layers repeat the same tensor sizes, and a
 * fresh buffer costs a page fault per 4 KiB on first touch (on a 1 GiB bf16 checkpoint to Q8_0,
 * more system time than the kernels' own). Holds at most RECYCLED_BYTES beyond the jobs in flight.
 */
const RECYCLED_BYTES = 256 * 1024 * 1024;

/** A GGUF tensor at least this large is encoded in parts, one per thread of the pool. */
const SPLIT_BYTES = 8 * 1024 * 1024;

/**
 * One encode task, or, for a large GGUF tensor of a type with a C kernel, one per pool thread on
 * consecutive row ranges of the same shared buffers: the last weight of a model (the output
 * projection, the largest) no longer runs on one thread while the others wait. The parts' quality
 * sums add up in part order and their sampled errors join into the whole tensor's histogram.
 */
async function encodeInParts(
  encoding: Encoding,
  task: EncodeTask,
  signal?: AbortSignal,
): Promise<EncodeReply> {
  const { call } = task;
  const input = task.inputs[0]!;
  if (!byRows(call) || !encoding.kernels || encoding.parallelism < 2 || input.byteLength < SPLIT_BYTES) {
    return encoding.encode(task, signal);
  }
  const rows = input.byteLength / (call.dtype === 'float32' ? 4 : 2) / call.ne0;
  const parts = Math.min(encoding.parallelism, rows);
  const settled = await Promise.allSettled(
    Array.from({ length: parts }, (_, k) => {
      const first = Math.floor((k * rows) / parts);
      const part = { first, count: Math.floor(((k + 1) * rows) / parts) - first };
      return encoding.encode({ ...task, call: { ...call, part } }, signal);
    }),
  );
  // the error one whole-tensor task reports: its first non-finite value before any overflow
  const failures = settled.flatMap((r) => (r.status === 'rejected' ? [r.reason as unknown] : []));
  if (failures.length > 0) {
    throw failures.find((e) => isQuantdError(e) && e.code === 'INPUT_NOT_FINITE') ?? failures[0];
  }
  const replies = settled.map((r) => (r as PromiseFulfilledResult<EncodeReply>).value);
  if (call.quality !== true) return { notes: [] };
  const quality = replies.map((r) => r.quality!).reduce((a, b) => mergeQuality({ ...a }, b));
  const errors = Float64Array.from(replies.flatMap((r) => [...r.sampleErrors!]));
  return { notes: [], quality, histogram: histogramOf(errors) };
}

/** A unit of the scheduler: a whole job, or one slice of a weight encoded by slices (./job-slices.ts). */
interface Unit<E> {
  readonly job: EncodeJob<E>;
  readonly slice?: JobSlice;
  readonly part?: CopyPart;
}

/**
 * The jobs as units: a GGUF weight, or a tensor copied through, of more than twice `sliceBytes`
 * as its slices, when the source and the sink take them.
 */
function unitsOf<E>(
  jobs: readonly EncodeJob<E>[],
  source: JobSource<E>,
  sink: JobSink,
  encoding: Encoding,
  sliceBytes: number,
): Unit<E>[] {
  const slicing = encoding.kernels && source.readRange !== undefined && sink.writePart !== undefined;
  return jobs.flatMap((job): Unit<E>[] => {
    const one = job.inputs.length === 1 && job.outputs.length === 1 && job.prepare === undefined;
    if (!slicing || !one) return [{ job }];
    const bytes = source.size(job.inputs[0]!);
    if (job.call === undefined) {
      const parts = copyParts(bytes, sliceBytes);
      return parts ? parts.map((part) => ({ job, part })) : [{ job }];
    }
    const slices = sliceGgmlJob(job.call, bytes, job.outputs[0]!.bytes, sliceBytes);
    return slices ? slices.map((slice) => ({ job, slice })) : [{ job }];
  });
}

/** What a unit hands from its run to its finish: the outputs, and a slice's reply. */
interface UnitDone {
  readonly outputs: readonly Uint8Array[];
  readonly reply?: EncodeReply;
}

/**
 * Runs the jobs into `sink` and commits it; on any failure (or cancellation) the sink is
 * aborted, so no partial file is ever visible.
 */
export async function runEncodeJobs<E>(
  source: JobSource<E>,
  jobs: readonly EncodeJob<E>[],
  sink: JobSink,
  hooks: LayoutHooks = {},
): Promise<void> {
  const encoding = hooks.encoding ?? referenceEncoding;
  const bytesTotal = jobs.reduce((n, j) => n + j.inputs.reduce((b, e) => b + source.size(e), 0), 0);
  let bytesDone = 0;
  let jobsDone = 0;
  const arena = new BufferArena(RECYCLED_BYTES);
  const recycled: Allocate = (bytes, shared) => new Uint8Array(arena.take(bytes, shared), 0, bytes);
  // a slice's buffers are all of one size, whatever its rows, so that every one is recycled
  const sized = (buffer: number): Allocate => sliceAllocator(recycled, buffer)!;
  /** Bytes [begin, end) of a job's one input, into a recycled buffer of `buffer` bytes. */
  const readPart = (job: EncodeJob<E>, begin: number, end: number, shared: boolean, buffer: number) =>
    source.readRange!(job.inputs[0]!, begin, end, shared, sized(buffer));
  const units = unitsOf(jobs, source, sink, encoding, hooks.sliceBytes ?? SLICE_BYTES);
  const concurrency = encoding.parallelism + 1; // one more reads ahead while the workers encode
  const cost = (unit: Unit<E>): number => {
    if (unit.part) return unit.part.buffer;
    if (unit.slice) return unit.slice.inputBuffer + unit.slice.outputBuffer;
    return jobCost(unit.job, source, encoding.kernels);
  };
  // what the units in flight need, not more: the rest of a fixed budget only raised peak RSS
  // (a 7B-shaped checkpoint to GPTQ above 3 × its largest tensor + 256 MiB)
  let largest = 0; // a loop: spreading a model's units into Math.max overflows the stack
  for (const unit of units) largest = Math.max(largest, cost(unit));
  const budget = Math.min(DEFAULT_LAYOUT_BUDGET, Math.max(MIN_LAYOUT_BUDGET, concurrency * largest));

  /** Runs a whole job: reads its inputs, encodes them (in parts on the pool), returns its outputs. */
  const runJob = async (
    job: EncodeJob<E>,
    signal: AbortSignal | undefined,
  ): Promise<readonly Uint8Array[]> => {
    const encoded = job.call !== undefined || job.prepare !== undefined;
    const shared = encoded && encoding.shared;
    const inputs: Uint8Array[] = [];
    for (const e of job.inputs) inputs.push(await source.read(e, shared, recycled));
    const call = job.prepare ? await job.prepare() : job.call;
    if (call === undefined) return inputs;
    const outputs = job.outputs.map((o) => recycled(o.bytes, shared));
    const reply = await encodeInParts(encoding, { op: 'encode', call, inputs, outputs }, signal);
    // (only once the task is done: a cancelled one may still be reading its inputs)
    for (const input of inputs) arena.give(input);
    if (reply.notes.length > 0) job.onNotes?.(reply.notes);
    if (reply.quality !== undefined) job.onQuality?.(reply.quality, reply.histogram);
    if (reply.outputError !== undefined) job.onOutputError?.(reply.outputError);
    return outputs;
  };

  /**
   * Runs one slice of a weight. A non-finite value is already named at its index in the weight;
   * any other refusal (a block whose float16 scale overflows) is taken from the whole weight,
   * which reports a non-finite value anywhere before an overflow anywhere, as llama.cpp does.
   */
  const runSlice = async (
    job: EncodeJob<E>,
    slice: JobSlice,
    signal: AbortSignal | undefined,
  ): Promise<UnitDone> => {
    const shared = encoding.shared;
    const input = await readPart(job, slice.inputBegin, slice.inputEnd, shared, slice.inputBuffer);
    const output = sized(slice.outputBuffer)(slice.outputBytes, shared);
    let reply: EncodeReply;
    try {
      reply = await encoding.encode(
        { op: 'encode', call: slice.call, inputs: [input], outputs: [output] },
        signal,
      );
    } catch (err) {
      // its buffers are left to the collector: a cancelled task's thread may still be using them
      if (!isQuantdError(err) || signal?.aborted || err.code === 'INPUT_NOT_FINITE') throw err;
      await runJob({ ...job, onNotes: undefined, onQuality: undefined }, signal); // throws the weight's own error
      throw err;
    }
    arena.give(input);
    return { outputs: [output], reply };
  };

  try {
    await runInOrder<UnitDone>(
      {
        count: units.length,
        cost: (i) => cost(units[i]!),
        run: async (i, signal) => {
          const { job, slice, part } = units[i]!;
          if (part) return { outputs: [await readPart(job, part.begin, part.end, false, part.buffer)] };
          return slice ? runSlice(job, slice, signal) : { outputs: await runJob(job, signal) };
        },
        finish: async (i, { outputs, reply }) => {
          const { job, slice, part } = units[i]!;
          if (part) {
            await sink.writePart!(job.outputs[0]!.name, outputs[0]!, part.index === part.count - 1);
            arena.give(outputs[0]!);
            bytesDone += part.end - part.begin;
            if (part.index < part.count - 1) return;
          } else if (slice) {
            const last = slice.index === slice.count - 1;
            await sink.writePart!(job.outputs[0]!.name, outputs[0]!, last);
            arena.give(outputs[0]!);
            slice.sum.add(reply!);
            bytesDone += slice.inputEnd - slice.inputBegin;
            if (!last) return;
            if (slice.sum.notes.length > 0) job.onNotes?.(slice.sum.notes);
            const measured = slice.sum.measured();
            if (measured) job.onQuality?.(measured.quality, measured.histogram);
          } else {
            for (const [k, o] of job.outputs.entries()) await sink.write(o.name, outputs[k]!);
            for (const output of outputs) arena.give(output); // written: its buffer is free again
            bytesDone += job.inputs.reduce((b, e) => b + source.size(e), 0);
          }
          hooks.onProgress?.({
            tensorsDone: ++jobsDone,
            tensorsTotal: jobs.length,
            bytesDone,
            bytesTotal,
            tensor: job.label,
          });
        },
      },
      {
        concurrency,
        memoryBudget: hooks.memoryBudget ?? budget,
        signal: hooks.signal,
      },
    );
    throwIfAborted(hooks.signal);
    await sink.commit();
  } catch (err) {
    await sink.abort();
    throw err;
  }
}
