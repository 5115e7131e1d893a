/**
 * The TypeScript reference of a tensor op, as a task a worker can run: ops the kernels do not
 * cover (torch's greedy range search) and the second run that gives a rejected input its exact
 * error are whole-tensor TypeScript work, which must not run on the server's event loop.
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
import {
  finishHistogram,
  observeBatch,
  type HistogramStep,
  type ObserverConfig,
  type ObserverQParams,
  type ObserverState,
} from '../core/observers/index.js';
import { isQuantdError, type ErrorCode, type ErrorParams } from '../errors/index.js';
import { linearErrorReport, type LinearErrorReport, type LinearLayer } from '../core/linear-eval.js';
import { accumulateLinearStats, type LinearStats } from '../core/linear-stats.js';
import { qparamsOrError, type LinearStatsCall, type QParamsCall } from '../core/compute.js';
import type { KernelModule } from './module.js';

export type ReferenceCall =
  | {
      readonly kind: 'quantize';
      readonly input: FloatInput;
      readonly spec: QuantSpec;
      readonly given?: QParams;
    }
  | {
      readonly kind: 'chooseQParams';
      readonly input: FloatInput;
      readonly spec: QuantSpec;
      readonly given?: QParams;
    }
  | {
      readonly kind: 'fakeQuantize';
      readonly input: FloatInput;
      readonly spec: QuantSpec;
      readonly outDType: FloatDType;
      readonly given?: QParams;
    }
  | { readonly kind: 'dequantize'; readonly input: QuantizedInput; readonly outDType: FloatDType }
  | {
      readonly kind: 'observe';
      readonly config: ObserverConfig;
      readonly state: ObserverState;
      readonly x: Float32Array;
      readonly shape: readonly number[];
    }
  | {
      /** a histogram batch's counts merged into the state (bins · upsample_rate cells walked) */
      readonly kind: 'finishHistogram';
      readonly config: ObserverConfig;
      readonly state: ObserverState;
      readonly step: HistogramStep;
      readonly counts: Float32Array;
    }
  | { readonly kind: 'observerQParams'; readonly observers: readonly QParamsCall[] }
  | { readonly kind: 'linearError'; readonly layer: LinearLayer; readonly spec: QuantSpec }
  | ({ readonly kind: 'linearStats' } & LinearStatsCall);

/**
 * One observer's qparams, or the catalogued error it refused them with (as code and parameters:
 * an error object loses its code crossing threads), so that one bad observer among many is named.
 */
export type QParamsOutcome =
  | { readonly ok: true; readonly qparams: ObserverQParams }
  | { readonly ok: false; readonly code: ErrorCode; readonly params: ErrorParams };

/** What each call returns. */
export interface ReferenceResults {
  quantize: QuantizeOutput;
  chooseQParams: QParams;
  fakeQuantize: FakeQuantizeOutput;
  dequantize: Uint8Array;
  observe: ObserverState;
  finishHistogram: ObserverState;
  observerQParams: QParamsOutcome[];
  linearError: LinearErrorReport;
  linearStats: LinearStats;
}

export interface ReferenceTask {
  readonly op: 'reference';
  readonly call: ReferenceCall;
}

/** `module`: the worker's kernels, for the ops that have one beside their TypeScript. */
export function runReferenceTask(
  call: ReferenceCall,
  module: KernelModule | null = null,
): ReferenceResults[ReferenceCall['kind']] {
  switch (call.kind) {
    case 'quantize':
      return quantizeTensor(call.input, call.spec, call.given);
    case 'chooseQParams':
      return chooseTensorQParams(call.input, call.spec, call.given);
    case 'fakeQuantize':
      return fakeQuantizeTensor(call.input, call.spec, call.outDType, call.given);
    case 'dequantize':
      return dequantizeTensor(call.input, call.outDType);
    case 'observe':
      return observeBatch(call.config, call.state, call.x, call.shape);
    case 'finishHistogram': {
      const state = { lo: call.state.lo, hi: call.state.hi, histogram: call.state.histogram! };
      finishHistogram(call.config, state, call.step, call.counts);
      return { ...state, observed: call.state.observed };
    }
    case 'observerQParams':
      return call.observers.map((o): QParamsOutcome => {
        const r = qparamsOrError(o);
        return isQuantdError(r) ? { ok: false, code: r.code, params: r.params } : { ok: true, qparams: r };
      });
    case 'linearError':
      return linearErrorReport(call.layer, call.spec, module?.linearOutputs);
    case 'linearStats':
      return accumulateLinearStats(call.tensor, call.stats, call.x, call.shape);
  }
}
