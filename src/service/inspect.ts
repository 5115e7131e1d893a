/**
 * A summary of a safetensors file: each tensor with its scheme, dtype, shape, stored bytes and
 * compression ratio against its source dtype. A quantized tensor's scale and zero point are
 * counted in its row, not listed on their own.
 */
import {
  QDTYPE_INFO,
  ST_DTYPE_SIZE,
  completeNow,
  completeYielding,
  numelOf,
  type Resumable,
  type StDType,
} from '../core/index.js';
import {
  DATA_SHA256_KEY,
  findQuantizedGroupsWork,
  formatOf,
  parseHeaderPrefixWork,
  type SafetensorsHeader,
} from '../format/index.js';

export interface TensorSummary {
  readonly name: string;
  /** "quantized" for a quantd.qtensor/1 tensor, "tensor" for anything stored as is. */
  readonly kind: 'quantized' | 'tensor';
  /** The stored dtype (safetensors name) or, for quantized tensors, the qdtype. */
  readonly dtype: string;
  readonly shape: readonly number[];
  readonly scheme: string | null;
  readonly mode: string | null;
  readonly axis: number | null;
  readonly group_size: number | null;
  readonly source_dtype: string | null;
  /** Bytes in the file (codes + scale + zero point for quantized tensors). */
  readonly bytes: number;
  /** Bytes of the same tensor in its source dtype. */
  readonly source_bytes: number;
  readonly ratio: number;
}

export interface FileSummary {
  readonly file: string;
  readonly format: string | null;
  readonly size: number;
  /** The data SHA-256 the metadata records, and whether it was checked (inspect --verify). */
  readonly checksum: { readonly sha256: string; readonly verified: boolean } | null;
  readonly tensors: readonly TensorSummary[];
  readonly total: { readonly bytes: number; readonly source_bytes: number; readonly ratio: number };
}

const SOURCE_SIZE: Readonly<Record<string, number>> = { float32: 4, float16: 2, bfloat16: 2 };

function ratio(source: number, stored: number): number {
  return stored === 0 ? 1 : Math.round((source / stored) * 1000) / 1000;
}

export function summarizeFile(
  header: SafetensorsHeader,
  file: string,
  size: number,
  verified = false,
): FileSummary {
  return completeNow(summarizeFileWork(header, file, size, verified));
}

/** summarizeFile in units of one tensor (../core/time-slice.ts), for the server's /v1/inspect. */
export function* summarizeFileWork(
  header: SafetensorsHeader,
  file: string,
  size: number,
  verified = false,
): Resumable<FileSummary> {
  const groups = yield* findQuantizedGroupsWork(header, file);
  const byCodes = new Map(groups.map((g) => [g.codes.name, g]));
  const companions = new Set(groups.flatMap((g) => [g.scale.name, g.zeroPoint.name]));
  const tensors: TensorSummary[] = [];
  for (const entry of header.entries) {
    yield;
    if (companions.has(entry.name)) continue;
    const group = byCodes.get(entry.name);
    if (group) {
      const bytes = [group.codes, group.scale, group.zeroPoint].reduce((n, e) => n + e.end - e.begin, 0);
      const sourceBytes = numelOf(group.layout.shape) * SOURCE_SIZE[group.sourceDtype]!;
      tensors.push({
        name: group.name,
        kind: 'quantized',
        dtype: QDTYPE_INFO[group.spec.qdtype].name,
        shape: group.layout.shape,
        scheme: group.spec.scheme,
        mode: group.spec.mode,
        axis: group.layout.axis,
        group_size: group.layout.groupSize,
        source_dtype: group.sourceDtype,
        bytes,
        source_bytes: sourceBytes,
        ratio: ratio(sourceBytes, bytes),
      });
    } else {
      const bytes = numelOf(entry.shape) * ST_DTYPE_SIZE[entry.dtype as StDType];
      tensors.push({
        name: entry.name,
        kind: 'tensor',
        dtype: entry.dtype,
        shape: entry.shape,
        scheme: null,
        mode: null,
        axis: null,
        group_size: null,
        source_dtype: null,
        bytes,
        source_bytes: bytes,
        ratio: 1,
      });
    }
  }
  const sha256 = header.metadata?.[DATA_SHA256_KEY];
  const bytes = tensors.reduce((n, t) => n + t.bytes, 0);
  const sourceBytes = tensors.reduce((n, t) => n + t.source_bytes, 0);
  return {
    file,
    format: formatOf(header),
    size,
    checksum: sha256 === undefined ? null : { sha256, verified },
    tensors,
    total: { bytes, source_bytes: sourceBytes, ratio: ratio(sourceBytes, bytes) },
  };
}

/**
 * The summary of a file from its first bytes (POST /v1/inspect: the header, and the file's size),
 * parsed and summarized with the event loop turning meanwhile (../core/time-slice.ts).
 */
export function inspectHeaderBytes(bytes: Uint8Array, size: number, source: string): Promise<FileSummary> {
  return completeYielding(
    (function* (): Resumable<FileSummary> {
      const { header } = yield* parseHeaderPrefixWork(bytes, size, source);
      return yield* summarizeFileWork(header, source, size);
    })(),
  );
}
