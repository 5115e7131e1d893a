/**
 * The Piscina worker: loads the kernels the pool chose (workerData) once, then runs kernel tasks.
 * Its arrays are views of SharedArrayBuffers, so results land in place; what it returns is the
 * status (and, for reductions, small arrays). It never throws across the boundary: a task it
 * cannot run comes back as { ok: false, code, message }.
 */
import { setPriority } from 'node:os';
import { workerData } from 'node:worker_threads';
import { GarbageQuota, collectGarbage } from '../src/kernels/gc.js';
import { QuantdError } from '../src/errors/index.js';
import type { EncodeReply, EncodeTask } from '../src/kernels/encoders.js';
import { loadKernels } from '../src/kernels/loader.js';
import type { ReferenceTask } from '../src/kernels/reference-task.js';
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

/**
 * Compute threads yield to the event loop: on Linux, setpriority on "this process" renices only
 * the calling thread, so the server's main thread (health checks, admission, I/O) preempts the
 * kernels whenever it has work, even with every core busy. Elsewhere it may renice the whole
 * process or fail; either way the bytes are the same, so a failure is ignored.
 */
const WORKER_NICE = 10;
if (process.platform === 'linux') {
  try {
    setPriority(WORKER_NICE);
  } catch {
    // not permitted here: run at the process's priority
  }
}
const kernels = loadKernels(config.backend, config.isa);
/*
 * The layout encoders and the reference ops are loaded on first use: they are half of this
 * thread's modules, and a pool that only quantizes is ready about 25 ms sooner without them.
 */
let encoders: Promise<typeof import('../src/kernels/encoders.js')> | undefined;
let reference: Promise<typeof import('../src/kernels/reference-task.js')> | undefined;

/**
 * This thread's handles keep the tensors' shared buffers alive until it collects (gc.ts): every
 * 64 MiB of them. A request's buffers are garbage once it is answered, but stay in memory until
 * each worker that saw them collects: at 256 MiB a worker, two workers kept up to half a gigabyte
 * of finished requests' bodies beyond what the server's memory budget admits. A collection of this
 * thread's small heap takes about a millisecond; a 64 MiB task, ten or more.
 */
const quota = new GarbageQuota(64 * 1024 * 1024);

/**
 * A calibration statistics task of this many bytes or more lets go of its buffers and collects
 * as it ends (a few ms of this small heap). Its arrays are a session's statistics (in² float64
 * values, shared), which live on, and between tasks this thread waits in Atomics.wait (Piscina),
 * running nothing: its handles would keep them alive after the session is deleted, for as long
 * as the server sat idle. Tensors' buffers go by and are left to the quota.
 */
const LARGE_STATISTICS = 32 * 1024 * 1024;

/** After a task: counted against the quota, or, for large statistics, let go of at once. */
function settle(task: KernelTask, bytes: number): void {
  if (task.op !== 'linearStats' || bytes < LARGE_STATISTICS) return quota.add(bytes);
  const fields = task as unknown as Record<string, unknown>;
  for (const key of Object.keys(fields)) if (ArrayBuffer.isView(fields[key])) fields[key] = null;
  collectGarbage();
}

/** Bytes of the shared arrays a task hands this thread. */
function taskBytes(task: KernelTask | EncodeTask): number {
  let n = 0;
  for (const value of Object.values(task)) {
    if (ArrayBuffer.isView(value)) n += value.byteLength;
    else if (Array.isArray(value)) for (const v of value) if (ArrayBuffer.isView(v)) n += v.byteLength;
  }
  return n;
}

/** Tasks only the pool's own tests send (QUANTD_TEST_HOOKS=1): a worker dying, a slow task. */
type TestTask = { readonly op: '__exit' } | { readonly op: '__spin'; readonly ms: number };

/** The pool's first task: its answer says a thread has loaded the kernels (KernelPool.ready). */
type ReadyTask = { readonly op: 'ready' };

/** A task that failed: a catalogued error keeps its code and parameters across the boundary. */
export interface WorkerFailure {
  readonly ok: false;
  readonly code: string;
  readonly message: string;
  readonly params?: Readonly<Record<string, unknown>>;
}

/** A reference task's result (src/kernels/reference-task.ts). */
export interface ReferenceReply {
  readonly ok: true;
  readonly value: unknown;
}

export type WorkerReply = TaskResult | EncodeReply | ReferenceReply | WorkerFailure;

function failure(err: unknown): WorkerFailure {
  if (err instanceof QuantdError) return { ok: false, ...err.toJSON() };
  return { ok: false, code: 'INTERNAL', message: (err as Error).message };
}

export default function run(
  task: KernelTask | EncodeTask | ReferenceTask | TestTask | ReadyTask,
): WorkerReply | Promise<WorkerReply> {
  if (task.op === 'ready') return { status: 0, bad: -1 };
  if (task.op === '__exit' || task.op === '__spin') {
    if (!config.testHooks) return { ok: false, code: 'INTERNAL', message: `unknown task ${task.op}` };
    if (task.op === '__exit') process.exit(7);
    spin(task.ms);
    return { status: 0, bad: -1 };
  }
  if (config.testHooks && config.taskDelayMs > 0) spin(config.taskDelayMs);
  if (task.op === 'reference') {
    return (reference ??= import('../src/kernels/reference-task.js'))
      .then(({ runReferenceTask }): WorkerReply => ({
        ok: true,
        value: runReferenceTask(task.call, kernels.module),
      }))
      .catch(failure);
  }
  if (task.op === 'encode') {
    // layout encoders have a TypeScript path for every type: they run without a kernel module too
    return (encoders ??= import('../src/kernels/encoders.js'))
      .then(({ runEncodeTask }): WorkerReply => {
        const reply = runEncodeTask(kernels.module, task);
        quota.add(taskBytes(task));
        return reply;
      })
      .catch(failure);
  }
  if (kernels.module === null) {
    return {
      ok: false,
      code: 'BACKEND_UNAVAILABLE',
      message: 'the worker has no kernel module (js backend)',
    };
  }
  try {
    const result = runKernelTask(kernels.module, task);
    settle(task, taskBytes(task));
    return result;
  } catch (err) {
    return { ok: false, code: 'INTERNAL', message: (err as Error).message };
  }
}
