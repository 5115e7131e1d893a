/**
 * Carries out a plan: reads each input tensor once, runs its step on a Compute, and writes the
 * outputs in plan order. One tensor is in flight at a time, so memory stays bounded by the
 * largest tensor whatever the file size.
 */
import { bytesOf, typedView, type QParams } from '../core/index.js';
import { QuantdError } from '../errors/index.js';
import type { TensorEntry } from '../format/index.js';
import type { Compute } from './compute.js';
import { toQParams, type GivenData, type GivenEntries } from './given-qparams.js';
import type { Plan, Step } from './plan.js';

export interface TensorSource {
  /** The bytes of one tensor; in a SharedArrayBuffer when `shared` (the kernels' threads read them). */
  read(entry: TensorEntry, shared?: boolean): Promise<Uint8Array>;
}

export interface TensorSink {
  write(name: string, data: Uint8Array): Promise<void>;
}

export interface StepReport {
  readonly name: string;
  readonly kind: Step['kind'];
  readonly bytesIn: number;
  readonly bytesOut: number;
}

export interface RunSummary {
  readonly transformed: number;
  readonly passedThrough: number;
  readonly bytesIn: number;
  readonly bytesOut: number;
}

async function readGiven(source: TensorSource, given: GivenEntries | undefined): Promise<GivenData> {
  if (!given) return {};
  return {
    scale: given.scale && { entry: given.scale, data: await source.read(given.scale) },
    zeroPoint: given.zeroPoint && { entry: given.zeroPoint, data: await source.read(given.zeroPoint) },
  };
}

function qparamBytes(qp: QParams): Uint8Array[] {
  return [bytesOf(qp.scale), bytesOf(qp.zeroPoint)];
}

/** Runs one step and returns its outputs' bytes, in the order of step.outputs. */
async function runStep(
  step: Step,
  source: TensorSource,
  compute: Compute,
  plan: Plan,
  signal?: AbortSignal,
): Promise<Uint8Array[]> {
  const { spec, outDType } = plan.request;
  if (step.kind === 'copy') return [await source.read(step.entry)];
  if (step.kind === 'dequantize') {
    const g = step.group;
    const zpData = await source.read(g.zeroPoint);
    const qparams: QParams = {
      scale: typedView(Float32Array, await source.read(g.scale)),
      zeroPoint:
        g.zeroPoint.dtype === 'F32' ? typedView(Float32Array, zpData) : typedView(Int32Array, zpData),
    };
    const data = await source.read(g.codes, compute.sharedInputs);
    return [
      await compute.dequantize(
        { name: g.name, data, spec: g.spec, layout: g.layout, qparams },
        outDType,
        signal,
      ),
    ];
  }
  const name = step.entry.name;
  const givenData = await readGiven(source, step.given);
  const given = step.given ? toQParams(name, givenData, spec, step.layout) : undefined;
  const data = await source.read(step.entry, compute.sharedInputs);
  const input = { name, dtype: step.dtype, data, layout: step.layout };
  switch (step.kind) {
    case 'quantize': {
      const out = await compute.quantize(input, spec, given, signal);
      return [out.data, ...qparamBytes(out.qparams)];
    }
    case 'qparams':
      return qparamBytes(await compute.chooseQParams(input, spec, given, signal));
    case 'fake-quantize': {
      const out = await compute.fakeQuantize(input, spec, outDType, given, signal);
      return [out.data, out.mask];
    }
  }
}

function inputBytes(step: Step): number {
  if (step.kind === 'dequantize') {
    const g = step.group;
    return [g.codes, g.scale, g.zeroPoint].reduce((n, e) => n + e.end - e.begin, 0);
  }
  return step.entry.end - step.entry.begin;
}

export interface ExecuteOptions {
  readonly onStep?: (report: StepReport) => void;
  /** Aborts the run between steps and inside kernel tasks (client gone, timeout, shutdown). */
  readonly signal?: AbortSignal | undefined;
  /** The sink copies or writes out what it is given (a file): outputs go back to the compute. */
  readonly releaseOutputs?: boolean;
}

/** A signal's reason when it is a QuantdError (timeout, cancellation), else CANCELLED. */
export function throwIfAborted(signal: AbortSignal | undefined): void {
  if (!signal?.aborted) return;
  const reason: unknown = signal.reason;
  throw reason instanceof QuantdError ? reason : new QuantdError('CANCELLED', { detail: '' });
}

export async function executePlan(
  plan: Plan,
  source: TensorSource,
  sink: TensorSink,
  compute: Compute,
  options: ExecuteOptions = {},
): Promise<RunSummary> {
  let transformed = 0;
  let passedThrough = 0;
  let bytesIn = 0;
  let bytesOut = 0;
  for (const step of plan.steps) {
    throwIfAborted(options.signal);
    const outputs = await runStep(step, source, compute, plan, options.signal);
    let written = 0;
    for (let i = 0; i < outputs.length; i++) {
      await sink.write(step.outputs[i]!.name, outputs[i]!);
      written += outputs[i]!.byteLength;
      if (options.releaseOutputs && step.kind !== 'copy') compute.release?.(outputs[i]!);
    }
    const read = inputBytes(step);
    if (step.kind === 'copy') passedThrough++;
    else transformed++;
    bytesIn += read;
    bytesOut += written;
    const name = step.kind === 'dequantize' ? step.group.name : step.entry.name;
    options.onStep?.({ name, kind: step.kind, bytesIn: read, bytesOut: written });
  }
  return { transformed, passedThrough, bytesIn, bytesOut };
}
