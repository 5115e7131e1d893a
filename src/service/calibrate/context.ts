/** What every calibration from text shares: where it works, how it reports, what it runs on. */
import type { Compute } from '../../core/compute.js';
import type { Encoding } from '../../kernels/encoders.js';
import type { OrtSessionOptions } from '../engines/onnxruntime.js';

export interface CalibrationContext {
  /** A directory for work files (graphs, hidden states), removed by the caller. */
  readonly work: string;
  readonly compute: Compute;
  readonly encoding: Encoding;
  readonly seqLen: number;
  readonly ort: OrtSessionOptions;
  readonly signal?: AbortSignal | undefined;
  /** What the engine is loaded for, in an ENGINE_UNAVAILABLE message. */
  readonly purpose: string;
  readonly onProgress?: ((stage: string, done: number, total: number) => void) | undefined;
}
