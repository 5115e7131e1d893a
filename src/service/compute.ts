/**
 * Where the numerics run. The service describes work as tensor-level calls; a Compute carries
 * them out. The reference Compute calls src/core directly, in this thread; the worker-pool
 * Compute (kernels issue) runs the same calls on native or WebAssembly kernels.
 */
import {
  chooseTensorQParams,
  dequantizeTensor,
  fakeQuantizeTensor,
  quantizeTensor,
  type FakeQuantizeOutput,
  type FloatDType,
  type FloatInput,
  type QParams,
  type QuantSpec,
  type QuantizeOutput,
  type QuantizedInput,
} from '../core/index.js';

export interface Compute {
  /** A short name for logs and /healthz: "js", "native", "wasm", "cuda". */
  readonly backend: string;
  /** Whether inputs should come in SharedArrayBuffers (ops run on other threads). */
  readonly sharedInputs?: boolean;
  quantize(
    input: FloatInput,
    spec: QuantSpec,
    given?: QParams,
    signal?: AbortSignal,
  ): Promise<QuantizeOutput>;
  chooseQParams(input: FloatInput, spec: QuantSpec, given?: QParams, signal?: AbortSignal): Promise<QParams>;
  fakeQuantize(
    input: FloatInput,
    spec: QuantSpec,
    outDType: FloatDType,
    given?: QParams,
    signal?: AbortSignal,
  ): Promise<FakeQuantizeOutput>;
  dequantize(input: QuantizedInput, outDType: FloatDType, signal?: AbortSignal): Promise<Uint8Array>;
  /** Hands back an output once its bytes are written out, so later outputs can reuse its memory. */
  release?(data: ArrayBufferView): void;
}

/** The TypeScript reference, run in the calling thread: the oracle every backend must match. */
export const referenceCompute: Compute = {
  backend: 'js',
  quantize: async (input, spec, given) => quantizeTensor(input, spec, given),
  chooseQParams: async (input, spec, given) => chooseTensorQParams(input, spec, given),
  fakeQuantize: async (input, spec, outDType, given) => fakeQuantizeTensor(input, spec, outDType, given),
  dequantize: async (input, outDType) => dequantizeTensor(input, outDType),
};
