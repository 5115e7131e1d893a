/**
 * A layout run's report (`--report FILE` on the command line, GET /v1/jobs/ID/report for a layout
 * job): each tensor's type and why, with its bits per weight and error where the layout measures
 * them (GGUF file types; gptq and awq with calibration: the layer's output error on the
 * calibration tokens), worst measured first; the file's bits per weight, as llama-quantize
 * sums it up.
 */
import type { LayoutOptions, LayoutWriteResult } from './types.js';

export const LAYOUT_REPORT_FORMAT = 'quantd.layout-report/1';

export interface LayoutReport {
  readonly format: typeof LAYOUT_REPORT_FORMAT;
  readonly layout: string;
  readonly options: LayoutOptions;
  readonly files: readonly string[];
  readonly bits_per_weight: number | null;
  readonly tensors: LayoutWriteResult['tensors'];
}

/** The report of `result`; `files` as the reader should see them (paths given, or result names). */
export function layoutReport(
  name: string,
  options: LayoutOptions,
  result: LayoutWriteResult,
  files: readonly string[] = result.files,
): LayoutReport {
  // lowest SQNR first (the tensors worth more bits), then the unmeasured in file order; with
  // calibration (gptq, awq) the SQNR of the layer's output
  const sqnr = (t: LayoutWriteResult['tensors'][number]): number => {
    if (t.quality !== undefined) return t.quality.sqnr_db ?? Number.MAX_VALUE;
    return t.output_error === undefined ? Infinity : t.output_error.sqnr_db;
  };
  return {
    format: LAYOUT_REPORT_FORMAT,
    layout: name,
    options,
    files,
    bits_per_weight:
      result.size !== undefined && result.size.weights > 0 ? result.size.bits / result.size.weights : null,
    tensors: [...result.tensors].sort((a, b) => sqnr(a) - sqnr(b)),
  };
}
