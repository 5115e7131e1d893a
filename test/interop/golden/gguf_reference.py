#!/usr/bin/python3
"""Golden vectors for the GGUF layout's ggml block quantizers (test/interop/gguf-golden.test.ts).

An independent re-computation of ggml's reference quantizers, written for this test from the
published behaviour of ggml-quants.c (quantize_row_{q8_0,q4_0,q4_1,q5_0,q5_1,q4_K,q6_K}_ref,
make_qkx2_quants, make_qx_quants, nearest_int, get_scale_min_k4, quantize_iq4_nl and
quantize_iq4_xs without importance weights, best_index_int8 and the dequantize_row_* functions)
and ggml-common.h (the block structs, kvalues_iq4nl). It shares no code with the TypeScript
implementation in src/core/interop/: a different language, scalar numpy float32 arithmetic
(every operand is an np.float32 — no Python float or int is mixed into float arithmetic, so the
result is float32 under both numpy 1.x value-based casting and numpy 2's NEP 50), one rounding
per C operation, in C's evaluation order, and no fused multiply-add.

Run: /usr/bin/python3 test/interop/golden/gguf_reference.py   (Debian's numpy 1.24 or numpy 2; writes
test/interop/golden/gguf-*.json), then `npx prettier --write test/interop/golden/gguf-*.json`.
The output is committed; the tests never run Python.

Each case records how its expected bytes were obtained:
  * "hand": worked out by hand (the working is in the comments below, and the literal bytes are
    written here); the generator also asserts that the re-computation agrees with the hand bytes;
  * "reference": the re-computation below, on deterministic pseudo-random or constructed input.
"""
import json
import math
import os
import struct

import numpy as np


HERE = os.path.dirname(os.path.abspath(__file__))
F = np.float32
QK = 32
QK_K = 256
GROUP_MAX_EPS = F(1e-15)


# --- scalar helpers -------------------------------------------------------------------------

def fp16_bits(x):
    """GGML_FP32_TO_FP16: round to nearest, ties to even (numpy's float32 -> float16 does that)."""
    with np.errstate(over='ignore'):
        return int(np.array([x], dtype=np.float32).astype(np.float16).view(np.uint16)[0])


def fp16_value(bits):
    return F(np.array([bits], dtype=np.uint16).view(np.float16)[0])


def f32_bits(x):
    return int(np.array([x], dtype=np.float32).view(np.uint32)[0])


def nearest_int(fval):
    """ggml's nearest_int: add 1.5 * 2^23 in float32 (which rounds to nearest, ties to even) and
    read the low mantissa bits back: round-half-to-even for |fval| < 2^22."""
    val = F(fval) + F(12582912.0)
    i = f32_bits(val)
    return (i & 0x007FFFFF) - 0x00400000


def c_int(v):
    """C float -> int conversion as x86-64 does it (cvttss2si): truncate toward zero; NaN and
    out-of-range values give INT_MIN. Only pathological inputs reach the out-of-range branch."""
    v = float(v)
    if math.isnan(v) or v >= 2.0**31 or v < -(2.0**31):
        return -(2**31)
    return int(math.trunc(v))


def int8(i):
    i &= 0xFF
    return i - 256 if i >= 128 else i


def roundf(v):
    """C roundf: half away from zero (exact for float32 input)."""
    v = float(v)
    if not math.isfinite(v):
        return v
    return math.copysign(math.floor(abs(v) + 0.5), v)


def u16(v):
    return struct.pack('<H', v & 0xFFFF)


# --- legacy blocks (32 values) --------------------------------------------------------------

def quantize_q8_0(x):
    amax = F(0)
    for v in x:
        a = abs(v)
        amax = amax if amax > a else a  # MAX(amax, fabsf(v))
    d = amax / F(127)
    idv = F(1) / d if d != 0 else F(0)
    out = bytearray(u16(fp16_bits(d)))
    for v in x:
        x0 = v * idv
        out.append(c_int(roundf(x0)) & 0xFF)  # int8_t = roundf(x0)
    return bytes(out)


def dequantize_q8_0(b):
    d = fp16_value(struct.unpack_from('<H', b, 0)[0])
    return [F(int8(b[2 + j])) * d for j in range(QK)]


def absmax_signed(x):
    amax, mx = F(0), F(0)
    for v in x:
        if amax < abs(v):  # strict: the first value of the largest magnitude wins
            amax, mx = abs(v), v
    return mx


def quantize_q4_0(x):
    mx = absmax_signed(x)
    d = mx / F(-8)
    idv = F(1) / d if d != 0 else F(0)
    out = bytearray(u16(fp16_bits(d)))
    for j in range(QK // 2):
        x0 = x[j] * idv
        x1 = x[j + 16] * idv
        xi0 = min(15, int8(c_int(x0 + F(8.5)))) & 0xFF
        xi1 = min(15, int8(c_int(x1 + F(8.5)))) & 0xFF
        out.append((xi0 | (xi1 << 4)) & 0xFF)
    return bytes(out)


def dequantize_q4_0(b):
    d = fp16_value(struct.unpack_from('<H', b, 0)[0])
    y = [F(0)] * QK
    for j in range(16):
        y[j] = F((b[2 + j] & 0x0F) - 8) * d
        y[j + 16] = F((b[2 + j] >> 4) - 8) * d
    return y


def minmax(x):
    mn, mx = F(np.finfo(np.float32).max), F(-np.finfo(np.float32).max)
    for v in x:
        if v < mn:
            mn = v
        if v > mx:
            mx = v
    return mn, mx


def quantize_q4_1(x):
    mn, mx = minmax(x)
    with np.errstate(over='ignore'):
        d = (mx - mn) / F(15)
    idv = F(1) / d if d != 0 else F(0)
    out = bytearray(u16(fp16_bits(d)) + u16(fp16_bits(mn)))
    for j in range(16):
        x0 = (x[j] - mn) * idv
        x1 = (x[j + 16] - mn) * idv
        xi0 = min(15, int8(c_int(x0 + F(0.5)))) & 0xFF
        xi1 = min(15, int8(c_int(x1 + F(0.5)))) & 0xFF
        out.append((xi0 | (xi1 << 4)) & 0xFF)
    return bytes(out)


def dequantize_q4_1(b):
    d = fp16_value(struct.unpack_from('<H', b, 0)[0])
    m = fp16_value(struct.unpack_from('<H', b, 2)[0])
    y = [F(0)] * QK
    for j in range(16):
        y[j] = F(b[4 + j] & 0x0F) * d + m
        y[j + 16] = F(b[4 + j] >> 4) * d + m
    return y


def quantize_q5_0(x):
    mx = absmax_signed(x)
    d = mx / F(-16)
    idv = F(1) / d if d != 0 else F(0)
    qh = 0
    qs = bytearray()
    for j in range(16):
        x0 = x[j] * idv
        x1 = x[j + 16] * idv
        xi0 = min(31, int8(c_int(x0 + F(16.5)))) & 0xFF
        xi1 = min(31, int8(c_int(x1 + F(16.5)))) & 0xFF
        qs.append((xi0 & 0x0F) | ((xi1 & 0x0F) << 4))
        qh |= ((xi0 & 0x10) >> 4) << j
        qh |= ((xi1 & 0x10) >> 4) << (j + 16)
    return bytes(u16(fp16_bits(d)) + struct.pack('<I', qh & 0xFFFFFFFF) + qs)


def dequantize_q5_0(b):
    d = fp16_value(struct.unpack_from('<H', b, 0)[0])
    qh = struct.unpack_from('<I', b, 2)[0]
    y = [F(0)] * QK
    for j in range(16):
        xh0 = ((qh >> j) << 4) & 0x10
        xh1 = (qh >> (j + 12)) & 0x10
        y[j] = F(((b[6 + j] & 0x0F) | xh0) - 16) * d
        y[j + 16] = F(((b[6 + j] >> 4) | xh1) - 16) * d
    return y


def quantize_q5_1(x):
    mn, mx = minmax(x)
    with np.errstate(over='ignore'):
        d = (mx - mn) / F(31)
    idv = F(1) / d if d != 0 else F(0)
    qh = 0
    qs = bytearray()
    for j in range(16):
        x0 = (x[j] - mn) * idv
        x1 = (x[j + 16] - mn) * idv
        xi0 = c_int(x0 + F(0.5)) & 0xFF  # (uint8_t)(x0 + 0.5f): no MIN here
        xi1 = c_int(x1 + F(0.5)) & 0xFF
        qs.append((xi0 & 0x0F) | ((xi1 & 0x0F) << 4))
        qh |= ((xi0 & 0x10) >> 4) << j
        qh |= ((xi1 & 0x10) >> 4) << (j + 16)
    return bytes(u16(fp16_bits(d)) + u16(fp16_bits(mn)) + struct.pack('<I', qh & 0xFFFFFFFF) + qs)


def dequantize_q5_1(b):
    d = fp16_value(struct.unpack_from('<H', b, 0)[0])
    m = fp16_value(struct.unpack_from('<H', b, 2)[0])
    qh = struct.unpack_from('<I', b, 4)[0]
    y = [F(0)] * QK
    for j in range(16):
        xh0 = ((qh >> j) << 4) & 0x10
        xh1 = (qh >> (j + 12)) & 0x10
        y[j] = F((b[8 + j] & 0x0F) | xh0) * d + m
        y[j + 16] = F((b[8 + j] >> 4) | xh1) * d + m
    return y


# --- Q4_K (super-block of 256: 8 sub-blocks of 32, 6-bit scales and mins) ----------------------

def make_qkx2_quants(n, nmax, x, weights, rmin, rdelta, nstep, use_mad):
    """Returns (scale, the_min, L). Weighted least-squares search over nstep+1 trial scales."""
    L = [0] * n
    mn = x[0]
    mx = x[0]
    sum_w = weights[0]
    sum_x = sum_w * x[0]
    for i in range(1, n):
        if x[i] < mn:
            mn = x[i]
        if x[i] > mx:
            mx = x[i]
        w = weights[i]
        sum_w = sum_w + w
        sum_x = sum_x + w * x[i]
    if mn > 0:
        mn = F(0)
    if mx == mn:
        return F(0), -mn, [0] * n
    iscale = F(nmax) / (mx - mn)
    scale = F(1) / iscale
    best_error = F(0)
    for i in range(n):
        l = nearest_int(iscale * (x[i] - mn))
        L[i] = max(0, min(nmax, l))
        diff = scale * F(L[i]) + mn - x[i]
        diff = abs(diff) if use_mad else diff * diff
        best_error = best_error + weights[i] * diff
    if nstep < 1:
        return scale, -mn, L
    for step in range(nstep + 1):
        iscale = (rmin + rdelta * F(step) + F(nmax)) / (mx - mn)
        sum_l, sum_l2, sum_xl = F(0), F(0), F(0)
        laux = [0] * n
        for i in range(n):
            l = nearest_int(iscale * (x[i] - mn))
            l = max(0, min(nmax, l))
            laux[i] = l
            w = weights[i]
            sum_l = sum_l + w * F(l)
            sum_l2 = sum_l2 + w * F(l) * F(l)
            sum_xl = sum_xl + w * F(l) * x[i]
        D = sum_w * sum_l2 - sum_l * sum_l
        if D > 0:
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / D
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D
            if this_min > 0:
                this_min = F(0)
                this_scale = sum_xl / sum_l2
            cur_error = F(0)
            for i in range(n):
                diff = this_scale * F(laux[i]) + this_min - x[i]
                diff = abs(diff) if use_mad else diff * diff
                cur_error = cur_error + weights[i] * diff
            if cur_error < best_error:
                L = list(laux)
                best_error = cur_error
                scale = this_scale
                mn = this_min
    return scale, -mn, L


def scale_min_k4(j, q):
    if j < 4:
        return q[j] & 63, q[j + 4] & 63
    return (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4)


def affine_k_super_block(x, nmax, rmin, nstep):
    """Q4_K's and Q5_K's fit: the 8 sub-block fits, their 6-bit scales and mins against d and
    dmin, and the codes recomputed from the rounded scales. Returns (d_bits, dmin_bits, sc, L)."""
    L = [0] * QK_K
    scales = [F(0)] * 8
    mins = [F(0)] * 8
    max_scale = F(0)
    max_min = F(0)
    for j in range(8):
        sub = x[32 * j:32 * j + 32]
        sum_x2 = F(0)
        for v in sub:
            sum_x2 = sum_x2 + v * v
        av_x = F(math.sqrt(float(sum_x2 / F(32))))  # sqrtf is correctly rounded
        weights = [av_x + abs(v) for v in sub]
        s, m, lq = make_qkx2_quants(32, nmax, sub, weights, F(rmin), F(0.1), nstep, False)
        scales[j], mins[j] = s, m
        L[32 * j:32 * j + 32] = lq
        if s > max_scale:
            max_scale = s
        if m > max_min:
            max_min = m
    inv_scale = F(63) / max_scale if max_scale > 0 else F(0)
    inv_min = F(63) / max_min if max_min > 0 else F(0)
    sc = [0] * 12
    for j in range(8):
        ls = min(63, nearest_int(inv_scale * scales[j]) & 0xFF)  # uint8_t, then MIN(63, .)
        lm = min(63, nearest_int(inv_min * mins[j]) & 0xFF)
        if j < 4:
            sc[j] = ls
            sc[j + 4] = lm
        else:
            sc[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4)
            sc[j - 4] |= (ls >> 4) << 6
            sc[j] |= (lm >> 4) << 6
    d_bits = fp16_bits(max_scale / F(63))
    dmin_bits = fp16_bits(max_min / F(63))
    for j in range(8):
        s, m = scale_min_k4(j, sc)
        d = fp16_value(d_bits) * F(s)
        if d == 0:
            continue
        dm = fp16_value(dmin_bits) * F(m)
        for ii in range(32):
            l = nearest_int((x[32 * j + ii] + dm) / d)
            L[32 * j + ii] = max(0, min(nmax, l))
    return d_bits, dmin_bits, sc, L


def quantize_q4_k(x):
    d_bits, dmin_bits, sc, L = affine_k_super_block(x, 15, -1.0, 20)
    qs = bytearray()
    for j in range(0, QK_K, 64):
        for l in range(32):
            qs.append(L[j + l] | (L[j + l + 32] << 4))
    return bytes(u16(d_bits) + u16(dmin_bits) + bytes(sc) + qs)


def quantize_q5_k(x):
    """Q5_K: Q4_K's fit with codes 0..31, rmin -0.5, 15 steps; the fifth bits in qh[32]: for the
    64-value chunk c, bit 2c of qh[j] for code j, bit 2c+1 for code j+32."""
    d_bits, dmin_bits, sc, L = affine_k_super_block(x, 31, -0.5, 15)
    qh = [0] * 32
    qs = bytearray()
    for c, j0 in enumerate(range(0, QK_K, 64)):
        for l in range(32):
            l1, l2 = L[j0 + l], L[j0 + l + 32]
            if l1 > 15:
                qh[l] |= 1 << (2 * c)
            if l2 > 15:
                qh[l] |= 2 << (2 * c)
            qs.append((l1 & 0xF) | ((l2 & 0xF) << 4))
    return bytes(u16(d_bits) + u16(dmin_bits) + bytes(sc) + bytes(qh) + qs)


def dequantize_q5_k(b):
    d = fp16_value(struct.unpack_from('<H', b, 0)[0])
    dmin = fp16_value(struct.unpack_from('<H', b, 2)[0])
    sc = b[4:16]
    qh = b[16:48]
    q = b[48:]
    y = []
    for n in range(4):
        s1, m1 = scale_min_k4(2 * n, sc)
        s2, m2 = scale_min_k4(2 * n + 1, sc)
        d1, mm1 = d * F(s1), dmin * F(m1)
        d2, mm2 = d * F(s2), dmin * F(m2)
        block = q[32 * n:32 * n + 32]
        y += [d1 * F((v & 0xF) + (16 if qh[l] >> (2 * n) & 1 else 0)) - mm1 for l, v in enumerate(block)]
        y += [d2 * F((v >> 4) + (16 if qh[l] >> (2 * n + 1) & 1 else 0)) - mm2 for l, v in enumerate(block)]
    return y


def dequantize_q4_k(b):
    d = fp16_value(struct.unpack_from('<H', b, 0)[0])
    dmin = fp16_value(struct.unpack_from('<H', b, 2)[0])
    sc = b[4:16]
    q = b[16:]
    y = []
    for n in range(4):
        s1, m1 = scale_min_k4(2 * n, sc)
        s2, m2 = scale_min_k4(2 * n + 1, sc)
        d1, mm1 = d * F(s1), dmin * F(m1)
        d2, mm2 = d * F(s2), dmin * F(m2)
        block = q[32 * n:32 * n + 32]
        y += [d1 * F(v & 0xF) - mm1 for v in block]
        y += [d2 * F(v >> 4) - mm2 for v in block]
    return y


# --- Q6_K (super-block of 256: 16 sub-blocks of 16, 8-bit scales) ------------------------------

def make_qx_quants_rmse1(n, nmax, x):
    """make_qx_quants with rmse_type 1 and no quant weights (weights x^2). Returns (scale, L)."""
    mx, amax = F(0), F(0)
    for v in x:
        if abs(v) > amax:
            amax, mx = abs(v), v
    if amax < GROUP_MAX_EPS:
        return F(0), [0] * n
    iscale = F(-nmax) / mx

    def pass_(isc):
        sumlx, suml2, ls = F(0), F(0), []
        for v in x:
            l = max(-nmax, min(nmax - 1, nearest_int(isc * v)))
            ls.append(l)
            w = v * v
            sumlx = sumlx + w * v * F(l)
            suml2 = suml2 + w * F(l) * F(l)
        return sumlx, suml2, ls

    sumlx, suml2, ls = pass_(iscale)
    L = [l + nmax for l in ls]
    scale = sumlx / suml2 if suml2 != 0 else F(0)
    best = scale * sumlx
    for step in range(-9, 10):
        if step == 0:
            continue
        iscale = -(F(nmax) + F(0.1) * F(step)) / mx
        sumlx, suml2, ls = pass_(iscale)
        if suml2 > 0 and sumlx * sumlx > best * suml2:
            L = [l + nmax for l in ls]
            scale = sumlx / suml2
            best = scale * sumlx
    return scale, L


def quantize_q6_k(x):
    L = [0] * QK_K
    scales = [F(0)] * 16
    max_scale, max_abs_scale = F(0), F(0)
    for ib in range(16):
        s, lq = make_qx_quants_rmse1(16, 32, x[16 * ib:16 * ib + 16])
        scales[ib] = s
        L[16 * ib:16 * ib + 16] = lq
        if abs(s) > max_abs_scale:
            max_abs_scale, max_scale = abs(s), s
    if max_abs_scale < GROUP_MAX_EPS:
        return bytes(210)  # memset 0 (and d = fp16(0) = 0)
    iscale = F(-128) / max_scale
    d_bits = fp16_bits(F(1) / iscale)
    sc = [min(127, nearest_int(iscale * s)) for s in scales]  # int8_t
    for j in range(16):
        d = fp16_value(d_bits) * F(sc[j])
        if d == 0:
            continue
        for ii in range(16):
            l = nearest_int(x[16 * j + ii] / d)
            L[16 * j + ii] = max(-32, min(31, l)) + 32
    ql = bytearray(128)
    qh = bytearray(64)
    for half in range(2):
        j = 128 * half
        for l in range(32):
            q1, q2, q3, q4 = (L[j + l + 32 * k] & 0xF for k in range(4))
            ql[64 * half + l] = q1 | (q3 << 4)
            ql[64 * half + l + 32] = q2 | (q4 << 4)
            qh[32 * half + l] = ((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2)
                                 | ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6))
    return bytes(ql) + bytes(qh) + bytes(v & 0xFF for v in sc) + u16(d_bits)


def dequantize_q6_k(b):
    ql, qh = b[0:128], b[128:192]
    sc = [int8(v) for v in b[192:208]]
    d = fp16_value(struct.unpack_from('<H', b, 208)[0])
    y = [F(0)] * QK_K
    for half in range(2):
        for l in range(32):
            is_ = 8 * half + l // 16
            a, c, h = ql[64 * half + l], ql[64 * half + l + 32], qh[32 * half + l]
            q1 = ((a & 0xF) | (((h >> 0) & 3) << 4)) - 32
            q2 = ((c & 0xF) | (((h >> 2) & 3) << 4)) - 32
            q3 = ((a >> 4) | (((h >> 4) & 3) << 4)) - 32
            q4 = ((c >> 4) | (((h >> 6) & 3) << 4)) - 32
            base = 128 * half + l
            y[base] = d * F(sc[is_]) * F(q1)
            y[base + 32] = d * F(sc[is_ + 2]) * F(q2)
            y[base + 64] = d * F(sc[is_ + 4]) * F(q3)
            y[base + 96] = d * F(sc[is_ + 6]) * F(q4)
    return y


# --- 4-bit non-linear (IQ4_NL: 32 values, IQ4_XS: 256) ---------------------------------------

# kvalues_iq4nl: the 16 levels a 4-bit code stands for (times the block's scale).
KVALUES_IQ4NL = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113]
KV = [F(v) for v in KVALUES_IQ4NL]


def iq4nl_index(v):
    """best_index_int8: the nearest level. Below the first / above the last level: the end.
    Otherwise the first level above v (hi) and the one before it (lo); lo only when
    v - lo < hi - v in float32, so a midpoint goes to hi."""
    if v <= KV[0]:
        return 0
    if v >= KV[15]:
        return 15
    hi = next(i for i in range(1, 16) if v < KV[i])
    return hi - 1 if v - KV[hi - 1] < KV[hi] - v else hi


def iq4nl_fit(xb, inv):
    """Codes for the reciprocal scale `inv`, and the weighted sums of the least-squares refit
    (weights x^2, as quantize_row_iq4_nl_impl takes them with no quant_weights)."""
    sumqx, sumq2 = F(0), F(0)
    for v in xb:
        q = KV[iq4nl_index(inv * v)]
        w = v * v
        sumqx = sumqx + w * q * v
        sumq2 = sumq2 + w * q * q
    return sumqx, sumq2


def iq4nl_scale(xb, ntry=7):
    """quantize_row_iq4_nl_impl's search for one group of 32 (ntry 7, what quantize_iq4_nl and
    quantize_iq4_xs pass): start from the scale mapping the signed absmax onto -levels[0], refit,
    then try the reciprocals (itry + levels[0]) / max, keeping a refit when sumqx^2 > best*sumq2."""
    amax, mx = F(0), F(0)
    for v in xb:
        if abs(v) > amax:
            amax, mx = abs(v), v
    if amax < GROUP_MAX_EPS:
        return F(0)
    d = -mx / KV[0]
    sumqx, sumq2 = iq4nl_fit(xb, F(1) / d)
    d = sumqx / sumq2 if sumq2 > 0 else F(0)
    best = d * sumqx
    for itry in range(-ntry, ntry + 1):
        sumqx, sumq2 = iq4nl_fit(xb, F(itry + KVALUES_IQ4NL[0]) / mx)
        if sumq2 > 0 and sumqx * sumqx > best * sumq2:
            d = sumqx / sumq2
            best = d * sumqx
    return d


def iq4nl_pack(xb, inv):
    codes = [iq4nl_index(inv * v) for v in xb]
    return bytes(codes[j] | (codes[16 + j] << 4) for j in range(16))


def quantize_iq4_nl(x):
    d = iq4nl_scale(x)
    # C's `d ? 1/d : 0`: only a zero scale gives 0
    return u16(fp16_bits(d)) + iq4nl_pack(x, F(1) / d if d != 0 else F(0))


def dequantize_iq4_nl(b):
    d = fp16_value(struct.unpack_from('<H', b, 0)[0])
    qs = b[2:18]
    return [d * KV[q & 0xF] for q in qs] + [d * KV[q >> 4] for q in qs]


def quantize_iq4_xs(x):
    scales = [iq4nl_scale(x[32 * ib:32 * ib + 32]) for ib in range(8)]
    max_scale, amax_scale = F(0), F(0)
    for s in scales:
        if abs(s) > amax_scale:
            amax_scale, max_scale = abs(s), s
    d = -max_scale / F(32)
    inv = F(1) / d if d != 0 else F(0)
    scales_h, scales_l, qs = 0, [0] * 4, b''
    for ib in range(8):
        l = max(-32, min(31, nearest_int(inv * scales[ib])))
        dl = d * F(l)
        qs += iq4nl_pack(x[32 * ib:32 * ib + 32], F(1) / dl if dl != 0 else F(0))
        u = l + 32
        scales_l[ib // 2] |= (u & 0xF) << (4 * (ib % 2))
        scales_h |= (u >> 4) << (2 * ib)
    return u16(fp16_bits(d)) + u16(scales_h) + bytes(scales_l) + qs


def dequantize_iq4_xs(b):
    d = fp16_value(struct.unpack_from('<H', b, 0)[0])
    scales_h = struct.unpack_from('<H', b, 2)[0]
    y = []
    for ib in range(8):
        ls = ((b[4 + ib // 2] >> (4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4)
        dl = d * F(ls - 32)
        qs = b[8 + 16 * ib:24 + 16 * ib]
        y += [dl * KV[q & 0xF] for q in qs] + [dl * KV[q >> 4] for q in qs]
    return y


# --- the cases -------------------------------------------------------------------------------

TYPES = {
    # name: (block elements, block bytes, quantize, dequantize)
    'Q8_0': (32, 34, quantize_q8_0, dequantize_q8_0),
    'Q4_0': (32, 18, quantize_q4_0, dequantize_q4_0),
    'Q4_1': (32, 20, quantize_q4_1, dequantize_q4_1),
    'Q5_0': (32, 22, quantize_q5_0, dequantize_q5_0),
    'Q5_1': (32, 24, quantize_q5_1, dequantize_q5_1),
    'Q4_K': (256, 144, quantize_q4_k, dequantize_q4_k),
    'Q5_K': (256, 176, quantize_q5_k, dequantize_q5_k),
    'Q6_K': (256, 210, quantize_q6_k, dequantize_q6_k),
    'IQ4_NL': (32, 18, quantize_iq4_nl, dequantize_iq4_nl),
    'IQ4_XS': (256, 136, quantize_iq4_xs, dequantize_iq4_xs),
}

rng = np.random.default_rng(20240607)


def weights_like(n, std=0.02, outliers=0):
    """Weight-like values: normal(0, std), a few outliers 8x wider, rounded to bfloat16 like a
    real checkpoint (so many values share exponents and ties can happen)."""
    v = rng.normal(0.0, std, n).astype(np.float32)
    for k in rng.choice(n, outliers, replace=False) if outliers else []:
        v[k] *= 8
    bits = v.view(np.uint32)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return bits.astype(np.uint32).view(np.float32)


def hexs(b):
    return bytes(b).hex()


def f32hex(values):
    return b''.join(struct.pack('<f', float(v)) for v in values).hex()


def case(type_name, name, x, note, how='reference', hand=None):
    n, size, quantize, dequantize = TYPES[type_name]
    x = [F(v) for v in x]
    assert len(x) % n == 0, (type_name, name, len(x))
    out = b''.join(quantize(x[i:i + n]) for i in range(0, len(x), n))
    assert len(out) == len(x) // n * size, (type_name, name)
    if hand is not None:
        assert out.hex() == hand, f'{type_name} {name}: hand {hand} != reference {out.hex()}'
    back = []
    for i in range(0, len(out), size):
        back += dequantize(out[i:i + size])
    return {
        'name': name,
        'how': how,
        'note': note,
        # float32 values written as the doubles equal to them (exact)
        'input': [float(v) for v in x],
        'expected': out.hex(),
        'dequant': f32hex(back),
    }


def ramp(n, lo, step):
    return [lo + step * i for i in range(n)]


ZEROS = [0.0] * 32


def q8_0_cases():
    # Hand: all zeros. amax = 0, d = 0/127 = +0 -> fp16 0x0000; id = 0 (d is 0); every code 0.
    zeros = '0000' + '00' * 32
    # Hand: ties. amax = 127 -> d = 1.0 exactly (fp16 0x3c00, bytes 00 3c), id = 1.0, x*id = x.
    # roundf rounds half away from zero: 0.5->1, -0.5->-1, 1.5->2, -1.5->-2, 2.5->3, -2.5->-3,
    # 126.5->127 (torch.round, half to even, would give 0, -0, 2, -2, 2, -2, 126).
    # Codes as int8 bytes: 7f 01 ff 02 fe 03 fd 7f 81(-127) then 23 zeros.
    ties = [127.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 126.5, -127.0] + [0.0] * 23
    ties_hex = '003c' + '7f01ff02fe03fd7f81' + '00' * 23
    # Hand: negative extreme. amax = 254 (from -254) -> d = 2.0 (fp16 0x4000), id = 0.5:
    # -254 -> -127 (0x81); 3 -> 1.5 -> 2; -1 -> -0.5 -> -1 (0xff); 5 -> 2.5 -> 3; 1 -> 0.5 -> 1.
    neg = [-254.0, 3.0, -1.0, 5.0, 1.0] + [0.0] * 27
    neg_hex = '0040' + '8102ff0301' + '00' * 27
    return [
        case('Q8_0', 'all zeros', ZEROS, 'd = 0 and id = 0: every code is 0', 'hand', zeros),
        case('Q8_0', 'ties at .5 round away from zero', ties, 'roundf, not half-to-even', 'hand',
             ties_hex),
        case('Q8_0', 'negative absmax', neg, 'd = amax/127 is positive even when the extreme is negative',
             'hand', neg_hex),
        case('Q8_0', 'scale not representable in fp16', ramp(32, -1.0, 1.0 / 31),
             'd = 1/127 rounds to fp16 0x2008, codes use the float32 id = 1/d'),
        case('Q8_0', 'weights (4 blocks)', weights_like(128, outliers=2), 'bf16-rounded N(0, 0.02)'),
    ]


def q4_0_cases():
    # Hand: all zeros. max = +0 (initial), d = 0 / -8 = -0.0 -> fp16 0x8000 (bytes 00 80), id = 0,
    # x0 = 0 -> (int8_t)(0 + 8.5) = 8 -> every nibble 8: bytes 88.
    zeros = '0080' + '88' * 16
    # Hand: ties, negative extreme. max = -8 (largest magnitude) -> d = -8/-8 = 1.0 (00 3c), id = 1,
    # code = MIN(15, trunc(x + 8.5)): round half UP (not away from zero):
    #   x[0] = -8 -> 0; x[1] = 0.5 -> 9; x[2] = -0.5 -> 8; x[3] = 1.5 -> 10; x[4] = -1.5 -> 7;
    #   x[5] = 2.5 -> 11; x[6] = -2.5 -> 6; x[7] = 7 -> 15; x[8] = 7.5 -> 16 -> MIN 15;
    #   x[9..15] = 0 -> 8; x[16] = 3 -> 11; x[17] = -3 -> 5; x[18..31] = 0 -> 8.
    # Byte j = code[j] | code[j+16] << 4 (low nibble = first half of the block):
    #   b0 = 0 | 11<<4 = b0; b1 = 9 | 5<<4 = 59; b2..b15 = code[j] | 8<<4 = 88 8a 87 8b 86 8f 8f 88..
    ties = [-8.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 7.0, 7.5] + [0.0] * 7 + [3.0, -3.0] + [0.0] * 14
    ties_hex = '003c' + 'b059' + '888a878b868f8f' + '88' * 7
    # Hand: positive extreme. max = 8 -> d = 8/-8 = -1.0 (fp16 0xbc00, bytes 00 bc), id = -1:
    #   x = 8 -> -8 + 8.5 = 0.5 -> 0; x = -8 -> 8 + 8.5 = 16.5 -> 16 -> MIN 15; x = 0 -> 8;
    #   x = -0.5 -> 0.5 + 8.5 = 9 -> 9; x = 0.5 -> -0.5 + 8.5 = 8 -> 8.
    pos = [8.0, -8.0, -0.5, 0.5] + [0.0] * 28
    pos_hex = '00bc' + '808f8988' + '88' * 12
    # Hand: the float32 add. id = 1 (max = -8); x = 0.49999997 (0x3effffff): exact arithmetic gives
    # 8.99999997 -> 8, but x0 + 8.5f rounds in float32 to 9.0 -> code 9.
    add = [-8.0, 0.49999997] + [0.0] * 30
    add_hex = '003c' + '8089' + '88' * 14
    return [
        case('Q4_0', 'all zeros', ZEROS, 'd = -0.0 (fp16 0x8000), codes 8', 'hand', zeros),
        case('Q4_0', 'ties round half up', ties, '(int8_t)(x*id + 8.5f): half up, then MIN 15', 'hand',
             ties_hex),
        case('Q4_0', 'positive extreme', pos, 'd = max/-8 is negative; -8*id = 8 clamps to 15', 'hand',
             pos_hex),
        case('Q4_0', 'float32 add rounds before truncation', add, 'x0 + 8.5f rounds to 9.0', 'hand',
             add_hex),
        case('Q4_0', 'weights (4 blocks)', weights_like(128, outliers=2), 'bf16-rounded N(0, 0.02)'),
    ]


def q4_1_cases():
    # Hand: x = 0..15, 0..15: min 0, max 15, d = 15/15 = 1 (00 3c), m = 0 (00 00), id = 1,
    # code = MIN(15, trunc(x - 0 + 0.5)) = x; byte j = j | j << 4.
    r = ramp(16, 0.0, 1.0) * 2
    r_hex = '003c' + '0000' + ''.join(f'{j | (j << 4):02x}' for j in range(16))
    # Hand: all zeros. min = max = 0, d = 0, id = 0, m = 0: codes trunc(0 + 0.5) = 0.
    zeros = '0000' + '0000' + '00' * 16
    return [
        case('Q4_1', 'all zeros', ZEROS, 'd = 0, m = 0, codes 0', 'hand', zeros),
        case('Q4_1', 'ramp 0..15 twice', r, 'd = 1, m = 0: codes equal the values', 'hand', r_hex),
        case('Q4_1', 'constant block', [0.75] * 32, 'max = min: d = 0, m = 0.75, codes 0'),
        case('Q4_1', 'weights (4 blocks)', weights_like(128, outliers=2), 'bf16-rounded N(0, 0.02)'),
    ]


def q5_0_cases():
    # Hand: x = -16..15: max (largest magnitude) = -16, d = 1 (00 3c), id = 1, code = x + 16 =
    # 0..31 (trunc(x + 16.5)). qs[j] = (j & 15) | ((j+16) & 15) << 4 = j | j << 4; the fifth bit
    # is set for codes 16..31, i.e. elements 16..31 -> qh = 0xffff0000 (bytes 00 00 ff ff).
    r = ramp(32, -16.0, 1.0)
    r_hex = '003c' + '0000ffff' + ''.join(f'{j | (j << 4):02x}' for j in range(16))
    # Hand: all zeros. d = 0/-16 = -0.0 (00 80), codes trunc(16.5) = 16: low nibbles 0, fifth
    # bit set everywhere: qh = 0xffffffff.
    zeros = '0080' + 'ffffffff' + '00' * 16
    return [
        case('Q5_0', 'all zeros', ZEROS, 'd = -0.0, codes 16', 'hand', zeros),
        case('Q5_0', 'ramp -16..15', r, 'd = 1: codes x + 16, fifth bits in qh', 'hand', r_hex),
        case('Q5_0', 'weights (4 blocks)', weights_like(128, outliers=2), 'bf16-rounded N(0, 0.02)'),
    ]


def q5_1_cases():
    # Hand: x = 0..31: min 0, max 31, d = 31/31 = 1 (00 3c), m = 0 (00 00), codes = x;
    # qs[j] = j | j << 4 (j < 16), fifth bit for elements 16..31: qh = 0xffff0000.
    r = ramp(32, 0.0, 1.0)
    r_hex = '003c' + '0000' + '0000ffff' + ''.join(f'{j | (j << 4):02x}' for j in range(16))
    return [
        case('Q5_1', 'ramp 0..31', r, 'd = 1, m = 0: codes equal the values', 'hand', r_hex),
        case('Q5_1', 'shifted ramp', ramp(32, -3.0, 0.25), 'm = -3, d = 0.25'),
        case('Q5_1', 'weights (4 blocks)', weights_like(128, outliers=2), 'bf16-rounded N(0, 0.02)'),
    ]


def k_cases(t):
    zeros = [0.0] * 256
    positive = [abs(float(v)) + 0.01 for v in weights_like(256)]
    tiny = [float(v) * 1e-12 for v in weights_like(256)]
    mixed = list(weights_like(128)) + [0.0] * 64 + list(weights_like(64, std=0.5))
    out = [
        case(t, 'all zeros', zeros, 'all-zero super-block'),
        case(t, 'weights (2 super-blocks)', weights_like(512, outliers=3), 'bf16-rounded N(0, 0.02)'),
        case(t, 'all positive', positive, 'min > 0 is replaced by 0 in the search'),
        case(t, 'tiny values', tiny, 'magnitudes near 1e-14: fp16 scales underflow'),
        case(t, 'mixed sub-blocks', mixed, 'a zero sub-block and a wide one beside narrow ones'),
        case(t, 'ramp', ramp(256, -1.0, 2.0 / 255), 'evenly spaced values'),
    ]
    if t == 'Q6_K':
        # Hand: all zeros -> every sub-block's make_qx_quants returns 0 (amax < GROUP_MAX_EPS),
        # max_abs_scale = 0 -> the whole block is zeroed: 210 zero bytes.
        out[0] = case(t, 'all zeros', zeros, 'block memset to 0', 'hand', '00' * 210)
    return out


def iq4_nl_cases():
    # Hand: all zeros. Scale 0 (amax < GROUP_MAX_EPS) -> d = fp16(0) = 00 00, reciprocal 0, every
    # code the level nearest 0: 0 - (-10) < 1 - 0 is false -> level 1, index 8 -> bytes 88.
    zeros = '0000' + '88' * 16
    # Hand: the levels themselves, then reversed. max = -127, the trial itry = 0 has reciprocal
    # -127/-127 = 1: codes equal the values, sumqx and sumq2 are the same sums -> d = 1 exactly,
    # and no trial can beat a zero-error fit. fp16(1) = 00 3c; code j then 15 - j:
    # byte j = j | (15 - j) << 4.
    grid = [float(v) for v in KVALUES_IQ4NL] + [float(v) for v in reversed(KVALUES_IQ4NL)]
    grid_hex = '003c' + ''.join(f'{j | ((15 - j) << 4):02x}' for j in range(16))
    # midpoints between neighbouring levels (and the grid's ends) at scale 1: the refit moves d
    # slightly, so which way each lands is the search's, not hand-worked
    mids = [(KVALUES_IQ4NL[i] + KVALUES_IQ4NL[i + 1]) / 2 for i in range(15)]
    ties = mids + [-127.0] + [-m for m in mids] + [113.0]
    return [
        case('IQ4_NL', 'all zeros', ZEROS, 'scale 0: d = 0, codes index 8 (level 1)', 'hand', zeros),
        case('IQ4_NL', 'the levels, then reversed', grid, 'd = 1: codes are the levels\' indices',
             'hand', grid_hex),
        case('IQ4_NL', 'midpoint ties', ties, 'values between levels: best_index_int8 ties go up'),
        case('IQ4_NL', 'positive extreme', [100.0] + ramp(31, -1.0, 0.05),
             'max > 0: the first trial scale is negative'),
        case('IQ4_NL', 'weights (4 blocks)', weights_like(128, outliers=2), 'bf16-rounded N(0, 0.02)'),
    ]


def iq4_xs_cases():
    # Hand: all zeros. Every sub-block scale 0 -> max_scale = 0, d = -0/32 = -0.0 -> fp16 80 00
    # (bytes 00 80); reciprocal 0, each l = nearest_int(0) = 0 -> stored l + 32 = 32: low 4 bits 0
    # (scales_l 00 00 00 00), high 2 bits 2 per sub-block (scales_h 0b1010... = 0xaaaa, aa aa);
    # codes index 8 as in IQ4_NL (88).
    zeros = '0080' + 'aaaa' + '00' * 4 + '88' * 128
    mixed = list(weights_like(128)) + [0.0] * 64 + list(weights_like(64, std=0.5))
    return [
        case('IQ4_XS', 'all zeros', [0.0] * 256, 'd = -0.0, scales 32, codes index 8', 'hand', zeros),
        case('IQ4_XS', 'weights (2 super-blocks)', weights_like(512, outliers=3),
             'bf16-rounded N(0, 0.02)'),
        case('IQ4_XS', 'tiny values', [float(v) * 1e-12 for v in weights_like(256)],
             'magnitudes near 1e-14: the fp16 d underflows'),
        case('IQ4_XS', 'mixed sub-blocks', mixed,
             'a zero sub-block (scale 0) and a wide one beside narrow ones: 6-bit scales clamp'),
        case('IQ4_XS', 'ramp', ramp(256, -1.0, 2.0 / 255), 'evenly spaced values'),
    ]


# What llama-quantize runs for the IQ4 types without an importance matrix. (IQ4_NL's
# quantize_row_iq4_nl_ref skips the scale search; quantize_iq4_nl runs it.)
SOURCES = {
    'IQ4_NL': 'ggml-quants.c quantize_iq4_nl (no quant_weights) / dequantize_row_iq4_nl',
    'IQ4_XS': 'ggml-quants.c quantize_row_iq4_xs_ref = quantize_iq4_xs (no quant_weights) / '
              'dequantize_row_iq4_xs',
}


GGML_IDS = {'Q2_K': 10, 'Q3_K': 11, 'Q4_0': 2, 'Q4_1': 3, 'Q5_0': 6, 'Q5_1': 7, 'Q8_0': 8, 'Q4_K': 12, 'Q5_K': 13, 'Q6_K': 14,
             'IQ4_NL': 20, 'IQ4_XS': 23}


def libggml():
    """ggml's own quantizer, when node-llama-cpp's prebuilt libggml-base is installed (npm ci):
    ggml_quantize_chunk with no importance matrix, what llama-quantize runs."""
    import ctypes
    import glob
    root = os.path.join(HERE, '..', '..', '..', 'node_modules', '@node-llama-cpp', 'linux-x64', 'bins', 'linux-x64')
    libs = glob.glob(os.path.join(root, 'libggml-base.so'))
    if not libs:
        return None
    lib = ctypes.CDLL(libs[0])
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]

    def quantize(type_name, x):
        src = np.asarray(x, dtype=np.float32)
        n, size = LIBGGML_BLOCKS.get(type_name) or TYPES[type_name][:2]
        dst = ctypes.create_string_buffer(len(x) // n * size)
        lib.ggml_quantize_chunk(GGML_IDS[type_name], src.ctypes.data, dst, 0, 1, len(x), None)
        return dst.raw

    def dequantize(type_name, b):
        n, size = LIBGGML_BLOCKS[type_name]
        out = np.zeros(len(b) // size * n, dtype=np.float32)
        fn = getattr(lib, 'dequantize_row_' + type_name[0].lower() + type_name[1:])
        fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int64]
        fn(bytes(b), out.ctypes.data, len(out))
        return [F(v) for v in out]
    quantize.dequantize = dequantize
    return quantize


# Types whose vectors come from libggml itself (node-llama-cpp's build of ggml-quants.c) rather
# than from a transcription here: llama.cpp's real quantizer is the reference.
LIBGGML_BLOCKS = {'Q2_K': (256, 84), 'Q3_K': (256, 110)}
_LIBGGML = None


def libggml_codec(type_name):
    def quantize(x):
        global _LIBGGML
        _LIBGGML = _LIBGGML or libggml()
        if _LIBGGML is None:
            raise SystemExit('Q2_K / Q3_K vectors need node-llama-cpp installed (npm ci)')
        return _LIBGGML(type_name, x)

    def dequantize(b):
        return _LIBGGML.dequantize(type_name, b)
    return quantize, dequantize


def main():
    ggml = libggml()
    for t in LIBGGML_BLOCKS:
        TYPES[t] = (*LIBGGML_BLOCKS[t], *libggml_codec(t))
    derivation = {
        'hand': 'worked by hand (see the comments in gguf_reference.py); the re-computation agrees',
        'reference': 'gguf_reference.py: scalar numpy float32 re-computation of the ggml reference '
                     'quantizer, one rounding per C operation, no fused multiply-add',
    }
    builders = {
        'Q8_0': q8_0_cases, 'Q4_0': q4_0_cases, 'Q4_1': q4_1_cases, 'Q5_0': q5_0_cases,
        'Q5_1': q5_1_cases, 'Q4_K': lambda: k_cases('Q4_K'), 'Q6_K': lambda: k_cases('Q6_K'),
        'IQ4_NL': iq4_nl_cases, 'IQ4_XS': iq4_xs_cases,
        'Q5_K': lambda: k_cases('Q5_K'),  # last: the random inputs of the others stay as they were
        'Q2_K': lambda: k_cases('Q2_K'),
        'Q3_K': lambda: k_cases('Q3_K'),
    }
    for t, build in builders.items():
        n, size, _, _ = TYPES[t]
        doc = {
            'type': t,
            'block_elements': n,
            'block_bytes': size,
            'source': SOURCES.get(t, 'ggml-quants.c quantize_row_%s_ref / dequantize_row_%s'
                                  % (t.lower(), t.lower())),
            'derivation': derivation,
            'cases': build(),
        }
        if t in LIBGGML_BLOCKS:
            doc['derivation'] = {'reference': 'libggml (node-llama-cpp 3.22.1): ggml_quantize_chunk with no '
                                               'importance matrix and dequantize_row_*, called through ctypes'}
        if ggml is not None:
            # the transcription against the real thing (not a source of the vectors: a check)
            for c in doc['cases']:
                got = ggml(t, [F(v) for v in c['input']]).hex()
                assert got == c['expected'], f'{t} {c["name"]}: libggml {got} != {c["expected"]}'
            print(t, 'libggml agrees on', len(doc['cases']), 'cases')
        path = os.path.join(HERE, 'gguf-%s.json' % t.lower())
        with open(path, 'w') as fh:
            json.dump(doc, fh, indent=1)
            fh.write('\n')
        print(path, len(doc['cases']), 'cases')


if __name__ == '__main__':
    main()
