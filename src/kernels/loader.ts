/**
 * Chooses the kernel backend once: native → wasm → js (the TypeScript reference), or the one
 * QUANTD_BACKEND names. The choice and, when native was passed over, the one-line reason are
 * reported to the caller, who logs them (and /healthz shows them).
 */
import { QuantdError } from '../errors/index.js';
import type { KernelModule } from './module.js';
import { KernelLoadError, loadNative } from './native.js';
import { loadWasm } from './wasm.js';

export const BACKENDS = ['native', 'wasm', 'js'] as const;
export type BackendName = (typeof BACKENDS)[number];

export interface LoadedKernels {
  readonly backend: BackendName;
  /** Instruction set: avx512, avx2, simd128, scalar; "ts" for the reference. */
  readonly isa: string;
  /** null for the TypeScript reference. */
  readonly module: KernelModule | null;
  /** Why faster backends were passed over (empty when the first choice loaded). */
  readonly fallbacks: readonly string[];
}

function attempt(name: 'native' | 'wasm', isa: string): KernelModule {
  return name === 'native' ? loadNative(isa) : loadWasm(isa);
}

/**
 * Loads the backend `requested` (QUANTD_BACKEND: native, wasm, js, or auto) with the given ISA
 * (QUANTD_ISA: avx512, avx2, simd128, scalar; default the best supported).
 */
export function loadKernels(
  requested: string | undefined = process.env['QUANTD_BACKEND'],
  isa: string = process.env['QUANTD_ISA'] ?? '',
): LoadedKernels {
  const choice = (requested ?? '').trim() || 'auto';
  if (choice === 'js') return { backend: 'js', isa: 'ts', module: null, fallbacks: [] };
  if (choice === 'native' || choice === 'wasm') {
    try {
      const module = attempt(choice, isa);
      return { backend: choice, isa: module.isa, module, fallbacks: [] };
    } catch (err) {
      throw new QuantdError('BACKEND_UNAVAILABLE', { backend: choice, reason: (err as Error).message });
    }
  }
  if (choice !== 'auto') {
    throw new QuantdError('BACKEND_UNAVAILABLE', {
      backend: choice,
      reason: 'QUANTD_BACKEND must be native, wasm, js or auto',
    });
  }
  const fallbacks: string[] = [];
  // an x86 ISA asked for by name is native's: not having it is an error, not a reason to run
  // the (slower) wasm build instead
  const nativeOnly = isa !== '' && isa !== 'simd128' && isa !== 'scalar';
  for (const name of ['native', 'wasm'] as const) {
    try {
      const module = attempt(name, name === 'native' || !nativeOnly ? isa : '');
      return { backend: name, isa: module.isa, module, fallbacks };
    } catch (err) {
      if (!(err instanceof KernelLoadError)) throw err;
      if (nativeOnly) {
        throw new QuantdError('BACKEND_UNAVAILABLE', {
          backend: 'native',
          reason: `QUANTD_ISA=${isa} was asked for: ${err.message}`,
        });
      }
      fallbacks.push(`${name}: ${err.message}`);
    }
  }
  return { backend: 'js', isa: 'ts', module: null, fallbacks };
}

/** One line for logs: "kernels: native avx512" or "kernels: wasm simd128 (native: …)". */
export function describeKernels(k: LoadedKernels): string {
  const why = k.fallbacks.length ? ` (${k.fallbacks.join('; ')})` : '';
  return `kernels: ${k.backend} ${k.isa}${why}`;
}
