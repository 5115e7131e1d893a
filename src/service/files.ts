/** An operation on a safetensors file held in memory (a request body). */
import { completeYielding } from '../core/index.js';
import {
  encodeHeaderWork,
  parseSafetensorsWork,
  type ParsedSafetensors,
  type SafetensorsHeader,
  type TensorEntry,
} from '../format/index.js';
import type { Compute } from './compute.js';
import { executePlan, type RunSummary } from './execute.js';
import { planOperationWork, type OperationRequest, type Plan } from './plan.js';

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
  return runBufferPlan(await planBuffer(file.header, request, source, signal), file, compute, signal);
}

/**
 * A request body parsed as a safetensors file, the event loop turning meanwhile: a header of
 * 65,535 tensors takes a few hundred milliseconds to check (../core/time-slice.ts).
 */
export function parseBody(
  bytes: Uint8Array,
  source: string,
  signal?: AbortSignal,
): Promise<ParsedSafetensors> {
  return completeYielding(parseSafetensorsWork(bytes, source), signal);
}

/** The safetensors header a result starts with, encoded with the event loop turning (parseBody). */
export async function encodeResultHeader(plan: Plan, signal?: AbortSignal): Promise<Uint8Array> {
  return (await completeYielding(encodeHeaderWork(plan.tensors, plan.metadata), signal)).bytes;
}

/** planOperation for a request, the event loop turning meanwhile (parseBody). */
export function planBuffer(
  header: SafetensorsHeader,
  request: OperationRequest,
  source: string,
  signal?: AbortSignal,
): Promise<Plan> {
  return completeYielding(planOperationWork(header, request, source), signal);
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
