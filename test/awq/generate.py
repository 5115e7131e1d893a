#!/usr/bin/python3
"""Reference vectors for quantd's AWQ search (src/core/interop/awq-search.ts), from an
implementation of the algorithm written here in torch, float64 throughout, after the paper
(Lin et al. 2023: the activation-aware scale search over α on a grid, then the per-group clipping
search) with AutoAWQ's conventions (w̄ normalised per group with +1e-6, s normalised by
sqrt(max·min), clipping shrinks max|W| by up to half in 1/n_grid steps, first least error wins).

Run: /usr/bin/python3 test/awq/generate.py → test/awq/awq-search.json (committed).

The synthetic layers are those of test/gptq/generate.py: X [n, in] = (Z·A)⊙s with Student-t
(df 3) Z, a random mixing A (correlated inputs) and ~6 % outlier channels (×8 to ×30);
W [out, in] ~ N(0, 1/in) with 0.5 % of the weights ×10. Each case records X, W, the options, the
reference's scales, chosen ratio, clipping bounds, and the relative output error
‖X·Wᵀ − (X/s)·Q(Ws)ᵀ‖² / ‖X·Wᵀ‖² of AWQ and of round-to-nearest (the same quantizer, no scale,
no clipping).
"""
import base64
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'gptq'))
from generate import layer  # noqa: E402  (the same synthetic layers as the GPTQ vectors)


def b64(t, dtype):
    return base64.b64encode(t.detach().contiguous().to(dtype).numpy().tobytes()).decode()


def pseudo_quantize(w, bits, gs, zero_point):
    shape = w.shape
    w = w.reshape(-1, gs)
    if zero_point:
        max_int = 2 ** bits - 1
        hi = w.amax(dim=1, keepdim=True)
        lo = w.amin(dim=1, keepdim=True)
        scale = (hi - lo).clamp(min=1e-5) / max_int
        zero = (-torch.round(lo / scale)).clamp(0, max_int)
        w = (torch.clamp(torch.round(w / scale) + zero, 0, max_int) - zero) * scale
    else:
        max_int = 2 ** (bits - 1) - 1
        min_int = -(2 ** (bits - 1))
        scale = w.abs().amax(dim=1, keepdim=True).clamp(min=1e-5) / max_int
        w = torch.clamp(torch.round(w / scale), min_int, max_int) * scale
    return w.reshape(shape)


def awq(X, W, bits, gs, zero_point, n_grid=20, max_shrink=0.5, stride=1):
    X = X.double()
    W = W.double()
    out, k = W.shape
    x_mean = X.abs().mean(0)
    wg = W.reshape(-1, gs).abs()
    w_mean = (wg / (wg.amax(dim=1, keepdim=True) + 1e-6)).reshape(out, k).mean(0)
    ref = X @ W.T
    best, best_ratio, best_s = float('inf'), 0, None
    for step in range(n_grid):
        ratio = step / n_grid
        s = (x_mean.pow(ratio) / (w_mean.pow(1 - ratio) + 1e-4)).clamp(min=1e-4)
        s = s / (s.max() * s.min()).sqrt()
        q = pseudo_quantize(W * s, bits, gs, zero_point) / s
        loss = float(((ref - X @ q.T) ** 2).mean())
        if loss < best:
            best, best_ratio, best_s = loss, step, s
    Ws = W * best_s
    Xs = (X / best_s)[::stride]
    groups = k // gs
    Wg = Ws.reshape(out, 1, groups, gs)
    Xg = Xs.reshape(1, -1, groups, gs)
    org_out = (Xg * Wg).sum(-1)  # [out, tokens, groups]
    org_max = Wg.abs().amax(dim=-1, keepdim=True)  # [out, 1, groups, 1]
    best_max = org_max.clone()
    min_err = torch.full((out, groups), float('inf'), dtype=torch.float64)
    for i in range(int(max_shrink * n_grid)):
        m = org_max * (1 - i / n_grid)
        cur = torch.clamp(Wg, -m, m)
        q = pseudo_quantize(cur.reshape(out, k), bits, gs, zero_point).reshape(Wg.shape)
        err = ((Xg * q).sum(-1) - org_out).pow(2).mean(dim=1)  # [out, groups]
        better = err < min_err
        min_err[better] = err[better]
        best_max.view(out, groups)[better] = m.view(out, groups)[better]
    clipped = torch.clamp(Wg, -best_max, best_max).reshape(out, k)
    return best_s, best_ratio, best_max.reshape(out, groups), clipped


def rel_error(X, W, Xq, Wq):
    ref = X.double() @ W.double().T
    return float(((ref - Xq @ Wq.T) ** 2).sum() / (ref ** 2).sum())


def main():
    g = torch.Generator().manual_seed(20261126)
    cases = []
    for name, bits, gs, zp, cols, out in [
        ('4bit_g32_zero_point', 4, 32, True, 128, 64),
        ('4bit_g64_symmetric', 4, 64, False, 128, 32),
        ('3bit_g32_zero_point', 3, 32, True, 96, 32),
    ]:
        X, W = layer(g, 256, cols, out)
        s, ratio, clip, clipped = awq(X, W, bits, gs, zp)
        awq_err = rel_error(X, W, X.double() / s, pseudo_quantize(clipped, bits, gs, zp))
        rtn_err = rel_error(X, W, X.double(), pseudo_quantize(W.double(), bits, gs, zp))
        cases.append({
            'id': name, 'bits': bits, 'group_size': gs, 'zero_point': zp, 'in': cols, 'out': out,
            'n': X.shape[0], 'x': b64(X, torch.float32), 'w': b64(W, torch.float32),
            'scales': b64(s, torch.float64), 'ratio': ratio, 'clip': b64(clip, torch.float64),
            'awq_error': awq_err, 'rtn_error': rtn_err,
        })
        print(name, ratio, awq_err, rtn_err)
    with open(os.path.join(HERE, 'awq-search.json'), 'w') as f:
        json.dump({'torch_version': torch.__version__, 'cases': cases}, f, separators=(',', ':'))
        f.write('\n')


if __name__ == '__main__':
    main()
