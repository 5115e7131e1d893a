/**
 * What every GGUF writer of quantd shares (a safetensors file in, ./gguf.ts; a Hugging Face
 * folder in, ./gguf-hf/): llama.cpp's file-type codes and constants, and the ggml type each
 * tensor gets, by llama.cpp's rules.
 */
import { ggmlTypeByName, type GgmlQuantType, type GgmlWriteType } from '../../core/interop/ggml.js';
import { QuantdError } from '../../errors/index.js';

/** llama_ftype (general.file_type) of a file whose weights are mostly `type`. */
export const LLAMA_FTYPE: Readonly<Record<GgmlQuantType, number>> = {
  Q4_0: 2, // LLAMA_FTYPE_MOSTLY_Q4_0
  Q4_1: 3, // LLAMA_FTYPE_MOSTLY_Q4_1
  Q8_0: 7, // LLAMA_FTYPE_MOSTLY_Q8_0
  Q5_0: 8, // LLAMA_FTYPE_MOSTLY_Q5_0
  Q5_1: 9, // LLAMA_FTYPE_MOSTLY_Q5_1
  Q2_K: 10, // LLAMA_FTYPE_MOSTLY_Q2_K
  Q3_K: 11, // LLAMA_FTYPE_MOSTLY_Q3_K_S: all-Q3_K, as `llama-quantize --pure ... Q3_K_S` writes
  Q4_K: 14, // LLAMA_FTYPE_MOSTLY_Q4_K_S: all-Q4_K, as `llama-quantize --pure ... Q4_K_S` writes
  Q5_K: 16, // LLAMA_FTYPE_MOSTLY_Q5_K_S: all-Q5_K, as `llama-quantize --pure ... Q5_K_S` writes
  Q6_K: 18, // LLAMA_FTYPE_MOSTLY_Q6_K
  IQ4_NL: 25, // LLAMA_FTYPE_MOSTLY_IQ4_NL
  IQ4_XS: 30, // LLAMA_FTYPE_MOSTLY_IQ4_XS
};

/** llama-quantize's type for a row that is not a multiple of a super-block (but is of 32). */
const FALLBACK: Partial<Record<GgmlQuantType, GgmlQuantType>> = {
  Q2_K: 'Q4_0',
  Q3_K: 'Q4_0',
  Q4_K: 'Q5_0',
  Q5_K: 'Q5_1',
  Q6_K: 'Q8_0',
  IQ4_XS: 'IQ4_NL',
};

/** GGML_QNT_VERSION: the quantization format version llama.cpp writes. */
export const QUANTIZATION_VERSION = 2;
export const ALIGNMENT = 32;

export interface TensorChoice {
  readonly type: GgmlWriteType;
  readonly note?: string;
}

/**
 * The ggml type llama.cpp would give a float tensor of this name and (safetensors) shape when
 * asked for `quant`; see the module comment. The row is the last safetensors dimension.
 */
export function ggufTensorType(name: string, shape: readonly number[], quant: GgmlQuantType): TensorChoice {
  if (shape.length <= 1) return { type: 'F32', note: 'rank ≤ 1 (norms, biases) stays F32' };
  if (!name.endsWith('weight'))
    return { type: 'F16', note: 'not a weight: F16 as convert_hf_to_gguf.py writes it' };
  const ne0 = shape[shape.length - 1]!;
  const block = ggmlTypeByName(quant)!.blockSize;
  if (ne0 % block === 0) return { type: quant };
  const fallback = FALLBACK[quant];
  if (fallback !== undefined && ne0 % 32 === 0) {
    return {
      type: fallback,
      note: `${fallback} (row of ${ne0} is not a multiple of ${block}; llama-quantize's fallback)`,
    };
  }
  return { type: 'F16', note: `F16 (row of ${ne0} is not a multiple of ${fallback ? 32 : block})` };
}

const SIZE_UNITS: Readonly<Record<string, number>> = { '': 1, K: 1e3, M: 1e6, G: 1e9, T: 1e12 };

/**
 * The `split_max_size` option: bytes of tensor data per file of a split set, in llama.cpp's
 * units (decimal: 500M = 500·10⁶ bytes, 2G = 2·10⁹), as its gguf-split and converter take them.
 */
export function splitMaxSize(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const m = /^(\d+)([KMGT]?)$/i.exec(value.trim());
  const bytes = m ? Number(m[1]) * SIZE_UNITS[m[2]!.toUpperCase()]! : NaN;
  if (!Number.isSafeInteger(bytes) || bytes < 1) {
    throw new QuantdError('OPTION_INVALID', {
      option: 'split_max_size',
      detail: 'must be a size in bytes, or with K, M, G or T (decimal units as llama.cpp: 500M, 2G)',
      value,
    });
  }
  return bytes;
}
