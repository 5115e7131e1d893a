/**
 * ggml tensor types: the type table GGUF files use (`enum ggml_type` ids, elements per block,
 * bytes per block) and whole-row quantize / dequantize for the types quantd writes. Pure
 * numerics, no I/O: the GGUF container is src/format/gguf.ts, the layout
 * src/service/layouts/gguf.ts.
 *
 * Every quantized type is byte-exact with ggml's reference quantizer (`quantize_row_*_ref` of
 * ggml-quants.c, what llama.cpp's `llama-quantize` runs when no importance matrix is given);
 * see ggml-legacy.ts, ggml-kquants.ts and ggml-iquants.ts for the rounding rules, which are ggml's and not
 * torch's. F16 rounds to nearest even, as GGML_FP32_TO_FP16 does.
 */
import { QuantdError } from '../../errors/index.js';
import { float16BitsFromFloat32, float16DecodeTable } from '../float16.js';
import type { BlockDequantizer, BlockQuantizer } from './ggml-common.js';
import { dequantizeIQ4_NL, dequantizeIQ4_XS, quantizeIQ4_NL, quantizeIQ4_XS } from './ggml-iquants.js';
import {
  K_SCALE_SIZE,
  QK_K,
  dequantizeQ4_K,
  dequantizeQ5_K,
  dequantizeQ6_K,
  quantizeQ4_K,
  quantizeQ5_K,
  quantizeQ6_K,
} from './ggml-kquants.js';
import { dequantizeQ2_K, dequantizeQ3_K, quantizeQ2_K, quantizeQ3_K } from './ggml-kquants-low.js';
import {
  dequantizeQ4_0,
  dequantizeQ4_1,
  dequantizeQ5_0,
  dequantizeQ5_1,
  dequantizeQ8_0,
  quantizeQ4_0,
  quantizeQ4_1,
  quantizeQ5_0,
  quantizeQ5_1,
  quantizeQ8_0,
} from './ggml-legacy.js';

export { QK_K, K_SCALE_SIZE };

export interface GgmlTypeInfo {
  /** ggml's name (ggml_type_name): F32, Q4_K, ... */
  readonly name: string;
  /** The `enum ggml_type` value stored in GGUF tensor infos. */
  readonly id: number;
  /** Elements per block (ggml_blck_size); 1 for plain types. */
  readonly blockSize: number;
  /** Bytes per block (ggml_type_size). */
  readonly typeSize: number;
  /** The TypeScript reference quantizer of one block (the types quantd writes). */
  readonly quantize?: BlockQuantizer;
  /** The TypeScript reference dequantizer of one block (the types quantd reads). */
  readonly dequantize?: BlockDequantizer;
  /** The C kernels' id of this type (`ggmlQuantize`), byte-identical to `quantize`; none: TS only. */
  readonly kernel?: number;
}

type Codec = Pick<GgmlTypeInfo, 'quantize' | 'dequantize' | 'kernel'>;

const info = (
  name: string,
  id: number,
  blockSize: number,
  typeSize: number,
  codec: Codec = {},
): GgmlTypeInfo => ({
  name,
  id,
  blockSize,
  typeSize,
  ...codec,
});

/**
 * Every type a GGUF v3 file may hold (ids 4, 5 and 31–33, 36–38 were removed from ggml). The
 * reader validates any of them; quantd quantizes and dequantizes the ones in QUANT_TYPES plus
 * F32, F16 and (reading only) BF16.
 */
export const GGML_TYPES: readonly GgmlTypeInfo[] = [
  info('F32', 0, 1, 4),
  info('F16', 1, 1, 2),
  info('Q4_0', 2, 32, 18, { quantize: quantizeQ4_0, dequantize: dequantizeQ4_0, kernel: 1 }),
  info('Q4_1', 3, 32, 20, { quantize: quantizeQ4_1, dequantize: dequantizeQ4_1, kernel: 2 }),
  info('Q5_0', 6, 32, 22, { quantize: quantizeQ5_0, dequantize: dequantizeQ5_0, kernel: 3 }),
  info('Q5_1', 7, 32, 24, { quantize: quantizeQ5_1, dequantize: dequantizeQ5_1, kernel: 4 }),
  info('Q8_0', 8, 32, 34, { quantize: quantizeQ8_0, dequantize: dequantizeQ8_0, kernel: 0 }),
  info('Q8_1', 9, 32, 36),
  info('Q2_K', 10, 256, 84, { quantize: quantizeQ2_K, dequantize: dequantizeQ2_K, kernel: 8 }),
  info('Q3_K', 11, 256, 110, { quantize: quantizeQ3_K, dequantize: dequantizeQ3_K, kernel: 9 }),
  info('Q4_K', 12, 256, 144, { quantize: quantizeQ4_K, dequantize: dequantizeQ4_K, kernel: 5 }),
  info('Q5_K', 13, 256, 176, { quantize: quantizeQ5_K, dequantize: dequantizeQ5_K, kernel: 7 }),
  info('Q6_K', 14, 256, 210, { quantize: quantizeQ6_K, dequantize: dequantizeQ6_K, kernel: 6 }),
  info('Q8_K', 15, 256, 292),
  info('IQ2_XXS', 16, 256, 66),
  info('IQ2_XS', 17, 256, 74),
  info('IQ3_XXS', 18, 256, 98),
  info('IQ1_S', 19, 256, 50),
  info('IQ4_NL', 20, 32, 18, { quantize: quantizeIQ4_NL, dequantize: dequantizeIQ4_NL, kernel: 10 }),
  info('IQ3_S', 21, 256, 110),
  info('IQ2_S', 22, 256, 82),
  info('IQ4_XS', 23, 256, 136, { quantize: quantizeIQ4_XS, dequantize: dequantizeIQ4_XS, kernel: 11 }),
  info('I8', 24, 1, 1),
  info('I16', 25, 1, 2),
  info('I32', 26, 1, 4),
  info('I64', 27, 1, 8),
  info('F64', 28, 1, 8),
  info('IQ1_M', 29, 256, 56),
  info('BF16', 30, 1, 2),
  info('TQ1_0', 34, 256, 54),
  info('TQ2_0', 35, 256, 66),
  info('MXFP4', 39, 32, 17),
];

const BY_ID = new Map(GGML_TYPES.map((t) => [t.id, t]));
const BY_NAME = new Map(GGML_TYPES.map((t) => [t.name, t]));

export function ggmlTypeById(id: number): GgmlTypeInfo | undefined {
  return BY_ID.get(id);
}

export function ggmlTypeByName(name: string): GgmlTypeInfo | undefined {
  return BY_NAME.get(name);
}

/** The quantized types quantd writes (the GGUF layout's `type` option). */
export const QUANT_TYPES = [
  'Q8_0',
  'Q4_0',
  'Q4_1',
  'Q5_0',
  'Q5_1',
  'Q2_K',
  'Q3_K',
  'Q4_K',
  'Q5_K',
  'Q6_K',
  'IQ4_NL',
  'IQ4_XS',
] as const;
export type GgmlQuantType = (typeof QUANT_TYPES)[number];
/** The types quantd writes into a GGUF file. */
export type GgmlWriteType = GgmlQuantType | 'F32' | 'F16';

export function isQuantType(name: string): name is GgmlQuantType {
  return (QUANT_TYPES as readonly string[]).includes(name);
}

// The block structs of ggml-common.h, field by field; checked against the table at load time as
// ggml's static_asserts check sizeof(block_*).
const HALF = 2; // ggml_half
const STRUCT_BYTES: Readonly<Record<GgmlQuantType, number>> = {
  Q8_0: HALF + 32, // d, qs[32]
  Q4_0: HALF + 32 / 2, // d, qs[16]
  Q4_1: 2 * HALF + 32 / 2, // d, m, qs[16]
  Q5_0: HALF + 4 + 32 / 2, // d, qh[4], qs[16]
  Q5_1: 2 * HALF + 4 + 32 / 2, // d, m, qh[4], qs[16]
  Q2_K: QK_K / 16 + QK_K / 4 + 2 * HALF, // scales[16], qs[64], d, dmin
  Q3_K: QK_K / 8 + QK_K / 4 + 12 + HALF, // hmask[32], qs[64], scales[12], d
  Q4_K: 2 * HALF + K_SCALE_SIZE + QK_K / 2, // d, dmin, scales[12], qs[128]
  Q5_K: 2 * HALF + K_SCALE_SIZE + QK_K / 8 + QK_K / 2, // d, dmin, scales[12], qh[32], qs[128]
  Q6_K: HALF + QK_K / 16 + (3 * QK_K) / 4, // ql[128], qh[64], scales[16], d
  IQ4_NL: HALF + 32 / 2, // d, qs[16]
  IQ4_XS: HALF + 2 + QK_K / 64 + QK_K / 2, // d, scales_h, scales_l[4], qs[128]
};
for (const name of QUANT_TYPES) {
  const t = BY_NAME.get(name);
  if (t === undefined || t.typeSize !== STRUCT_BYTES[name] || !t.quantize || !t.dequantize) {
    throw new QuantdError('INTERNAL', { detail: `wrong ${name} block size/padding, or no reference codec` });
  }
}

function typeInfo(name: string): GgmlTypeInfo {
  const t = BY_NAME.get(name);
  if (t === undefined) throw new QuantdError('INTERNAL', { detail: `unknown ggml type ${name}` });
  return t;
}

/** ggml_row_size: bytes of a row of `ne0` elements (ne0 a multiple of the block size). */
export function ggmlRowBytes(type: GgmlTypeInfo, ne0: number): number {
  if (ne0 % type.blockSize !== 0) {
    throw new QuantdError('INTERNAL', {
      detail: `a ${type.name} row needs a multiple of ${type.blockSize} elements, got ${ne0}`,
    });
  }
  return (ne0 / type.blockSize) * type.typeSize;
}

/** Bytes of a tensor of `numel` elements whose rows have `ne0` elements. */
export function ggmlTensorBytes(type: GgmlTypeInfo, ne0: number, numel: number): number {
  if (numel === 0) return 0;
  return (numel / ne0) * ggmlRowBytes(type, ne0);
}

/**
 * Encodes float32 values (rows of `ne0`, any number of rows) as `type`: F32, F16 (round to
 * nearest even) or a quantized type (blocks along each row; rows are independent, and with ne0
 * a multiple of the block the blocks simply follow one another).
 */
export function ggmlEncode(type: GgmlWriteType, x: Float32Array, ne0: number, out?: Uint8Array): Uint8Array {
  const t = typeInfo(type);
  const bytes = ggmlTensorBytes(t, ne0, x.length);
  const dst = out ?? new Uint8Array(bytes);
  if (dst.length < bytes) throw new QuantdError('INTERNAL', { detail: `${type} output buffer too small` });
  if (type === 'F32') {
    const view = new DataView(dst.buffer, dst.byteOffset, bytes);
    for (let i = 0; i < x.length; i++) view.setFloat32(4 * i, x[i]!, true);
  } else if (type === 'F16') {
    for (let i = 0; i < x.length; i++) {
      const h = float16BitsFromFloat32(x[i]!);
      dst[2 * i] = h & 0xff;
      dst[2 * i + 1] = h >>> 8;
    }
  } else {
    const quantize = t.quantize!;
    const blocks = x.length / t.blockSize;
    for (let b = 0; b < blocks; b++) quantize(x, b * t.blockSize, dst, b * t.typeSize);
  }
  return dst;
}

/** Whether quantd can decode tensors of this type to float32. */
export function canDecode(name: string): boolean {
  return name === 'F32' || name === 'F16' || name === 'BF16' || isQuantType(name);
}

/** Decodes `numel` elements of `type` (one of canDecode) to float32. */
export function ggmlDecode(type: string, bytes: Uint8Array, numel: number, out?: Float32Array): Float32Array {
  const t = typeInfo(type);
  const y = out ?? new Float32Array(numel);
  const need = numel === 0 ? 0 : (numel / t.blockSize) * t.typeSize;
  if (numel % t.blockSize !== 0 || bytes.length < need || y.length < numel) {
    throw new QuantdError('INTERNAL', {
      detail: `${type}: ${bytes.length} bytes cannot hold ${numel} elements`,
    });
  }
  if (type === 'F32') {
    const view = new DataView(bytes.buffer, bytes.byteOffset, need);
    for (let i = 0; i < numel; i++) y[i] = view.getFloat32(4 * i, true);
  } else if (type === 'F16') {
    const table = float16DecodeTable();
    for (let i = 0; i < numel; i++) y[i] = table[bytes[2 * i]! | (bytes[2 * i + 1]! << 8)]!;
  } else if (type === 'BF16') {
    const bits = new Uint32Array(y.buffer, y.byteOffset, numel);
    for (let i = 0; i < numel; i++) bits[i] = ((bytes[2 * i]! | (bytes[2 * i + 1]! << 8)) << 16) >>> 0;
  } else if (isQuantType(type)) {
    const dequantize = t.dequantize!;
    const blocks = numel / t.blockSize;
    for (let b = 0; b < blocks; b++) dequantize(bytes, b * t.typeSize, y, b * t.blockSize);
  } else {
    throw new QuantdError('INTERNAL', { detail: `quantd cannot decode ggml type ${type}` });
  }
  return y;
}
