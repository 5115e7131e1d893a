/**
 * What every request goes through whatever its transport (HTTP /v1 and /v2, the gRPC Quantizer,
 * Jobs and inference services): admission before any input is read — refused while the server
 * drains (SHUTTING_DOWN) or is full (OVERLOADED) — and one signal that ends the work when the
 * request's deadline passes (REQUEST_TIMEOUT) or its client goes away (CANCELLED). A transport
 * adds only its wire: where the credentials and the body come from, how a result and a
 * QuantdError are written. Adding a transport reuses these.
 */
import { QuantdError } from '../errors/index.js';
import type { Admission, Slot } from './admission.js';

/** The server's side of admission: its slots, and whether it takes work (not draining). */
export interface RequestGate {
  readonly admission: Admission;
  readonly isReady: () => boolean;
}

/**
 * Admits one request, or throws SHUTTING_DOWN / OVERLOADED; returns its slot (calling it releases
 * the slot, idempotently; `charge` counts the bytes it will hold against the memory budget).
 */
export function admitRequest(gate: RequestGate): Slot {
  if (!gate.isReady()) throw new QuantdError('SHUTTING_DOWN', {});
  return gate.admission.acquire();
}

export interface RequestDeadline {
  /** Aborted by the deadline (REQUEST_TIMEOUT) or by gone(); its reason says which. */
  readonly signal: AbortSignal;
  /** The client went away before the answer: the work stops (CANCELLED, `why` in the detail). */
  gone(why: string): void;
  /** The work is done: the deadline no longer applies. */
  stop(): void;
}

/** A request's deadline of `timeoutMs` (QUANTD_REQUEST_TIMEOUT_MS) and cancellation. */
export function requestDeadline(timeoutMs: number): RequestDeadline {
  const controller = new AbortController();
  const timer = setTimeout(
    () => controller.abort(new QuantdError('REQUEST_TIMEOUT', { ms: timeoutMs })),
    timeoutMs,
  );
  timer.unref();
  const stop = (): void => clearTimeout(timer);
  return {
    signal: controller.signal,
    gone: (why) => {
      stop();
      controller.abort(new QuantdError('CANCELLED', { detail: `: ${why}` }));
    },
    stop,
  };
}
