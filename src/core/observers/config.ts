/**
 * Observer options as users write them (torch 1.13's constructor arguments, snake_case) and the
 * validated configuration the observers run on. Defaults are torch's; torch's quirks are kept
 * where they change numbers (a custom range is halved by reduce_range; quint8's symmetric zero
 * point is 128, or the down-rounded midpoint of a custom range; quint4x2's is 0).
 */
import { QuantdError } from '../../errors/index.js';
import { FLOAT32_EPS, fround } from '../rounding.js';

export const OBSERVER_KINDS = [
  'min_max',
  'moving_average_min_max',
  'per_channel_min_max',
  'moving_average_per_channel_min_max',
  'histogram',
  'fixed_qparams',
] as const;
export type ObserverKind = (typeof OBSERVER_KINDS)[number];

export const OBSERVER_DTYPES = ['quint8', 'qint8', 'quint4x2', 'qint32'] as const;
export type ObserverDtype = (typeof OBSERVER_DTYPES)[number];

export const QSCHEMES = [
  'per_tensor_affine',
  'per_tensor_symmetric',
  'per_channel_affine',
  'per_channel_symmetric',
  'per_channel_affine_float_qparams',
] as const;
export type QScheme = (typeof QSCHEMES)[number];

/** What a request or a recipe says (JSON). */
export interface ObserverOptions {
  readonly kind: string;
  readonly dtype?: string;
  readonly qscheme?: string;
  readonly reduce_range?: boolean;
  readonly quant_min?: number;
  readonly quant_max?: number;
  readonly eps?: number;
  readonly averaging_constant?: number;
  readonly ch_axis?: number;
  readonly bins?: number;
  readonly upsample_rate?: number;
  readonly scale?: number;
  readonly zero_point?: number;
}

export interface ObserverConfig {
  /** The options this was made from, as given (what an exported state records). */
  readonly options: ObserverOptions;
  readonly kind: ObserverKind;
  readonly dtype: ObserverDtype;
  readonly qscheme: QScheme;
  readonly reduceRange: boolean;
  /** The range in effect (after reduce_range). */
  readonly quantMin: number;
  readonly quantMax: number;
  readonly customRange: boolean;
  /** float32 */
  readonly eps: number;
  /** float32, as torch's kernels use it */
  readonly averagingConstant: number;
  readonly chAxis: number;
  readonly bins: number;
  readonly upsampleRate: number;
  /** fixed_qparams only */
  readonly fixedScale: number;
  readonly fixedZeroPoint: number;
}

/** Storage bounds of each dtype (a custom range must fit them). */
const DTYPE_BOUNDS: Record<ObserverDtype, readonly [number, number]> = {
  quint8: [0, 255],
  qint8: [-128, 127],
  quint4x2: [0, 15],
  qint32: [-(2 ** 31), 2 ** 31 - 1],
};
/** torch's default ranges, and with reduce_range. */
const DEFAULT_RANGE: Record<ObserverDtype, readonly [number, number, number, number]> = {
  quint8: [0, 255, 0, 127],
  qint8: [-128, 127, -64, 63],
  quint4x2: [0, 15, 0, 15],
  qint32: [-(2 ** 31), 2 ** 31 - 1, -(2 ** 31), 2 ** 31 - 1],
};
export const MAX_HISTOGRAM_BINS = 1 << 20;
const MAX_UPSAMPLE_RATE = 1 << 12;

/** The options each kind takes: torch's constructor arguments of its class. */
const COMMON_OPTIONS = ['kind', 'dtype', 'qscheme', 'reduce_range', 'quant_min', 'quant_max', 'eps'];
const KIND_OPTIONS: Record<ObserverKind, ReadonlySet<string>> = {
  min_max: new Set(COMMON_OPTIONS),
  moving_average_min_max: new Set([...COMMON_OPTIONS, 'averaging_constant']),
  per_channel_min_max: new Set([...COMMON_OPTIONS, 'ch_axis']),
  moving_average_per_channel_min_max: new Set([...COMMON_OPTIONS, 'averaging_constant', 'ch_axis']),
  histogram: new Set([...COMMON_OPTIONS, 'bins', 'upsample_rate']),
  fixed_qparams: new Set(['kind', 'scale', 'zero_point', 'dtype', 'qscheme', 'quant_min', 'quant_max']),
};

export const isPerChannelKind = (kind: ObserverKind): boolean =>
  kind === 'per_channel_min_max' || kind === 'moving_average_per_channel_min_max';
export const isSymmetric = (q: QScheme): boolean =>
  q === 'per_tensor_symmetric' || q === 'per_channel_symmetric';

function invalid(observer: string, detail: string): QuantdError {
  return new QuantdError('OBSERVER_INVALID', { observer, detail });
}

function oneOf<T extends string>(observer: string, name: string, value: unknown, allowed: readonly T[]): T {
  if (typeof value !== 'string' || !(allowed as readonly string[]).includes(value)) {
    throw invalid(observer, `${name} must be one of ${allowed.join(', ')} (got ${JSON.stringify(value)})`);
  }
  return value as T;
}

function integer(observer: string, name: string, value: unknown, lo: number, hi: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < lo || value > hi) {
    throw invalid(observer, `${name} must be an integer in [${lo}, ${hi}] (got ${JSON.stringify(value)})`);
  }
  return value;
}

function positive(observer: string, name: string, value: unknown, max = Infinity): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || !(value > 0) || value > max) {
    throw invalid(observer, `${name} must be a finite number in (0, ${max}] (got ${JSON.stringify(value)})`);
  }
  return value;
}

/** Validates options and fills in torch's defaults. */
export function observerConfig(options: ObserverOptions): ObserverConfig {
  if (options === null || typeof options !== 'object') throw invalid('?', 'options must be a JSON object');
  const kind = oneOf('?', 'kind', options.kind, OBSERVER_KINDS);
  const takes = KIND_OPTIONS[kind];
  for (const key of Object.keys(options)) {
    if (!takes.has(key)) {
      throw invalid(kind, `${kind} takes no option ${key} (it takes: ${[...takes].join(', ')})`);
    }
  }
  const perChannel = isPerChannelKind(kind);
  const dtype = oneOf(kind, 'dtype', options.dtype ?? 'quint8', OBSERVER_DTYPES);
  const qscheme = oneOf(
    kind,
    'qscheme',
    options.qscheme ?? (perChannel ? 'per_channel_affine' : 'per_tensor_affine'),
    QSCHEMES,
  );
  if (perChannel !== qscheme.startsWith('per_channel')) {
    throw invalid(
      kind,
      `qscheme ${qscheme} does not fit a ${perChannel ? 'per-channel' : 'per-tensor'} observer`,
    );
  }
  const reduceRange = options.reduce_range ?? false;
  if (typeof reduceRange !== 'boolean') throw invalid(kind, 'reduce_range must be true or false');
  if (isSymmetric(qscheme) && reduceRange && dtype === 'quint8') {
    throw invalid(kind, 'reduce_range with a symmetric qscheme is not defined for quint8 (as torch)');
  }

  const [lo, hi] = DTYPE_BOUNDS[dtype];
  const fixed = kind === 'fixed_qparams';
  // fixed_qparams defaults to [0, 255] like torch's FixedQParamsObserver
  const givenMin = options.quant_min ?? (fixed ? 0 : undefined);
  const givenMax = options.quant_max ?? (fixed ? 255 : undefined);
  if ((givenMin === undefined) !== (givenMax === undefined)) {
    throw invalid(kind, 'quant_min and quant_max go together');
  }
  const customRange = givenMin !== undefined;
  let quantMin: number;
  let quantMax: number;
  if (customRange) {
    quantMin = integer(kind, 'quant_min', givenMin, lo, hi);
    quantMax = integer(kind, 'quant_max', givenMax, lo, hi);
    if (!(quantMin <= 0 && 0 <= quantMax) || !(quantMin < quantMax)) {
      throw invalid(
        kind,
        `[quant_min, quant_max] must contain 0 and hold two values (got [${quantMin}, ${quantMax}])`,
      );
    }
    if (reduceRange && !fixed) {
      quantMin = Math.floor(quantMin / 2);
      quantMax = Math.floor(quantMax / 2);
    }
  } else {
    const d = DEFAULT_RANGE[dtype];
    quantMin = reduceRange ? d[2] : d[0];
    quantMax = reduceRange ? d[3] : d[1];
  }

  const eps = fround(options.eps === undefined ? FLOAT32_EPS : positive(kind, 'eps', options.eps));
  if (!(eps > 0) || !Number.isFinite(eps))
    throw invalid(kind, `eps ${options.eps} is not a positive float32`);
  const moving = kind === 'moving_average_min_max' || kind === 'moving_average_per_channel_min_max';
  const averagingConstant = fround(
    moving && options.averaging_constant !== undefined
      ? positive(kind, 'averaging_constant', options.averaging_constant, 1)
      : 0.01,
  );
  const chAxis =
    perChannel && options.ch_axis !== undefined ? integer(kind, 'ch_axis', options.ch_axis, -64, 63) : 0;
  const bins = options.bins !== undefined ? integer(kind, 'bins', options.bins, 1, MAX_HISTOGRAM_BINS) : 2048;
  const upsampleRate =
    options.upsample_rate !== undefined
      ? integer(kind, 'upsample_rate', options.upsample_rate, 1, MAX_UPSAMPLE_RATE)
      : 128;
  let fixedScale = 1;
  let fixedZeroPoint = 0;
  if (fixed) {
    if (options.scale === undefined || options.zero_point === undefined) {
      throw invalid(kind, 'fixed_qparams needs scale and zero_point');
    }
    fixedScale = fround(positive(kind, 'scale', options.scale));
    if (!(fixedScale > 0) || !Number.isFinite(fixedScale))
      throw invalid(kind, 'scale is not a positive float32');
    fixedZeroPoint = integer(kind, 'zero_point', options.zero_point, quantMin, quantMax);
  }
  return {
    options: { ...options },
    kind,
    dtype,
    qscheme,
    reduceRange,
    quantMin,
    quantMax,
    customRange,
    eps,
    averagingConstant,
    chAxis,
    bins,
    upsampleRate,
    fixedScale,
    fixedZeroPoint,
  };
}
