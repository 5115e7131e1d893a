/**
 * The Compute a job runs on: the server's, but patient. The worker pool refuses an operation at
 * once (OVERLOADED) when it is full, which is right for a request a client can retry, and wrong
 * for a background job that may have run for an hour: a job's operation waits and tries again
 * instead (the pool refuses before anything is sent to a worker, so the input is intact), until
 * it is admitted or the job is cancelled.
 */
import { QuantdError } from '../errors/index.js';
import type { Encoding } from '../kernels/encoders.js';
import type { Compute } from '../service/index.js';

const FIRST_WAIT_MS = 10;
const LONGEST_WAIT_MS = 500;

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason as Error);
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal!.reason as Error);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

async function patiently<T>(signal: AbortSignal | undefined, op: () => Promise<T>): Promise<T> {
  for (let wait = FIRST_WAIT_MS; ; wait = Math.min(LONGEST_WAIT_MS, wait * 2)) {
    try {
      return await op();
    } catch (err) {
      if (!(err instanceof QuantdError) || err.code !== 'OVERLOADED' || signal?.aborted) throw err;
    }
    await sleep(wait, signal);
  }
}

export function patientCompute(compute: Compute): Compute {
  const patient: Compute = {
    backend: compute.backend,
    quantize: (input, spec, given, signal, options) =>
      patiently(signal, () => compute.quantize(input, spec, given, signal, options)),
    chooseQParams: (input, spec, given, signal) =>
      patiently(signal, () => compute.chooseQParams(input, spec, given, signal)),
    fakeQuantize: (input, spec, outDType, given, signal) =>
      patiently(signal, () => compute.fakeQuantize(input, spec, outDType, given, signal)),
    dequantize: (input, outDType, signal) =>
      patiently(signal, () => compute.dequantize(input, outDType, signal)),
  };
  return Object.assign(
    patient,
    compute.sharedInputs !== undefined && { sharedInputs: compute.sharedInputs },
    compute.release && { release: compute.release.bind(compute) },
    compute.allocate && { allocate: compute.allocate.bind(compute) },
  );
}

/** A layout's encode tasks, waiting out a full pool as patientCompute's operations do. */
export function patientEncoding(encoding: Encoding): Encoding {
  return {
    parallelism: encoding.parallelism,
    shared: encoding.shared,
    kernels: encoding.kernels,
    encode: (task, signal) => patiently(signal, () => encoding.encode(task, signal)),
  };
}
