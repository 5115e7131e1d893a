/**
 * ONNX 4-bit weights: ONNX Runtime's `com.microsoft.MatMulNBits` (the numerics of ORT's own
 * quantizer, bit for bit) and the standard `QuantizeLinear` (opset 21) to int4 / uint4, per axis
 * and blocked, as a reference.
 *
 * ## MatMulNBits (ORT contrib op, docs/ContribOperators.md; kernel checks in
 * contrib_ops/cpu/quantization/matmul_nbits_helper.h)
 *
 * `Y = A · dequant(B)` with A `[…, K]` and the logical weight B `[K, N]`. B is quantized in blocks of
 * `block_size` (a power of two ≥ 16) along K, separately for each of the N output columns:
 *
 * - `B` uint8 `[N, k_blocks, blob_size]`, k_blocks = ⌈K / block_size⌉, blob_size = block_size / 2:
 *   column n's codes in k order, two per byte, **low nibble first** (k even → bits 0–3);
 * - `scales` (A's float type) `[N · k_blocks]` (or `[N, k_blocks]`), column-major: n · k_blocks + b;
 * - `zero_points` uint8 `[N · ⌈k_blocks / 2⌉]` (or 2-D), packed like B but **padded per column**:
 *   block b of column n is nibble (b mod 2) of byte n · ⌈k_blocks/2⌉ + ⌊b/2⌋; absent → 8.
 * - dequantized weight `(code − zero_point) · scale` (int subtraction, float32 multiply).
 *
 * An nn.Linear weight W is `[out, in]` = `[N, K]` and computes `x · Wᵀ`, so B = Wᵀ: column n of B is
 * row n of W. The safetensors weight therefore needs no transpose — its row n, in order, is exactly
 * the k-run ORT quantizes for output column n.
 *
 * ## The quantizer (onnxruntime/python/tools/quantization/matmul_4bits_quantizer.py →
 * `quantize_matmul_4bits` (onnxruntime_pybind_quant.cc) → `MlasQuantizeBlockwise<T, 4>` columnwise
 * (core/mlas/lib/q4_dq.cpp, `BlockwiseQuantizer::quantizeAndTranspose`, `range2scalezp`,
 * `range2scale`)), per block, all float32 (T = float16 reads and stores halves):
 * ```
 * min, max over the block's values (scanned from +FLT_MAX / −FLT_MAX)
 * asymmetric (is_symmetric = False, the tool's default):
 *   min = std::min(min, 0); max = std::max(max, 0)
 *   scale = (max − min) / 15
 *   zp_f  = scale != 0 ? 0 − min / scale : min
 *   zp    = zp_f < 0 ? 0 : zp_f > 15 ? 15 : (uint8) roundf(zp_f)            roundf: half AWAY from 0
 * symmetric: m = |max| > |min| ? max : min; scale = −m / 8; zp = 8  (no zero_points input is written)
 * scale is stored as T (float16 rounds it, to nearest even) and read back for the codes:
 *   recip = scale != 0 ? 1 / scale : 0
 *   code  = (uint8) clamp(roundf(v · recip + zp), 0, 15)
 * ```
 * Consequences worth knowing: symmetric scales are negative when the block's largest magnitude is
 * positive (code 0 is +|m|); an all-zero block has scale 0 (−0.0 symmetric) and codes = zp; the
 * rounding is C `roundf` (ties away from zero), not half-to-even. `v · recip + zp` is evaluated
 * as two float32 operations (multiply, then add): what ORT's x86-64 build does; a build that
 * contracts it into one fused multiply-add (possible on ARM64) can differ at exact ties.
 *
 * Padding, as ORT writes it: codes beyond K in the last block are 0, except that for an odd K the
 * high nibble of the last code byte repeats the code at k = K − 2 (ORT's packing loop keeps its
 * previous pair there) unless that row is in another thread block (then 0); an odd k_blocks pads
 * the last zero-point byte of each column with 8. Loaders never read either.
 *
 * ## QuantizeLinear (opset 21, onnx/reference/ops/op_quantize_linear.py)
 * `y = saturate(rint(x / y_scale) + y_zero_point)` — a true float32 division, rint = half to even,
 * saturate to [−8, 7] (int4) or [0, 15] (uint4); per axis (scale `[D_axis]`) or blocked
 * (`block_size` along `axis`, scale shaped like x with that axis ⌈D / block_size⌉). int4 tensors
 * are stored two per byte, element 2i in the low nibble (two's complement for int4).
 */
import { QuantdError, shapeText } from '../../errors/index.js';
import { float16BitsFromFloat32, float32FromFloat16Bits } from '../float16.js';
import { fround, rint, FLOAT32_MAX } from '../rounding.js';
import { roundf } from './ggml-common.js';
import { packSubByte, unpackSubByte } from '../pack.js';

/** Block sizes ORT's MatMulNBits accepts (a power of two ≥ 16) and its quantizer instantiates. */
export const MATMULNBITS_BLOCK_SIZES: readonly number[] = [16, 32, 64, 128, 256];
export const MATMULNBITS_BITS = 4;
/** The default zero point of 4-bit MatMulNBits without a zero_points input (2^(bits−1)). */
export const MATMULNBITS_DEFAULT_ZP = 8;

/** The float type of A, the scales and Y: float16 for float16 weights, float32 otherwise. */
export type MatMulNBitsScaleType = 'float32' | 'float16';

export interface MatMulNBitsParams {
  readonly blockSize: number;
  /** Symmetric (zero point 8, no zero_points tensor); asymmetric is ORT's quantizer default. */
  readonly sym: boolean;
  readonly scaleType: MatMulNBitsScaleType;
}

export interface MatMulNBitsShapes {
  readonly N: number;
  readonly K: number;
  readonly blockSize: number;
  readonly kBlocks: number;
  readonly blobSize: number;
  /** B's shape: [N, k_blocks, blob_size]. */
  readonly b: readonly [number, number, number];
  /** Scales: N · k_blocks values. */
  readonly scales: number;
  /** Zero-point bytes per column: ⌈k_blocks / 2⌉. */
  readonly zpPerColumn: number;
  /** Zero-point bytes: N · ⌈k_blocks / 2⌉. */
  readonly zeroPoints: number;
}

/** The MatMulNBits tensor sizes of a weight [N, K] (nn.Linear [out, in]). */
export function matMulNBitsShapes(
  tensor: string,
  shape: readonly number[],
  blockSize: number,
): MatMulNBitsShapes {
  if (shape.length !== 2 || shape[0]! < 1 || shape[1]! < 1) {
    throw new QuantdError('SHAPE_UNSUPPORTED', {
      tensor,
      shape: shapeText(shape),
      detail: 'MatMulNBits quantizes non-empty 2-D linear weights [out_features, in_features]',
    });
  }
  if (!MATMULNBITS_BLOCK_SIZES.includes(blockSize)) {
    throw new QuantdError('GROUP_SIZE_INVALID', {
      tensor,
      detail: `MatMulNBits block_size must be one of ${MATMULNBITS_BLOCK_SIZES.join(', ')}`,
      group_size: blockSize,
      shape: shapeText(shape),
    });
  }
  const [N, K] = shape as [number, number];
  const kBlocks = Math.ceil(K / blockSize);
  const blobSize = blockSize / 2;
  const zpPerColumn = Math.ceil(kBlocks / 2);
  return {
    N,
    K,
    blockSize,
    kBlocks,
    blobSize,
    b: [N, kBlocks, blobSize],
    scales: N * kBlocks,
    zpPerColumn,
    zeroPoints: N * zpPerColumn,
  };
}

export interface MatMulNBitsPacked {
  /** [N, k_blocks, blob_size] codes. */
  readonly b: Uint8Array;
  /** N · k_blocks scales, each exactly representable in the scale type. */
  readonly scales: Float32Array;
  /** N · ⌈k_blocks/2⌉ packed zero points; null for symmetric (the op's default 8). */
  readonly zeroPoints: Uint8Array | null;
}

/** A float32 value as the scale type stores it. */
function storeScale(x: number, type: MatMulNBitsScaleType): number {
  return type === 'float16' ? float32FromFloat16Bits(float16BitsFromFloat32(x)) : x;
}

/**
 * ORT's blockwise 4-bit quantization of weight `w` (row-major [N, K], float32 values — float16 and
 * bfloat16 weights upcast exactly) into MatMulNBits' B, scales and zero points (see the file
 * comment for the exact operations). Non-finite weights are INPUT_NOT_FINITE.
 */
export function matMulNBitsQuantize(
  tensor: string,
  w: Float32Array,
  shape: readonly number[],
  params: MatMulNBitsParams,
): MatMulNBitsPacked {
  const s = matMulNBitsShapes(tensor, shape, params.blockSize);
  const { N, K, blockSize, kBlocks } = s;
  if (w.length !== N * K) {
    throw new QuantdError('INTERNAL', { detail: `${tensor}: ${w.length} values for shape [${N}, ${K}]` });
  }
  const qRows = kBlocks * s.blobSize;
  const b = new Uint8Array(N * qRows);
  const scales = new Float32Array(s.scales);
  const zeroPoints = params.sym ? null : new Uint8Array(s.zeroPoints);
  const code = (v: number, recip: number, zp: number): number => {
    const r = roundf(fround(fround(v * recip) + zp));
    return r < 0 ? 0 : r > 15 ? 15 : r;
  };
  for (let n = 0; n < N; n++) {
    const row = n * K;
    const zps = new Uint8Array(kBlocks);
    for (let blk = 0; blk < kBlocks; blk++) {
      const start = blk * blockSize;
      const end = Math.min(K, start + blockSize);
      let min = FLOAT32_MAX;
      let max = -FLOAT32_MAX;
      for (let k = start; k < end; k++) {
        const v = w[row + k]!;
        if (!Number.isFinite(v)) {
          throw new QuantdError('INPUT_NOT_FINITE', {
            tensor,
            value: v,
            index: row + k,
            op: 'MatMulNBits quantization',
          });
        }
        if (v < min) min = v;
        if (v > max) max = v;
      }
      let scale: number;
      let zp: number;
      if (params.sym) {
        const m = Math.abs(max) > Math.abs(min) ? max : min;
        scale = fround(-m / 8);
        zp = MATMULNBITS_DEFAULT_ZP;
      } else {
        // std::min(min, 0.0f) / std::max(max, 0.0f), signed zeros as C++ keeps them
        if (0 < min) min = 0;
        if (max < 0) max = 0;
        scale = fround(fround(max - min) / 15);
        const zpf = scale !== 0 ? fround(0 - fround(min / scale)) : min;
        zp = zpf < 0 ? 0 : zpf > 15 ? 15 : roundf(zpf);
      }
      const stored = storeScale(scale, params.scaleType);
      scales[n * kBlocks + blk] = stored;
      zps[blk] = zp;
      const recip = stored !== 0 ? fround(1 / stored) : 0;
      if (!Number.isFinite(recip)) {
        throw new QuantdError('FEATURE_UNSUPPORTED', {
          detail:
            `tensor ${tensor}: block ${blk} of row ${n} spans [${min}, ${max}]; the reciprocal of its scale ` +
            `${stored} overflows float32 (ORT's quantizer has no defined result for it)`,
        });
      }
      for (let k = start; k < end; k++) {
        b[n * qRows + (k >> 1)]! |= code(w[row + k]!, recip, zp) << ((k & 1) * 4);
      }
    }
    if (K % 2 === 1 && K > 1) {
      // ORT's packing loop writes the last odd code with the pair's high nibble left from the
      // previous pair of its thread block (2 · block_size rows), or 0 when it has no previous pair.
      const last = K - 1;
      const threadStart = Math.floor(last / (2 * blockSize)) * 2 * blockSize;
      if (last - threadStart >= 2) {
        const prev = (b[n * qRows + ((last - 2) >> 1)]! >> 4) & 0xf;
        b[n * qRows + (last >> 1)]! |= prev << 4;
      }
    }
    if (zeroPoints) {
      const base = n * s.zpPerColumn;
      for (let blk = 0; blk < kBlocks; blk++) zeroPoints[base + (blk >> 1)]! |= zps[blk]! << ((blk & 1) * 4);
      if (kBlocks % 2 === 1) zeroPoints[base + s.zpPerColumn - 1]! |= MATMULNBITS_DEFAULT_ZP << 4;
    }
  }
  return { b, scales, zeroPoints };
}

/** The codes of one column's nibble k in B. */
export function matMulNBitsCode(b: Uint8Array, shapes: MatMulNBitsShapes, n: number, k: number): number {
  const byte = b[n * shapes.kBlocks * shapes.blobSize + (k >> 1)]!;
  return (k & 1) === 0 ? byte & 0xf : byte >> 4;
}

/**
 * MatMulNBits' dequantized weight as nn.Linear stores it, [N, K] float32:
 * `W[n, k] = (code − zp) · scale` of k's block in column n (zp 8 without zero points).
 */
export function matMulNBitsDequantize(
  b: Uint8Array,
  scales: Float32Array,
  zeroPoints: Uint8Array | null,
  shapes: MatMulNBitsShapes,
): Float32Array {
  const { N, K, blockSize, kBlocks, zpPerColumn } = shapes;
  const out = new Float32Array(N * K);
  for (let n = 0; n < N; n++) {
    for (let k = 0; k < K; k++) {
      const blk = Math.floor(k / blockSize);
      const scale = scales[n * kBlocks + blk]!;
      const zp = zeroPoints
        ? (zeroPoints[n * zpPerColumn + (blk >> 1)]! >> ((blk & 1) * 4)) & 0xf
        : MATMULNBITS_DEFAULT_ZP;
      out[n * K + k] = fround((matMulNBitsCode(b, shapes, n, k) - zp) * scale);
    }
  }
  return out;
}

// --- QuantizeLinear (opset 21) to int4 / uint4 ----------------------------------------------------

export interface QuantizeLinearInt4Params {
  /** The quantization axis (negative counts from the end), as the op's `axis` attribute (default 1). */
  readonly axis: number;
  /** 0: per axis (or per tensor with one scale); > 0: blocked along `axis`. */
  readonly blockSize: number;
  /** int4 [−8, 7] (true) or uint4 [0, 15]. */
  readonly signed: boolean;
}

/**
 * ONNX QuantizeLinear to int4 / uint4: `clamp(rint(f32(x / scale)) + zero_point)`, with one scale
 * (per tensor), one per index of `axis` (per axis), or one per block of `blockSize` along `axis`
 * (blocked: scale shaped like x with that dimension ⌈D / blockSize⌉, flattened row-major).
 * Returns the unpacked values (packInt4 packs them).
 */
export function quantizeLinearInt4(
  tensor: string,
  x: Float32Array,
  shape: readonly number[],
  scale: Float32Array,
  zeroPoint: ArrayLike<number> | null,
  params: QuantizeLinearInt4Params,
): Int8Array {
  const numel = shape.reduce((a, d) => a * d, 1);
  if (x.length !== numel) {
    throw new QuantdError('INTERNAL', {
      detail: `${tensor}: ${x.length} values for shape ${shapeText(shape)}`,
    });
  }
  const rank = shape.length;
  const axis = params.axis < 0 ? params.axis + rank : params.axis;
  const [qmin, qmax] = params.signed ? [-8, 7] : [0, 15];
  const perTensor = scale.length === 1 && params.blockSize === 0;
  if (!perTensor && (axis < 0 || axis >= rank)) {
    throw new QuantdError('AXIS_OUT_OF_RANGE', { axis: params.axis, tensor, shape: shapeText(shape), rank });
  }
  const dim = perTensor ? 1 : shape[axis]!;
  const inner = perTensor ? 1 : shape.slice(axis + 1).reduce((a, d) => a * d, 1);
  const blocks = params.blockSize > 0 ? Math.ceil(dim / params.blockSize) : dim;
  const outer = perTensor ? 1 : numel / (dim * inner || 1);
  const expected = perTensor ? 1 : params.blockSize > 0 ? outer * blocks * inner : dim;
  const qparamShape = params.blockSize > 0 ? shape.map((d, i) => (i === axis ? blocks : d)) : [dim];
  if (scale.length !== expected || (zeroPoint !== null && zeroPoint.length !== expected)) {
    throw new QuantdError('QPARAMS_SHAPE_MISMATCH', {
      tensor,
      qparam: zeroPoint !== null && zeroPoint.length !== expected ? 'y_zero_point' : 'y_scale',
      shape: `[${zeroPoint !== null && zeroPoint.length !== expected ? zeroPoint.length : scale.length}]`,
      expected: perTensor ? '[1]' : shapeText(qparamShape),
      scheme: params.blockSize > 0 ? `blocked (block_size ${params.blockSize})` : 'per_axis',
    });
  }
  for (let i = 0; i < scale.length; i++) {
    const s = scale[i]!;
    if (!(s > 0) || !Number.isFinite(s)) {
      throw new QuantdError('SCALE_INVALID', { tensor, index: i, value: s });
    }
    const z = zeroPoint?.[i];
    if (z !== undefined && !(Number.isInteger(z) && z >= qmin && z <= qmax)) {
      throw new QuantdError('ZERO_POINT_OUT_OF_RANGE', {
        tensor,
        index: i,
        value: z,
        quant_min: qmin,
        quant_max: qmax,
      });
    }
  }
  const out = new Int8Array(numel);
  for (let i = 0; i < numel; i++) {
    const v = x[i]!;
    if (!Number.isFinite(v)) {
      throw new QuantdError('INPUT_NOT_FINITE', { tensor, value: v, index: i, op: 'QuantizeLinear' });
    }
    let q = 0;
    if (!perTensor) {
      const a = Math.floor(i / inner) % dim;
      if (params.blockSize > 0) {
        const o = Math.floor(i / (inner * dim));
        q = (o * blocks + Math.floor(a / params.blockSize)) * inner + (i % inner);
      } else {
        q = a;
      }
    }
    const y = rint(fround(v / scale[q]!)) + (zeroPoint ? zeroPoint[q]! : 0);
    out[i] = y < qmin ? qmin : y > qmax ? qmax : y;
  }
  return out;
}

/**
 * int4 / uint4 values packed two per byte, element 2i in the low nibble, the last byte
 * zero-padded: ONNX's int4 layout is quantd's own sub-byte packing (src/core/pack.ts).
 */
export const packInt4 = (values: ArrayLike<number>): Uint8Array => packSubByte(values, 4);

/** The `count` values of packed int4 (signed: two's-complement nibbles) or uint4. */
export const unpackInt4 = (bytes: Uint8Array, count: number, signed: boolean): Int8Array =>
  unpackSubByte(bytes, count, 4, signed);
