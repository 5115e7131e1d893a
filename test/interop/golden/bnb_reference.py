#!/usr/bin/python3
"""
Golden vectors for quantd's "nf4" / "fp4" layouts (src/core/interop/bnb.ts). bitsandbytes is not
installed here, so this is an independent, straightforward transcription of its reference
algorithm (run with /usr/bin/python3, numpy float32 scalars, torch 1.13 for the tensors):

  /usr/bin/python3 test/interop/golden/bnb_reference.py   # writes bnb_vectors.json beside it

Derivation (what is transcribed, from which source):
  1. csrc/kernels.cu, kQuantizeBlockwise<T, BLOCK, NUM_PER_TH, 0, NF4|FP4> (the CUDA path of
     bitsandbytes.functional.quantize_4bit): per block of `blocksize` consecutive values of the
     flattened tensor, absmax = max(fabsf((float)v)) (starting at -FLT_MAX); the thread stores
     absmax and uses inv = 1.0f / absmax; each value is quantized as dQuantizeNF4/dQuantizeFP4(
     (float)v * inv) (float32 product); two codes per byte, the first in the high nibble; a missing
     last element (odd count) is loaded as 0 and quantized like the others.
  2. dQuantizeNF4 / dQuantizeFP4: the decision trees with their float literals as thresholds and
     strict `x > t` comparisons (transcribed below with numpy.float32 thresholds).
  3. get_4bit_type(quant_type): torch.tensor(list) then data.div_(data.abs().max()) (the
     `quant_map` tensor).
  4. QuantState.as_dict(packed=True) / pack_dict_to_tensor: json.dumps({"quant_type", "blocksize",
     "dtype": str(dtype).strip("torch."), "shape": tuple(shape)}) as UTF-8 bytes.
  For comparison only, each case also records how many codes the torch fallback of
  backends/default/ops.py (argmin |clamp(A * (1/absmax), -1, 1) - code|, first index on ties)
  would choose differently ("argmin_differs"): quantd follows the kernel.

The weights: pseudo-random N(0, 0.02) plus blocks with absmax exactly 1.0 holding every
threshold, one float32 ulp above and below it, -0.0, an all-zero block (inv = inf, 0 * inf = NaN,
code 0), large magnitudes, and odd element counts (a half-filled last byte).
"""
import json
import os

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = {'float32': torch.float32, 'float16': torch.float16, 'bfloat16': torch.bfloat16}
f = np.float32

NF4_T = [f(0.03979014977812767), f(0.3893125355243683), f(0.6427869200706482), f(0.8614784181118011),
         f(0.5016634166240692), f(0.2035212516784668), f(0.2920137718319893), f(0.1202552504837513),
         f(-0.33967943489551544), f(-0.13791173323988914), f(-0.045525018125772476),
         f(-0.23460740596055984), f(-0.6106329262256622), f(-0.4599952697753906),
         f(-0.8480964004993439)]
FP4_T = [f(0.29166667), f(0.583333), f(0.8333333), f(0.4166667), f(0.0859375), f(0.20833333),
         f(0.00260417)]


def dQuantizeNF4(x):
    if x > f(0.03979014977812767):
        if x > f(0.3893125355243683):
            if x > f(0.6427869200706482):
                if x > f(0.8614784181118011):
                    return 0b1111
                else:
                    return 0b1110
            elif x > f(0.5016634166240692):
                return 0b1101
            else:
                return 0b1100
        elif x > f(0.2035212516784668):
            if x > f(0.2920137718319893):
                return 0b1011
            else:
                return 0b1010
        elif x > f(0.1202552504837513):
            return 0b1001
        else:
            return 0b1000
    elif x > f(-0.33967943489551544):
        if x > f(-0.13791173323988914):
            if x > f(-0.045525018125772476):
                return 0b0111
            else:
                return 0b0110
        elif x > f(-0.23460740596055984):
            return 0b0101
        else:
            return 0b0100
    elif x > f(-0.6106329262256622):
        if x > f(-0.4599952697753906):
            return 0b0011
        else:
            return 0b0010
    elif x > f(-0.8480964004993439):
        return 0b0001
    else:
        return 0b0000


def dQuantizeFP4(x):
    sign = 0b1000 if x < 0 else 0b0000
    x = f(abs(x))
    if x > f(0.29166667):
        if x > f(0.583333):
            if x > f(0.8333333):
                return 0b0011 + sign
            else:
                return 0b0010 + sign
        elif x > f(0.4166667):
            return 0b101 + sign
        else:
            return 0b100 + sign
    elif x > f(0.0859375):
        if x > f(0.20833333):
            return 0b0111 + sign
        else:
            return 0b0110 + sign
    elif x > f(0.00260417):
        return 0b0001 + sign
    else:
        return 0b0000 + sign


def get_4bit_type(typename):
    if typename == 'nf4':
        data = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                0.7229568362236023, 1.0]
    else:
        data = [0, 0.0625, 8.0, 12.0, 4.0, 6.0, 2.0, 3.0, -0, -0.0625, -8.0, -12.0, -4.0, -6.0, -2.0, -3.0]
    data = torch.tensor(data)
    data.div_(data.abs().max())
    return data


def kernel_quantize(values, blocksize, quant_type):
    """values: float32 numpy array (the (float)vals of the kernel), flattened."""
    quant = dQuantizeNF4 if quant_type == 'nf4' else dQuantizeFP4
    n = values.size
    blocks = -(-n // blocksize)
    absmax = np.zeros(blocks, dtype=np.float32)
    codes = []
    with np.errstate(divide='ignore', invalid='ignore', over='ignore'):
        for b in range(blocks):
            block = values[b * blocksize:(b + 1) * blocksize]
            m = f(-np.finfo(np.float32).max)
            for v in block:
                m = f(max(m, f(abs(v))))  # fmaxf(local_abs_max, fabsf(v)); no NaN in the inputs
            absmax[b] = m
            inv = f(1.0) / m
            for v in block:
                codes.append(quant(f(v * inv)))
            if b == blocks - 1 and n % 2 == 1:
                codes.append(quant(f(f(0.0) * inv)))  # the kernel loads the missing element as 0
    packed = bytes((codes[2 * i] << 4) | codes[2 * i + 1] for i in range(len(codes) // 2))
    return packed, absmax, codes[:n]


def argmin_codes(values, absmax, blocksize, code):
    """backends/default/ops.py quantize_4bit (torch fallback), for comparison."""
    A = torch.from_numpy(values)
    n = A.numel()
    scale = torch.from_numpy(absmax).repeat_interleave(blocksize)[:n]
    scaled = torch.clamp(A * (1 / scale), -1, 1)
    return torch.argmin(torch.abs(scaled.view(-1, 1) - code), dim=-1).tolist()


def special(w, blocksize):
    flat = w.view(-1)
    # block 0: absmax 1.0, every threshold exactly and one ulp on either side
    vals = [1.0]
    for t in NF4_T + FP4_T + [-t for t in FP4_T]:
        vals += [float(t), float(np.nextafter(t, f(2))), float(np.nextafter(t, f(-2)))]
    vals += [-0.0, 0.0, -1.0, 0.5, -0.5]
    n = min(len(vals), flat.numel())
    flat[0:n] = torch.tensor(vals[:n])
    if flat.numel() >= 3 * blocksize:
        flat[blocksize:2 * blocksize] = 0.0  # all-zero block: NaN codes -> 0
        flat[2 * blocksize:3 * blocksize] *= 3000.0


CASES = [
    # name, shape, dtype, quant_type, blocksize
    ('nf4_f32_b64', (8, 64), 'float32', 'nf4', 64),
    ('fp4_f32_b64', (8, 64), 'float32', 'fp4', 64),
    ('nf4_bf16_b128', (16, 64), 'bfloat16', 'nf4', 128),
    ('fp4_f16_b64', (8, 64), 'float16', 'fp4', 64),
    ('nf4_f16_odd', (3, 33), 'float16', 'nf4', 64),
    ('fp4_f32_odd_zero_tail', (5, 13), 'float32', 'fp4', 64),
    ('nf4_f32_odd_zero_tail', (5, 13), 'float32', 'nf4', 64),
]


def main():
    rng = np.random.RandomState(11)
    out = []
    for name, shape, dtype, qt, bs in CASES:
        w = torch.from_numpy((rng.standard_normal(shape) * 0.02).astype(np.float32))
        special(w, bs)
        if name.endswith('zero_tail'):
            w.view(-1)[64:] = 0.0  # the last (partial, odd) block is all zero
        w = w.to(DTYPES[dtype])
        values = w.float().numpy().reshape(-1)
        packed, absmax, codes = kernel_quantize(values, bs, qt)
        code = get_4bit_type(qt)
        state = json.dumps({'quant_type': qt, 'blocksize': bs, 'dtype': str(w.dtype).strip('torch.'),
                            'shape': tuple(w.shape)})
        alt = argmin_codes(values, absmax, bs, code)
        raw = w.contiguous().view(torch.int16).numpy().view(np.uint16) if dtype != 'float32' else None
        out.append({
            'name': name,
            'shape': list(shape),
            'dtype': dtype,
            'quant_type': qt,
            'blocksize': bs,
            'weight': (['0x%04x' % v for v in raw.reshape(-1).tolist()] if raw is not None else
                       ['0x%08x' % v for v in values.view(np.uint32).tolist()]),
            'packed': packed.hex(),
            'absmax': ['0x%08x' % v for v in absmax.view(np.uint32).tolist()],
            'quant_map': ['0x%08x' % v for v in code.numpy().view(np.uint32).tolist()],
            'quant_state': state,
            'argmin_differs': sum(1 for a, b in zip(alt, codes) if a != b),
        })
    doc = {
        'note': __doc__.strip(),
        'generator': 'test/interop/golden/bnb_reference.py',
        'torch': torch.__version__,
    }
    with open(os.path.join(HERE, 'bnb_vectors.json'), 'w') as fh:
        fh.write(json.dumps(doc, indent=1)[:-2] + ',\n "cases": [\n')
        fh.write(',\n'.join(json.dumps(c, separators=(',', ':')) for c in out))
        fh.write('\n ]\n}\n')


if __name__ == '__main__':
    main()
