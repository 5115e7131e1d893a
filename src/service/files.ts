/** An operation on a safetensors file held in memory (a request body). */
import type { SafetensorsHeader, TensorEntry } from '../format/index.js';
import type { Compute } from './compute.js';
import { executePlan, type RunSummary } from './execute.js';
import { planOperation, type OperationRequest, type Plan } from './plan.js';

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
  return runBufferPlan(planOperation(file.header, request, source), file, compute, signal);
}

/** runBufferOperation with the plan made already (PlanCache): `plan` must be `file`'s. */
export async function runBufferPlan(
  plan: Plan,
  file: { tensorBytes(entry: TensorEntry): Uint8Array },
  compute: Compute,
  signal?: AbortSignal,
): Promise<BufferResult> {
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
