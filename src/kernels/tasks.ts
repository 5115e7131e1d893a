/**
 * Kernel tasks: one kernel call on one range of a tensor, as a plain object that crosses a
 * worker boundary by structured clone. Arrays of a task running in a worker are views of
 * SharedArrayBuffers, so inputs are not copied and outputs land in place.
 *
 * A task whose input is float16 / bfloat16 (`half`: the CONVERT kind to float32) reads the
 * half-precision values themselves, so a bfloat16 checkpoint is never staged as a float32 copy in
 * memory. chooseQuantize (per_group, per_token, per_channel rows: what model runs do) hands them
 * to the kernel, which widens them in registers as it reads them. The other ops convert them a
 * cache-sized chunk at a time into a buffer of their thread and run the float32 kernel on each
 * chunk while it is in cache. The kernels accumulate across calls (min/max, quality statistics)
 * and take tensor indices, so chunked calls compute what one call over the range computes.
 */
import { addLinearStats } from '../core/linear-stats.js';
import { freshArrays, type ArrayMaker } from './small-arrays.js';
import { CODES, type ChooseArgs, type KernelModule, type LayoutArgs, type QuantArgs } from './module.js';

/** A task's input: float32 values, or float16 / bfloat16 bits with `half` their CONVERT kind. */
type Floats = Float32Array | Uint16Array;

export type KernelTask =
  | {
      readonly op: 'convert';
      readonly kind: number;
      readonly input: Uint16Array | Float32Array;
      readonly out: Float32Array | Uint16Array;
    }
  | {
      readonly op: 'minmax';
      readonly x: Floats;
      readonly half?: number;
      readonly start: number;
      readonly layout: LayoutArgs;
    }
  | {
      /** torch.histc's counting over the whole input, in one task (its float32 counts are sequential) */
      readonly op: 'histc';
      readonly x: Float32Array;
      readonly left: number;
      readonly right: number;
      readonly bins: number;
    }
  | {
      /**
       * a calibration batch added to a layer's statistics, written into `outHessian` /
       * `outAbsSum` (the caller's, shared with a pool: no copy of in² values crosses threads);
       * `hessian` / `absSum` are left unchanged; absent for statistics of no token yet, whose
       * out arrays must then be zero (fresh)
       */
      readonly op: 'linearStats';
      readonly hessian: Float64Array | null;
      readonly absSum: Float64Array | null;
      readonly k: number;
      readonly x: Float32Array;
      readonly outHessian: Float64Array;
      readonly outAbsSum: Float64Array;
    }
  | {
      readonly op: 'determine';
      readonly mins: Float32Array;
      readonly maxs: Float32Array;
      readonly choose: ChooseArgs;
    }
  | {
      readonly op: 'quantize';
      readonly x: Floats;
      readonly half?: number;
      readonly start: number;
      readonly layout: LayoutArgs;
      readonly scale: Float32Array;
      readonly zeroPoint: Float32Array;
      readonly quant: QuantArgs;
      readonly out: Uint8Array;
      /** Also measure the codes (TaskResult.stats), in the same pass. */
      readonly measure?: boolean;
    }
  | {
      readonly op: 'dequantize';
      readonly codes: Uint8Array;
      readonly kind: number;
      readonly start: number;
      readonly count: number;
      readonly layout: LayoutArgs;
      readonly scale: Float32Array;
      readonly zeroPoint: Float32Array;
      readonly out: Float32Array;
    }
  | {
      readonly op: 'fakeQuantize';
      readonly x: Floats;
      readonly half?: number;
      readonly start: number;
      readonly layout: LayoutArgs;
      readonly scale: Float32Array;
      readonly zeroPoint: Float32Array;
      readonly qmin: number;
      readonly qmax: number;
      readonly floatZeroPoint: boolean;
      readonly out: Float32Array;
      readonly mask: Uint8Array;
    }
  | {
      readonly op: 'quality';
      readonly x: Floats;
      readonly half?: number;
      readonly codes: Uint8Array;
      readonly start: number;
      readonly layout: LayoutArgs;
      readonly scale: Float32Array;
      readonly zeroPoint: Float32Array;
      readonly quant: QuantArgs;
    }
  | {
      readonly op: 'chooseQuantize';
      readonly x: Floats;
      readonly half?: number;
      readonly first: number;
      readonly unitSize: number;
      readonly choose: ChooseArgs;
      readonly quant: QuantArgs;
      readonly scale: Float32Array;
      readonly zeroPoint: Float64Array;
      readonly out: Uint8Array;
      /** Also measure the codes (TaskResult.stats), in the same pass. */
      readonly measure?: boolean;
    };

export interface TaskResult {
  /** qd_status */
  readonly status: number;
  /** The index the kernel rejected (element, or unit for RANGE_OVERFLOW); -1 when OK. */
  readonly bad: number;
  /** minmax: the range's per-unit minima and maxima. determine: scale and zero points. */
  readonly mins?: Float32Array;
  readonly maxs?: Float32Array;
  readonly scale?: Float32Array;
  readonly zeroPoint?: Float64Array;
  /** quality, and measured quantize / chooseQuantize: [Σerr², Σx², max|err|, clipped, count] of the range. */
  readonly stats?: Float64Array;
  /** histc: the counts */
  readonly hist?: Float32Array;
}

const ok: TaskResult = { status: 0, bad: -1 };

/**
 * Elements of a half-precision input converted at a time: 64 Ki float32 (256 KiB) stay in L2
 * beside their codes. A multiple of MEASURED_CHUNK and of every code packing.
 */
const HALF_CHUNK = 1 << 16;

/** This thread's conversion buffer (tasks run one at a time on a thread). */
let chunkBuffer = new Float32Array(0);

/** Bytes of the codes of n elements (a partial last byte counts: ranges end at the tensor's end). */
function codeBytes(codes: number, n: number): number {
  if (codes === CODES.int16) return n * 2;
  if (codes === CODES.int32) return n * 4;
  if (codes === CODES.int4 || codes === CODES.uint4) return Math.ceil(n / 2);
  if (codes === CODES.int2 || codes === CODES.uint2) return Math.ceil(n / 4);
  return n;
}

/**
 * Runs `call` over the task's input: at once for float32; for half precision, on consecutive
 * chunks of `chunk` elements converted to float32 (`offset`: the chunk's first element in the
 * input). Stops at the first failing status.
 */
function overInput(
  k: KernelModule,
  x: Floats,
  half: number | undefined,
  chunk: number,
  call: (values: Float32Array, offset: number) => number,
): number {
  if (half === undefined) return call(x as Float32Array, 0);
  for (let offset = 0; offset < x.length; offset += chunk) {
    const n = Math.min(chunk, x.length - offset);
    if (chunkBuffer.length < n) chunkBuffer = new Float32Array(Math.max(n, HALF_CHUNK));
    const values = chunkBuffer.subarray(0, n);
    k.convert(half, x.subarray(offset, offset + n), values);
    const status = call(values, offset);
    if (status !== 0) return status;
  }
  return 0;
}

/**
 * Runs one task; its result arrays come from `arrays` (small-arrays.ts: this thread's slab when
 * the result stays in it).
 */
export function runKernelTask(
  k: KernelModule,
  task: KernelTask,
  arrays: ArrayMaker = freshArrays,
): TaskResult {
  const bad = (status: number): number => (status === 0 ? -1 : k.lastBad());
  const done = (status: number): TaskResult => (status === 0 ? ok : { status, bad: bad(status) });
  // results with arrays are built field by field: a spread of done() is a slow path of V8's (a
  // small tensor's op runs several tasks, and this is a measurable part of it)
  switch (task.op) {
    case 'convert':
      k.convert(task.kind, task.input, task.out);
      return ok;
    case 'minmax': {
      const mins = arrays(Float32Array, task.layout.channels).fill(Infinity);
      const maxs = arrays(Float32Array, task.layout.channels).fill(-Infinity);
      const status = overInput(k, task.x, task.half, HALF_CHUNK, (x, at) =>
        k.minmax(x, task.start + at, task.layout, mins, maxs),
      );
      return { status, bad: bad(status), mins, maxs };
    }
    case 'histc': {
      const hist = new Float32Array(task.bins);
      const status = k.histc(task.x, task.left, task.right, hist);
      return { status, bad: bad(status), hist };
    }
    case 'linearStats': {
      const hessian = task.outHessian;
      const absSum = task.outAbsSum;
      // absent: statistics of no token yet, whose out arrays are fresh (zero) already
      if (task.hessian) hessian.set(task.hessian);
      if (task.absSum) absSum.set(task.absSum);
      if (k.linearStatsAdd) return done(k.linearStatsAdd(hessian, absSum, task.k, task.x));
      const bad = task.x.findIndex((v) => !Number.isFinite(v));
      if (bad >= 0) return { status: 1, bad };
      addLinearStats(hessian, absSum, task.k, task.x);
      return ok;
    }
    case 'determine': {
      const scale = arrays(Float32Array, task.mins.length);
      const zeroPoint = arrays(Float64Array, task.mins.length);
      const status = k.determine(task.mins, task.maxs, task.choose, scale, zeroPoint);
      return { status, bad: bad(status), scale, zeroPoint };
    }
    case 'quantize': {
      const stats = task.measure ? arrays(Float64Array, 5) : undefined;
      const status = overInput(k, task.x, task.half, HALF_CHUNK, (x, at) =>
        k.quantize(
          x,
          task.start + at,
          task.layout,
          task.scale,
          task.zeroPoint,
          task.quant,
          task.out.subarray(codeBytes(task.quant.codes, at), codeBytes(task.quant.codes, at + x.length)),
          stats,
        ),
      );
      return stats ? { status, bad: bad(status), stats } : done(status);
    }
    case 'dequantize':
      return done(
        k.dequantize(
          task.codes,
          task.kind,
          task.start,
          task.count,
          task.layout,
          task.scale,
          task.zeroPoint,
          task.out,
        ),
      );
    case 'fakeQuantize':
      return done(
        overInput(k, task.x, task.half, HALF_CHUNK, (x, at) =>
          k.fakeQuantize(
            x,
            task.start + at,
            task.layout,
            task.scale,
            task.zeroPoint,
            task.qmin,
            task.qmax,
            task.floatZeroPoint,
            task.out.subarray(at, at + x.length),
            task.mask.subarray(at, at + x.length),
          ),
        ),
      );
    case 'quality': {
      const stats = arrays(Float64Array, 5);
      const status = overInput(k, task.x, task.half, HALF_CHUNK, (x, at) =>
        k.quality(
          x,
          task.codes.subarray(codeBytes(task.quant.codes, at), codeBytes(task.quant.codes, at + x.length)),
          task.start + at,
          task.layout,
          task.scale,
          task.zeroPoint,
          task.quant,
          stats,
        ),
      );
      return { status, bad: bad(status), stats };
    }
    case 'chooseQuantize': {
      // half precision is widened by the kernel itself, in registers
      const stats = task.measure ? arrays(Float64Array, 5) : undefined;
      const status = k.chooseQuantize(
        task.x,
        task.first,
        task.unitSize,
        task.choose,
        task.quant,
        task.scale,
        task.zeroPoint,
        task.out,
        stats,
        task.half,
      );
      return stats ? { status, bad: bad(status), stats } : done(status);
    }
  }
}
