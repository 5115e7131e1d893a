/**
 * A large tensor quantized in slices of whole leading rows, so that a model run reads, computes
 * and writes it in a pipeline of bounded buffers instead of holding it whole: reading 512 MiB
 * into fresh memory costs a page fault per 4 KiB (0.3 s measured), and nothing is written until
 * the last element is computed. Slices are recycled buffers of one size (the compute's arena).
 *
 * A slice is a tensor of its own to the kernels. That is exact only where every element's
 * qparams are its unit's and units never straddle a slice: layouts with `outer` 1 (per_channel on
 * axis 0, per_token, per_group), cut on unit boundaries and on whole bytes of packed codes. The
 * slices' codes and qparams, in order, are then the whole tensor's, byte for byte. A tensor
 * copied through goes in parts of any byte ranges (copyParts), in model runs and layouts alike.
 */
import {
  QDTYPE_INFO,
  ST_DTYPE_SIZE,
  emptyQuality,
  mergeQuality,
  planLayout,
  type Layout,
  type QParams,
  type QualityStats,
} from '../core/index.js';
import type { TensorEntry } from '../format/index.js';
import type { Step } from './plan.js';

/** Input bytes of one slice by default: big enough that a pool round trip is noise (4 Mi float32). */
export const SLICE_BYTES = 16 * 1024 * 1024;

/** A quantize step (the type also covers qparams and fake-quantize, which are never sliced). */
type QuantizeStep = Exclude<Step, { kind: 'copy' | 'dequantize' }>;

/** One slice of a sliced tensor: its own entry (a byte range of the tensor) and layout. */
export interface Slice {
  readonly tensor: SlicedTensor;
  readonly index: number;
  readonly entry: TensorEntry;
  readonly layout: Layout;
  /** Flat index of the slice's first element in the tensor. */
  readonly firstElement: number;
  /** Index of the slice's first unit (its first scale) in the tensor's qparams. */
  readonly firstUnit: number;
}

/**
 * The slices of `step`'s tensor, each of about `sliceBytes` of input; null when the step is not
 * a quantize, is small, comes with given qparams, or its layout cannot be cut (see above).
 */
export function sliceStep(step: Step, sliceBytes: number): SlicedTensor | null {
  if (step.kind !== 'quantize' || step.given !== undefined) return null;
  const { entry, layout, spec } = step;
  const bytes = entry.end - entry.begin;
  if (bytes < 2 * sliceBytes || layout.outer !== 1 || entry.shape.length === 0) return null;
  const rows = entry.shape[0]!;
  const rowElements = layout.numel / rows;
  const rowBytes = rowElements * ST_DTYPE_SIZE[entry.dtype];
  const bits = QDTYPE_INFO[spec.qdtype].bits;
  // a slice begins on a unit (units lie within rows) and on a whole byte of codes
  if (rowElements % layout.inner !== 0) return null;
  let perSlice = Math.max(1, Math.floor(sliceBytes / rowBytes));
  while (perSlice < rows && (perSlice * rowElements * bits) % 8 !== 0) perSlice++; // 7 rows more at most
  if (perSlice >= rows) return null;
  const sliceLayout = (n: number): Layout | null => {
    const l = planLayout(entry.name, [n, ...entry.shape.slice(1)], spec);
    const exact = l.outer === 1 && l.inner === layout.inner && l.channels * l.inner === l.numel;
    return exact ? l : null;
  };
  const slices: Array<Omit<Slice, 'tensor'>> = [];
  for (let row = 0, index = 0; row < rows; row += perSlice, index++) {
    const n = Math.min(perSlice, rows - row);
    const l = sliceLayout(n);
    if (l === null) return null;
    const begin = entry.begin + row * rowBytes;
    slices.push({
      index,
      entry: { ...entry, shape: l.shape, begin, end: begin + n * rowBytes },
      layout: l,
      firstElement: row * rowElements,
      firstUnit: (row * rowElements) / layout.inner,
    });
  }
  return new SlicedTensor(step, slices, bufferBytesFor(slices, sliceBytes));
}

/** One part of a tensor copied through: bytes [begin, end) of it, read into a buffer of `buffer` bytes. */
export interface CopyPart {
  readonly index: number;
  readonly count: number;
  readonly begin: number;
  readonly end: number;
  readonly buffer: number;
}

/**
 * The parts of a tensor of `bytes` copied through (any byte ranges will do, in model runs and
 * layouts alike); null under twice `sliceBytes`.
 */
export function copyParts(bytes: number, sliceBytes: number): CopyPart[] | null {
  if (bytes < 2 * sliceBytes) return null;
  const count = Math.ceil(bytes / sliceBytes);
  return Array.from({ length: count }, (_, index) => ({
    index,
    count,
    begin: index * sliceBytes,
    end: Math.min((index + 1) * sliceBytes, bytes),
    buffer: sliceBytes,
  }));
}

/** Slices read into buffers of one size, so that the arena recycles every one of them. */
function bufferBytesFor(slices: ReadonlyArray<{ readonly entry: TensorEntry }>, sliceBytes: number): number {
  return slices.reduce((n, s) => Math.max(n, s.entry.end - s.entry.begin), sliceBytes);
}

/**
 * An allocator of `bytes` in a buffer of `bufferBytes` (a view of its start): handed back, the
 * whole buffer returns to the arena, ready for any later slice.
 */
export function sliceAllocator(
  allocate: ((bytes: number, shared: boolean) => Uint8Array) | undefined,
  bufferBytes: number,
): ((bytes: number, shared: boolean) => Uint8Array) | undefined {
  if (allocate === undefined) return undefined;
  return (bytes, shared) => allocate(Math.max(bytes, bufferBytes), shared).subarray(0, bytes);
}

/** A tensor's slices and what their results add up to (qparams, statistics, sampled errors). */
export class SlicedTensor {
  readonly slices: readonly Slice[];
  private scale: Float32Array | null = null;
  private zeroPoint: Float32Array | Int32Array | null = null;
  private readonly quality: QualityStats = emptyQuality();
  private measured = false;
  private readonly errors: number[] = [];
  /** Bytes of codes the slices produced. */
  codeBytes = 0;

  constructor(
    readonly step: QuantizeStep,
    slices: ReadonlyArray<Omit<Slice, 'tensor'>>,
    /** Bytes of the buffer each slice is read into (sliceAllocator). */
    readonly bufferBytes: number,
  ) {
    this.slices = slices.map((s) => ({ ...s, tensor: this }));
  }

  /** Adds one slice's results, in slice order. */
  add(
    slice: Slice,
    codes: number,
    qp: QParams,
    quality: QualityStats | undefined,
    errors: ArrayLike<number> | undefined,
  ): void {
    const units = this.step.layout.channels;
    this.scale ??= new Float32Array(units);
    this.zeroPoint ??= qp.zeroPoint instanceof Int32Array ? new Int32Array(units) : new Float32Array(units);
    this.codeBytes += codes;
    this.scale.set(qp.scale, slice.firstUnit);
    this.zeroPoint.set(qp.zeroPoint, slice.firstUnit);
    if (quality) {
      mergeQuality(this.quality, quality);
      this.measured = true;
    }
    if (errors) for (let i = 0; i < errors.length; i++) this.errors.push(errors[i]!);
  }

  /** The whole tensor's qparams, once every slice is added. */
  get qparams(): QParams {
    return { scale: this.scale!, zeroPoint: this.zeroPoint! };
  }

  /** The whole tensor's statistics, when its slices were measured. */
  get measuredQuality(): QualityStats | undefined {
    return this.measured ? this.quality : undefined;
  }

  /** The sampled errors of every slice, in the tensor's sample order. */
  get sampledErrors(): readonly number[] {
    return this.errors;
  }
}
