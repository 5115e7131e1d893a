/**
 * From an observed range to qparams: torch 1.13's UniformQuantizationObserverBase
 * ._calculate_qparams, every operation in float32 in torch's order.
 *
 *   affine      scale = max(eps, (max(hi, 0) - min(lo, 0)) / (qmax - qmin))
 *               zp    = clamp(qmin - round(min(lo, 0) / scale), qmin, qmax)
 *   symmetric   scale = max(eps, max(-min(lo, 0), max(hi, 0)) / ((qmax - qmin) / 2))
 *               zp    = 0, or for quint8 128 (a custom range: floor((qmin + qmax) / 2))
 *   float_qparams  scale = (hi - lo) / (qmax - qmin), 1 where not above eps;  zp = -lo / scale
 *
 * An observer that has seen nothing gives scale 1, zero point 0, as torch. Where torch would
 * assert (a NaN was observed) or return an infinite scale (an infinity was observed), quantd
 * refuses with OBSERVED_RANGE_INVALID: no quantize op accepts such qparams.
 */
import { QuantdError } from '../../errors/index.js';
import { unitQParams } from '../qparams.js';
import { isSymmetric, type ObserverConfig } from './config.js';

export interface ObserverQParams {
  readonly scale: Float32Array;
  /** int32, or float32 for per_channel_affine_float_qparams */
  readonly zeroPoint: Int32Array | Float32Array;
}

export const UNOBSERVED_QPARAMS: ObserverQParams = Object.freeze({
  scale: Float32Array.of(1),
  zeroPoint: Int32Array.of(0),
});

function rangeInvalid(config: ObserverConfig, detail: string): QuantdError {
  return new QuantdError('OBSERVED_RANGE_INVALID', { observer: config.kind, detail });
}

function symmetricZeroPoint(config: ObserverConfig): number {
  if (config.dtype !== 'quint8') return 0;
  return config.customRange ? Math.floor((config.quantMin + config.quantMax) / 2) : 128;
}

/** qparams for the running ranges `lo[c]`..`hi[c]` (one entry per tensor, or per channel). */
export function calculateQParams(
  config: ObserverConfig,
  lo: Float32Array,
  hi: Float32Array,
): ObserverQParams {
  const n = lo.length;
  if (n === 0) return UNOBSERVED_QPARAMS;
  if (n === 1 && lo[0] === Infinity && hi[0] === -Infinity) return UNOBSERVED_QPARAMS;
  for (let c = 0; c < n; c++) {
    if (!(lo[c]! <= hi[c]!)) {
      const where = n === 1 ? '' : ` of channel ${c}`;
      throw rangeInvalid(
        config,
        `the observed range${where} is [${lo[c]}, ${hi[c]}]: a NaN was observed; reset the observer`,
      );
    }
  }
  const { quantMin: qmin, quantMax: qmax, eps, qscheme } = config;
  const scale = new Float32Array(n);
  const floatZp = qscheme === 'per_channel_affine_float_qparams';
  const zeroPoint = floatZp ? new Float32Array(n) : new Int32Array(n);
  const mode = floatZp ? 'float_qparams' : isSymmetric(qscheme) ? 'symmetric' : 'affine';
  const symZp = symmetricZeroPoint(config);
  for (let c = 0; c < n; c++) {
    const [s, zp] = unitQParams(lo[c]!, hi[c]!, mode, qmin, qmax, eps, symZp);
    if (!Number.isFinite(s) || !Number.isFinite(zp)) {
      const where = n === 1 ? '' : ` of channel ${c}`;
      throw rangeInvalid(
        config,
        `the observed range${where} is [${lo[c]}, ${hi[c]}]: an infinity was observed, the scale is not finite; reset the observer`,
      );
    }
    scale[c] = s;
    zeroPoint[c] = zp;
  }
  return { scale, zeroPoint };
}
