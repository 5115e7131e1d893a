#!/usr/bin/python3
"""Golden vectors for quantd, produced by real PyTorch.

Run with Debian's python3-torch (1.13): `apt-get install python3-torch` then
`npm run golden` (= /usr/bin/python3 test/golden/generate.py). The output is committed;
tests read it and never need torch.

Sources, per case (recorded in each case's "source"):
  * torch native ops where torch 1.13 has them: MinMaxObserver / PerChannelMinMaxObserver
    (choose_qparams), torch.quantize_per_tensor / quantize_per_channel (.int_repr(), which for
    quint4x2 / quint2x4 is the packed bytes), torch.dequantize, fake_quantize_*_cachemask,
    torch.choose_qparams_optimized;
  * the seed formulas evaluated with torch float32 ops where 1.13 lacks the op
    (quantized_decomposed per_token / per_group, int16 / int4 / int2 qdtypes, fp8 scaling),
    cross-checked against the native ops wherever both exist (the generator asserts equality);
  * fp8 encodings from an exact rational oracle (1.13 has no float8 dtypes);
  * choose_qparams_optimized from the seed's numpy `param_search_greedy`, checked against torch.
"""
import base64
import json
import math
import os
import struct
import sys
from fractions import Fraction

import numpy as np
import torch
from torch.ao.quantization.observer import MinMaxObserver, PerChannelMinMaxObserver

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, 'vectors')
F32_EPS = float(torch.finfo(torch.float32).eps)

QINFO = {  # qdtype: (min, max, bits, safetensors dtype)
    'int8': (-128, 127, 8, 'I8'),
    'uint8': (0, 255, 8, 'U8'),
    'int16': (-32768, 32767, 16, 'I16'),
    'int32': (-2**31, 2**31 - 1, 32, 'I32'),
    'int4': (-8, 7, 4, 'U8'),
    'uint4': (0, 15, 4, 'U8'),
    'int2': (-2, 1, 2, 'U8'),
    'uint2': (0, 3, 2, 'U8'),
    'float8_e4m3fn': (-448, 448, 8, 'F8_E4M3'),
    'float8_e5m2': (-57344, 57344, 8, 'F8_E5M2'),
}
TORCH_Q = {'int8': torch.qint8, 'uint8': torch.quint8, 'int32': torch.qint32,
           'uint4': torch.quint4x2, 'uint2': torch.quint2x4}
# Observers of torch 1.13 exist for these (quint4x2 per tensor only).
OBSERVER_Q = {'int8': torch.qint8, 'uint8': torch.quint8, 'int32': torch.qint32}
FLOAT8 = ('float8_e4m3fn', 'float8_e5m2')


# ---------------------------------------------------------------------------------- encoding
def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode('ascii')


def float_tensor(t: torch.Tensor, dtype: str) -> dict:
    """A float tensor in the given storage dtype, as {dtype, shape, data}."""
    shape = list(t.shape)
    if dtype == 'float32':
        raw = t.to(torch.float32).contiguous().numpy().astype('<f4').tobytes()
        st = 'F32'
    elif dtype == 'float16':
        raw = t.to(torch.float16).contiguous().numpy().astype('<f2').tobytes()
        st = 'F16'
    else:
        raw = t.to(torch.bfloat16).contiguous().view(torch.int16).numpy().astype('<i2').tobytes()
        st = 'BF16'
    return {'dtype': st, 'shape': shape, 'data': b64(raw)}


def int_tensor(values, st: str, shape) -> dict:
    arr = np.asarray(values)
    np_dtype = {'I8': '<i1', 'U8': '<u1', 'I16': '<i2', 'I32': '<i4', 'BOOL': '<u1',
                'F8_E4M3': '<u1', 'F8_E5M2': '<u1'}[st]
    return {'dtype': st, 'shape': list(shape), 'data': b64(arr.astype(np_dtype).tobytes())}


def f32_tensor(values, shape) -> dict:
    arr = np.asarray(values, dtype=np.float32)
    return {'dtype': 'F32', 'shape': list(shape), 'data': b64(arr.astype('<f4').tobytes())}


def pack_bits(values, bits: int) -> bytes:
    """torch quint4x2 / quint2x4 layout: flat, LSB first, last byte zero-padded."""
    per = 8 // bits
    mask = (1 << bits) - 1
    flat = [int(v) & mask for v in np.asarray(values).reshape(-1)]
    out = bytearray((len(flat) + per - 1) // per)
    for i, v in enumerate(flat):
        out[i // per] |= v << ((i % per) * bits)
    return bytes(out)


def codes_tensor(codes: torch.Tensor, qdtype: str) -> dict:
    """Stored form of integer codes (or fp8 code bytes) under the qtensor container rules."""
    qmin, qmax, bits, st = QINFO[qdtype]
    flat = codes.reshape(-1).to(torch.int64).numpy()
    if bits < 8:
        raw = pack_bits(flat, bits)
        return {'dtype': 'U8', 'shape': [len(raw)], 'data': b64(raw)}
    return int_tensor(flat, st, list(codes.shape))


def zp_tensor(zp: torch.Tensor, float_zp: bool, shape) -> dict:
    if float_zp:
        return f32_tensor(zp.to(torch.float32).reshape(-1).numpy(), shape)
    return int_tensor(zp.to(torch.int64).reshape(-1).numpy(), 'I32', shape)


# ------------------------------------------------------------------------------------- fp8
def fp8_values(fmt: str):
    """Exact value of every code: list of (code, Fraction or None for NaN/inf)."""
    mant_bits, bias = (3, 7) if fmt == 'float8_e4m3fn' else (2, 15)
    vals = {}
    for code in range(256):
        sign = -1 if code & 0x80 else 1
        mag = code & 0x7F
        e = mag >> mant_bits
        m = mag & ((1 << mant_bits) - 1)
        if fmt == 'float8_e4m3fn' and mag == 0x7F:
            continue
        if fmt == 'float8_e5m2' and e == 31:
            continue
        if e == 0:
            v = Fraction(m, 1 << mant_bits) * Fraction(2) ** (1 - bias)
        else:
            v = (1 + Fraction(m, 1 << mant_bits)) * Fraction(2) ** (e - bias)
        vals[code] = sign * v
    return vals


def fp8_float_table(fmt: str):
    """code -> float value, with -0.0 for the negative zero (Fraction has no signed zero)."""
    return {c: math.copysign(float(v), -1.0 if c & 0x80 else 1.0) for c, v in fp8_values(fmt).items()}


FP8_POS = {}
for _fmt in FLOAT8:
    FP8_POS[_fmt] = sorted((v, c) for c, v in fp8_values(_fmt).items() if v >= 0 and not (c & 0x80))


def fp8_encode(x: float, fmt: str) -> int:
    """Nearest code, ties to even mantissa; x already clamped into the finite range."""
    sign = 0x80 if math.copysign(1.0, x) < 0 else 0
    a = Fraction(abs(x))
    table = FP8_POS[fmt]
    best = None
    for v, c in table:
        d = abs(a - v)
        if best is None or d < best[0] or (d == best[0] and (c & 1) == 0):
            best = (d, c)
    return sign | best[1]


def fp8_codes(v: torch.Tensor, fmt: str) -> torch.Tensor:
    flat = [fp8_encode(float(x), fmt) for x in v.reshape(-1).tolist()]
    return torch.tensor(flat, dtype=torch.int64).reshape(v.shape)


# ------------------------------------------------------------------------------- numerics
def determine(min_val, max_val, qmin, qmax, mode, eps, qdtype, custom):
    """torch.ao.quantization.utils.determine_qparams, float32 torch ops (1.13 lacks it)."""
    min_val = min_val.to(torch.float32)
    max_val = max_val.to(torch.float32)
    eps_t = torch.tensor([eps], dtype=torch.float32)
    min_neg = torch.min(min_val, torch.zeros_like(min_val))
    max_pos = torch.max(max_val, torch.zeros_like(max_val))
    if mode == 'symmetric':
        max_pos = torch.max(-min_neg, max_pos)
        scale = max_pos / (float(qmax - qmin) / 2)
        scale = torch.max(scale, eps_t)
        if QINFO[qdtype][0] < 0:
            zp = torch.zeros_like(scale, dtype=torch.int64)
        else:  # quantd: unsigned midpoint (torch: 128 for uint8), (qmin+qmax)//2 if customised
            mid = (qmin + qmax) // 2 if custom else 2 ** (QINFO[qdtype][2] - 1)
            zp = torch.full_like(scale, mid, dtype=torch.int64)
    elif mode == 'float_qparams':
        scale = (max_val - min_val) / float(qmax - qmin)
        scale = torch.where(scale > eps_t, scale, torch.ones_like(scale))
        zp = -1 * min_val / scale
    else:
        scale = (max_pos - min_neg) / float(qmax - qmin)
        scale = torch.max(scale, eps_t)
        zp = qmin - torch.round(min_neg / scale).to(torch.int)
        zp = torch.clamp(zp, qmin, qmax).to(torch.int64)
    return scale.to(torch.float32), zp


def observer_qparams(x, scheme, mode, qdtype, axis, qmin, qmax, custom, eps):
    qscheme = {('per_tensor', 'affine'): torch.per_tensor_affine,
               ('per_tensor', 'symmetric'): torch.per_tensor_symmetric,
               ('per_channel', 'affine'): torch.per_channel_affine,
               ('per_channel', 'symmetric'): torch.per_channel_symmetric,
               ('per_channel', 'float_qparams'): torch.per_channel_affine_float_qparams}[(scheme, mode)]
    kwargs = dict(dtype=OBSERVER_Q[qdtype], qscheme=qscheme, eps=eps)
    if custom:
        kwargs.update(quant_min=qmin, quant_max=qmax)
    ob = (MinMaxObserver(**kwargs) if scheme == 'per_tensor'
          else PerChannelMinMaxObserver(ch_axis=axis, **kwargs))
    ob(x)
    s, z = ob.calculate_qparams()
    return s.to(torch.float32), z


def amin_amax_per_channel(x, axis):
    y = x.transpose(0, axis).reshape(x.shape[axis], -1)
    return y.min(dim=1).values, y.max(dim=1).values


def broadcast(v, x, axis):
    shape = [1] * x.dim()
    shape[axis] = -1
    return v.reshape(shape)


# ------------------------------------------------------------------------------------- data
def data(kind: str, shape, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    n = int(np.prod(shape)) if len(shape) else 1
    if kind == 'randn':
        t = torch.randn(n, generator=g) * 3
    elif kind == 'uniform_pos':
        t = torch.rand(n, generator=g) * 5 + 0.5
    elif kind == 'heavy':
        t = torch.randn(n, generator=g) ** 3
    elif kind == 'zeros':
        t = torch.zeros(n)
    elif kind == 'signed_zeros':
        t = torch.tensor([0.0, -0.0] * ((n + 1) // 2))[:n]
    elif kind == 'denormals':
        base = torch.tensor([1e-40, -1e-42, 0.0, 1.4e-45, -3e-39, 2e-38], dtype=torch.float32)
        t = base.repeat((n + 5) // 6)[:n]
    elif kind == 'equal_pos':
        t = torch.full((n,), 3.25)
    elif kind == 'equal_neg':
        t = torch.full((n,), -2.0)
    elif kind == 'huge':
        t = torch.tensor([1e30, -1e30, 1e-30, 3.0, -1e20, 1e38, -1e38], dtype=torch.float32).repeat((n + 6) // 7)[:n]
    elif kind == 'tiny_range':
        t = 1.0 + torch.randn(n, generator=g) * 1e-6
    else:
        raise ValueError(kind)
    return t.to(torch.float32).reshape(shape)


def halves(scale: float, k0: int, k1: int) -> torch.Tensor:
    """x·(1/scale) lands on or next to k + 0.5 for k in [k0, k1)."""
    s = np.float32(scale)
    return torch.tensor([np.float32((k + 0.5) * np.float64(s)) for k in range(k0, k1)], dtype=torch.float32)


# ---------------------------------------------------------------------------------- cases
CASES = {}


def add(family: str, case: dict):
    CASES.setdefault(family, []).append(case)


def spec_of(qdtype, scheme, mode, axis=None, group_size=None, qmin=None, qmax=None, eps=None):
    spec = {'qdtype': qdtype, 'scheme': scheme, 'mode': mode}
    if axis is not None:
        spec['axis'] = axis
    if group_size is not None:
        spec['group_size'] = group_size
    if qmin is not None:
        spec['quant_min'] = qmin
    if qmax is not None:
        spec['quant_max'] = qmax
    if eps is not None:
        spec['eps'] = eps
    return spec


def saturate(clamped_f32: torch.Tensor, qmin: int, qmax: int) -> torch.Tensor:
    """float32 codes, already clamped, to int64. For int32 the float32 clamp bound 2^31 - 1 rounds
    to 2^31, which the decomposed op's .to(int32) overflows; torch's native ops clamp in int64,
    and so does quantd: clamp again after the exact conversion."""
    return clamped_f32.to(torch.float64).to(torch.int64).clamp(qmin, qmax)


def quantize_codes(x, scale, zp, qdtype, scheme, mode, axis, qmin, qmax):
    """Codes by the seed formula with torch float32 ops (per_tensor / per_channel orders)."""
    if scheme == 'per_tensor':
        inv_scale = 1.0 / float(scale.reshape(-1)[0])
        v = x * inv_scale
        zpv = int(zp.reshape(-1)[0]) if qdtype not in FLOAT8 else 0
    else:
        inv = 1.0 / scale
        v = x * broadcast(inv, x, axis)
        zpv = broadcast(zp.to(torch.float32), x, axis)
    if qdtype in FLOAT8:
        return fp8_codes(torch.clamp(v, qmin, qmax), qdtype)
    if mode == 'float_qparams':
        return saturate(torch.clamp(torch.round(v + zpv), qmin, qmax), qmin, qmax)
    return saturate(torch.clamp(torch.round(v) + zpv, qmin, qmax), qmin, qmax)


def dequant_expect(codes, scale, zp, qdtype, x_shape, scheme, axis, float_zp):
    """(f32(q) - zp) * scale in float32 ops, as torch's decomposed dequantize does."""
    if qdtype in FLOAT8:
        table = fp8_float_table(qdtype)
        qf = torch.tensor([table[int(c)] for c in codes.reshape(-1).tolist()], dtype=torch.float32).reshape(x_shape)
    else:
        qf = codes.to(torch.float32).reshape(x_shape)
    if scheme == 'per_tensor':
        return (qf - float(zp.reshape(-1)[0])) * float(scale.reshape(-1)[0])
    return (qf - broadcast(zp.to(torch.float32), qf, axis)) * broadcast(scale, qf, axis)


def emit_quantize(family, cid, x, in_dtype, qdtype, scheme, mode, axis=None, qmin=None, qmax=None,
                  eps=None, given=None):
    """One quantize case + its dequantize cases. Native torch where it exists, checked vs formula."""
    dmin, dmax, bits, st = QINFO[qdtype]
    custom = qmin is not None
    lo = dmin if qmin is None else qmin
    hi = dmax if qmax is None else qmax
    eps_v = F32_EPS if eps is None else float(np.float32(eps))
    x_in = x.to({'float32': torch.float32, 'float16': torch.float16, 'bfloat16': torch.bfloat16}[in_dtype])
    xf = x_in.to(torch.float32)
    float_zp = mode == 'float_qparams'
    sources = []
    if given is not None:
        scale, zp = given
        sources.append('given qparams')
    elif (qdtype in OBSERVER_Q and scheme in ('per_tensor', 'per_channel') and not (custom and qdtype == 'int32')
          and not (scheme == 'per_channel' and x.dim() < 2)):  # 1.13's per-channel observer needs 2-D+
        scale, zp = observer_qparams(xf, scheme, mode, qdtype, axis, lo, hi, custom, eps_v)
        sources.append('torch %s' % ('MinMaxObserver' if scheme == 'per_tensor' else 'PerChannelMinMaxObserver'))
        if scheme == 'per_tensor':
            mn, mx = torch.aminmax(xf)
            mn, mx = mn.reshape(1), mx.reshape(1)
        else:
            mn, mx = amin_amax_per_channel(xf, axis)
        s2, z2 = determine(mn, mx, lo, hi, mode, eps_v, qdtype, custom)
        assert torch.equal(s2, scale.reshape(s2.shape)), (cid, s2, scale)
        assert torch.equal(z2.to(torch.float64), zp.reshape(z2.shape).to(torch.float64)), (cid, z2, zp)
    else:
        if scheme == 'per_tensor':
            mn, mx = torch.aminmax(xf)
            mn, mx = mn.reshape(1), mx.reshape(1)
        else:
            mn, mx = amin_amax_per_channel(xf, axis)
        scale, zp = determine(mn, mx, lo, hi, mode, eps_v, qdtype, custom and qdtype not in FLOAT8)
        sources.append('determine_qparams formula (torch f32 ops)')
    scale = scale.to(torch.float32).reshape(-1)
    zp = zp.reshape(-1)

    codes = quantize_codes(xf, scale, zp, qdtype, scheme, mode, axis, lo, hi)
    native_ok = qdtype in TORCH_Q and not custom and not (scheme == 'per_channel' and QINFO[qdtype][2] < 8)
    if float_zp and qdtype != 'uint8':
        native_ok = False  # torch 1.13 crashes (SIGILL) on float zero points for qint32
    if native_ok:
        if scheme == 'per_tensor':
            qt = torch.quantize_per_tensor(xf, float(scale[0]), int(zp[0]), TORCH_Q[qdtype])
        else:
            qt = torch.quantize_per_channel(xf, scale.to(torch.float64),
                                            zp if float_zp else zp.to(torch.int64), axis, TORCH_Q[qdtype])
        native = qt.int_repr().reshape(-1).to(torch.int64)
        formula_stored = codes_tensor(codes, qdtype)['data']
        if QINFO[qdtype][2] < 8:
            native_stored = b64(bytes(native.to(torch.uint8).tolist()))
        else:
            native_stored = codes_tensor(native.reshape(codes.shape), qdtype)['data']
        assert native_stored == formula_stored, ('native vs formula', cid)
        sources.append('torch.%s(...).int_repr()' % ('quantize_per_tensor' if scheme == 'per_tensor' else 'quantize_per_channel'))
        # torch's native int32 dequantize subtracts the zero point in int64; the decomposed op
        # (and docs/numerics.md) converts to float32 first, which differs once |q| > 2^24.
        deq = None if qdtype == 'int32' else torch.dequantize(qt).to(torch.float32)
        deq_source = 'seed dequantize formula (torch f32 ops)' if deq is None else 'torch.dequantize'
    else:
        sources.append('seed quantize formula (torch f32 ops)')
        deq = None
        deq_source = 'seed dequantize formula (torch f32 ops)'
    spec = spec_of(qdtype, scheme, mode, axis, None, qmin, qmax, eps)
    qp_shape = [1] if scheme == 'per_tensor' else [x.shape[axis]]
    qparams = {'scale': f32_tensor(scale.numpy(), qp_shape), 'zero_point': zp_tensor(zp, float_zp, qp_shape)}
    case = {'id': cid, 'op': 'quantize', 'source': ' + '.join(sources), 'spec': spec,
            'input': float_tensor(x_in, in_dtype),
            'expect': {'q': codes_tensor(codes, qdtype), **qparams}}
    if given is not None:
        case['qparams'] = qparams
    add(family, case)

    formula = dequant_expect(codes, scale, zp, qdtype, list(x.shape), scheme, axis, float_zp)
    if deq is not None:
        assert torch.equal(deq, formula), ('dequantize native vs formula', cid)
    for out_dtype in ('float32', 'float16', 'bfloat16') if in_dtype == 'float32' else ('float32',):
        add('dequantize', {'id': cid + '/dequantize/' + out_dtype, 'op': 'dequantize',
                           'source': deq_source + ('' if out_dtype == 'float32' else ', rounded to ' + out_dtype),
                           'spec': spec, 'shape': list(x.shape), 'out_dtype': out_dtype,
                           'q': codes_tensor(codes, qdtype), 'qparams': qparams,
                           'expect': {'out': float_tensor(formula, out_dtype)}})


def gen_per_tensor():
    kinds = ['randn', 'uniform_pos', 'heavy', 'zeros', 'signed_zeros', 'denormals', 'equal_pos', 'equal_neg',
             'huge', 'tiny_range']
    shapes = [[1], [7], [13], [5, 10], [101], [3, 4, 5], [2, 3, 1, 4], [2, 1, 3, 2, 2], [1009]]
    seed = 0
    for qdtype in QINFO:
        modes = ['symmetric'] if qdtype in FLOAT8 else ['affine', 'symmetric']
        for mode in modes:
            for i, kind in enumerate(kinds):
                shape = shapes[i % len(shapes)]
                seed += 1
                if kind == 'huge' and qdtype == 'int32':
                    continue  # decomposed formula clamps in float32 and overflows int32 near 2^31
                emit_quantize('per_tensor', f'per_tensor/{qdtype}/{mode}/{kind}', data(kind, shape, seed),
                              'float32', qdtype, 'per_tensor', mode)
        for in_dtype in ('float16', 'bfloat16'):
            seed += 1
            emit_quantize('per_tensor', f'per_tensor/{qdtype}/{modes[0]}/randn_{in_dtype}',
                          data('randn', [6, 11], seed), in_dtype, qdtype, 'per_tensor', modes[0])
    # customised ranges (symmetric zero point becomes the down-rounded midpoint for unsigned)
    for qdtype, lo, hi in [('uint8', 0, 127), ('uint8', 0, 254), ('int8', -127, 127), ('int8', -64, 63),
                           ('uint4', 0, 14), ('int4', -7, 7), ('int16', -1000, 1000),
                           ('float8_e4m3fn', -240, 240)]:
        for mode in (['symmetric'] if qdtype in FLOAT8 else ['affine', 'symmetric']):
            seed += 1
            emit_quantize('per_tensor', f'per_tensor/{qdtype}/{mode}/custom_{lo}_{hi}', data('randn', [4, 9], seed),
                          'float32', qdtype, 'per_tensor', mode, qmin=lo, qmax=hi)
    # custom eps
    emit_quantize('per_tensor', 'per_tensor/uint8/affine/eps_1e-3', data('tiny_range', [17], 5),
                  'float32', 'uint8', 'per_tensor', 'affine', eps=1e-3)
    # exact halves with given qparams: power-of-two scale (x·inv exact) and 0.1 (ties decided by rounding)
    for qdtype in ('uint8', 'int8', 'int32', 'uint4', 'uint2', 'int16', 'int4', 'int2'):
        lo, hi = QINFO[qdtype][0], QINFO[qdtype][1]
        for s in (0.125, 0.1, 3.0):
            for zp in sorted({0, 1, 3, lo + 1} if lo < 0 else {0, 1, 3, hi // 2}):
                if zp < lo or zp > hi:
                    continue
                x = halves(s, -24, 24)
                given = (torch.tensor([np.float32(s)], dtype=torch.float32), torch.tensor([zp]))
                emit_quantize('per_tensor', f'per_tensor/{qdtype}/affine/halves_s{s}_zp{zp}', x, 'float32',
                              qdtype, 'per_tensor', 'affine', given=given)
    for qdtype in FLOAT8:
        x = torch.tensor([0.0, -0.0, 1e-9, -1e-9, 0.0009765625, 0.00146484375, 300.0, 460.0, 464.0, 500.0, -1e6,
                          57344.0, 61440.0, 1e9, 2.5, -3.75, 0.1, 17.0, 19.0], dtype=torch.float32)
        given = (torch.tensor([1.0], dtype=torch.float32), torch.tensor([0]))
        emit_quantize('per_tensor', f'per_tensor/{qdtype}/symmetric/edges', x, 'float32', qdtype,
                      'per_tensor', 'symmetric', given=given)


def gen_per_channel():
    shapes = [[4, 6], [3, 5, 7], [2, 3, 4, 5], [2, 2, 3, 2, 3], [11], [64, 33]]
    seed = 1000
    for qdtype in QINFO:
        modes = ['symmetric'] if qdtype in FLOAT8 else ['affine', 'symmetric', 'float_qparams']
        for mode in modes:
            for shape in shapes:
                for axis in range(len(shape)):
                    if len(shape) >= 4 and axis not in (0, len(shape) - 1) and mode != 'affine':
                        continue
                    seed += 1
                    kind = ['randn', 'heavy', 'uniform_pos'][seed % 3]
                    emit_quantize('per_channel', f'per_channel/{qdtype}/{mode}/{kind}_{"x".join(map(str, shape))}_axis{axis}',
                                  data(kind, shape, seed), 'float32', qdtype, 'per_channel', mode, axis=axis)
        seed += 1
        x = data('randn', [5, 8], seed)
        x[1] = 0.0
        x[2] = 2.5
        x[3, :4] = -0.0
        emit_quantize('per_channel', f'per_channel/{qdtype}/{modes[0]}/special_rows', x, 'float32', qdtype,
                      'per_channel', modes[0], axis=0)
        for in_dtype in ('float16', 'bfloat16'):
            seed += 1
            emit_quantize('per_channel', f'per_channel/{qdtype}/{modes[0]}/randn_{in_dtype}',
                          data('randn', [6, 10], seed), in_dtype, qdtype, 'per_channel', modes[0], axis=1)
    # zero extremes: a channel whose zeros are all -0 (min -0, float zero point +0) or all +0
    # (min +0, zero point -0); torch is unambiguous there and quantd orders -0 < +0 to agree
    x = torch.tensor([[-0.0, 1.0, 2.0], [0.0, 1.0, 2.0], [-0.0, -0.0, -0.0], [0.0, 0.0, 0.0], [-1.0, -0.0, 0.5]])
    for qdtype, mode in [('uint8', 'float_qparams'), ('uint8', 'affine'), ('int8', 'symmetric')]:
        emit_quantize('per_channel', f'per_channel/{qdtype}/{mode}/signed_zero_rows', x, 'float32', qdtype,
                      'per_channel', mode, axis=0)
    for qdtype, lo, hi in [('uint8', 0, 127), ('int8', -127, 127)]:
        for mode in ('affine', 'symmetric'):
            seed += 1
            emit_quantize('per_channel', f'per_channel/{qdtype}/{mode}/custom_{lo}_{hi}', data('randn', [6, 7], seed),
                          'float32', qdtype, 'per_channel', mode, axis=0, qmin=lo, qmax=hi)
    # given qparams with exact halves, several zero points per channel
    for qdtype in ('uint8', 'int8'):
        x = torch.stack([halves(0.125, -20, 20), halves(0.25, -20, 20), halves(0.1, -20, 20)])
        zp = torch.tensor([0, 3, 1] if qdtype == 'int8' else [0, 3, 128])
        given = (torch.tensor([0.125, 0.25, np.float32(0.1)], dtype=torch.float32), zp)
        emit_quantize('per_channel', f'per_channel/{qdtype}/affine/halves', x, 'float32', qdtype,
                      'per_channel', 'affine', axis=0, given=given)
        fz = torch.tensor([0.5, 3.25, 1.0], dtype=torch.float32)
        given = (torch.tensor([0.125, 0.25, np.float32(0.1)], dtype=torch.float32), fz)
        emit_quantize('per_channel', f'per_channel/{qdtype}/float_qparams/halves', x, 'float32', qdtype,
                      'per_channel', 'float_qparams', axis=0, given=given)


# ---------------------------------------------------------------------------- per token
def per_token_case(cid, x, in_dtype, qdtype, mode, given=None, qmin=None, qmax=None):
    dmin, dmax, bits, st = QINFO[qdtype]
    lo = dmin if qmin is None else qmin
    hi = dmax if qmax is None else qmax
    x_in = x.to({'float32': torch.float32, 'float16': torch.float16, 'bfloat16': torch.bfloat16}[in_dtype])
    xf = x_in.to(torch.float32)
    if given is not None:
        scales, zps = given
        source = 'given qparams'
    elif mode == 'symmetric':
        # choose_qparams_per_token (seed 000), on the float32 upcast of the input
        scales = xf.abs().amax(dim=-1, keepdim=True)
        scales = scales.clamp(min=1e-5).div(hi)
        zps = torch.zeros_like(scales)
        source = 'seed choose_qparams_per_token (torch f32 ops)'
    else:
        # _choose_qparams_per_token_asymmetric_impl (seed 000) with the spec's range
        min_val = torch.amin(xf, dim=-1, keepdim=True)
        max_val = torch.amax(xf, dim=-1, keepdim=True)
        min_val_neg = torch.min(min_val, torch.zeros_like(min_val))
        max_val_pos = torch.max(max_val, torch.zeros_like(max_val))
        scale = (max_val_pos - min_val_neg) / float(hi - lo)
        scale = scale.clamp(min=F32_EPS)
        descaled_min = min_val_neg / scale
        descaled_max = max_val_pos / scale
        zero_point_from_min_error = lo + descaled_min
        zero_point_from_max_error = hi + descaled_max
        zero_point = torch.where(zero_point_from_min_error + zero_point_from_max_error > 0,
                                 lo - descaled_min, hi - descaled_max)
        zps = torch.clamp(zero_point, lo, hi).round()
        scales = scale.to(torch.float32)
        source = 'seed _choose_qparams_per_token_asymmetric_impl (torch f32 ops)'
    float_zp = mode == 'affine'
    # quantize_per_token (seed 000)
    if qdtype in FLOAT8:
        codes = fp8_codes(torch.clamp(xf.mul(1.0 / scales), lo, hi), qdtype)
    else:
        codes = saturate(xf.mul(1.0 / scales).add(zps).round().clamp(lo, hi), lo, hi)
    # dequantize_per_token (seed 000)
    if qdtype in FLOAT8:
        table = fp8_float_table(qdtype)
        qf = torch.tensor([table[int(c)] for c in codes.reshape(-1).tolist()], dtype=torch.float32).reshape(codes.shape)
        deq = (qf - zps.to(torch.float32)) * scales
    else:
        deq = (codes.to(torch.float32) - zps.to(torch.float32)) * scales
    # the seed test: per-token dequant(quant(x)) equals fake_quantize_per_channel_affine per row
    if qdtype not in FLOAT8 and not float_zp and xf.dim() == 2 and bits <= 8:
        fq = torch.fake_quantize_per_channel_affine(xf, scales.flatten(), zps.flatten().to(torch.int32), 0, lo, hi)
        assert torch.equal(fq, deq), ('per_token vs fake_quant', cid)
    qshape = list(x.shape[:-1]) + [1]
    spec = spec_of(qdtype, 'per_token', mode, None, None, qmin, qmax)
    qparams = {'scale': f32_tensor(scales.reshape(-1).numpy(), qshape),
               'zero_point': zp_tensor(zps.reshape(-1), float_zp, qshape)}
    case = {'id': cid, 'op': 'quantize', 'source': source + ' + seed quantize_per_token', 'spec': spec,
            'input': float_tensor(x_in, in_dtype), 'expect': {'q': codes_tensor(codes, qdtype), **qparams}}
    if given is not None:
        case['qparams'] = qparams
    add('per_token', case)
    add('dequantize', {'id': cid + '/dequantize/float32', 'op': 'dequantize',
                       'source': 'seed dequantize_per_token (torch f32 ops)', 'spec': spec,
                       'shape': list(x.shape), 'out_dtype': 'float32', 'q': codes_tensor(codes, qdtype),
                       'qparams': qparams, 'expect': {'out': float_tensor(deq, 'float32')}})


def gen_per_token():
    seed = 2000
    shapes = [[5, 16], [1, 7], [3, 4, 13], [2, 2, 2, 9], [64]]
    for mode in ('symmetric', 'affine'):
        for shape in shapes:
            for kind in ('randn', 'heavy', 'uniform_pos', 'zeros', 'equal_neg'):
                seed += 1
                per_token_case(f'per_token/int8/{mode}/{kind}_{"x".join(map(str, shape))}', data(kind, shape, seed),
                               'float32', 'int8', mode)
        for in_dtype in ('float16', 'bfloat16'):
            seed += 1
            per_token_case(f'per_token/int8/{mode}/randn_{in_dtype}', data('randn', [4, 24], seed), in_dtype,
                           'int8', mode)
    # generalisations beyond torch's int8 (the same formulas over each qdtype's range)
    for qdtype in QINFO:
        if qdtype == 'int8':
            continue
        signed = QINFO[qdtype][0] < 0
        modes = ['symmetric'] if qdtype in FLOAT8 else (['symmetric', 'affine'] if signed else ['affine'])
        for mode in modes:
            for kind in ('randn', 'heavy'):
                seed += 1
                per_token_case(f'per_token/{qdtype}/{mode}/{kind}', data(kind, [6, 20], seed), 'float32', qdtype, mode)
    # the seed test's setting: given scales and int zero points, qmin/qmax -8..7 (int4)
    g = torch.Generator().manual_seed(7)
    x = torch.randn(10, 32, generator=g)
    s = torch.rand(10, 1, generator=g) * 0.5 + 0.05
    zp = torch.randint(-8, 7, (10, 1), generator=g)
    per_token_case('per_token/int4/symmetric/given_int_zp', x, 'float32', 'int4', 'symmetric',
                   given=(s.to(torch.float32), torch.zeros_like(zp)))
    x = torch.stack([halves(0.125, -16, 16), halves(0.25, -16, 16)])
    per_token_case('per_token/int8/affine/halves', x, 'float32', 'int8', 'affine',
                   given=(torch.tensor([[0.125], [0.25]], dtype=torch.float32), torch.tensor([[1.0], [-3.0]])))


# ---------------------------------------------------------------------------- per group
def per_group_case(cid, x, in_dtype, qdtype, mode, group_size, given=None, qmin=None, qmax=None):
    dmin, dmax, bits, st = QINFO[qdtype]
    lo = dmin if qmin is None else qmin
    hi = dmax if qmax is None else qmax
    custom = qmin is not None
    x_in = x.to({'float32': torch.float32, 'float16': torch.float16, 'bfloat16': torch.bfloat16}[in_dtype])
    xf = x_in.to(torch.float32)
    n, k = xf.shape
    gs = k if group_size > k else group_size
    grouped = xf.reshape(-1, gs)
    if given is not None:
        scales, zps = given
        source = 'given qparams'
    else:
        mn, mx = grouped.min(dim=1).values, grouped.max(dim=1).values
        scales, zps = determine(mn, mx, lo, hi, mode, F32_EPS, qdtype, custom)
        source = 'determine_qparams per group (torch f32 ops)'
        if qdtype in ('int8', 'uint8') and not custom:
            qs = torch.per_channel_affine if mode == 'affine' else torch.per_channel_symmetric
            ob = PerChannelMinMaxObserver(ch_axis=0, dtype=OBSERVER_Q[qdtype], qscheme=qs)
            ob(grouped)
            s2, z2 = ob.calculate_qparams()
            assert torch.equal(s2.to(torch.float32), scales) and torch.equal(z2.to(torch.int64), zps.to(torch.int64)), cid
            source = 'torch PerChannelMinMaxObserver over the groups'
    scales = scales.to(torch.float32).reshape(-1, 1)
    zps = zps.to(torch.int64).reshape(-1, 1)
    # quantize_per_channel_group (seed 000)
    if qdtype in FLOAT8:
        codes = fp8_codes(torch.clamp(grouped.mul(1.0 / scales), lo, hi), qdtype).reshape(n, k)
    else:
        codes = saturate(grouped.mul(1.0 / scales).add(zps).round().clamp_(lo, hi), lo, hi).reshape(n, k)
    # dequantize_per_channel_group (seed 000)
    if qdtype in FLOAT8:
        table = fp8_float_table(qdtype)
        qf = torch.tensor([table[int(c)] for c in codes.reshape(-1).tolist()], dtype=torch.float32).reshape(-1, gs)
        deq = (qf - zps.to(torch.float32)).mul(scales).reshape(n, k)
    else:
        deq = codes.reshape(-1, gs).to(torch.float32).sub(zps.to(torch.float32)).mul(scales).reshape(n, k)
        # the seed test: dequant(quant(x)) equals fake_quantize_per_channel_affine over the groups
        fq = torch.fake_quantize_per_channel_affine(grouped, scales.flatten(), zps.flatten().to(torch.int32), 0, lo, hi)
        # (holds while x·inv + zp is exact in float32, i.e. for 8-bit and narrower ranges)
        if given is None and bits <= 8:
            assert torch.equal(fq.reshape(n, k), deq), ('per_group vs fake_quant', cid)
    qshape = [n, k // gs]
    spec = spec_of(qdtype, 'per_group', mode, None, group_size, qmin, qmax)
    qparams = {'scale': f32_tensor(scales.reshape(-1).numpy(), qshape),
               'zero_point': zp_tensor(zps.reshape(-1), False, qshape)}
    case = {'id': cid, 'op': 'quantize', 'source': source + ' + seed quantize_per_channel_group', 'spec': spec,
            'input': float_tensor(x_in, in_dtype), 'expect': {'q': codes_tensor(codes, qdtype), **qparams}}
    if given is not None:
        case['qparams'] = qparams
    add('per_group', case)
    add('dequantize', {'id': cid + '/dequantize/float32', 'op': 'dequantize',
                       'source': 'seed dequantize_per_channel_group (torch f32 ops)', 'spec': spec,
                       'shape': list(x.shape), 'out_dtype': 'float32', 'q': codes_tensor(codes, qdtype),
                       'qparams': qparams, 'expect': {'out': float_tensor(deq, 'float32')}})


def gen_per_group():
    seed = 3000
    for qdtype in QINFO:
        modes = ['symmetric'] if qdtype in FLOAT8 else ['affine', 'symmetric']
        for mode in modes:
            for (n, k, gs) in [(4, 64, 32), (3, 256, 128), (2, 30, 10), (5, 16, 64), (1, 7, 7)]:
                seed += 1
                kind = ['randn', 'heavy', 'uniform_pos', 'equal_neg'][seed % 4]
                per_group_case(f'per_group/{qdtype}/{mode}/{kind}_{n}x{k}_g{gs}', data(kind, [n, k], seed), 'float32',
                               qdtype, mode, gs)
        seed += 1
        per_group_case(f'per_group/{qdtype}/{modes[0]}/randn_bfloat16', data('randn', [4, 64], seed), 'bfloat16',
                       qdtype, modes[0], 32)
    for qdtype, lo, hi in [('int4', -7, 7), ('uint8', 0, 100)]:
        seed += 1
        per_group_case(f'per_group/{qdtype}/affine/custom_{lo}_{hi}', data('randn', [3, 48], seed), 'float32', qdtype,
                       'affine', 16, qmin=lo, qmax=hi)
    # exact halves with odd zero points: round(x·inv + zp) differs from round(x·inv) + zp here
    x = torch.stack([halves(0.125, -16, 16), halves(0.125, -16, 16)])
    per_group_case('per_group/int8/affine/halves_odd_zp', x, 'float32', 'int8', 'affine', 16,
                   given=(torch.tensor([[0.125, 0.125], [0.125, 0.125]], dtype=torch.float32),
                          torch.tensor([[1, 3], [0, -5]])))


# ------------------------------------------------------------------------ fake quantize
def gen_fake_quantize():
    seed = 4000
    for qmin, qmax, zp in [(0, 255, 3), (-128, 127, 0), (0, 15, 8), (-8, 7, -1), (0, 127, 64)]:
        for kind in ('randn', 'heavy', 'zeros'):
            seed += 1
            x = data(kind, [6, 9], seed)
            s = np.float32([0.05, 0.1, 0.37][seed % 3])
            out, mask = torch.ops.aten.fake_quantize_per_tensor_affine_cachemask(x, float(s), zp, qmin, qmax)
            inv = 1.0 / float(s)
            t = torch.round(x * inv) + zp
            ref = (torch.clamp(t, qmin, qmax) - zp) * float(s)
            assert torch.equal(ref, out), 'fake quant formula'
            qdtype = {(0, 255): 'uint8', (-128, 127): 'int8', (0, 15): 'uint4', (-8, 7): 'int4', (0, 127): 'uint8'}[(qmin, qmax)]
            spec = spec_of(qdtype, 'per_tensor', 'affine', None, None, *(
                (qmin, qmax) if (qmin, qmax) == (0, 127) else (None, None)))
            add('fake_quantize', {'id': f'fake_quantize/per_tensor/{qdtype}_{qmin}_{qmax}/{kind}', 'op': 'fake_quantize',
                                  'source': 'torch.ops.aten.fake_quantize_per_tensor_affine_cachemask', 'spec': spec,
                                  'input': float_tensor(x, 'float32'),
                                  'qparams': {'scale': f32_tensor([s], [1]), 'zero_point': int_tensor([zp], 'I32', [1])},
                                  'expect': {'out': float_tensor(out, 'float32'),
                                             'mask': int_tensor(mask.reshape(-1).to(torch.uint8).numpy(), 'BOOL', list(x.shape))}})
    x = halves(0.125, -24, 24)
    out, mask = torch.ops.aten.fake_quantize_per_tensor_affine_cachemask(x, 0.125, 1, 0, 15)
    add('fake_quantize', {'id': 'fake_quantize/per_tensor/uint4/halves', 'op': 'fake_quantize',
                          'source': 'torch.ops.aten.fake_quantize_per_tensor_affine_cachemask',
                          'spec': spec_of('uint4', 'per_tensor', 'affine'), 'input': float_tensor(x, 'float32'),
                          'qparams': {'scale': f32_tensor([0.125], [1]), 'zero_point': int_tensor([1], 'I32', [1])},
                          'expect': {'out': float_tensor(out, 'float32'),
                                     'mask': int_tensor(mask.to(torch.uint8).numpy(), 'BOOL', [48])}})
    for shape, axis in [([4, 6], 0), ([4, 6], 1), ([3, 2, 5], 1), ([2, 3, 2, 4], 3)]:
        seed += 1
        x = data('randn', shape, seed)
        c = shape[axis]
        g = torch.Generator().manual_seed(seed)
        scales = (torch.rand(c, generator=g) * 0.3 + 0.02).to(torch.float32)
        zps = torch.randint(0, 10, (c,), generator=g).to(torch.int32)
        out, mask = torch.ops.aten.fake_quantize_per_channel_affine_cachemask(x, scales, zps, axis, 0, 15)
        add('fake_quantize', {'id': f'fake_quantize/per_channel/uint4/{"x".join(map(str, shape))}_axis{axis}',
                              'op': 'fake_quantize', 'source': 'torch.ops.aten.fake_quantize_per_channel_affine_cachemask',
                              'spec': spec_of('uint4', 'per_channel', 'affine', axis),
                              'input': float_tensor(x, 'float32'),
                              'qparams': {'scale': f32_tensor(scales.numpy(), [c]), 'zero_point': int_tensor(zps.numpy(), 'I32', [c])},
                              'expect': {'out': float_tensor(out, 'float32'),
                                         'mask': int_tensor(mask.reshape(-1).to(torch.uint8).numpy(), 'BOOL', shape)}})
        # float zero points (float_qparams): torch.fake_quantize_per_channel_affine accepts them
        fz = (torch.rand(c, generator=g) * 10).to(torch.float32)
        out = torch.fake_quantize_per_channel_affine(x, scales, fz, axis, 0, 255)
        inv = 1.0 / scales
        t = torch.round(x * broadcast(inv, x, axis) + broadcast(fz, x, axis))
        mask = (t >= 0) & (t <= 255)
        # torch's kernel evaluates (clamp(t) - zp) · scale in double and rounds once to float32
        ref = ((torch.clamp(t, 0, 255).double() - broadcast(fz, x, axis).double())
               * broadcast(scales, x, axis).double()).float()
        assert torch.equal(ref, out), 'float zp fake quant formula'
        add('fake_quantize', {'id': f'fake_quantize/per_channel/uint8_float_qparams/{"x".join(map(str, shape))}_axis{axis}',
                              'op': 'fake_quantize', 'source': 'torch.fake_quantize_per_channel_affine (float zero_point); mask by its formula',
                              'spec': spec_of('uint8', 'per_channel', 'float_qparams', axis),
                              'input': float_tensor(x, 'float32'),
                              'qparams': {'scale': f32_tensor(scales.numpy(), [c]), 'zero_point': f32_tensor(fz.numpy(), [c])},
                              'expect': {'out': float_tensor(out, 'float32'),
                                         'mask': int_tensor(mask.reshape(-1).to(torch.uint8).numpy(), 'BOOL', shape)}})


# -------------------------------------------------------------------------- range search
def _compress_uniform_simplified(X, bit_rate, xmin, xmax, fp16_scale_bias=True):
    # seed 001, verbatim numerics
    if fp16_scale_bias:
        xmin = xmin.astype(np.float16).astype(np.float32)
    data_range = xmax - xmin
    scale = np.where(data_range == 0, np.float32(1), data_range / np.float32(2 ** bit_rate - 1))
    if fp16_scale_bias:
        scale = scale.astype(np.float16).astype(np.float32)
    inverse_scale = np.float32(1) / scale
    Xq = np.clip(np.round((X - xmin) * inverse_scale), 0, np.float32(2 ** bit_rate - 1))
    Xq = Xq * scale + xmin
    vlen = 8
    loss_v = np.zeros(vlen).astype(np.float32)
    for i in range(len(Xq) // vlen * vlen):
        loss_v[i % vlen] += (X[i] - Xq[i]) * (X[i] - Xq[i])
    loss = np.float32(0)
    for i in range(vlen):
        loss += loss_v[i]
    for i in range(len(Xq) // vlen * vlen, len(Xq)):
        loss += (X[i] - Xq[i]) * (X[i] - Xq[i])
    loss = np.sqrt(loss)
    return Xq, loss


def param_search_greedy(x, bit_rate, n_bins=200, ratio=0.16):
    # seed 001, verbatim
    xmin, xmax = np.min(x), np.max(x)
    stepsize = (xmax - xmin) / np.float32(n_bins)
    min_bins = np.float32(n_bins) * (np.float32(1) - np.float32(ratio))
    xq, loss = _compress_uniform_simplified(x, bit_rate, xmin, xmax)
    solutions = []
    cur_min, cur_max, cur_loss = xmin, xmax, loss
    thr = min_bins * stepsize
    while cur_min + thr < cur_max:
        xq, loss1 = _compress_uniform_simplified(x, bit_rate, cur_min + stepsize, cur_max)
        xq, loss2 = _compress_uniform_simplified(x, bit_rate, cur_min, cur_max - stepsize)
        if cur_loss < loss1 and cur_loss < loss2:
            solutions.append((cur_min, cur_max, cur_loss))
        if loss1 < loss2:
            cur_min, cur_max, cur_loss = cur_min + stepsize, cur_max, loss1
        else:
            cur_min, cur_max, cur_loss = cur_min, cur_max - stepsize, loss2
    if len(solutions):
        best = solutions[0]
        for solution in solutions:
            if solution[-1] < best[-1]:
                best = solution
        return best[1], best[0]
    return xmax, xmin


def gen_range_search():
    seed = 5000
    agree = 0
    total = 0
    for bits in (4, 2):
        for n in (7, 64, 64, 64, 129, 300):
            for kind in ('randn', 'heavy', 'uniform_pos'):
                seed += 1
                x = data(kind, [n], seed)
                xmax, xmin = param_search_greedy(x.numpy(), bits)
                tmax, tmin = torch.choose_qparams_optimized(x, numel=n, n_bins=200, ratio=0.16, bit_width=bits)
                total += 1
                same = float(tmax) == float(xmax) and float(tmin) == float(xmin)
                agree += same
                add('range_search', {'id': f'range_search/{bits}bit/{kind}_{n}_{seed}', 'op': 'range_search',
                                     'source': 'seed param_search_greedy (numpy)' + (
                                         '; torch.choose_qparams_optimized agrees' if same else
                                         '; torch.choose_qparams_optimized differs: %r' % [float(tmin), float(tmax)]),
                                     'bits': bits, 'input': float_tensor(x, 'float32'),
                                     'expect': {'min': f32_tensor([xmin], [1]), 'max': f32_tensor([xmax], [1])}})
    print(f'range search: torch.choose_qparams_optimized agrees with param_search_greedy on {agree}/{total}')


# --------------------------------------------------------------- CLI: a torch-made model
def write_safetensors(path, tensors, metadata=None):
    header = {}
    if metadata:
        header['__metadata__'] = metadata
    blobs = []
    offset = 0
    for name, (st, shape, raw) in tensors.items():
        header[name] = {'dtype': st, 'shape': shape, 'data_offsets': [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(',', ':')).encode('utf-8')
    text += b' ' * ((8 - len(text) % 8) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def gen_cli_model():
    g = torch.Generator().manual_seed(42)
    w0 = torch.randn(48, 64, generator=g)
    b0 = torch.randn(48, generator=g)
    w1 = (torch.randn(32, 128, generator=g) * 0.02).to(torch.bfloat16)
    emb = torch.randn(20, 16, generator=g).to(torch.float16)
    act = torch.randn(2, 5, 64, generator=g) * 4
    ids = torch.arange(10, dtype=torch.int64)
    raw = lambda t, d: base64.b64decode(float_tensor(t, d)['data'])
    tensors = {
        'layers.0.weight': ('F32', [48, 64], raw(w0, 'float32')),
        'layers.0.bias': ('F32', [48], raw(b0, 'float32')),
        'layers.1.weight': ('BF16', [32, 128], raw(w1, 'bfloat16')),
        'embed.weight': ('F16', [20, 16], raw(emb, 'float16')),
        'activations': ('F32', [2, 5, 64], raw(act, 'float32')),
        'position_ids': ('I64', [10], ids.numpy().astype('<i8').tobytes()),
    }
    write_safetensors(os.path.join(HERE, 'model.safetensors'), tensors, {'format': 'pt'})
    cases = []

    def expect_codes(name, args, codes, qdtype, scale, zp, qshape, float_zp=False):
        cases.append({'args': args, 'tensor': name,
                      'expect': {'q': codes_tensor(codes, qdtype), 'scale': f32_tensor(scale.reshape(-1).numpy(), qshape),
                                 'zero_point': zp_tensor(zp.reshape(-1), float_zp, qshape)}})

    # torch.quantize_per_tensor with MinMaxObserver qparams
    for qdtype, qscheme, mode in [('uint8', torch.per_tensor_affine, 'affine'), ('int8', torch.per_tensor_symmetric, 'symmetric')]:
        ob = MinMaxObserver(dtype=TORCH_Q[qdtype], qscheme=qscheme)
        ob(w0)
        s, z = ob.calculate_qparams()
        q = torch.quantize_per_tensor(w0, float(s), int(z), TORCH_Q[qdtype]).int_repr()
        expect_codes('layers.0.weight', ['--qdtype', qdtype, '--scheme', 'per_tensor', '--mode', mode], q, qdtype, s, z, [1])
    # torch.quantize_per_channel with PerChannelMinMaxObserver, on the bf16 weight (upcast)
    w1f = w1.to(torch.float32)
    ob = PerChannelMinMaxObserver(ch_axis=0, dtype=torch.qint8, qscheme=torch.per_channel_symmetric)
    ob(w1f)
    s, z = ob.calculate_qparams()
    q = torch.quantize_per_channel(w1f, s.to(torch.float64), z, 0, torch.qint8).int_repr()
    expect_codes('layers.1.weight', ['--qdtype', 'int8', '--scheme', 'per_channel', '--mode', 'symmetric', '--axis', '0'],
                 q, 'int8', s, z, [32])
    ob = PerChannelMinMaxObserver(ch_axis=0, dtype=torch.quint8, qscheme=torch.per_channel_affine_float_qparams)
    embf = emb.to(torch.float32)
    ob(embf)
    s, z = ob.calculate_qparams()
    q = torch.quantize_per_channel(embf, s.to(torch.float64), z, 0, torch.quint8).int_repr()
    expect_codes('embed.weight', ['--qdtype', 'uint8', '--scheme', 'per_channel', '--mode', 'float_qparams'],
                 q, 'uint8', s, z, [20], float_zp=True)
    # uint4 per tensor: torch quint4x2 packed bytes
    ob = MinMaxObserver(dtype=torch.quint8, quant_min=0, quant_max=15)
    ob(w0)
    s, z = ob.calculate_qparams()
    q = torch.quantize_per_tensor(w0, float(s), int(z), torch.quint4x2).int_repr()
    cases.append({'args': ['--qdtype', 'uint4', '--scheme', 'per_tensor'], 'tensor': 'layers.0.weight',
                  'expect': {'q': {'dtype': 'U8', 'shape': [q.numel()], 'data': b64(bytes(q.tolist()))},
                             'scale': f32_tensor(s.numpy(), [1]), 'zero_point': zp_tensor(z, False, [1])}})
    # seed per_token (activations) and per_group (int4 g32 symmetric) formulas
    for mode in ('symmetric', 'affine'):
        CASES.pop('per_token_tmp', None)
        saved = CASES.get('per_token', [])[:]
        per_token_case('cli_tmp', act, 'float32', 'int8', mode)
        c = CASES['per_token'].pop()
        CASES['dequantize'].pop()
        assert CASES['per_token'] == saved
        cases.append({'args': ['--qdtype', 'int8', '--scheme', 'per_token', '--mode', mode], 'tensor': 'activations',
                      'expect': c['expect']})
    saved = CASES.get('per_group', [])[:]
    per_group_case('cli_tmp', w0, 'float32', 'int4', 'symmetric', 32)
    c = CASES['per_group'].pop()
    CASES['dequantize'].pop()
    cases.append({'args': ['--qdtype', 'int4', '--scheme', 'per_group', '--group-size', '32', '--mode', 'symmetric'],
                  'tensor': 'layers.0.weight', 'expect': c['expect']})
    return cases


def main():
    torch.set_num_threads(1)
    gen_per_tensor()
    gen_per_channel()
    gen_per_token()
    gen_per_group()
    gen_fake_quantize()
    gen_range_search()
    cli_cases = gen_cli_model()
    meta = {'generator': 'test/golden/generate.py', 'torch_version': torch.__version__, 'numpy_version': np.__version__,
            'python_version': sys.version.split()[0]}
    os.makedirs(OUT, exist_ok=True)
    for family, cases in CASES.items():
        with open(os.path.join(OUT, family + '.json'), 'w') as f:
            json.dump({**meta, 'family': family, 'cases': cases}, f, separators=(',', ':'))
            f.write('\n')
        print(f'{family}: {len(cases)} cases')
    with open(os.path.join(HERE, 'cli-expected.json'), 'w') as f:
        json.dump({**meta, 'model': 'test/golden/model.safetensors', 'cases': cli_cases}, f, indent=1)
        f.write('\n')
    print(f'cli: {len(cli_cases)} cases')


if __name__ == '__main__':
    main()
