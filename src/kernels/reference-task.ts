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
import { observeBatch, type ObserverConfig, type ObserverState } from '../core/observers/index.js';
import { linearErrorReport, type LinearErrorReport, type LinearLayer } from '../core/linear-eval.js';
import { accumulateLinearStats, type LinearStats } from '../core/linear-stats.js';
import type { LinearStatsCall } from '../core/compute.js';
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
  | { readonly kind: 'linearError'; readonly layer: LinearLayer; readonly spec: QuantSpec }
  | ({ readonly kind: 'linearStats' } & LinearStatsCall);

/** What each call returns. */
export interface ReferenceResults {
  quantize: QuantizeOutput;
  chooseQParams: QParams;
  fakeQuantize: FakeQuantizeOutput;
  dequantize: Uint8Array;
  observe: ObserverState;
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
    case 'linearError':
      return linearErrorReport(call.layer, call.spec, module?.linearOutputs);
    case 'linearStats':
      return accumulateLinearStats(call.tensor, call.stats, call.x, call.shape);
  }
}
