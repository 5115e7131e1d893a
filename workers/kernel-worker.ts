/**
 * The Piscina worker: loads the kernels the pool chose (workerData) once, then runs kernel tasks.
 * Its arrays are views of SharedArrayBuffers, so results land in place; what it returns is the
 * status (and, for reductions, small arrays). It never throws across the boundary: a task it
 * cannot run comes back as { ok: false, code, message }.
 */
import { workerData } from 'node:worker_threads';
import { GarbageQuota } from '../src/kernels/gc.js';
import { loadKernels } from '../src/kernels/loader.js';
import { runKernelTask, type KernelTask, type TaskResult } from '../src/kernels/tasks.js';

interface WorkerConfig {
  readonly backend: string;
  readonly isa: string;
  readonly testHooks: boolean;
  /** Test hooks only: hold every task this long first (slow requests for cancellation tests). */
  readonly taskDelayMs: number;
}

function spin(ms: number): void {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    // busy: the worker is occupied, as by a long kernel
  }
}

const config = workerData as WorkerConfig;
const kernels = loadKernels(config.backend, config.isa);
/** This thread's handles keep the tensors' shared buffers alive until it collects (gc.ts). */
const quota = new GarbageQuota();

/** Bytes of the shared arrays a task hands this thread. */
function taskBytes(task: KernelTask): number {
  let n = 0;
  for (const value of Object.values(task)) if (ArrayBuffer.isView(value)) n += value.byteLength;
  return n;
}

/** Tasks only the pool's own tests send (QUANTD_TEST_HOOKS=1): a worker dying, a slow task. */
type TestTask = { readonly op: '__exit' } | { readonly op: '__spin'; readonly ms: number };

export type WorkerReply =
  TaskResult | { readonly ok: false; readonly code: string; readonly message: string };

export default function run(task: KernelTask | TestTask): WorkerReply {
  if (task.op === '__exit' || task.op === '__spin') {
    if (!config.testHooks) return { ok: false, code: 'INTERNAL', message: `unknown task ${task.op}` };
    if (task.op === '__exit') process.exit(7);
    spin(task.ms);
    return { status: 0, bad: -1 };
  }
  if (config.testHooks && config.taskDelayMs > 0) spin(config.taskDelayMs);
  if (kernels.module === null) {
    return {
      ok: false,
      code: 'BACKEND_UNAVAILABLE',
      message: 'the worker has no kernel module (js backend)',
    };
  }
  try {
    const result = runKernelTask(kernels.module, task);
    quota.add(taskBytes(task));
    return result;
  } catch (err) {
    return { ok: false, code: 'INTERNAL', message: (err as Error).message };
  }
}
