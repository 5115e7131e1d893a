/**
 * The export form of an observer (`quantd.observer/1`): its options and its state as JSON, the
 * float32 values as little-endian bit patterns in base64 (NaN and infinities kept exactly), so
 * that an import restores the observer bit for bit and a calibration can stop and resume.
 */
import { QuantdError } from '../errors/index.js';
import {
  newObserverState,
  observerConfig,
  type ObserverConfig,
  type ObserverOptions,
  type ObserverState,
} from '../core/observers/index.js';

export const OBSERVER_STATE_FORMAT = 'quantd.observer/1';

export interface ExportedObserver {
  readonly format: typeof OBSERVER_STATE_FORMAT;
  readonly observer: ObserverOptions;
  /** float32 little-endian, base64 (NaN and infinities kept bit for bit) */
  readonly min: string;
  readonly max: string;
  readonly histogram?: string;
  readonly observed: number;
}

const toBase64 = (a: Float32Array): string =>
  Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString('base64');

function fromBase64(field: string, text: unknown): Float32Array {
  if (typeof text !== 'string') throw stateInvalid(`${field} must be a base64 string`);
  const raw = Buffer.from(text, 'base64');
  if (raw.length % 4 !== 0) throw stateInvalid(`${field} is not whole float32 values`);
  const out = new Float32Array(raw.length / 4);
  new Uint8Array(out.buffer).set(raw);
  return out;
}

function stateInvalid(detail: string): QuantdError {
  return new QuantdError('OBSERVER_INVALID', { observer: 'state', detail });
}

export function exportObserver(config: ObserverConfig, state: ObserverState): ExportedObserver {
  return {
    format: OBSERVER_STATE_FORMAT,
    observer: config.options,
    min: toBase64(state.lo),
    max: toBase64(state.hi),
    ...(state.histogram ? { histogram: toBase64(state.histogram) } : {}),
    observed: state.observed,
  };
}

export function importObserver(exported: unknown): { config: ObserverConfig; state: ObserverState } {
  if (exported === null || typeof exported !== 'object') throw stateInvalid('must be a JSON object');
  const e = exported as Partial<ExportedObserver>;
  if (e.format !== OBSERVER_STATE_FORMAT) {
    throw stateInvalid(`format must be ${OBSERVER_STATE_FORMAT} (got ${JSON.stringify(e.format)})`);
  }
  const config = observerConfig(e.observer as ObserverOptions);
  const fresh = newObserverState(config);
  const lo = fromBase64('min', e.min);
  const hi = fromBase64('max', e.max);
  const perTensor = config.qscheme.startsWith('per_tensor');
  if (lo.length !== hi.length || (perTensor && lo.length !== 1)) {
    throw stateInvalid(
      `min and max hold ${lo.length} and ${hi.length} values; a ${config.qscheme} observer holds ${perTensor ? 1 : 'one per channel'}`,
    );
  }
  let histogram: Float32Array | null = null;
  if (fresh.histogram) {
    histogram = fromBase64('histogram', e.histogram);
    if (histogram.length !== config.bins) {
      throw stateInvalid(`histogram holds ${histogram.length} bins; the observer has ${config.bins}`);
    }
  }
  const observed = e.observed;
  if (typeof observed !== 'number' || !Number.isSafeInteger(observed) || observed < 0) {
    throw stateInvalid('observed must be a count of elements');
  }
  return { config, state: { lo, hi, histogram, observed } };
}
