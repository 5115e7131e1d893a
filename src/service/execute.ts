/**
 * Carries out a plan: reads each input tensor once, runs its step on a Compute, and writes the
 * outputs in plan order. Steps may run concurrently, within a byte budget, so memory stays
 * bounded by the budget (or the largest step) whatever the file size.
 */
import {
  ST_DTYPE_SIZE,
  bytesOf,
  histogramOf,
  numelOf,
  sampledQuantizeErrors,
  typedView,
  type ErrorHistogram,
  type QParams,
  type QualityStats,
} from '../core/index.js';
import { throwIfAborted } from '../errors/index.js';
import type { TensorEntry, TensorPlan } from '../format/index.js';
import type { Compute } from './compute.js';
import { toQParams, type GivenData, type GivenEntries } from './given-qparams.js';
import { runInOrder } from './ordered.js';
import type { Plan, Step } from './plan.js';

export { throwIfAborted };

export interface TensorSource {
  /**
   * The bytes of one tensor; in a SharedArrayBuffer when `shared` (the kernels' threads read them),
   * in a buffer from `allocate` when given (recycled by the caller).
   */
  read(entry: TensorEntry, shared?: boolean, allocate?: Allocate): Promise<Uint8Array>;
}

export type Allocate = (bytes: number, shared: boolean) => Uint8Array;

export interface TensorSink {
  write(name: string, data: Uint8Array): Promise<void>;
}

export interface StepReport {
  readonly step: Step;
  readonly name: string;
  readonly kind: Step['kind'];
  readonly bytesIn: number;
  readonly bytesOut: number;
  /** quantize steps run with ExecuteOptions.quality: how well the codes represent the input. */
  readonly quality?: QualityStats;
  /** With quality: the distribution of the error on a sample of the tensor. */
  readonly histogram?: ErrorHistogram;
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

interface StepOutput {
  /** The bytes of step.outputs, in order. */
  readonly outputs: Uint8Array[];
  /** The tensor data read for the step, handed back to the compute once outputs are written. */
  readonly inputs: Uint8Array[];
  readonly quality?: QualityStats | undefined;
  readonly histogram?: ErrorHistogram | undefined;
}

/** Runs one step and returns its outputs' bytes, in the order of step.outputs. */
async function runStep(
  step: Step,
  source: TensorSource,
  compute: Compute,
  plan: Plan,
  quality: boolean,
  signal?: AbortSignal,
): Promise<StepOutput> {
  const { outDType } = plan.request;
  const allocate = compute.allocate?.bind(compute);
  if (step.kind === 'copy') {
    const data = await source.read(step.entry, false, allocate);
    return { outputs: [data], inputs: [data] };
  }
  if (step.kind === 'dequantize') {
    const g = step.group;
    const zpData = await source.read(g.zeroPoint);
    const qparams: QParams = {
      scale: typedView(Float32Array, await source.read(g.scale)),
      zeroPoint:
        g.zeroPoint.dtype === 'F32' ? typedView(Float32Array, zpData) : typedView(Int32Array, zpData),
    };
    const data = await source.read(g.codes, compute.sharedInputs, allocate);
    const out = await compute.dequantize(
      { name: g.name, data, spec: g.spec, layout: g.layout, qparams },
      outDType,
      signal,
    );
    return { outputs: [out], inputs: [data] };
  }
  const { name } = step.entry;
  const { spec } = step;
  const givenData = await readGiven(source, step.given);
  const given = step.given ? toQParams(name, givenData, spec, step.layout) : undefined;
  const data = await source.read(step.entry, compute.sharedInputs, allocate);
  const inputs = [data];
  const input = { name, dtype: step.dtype, data, layout: step.layout };
  switch (step.kind) {
    case 'quantize': {
      const out = await compute.quantize(input, spec, given, signal, { quality });
      const histogram = quality
        ? histogramOf(sampledQuantizeErrors(data, step.dtype, out.data, spec, step.layout, out.qparams))
        : undefined;
      return { outputs: [out.data, ...qparamBytes(out.qparams)], inputs, quality: out.quality, histogram };
    }
    case 'qparams':
      return { outputs: qparamBytes(await compute.chooseQParams(input, spec, given, signal)), inputs };
    case 'fake-quantize': {
      const out = await compute.fakeQuantize(input, spec, outDType, given, signal);
      return { outputs: [out.data, out.mask], inputs };
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

/** Float32 scratch a step may hold beside its input and outputs (a conversion window). */
const SCRATCH_BYTES = 16 * 1024 * 1024;

/** The bytes a step holds while it runs and until its outputs are written. */
export function stepCost(step: Step): number {
  if (step.kind === 'copy') return inputBytes(step); // its output is its input
  const outputs = step.outputs.reduce((n, t) => n + tensorBytes(t), 0);
  return inputBytes(step) + outputs + Math.min(SCRATCH_BYTES, windowBytes(step));
}

/** A float16 / bfloat16 input is converted in float32 windows of at most SCRATCH_BYTES. */
function windowBytes(step: Step): number {
  if (step.kind === 'dequantize' || step.kind === 'copy' || step.dtype === 'float32') return 0;
  return step.layout.numel * 4;
}

function tensorBytes(t: TensorPlan): number {
  return numelOf(t.shape) * ST_DTYPE_SIZE[t.dtype];
}

export interface ExecuteOptions {
  readonly onStep?: (report: StepReport) => void;
  /** Aborts the run between steps and inside kernel tasks (client gone, timeout, shutdown). */
  readonly signal?: AbortSignal | undefined;
  /** The sink copies or writes out what it is given (a file): outputs go back to the compute. */
  readonly releaseOutputs?: boolean;
  /** Measure quantized tensors (StepReport.quality). */
  readonly quality?: boolean;
  /** Steps run at once (default 1). Outputs are written in plan order whatever finishes first. */
  readonly concurrency?: number;
  /**
   * Bytes that steps in flight may hold together (stepCost: input, outputs, scratch), until their
   * outputs are written. A step larger than this runs alone. Default: no limit beyond concurrency.
   */
  readonly memoryBudget?: number;
}

/**
 * Runs every step of the plan and writes its outputs to the sink in plan order, through the one
 * streaming scheduler (./ordered.ts): up to `concurrency` steps at once within `memoryBudget`,
 * outputs byte-identical to a one-at-a-time run, and on the first failure nothing more starts.
 */
export async function executePlan(
  plan: Plan,
  source: TensorSource,
  sink: TensorSink,
  compute: Compute,
  options: ExecuteOptions = {},
): Promise<RunSummary> {
  const steps = plan.steps;
  let transformed = 0;
  let passedThrough = 0;
  let bytesIn = 0;
  let bytesOut = 0;
  await runInOrder<StepOutput>(
    {
      count: steps.length,
      cost: (i) => stepCost(steps[i]!),
      run: (i, signal) => runStep(steps[i]!, source, compute, plan, options.quality ?? false, signal),
      finish: async (i, done) => {
        const step = steps[i]!;
        let written = 0;
        for (let k = 0; k < done.outputs.length; k++) {
          await sink.write(step.outputs[k]!.name, done.outputs[k]!);
          written += done.outputs[k]!.byteLength;
          if (options.releaseOutputs) compute.release?.(done.outputs[k]!);
        }
        // inputs are ours (read for this step) once every output is out; a copy's input is its
        // output, released above when outputs are
        if (step.kind !== 'copy') for (const b of done.inputs) compute.release?.(b);
        const read = inputBytes(step);
        if (step.kind === 'copy') passedThrough++;
        else transformed++;
        bytesIn += read;
        bytesOut += written;
        const name = step.kind === 'dequantize' ? step.group.name : step.entry.name;
        options.onStep?.({
          step,
          name,
          kind: step.kind,
          bytesIn: read,
          bytesOut: written,
          ...(done.quality && { quality: done.quality }),
          ...(done.histogram && { histogram: done.histogram }),
        });
      },
    },
    options,
  );
  return { transformed, passedThrough, bytesIn, bytesOut };
}
