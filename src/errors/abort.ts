import { QuantdError } from './quantd-error.js';

/**
 * Throws why `signal` was aborted: its reason when that is a QuantdError (REQUEST_TIMEOUT, the
 * client gone, shutdown), else CANCELLED. Long loops call it between units of work.
 */
export function throwIfAborted(signal: AbortSignal | undefined): void {
  if (!signal?.aborted) return;
  const reason: unknown = signal.reason;
  throw reason instanceof QuantdError ? reason : new QuantdError('CANCELLED', { detail: '' });
}
