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
  quantizedByteLength,
  sampledQuantizeErrors,
  typedView,
  type ErrorHistogram,
  type QParams,
  type QualityStats,
} from '../core/index.js';
import { QuantdError, throwIfAborted } from '../errors/index.js';
import type { TensorEntry, TensorPlan } from '../format/index.js';
import type { Compute } from './compute.js';
import { toQParams, type GivenData, type GivenEntries } from './given-qparams.js';
import { runInOrder } from './ordered.js';
import type { Plan, Step } from './plan.js';
import { copyParts, sliceAllocator, sliceStep, type CopyPart, type Slice } from './slices.js';

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
  /** Writes a tensor in parts, in order (a file); a sink without it gets whole tensors only. */
  writePart?(name: string, data: Uint8Array): Promise<void>;
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

interface SliceOutput {
  readonly codes: Uint8Array;
  readonly input: Uint8Array;
  readonly qparams: QParams;
  readonly quality?: QualityStats | undefined;
  readonly errors?: Float64Array | undefined;
}

/**
 * Runs one slice of a tensor (./slices.ts). An input error is the whole tensor's: a non-finite
 * value's index is the slice's plus its offset; any other refusal (a range that overflows) is
 * taken from the whole tensor, unsliced, which decides which of several defects is reported.
 */
async function runSlice(
  slice: Slice,
  source: TensorSource,
  compute: Compute,
  plan: Plan,
  quality: boolean,
  signal: AbortSignal | undefined,
): Promise<SliceOutput> {
  const { step, bufferBytes } = slice.tensor;
  const allocate = sliceAllocator(compute.allocate?.bind(compute), bufferBytes);
  const input = await source.read(slice.entry, compute.sharedInputs, allocate);
  const tensor = { name: step.entry.name, dtype: step.dtype, data: input, layout: slice.layout };
  let out: Awaited<ReturnType<Compute['quantize']>>;
  try {
    out = await compute.quantize(tensor, step.spec, undefined, signal, { quality });
  } catch (err) {
    // the input is left to the collector: a cancelled task's thread may still be reading it
    if (!(err instanceof QuantdError) || signal?.aborted) throw err;
    if (err.code === 'INPUT_NOT_FINITE') {
      const index = Number(err.params['index']) + slice.firstElement;
      throw new QuantdError('INPUT_NOT_FINITE', { ...err.params, index });
    }
    await runStep(step, source, compute, plan, quality, signal); // throws the tensor's own error
    throw err;
  }
  const errors = quality
    ? sampledQuantizeErrors(input, step.dtype, out.data, step.spec, slice.layout, out.qparams, {
        firstElement: slice.firstElement,
        tensorNumel: step.layout.numel,
      })
    : undefined;
  return { codes: out.data, input, qparams: out.qparams, quality: out.quality, errors };
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
  /**
   * Quantize (or copy) tensors of more than twice this many input bytes in slices of about this
   * size (./slices.ts), when the sink takes parts. Default: whole tensors.
   */
  readonly sliceBytes?: number;
}

/** A unit of the scheduler: a whole step, one slice of a sliced tensor, or one part of a copy. */
type Unit =
  | { readonly step: Step; readonly slice?: undefined; readonly part?: undefined }
  | { readonly step: Step; readonly slice: Slice; readonly part?: undefined }
  | { readonly step: Step; readonly slice?: undefined; readonly part: CopyPart };

/** The plan's steps as scheduler units: large quantize steps as their slices, large copies in parts. */
export function unitsOf(plan: Plan, sliceBytes: number | undefined): Unit[] {
  const units: Unit[] = [];
  for (const step of plan.steps) {
    const sliced = sliceBytes === undefined ? null : sliceStep(step, sliceBytes);
    const parts =
      sliceBytes === undefined || step.kind !== 'copy'
        ? null
        : copyParts(step.entry.end - step.entry.begin, sliceBytes);
    if (sliced !== null) for (const slice of sliced.slices) units.push({ step, slice });
    else if (parts !== null) for (const part of parts) units.push({ step, part });
    else units.push({ step });
  }
  return units;
}

/** The bytes a unit holds while it runs and until its outputs are written. */
export function unitCost(unit: Unit): number {
  if (unit.part !== undefined) return unit.part.buffer;
  if (unit.slice === undefined) return stepCost(unit.step);
  const { layout, tensor } = unit.slice;
  return (
    tensor.bufferBytes + quantizedByteLength(tensor.step.spec.qdtype, layout.numel) + 8 * layout.channels
  );
}

/**
 * Runs every step of the plan and writes its outputs to the sink in plan order, through the one
 * streaming scheduler (./ordered.ts): up to `concurrency` steps (or slices) at once within
 * `memoryBudget`, outputs byte-identical to a one-at-a-time run, and on the first failure nothing
 * more starts.
 */
export async function executePlan(
  plan: Plan,
  source: TensorSource,
  sink: TensorSink,
  compute: Compute,
  options: ExecuteOptions = {},
): Promise<RunSummary> {
  const units = unitsOf(plan, sink.writePart ? options.sliceBytes : undefined);
  const quality = options.quality ?? false;
  const totals = { transformed: 0, passedThrough: 0, bytesIn: 0, bytesOut: 0 };
  const report = (r: StepReport): void => {
    if (r.kind === 'copy') totals.passedThrough++;
    else totals.transformed++;
    totals.bytesIn += r.bytesIn;
    totals.bytesOut += r.bytesOut;
    options.onStep?.(r);
  };
  const allocate = compute.allocate?.bind(compute);
  await runInOrder<StepOutput | SliceOutput | Uint8Array>(
    {
      count: units.length,
      cost: (i) => unitCost(units[i]!),
      run: (i, signal) => {
        const { step, slice, part } = units[i]!;
        if (part) return source.read(partEntry(step, part), false, sliceAllocator(allocate, part.buffer));
        if (slice) return runSlice(slice, source, compute, plan, quality, signal);
        return runStep(step, source, compute, plan, quality, signal);
      },
      finish: async (i, done) => {
        const { step, slice, part } = units[i]!;
        if (part) await finishPart(step, part, done as Uint8Array, sink, compute, report);
        else if (slice) await finishSlice(slice, done as SliceOutput, sink, compute, options, report);
        else await finishStep(step, done as StepOutput, sink, compute, options, report);
      },
    },
    options,
  );
  return totals;
}

async function finishStep(
  step: Step,
  done: StepOutput,
  sink: TensorSink,
  compute: Compute,
  options: ExecuteOptions,
  report: (r: StepReport) => void,
): Promise<void> {
  let written = 0;
  for (let k = 0; k < done.outputs.length; k++) {
    await sink.write(step.outputs[k]!.name, done.outputs[k]!);
    written += done.outputs[k]!.byteLength;
    if (options.releaseOutputs) compute.release?.(done.outputs[k]!);
  }
  // inputs are ours (read for this step) once every output is out; a copy's input is its
  // output, released above when outputs are
  if (step.kind !== 'copy') for (const b of done.inputs) compute.release?.(b);
  report({
    step,
    name: step.kind === 'dequantize' ? step.group.name : step.entry.name,
    kind: step.kind,
    bytesIn: inputBytes(step),
    bytesOut: written,
    ...(done.quality && { quality: done.quality }),
    ...(done.histogram && { histogram: done.histogram }),
  });
}

/** Writes one part of a copied tensor; the last part reports the tensor. */
async function finishPart(
  step: Step,
  part: CopyPart,
  data: Uint8Array,
  sink: TensorSink,
  compute: Compute,
  report: (r: StepReport) => void,
): Promise<void> {
  await sink.writePart!(step.outputs[0]!.name, data);
  compute.release?.(data);
  if (part.index < part.count - 1) return;
  const bytes = inputBytes(step);
  report({ step, name: step.outputs[0]!.name, kind: step.kind, bytesIn: bytes, bytesOut: bytes });
}

/** A part of a copied tensor, as an entry of its own (its byte range of the input). */
function partEntry(step: Step, part: CopyPart): TensorEntry {
  const { entry } = step as Extract<Step, { kind: 'copy' }>;
  const begin = entry.begin + part.begin;
  return { ...entry, shape: [part.end - part.begin], begin, end: entry.begin + part.end };
}

/** Writes a slice's codes; the last slice of a tensor writes its qparams and reports the tensor. */
async function finishSlice(
  slice: Slice,
  done: SliceOutput,
  sink: TensorSink,
  compute: Compute,
  options: ExecuteOptions,
  report: (r: StepReport) => void,
): Promise<void> {
  const { tensor } = slice;
  const { step } = tensor;
  await sink.writePart!(step.outputs[0]!.name, done.codes);
  compute.release?.(done.input);
  if (options.releaseOutputs) compute.release?.(done.codes);
  tensor.add(slice, done.codes.byteLength, done.qparams, done.quality, done.errors);
  if (slice.index < tensor.slices.length - 1) return;
  const [scale, zeroPoint] = qparamBytes(tensor.qparams);
  await sink.write(step.outputs[1]!.name, scale!);
  await sink.write(step.outputs[2]!.name, zeroPoint!);
  const quality = tensor.measuredQuality;
  report({
    step,
    name: step.entry.name,
    kind: step.kind,
    bytesIn: inputBytes(step),
    bytesOut: tensor.codeBytes + scale!.byteLength + zeroPoint!.byteLength,
    ...(quality && { quality, histogram: histogramOf(tensor.sampledErrors) }),
  });
}
