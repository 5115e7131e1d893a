#!/usr/bin/python3
"""Golden sequences for quantd's observers and FakeQuantize, produced by real PyTorch.

Run with Debian's python3-torch (1.13): `/usr/bin/python3 test/observers/generate.py`.
The output (observers.json beside this file) is committed; the tests read it and never need
torch.

Each case builds one torch.ao.quantization observer (or FakeQuantize module) from the options
quantd accepts, feeds it a sequence of batches (different shapes, outliers, one-sided and
sub-integer ranges, empty batches, NaN and Inf), and records after every batch what torch holds:
the running min/max (and the histogram), and what calculate_qparams returns, or that it raised.
FakeQuantize cases also switch the observer and fake-quant on and off between batches and record
the module's output.

torch's float32 sums (torch.sum, the histogram's total and the search's error) depend on the
CPU's vector width: these vectors come from an AVX2 machine (8 float lanes), the width quantd
reproduces.
"""
import base64
import json
import os
import warnings

import numpy as np
import torch
from torch.ao.quantization.fake_quantize import FakeQuantize, FixedQParamsFakeQuantize, FusedMovingAvgObsFakeQuantize
from torch.ao.quantization.observer import (
    FixedQParamsObserver,
    HistogramObserver,
    MinMaxObserver,
    MovingAverageMinMaxObserver,
    MovingAveragePerChannelMinMaxObserver,
    PerChannelMinMaxObserver,
)

warnings.filterwarnings('ignore')
HERE = os.path.dirname(os.path.abspath(__file__))
torch.set_num_threads(1)

KINDS = {
    'min_max': MinMaxObserver,
    'moving_average_min_max': MovingAverageMinMaxObserver,
    'per_channel_min_max': PerChannelMinMaxObserver,
    'moving_average_per_channel_min_max': MovingAveragePerChannelMinMaxObserver,
    'histogram': HistogramObserver,
    'fixed_qparams': FixedQParamsObserver,
}
DTYPES = {'quint8': torch.quint8, 'qint8': torch.qint8, 'quint4x2': torch.quint4x2, 'qint32': torch.qint32}
QSCHEMES = {
    'per_tensor_affine': torch.per_tensor_affine,
    'per_tensor_symmetric': torch.per_tensor_symmetric,
    'per_channel_affine': torch.per_channel_affine,
    'per_channel_symmetric': torch.per_channel_symmetric,
    'per_channel_affine_float_qparams': torch.per_channel_affine_float_qparams,
}


def f32(t: torch.Tensor) -> str:
    return base64.b64encode(t.detach().to(torch.float32).contiguous().numpy().astype('<f4').tobytes()).decode()


def batch(t: torch.Tensor) -> dict:
    return {'shape': list(t.shape), 'data': f32(t)}


def torch_kwargs(options: dict) -> dict:
    """The observer's constructor arguments from quantd's snake_case options."""
    kw = {}
    for key, value in options.items():
        if key == 'kind':
            continue
        if key == 'dtype':
            kw['dtype'] = DTYPES[value]
        elif key == 'qscheme':
            kw['qscheme'] = QSCHEMES[value]
        elif key == 'upsample_rate':
            kw['upsample_rate'] = value
        else:
            kw[key] = value
    return kw


def make_observer(options: dict):
    return KINDS[options['kind']](**torch_kwargs(options))


def qparams_of(calc) -> dict:
    try:
        scale, zp = calc()
    except (AssertionError, ValueError, OverflowError, RuntimeError) as e:
        return {'error': type(e).__name__}
    out = {'scale': f32(scale.reshape(-1))}
    if zp.dtype.is_floating_point:
        out['zero_point_float'] = f32(zp.reshape(-1))
    else:
        out['zero_point'] = [int(v) for v in zp.reshape(-1).tolist()]
    return out


def state_of(obs) -> dict:
    state = {}
    if hasattr(obs, 'min_val'):
        state['min'] = f32(obs.min_val.reshape(-1))
        state['max'] = f32(obs.max_val.reshape(-1))
    if isinstance(obs, HistogramObserver):
        state['histogram'] = f32(obs.histogram)
    return state


def observer_case(name: str, options: dict, batches: list) -> dict:
    obs = make_observer(options)
    steps = []
    for x in batches:
        step = {'x': batch(x)}
        try:
            obs(x)
        except (ValueError, OverflowError, RuntimeError) as e:
            step['observe_error'] = type(e).__name__
            obs = make_observer(options)  # torch's state is half-updated after a refusal; quantd leaves it as it was
            for earlier in [s for s in steps if 'observe_error' not in s]:
                obs(decode(earlier['x']))
        step['state'] = state_of(obs)
        step['qparams'] = qparams_of(obs.calculate_qparams)
        steps.append(step)
    return {'id': name, 'observer': options, 'steps': steps}


def decode(b: dict) -> torch.Tensor:
    raw = base64.b64decode(b['data'])
    return torch.from_numpy(np.frombuffer(raw, dtype='<f4').copy()).reshape(b['shape'])


def fake_quantize_case(name: str, options: dict, steps_in: list, fixed: bool = False, fused: bool = False) -> dict:
    """steps_in: (observer_on, fake_quant_on, x)."""
    if fused:
        fq = FusedMovingAvgObsFakeQuantize(observer=KINDS[options['kind']], **torch_kwargs(options))
    elif fixed:
        fq = FixedQParamsFakeQuantize(observer=FixedQParamsObserver.with_args(**torch_kwargs(options)))
    else:
        fq = FakeQuantize(observer=KINDS[options['kind']], **torch_kwargs(options))
    steps = []
    for observer_on, fake_quant_on, x in steps_in:
        fq.enable_observer(observer_on)
        fq.enable_fake_quant(fake_quant_on)
        y = fq(x)
        steps.append({
            'observer_enabled': observer_on,
            'fake_quant_enabled': fake_quant_on,
            'x': batch(x),
            'y': f32(y),
            'scale': f32(fq.scale.reshape(-1)),
            ('zero_point_float' if fq.zero_point.dtype.is_floating_point else 'zero_point'):
                f32(fq.zero_point.reshape(-1)) if fq.zero_point.dtype.is_floating_point
                else [int(v) for v in fq.zero_point.reshape(-1).tolist()],
            'state': state_of(fq.activation_post_process),
        })
    return {'id': name, 'fake_quantize': options, 'fixed': fixed, 'fused': fused, 'steps': steps}


def fused_qparams(lo: float, hi: float, qmin: int, qmax: int, symmetric: bool):
    """ATen's ChooseQuantizationParams, read back through the fused op on a fresh range."""
    scale = torch.tensor([1.0])
    zp = torch.tensor([0], dtype=torch.int)
    torch.fused_moving_avg_obs_fake_quant(
        torch.tensor([lo, hi]), torch.tensor([1]), torch.tensor([1]), torch.tensor(float('inf')),
        torch.tensor(float('-inf')), scale, zp, 0.01, qmin, qmax, 0, False, symmetric)
    return float(scale[0]), int(zp[0])


def choose_qparams_cases(g) -> list:
    """Ranges from 1e-7 to 1e3 wide (the small-scale cut-off, the empty range), affine and symmetric."""
    cases = []
    ranges = [(0, 255), (-128, 127), (0, 15), (-8, 7), (0, 127)]
    for i in range(200):
        qmin, qmax = ranges[i % len(ranges)]
        a, b = sorted((float(v) for v in (torch.randn(2, generator=g) * 10 ** float(torch.randint(-7, 3, (1,), generator=g)))))
        a, b = float(np.float32(a)), float(np.float32(b))
        for symmetric in (False, True):
            scale, zp = fused_qparams(a, b, qmin, qmax, symmetric)
            cases.append({'min': a, 'max': b, 'qmin': qmin, 'qmax': qmax, 'symmetric': symmetric,
                          'scale': scale, 'zero_point': zp})
    return cases


def main() -> None:
    g = torch.Generator().manual_seed(20261125)

    def randn(*shape, scale=1.0, shift=0.0):
        return torch.randn(*shape, generator=g) * scale + shift

    def outliers(*shape):
        x = randn(*shape)
        flat = x.reshape(-1)
        idx = torch.randint(0, flat.numel(), (max(1, flat.numel() // 50),), generator=g)
        flat[idx] = flat[idx] * 40
        return x

    def relu(*shape, scale=1.0):
        return randn(*shape, scale=scale).clamp(min=0)

    nan_at = randn(4, 8)
    nan_at[1, 3] = float('nan')
    inf_at = randn(4, 8)
    inf_at[2, 5] = float('inf')
    ninf_at = randn(4, 8)
    ninf_at[0, 0] = float('-inf')

    tensor_batches = [randn(4, 16), outliers(8, 32), randn(2, 3, 5, scale=3), torch.zeros(0, 4),
                      relu(64, scale=2), randn(128, scale=0.01, shift=0.5), outliers(16, 16)]
    unit_batches = [torch.rand(256, generator=g) * 0.8 + 0.1, torch.rand(300, generator=g) * 0.9,
                    randn(128, scale=0.2, shift=0.5).clamp(0.01, 0.99)]
    channel_batches = [randn(6, 10), outliers(6, 24), randn(6, 3, scale=5, shift=1), torch.zeros(6, 0),
                       relu(6, 7), randn(6, 40, scale=0.001)]
    cases = []

    per_tensor = [
        ('min_max', {'kind': 'min_max'}),
        ('min_max_qint8_symmetric', {'kind': 'min_max', 'dtype': 'qint8', 'qscheme': 'per_tensor_symmetric'}),
        ('min_max_quint8_symmetric', {'kind': 'min_max', 'qscheme': 'per_tensor_symmetric'}),
        ('min_max_reduce_range', {'kind': 'min_max', 'reduce_range': True}),
        ('min_max_qint8_reduce_range', {'kind': 'min_max', 'dtype': 'qint8', 'reduce_range': True}),
        ('min_max_custom_range', {'kind': 'min_max', 'quant_min': 0, 'quant_max': 15}),
        ('min_max_custom_symmetric', {'kind': 'min_max', 'qscheme': 'per_tensor_symmetric', 'quant_min': 0,
                                      'quant_max': 15}),
        ('min_max_custom_reduce', {'kind': 'min_max', 'dtype': 'qint8', 'quant_min': -8, 'quant_max': 7,
                                   'reduce_range': True}),
        ('min_max_qint32', {'kind': 'min_max', 'dtype': 'qint32'}),
        ('min_max_quint4x2', {'kind': 'min_max', 'dtype': 'quint4x2'}),
        ('min_max_eps', {'kind': 'min_max', 'eps': 0.001}),
        ('moving_average', {'kind': 'moving_average_min_max'}),
        ('moving_average_half', {'kind': 'moving_average_min_max', 'averaging_constant': 0.5}),
        ('moving_average_qint8_symmetric', {'kind': 'moving_average_min_max', 'averaging_constant': 0.1,
                                            'dtype': 'qint8', 'qscheme': 'per_tensor_symmetric'}),
    ]
    for name, options in per_tensor:
        cases.append(observer_case(name, options, tensor_batches))
    cases.append(observer_case('min_max_nan', {'kind': 'min_max'}, [randn(8), nan_at, randn(8)]))
    cases.append(observer_case('min_max_inf', {'kind': 'min_max'}, [randn(8), inf_at]))
    cases.append(observer_case('min_max_symmetric_minus_inf', {'kind': 'min_max', 'dtype': 'qint8',
                                                               'qscheme': 'per_tensor_symmetric'}, [ninf_at]))
    cases.append(observer_case('moving_average_inf', {'kind': 'moving_average_min_max'},
                               [randn(8), inf_at, randn(8)]))
    cases.append(observer_case('min_max_constant', {'kind': 'min_max'}, [torch.full((5,), 2.5)]))
    cases.append(observer_case('min_max_unobserved', {'kind': 'min_max'}, [torch.zeros(0)]))

    per_channel = [
        ('per_channel', {'kind': 'per_channel_min_max'}),
        ('per_channel_axis1', {'kind': 'per_channel_min_max', 'ch_axis': 1}),
        ('per_channel_qint8_symmetric', {'kind': 'per_channel_min_max', 'dtype': 'qint8',
                                         'qscheme': 'per_channel_symmetric'}),
        ('per_channel_float_qparams', {'kind': 'per_channel_min_max',
                                       'qscheme': 'per_channel_affine_float_qparams'}),
        ('per_channel_reduce_range', {'kind': 'per_channel_min_max', 'reduce_range': True}),
        ('moving_average_per_channel', {'kind': 'moving_average_per_channel_min_max'}),
        ('moving_average_per_channel_symmetric', {'kind': 'moving_average_per_channel_min_max',
                                                  'averaging_constant': 0.25, 'dtype': 'qint8',
                                                  'qscheme': 'per_channel_symmetric'}),
    ]
    for name, options in per_channel:
        batches = channel_batches
        if options.get('ch_axis') == 1:
            batches = [b.transpose(0, 1).contiguous() for b in channel_batches]
        cases.append(observer_case(name, options, batches))
    cases.append(observer_case('per_channel_axis_last', {'kind': 'per_channel_min_max', 'ch_axis': -1},
                               [randn(3, 4, 5), outliers(2, 7, 5)]))
    cases.append(observer_case('per_channel_3d', {'kind': 'per_channel_min_max', 'ch_axis': 1},
                               [randn(2, 4, 3), randn(5, 4, 1, scale=4)]))
    nan_rows = randn(6, 10)
    nan_rows[2, 4] = float('nan')
    cases.append(observer_case('per_channel_nan', {'kind': 'per_channel_min_max'}, [randn(6, 10), nan_rows]))
    cases.append(observer_case('per_channel_unobserved', {'kind': 'per_channel_min_max'}, [torch.zeros(0, 3)]))

    hist = [
        ('histogram', {'kind': 'histogram'}, tensor_batches),
        ('histogram_unit_range', {'kind': 'histogram'}, unit_batches + [randn(64, scale=3)]),
        ('histogram_qint8_symmetric', {'kind': 'histogram', 'bins': 256, 'dtype': 'qint8',
                                       'qscheme': 'per_tensor_symmetric'}, tensor_batches),
        ('histogram_small', {'kind': 'histogram', 'bins': 64, 'upsample_rate': 16},
         [randn(100, scale=4), randn(100, scale=2), randn(50, scale=9, shift=3), relu(80, scale=20)]),
        ('histogram_odd_bins', {'kind': 'histogram', 'bins': 5, 'upsample_rate': 3},
         [randn(40, scale=5), randn(40, scale=11)]),
        ('histogram_constant_first', {'kind': 'histogram', 'bins': 128},
         [torch.full((10,), 3.0), randn(200, scale=6), torch.full((4,), 3.0)]),
        ('histogram_grows', {'kind': 'histogram', 'bins': 512},
         [randn(1000, scale=2), randn(1000, scale=20), randn(1000, scale=200, shift=-50), randn(1000, scale=3)]),
        ('histogram_relu', {'kind': 'histogram', 'reduce_range': True},
         [relu(500, scale=4), relu(500, scale=6), relu(700, scale=5)]),
        ('histogram_nan', {'kind': 'histogram', 'bins': 64}, [randn(50, scale=4), nan_at.reshape(-1)]),
        ('histogram_inf', {'kind': 'histogram', 'bins': 64}, [randn(50, scale=4), inf_at.reshape(-1)]),
        ('histogram_many', {'kind': 'histogram', 'bins': 2048},
         [randn(40000, scale=3), outliers(300, 200), randn(30000, scale=2, shift=1)]),
    ]
    for name, options, batches in hist:
        cases.append(observer_case(name, options, batches))

    cases.append(observer_case('fixed', {'kind': 'fixed_qparams', 'scale': 1.0 / 256.0, 'zero_point': 0},
                               [randn(8)]))
    cases.append(observer_case('fixed_symmetric', {'kind': 'fixed_qparams', 'scale': 2.0 / 256.0,
                                                   'zero_point': 128, 'quant_min': 0, 'quant_max': 255},
                               [randn(8)]))

    fq_steps = [(True, True, randn(4, 16)), (True, True, outliers(8, 16)), (True, False, randn(16, scale=4)),
                (False, True, randn(3, 7, scale=5)), (False, False, randn(9)), (True, True, relu(32, scale=3)),
                (False, True, randn(2, 16, scale=10))]
    cases.append(fake_quantize_case('fake_quantize_default', {'kind': 'moving_average_min_max',
                                                              'quant_min': 0, 'quant_max': 255}, fq_steps))
    cases.append(fake_quantize_case('fake_quantize_qint8_symmetric', {
        'kind': 'moving_average_min_max', 'quant_min': -128, 'quant_max': 127, 'dtype': 'qint8',
        'qscheme': 'per_tensor_symmetric'}, fq_steps))
    cases.append(fake_quantize_case('fake_quantize_min_max_4bit', {'kind': 'min_max', 'quant_min': 0,
                                                                   'quant_max': 15}, fq_steps))
    cases.append(fake_quantize_case('fake_quantize_histogram', {'kind': 'histogram', 'bins': 256,
                                                                'quant_min': 0, 'quant_max': 255}, fq_steps))
    ch_steps = [(True, True, randn(6, 5)), (True, True, outliers(6, 12)), (False, True, randn(6, 4, scale=3)),
                (True, False, randn(6, 9)), (True, True, randn(6, 2, scale=0.1))]
    cases.append(fake_quantize_case('fake_quantize_per_channel', {
        'kind': 'moving_average_per_channel_min_max', 'quant_min': -128, 'quant_max': 127, 'dtype': 'qint8',
        'qscheme': 'per_channel_symmetric', 'ch_axis': 0}, ch_steps))
    cases.append(fake_quantize_case('fake_quantize_per_channel_float_qparams', {
        'kind': 'per_channel_min_max', 'quant_min': 0, 'quant_max': 255,
        'qscheme': 'per_channel_affine_float_qparams', 'ch_axis': 0}, ch_steps))
    cases.append(fake_quantize_case('fake_quantize_fixed', {
        'kind': 'fixed_qparams', 'scale': 1.0 / 256.0, 'zero_point': 0, 'quant_min': 0, 'quant_max': 255},
        [(True, True, torch.rand(20, generator=g) * 1.2 - 0.1), (False, True, randn(5))], fixed=True))

    # FusedMovingAvgObsFakeQuantize: torch.fused_moving_avg_obs_fake_quant (ChooseQuantizationParams)
    fused_steps = fq_steps + [(True, True, randn(40, scale=1e-4)), (True, True, torch.full((3, 3), 0.0)),
                              (False, True, randn(4, 16, scale=2))]
    cases.append(fake_quantize_case('fused_default', {'kind': 'moving_average_min_max', 'quant_min': 0,
                                                      'quant_max': 255}, fused_steps, fused=True))
    cases.append(fake_quantize_case('fused_tiny_first', {'kind': 'moving_average_min_max', 'quant_min': 0,
                                                         'quant_max': 255, 'averaging_constant': 0.5},
                                    [(True, True, randn(40, scale=1e-6)), (True, True, relu(30, scale=1e-5)),
                                     (True, True, -relu(30, scale=1e-5)), (True, True, randn(8))], fused=True))
    cases.append(fake_quantize_case('fused_qint8_symmetric', {
        'kind': 'moving_average_min_max', 'quant_min': -128, 'quant_max': 127, 'dtype': 'qint8',
        'qscheme': 'per_tensor_symmetric'}, fused_steps + [(True, True, relu(16))], fused=True))
    fused_ch = ch_steps + [(True, True, randn(6, 3, scale=1e-6)), (False, True, randn(6, 2, 3))]
    cases.append(fake_quantize_case('fused_per_channel_symmetric', {
        'kind': 'moving_average_per_channel_min_max', 'quant_min': -128, 'quant_max': 127, 'dtype': 'qint8',
        'qscheme': 'per_channel_symmetric', 'ch_axis': 0}, fused_ch, fused=True))
    cases.append(fake_quantize_case('fused_per_channel_affine', {
        'kind': 'moving_average_per_channel_min_max', 'quant_min': 0, 'quant_max': 255,
        'qscheme': 'per_channel_affine', 'ch_axis': 0, 'averaging_constant': 0.2}, fused_ch, fused=True))

    # the float32 primitives the observers are built on, pinned on their own
    sums = []
    for n in [1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511,
              1000, 2048, 4095, 4096, 5000, 9000, 20000]:
        x = randn(n, scale=float(torch.rand(1, generator=g)) * 1000) ** 3
        sums.append({'x': f32(x), 'sum': f32(x.sum().reshape(1))})
    a = randn(400, scale=50)
    b = torch.cat([randn(200, scale=3), -randn(150, scale=0.01).abs(), torch.full((50,), 0.1)])
    a[:20] = torch.tensor([0.3, -0.3, 0.0, -0.0, 7.0, -7.0, 1e-30, -1e-30, 5.5, -5.5] * 2)
    floor_divide = {'a': f32(a), 'b': f32(b), 'q': f32(torch.div(a, b, rounding_mode='floor'))}
    histc = []
    for (x, bins, lo, hi) in [(randn(3000, scale=4), 100, -3, 5), (randn(500), 7, 0, 0),
                              (torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 2.5, -1.0, 4.0000005, 3.9999998]), 4, 0, 4),
                              (torch.full((6,), 2.0), 3, 2, 2), (randn(1000, scale=0.3), 2048, 0, 0),
                              (randn(777, scale=1e4), 333, -20000, 9000)]:
        histc.append({'x': f32(x), 'bins': bins, 'min': lo, 'max': hi,
                      'histogram': f32(torch.histc(x, bins, min=lo, max=hi))})
    primitives = {'sums': sums, 'floor_divide': floor_divide, 'histc': histc,
                  'choose_qparams': choose_qparams_cases(g)}

    out = {'torch_version': torch.__version__, 'cases': cases, 'primitives': primitives}
    with open(os.path.join(HERE, 'observers.json'), 'w') as f:
        json.dump(out, f, separators=(',', ':'))
        f.write('\n')
    print(f'{len(cases)} cases → observers.json')


if __name__ == '__main__':
    main()
