/** An operation from one safetensors file to another, streamed tensor by tensor. */
import {
  SafetensorsFileReader,
  SafetensorsFileWriter,
  parseSafetensors,
  serializeSafetensors,
} from '../format/index.js';
import type { Compute } from './compute.js';
import { executePlan, type RunSummary, type StepReport } from './execute.js';
import { planOperation, type OperationRequest } from './plan.js';

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

/** The same operation on a file held in memory (request bodies); returns the output file. */
export async function runBufferOperation(
  input: Uint8Array,
  source: string,
  request: OperationRequest,
  compute: Compute,
): Promise<{ output: Uint8Array; summary: RunSummary }> {
  const file = parseSafetensors(input, source);
  const plan = planOperation(file.header, request, source);
  const written = new Map<string, Uint8Array>();
  const summary = await executePlan(
    plan,
    { read: async (entry) => file.tensorBytes(entry) },
    { write: async (name, data) => void written.set(name, data) },
    compute,
  );
  const output = serializeSafetensors(
    plan.tensors.map((t) => ({ ...t, data: written.get(t.name)! })),
    plan.metadata,
  );
  return { output, summary };
}
