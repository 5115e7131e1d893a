/**
 * The quality report of a model run: per quantized tensor, how far dequantize(quantize(x)) is
 * from x (RMSE, max |error|, SQNR in dB, fraction of values clamped to the range), measured by
 * the kernels while quantizing; a whole-model summary; tensors listed worst first (lowest SQNR),
 * so the layers worth keeping at higher precision are at the top.
 */
import {
  emptyQuality,
  type ErrorHistogram,
  mergeQuality,
  summarizeQuality,
  type QualityStats,
  type QualitySummary,
} from '../core/index.js';
import type { StepReport } from './execute.js';

export const REPORT_FORMAT = 'quantd.report/1';

export interface TensorQuality extends QualitySummary {
  readonly name: string;
  /** The recipe rule that chose the spec ("default", or e.g. `rule 2 (*.mlp.*)`). */
  readonly rule: string;
  readonly qdtype: string;
  readonly scheme: string;
  readonly mode: string;
  readonly group_size: number | null;
  readonly axis: number | null;
  readonly shape: readonly number[];
  readonly source_dtype: string;
  readonly bytes_in: number;
  readonly bytes_out: number;
  /** The error's distribution on a sample of the tensor (absent where the path does not take it). */
  readonly error_histogram?: ErrorHistogram;
}

export interface PassedThrough {
  readonly name: string;
  readonly dtype: string;
  readonly shape: readonly number[];
  readonly reason: string;
}

export interface QualityReport {
  readonly format: typeof REPORT_FORMAT;
  readonly summary: QualitySummary & {
    readonly tensors_quantized: number;
    readonly tensors_passed_through: number;
    readonly bytes_in: number;
    readonly bytes_out: number;
    /** Input bytes over output bytes, the whole model. */
    readonly compression_ratio: number;
    /** The (up to) five lowest-SQNR tensors. */
    readonly worst: readonly string[];
    readonly seconds: number;
  };
  readonly tensors: readonly TensorQuality[];
  readonly passed_through: readonly PassedThrough[];
  /** Recipe rules that matched no tensor (a typo in a glob is the usual cause). */
  readonly unused_rules: readonly string[];
}

/** Lower SQNR is worse; a lossless tensor (null: no error at all) is best; ties by larger RMSE. */
function worstFirst(a: TensorQuality, b: TensorQuality): number {
  const sa = a.sqnr_db ?? Infinity;
  const sb = b.sqnr_db ?? Infinity;
  if (sa !== sb) return sa < sb ? -1 : 1;
  return b.rmse - a.rmse || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
}

/** Collects step reports (in any number of files) into one QualityReport. */
export class ReportBuilder {
  private readonly tensors: TensorQuality[] = [];
  private readonly passed: PassedThrough[] = [];
  private readonly total: QualityStats = emptyQuality();
  private bytesIn = 0;
  private bytesOut = 0;
  private readonly started = performance.now();

  add(r: StepReport): void {
    const step = r.step;
    this.bytesIn += r.bytesIn;
    this.bytesOut += r.bytesOut;
    if (step.kind === 'copy') {
      if (step.reason !== undefined) {
        const { name, dtype, shape } = step.entry;
        this.passed.push({ name, dtype, shape, reason: step.reason });
      }
      return;
    }
    if (step.kind !== 'quantize' || !r.quality) return;
    mergeQuality(this.total, r.quality);
    const { spec, layout } = step;
    this.tensors.push({
      name: r.name,
      rule: step.by,
      qdtype: spec.qdtype,
      scheme: spec.scheme,
      mode: spec.mode,
      group_size: layout.groupSize,
      axis: layout.axis,
      shape: layout.shape,
      source_dtype: step.dtype,
      bytes_in: r.bytesIn,
      bytes_out: r.bytesOut,
      ...summarizeQuality(r.quality),
      ...(r.histogram && { error_histogram: r.histogram }),
    });
  }

  build(unusedRules: readonly string[] = []): QualityReport {
    const tensors = [...this.tensors].sort(worstFirst);
    return {
      format: REPORT_FORMAT,
      summary: {
        tensors_quantized: tensors.length,
        tensors_passed_through: this.passed.length,
        bytes_in: this.bytesIn,
        bytes_out: this.bytesOut,
        compression_ratio: this.bytesOut > 0 ? this.bytesIn / this.bytesOut : 0,
        ...summarizeQuality(this.total),
        worst: tensors.slice(0, 5).map((t) => t.name),
        seconds: (performance.now() - this.started) / 1000,
      },
      tensors,
      passed_through: this.passed,
      unused_rules: unusedRules,
    };
  }
}
