/** What the API sends, as the console reads it (the server's src/jobs/store.ts and reports). */

export type JobState = 'queued' | 'running' | 'succeeded' | 'failed' | 'cancelled';

export interface Job {
  readonly id: string;
  readonly state: JobState;
  readonly op: string;
  readonly input: { readonly kind: 'upload' | 'path'; readonly path?: string; readonly bytes: number };
  readonly created_at: string;
  readonly started_at: string | null;
  readonly finished_at: string | null;
  readonly progress: {
    readonly tensors_done: number;
    readonly tensors_total: number | null;
    readonly bytes_done: number;
    readonly bytes_total: number | null;
    readonly bytes_per_second: number | null;
    readonly eta_seconds: number | null;
  } | null;
  readonly error: { readonly code: string; readonly message: string } | null;
  readonly result: {
    readonly sharded: boolean;
    readonly files: ReadonlyArray<{ readonly name: string; readonly bytes: number }>;
  } | null;
}

export type JobEvent = { readonly job: Job } | { readonly removed: string };

export interface ErrorHistogram {
  readonly samples: number;
  readonly limit: number;
  readonly counts: readonly number[];
}

export interface QualityFields {
  readonly rmse: number;
  readonly max_abs_error: number;
  readonly sqnr_db: number | null;
  readonly clipped_fraction: number;
  readonly elements: number;
}

/** quantd.report/1 (whole-model runs) and quantd.layout-report/1 (`--layout`). */
export interface RawReport {
  readonly format: string;
  readonly summary?: QualityFields & {
    readonly tensors_quantized: number;
    readonly tensors_passed_through: number;
    readonly bytes_in: number;
    readonly bytes_out: number;
    readonly compression_ratio: number;
    readonly seconds: number;
  };
  readonly layout?: string;
  readonly bits_per_weight?: number | null;
  readonly tensors: ReadonlyArray<Record<string, unknown>>;
  readonly passed_through?: ReadonlyArray<{ readonly name: string; readonly reason: string }>;
}

export interface TensorFile {
  readonly name: string;
  readonly kind: string;
  readonly dtype: string;
  readonly shape: readonly number[];
  readonly scheme: string | null;
  readonly group_size: number | null;
  readonly source_dtype: string | null;
  readonly bytes: number;
  readonly source_bytes: number;
  readonly ratio: number;
}

export interface FileSummary {
  readonly format: string | null;
  readonly size: number;
  readonly tensors: readonly TensorFile[];
  readonly total: { readonly bytes: number; readonly source_bytes: number; readonly ratio: number };
}
