/**
 * A large GGUF weight read, encoded and written in slices of whole rows, as a model run slices
 * its tensors (../slices.ts): buffers of one size recycled from slice to slice instead of the
 * whole weight and its whole encoding in fresh memory (a 7B-shaped checkpoint to Q8_0 peaked
 * above its RSS bound), and the disk writing while later slices are read and encoded.
 *
 * Each slice is the encode task of a part of the weight whose input and output hold the part's
 * rows only (the kernels' `window`, src/kernels/ggml-rows.ts). GGUF blocks never span rows, and
 * q/k rows are permuted within their head, so a slice of whole heads encodes to exactly the
 * whole weight's bytes for its rows. A non-finite value is reported at its index in the weight;
 * the parts' quality sums and sampled errors join into the weight's, as the pool's parts do.
 */
import { histogramOf, type ErrorHistogram } from '../../core/error-histogram.js';
import { mergeQuality } from '../../core/quality.js';
import type { QualityStats } from '../../core/quality-stats.js';
import type { EncodeReply, EncoderCall } from '../../kernels/encoders.js';
import { encodedByRows, type RowRange } from '../../kernels/ggml-rows.js';

type GgmlCall = Extract<EncoderCall, { kind: 'ggml' }>;

/** One slice of a weight: its rows, its bytes of the input, and its bytes of the output. */
export interface JobSlice {
  readonly index: number;
  readonly count: number;
  /** The slice's rows (in output order, which for whole heads are the input's rows too). */
  readonly rows: RowRange;
  /** The call that encodes the slice's rows alone. */
  readonly call: GgmlCall;
  /** Bytes [inputBegin, inputEnd) of the input tensor. */
  readonly inputBegin: number;
  readonly inputEnd: number;
  readonly outputBytes: number;
  /** Sizes of the buffers every slice of a run is read and encoded into (so they are recycled). */
  readonly inputBuffer: number;
  readonly outputBuffer: number;
  /** What the weight's slices add up to. */
  readonly sum: SliceSum;
}

/**
 * The slices of a job that encodes one weight with a GGUF kernel, each about `sliceBytes` of
 * input; null for any other job, or a weight under twice that.
 */
export function sliceGgmlJob(
  call: EncoderCall | undefined,
  inputBytes: number,
  outputBytes: number,
  sliceBytes: number,
): JobSlice[] | null {
  if (call?.kind !== 'ggml' || !encodedByRows(call) || call.part !== undefined) return null;
  if (inputBytes < 2 * sliceBytes) return null;
  const rowBytes = call.ne0 * (call.dtype === 'float32' ? 4 : 2);
  const rows = inputBytes / rowBytes;
  const outRowBytes = outputBytes / rows;
  if (!Number.isInteger(rows) || !Number.isInteger(outRowBytes)) return null;
  // rows of one head stay together: llama.cpp's q/k permutation moves rows within a head
  const unit = call.permute ? call.permute.rows / call.permute.heads : 1;
  if (!Number.isInteger(unit) || (call.permute && call.permute.rows !== rows)) return null;
  const perSlice = Math.max(unit, Math.floor(sliceBytes / rowBytes / unit) * unit);
  if (perSlice >= rows) return null;
  const count = Math.ceil(rows / perSlice);
  const sum = new SliceSum();
  return Array.from({ length: count }, (_, index) => {
    const first = index * perSlice;
    const n = Math.min(perSlice, rows - first);
    const part = { first, count: n };
    return {
      index,
      count,
      rows: part,
      call: { ...call, part, window: { rows } },
      inputBegin: first * rowBytes,
      inputEnd: (first + n) * rowBytes,
      outputBytes: n * outRowBytes,
      inputBuffer: perSlice * rowBytes,
      outputBuffer: perSlice * outRowBytes,
      sum,
    };
  });
}

/** The remarks, statistics and sampled errors of a weight's slices, added in slice order. */
export class SliceSum {
  readonly notes: string[] = [];
  private quality: QualityStats | undefined;
  private readonly errors: number[] = [];

  add(reply: EncodeReply): void {
    this.notes.push(...reply.notes);
    if (reply.quality !== undefined) {
      this.quality = this.quality ? mergeQuality(this.quality, reply.quality) : { ...reply.quality };
    }
    if (reply.sampleErrors !== undefined) for (const e of reply.sampleErrors) this.errors.push(e);
  }

  /** The weight's statistics and histogram, when its slices were measured. */
  measured(): { quality: QualityStats; histogram: ErrorHistogram } | undefined {
    return this.quality && { quality: this.quality, histogram: histogramOf(this.errors) };
  }
}
