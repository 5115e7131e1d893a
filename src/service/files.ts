/** An operation from one safetensors file to another, streamed tensor by tensor. */
import {
  SafetensorsFileReader,
  SafetensorsFileWriter,
  serializeSafetensors,
  type SafetensorsHeader,
  type TensorEntry,
} from '../format/index.js';
import type { Compute } from './compute.js';
import { executePlan, type RunSummary, type StepReport } from './execute.js';
import { planOperation, type OperationRequest, type Plan } from './plan.js';

export async function runFileOperation(
  inputPath: string,
  outputPath: string,
  request: OperationRequest,
  compute: Compute,
  onStep?: (report: StepReport) => void,
): Promise<RunSummary> {
  const reader = await SafetensorsFileReader.open(inputPath);
  try {
    const plan = planOperation(reader.header, request, inputPath);
    const writer = await SafetensorsFileWriter.create(outputPath, plan.tensors, plan.metadata);
    try {
      const summary = await executePlan(plan, reader, writer, compute, { onStep, releaseOutputs: true });
      await writer.commit();
      return summary;
    } catch (err) {
      await writer.abort();
      throw err;
    }
  } finally {
    await reader.close();
  }
}

/** The outputs of an operation on a file held in memory, one per planned output tensor. */
export interface BufferResult {
  readonly plan: Plan;
  readonly outputs: readonly Uint8Array[];
  readonly summary: RunSummary;
}

/**
 * The same operation on a safetensors file held in memory (a request body). Every output is
 * computed before any is returned, so a rejected input fails the whole request cleanly; the
 * caller streams `outputs` after `encodeHeader(plan.tensors, plan.metadata)`.
 */
export async function runBufferOperation(
  file: { readonly header: SafetensorsHeader; tensorBytes(entry: TensorEntry): Uint8Array },
  source: string,
  request: OperationRequest,
  compute: Compute,
  signal?: AbortSignal,
): Promise<BufferResult> {
  const plan = planOperation(file.header, request, source);
  const written = new Map<string, Uint8Array>();
  const summary = await executePlan(
    plan,
    { read: async (entry) => file.tensorBytes(entry) },
    { write: async (name, data) => void written.set(name, data) },
    compute,
    { signal },
  );
  return { plan, outputs: plan.tensors.map((t) => written.get(t.name)!), summary };
}

/** A whole output file in one buffer (small results, tests). */
export function serializeResult(result: BufferResult): Uint8Array {
  return serializeSafetensors(
    result.plan.tensors.map((t, i) => ({ ...t, data: result.outputs[i]! })),
    result.plan.metadata,
  );
}
