/**
 * The tensor-level operations of src/core/ops.ts, carried out by kernel tasks: a tensor is split
 * into ranges (as many as the executor runs at once, none smaller than MIN_PART elements), each
 * range is one task, and the results are put together. Elementwise ops and order-independent
 * reductions make the output bit-identical however the tensor is split.
 *
 * float16 / bfloat16 inputs go to the tasks as they are, with the conversion kind: the kernels
 * widen them as they read them, in registers or a cache-sized chunk at a time (./tasks.ts), so a
 * half-precision tensor of T bytes is never staged as a 2T float32 copy, and reading it costs
 * half the memory traffic of float32. The tensor is worked through in windows of
 * `windowElements` (default WINDOW_ELEMENTS) that keep ALIGN boundaries (whole units when
 * choosing is fused), so packed codes split on bytes. Where every unit is one contiguous run
 * (per_group, per_token, per_channel rows: fusesChoosing) qparams are chosen and codes written
 * unit by unit in one pass; other ops that choose qparams make two passes (min/max, then quantize
 * or fake-quantize). Quality statistics are taken in the same pass, or on the window just
 * quantized. float32 inputs are one window: the input itself.
 *
 * The TypeScript reference stays the oracle: ops the kernels do not cover (greedy range search,
 * empty tensors) run on it, and when a kernel rejects an input the op is run again on it, so
 * that the error — code, message, index — is exactly the reference's.
 */
import {
  addsZeroPointBeforeRounding,
  checkFakeQuantizable,
  checkRangeForChoosing,
  dequantizeTensor,
  fakeQuantizeTensor,
  hasFloatZeroPoint,
  quantizeTensor,
  chooseTensorQParams,
  quantizedByteLength,
  symmetricZeroPoint,
  typedView,
  validateQParams,
  checkCodesLength,
  type FakeQuantizeOutput,
  type FloatDType,
  type FloatInput,
  type Layout,
  type QParams,
  type QuantSpec,
  type QuantizeOutput,
  type QuantizedInput,
  type QualityStats,
  emptyQuality,
  mergeQuality,
} from '../core/index.js';
import { QuantdError } from '../errors/index.js';
import {
  withReferenceQuality,
  type Compute,
  type LinearStatsCall,
  type ObserveCall,
  type QParamsCall,
  type QuantizeOptions,
} from '../core/compute.js';
import {
  finishHistogram,
  minMaxLayout,
  observeReduced,
  planHistogram,
  qparamsCost,
  type ObserverQParams,
  type ObserverState,
} from '../core/observers/index.js';
import type { LinearErrorReport, LinearLayer } from '../core/linear-eval.js';
import type { LinearStats } from '../core/linear-stats.js';
import { CHOOSE_MODE, CODES, CONVERT, type ChooseArgs, type LayoutArgs, type QuantArgs } from './module.js';
import { BufferArena } from './arena.js';
import { runReferenceTask, type ReferenceCall, type ReferenceResults } from './reference-task.js';
import type { KernelTask, TaskResult } from './tasks.js';
import {
  SMALL_ARRAY_BYTES,
  freshArrays,
  slabArrays,
  type ArrayConstructor,
  type ArrayMaker,
} from './small-arrays.js';

/** Runs kernel tasks: in this thread, or on a worker pool. */
export interface Executor {
  /** How many tasks run at once. */
  readonly parallelism: number;
  /** Whether buffers must be SharedArrayBuffers (tasks run in other threads). */
  readonly shared: boolean;
  run(tasks: readonly KernelTask[], tensor: string, signal?: AbortSignal): Promise<TaskResult[]>;
  /** Runs a whole-tensor TypeScript reference op (a pool: on a worker); none: this thread. */
  reference?<K extends ReferenceCall>(call: K, signal?: AbortSignal): Promise<ReferenceResults[K['kind']]>;
}

/**
 * A zeroed float64 array of its own (never the arena's: statistics live as long as their
 * session), in shared memory when tasks run in other threads.
 */
function floats64(length: number, shared: boolean): Float64Array {
  return shared ? new Float64Array(new SharedArrayBuffer(8 * length)) : new Float64Array(length);
}

/** Smallest range worth a task of its own (4 MiB of float32). */
export const MIN_PART = 1 << 20;
/** float16 / bfloat16 inputs are worked through this many elements at a time (8 MiB of bfloat16). */
export const WINDOW_ELEMENTS = 1 << 22;
/**
 * Range and window boundaries fall on multiples of this many elements, so packed codes split on
 * bytes.
 */
const ALIGN = 64;

/**
 * A range of a tensor: elements [start, end), `x` their values — float32, or float16 / bfloat16
 * bits with `half` the CONVERT kind the task applies.
 */
interface Part {
  readonly x: Float32Array | Uint16Array;
  readonly half?: number;
  readonly start: number;
  readonly end: number;
}

/**
 * Runs `visit` on consecutive windows of a tensor, each given as the ranges its tasks take and as
 * a whole, until one returns false (a kernel rejected the input). Resolves to whether every
 * window passed.
 */
type Windows = (visit: (parts: Part[], window: Part) => Promise<boolean>) => Promise<boolean>;

type ViewConstructor<T extends ArrayBufferView> = ArrayConstructor<T>;

/** A zeroed array, in shared memory when tasks run in other threads (small ones: small-arrays.ts). */
function allocate<T extends Float32Array | Uint8Array | Uint16Array | Float64Array>(
  ctor: ViewConstructor<T>,
  length: number,
  shared: boolean,
  arena?: BufferArena,
): T {
  const bytes = length * ctor.BYTES_PER_ELEMENT;
  if (!shared && bytes <= SMALL_ARRAY_BYTES) return slabArrays(ctor, length);
  if (arena) return new ctor(arena.take(bytes, shared), 0, length);
  return new ctor(shared ? new SharedArrayBuffer(bytes) : new ArrayBuffer(bytes), 0, length);
}

/** [start, end) element ranges: `parallelism` of them at most, aligned, none below minPart. */
export function splitRanges(
  numel: number,
  parallelism: number,
  align = ALIGN,
  minPart = MIN_PART,
): Array<[number, number]> {
  const parts = Math.max(1, Math.min(parallelism, Math.floor(numel / Math.max(minPart, 1))));
  const ranges: Array<[number, number]> = [];
  let start = 0;
  for (let p = 0; p < parts; p++) {
    let end = p === parts - 1 ? numel : Math.round((numel * (p + 1)) / parts / align) * align;
    end = Math.min(Math.max(end, start), numel);
    if (end > start) ranges.push([start, end]);
    start = end;
  }
  return ranges.length > 0 ? ranges : [[0, numel]];
}

const layoutArgs = (l: Layout): LayoutArgs => ({ outer: l.outer, channels: l.channels, inner: l.inner });

function quantArgs(spec: QuantSpec): QuantArgs {
  return {
    codes: CODES[spec.qdtype],
    qmin: spec.quantMin,
    qmax: spec.quantMax,
    addFirst: addsZeroPointBeforeRounding(spec),
    rejectInf: spec.scheme === 'per_group',
  };
}

/**
 * per_channel rows chosen and quantized in one pass: from this many elements (shorter rows go
 * through the min/max kernel's lanes, a channel per lane) up to what stays in L2 for the second
 * read.
 */
const FUSED_ROW = { min: 256, max: 1 << 16 } as const;

/**
 * Whether qparams are chosen and codes written unit by unit in one pass (each unit read from
 * memory once, then again from cache): when every unit is one contiguous run — per_group groups,
 * per_token rows, per_channel rows of a tensor quantized along its first axis.
 */
function fusesChoosing(layout: Layout, spec: QuantSpec): boolean {
  if (layout.outer !== 1) return false;
  if (spec.scheme === 'per_group' || spec.scheme === 'per_token') return true;
  return spec.scheme === 'per_channel' && layout.inner >= FUSED_ROW.min && layout.inner <= FUSED_ROW.max;
}

function chooseArgs(spec: QuantSpec): ChooseArgs {
  const mode =
    spec.scheme === 'per_token'
      ? spec.mode === 'symmetric'
        ? CHOOSE_MODE.token_symmetric
        : CHOOSE_MODE.token_affine
      : CHOOSE_MODE[spec.mode];
  return {
    mode,
    qmin: spec.quantMin,
    qmax: spec.quantMax,
    eps: spec.eps,
    symmetricZeroPoint: symmetricZeroPoint(spec),
  };
}

/** A copy of `values` as a `ctor` array made by `arrays`. */
function copyOf<T extends Float32Array | Int32Array>(
  arrays: ArrayMaker,
  ctor: ArrayConstructor<T>,
  values: ArrayLike<number>,
): T {
  const copy = arrays(ctor, values.length);
  copy.set(values);
  return copy;
}

/** Zero points as the qparams carry them (int32, or float32) from the kernels' float64. */
function zeroPointsOf(spec: QuantSpec, zp: Float64Array, arrays: ArrayMaker): Int32Array | Float32Array {
  return hasFloatZeroPoint(spec) ? copyOf(arrays, Float32Array, zp) : copyOf(arrays, Int32Array, zp);
}

/** The statistics a quality or measured task returned ([Σerr², Σx², max|err|, clipped, count]). */
function statsOf(r: TaskResult): QualityStats {
  const [sumSqError, sumSqValue, maxAbsError, clipped, count] = r.stats!;
  return {
    sumSqError: sumSqError!,
    sumSqValue: sumSqValue!,
    maxAbsError: maxAbsError!,
    clipped: clipped!,
    count: count!,
  };
}

/** The reference decides: it throws the error the kernels met, or we have a kernel bug. */

export interface KernelComputeOptions {
  /** Smallest range given a task of its own (default MIN_PART); tests lower it to split small tensors. */
  readonly minPart?: number;
  /**
   * Elements of a float16 / bfloat16 input converted to float32 at a time (default
   * WINDOW_ELEMENTS); tests lower it to work small tensors in several windows.
   */
  readonly windowElements?: number;
  /** Where output buffers come from and go back to (see release()). */
  readonly arena?: BufferArena;
}

export class KernelCompute implements Compute {
  private readonly minPart: number;
  private readonly windowElements: number;
  private readonly arena: BufferArena;
  /** Small arrays: from this thread's slab, unless tasks carry them to other threads. */
  private readonly arrays: ArrayMaker;

  constructor(
    private readonly exec: Executor,
    readonly backend: string,
    options: KernelComputeOptions = {},
  ) {
    this.arrays = exec.shared ? freshArrays : slabArrays;
    this.minPart = options.minPart ?? MIN_PART;
    this.windowElements = options.windowElements ?? WINDOW_ELEMENTS;
    this.arena = options.arena ?? new BufferArena();
  }

  /** An output buffer, recycled when possible. */
  private output<T extends Float32Array | Uint8Array | Uint16Array | Float64Array>(
    ctor: ViewConstructor<T>,
    length: number,
  ): T {
    return allocate(ctor, length, this.exec.shared, this.arena);
  }

  /** Hands back an output whose bytes have been written out; later outputs may reuse it. */
  release(data: ArrayBufferView): void {
    this.arena.give(data);
  }

  /**
   * `view`, or a copy of it in shared memory when the executor runs tasks in other threads and
   * the view is not shared already (sources hand large tensors over in SharedArrayBuffers, so
   * this copy is the exception). Copies go in `scratch`, released when the op ends.
   */
  private sharable<T extends Float32Array | Uint8Array | Uint16Array>(
    view: T,
    scratch: ArrayBufferView[],
  ): T {
    if (!this.exec.shared || view.buffer instanceof SharedArrayBuffer) return view;
    const copy = this.output(view.constructor as ViewConstructor<T>, view.length);
    copy.set(view as never);
    scratch.push(copy);
    return copy;
  }

  /** Runs `op` with a scratch list whose buffers are released when it ends, however it ends. */
  private async withScratch<T>(op: (scratch: ArrayBufferView[]) => Promise<T>): Promise<T> {
    const scratch: ArrayBufferView[] = [];
    try {
      return await op(scratch);
    } finally {
      for (const b of scratch) this.release(b);
    }
  }

  private ranges(numel: number, align = ALIGN): Array<[number, number]> {
    return splitRanges(numel, this.exec.parallelism, align, this.minPart);
  }

  private async tasks(tasks: KernelTask[], tensor: string, signal?: AbortSignal): Promise<TaskResult[]> {
    return this.exec.run(tasks, tensor, signal);
  }

  /** The window `x` (values of elements from `start` on) as ranges, in tensor indices. */
  private parts(window: Part, align: number): Part[] {
    return this.ranges(window.x.length, align).map(([s, e]) => ({
      x: window.x.subarray(s, e),
      half: window.half,
      start: window.start + s,
      end: window.start + e,
    }));
  }

  /**
   * The input's float32 values, window by window (see the header). Windows hold a multiple of
   * `align` elements (ALIGN, or ALIGN whole units), so that packed codes and units do not straddle
   * two. The window buffer is allocated once per op, in `scratch`; the window it holds is not
   * converted again when a second pass asks for it first.
   */
  private windowsOf(input: FloatInput, scratch: ArrayBufferView[], align = ALIGN): Windows {
    if (input.dtype === 'float32') {
      const x = this.sharable(typedView(Float32Array, input.data), scratch);
      const whole: Part = { x, start: 0, end: x.length };
      return (visit) => visit(this.parts(whole, align), whole);
    }
    const halves = this.sharable(typedView(Uint16Array, input.data), scratch);
    const half = input.dtype === 'float16' ? CONVERT.f16ToF32 : CONVERT.bf16ToF32;
    const size = Math.max(align, Math.floor(this.windowElements / align) * align);
    return async (visit) => {
      for (let start = 0; start < halves.length; start += size) {
        const end = Math.min(start + size, halves.length);
        const window: Part = { x: halves.subarray(start, end), half, start, end };
        if (!(await visit(this.parts(window, align), window))) return false;
      }
      return true;
    };
  }

  private async convert(
    kind: number,
    input: Uint16Array | Float32Array,
    out: Float32Array | Uint16Array,
    tensor: string,
    signal?: AbortSignal,
  ): Promise<void> {
    await this.tasks(
      this.ranges(input.length).map(([s, e]) => ({
        op: 'convert',
        kind,
        input: input.subarray(s, e),
        out: out.subarray(s, e),
      })),
      tensor,
      signal,
    );
  }

  /** Output bytes in `dtype`: the float32 values themselves, or their float16 / bfloat16 rounding. */
  private async toDtype(
    values: Float32Array,
    dtype: FloatDType,
    scratch: ArrayBufferView[],
    tensor: string,
    signal?: AbortSignal,
  ): Promise<Uint8Array> {
    if (dtype === 'float32') return new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
    scratch.push(values); // the float32 intermediate
    const out = this.output(Uint16Array, values.length);
    await this.convert(
      dtype === 'float16' ? CONVERT.f32ToF16 : CONVERT.f32ToBf16,
      values,
      out,
      tensor,
      signal,
    );
    return new Uint8Array(out.buffer, out.byteOffset, out.byteLength);
  }

  /** Scales and float32 zero points as the kernels take them. */
  private qparamArrays(
    qp: QParams,
    scratch: ArrayBufferView[],
  ): { scale: Float32Array; zeroPoint: Float32Array } {
    return {
      scale: this.sharable(copyOf(this.arrays, Float32Array, qp.scale), scratch),
      zeroPoint: this.sharable(copyOf(this.arrays, Float32Array, qp.zeroPoint), scratch),
    };
  }

  /** min/max per unit over the tensor, combined across ranges with -0 < +0 (Math.min / Math.max). */
  private async minmax(windows: Windows, layout: Layout, tensor: string, signal?: AbortSignal) {
    const l = layoutArgs(layout);
    const mins = this.arrays(Float32Array, layout.channels).fill(Infinity);
    const maxs = this.arrays(Float32Array, layout.channels).fill(-Infinity);
    const ok = await windows(async (parts) => {
      const results = await this.tasks(
        parts.map((p) => ({ op: 'minmax', x: p.x, half: p.half, start: p.start, layout: l })),
        tensor,
        signal,
      );
      if (results.some((r) => r.status !== 0)) return false;
      for (const r of results) {
        for (let c = 0; c < mins.length; c++) {
          mins[c] = Math.min(mins[c]!, r.mins![c]!);
          maxs[c] = Math.max(maxs[c]!, r.maxs![c]!);
        }
      }
      return true;
    });
    return ok ? { mins, maxs } : null;
  }

  /** Chosen qparams (minmax + determine), or null when a kernel rejected the input. */
  private async choose(
    windows: Windows,
    input: FloatInput,
    spec: QuantSpec,
    signal?: AbortSignal,
  ): Promise<QParams | null> {
    checkRangeForChoosing(spec);
    const range = await this.minmax(windows, input.layout, input.name, signal);
    if (!range) return null;
    const [r] = await this.tasks(
      [{ op: 'determine', mins: range.mins, maxs: range.maxs, choose: chooseArgs(spec) }],
      input.name,
      signal,
    );
    if (r!.status !== 0) return null;
    return { scale: r!.scale!, zeroPoint: zeroPointsOf(spec, r!.zeroPoint!, this.arrays) };
  }

  /** The TypeScript reference of an op: on a worker when the executor is a pool. */
  private async reference<K extends ReferenceCall>(
    call: K,
    signal?: AbortSignal,
  ): Promise<ReferenceResults[K['kind']]> {
    if (this.exec.reference) return this.exec.reference(call, signal);
    return runReferenceTask(call) as ReferenceResults[K['kind']];
  }

  /**
   * A kernel rejected the input: the reference runs it again, so that the error is exactly the
   * reference's (code, message, index). Should the reference accept it, that is a bug.
   */
  private async verdict(call: ReferenceCall, what: string, signal?: AbortSignal): Promise<never> {
    await this.reference(call, signal);
    throw new QuantdError('INTERNAL', {
      detail: `${what}: the kernels rejected an input the reference accepts`,
    });
  }

  private usesReference(input: FloatInput, spec: QuantSpec): boolean {
    return input.layout.numel === 0 || spec.rangeSearch === 'greedy';
  }

  async chooseQParams(
    input: FloatInput,
    spec: QuantSpec,
    given?: QParams,
    signal?: AbortSignal,
  ): Promise<QParams> {
    if (given || input.layout.numel === 0) return chooseTensorQParams(input, spec, given);
    if (this.usesReference(input, spec))
      return this.reference({ kind: 'chooseQParams', input, spec }, signal);
    return this.withScratch(async (scratch) => {
      const windows = this.windowsOf(input, scratch, ALIGN);
      return (
        (await this.choose(windows, input, spec, signal)) ??
        (await this.verdict(
          { kind: 'chooseQParams', input, spec },
          `choose_qparams of ${input.name}`,
          signal,
        ))
      );
    });
  }

  async quantize(
    input: FloatInput,
    spec: QuantSpec,
    given?: QParams,
    signal?: AbortSignal,
    options: QuantizeOptions = {},
  ): Promise<QuantizeOutput> {
    if (this.usesReference(input, spec)) {
      const result =
        input.layout.numel === 0
          ? quantizeTensor(input, spec, given)
          : await this.reference({ kind: 'quantize', input, spec, ...(given && { given }) }, signal);
      if (!options.quality || input.layout.numel === 0)
        return withReferenceQuality(input, spec, result, options);
      return this.withScratch(async (scratch) => {
        const { scale, zeroPoint } = this.qparamArrays(result.qparams, scratch);
        const codes = this.sharable(result.data, scratch);
        const meter = this.qualityMeter(input, spec, scale, zeroPoint, codes, signal);
        const windows = this.windowsOf(input, scratch, ALIGN);
        await windows(async (_parts, window) => {
          await meter.add(window);
          return true;
        });
        return { ...result, quality: meter.total };
      });
    }
    if (given) validateQParams(input.name, given, spec);
    const fused = !given && fusesChoosing(input.layout, spec);
    if (fused) checkRangeForChoosing(spec);
    return this.withScratch(async (scratch) => {
      const out = this.output(Uint8Array, quantizedByteLength(spec.qdtype, input.layout.numel));
      const quality = options.quality ?? false;
      let result: QuantizeOutput | null;
      if (fused) {
        // whole units, ALIGN of them at a time, so that packed codes split on byte boundaries
        const windows = this.windowsOf(input, scratch, ALIGN * input.layout.inner);
        result = await this.chooseQuantize(windows, input, spec, out, quality, signal);
      } else {
        const windows = this.windowsOf(input, scratch, ALIGN);
        const qparams = given ?? (await this.choose(windows, input, spec, signal));
        result =
          qparams &&
          (await this.quantizeWindows(windows, input, spec, qparams, out, quality, scratch, signal));
      }
      if (!result) {
        this.release(out);
        return this.verdict(
          { kind: 'quantize', input, spec, ...(given && { given }) },
          `quantize ${input.name}`,
          signal,
        );
      }
      return result;
    });
  }

  /**
   * Error statistics of `codes` (the quantization of the input with `scale` and `zeroPoint`, as
   * the kernels take them), summed by the kernels over ranges of the windows given to add() and
   * merged here.
   */
  private qualityMeter(
    input: FloatInput,
    spec: QuantSpec,
    scale: Float32Array,
    zeroPoint: Float32Array,
    codes: Uint8Array,
    signal?: AbortSignal,
  ): { readonly total: QualityStats; add(window: Part): Promise<void> } {
    const quant = quantArgs(spec);
    const l = layoutArgs(input.layout);
    const bytes = (n: number): number => quantizedByteLength(spec.qdtype, n);
    const total = emptyQuality();
    const add = async (window: Part): Promise<void> => {
      const results = await this.tasks(
        this.parts(window, ALIGN).map((p) => ({
          op: 'quality',
          x: p.x,
          half: p.half,
          codes: codes.subarray(bytes(p.start), bytes(p.end)),
          start: p.start,
          layout: l,
          scale,
          zeroPoint,
          quant,
        })),
        input.name,
        signal,
      );
      for (const r of results) {
        if (r.status !== 0)
          throw new QuantdError('INTERNAL', {
            detail: `quality of ${input.name}: kernel status ${r.status}`,
          });
        mergeQuality(total, statsOf(r));
      }
    };
    return { total, add };
  }

  /** Codes with known qparams, window by window (measured on the same window when asked). */
  private async quantizeWindows(
    windows: Windows,
    input: FloatInput,
    spec: QuantSpec,
    qparams: QParams,
    out: Uint8Array,
    quality: boolean,
    scratch: ArrayBufferView[],
    signal?: AbortSignal,
  ): Promise<QuantizeOutput | null> {
    const { scale, zeroPoint } = this.qparamArrays(qparams, scratch);
    const quant = quantArgs(spec);
    const l = layoutArgs(input.layout);
    const bytes = (n: number): number => quantizedByteLength(spec.qdtype, n);
    const total = emptyQuality();
    const ok = await windows(async (parts) => {
      const results = await this.tasks(
        parts.map((p) => ({
          op: 'quantize',
          x: p.x,
          half: p.half,
          start: p.start,
          layout: l,
          scale,
          zeroPoint,
          quant,
          out: out.subarray(bytes(p.start), bytes(p.end)),
          measure: quality,
        })),
        input.name,
        signal,
      );
      if (results.some((r) => r.status !== 0)) return false;
      if (quality) for (const r of results) mergeQuality(total, statsOf(r));
      return true;
    });
    if (!ok) return null;
    return quality ? { data: out, qparams, quality: total } : { data: out, qparams };
  }

  /**
   * Contiguous units (per_token rows, per_group groups): choose and quantize in one pass, over
   * windows of whole units (measured on the same window when asked).
   */
  private async chooseQuantize(
    windows: Windows,
    input: FloatInput,
    spec: QuantSpec,
    out: Uint8Array,
    quality: boolean,
    signal?: AbortSignal,
  ): Promise<QuantizeOutput | null> {
    const { channels, inner } = input.layout;
    const shared = this.exec.shared;
    const scale = allocate(Float32Array, channels, shared);
    const zp = allocate(Float64Array, channels, shared);
    const total = emptyQuality();
    const bytes = (n: number): number => quantizedByteLength(spec.qdtype, n);
    const ok = await windows(async (parts) => {
      const results = await this.tasks(
        parts.map((p) => ({
          op: 'chooseQuantize',
          x: p.x,
          half: p.half,
          first: p.start / inner,
          unitSize: inner,
          choose: chooseArgs(spec),
          quant: quantArgs(spec),
          scale: scale.subarray(p.start / inner, p.end / inner),
          zeroPoint: zp.subarray(p.start / inner, p.end / inner),
          out: out.subarray(bytes(p.start), bytes(p.end)),
          measure: quality,
        })),
        input.name,
        signal,
      );
      if (results.some((r) => r.status !== 0)) return false;
      if (quality) for (const r of results) mergeQuality(total, statsOf(r));
      return true;
    });
    if (!ok) return null;
    const qparams = {
      scale: copyOf(this.arrays, Float32Array, scale),
      zeroPoint: zeroPointsOf(spec, zp, this.arrays),
    };
    return quality ? { data: out, qparams, quality: total } : { data: out, qparams };
  }

  async fakeQuantize(
    input: FloatInput,
    spec: QuantSpec,
    outDType: FloatDType,
    given?: QParams,
    signal?: AbortSignal,
  ): Promise<FakeQuantizeOutput> {
    checkFakeQuantizable(spec);
    if (input.layout.numel === 0) return fakeQuantizeTensor(input, spec, outDType, given);
    if (this.usesReference(input, spec)) {
      return this.reference({ kind: 'fakeQuantize', input, spec, outDType, ...(given && { given }) }, signal);
    }
    if (given) validateQParams(input.name, given, spec);
    const reject = (): Promise<never> =>
      this.verdict(
        { kind: 'fakeQuantize', input, spec, outDType, ...(given && { given }) },
        `fake-quantize ${input.name}`,
        signal,
      );
    return this.withScratch(async (scratch) => {
      const windows = this.windowsOf(input, scratch, ALIGN);
      const qparams = given ?? (await this.choose(windows, input, spec, signal)) ?? (await reject());
      const layout = input.layout;
      const out = this.output(Float32Array, layout.numel);
      const mask = this.output(Uint8Array, layout.numel);
      const { scale, zeroPoint } = this.qparamArrays(qparams, scratch);
      const l = layoutArgs(layout);
      const ok = await windows(async (parts) => {
        const results = await this.tasks(
          parts.map((p) => ({
            op: 'fakeQuantize',
            x: p.x,
            half: p.half,
            start: p.start,
            layout: l,
            scale,
            zeroPoint,
            qmin: spec.quantMin,
            qmax: spec.quantMax,
            floatZeroPoint: spec.mode === 'float_qparams',
            out: out.subarray(p.start, p.end),
            mask: mask.subarray(p.start, p.end),
          })),
          input.name,
          signal,
        );
        return results.every((r) => r.status === 0);
      });
      if (!ok) {
        this.release(out);
        this.release(mask);
        await reject();
      }
      return { data: await this.toDtype(out, outDType, scratch, input.name, signal), mask, qparams };
    });
  }

  /** A linear layer's output error: TypeScript, on a worker in a pool. */
  linearError(layer: LinearLayer, spec: QuantSpec, signal?: AbortSignal): Promise<LinearErrorReport> {
    return this.reference({ kind: 'linearError', layer, spec }, signal);
  }

  /**
   * A layer's input statistics with one more batch: one task (the C kernel where the module has
   * it, else the same sums in TypeScript) writing into new arrays of this thread's, shared with a
   * pool (in² float64 values: a copy through a worker's messages would be made on the event loop,
   * twice); statistics of no token yet are not sent at all. A batch it refuses (NaN, ±Infinity)
   * or a shape that does not fit goes to the reference, whose error names it: it is given the
   * statistics' size alone (the error depends on nothing else).
   */
  async accumulateStats(call: LinearStatsCall, signal?: AbortSignal): Promise<LinearStats> {
    const { tensor, stats, x, shape } = call;
    const k = stats.inFeatures;
    const refuse = (): Promise<never> =>
      this.verdict(
        {
          kind: 'linearStats',
          ...call,
          stats: { ...stats, hessian: new Float64Array(0), absSum: new Float64Array(0) },
        },
        'linear statistics',
        signal,
      );
    const fits = shape.length > 0 && shape[shape.length - 1] === k && x.length % k === 0;
    if (!fits) return refuse();
    const fresh = stats.tokens === 0;
    const hessian = floats64(k * k, this.exec.shared);
    const absSum = floats64(k, this.exec.shared);
    const [r] = await this.withScratch((scratch) =>
      this.tasks(
        [
          {
            op: 'linearStats',
            hessian: fresh ? null : stats.hessian,
            absSum: fresh ? null : stats.absSum,
            k,
            x: this.sharable(x, scratch),
            outHessian: hessian,
            outAbsSum: absSum,
          },
        ],
        tensor,
        signal,
      ),
    );
    if (r!.status !== 0) return refuse();
    return { inFeatures: k, tokens: stats.tokens + x.length / k, hessian, absSum };
  }

  /**
   * An observer's batch. Min/max observers reduce it with the kernels' minmax (the same values:
   * min and max are exact) and fold the result in TypeScript; histogram observers take the
   * batch's range from minmax too and count it with the kernels' histc (one task: its float32
   * counts are sequential, as the reference's), the merge staying TypeScript. A batch a kernel
   * rejects (NaN, whose torch semantics the reference keeps) and fixed_qparams run the
   * TypeScript reference, on a worker in a pool.
   */
  async observe(call: ObserveCall, signal?: AbortSignal): Promise<ObserverState> {
    const { config, state, x, shape } = call;
    const reference = (): Promise<ObserverState> => this.reference({ kind: 'observe', ...call }, signal);
    const histogram = config.kind === 'histogram';
    const layout = histogram
      ? minMaxLayout({ ...config, kind: 'min_max' }, shape, x.length)
      : minMaxLayout(config, shape, x.length);
    if (!layout) return reference();
    const input: FloatInput = {
      name: config.kind,
      dtype: 'float32',
      data: new Uint8Array(x.buffer, x.byteOffset, x.byteLength),
      layout,
    };
    const next = await this.withScratch(async (scratch) => {
      const range = await this.minmax(this.windowsOf(input, scratch, ALIGN), layout, input.name, signal);
      if (!range) return null;
      if (!histogram) return observeReduced(config, state, range.mins, range.maxs, x.length);
      const folded = { lo: state.lo.slice(), hi: state.hi.slice(), histogram: state.histogram! };
      const step = planHistogram(config, folded, range.mins[0]!, range.maxs[0]!);
      const [counted] = await this.tasks(
        [
          {
            op: 'histc',
            x: this.sharable(x, scratch),
            left: step.left,
            right: step.right,
            bins: config.bins,
          },
        ],
        input.name,
        signal,
      );
      if (counted!.status !== 0) return null;
      const counts = counted!.hist!;
      if (step.fresh || (step.combinedMin === folded.lo[0] && step.combinedMax === folded.hi[0])) {
        finishHistogram(config, folded, step, counts); // bins additions at most
        return { ...folded, observed: state.observed + x.length };
      }
      // a merge walks bins · upsample_rate cells (up to 2^21 by default, ~10 ms): a pool's worker
      // does it, whatever the batch's size
      const merged = await this.reference(
        { kind: 'finishHistogram', config, state: { ...folded, observed: state.observed }, step, counts },
        signal,
      );
      return { ...merged, observed: state.observed + x.length };
    });
    return next ?? reference();
  }

  /**
   * Observers' qparams: the TypeScript (a histogram's range search has no kernel), in two tasks
   * of about equal cost per thread, so that a pool's threads share a session's many observers
   * and a session of thousands is a handful of tasks.
   */
  async observerQParams(
    calls: readonly QParamsCall[],
    signal?: AbortSignal,
  ): Promise<(ObserverQParams | QuantdError)[]> {
    const costs = calls.map((c) => qparamsCost(c.config, c.state));
    const share = costs.reduce((a, b) => a + b, 0) / (2 * this.exec.parallelism);
    const groups: QParamsCall[][] = [];
    let cost = Infinity;
    for (const [i, c] of calls.entries()) {
      if (cost >= share) {
        groups.push([]);
        cost = 0;
      }
      groups.at(-1)!.push(c);
      cost += costs[i]!;
    }
    const outcomes = await Promise.all(
      groups.map((observers) => this.reference({ kind: 'observerQParams', observers }, signal)),
    );
    return outcomes.flat().map((o) => (o.ok ? o.qparams : new QuantdError(o.code, o.params)));
  }

  async dequantize(input: QuantizedInput, outDType: FloatDType, signal?: AbortSignal): Promise<Uint8Array> {
    const layout = input.layout;
    if (layout.numel === 0) return dequantizeTensor(input, outDType);
    validateQParams(input.name, input.qparams, input.spec);
    checkCodesLength(input);
    return this.withScratch(async (scratch) => {
      const codes = this.sharable(input.data, scratch);
      const out = this.output(Float32Array, layout.numel);
      const { scale, zeroPoint } = this.qparamArrays(input.qparams, scratch);
      const kind = CODES[input.spec.qdtype];
      const l = layoutArgs(layout);
      const bytes = (n: number): number => quantizedByteLength(input.spec.qdtype, n);
      const results = await this.tasks(
        this.ranges(layout.numel).map(([s, e]) => ({
          op: 'dequantize',
          codes: codes.subarray(bytes(s), bytes(e)),
          kind,
          start: s,
          count: e - s,
          layout: l,
          scale,
          zeroPoint,
          out: out.subarray(s, e),
        })),
        input.name,
        signal,
      );
      if (results.some((r) => r.status !== 0)) {
        this.release(out);
        await this.verdict({ kind: 'dequantize', input, outDType }, `dequantize ${input.name}`, signal);
      }
      return this.toDtype(out, outDType, scratch, input.name, signal);
    });
  }
}
