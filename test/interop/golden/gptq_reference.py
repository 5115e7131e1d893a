#!/usr/bin/python3
"""
Golden vectors for quantd's "gptq" layout (src/core/interop/gptq.ts): an independent,
straightforward transcription of the reference tensor ops in torch (run with /usr/bin/python3,
torch 1.13, numpy 1.24):

  /usr/bin/python3 test/interop/golden/gptq_reference.py   # writes gptq_vectors.json beside it

Derivation (what is transcribed, from which source):
  1. auto_gptq/quantization/quantizer.py, Quantizer.find_params(x, weight=True) with
     perchannel=True (per row), and quantize(x, scale, zero, maxq).
  2. auto_gptq/quantization/gptq.py, GPTQ.fasterquant's column loop with the Hessian error
     feedback removed (round-to-nearest, no calibration data): find_params on every
     W[:, i:i+groupsize] slice at i % groupsize == 0 (on all of W for groupsize -1), Q[:, i] =
     quantize(W[:, i]), then layer.weight = Q.to(layer dtype). W is the float32 copy W.float().
  3. auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py, QuantLinear.pack: scales.t(), zeros.t(),
     scale_zeros = zeros * scales (float32), self.scales = scales.half(), intweight =
     round((W[:, idx] + scale_zeros[g]) / self.scales[g]).to(int), packed LSB-first along the
     input dim into uint32 words; qzeros = (zeros - 1) packed along the output dim.
  4. The v1 zero point 0 case (asymmetric groups whose zero point is 0): AutoGPTQ's
     (zeros - 1).astype(uint32) is undefined for -1.0, so the expected qzeros follow GPTQModel
     (gptqmodel/utils/model.py convert_gptq_v2_to_v1_format_module): the true zero points packed,
     then `qzeros -= 0x11111111` (4-bit; 0x55555555 2-bit, 0x01010101 8-bit) on the int32 tensor.
     Where every zero point is >= 1 the generator also checks that step 3's AutoGPTQ qzeros are
     the same bytes (field "autogptq_qzeros_agree").

The weights are pseudo-random N(0, 0.02) plus hand-made rows: exact .5 ties of x / scale
(scale 1), an all-zero group (xmin = xmax = 0 -> -1/+1), all-positive groups (sym: xmin stays 0;
asym: zero point 0), a zero-point tie (round(2.5) = 2), large and tiny magnitudes.

Every tensor is stored as a list of 32-bit (int32/float32) or 16-bit (float16/bfloat16) words in
hex, little-endian element order: weight (in its source dtype), qweight, qzeros, scales, g_idx.
"""
import json
import os

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = {'float32': torch.float32, 'float16': torch.float16, 'bfloat16': torch.bfloat16}


def find_params(x, bits, sym):
    maxq = torch.tensor(2**bits - 1)
    tmp = torch.zeros(x.shape[0])
    xmin = torch.minimum(x.min(1)[0], tmp)
    xmax = torch.maximum(x.max(1)[0], tmp)
    if sym:
        xmax = torch.maximum(torch.abs(xmin), xmax)
        tmp = xmin < 0
        if torch.any(tmp):
            xmin[tmp] = -xmax[tmp]
    tmp = (xmin == 0) & (xmax == 0)
    xmin[tmp] = -1
    xmax[tmp] = +1
    scale = (xmax - xmin) / maxq
    if sym:
        zero = torch.full_like(scale, (maxq + 1) / 2)
    else:
        zero = torch.round(-xmin / scale)
    return scale.reshape(-1, 1), zero.reshape(-1, 1)


def quantize(x, scale, zero, maxq):
    q = torch.clamp(torch.round(x / scale) + zero, 0, maxq)
    return scale * (q - zero)


def rtn(layer_weight, bits, groupsize, sym):
    """GPTQ.fasterquant without the error feedback: returns Q (layer dtype), scale, zero [out, G]."""
    W = layer_weight.clone().float()
    maxq = torch.tensor(2**bits - 1)
    columns = W.shape[1]
    Q = torch.zeros_like(W)
    scales, zeros = [], []
    if groupsize == -1:
        scale, zero = find_params(W, bits, sym)
        scales.append(scale)
        zeros.append(zero)
    direct = torch.zeros_like(W)
    for i in range(columns):
        if groupsize != -1 and i % groupsize == 0:
            scale, zero = find_params(W[:, i:i + groupsize], bits, sym)
            scales.append(scale)
            zeros.append(zero)
        w = W[:, i]
        Q[:, i] = quantize(w.unsqueeze(1), scale, zero, maxq).flatten()
        direct[:, i] = torch.clamp(torch.round(w.unsqueeze(1) / scale) + zero, 0, maxq).flatten()
    return Q.to(layer_weight.dtype), torch.cat(scales, dim=1), torch.cat(zeros, dim=1), direct


def pack(layer_q, scales, zeros, bits, group_size):
    """QuantLinear.pack (qlinear_cuda_old.py) for bits 2/4/8."""
    infeatures = layer_q.shape[1]
    gs = group_size if group_size != -1 else infeatures
    W = layer_q.clone()
    scales = scales.t().contiguous()
    zeros = zeros.t().contiguous()
    scale_zeros = zeros * scales
    half_scales = scales.clone().half()
    intweight = []
    for idx in range(infeatures):
        g = idx // gs
        intweight.append(torch.round((W[:, idx] + scale_zeros[g]) / half_scales[g]).to(torch.int)[:, None])
    intweight = torch.cat(intweight, dim=1)
    # quantd's one departure: AutoGPTQ ORs a re-derived code outside [0, maxq] into the word
    # unmasked (corrupting its neighbours); quantd clamps it. Counted in "codes_clamped".
    maxq = 2**bits - 1
    clamped = int(((intweight < 0) | (intweight > maxq)).sum())
    intweight = intweight.clamp(0, maxq)
    codes = intweight.clone()
    intweight = intweight.t().contiguous().numpy().astype(np.uint32)
    qweight = np.zeros((intweight.shape[0] // 32 * bits, intweight.shape[1]), dtype=np.uint32)
    i = 0
    row = 0
    while row < qweight.shape[0]:
        for j in range(i, i + (32 // bits)):
            qweight[row] |= intweight[j] << (bits * (j - i))
        i += 32 // bits
        row += 1
    qweight = qweight.astype(np.int32)

    def pack_zeros(z):
        qz = np.zeros((z.shape[0], z.shape[1] // 32 * bits), dtype=np.uint32)
        i = 0
        col = 0
        while col < qz.shape[1]:
            for j in range(i, i + (32 // bits)):
                qz[:, col] |= z[:, j] << (bits * (j - i))
            i += 32 // bits
            col += 1
        return qz.astype(np.int32)

    # GPTQModel: true (v2) zero points packed, then the v2 -> v1 word subtraction on int32.
    v2 = torch.from_numpy(pack_zeros(zeros.numpy().astype(np.uint32)))
    ones = {2: 0b01010101010101010101010101010101, 4: 0b00010001000100010001000100010001,
            8: 0b00000001000000010000000100000001}[bits]
    v1 = (v2 - ones).numpy()
    autogptq = None
    if bool((zeros >= 1).all()):
        autogptq = pack_zeros((zeros - 1).numpy().astype(np.uint32))
    g_idx = np.array([i // gs for i in range(infeatures)], dtype=np.int32)
    return qweight, v1, autogptq, half_scales.numpy(), g_idx, codes, clamped


def words32(a):
    return ['0x%08x' % v for v in np.ascontiguousarray(a).view(np.uint32).reshape(-1).tolist()]


def words16(t):
    return ['0x%04x' % v for v in t.contiguous().view(torch.int16).numpy().view(np.uint16).reshape(-1).tolist()]


def weights(name, shape, dtype, rng, special):
    w = torch.from_numpy((rng.standard_normal(shape) * 0.02).astype(np.float32))
    special(w)
    return w.to(DTYPES[dtype])


def special_sym(w):
    w[0, 0:32] = 0.0  # all-zero group: xmin = xmax = 0 -> -1 / +1
    w[1, 0:32] = 0.0
    w[1, 0:16] = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 7.5, -7.5, 3.5, -3.5, 6.5, -6.5, 4.5, 5.5, 0.0, -0.0])
    w[2, 32:64] = torch.linspace(0.0, 1.5, 32)  # all >= 0: sym keeps xmin = 0, codes clamp at 15
    w[3, 0:32] *= 5000.0  # large magnitudes
    w[4, 32:64] *= 1e-3  # tiny ones
    w[5, :] = -w[5, :].abs()  # all <= 0


def special_wide(w):
    # bfloat16, 8-bit asym, whole rows: Q's bfloat16 rounding (2^-8 relative) times |q - zero| up
    # to 255 can exceed half a step, so pack() re-derives codes of 256 (or -1)
    w[:, :] *= torch.where(torch.arange(w.shape[1]) % 97 == 5, 8.0, 1.0)
    w[0:8, :] = w[0:8, :].abs() * torch.linspace(0.2, 1.0, w.shape[1])  # zero point 0, codes up to 255


def special_asym(w):
    w[0, 0:32] = 0.0  # all-zero group: zero = round(1 / (2/15))
    w[1, 0:32] = torch.linspace(-7.0, 8.0, 32)  # scale 1, zero 7
    w[1, 3] = 0.5
    w[1, 4] = 1.5
    w[1, 5] = -2.5
    w[2, 32:64] = w[2, 32:64].abs() + 0.01  # all positive: zero point 0 (v1 cannot store it)
    w[9, 0:32] = w[9, 0:32].abs()  # another zero point 0, in a different qzeros word
    w[3, 0:32] = torch.linspace(-2.5, 12.5, 32)  # zero-point tie: round(2.5) = 2
    w[4, 0:32] *= 3000.0


CASES = [
    # name, shape, dtype, bits, group_size, sym, special
    ('bf16_int4_g32_sym', (32, 64), 'bfloat16', 4, 32, True, special_sym),
    ('f16_int4_g32_asym', (32, 64), 'float16', 4, 32, False, special_asym),
    ('f32_int8_rowwise_asym', (32, 64), 'float32', 8, -1, False, special_asym),
    ('f16_int2_g64_sym', (32, 128), 'float16', 2, 64, True, special_sym),
    ('bf16_int8_g128_sym', (32, 128), 'bfloat16', 8, 128, True, special_sym),
    ('bf16_int8_g64_asym', (32, 128), 'bfloat16', 8, 64, False, special_asym),
    ('f32_int4_g64_partial_asym', (32, 96), 'float32', 4, 64, False, special_asym),
    ('f16_int8_g32_asym', (32, 64), 'float16', 8, 32, False, special_asym),
    ('bf16_int8_rowwise_asym_clamped', (32, 128), 'bfloat16', 8, -1, False, special_wide),
]


def main():
    rng = np.random.RandomState(20240607)
    out = []
    for name, shape, dtype, bits, gs, sym, special in CASES:
        w = weights(name, shape, dtype, rng, special)
        q, scale, zero, direct = rtn(w, bits, gs, sym)
        qweight, qzeros, autogptq, half_scales, g_idx, codes, clamped = pack(q, scale, zero, bits, gs)
        out.append({
            'name': name,
            'shape': list(shape),
            'dtype': dtype,
            'bits': bits,
            'group_size': gs,
            'sym': sym,
            'weight': words16(w) if dtype != 'float32' else words32(w.numpy()),
            'qweight': words32(qweight),
            'qzeros': words32(qzeros),
            'scales': words16(torch.from_numpy(half_scales)),
            'g_idx': g_idx.tolist(),
            'autogptq_qzeros_agree': None if autogptq is None else bool((autogptq == qzeros).all()),
            'zero_point_zero_groups': int((zero == 0).sum()),
            'codes_differing_from_direct_rounding': int((codes.float() != direct).sum()),
            'codes_clamped': clamped,
        })
    doc = {
        'note': __doc__.strip(),
        'generator': 'test/interop/golden/gptq_reference.py',
        'torch': torch.__version__,
        'cases': out,
    }
    with open(os.path.join(HERE, 'gptq_vectors.json'), 'w') as f:
        # one case per line: reviewable, and small enough to commit
        head = {k: v for k, v in doc.items() if k != 'cases'}
        f.write(json.dumps(head, indent=1)[:-2] + ',\n "cases": [\n')
        f.write(',\n'.join(json.dumps(c, separators=(',', ':')) for c in doc['cases']))
        f.write('\n ]\n}\n')


if __name__ == '__main__':
    main()
