/**
 * bitsandbytes 4-bit blockwise quantization (NF4 and FP4), as `bitsandbytes.functional.
 * quantize_4bit` computes it with its CUDA kernel (`kQuantizeBlockwise` in csrc/kernels.cu), the
 * path transformers takes for `load_in_4bit`:
 * ```
 * the tensor is flattened (row-major) into blocks of `blocksize` values (default 64, last block partial)
 * absmax[b] = max |x| over block b                      float32 (of the float16/bfloat16/float32 input)
 * inv       = 1.0f / absmax[b]                           float32
 * code      = dQuantizeNF4(x * inv) / dQuantizeFP4(x * inv)     x * inv in float32
 * byte      = code(x[2i]) << 4 | code(x[2i+1])           high nibble first; an odd count pads with 0
 * ```
 * The code choice is NOT an argmin over the table: it is the kernel's decision tree on float32
 * thresholds (the midpoints between neighbouring code values written as float literals) with
 * strict `x > t` comparisons, so a value exactly on a threshold takes the LOWER code. The torch
 * fallback that bitsandbytes uses on CPU (`backends/default/ops.py`: argmin of |x·inv − code|,
 * first index on ties, after clamping to [−1, 1]) can differ for values within a float32 rounding
 * of a midpoint; quantd follows the kernel. A block whose absmax is 0 gives 0·∞ = NaN in the
 * kernel, which every comparison rejects: its codes are 0 (NF4: −1.0 · 0 = −0 on dequantization;
 * FP4: 0).
 *
 * FP4 codes are sign-magnitude: bit 3 is the sign (`x < 0`, so −0 is positive), bits 0–2 index
 * [0, 0.0052083, 0.6667, 1, 0.3333, 0.5, 0.1667, 0.25] (bitsandbytes' fp4 table
 * [0, 0.0625, 8, 12, 4, 6, 2, 3, ...] divided by 12).
 *
 * Dequantization is `float32(quant_map[code] · absmax[b])`, the CUDA kernel's and the torch
 * fallback's product.
 */
import { QuantdError } from '../../errors/index.js';
import { fround } from '../rounding.js';

export type BnbQuantType = 'nf4' | 'fp4';

/**
 * `get_4bit_type('nf4')`: the 16 NF4 values as float32 (torch.tensor of the Python literals),
 * divided by their absolute maximum (1.0, so unchanged).
 */
export const NF4_CODE: Float32Array = Float32Array.from([
  -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
  -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
  0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
]);

/**
 * `get_4bit_type('fp4')`: [0, 0.0625, 8, 12, 4, 6, 2, 3, -0, -0.0625, -8, -12, -4, -6, -2, -3] as
 * float32, divided by 12 in float32. The Python literal `-0` is the integer 0, so entry 8 is +0.0.
 */
export const FP4_CODE: Float32Array = Float32Array.from(
  [0, 0.0625, 8, 12, 4, 6, 2, 3, 0, -0.0625, -8, -12, -4, -6, -2, -3].map((v) => fround(fround(v) / 12)),
);

export function codeTable(type: BnbQuantType): Float32Array {
  return type === 'nf4' ? NF4_CODE : FP4_CODE;
}

// dQuantizeNF4's thresholds, float32 like the kernel's `f` literals.
const N = (x: number): number => fround(x);
const NF4_T = {
  t0: N(0.03979014977812767),
  t1: N(0.3893125355243683),
  t11: N(0.6427869200706482),
  t111: N(0.8614784181118011),
  t110: N(0.5016634166240692),
  t10: N(0.2035212516784668),
  t101: N(0.2920137718319893),
  t100: N(0.1202552504837513),
  tn0: N(-0.33967943489551544),
  tn01: N(-0.13791173323988914),
  tn011: N(-0.045525018125772476),
  tn010: N(-0.23460740596055984),
  tn00: N(-0.6106329262256622),
  tn001: N(-0.4599952697753906),
  tn000: N(-0.8480964004993439),
};

/** The NF4 code of a float32 value in [−1, 1] (bitsandbytes' dQuantizeNF4). NaN gives 0. */
export function nf4Code(x: number): number {
  const t = NF4_T;
  if (x > t.t0) {
    if (x > t.t1) {
      if (x > t.t11) return x > t.t111 ? 0b1111 : 0b1110;
      return x > t.t110 ? 0b1101 : 0b1100;
    }
    if (x > t.t10) return x > t.t101 ? 0b1011 : 0b1010;
    return x > t.t100 ? 0b1001 : 0b1000;
  }
  if (x > t.tn0) {
    if (x > t.tn01) return x > t.tn011 ? 0b0111 : 0b0110;
    return x > t.tn010 ? 0b0101 : 0b0100;
  }
  if (x > t.tn00) return x > t.tn001 ? 0b0011 : 0b0010;
  return x > t.tn000 ? 0b0001 : 0b0000;
}

const FP4_T = {
  a: N(0.29166667),
  b: N(0.583333),
  c: N(0.8333333),
  d: N(0.4166667),
  e: N(0.0859375),
  f: N(0.20833333),
  g: N(0.00260417),
};

/** The FP4 code of a float32 value in [−1, 1] (bitsandbytes' dQuantizeFP4). NaN gives 0. */
export function fp4Code(x: number): number {
  const sign = x < 0 ? 0b1000 : 0;
  const a = Math.abs(x);
  const t = FP4_T;
  if (a > t.a) {
    if (a > t.b) return (a > t.c ? 0b0011 : 0b0010) + sign;
    return (a > t.d ? 0b0101 : 0b0100) + sign;
  }
  if (a > t.e) return (a > t.f ? 0b0111 : 0b0110) + sign;
  return (a > t.g ? 0b0001 : 0b0000) + sign;
}

export interface BnbPacked {
  /** ceil(n/2) bytes, high nibble first. */
  readonly packed: Uint8Array;
  /** float32, one per block. */
  readonly absmax: Float32Array;
}

export const BNB_BLOCKSIZES: readonly number[] = [64, 128, 256, 512, 1024, 2048, 4096];

/** Quantizes the float32 values `x` (flattened, row-major) blockwise to 4 bits. */
export function bnbQuantize(
  tensor: string,
  x: Float32Array,
  type: BnbQuantType,
  blocksize: number,
): BnbPacked {
  const n = x.length;
  const blocks = Math.ceil(n / blocksize);
  const absmax = new Float32Array(blocks);
  const packed = new Uint8Array(Math.ceil(n / 2));
  const code = type === 'nf4' ? nf4Code : fp4Code;
  for (let b = 0; b < blocks; b++) {
    const begin = b * blocksize;
    const end = Math.min(begin + blocksize, n);
    let m = 0;
    for (let i = begin; i < end; i++) {
      const v = x[i]!;
      if (!Number.isFinite(v)) {
        throw new QuantdError('INPUT_NOT_FINITE', { tensor, value: v, index: i, op: `${type} quantization` });
      }
      const a = Math.abs(v);
      if (a > m) m = a;
    }
    absmax[b] = m;
    const inv = fround(1 / m); // Infinity for an all-zero block, as in the kernel
    for (let i = begin; i < end; i++) {
      const c = code(fround(x[i]! * inv));
      packed[i >>> 1]! |= i & 1 ? c : c << 4;
    }
    // The kernel loads a missing last element of an odd count as 0 and quantizes it too.
    if (end === n && n & 1) packed[n >>> 1]! |= code(fround(0 * inv));
  }
  return { packed, absmax };
}

/** float32 values of `n` packed 4-bit codes: quant_map[code] · absmax[block]. */
export function bnbDequantize(
  packed: Uint8Array,
  absmax: Float32Array,
  quantMap: Float32Array,
  blocksize: number,
  n: number,
): Float32Array {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    const byte = packed[i >>> 1]!;
    const c = i & 1 ? byte & 15 : byte >>> 4;
    out[i] = fround(quantMap[c]! * absmax[Math.floor(i / blocksize)]!);
  }
  return out;
}

/**
 * absmax of a double-quantized ("compress_statistics") quant state: bitsandbytes'
 * dequantize_blockwise of the uint8 codes with the nested code book and nested absmax
 * (float32 product), plus the offset (float32 sum).
 */
export function bnbNestedAbsmax(
  codes: Uint8Array,
  nestedAbsmax: Float32Array,
  nestedMap: Float32Array,
  nestedBlocksize: number,
  offset: number,
): Float32Array {
  const out = new Float32Array(codes.length);
  const off = fround(offset);
  for (let i = 0; i < codes.length; i++) {
    out[i] = fround(fround(nestedMap[codes[i]!]! * nestedAbsmax[Math.floor(i / nestedBlocksize)]!) + off);
  }
  return out;
}

/**
 * The JSON text bitsandbytes stores in `weight.quant_state.bitsandbytes__<type>` (QuantState.as_dict
 * packed: Python json.dumps of {quant_type, blocksize, dtype, shape}, default separators).
 */
export function bnbQuantStateJson(
  type: BnbQuantType,
  blocksize: number,
  dtype: 'float32' | 'float16' | 'bfloat16',
  shape: readonly number[],
): string {
  return `{"quant_type": "${type}", "blocksize": ${blocksize}, "dtype": "${dtype}", "shape": [${shape.join(', ')}]}`;
}
