/**
 * fake_quantize (per tensor and per channel): quantize and dequantize in one step, plus the
 * mask of elements that fell inside [qmin, qmax] before clamping (the gradient mask of
 * torch.fake_quantize_per_tensor_affine / fake_quantize_per_channel_affine):
 *
 *   t    = round(x · inv) + zp              (int zero point;   float_qparams: round(x · inv + zp))
 *   out  = (clamp(t, qmin, qmax) - zp) · scale
 *   mask = qmin <= t <= qmax
 *
 * `out` is evaluated as torch's kernel does: the difference and the product in float64, one
 * rounding to float32 at the end. With an integer zero point and a grid narrower than 2^24 this
 * equals the float32 evaluation; with a float zero point (float_qparams) it does not, and
 * torch.fake_quantize_per_channel_affine is the reference.
 */
import { QuantdError } from '../errors/index.js';
import { QDTYPE_INFO } from './dtypes.js';
import type { Layout } from './layout.js';
import { notFinite, type QParams } from './qparams.js';
import { fround, rint } from './rounding.js';
import type { QuantSpec } from './spec.js';

export interface FakeQuantized {
  readonly out: Float32Array;
  /** 1 where the element was representable, 0 where it was clamped. */
  readonly mask: Uint8Array;
}

export function checkFakeQuantizable(spec: QuantSpec): void {
  if (spec.scheme !== 'per_tensor' && spec.scheme !== 'per_channel') {
    throw new QuantdError('FEATURE_UNSUPPORTED', {
      detail: `fake-quantize is defined per_tensor and per_channel (as torch); not ${spec.scheme}`,
    });
  }
  if (QDTYPE_INFO[spec.qdtype].float8) {
    throw new QuantdError('FEATURE_UNSUPPORTED', {
      detail: `fake-quantize works on integer grids; ${spec.qdtype} is not one`,
    });
  }
}

export function fakeQuantize(
  tensor: string,
  x: Float32Array,
  layout: Layout,
  spec: QuantSpec,
  qp: QParams,
): FakeQuantized {
  const grid = {
    quantMin: spec.quantMin,
    quantMax: spec.quantMax,
    floatZeroPoint: spec.mode === 'float_qparams',
  };
  return fakeQuantizeOnGrid(tensor, x, layout, grid, qp);
}

/** The integer grid fake-quantize rounds to (an observer's range, or a spec's). */
export interface FakeQuantGrid {
  readonly quantMin: number;
  readonly quantMax: number;
  /** round(x · inv + zp) with a float zero point, instead of round(x · inv) + zp */
  readonly floatZeroPoint: boolean;
}

export function fakeQuantizeOnGrid(
  tensor: string,
  x: Float32Array,
  layout: Pick<Layout, 'numel' | 'outer' | 'channels' | 'inner'>,
  grid: FakeQuantGrid,
  qp: QParams,
): FakeQuantized {
  const out = new Float32Array(layout.numel);
  const mask = new Uint8Array(layout.numel);
  const { outer, channels, inner } = layout;
  const { quantMin: qmin, quantMax: qmax, floatZeroPoint: floatZp } = grid;
  let i = 0;
  for (let o = 0; o < outer; o++) {
    for (let c = 0; c < channels; c++) {
      const scale = qp.scale[c]!;
      const inv = fround(1 / scale);
      const zp = fround(qp.zeroPoint[c]!);
      const end = i + inner;
      for (; i < end; i++) {
        const v = x[i]!;
        if (v !== v) throw notFinite(tensor, v, i, 'fake-quantize');
        const t = floatZp ? rint(fround(fround(v * inv) + zp)) : fround(rint(fround(v * inv)) + zp);
        const inside = t >= qmin && t <= qmax;
        const clamped = inside ? t : t < qmin ? qmin : qmax;
        out[i] = fround((clamped - zp) * scale);
        mask[i] = inside ? 1 : 0;
      }
    }
  }
  return { out, mask };
}
