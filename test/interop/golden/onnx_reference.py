#!/usr/bin/python3
"""
Golden vectors for quantd's "onnx" layout (src/core/interop/onnx.ts): an independent transcription
of ONNX Runtime's 4-bit MatMulNBits quantizer and of ONNX QuantizeLinear (opset 21) to int4/uint4,
in numpy float32 scalars (run with /usr/bin/python3, numpy only):

  /usr/bin/python3 test/interop/golden/onnx_reference.py           # writes onnx_vectors.json beside it
  PYTHON_WITH_ORT test/interop/golden/onnx_reference.py --check     # also compares with onnxruntime / onnx

Derivation (what is transcribed, from which source):
  1. onnxruntime/python/tools/quantization/matmul_4bits_quantizer.py,
     DefaultWeightOnlyQuantizer.int4_block_quant (QOperator): B = the MatMul weight [K, N] (rows = K,
     cols = N: the transpose of an nn.Linear weight [N, K]); packed = zeros((N, k_blocks,
     block_size // 2)), zero_point = zeros(N * ((k_blocks + 1) // 2)), scales = zeros(N * k_blocks)
     of the weight's dtype; quantize_matmul_4bits(packed, B, scales, zero_point, block_size, N, K,
     is_symmetric). The symmetric node gets no zero_points input.
  2. onnxruntime/python/onnxruntime_pybind_quant.cc: quantize_matmul_4bits ->
     MlasQuantizeBlockwise<T, 4>(dst, scales, is_symmetric ? nullptr : zp, src, block_size,
     columnwise=true, rows=K, columns=N, leading_dim=N).
  3. onnxruntime/core/mlas/lib/q4_dq.cpp, BlockwiseQuantizer<T, block_size, 4, true>::
     quantizeAndTranspose: thread blocks of 2 * block_size rows of one column; zp_bytes and vi
     start as {8, 8} and {0, 0} per thread block; per quantization block min/max scanned from
     (FLT_MAX, -FLT_MAX); range2scalezp (asym) / range2scale (sym); codes
     (uint8)clamp(roundf(v * reciprocal_scale + zp), 0, 15) where reciprocal_scale = scale ? 1/scale
     : 0 and scale is read back from the stored T; pairs packed (vi[0] & 0xf) | (vi[1] << 4) into
     dst[j * q_rows + i / 2]; zero points (zp_bytes[0] & 0xf) | (zp_bytes[1] << 4) into
     zero_points[j * ((row_blks + 1) / 2) + meta_row / 2].
       range2scalezp: min = std::min(min, 0); max = std::max(max, 0); scale = (max - min) / 15;
         zp_fp = scale != 0 ? 0 - min / scale : min; zp = zp_fp < 0 ? 0 : zp_fp > 15 ? 15 :
         (uint8)roundf(zp_fp); stored scale = T(scale).
       range2scale: max = fabsf(max) > fabsf(min) ? max : min; scale = T(-max / 8).
     roundf is C's (half away from zero). Float32 arithmetic, each operation rounded (no FMA).
  4. MatMulNBits dequantization (docs/ContribOperators.md; BlockwiseQuantizer::dequantize):
     (code - zp) * scale, zp = 8 without zero points; float32.
  5. onnx/reference/ops/op_quantize_linear.py (_CommonQuantizeLinear, QuantizeLinear_21):
     y = clip(rint(x / y_scale).astype(int32) + zero_point, -8, 7 | 0, 15), y_scale repeated
     block_size times along `axis` for blocked quantization; int4 packed two per byte, element 2i
     in the low nibble (onnx.helper.pack_float32_to_4bit).

Cases: hand-made blocks for exact .5 ties of v / scale + zp (roundf 4.5 -> 5, where rint gives 4),
a zero-point tie (zp_fp 2.5 -> 3), an all-zero block (asym scale 0 / zp 0; sym scale -0.0 / codes
8), negative-only and positive-only blocks (sym scales of both signs), K not a multiple of
block_size with an odd K (ORT's last-byte high nibble) and an odd number of blocks (zero-point
padding 8), float16 weights (float16 scales, codes from the rounded half scale), and N(0, 0.02)
weights.

Every float is stored as hex words of its dtype, little-endian element order; byte tensors as hex.
"""
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
F32 = np.float32
FLT_MAX = np.finfo(np.float32).max


def roundf(x):
    """C roundf on a float32: half away from zero (exact in float64)."""
    x = float(x)
    r = np.floor(abs(x) + 0.5)
    return -r if x < 0 else r


def to_t(x, dtype):
    return F32(np.float16(x)) if dtype == 'float16' else F32(x)


def range2scalezp(mn, mx, dtype):
    mn = F32(0) if F32(0) < mn else mn  # std::min(min, 0.0f)
    mx = F32(0) if mx < F32(0) else mx  # std::max(max, 0.0f)
    scale = F32(F32(mx - mn) / F32(15))
    zp_fp = mn
    if scale != 0:
        zp_fp = F32(F32(0) - F32(mn / scale))
    if zp_fp < 0:
        zp = 0
    elif zp_fp > 15:
        zp = 15
    else:
        zp = int(roundf(zp_fp))
    return to_t(scale, dtype), zp


def range2scale(mn, mx, dtype):
    m = mx if abs(mx) > abs(mn) else mn
    return to_t(F32(F32(-m) / F32(8)), dtype)


def mlas_quantize_columnwise(src, block_size, sym, dtype):
    """quantizeAndTranspose for src [rows=K, columns=N] (row major), 4 bits, columnwise."""
    rows, columns = src.shape
    row_blks = (rows + block_size - 1) // block_size
    q_rows = (row_blks * block_size * 4 + 7) // 8
    dst = np.zeros(columns * q_rows, np.uint8)
    scales = np.zeros(columns * row_blks, np.float32)
    zero_points = None if sym else np.zeros(columns * ((row_blks + 1) // 2), np.uint8)
    thread_rows = 2 * block_size
    for c in range(columns):  # one thread block column per column (QuantBlk::kColumn == 1)
        for r in range(0, rows, thread_rows):
            zp_bytes = [8, 8]
            vi = [0, 0]
            r_end = min(r + thread_rows, rows)
            meta_row = r // block_size
            for kpack in range(2):
                mn, mx = FLT_MAX, -FLT_MAX
                row_start = r + kpack * block_size
                row_end = min(row_start + block_size, r_end)
                for i in range(row_start, row_end):
                    v = src[i, c]
                    if v < mn:
                        mn = v
                    if v > mx:
                        mx = v
                if row_start < row_end:
                    meta_idx = c * row_blks + meta_row + kpack
                    if sym:
                        scales[meta_idx] = range2scale(mn, mx, dtype)
                    else:
                        scales[meta_idx], zp_bytes[kpack] = range2scalezp(mn, mx, dtype)
            if not sym:
                zero_points[c * ((row_blks + 1) // 2) + meta_row // 2] = (zp_bytes[0] & 0xF) | (zp_bytes[1] << 4)
            for i in range(r, r_end, 2):
                for l in range(2):
                    if i + l >= r_end:
                        break
                    meta_r = (i + l) // block_size
                    scale = scales[c * row_blks + meta_r]
                    recip = F32(F32(1) / scale) if scale != 0 else F32(0)
                    zp = zp_bytes[meta_r % 2]
                    v = src[i + l, c]
                    q = roundf(F32(F32(v * recip) + F32(zp)))
                    vi[l] = int(min(max(q, 0.0), 15.0))
                dst[c * q_rows + i // 2] = (vi[0] & 0xF) | (vi[1] << 4)
    return dst, scales, zero_points


def dequantize(dst, scales, zero_points, N, K, block_size):
    row_blks = (K + block_size - 1) // block_size
    q_rows = row_blks * block_size // 2
    out = np.zeros((N, K), np.float32)
    for n in range(N):
        for k in range(K):
            b = k // block_size
            byte = int(dst[n * q_rows + k // 2])
            q = (byte >> (4 * (k % 2))) & 0xF
            if zero_points is None:
                zp = 8
            else:
                zp = (int(zero_points[n * ((row_blks + 1) // 2) + b // 2]) >> (4 * (b % 2))) & 0xF
            out[n, k] = F32(F32(q - zp) * scales[n * row_blks + b])
    return out


def hex_words(a):
    a = np.ascontiguousarray(a)
    if a.dtype == np.float32:
        return ['0x%08x' % v for v in a.view(np.uint32).reshape(-1).tolist()]
    if a.dtype == np.float16:
        return ['0x%04x' % v for v in a.view(np.uint16).reshape(-1).tolist()]
    raise ValueError(a.dtype)


def hex_bytes(a):
    return bytes(np.ascontiguousarray(a, dtype=np.uint8)).hex()


def weight(N, K, seed, dtype, special=None):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((N, K)) * 0.02).astype(np.float32)
    if special:
        special(w)
    return w.astype(np.float16) if dtype == 'float16' else w


def ties(w):
    # scale 0.5 (max - min = 7.5), zp_fp = 3: v * 2 + 3 = x.5 -> roundf rounds away from zero
    w[0, 0:16] = np.array([-1.5, 6.0, 0.25, 0.75, -0.25, -0.75, 1.25, 2.75,
                           -1.25, 5.75, 0.0, 3.25, -1.0, 4.75, 2.25, 6.0], np.float32)
    # zero-point tie: min -1.25, max 6.25 -> scale 0.5, zp_fp 2.5 -> roundf 3 (rint would give 2)
    w[0, 16:32] = np.array([-1.25, 6.25, 0.0, 0.5, 1.0, -0.5, 2.0, 3.5,
                            -1.0, 0.25, 0.75, 4.0, 5.0, 6.0, -0.25, 1.5], np.float32)
    # symmetric ties: max |.| = 8 positive -> scale -1: v * -1 + 8 on halves
    w[1, 0:16] = np.array([8.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 7.5,
                           -7.5, 3.5, -3.5, 6.5, -6.5, 4.5, -4.5, 0.0], np.float32)
    w[1, 16:32] = 0.0  # all-zero block
    w[2, 0:16] = -np.abs(w[2, 0:16]) - 0.001  # negative only
    w[2, 16:32] = np.abs(w[2, 16:32]) + 0.001  # positive only
    w[3, 0:16] = -0.0  # negative zeros


def big_small(w):
    w[0, :] *= 4000.0
    w[1, :] *= 1e-4
    w[2, :] = np.abs(w[2, :])


CASES = [
    # name, N, K, block_size, sym, dtype, seed, special
    ('f32_b16_asym_ties', 4, 32, 16, False, 'float32', 1, ties),
    ('f32_b16_sym_ties', 4, 32, 16, True, 'float32', 1, ties),
    ('f32_b16_asym_k37', 3, 37, 16, False, 'float32', 2, None),
    ('f32_b16_sym_k37', 3, 37, 16, True, 'float32', 2, None),
    ('f32_b16_asym_k33', 2, 33, 16, False, 'float32', 3, None),
    ('f32_b32_asym', 5, 64, 32, False, 'float32', 4, big_small),
    ('f32_b32_sym', 5, 64, 32, True, 'float32', 4, big_small),
    ('f16_b16_asym', 4, 48, 16, False, 'float16', 5, ties),
    ('f16_b32_sym', 3, 96, 32, True, 'float16', 6, big_small),
    ('f32_b64_asym_k100', 2, 100, 64, False, 'float32', 7, None),
]


def matmulnbits_cases():
    out = []
    for name, N, K, bs, sym, dtype, seed, special in CASES:
        w = weight(N, K, seed, dtype, special)
        src = np.ascontiguousarray(w.astype(np.float32).T)  # B = W^T, [K, N]
        dst, scales, zps = mlas_quantize_columnwise(src, bs, sym, dtype)
        deq = dequantize(dst, scales, zps, N, K, bs)
        out.append({
            'name': name, 'N': N, 'K': K, 'block_size': bs, 'sym': sym, 'dtype': dtype,
            'weight': hex_words(w),
            'b': hex_bytes(dst),
            'scales': hex_words(scales.astype(np.float16) if dtype == 'float16' else scales),
            'zero_points': None if zps is None else hex_bytes(zps),
            'dequantized': hex_words(deq),
        })
    return out


def quantize_linear(x, scale, zp, axis, block_size, signed):
    """op_quantize_linear.py for int4 / uint4 (x float32, scale float32, zp int)."""
    lo, hi = (-8, 7) if signed else (0, 15)
    s = scale
    z = zp
    if block_size:
        s = np.repeat(s, block_size, axis=axis).take(indices=range(x.shape[axis]), axis=axis)
        z = np.repeat(z, block_size, axis=axis).take(indices=range(x.shape[axis]), axis=axis)
    elif s.size > 1:
        dims = [1] * x.ndim
        dims[axis] = s.size
        s = s.reshape(dims)
        z = z.reshape(dims)
    y = np.rint((x / s).astype(np.float32)).astype(np.int32) + z.astype(np.int32)
    return np.clip(y, lo, hi).astype(np.int8)


def pack_int4(values):
    flat = values.reshape(-1).astype(np.int32) & 0xF
    if flat.size % 2:
        flat = np.append(flat, 0)
    return (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8)


def ql_cases():
    out = []
    x = np.array([[0.25, 0.75, -0.25, -0.75, 1.25, 2.5, -2.5, 100.0, -100.0],
                  [0.5, 1.5, -1.5, 3.0, -3.0, 0.0, -0.0, 7.0, 8.5],
                  [0.05, -0.05, 0.15, -0.15, 0.35, 0.45, -0.45, 0.55, 1.0]], np.float32)
    specs = [
        ('per_axis0_int4', 0, 0, True, np.array([0.5, 1.0, 0.1], np.float32), np.array([0, 1, -2], np.int8)),
        ('per_axis1_uint4', 1, 0, False, np.array([0.5, 1, 1, 1, 1, 1, 1, 1, 2], np.float32),
         np.array([8, 8, 8, 8, 8, 8, 0, 15, 3], np.uint8)),
        ('blocked_axis1_bs4_int4', 1, 4, True,
         np.array([[0.5, 1.0, 0.25], [1.0, 0.5, 2.0], [0.1, 0.1, 0.2]], np.float32),
         np.array([[0, 0, 1], [-1, 0, 0], [0, 2, -8]], np.int8)),
        ('blocked_axis0_bs2_uint4', 0, 2, False,
         np.array([[0.5, 1, 1, 1, 0.25, 1, 1, 1, 2], [0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]], np.float32),
         np.array([[8, 8, 8, 8, 8, 8, 8, 0, 0], [7, 7, 7, 7, 7, 7, 7, 7, 7]], np.uint8)),
        ('per_tensor_int4', 1, 0, True, np.array([0.5], np.float32), np.array([1], np.int8)),
    ]
    for name, axis, bs, signed, scale, zp in specs:
        y = quantize_linear(x, scale, zp, axis, bs, signed)
        out.append({
            'name': name, 'shape': list(x.shape), 'axis': axis, 'block_size': bs, 'signed': signed,
            'x': hex_words(x), 'scale': hex_words(scale), 'scale_shape': list(scale.shape),
            'zero_point': [int(v) for v in zp.reshape(-1)],
            'y': [int(v) for v in y.reshape(-1)], 'packed': hex_bytes(pack_int4(y)),
        })
    return out


def check_with_ort(data):
    """Compares the vectors with onnxruntime's own quantizer and onnx's reference QuantizeLinear."""
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator
    from onnxruntime.capi._pybind_state import quantize_matmul_4bits

    for c in data['matmulnbits']:
        N, K, bs = c['N'], c['K'], c['block_size']
        dt = np.float16 if c['dtype'] == 'float16' else np.float32
        raw = np.array([int(h, 16) for h in c['weight']], np.uint16 if dt == np.float16 else np.uint32)
        w = raw.view(dt).reshape(N, K)
        kb = (K + bs - 1) // bs
        packed = np.zeros((N, kb, bs // 2), np.uint8)
        zp = np.zeros(N * ((kb + 1) // 2), np.uint8)
        sc = np.zeros(N * kb, dt)
        quantize_matmul_4bits(packed, np.ascontiguousarray(w.T), sc, zp, bs, N, K, c['sym'])
        assert hex_bytes(packed.reshape(-1)) == c['b'], c['name']
        assert hex_words(sc) == c['scales'], c['name']
        if not c['sym']:
            assert hex_bytes(zp) == c['zero_points'], c['name']
    for c in data['quantize_linear']:
        x = np.array([int(h, 16) for h in c['x']], np.uint32).view(np.float32).reshape(c['shape'])
        s = np.array([int(h, 16) for h in c['scale']], np.uint32).view(np.float32).reshape(c['scale_shape'])
        qtype = TensorProto.INT4 if c['signed'] else TensorProto.UINT4
        zp = helper.make_tensor('zp', qtype, c['scale_shape'], c['zero_point'])
        attrs = {'axis': c['axis']}
        if c['block_size']:
            attrs['block_size'] = c['block_size']
        node = helper.make_node('QuantizeLinear', ['x', 's', 'zp'], ['y'], **attrs)
        graph = helper.make_graph(
            [node], 'g',
            [helper.make_tensor_value_info('x', TensorProto.FLOAT, c['shape']),
             helper.make_tensor_value_info('s', TensorProto.FLOAT, c['scale_shape'])],
            [helper.make_tensor_value_info('y', qtype, c['shape'])], [zp])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 21)])
        y = ReferenceEvaluator(model).run(None, {'x': x, 's': s})[0]
        assert [int(v) for v in np.asarray(y).astype(np.int32).reshape(-1)] == c['y'], c['name']
    print(f'checked against onnxruntime {onnxruntime.__version__} and onnx {onnx.__version__}: all equal')


def main():
    data = {
        'note': 'Generated by test/interop/golden/onnx_reference.py (numpy transcription of ORT '
                'MlasQuantizeBlockwise 4-bit columnwise and ONNX QuantizeLinear-21 int4); do not edit.',
        'matmulnbits': matmulnbits_cases(),
        'quantize_linear': ql_cases(),
    }
    if '--check' in sys.argv:
        check_with_ort(data)
        return
    with open(os.path.join(HERE, 'onnx_vectors.json'), 'w') as f:
        json.dump(data, f, indent=1)
        f.write('\n')
    print('wrote onnx_vectors.json:', len(data['matmulnbits']), 'MatMulNBits cases,',
          len(data['quantize_linear']), 'QuantizeLinear cases')


if __name__ == '__main__':
    main()
