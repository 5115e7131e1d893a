#!/usr/bin/python3
"""
Golden vectors for quantd's "awq" layout (src/core/interop/awq.ts): an independent,
straightforward transcription of AutoAWQ's tensor ops in torch (run with /usr/bin/python3,
torch 1.13):

  /usr/bin/python3 test/interop/golden/awq_reference.py   # writes awq_vectors.json beside it

Derivation (what is transcribed, from which source):
  1. awq/quantize/quantizer.py, AwqQuantizer._apply_quant: the layer is cast with .half() first,
     then pseudo_quantize_tensor(w) with zero_point=True, w_bit=4 (max_int 15, min_int 0):
     w.reshape(-1, group_size); max_val = amax, min_val = amin (dim 1);
     scales = (max_val - min_val).clamp(min=1e-5) / max_int;
     zeros = (-round(min_val / scales)).clamp_(min_int, max_int);
     w = (clamp(round(w / scales) + zeros, min_int, max_int) - zeros) * scales.
     No activation-aware scale search and no clipping (they need calibration data): this is the
     round-to-nearest path of the same function.
  2. awq/modules/linear/gemm.py, WQLinear_GEMM.from_linear with the float16 scales/zeros
     transposed to [groups, out]: scale_zeros = zeros * scales; intweight =
     round((w[:, idx] + scale_zeros[idx // group_size]) / scales[idx // group_size]).to(int),
     transposed to [in, out], and eight values per int32 along the OUTPUT dim in the order
     order_map = [0, 2, 4, 6, 1, 3, 5, 7]; qzeros = zeros.to(int32) packed the same way.
  All arithmetic is float16, as on AutoAWQ's device: torch 1.13's CPU lacks float16 kernels for
  round and clamp, so those two are applied in float32 and cast back (exact: their results are
  float16 values already); +, -, *, / and amax/amin run on float16 tensors directly.
  group_size -1 (one group per row) is transcribed with group_size = in_features: AutoAWQ's
  pseudo_quantize_tensor treats -1 as per row, but from_linear indexes with the raw -1
  (idx // -1) and fails, so there is no packed AutoAWQ output to copy for it.

The weights: pseudo-random N(0, 0.02) plus hand-made groups: an all-zero group (range clamped to
1e-5, a float16 subnormal scale), all-positive and all-negative groups (zero point clamped),
x / scale ties at .5 (scale 1), a zero-point tie, large magnitudes.

Every tensor is a list of hex words (16-bit for float16/bfloat16 weights and the scales, 32-bit
for float32 weights and int32 qweight/qzeros), element order.
"""
import json
import os

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = {'float32': torch.float32, 'float16': torch.float16, 'bfloat16': torch.bfloat16}


def round_h(x):
    return torch.round(x.float()).half()


def clamp_h(x, lo=None, hi=None):
    return torch.clamp(x.float(), lo, hi).half()


def pseudo_quantize_tensor(w, w_bit, group_size):
    org_w_shape = w.shape
    w = w.reshape(-1, group_size)
    max_val = w.amax(dim=1, keepdim=True)
    min_val = w.amin(dim=1, keepdim=True)
    max_int = 2**w_bit - 1
    min_int = 0
    scales = clamp_h(max_val - min_val, lo=1e-5) / max_int
    zeros = clamp_h(-round_h(min_val / scales), min_int, max_int)
    w = (clamp_h(round_h(w / scales) + zeros, min_int, max_int) - zeros) * scales
    zeros = zeros.view(org_w_shape[0], -1)
    scales = scales.view(org_w_shape[0], -1)
    return w.reshape(org_w_shape), scales, zeros


def from_linear(weight, w_bit, group_size, scales, zeros):
    in_features = weight.shape[1]
    scale_zeros = zeros * scales
    awq_scales = scales.clone().half()
    pack_num = 32 // w_bit
    intweight = []
    for idx in range(in_features):
        intweight.append(
            round_h((weight[:, idx] + scale_zeros[idx // group_size]) / awq_scales[idx // group_size])
            .to(torch.int)[:, None])
    intweight = torch.cat(intweight, dim=1)
    intweight = intweight.t().contiguous()
    intweight = intweight.to(dtype=torch.int32)
    qweight = torch.zeros((intweight.shape[0], intweight.shape[1] // 32 * w_bit), dtype=torch.int32)
    order_map = [0, 2, 4, 6, 1, 3, 5, 7]
    for col in range(intweight.shape[1] // pack_num):
        for i in range(pack_num):
            qweight_col = intweight[:, col * pack_num + order_map[i]]
            qweight[:, col] |= qweight_col << (i * w_bit)
    zeros = zeros.to(dtype=torch.int32)
    qzeros = torch.zeros((zeros.shape[0], zeros.shape[1] // 32 * w_bit), dtype=torch.int32)
    for col in range(zeros.shape[1] // pack_num):
        for i in range(pack_num):
            qzero_col = zeros[:, col * pack_num + order_map[i]]
            qzeros[:, col] |= qzero_col << (i * w_bit)
    return qweight, qzeros, awq_scales, intweight


def words32(t):
    return ['0x%08x' % v for v in t.contiguous().numpy().view(np.uint32).reshape(-1).tolist()]


def words16(t):
    return ['0x%04x' % v for v in t.contiguous().view(torch.int16).numpy().view(np.uint16).reshape(-1).tolist()]


def special(w, gs):
    w[0, 0:gs] = 0.0  # all zero: range clamped to 1e-5
    w[1, 0:gs] = w[1, 0:gs].abs() + 0.003  # all positive: zero point clamps to 0
    w[2, 0:gs] = -w[2, 0:gs].abs() - 0.003  # all negative: zero point clamps to 15
    ties = torch.linspace(-7.0, 8.0, gs)  # range 15: scale 1, zero point 7
    ties[1:9] = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 4.5])
    w[3, 0:gs] = ties
    w[4, 0:gs] = torch.linspace(-2.5, 12.5, gs)  # zero point -round(-2.5) = 2
    w[5, :] *= 2000.0
    w[6, 0:gs] = 1e-6  # a constant group: range 0 -> 1e-5


CASES = [
    # name, shape [out, in], dtype, group_size
    # out is a multiple of 32: from_linear sizes qweight as out // 32 * w_bit words per row
    ('f16_g32', (32, 64), 'float16', 32),
    ('bf16_g64', (32, 128), 'bfloat16', 64),
    ('f32_g128', (32, 128), 'float32', 128),
    ('f16_rowwise', (32, 64), 'float16', -1),
]


def main():
    rng = np.random.RandomState(7)
    out = []
    for name, shape, dtype, gs in CASES:
        eff = gs if gs != -1 else shape[1]
        w = torch.from_numpy((rng.standard_normal(shape) * 0.02).astype(np.float32))
        special(w, eff)
        w = w.to(DTYPES[dtype])
        layer = w.half()  # AutoAWQ: linear_layer.half()
        wq, scales, zeros = pseudo_quantize_tensor(layer, 4, eff)
        qweight, qzeros, awq_scales, intweight = from_linear(wq, 4, eff, scales.t().contiguous(),
                                                             zeros.t().contiguous())
        out.append({
            'name': name,
            'shape': list(shape),
            'dtype': dtype,
            'group_size': gs,
            'weight': words16(w) if dtype != 'float32' else words32(w),
            'qweight': words32(qweight),
            'qzeros': words32(qzeros),
            'scales': words16(awq_scales),
        })
    doc = {
        'note': __doc__.strip(),
        'generator': 'test/interop/golden/awq_reference.py',
        'torch': torch.__version__,
    }
    with open(os.path.join(HERE, 'awq_vectors.json'), 'w') as f:
        f.write(json.dumps(doc, indent=1)[:-2] + ',\n "cases": [\n')
        f.write(',\n'.join(json.dumps(c, separators=(',', ':')) for c in out))
        f.write('\n ]\n}\n')


if __name__ == '__main__':
    main()
