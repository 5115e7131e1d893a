/** An operation on a safetensors file held in memory (a request body). */
import { ST_DTYPE_SIZE, completeYielding } from '../core/index.js';
import {
  encodeHeaderWork,
  parseSafetensorsWork,
  type ParsedSafetensors,
  type SafetensorsHeader,
  type TensorEntry,
} from '../format/index.js';
import type { Compute } from './compute.js';
import { executePlan, type Allocate, type RunSummary } from './execute.js';
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

/**
 * Inputs of at least this many bytes that the compute wants shared and that are not (a gRPC
 * message's tensor) are copied into shared memory here, once. Left as they are, the kernels
 * copied each twice on the event loop: into an aligned buffer (a tensor's bytes inside a
 * protobuf message seldom start on a float boundary), then into shared memory — for a 64 MiB
 * tensor, two fresh 64 MiB buffers and about 90 ms of the loop (profiled). This copy goes into a
 * buffer the compute recycles. Smaller inputs run in the calling thread, which needs no sharing.
 */
const SHARE_FROM = 1024 * 1024;

/** runBufferOperation with the plan made already (PlanCache): `plan` must be `file`'s. */
export async function runBufferPlan(
  plan: Plan,
  file: { tensorBytes(entry: TensorEntry): Uint8Array },
  compute: Compute,
  signal?: AbortSignal,
): Promise<BufferResult> {
  const written = new Map<string, Uint8Array>();
  const copies: Uint8Array[] = [];
  const read = async (entry: TensorEntry, shared?: boolean, allocate?: Allocate): Promise<Uint8Array> => {
    const bytes = file.tensorBytes(entry);
    if (!shared || !allocate || bytes.byteLength < SHARE_FROM || bytes.buffer instanceof SharedArrayBuffer) {
      return bytes;
    }
    const copy = allocate(bytes.byteLength, true);
    copy.set(bytes);
    copies.push(copy);
    return copy;
  };
  const summary = await executePlan(
    plan,
    { read },
    { write: async (name, data) => void written.set(name, data) },
    compute,
    { signal },
  );
  // the copies are inputs only (every output is a buffer of its own): recycled for later requests;
  // after a failure they are left to the collector, as a cancelled task's thread may still read one
  for (const copy of copies) compute.release?.(copy);
  return { plan, outputs: plan.tensors.map((t) => written.get(t.name)!), summary };
}

/**
 * The bytes of a plan's outputs: what running it on a file held in memory adds, before the
 * transport encodes them (its admission charges them against the memory budget, times its copies).
 */
export function planOutputBytes(plan: Plan): number {
  let bytes = 0;
  for (const t of plan.tensors) bytes += t.shape.reduce((n, d) => n * d, ST_DTYPE_SIZE[t.dtype]);
  return bytes;
}
