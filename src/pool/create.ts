/** The Compute a process uses, from the kernels the loader picks (QUANTD_BACKEND / QUANTD_ISA). */
import { loadKernels, type LoadedKernels } from '../kernels/loader.js';
import { referenceCompute, type Compute } from '../service/compute.js';
import { PoolCompute, type PoolComputeOptions } from './pool-compute.js';

export interface ComputeHandle {
  readonly compute: Compute;
  readonly kernels: LoadedKernels;
  /** The pool-backed compute, when the kernels are native or wasm. */
  readonly pool: PoolCompute | null;
  close(): Promise<void>;
}

export function createCompute(
  options: PoolComputeOptions & { backend?: string; isa?: string } = {},
): ComputeHandle {
  const kernels = loadKernels(options.backend, options.isa);
  if (kernels.module === null) {
    return { compute: referenceCompute, kernels, pool: null, close: async () => {} };
  }
  const pool = new PoolCompute({ ...kernels, module: kernels.module }, options);
  return { compute: pool, kernels, pool, close: () => pool.close() };
}
