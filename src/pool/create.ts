/** The Compute a process uses, from the kernels the loader picks (QUANTD_BACKEND / QUANTD_ISA). */
import type { Encoding } from '../kernels/encoders.js';
import { loadKernels, type LoadedKernels } from '../kernels/loader.js';
import { referenceCompute, type Compute } from '../core/compute.js';
import { PoolCompute, type PoolComputeOptions } from './pool-compute.js';
import { KernelPool } from './pool.js';

export interface ComputeHandle {
  readonly compute: Compute;
  readonly kernels: LoadedKernels;
  /** The pool-backed compute, when the kernels are native or wasm. */
  readonly pool: PoolCompute | null;
  /** Where layouts encode: the worker pool (started on first use), whatever the backend. */
  encoding(): Encoding;
  close(): Promise<void>;
}

export function createCompute(
  options: PoolComputeOptions & { backend?: string; isa?: string } = {},
): ComputeHandle {
  const kernels = loadKernels(options.backend, options.isa);
  if (kernels.module === null) {
    // the TypeScript reference: qtensor ops inline, layout encoders still on worker threads
    let workers: KernelPool | undefined;
    const pool = (): KernelPool =>
      (workers ??= new KernelPool({ ...options, backend: kernels.backend, isa: kernels.isa }));
    return {
      compute: referenceCompute,
      kernels,
      pool: null,
      encoding: () => pool().encoding(),
      close: async () => workers?.close(),
    };
  }
  const pool = new PoolCompute({ ...kernels, module: kernels.module }, options);
  return { compute: pool, kernels, pool, encoding: () => pool.encoding(), close: () => pool.close() };
}
