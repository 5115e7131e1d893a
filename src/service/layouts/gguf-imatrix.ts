/**
 * An importance matrix (llama-quantize --imatrix) fitted to the tensors of a GGUF conversion,
 * whatever chose their types: llama-quantize's file-type rules (gguf-mixture.ts) or one type for
 * every weight (`type=Q4_K`, what `llama-quantize --pure … Q4_K_S` gives). The fitting is
 * llama-quantize's: a tensor without an entry is quantized without one; an entry whose size is
 * not the row's is an error naming the tensor (token_embd excepted: llama.cpp then ignores it);
 * the file records the matrix as quantize.imatrix.*.
 */
import { basename } from 'node:path';

import { WEIGHTED_QUANTIZERS, takesImatrix, usesImatrix } from '../../core/interop/ggml-imatrix.js';
import { QUANT_TYPES, isQuantType } from '../../core/interop/ggml.js';
import type { MixtureTensor } from '../../core/interop/llama-mixtures.js';
import { QuantdError } from '../../errors/index.js';
import type { GgufKv } from '../../format/gguf.js';
import type { ImportanceMatrix } from '../../format/imatrix.js';

export interface FittedMatrix {
  /** Per quantized tensor with an entry in the importance matrix: its column weights. */
  readonly weights: ReadonlyMap<string, Float32Array>;
  /** quantize.imatrix.* as llama-quantize records the matrix it used. */
  readonly kvs: readonly GgufKv[];
}

/** The matrix's weights for each tensor of `typeOf`'s type that has an entry, and the metadata. */
export function fitImportanceMatrix(
  matrix: ImportanceMatrix,
  path: string,
  tensors: readonly MixtureTensor[],
  typeOf: (name: string) => string,
): FittedMatrix {
  const weights = new Map<string, Float32Array>();
  for (const t of tensors) {
    const type = typeOf(t.name);
    const entry = matrix.entries.get(t.name);
    if (entry === undefined || type === 'F32' || type === 'F16') continue;
    if (entry.length !== t.ne[0]! * (t.ne[2] ?? 1)) {
      if (t.name === 'token_embd.weight' || t.name === 'per_layer_token_embd.weight') continue;
      throw new QuantdError('IMATRIX_INVALID', {
        source: basename(path),
        detail: `${t.name}: ${entry.length} weights, but its rows have ${t.ne[0]} columns (an importance matrix of another model?)`,
      });
    }
    if (!takesImatrix(type)) {
      throw new QuantdError('FEATURE_UNSUPPORTED', {
        detail: `tensor ${t.name}: quantd does not quantize ${type} with an importance matrix yet (it does ${Object.keys(WEIGHTED_QUANTIZERS).join(', ')})`,
      });
    }
    weights.set(t.name, entry);
  }
  const u32 = (key: string, value: number): GgufKv => ({ key, value: { type: 'uint32', value } });
  const str = (key: string, value: string): GgufKv => ({ key, value: { type: 'string', value } });
  const kvs = [
    str('quantize.imatrix.file', basename(path).slice(0, 127)),
    ...(matrix.datasets.length > 0
      ? [str('quantize.imatrix.dataset', matrix.datasets[0]!.slice(0, 127))]
      : []),
    u32('quantize.imatrix.entries_count', matrix.entries.size),
    ...(matrix.chunks > 0 ? [u32('quantize.imatrix.chunks_count', matrix.chunks)] : []),
  ];
  return { weights, kvs };
}

/** The types `imatrix` may go with when `type` (not `ftype`) is given. */
export const SINGLE_TYPES_WITH_IMATRIX = QUANT_TYPES.filter(usesImatrix);

/**
 * `imatrix` beside `type` (no `ftype`): the matrix's path, or a refusal when the type is one whose
 * bytes the matrix would not change — Q8_0 (ggml discards the weights), F16, F32 — since a
 * matrix given for nothing is a mistake to report, not to ignore. (`ftype=Q8_0` still takes one,
 * as llama-quantize does, and records it.)
 */
export function singleTypeImatrix(imatrix: string | undefined, type: string): string | undefined {
  if (imatrix === undefined) return undefined;
  if (imatrix.trim() === '') {
    throw new QuantdError('OPTION_INVALID', {
      option: 'imatrix',
      detail: 'must name a file',
      value: imatrix,
    });
  }
  if (!isQuantType(type) || !usesImatrix(type)) {
    throw new QuantdError('OPTION_INVALID', {
      option: 'imatrix',
      detail: `does not change ${type} (${type === 'Q8_0' ? "ggml's Q8_0 quantizer ignores an importance matrix" : 'not a quantized type'}); with type it takes ${SINGLE_TYPES_WITH_IMATRIX.join(', ')}, or give a llama-quantize file type (ftype=…)`,
      value: imatrix,
    });
  }
  return imatrix;
}
