/**
 * Where the numerics run. The service describes work as tensor-level calls; a Compute carries
 * them out. The reference Compute calls the ops of this directory in the calling thread; the
 * kernels' Compute (src/kernels/tensor-ops.ts, on the worker pool) runs the same calls on native
 * or WebAssembly kernels. It lives in core so that the kernels implement it without importing
 * the service layer above them.
 */
import {
  chooseTensorQParams,
  dequantizeTensor,
  fakeQuantizeTensor,
  quantizeTensor,
  tensorQuality,
  type FakeQuantizeOutput,
  type FloatDType,
  type FloatInput,
  type QParams,
  type QuantSpec,
  type QuantizeOutput,
  type QuantizedInput,
} from './index.js';
import {
  observeBatch,
  observerQParams,
  type ObserverConfig,
  type ObserverQParams,
  type ObserverState,
} from './observers/index.js';
import { isQuantdError, type QuantdError } from '../errors/index.js';
import { linearErrorReport, type LinearErrorReport, type LinearLayer } from './linear-eval.js';
import { accumulateLinearStats, type LinearStats } from './linear-stats.js';

export interface QuantizeOptions {
  /** Also measure how well the codes represent the input (QuantizeOutput.quality). */
  readonly quality?: boolean;
}

/** `output` with its reference quality statistics when they were asked for. */
export function withReferenceQuality(
  input: FloatInput,
  spec: QuantSpec,
  output: QuantizeOutput,
  options: QuantizeOptions = {},
): QuantizeOutput {
  return options.quality ? { ...output, quality: tensorQuality(input, spec, output) } : output;
}

/** One activation batch for an observer (calibration). */
export interface ObserveCall {
  readonly config: ObserverConfig;
  readonly state: ObserverState;
  readonly x: Float32Array;
  readonly shape: readonly number[];
}

/** One observer whose qparams are asked for (calibration). */
export interface QParamsCall {
  readonly config: ObserverConfig;
  readonly state: ObserverState;
}

/** One activation batch for a layer's input statistics (calibration for GPTQ / AWQ). */
export interface LinearStatsCall {
  readonly tensor: string;
  readonly stats: LinearStats;
  readonly x: Float32Array;
  readonly shape: readonly number[];
}

export interface Compute {
  /** A short name for logs and /healthz: "js", "native", "wasm". */
  readonly backend: string;
  /** Whether inputs should come in SharedArrayBuffers (ops run on other threads). */
  readonly sharedInputs?: boolean;
  quantize(
    input: FloatInput,
    spec: QuantSpec,
    given?: QParams,
    signal?: AbortSignal,
    options?: QuantizeOptions,
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
  /** The observer's state after `call.x` (a new state; off the event loop where the Compute has threads). */
  observe?(call: ObserveCall, signal?: AbortSignal): Promise<ObserverState>;
  /**
   * Each observer's qparams, or the catalogued error it refuses them with (off the event loop
   * where the Compute has threads: a histogram's range search costs bins × search steps, about
   * 15 ms at 2048 bins).
   */
  observerQParams?(
    calls: readonly QParamsCall[],
    signal?: AbortSignal,
  ): Promise<(ObserverQParams | QuantdError)[]>;
  /** The statistics with the batch added (a new object; off the event loop where the Compute has threads). */
  accumulateStats?(call: LinearStatsCall, signal?: AbortSignal): Promise<LinearStats>;
  /** A linear layer's output error under quantization (off the event loop where the Compute has threads). */
  linearError?(layer: LinearLayer, spec: QuantSpec, signal?: AbortSignal): Promise<LinearErrorReport>;
  /** Hands back an output once its bytes are written out, so later outputs can reuse its memory. */
  release?(data: ArrayBufferView): void;
  /** A buffer for input bytes (recycled like outputs; hand it back with release). */
  allocate?(bytes: number, shared: boolean): Uint8Array;
}

/** The TypeScript reference, run in the calling thread: the oracle every backend must match. */
export const referenceCompute: Compute = {
  backend: 'js',
  quantize: async (input, spec, given, _signal, options) =>
    withReferenceQuality(input, spec, quantizeTensor(input, spec, given), options),
  chooseQParams: async (input, spec, given) => chooseTensorQParams(input, spec, given),
  fakeQuantize: async (input, spec, outDType, given) => fakeQuantizeTensor(input, spec, outDType, given),
  dequantize: async (input, outDType) => dequantizeTensor(input, outDType),
  observe: async ({ config, state, x, shape }) => observeBatch(config, state, x, shape),
  observerQParams: async (calls) => calls.map((c) => qparamsOrError(c)),
  linearError: async (layer, spec) => linearErrorReport(layer, spec),
  accumulateStats: async ({ tensor, stats, x, shape }) => accumulateLinearStats(tensor, stats, x, shape),
};

/** An observer's qparams, or the catalogued error it refuses them with (others are thrown). */
export function qparamsOrError({ config, state }: QParamsCall): ObserverQParams | QuantdError {
  try {
    return observerQParams(config, state);
  } catch (err) {
    if (isQuantdError(err)) return err;
    throw err;
  }
}
