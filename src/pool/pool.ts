/**
 * The worker pool: Piscina threads that each load the kernels once and run kernel tasks.
 * Admission is ours, not Piscina's: at most `threads + maxQueue` tensor operations are in
 * flight, beyond that callers get OVERLOADED at once (bounded memory, never an unbounded queue).
 * A task aborted by its signal terminates the worker running it; a worker that dies (exit, out of
 * memory) fails only its own task with WORKER_FAILED, and Piscina starts a replacement.
 */
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { Piscina } from 'piscina';
import { catalogue, QuantdError, type ErrorCode, type ErrorParams } from '../errors/index.js';
import type { EncodeReply, EncodeTask, Encoding } from '../kernels/encoders.js';
import type { ReferenceCall, ReferenceResults } from '../kernels/reference-task.js';
import type { KernelTask, TaskResult } from '../kernels/tasks.js';
import type { Executor } from '../kernels/tensor-ops.js';
import { packageRoot } from '../package-info.js';

export interface PoolOptions {
  /** Worker threads (default: available cores). */
  readonly threads?: number;
  /** Tensor operations that may wait beyond the running ones (default 64). */
  readonly maxQueue?: number;
  /** Backend and ISA the workers load (the main thread's choice). */
  readonly backend: string;
  readonly isa: string;
  /** Heap limit of a worker in MiB (resourceLimits.maxOldGenerationSizeMb). */
  readonly workerHeapMb?: number;
}

/** A CommonJS entry that loads kernel-worker.js with import() (see workers/kernel-entry.cts). */
export const WORKER_PATH = join(packageRoot(), 'dist', 'workers', 'kernel-entry.cjs');

/** QUANTD_TEST_TASK_DELAY_MS: a non-negative integer of milliseconds, else 0. */
function testTaskDelayMs(): number {
  const raw = process.env['QUANTD_TEST_TASK_DELAY_MS']?.trim() ?? '';
  return /^\d+$/.test(raw) ? Number(raw) : 0;
}

type Failure = { ok: false; code: string; message: string; params?: ErrorParams };
type Reply = TaskResult | Failure;

export class KernelPool implements Executor {
  readonly parallelism: number;
  readonly shared = true;
  readonly maxQueue: number;
  /** Whether the workers run C kernels (native or wasm), not the TypeScript reference. */
  private readonly kernels: boolean;
  private readonly piscina: Piscina;
  private inFlight = 0;
  private closed = false;
  private loaded = false;
  private readyProbe: Promise<void> | undefined;

  constructor(options: PoolOptions) {
    this.parallelism = Math.max(1, options.threads ?? availableParallelism());
    this.maxQueue = options.maxQueue ?? 64;
    this.kernels = options.backend !== 'js';
    this.piscina = new Piscina({
      filename: WORKER_PATH,
      minThreads: this.parallelism,
      maxThreads: this.parallelism,
      idleTimeout: 60_000,
      workerData: {
        backend: options.backend,
        isa: options.isa,
        testHooks: process.env['QUANTD_TEST_HOOKS'] === '1',
        // test hooks only: every kernel task is held this long first (slow requests in tests)
        taskDelayMs: testTaskDelayMs(),
      },
      ...(options.workerHeapMb ? { resourceLimits: { maxOldGenerationSizeMb: options.workerHeapMb } } : {}),
    });
    // Piscina reports on the pool what no task awaits: the reply of a thread whose task was just
    // cancelled (the thread is being replaced; the caller already has its CANCELLED), a thread
    // that died idle (replaced), a close that timed out. Each is handled where it matters; as an
    // 'error' event without a listener it would end the process.
    this.piscina.on('error', () => undefined);
  }

  /**
   * Whether a thread has loaded the kernels (they take about 50 ms to start). The first call
   * sends a task that answers once one has; until then this is false.
   */
  get ready(): boolean {
    this.readyProbe ??= this.piscina.run({ op: 'ready' }).then(
      () => void (this.loaded = true),
      () => undefined, // a pool closed meanwhile: never ready
    );
    return this.loaded;
  }

  /** Operations admitted and not finished. */
  get pending(): number {
    return this.inFlight;
  }

  /** Tasks waiting in Piscina's queue (for /metrics). */
  get queueSize(): number {
    return this.piscina.queueSize;
  }

  /** Task wait and run time summaries in milliseconds (for /metrics). */
  timings(): {
    wait: { p50: number; p90: number; p99: number };
    run: { p50: number; p90: number; p99: number };
  } {
    const h = this.piscina.histogram;
    return { wait: h.waitTime, run: h.runTime };
  }

  /**
   * Admits one tensor operation, or throws OVERLOADED. The returned release() must be called
   * when the operation ends, however it ends.
   */
  admit(): () => void {
    if (this.closed) throw new QuantdError('CANCELLED', { detail: ': the server is shutting down' });
    if (this.inFlight >= this.parallelism + this.maxQueue) {
      throw new QuantdError('OVERLOADED', { queued: this.inFlight, limit: this.parallelism + this.maxQueue });
    }
    this.inFlight++;
    let released = false;
    return () => {
      if (!released) {
        released = true;
        this.inFlight--;
      }
    };
  }

  async run(tasks: readonly KernelTask[], tensor: string, signal?: AbortSignal): Promise<TaskResult[]> {
    const replies = await Promise.allSettled(tasks.map((task) => this.runOne(task, signal)));
    const results: TaskResult[] = [];
    for (const r of replies) {
      if (r.status === 'rejected') throw this.failure(r.reason, tensor, signal);
      const reply = r.value;
      if ('ok' in reply)
        throw new QuantdError('INTERNAL', { detail: `worker: ${reply.code}: ${reply.message}` });
      results.push(reply);
    }
    return results;
  }

  /**
   * Runs one layout encode task (src/kernels/encoders.ts) on a worker. A catalogued error the
   * encoder threw (a non-finite weight, a malformed file) comes back as itself.
   */
  async encode(task: EncodeTask, signal?: AbortSignal): Promise<EncodeReply> {
    let reply: EncodeReply | Failure;
    try {
      reply = (await this.piscina.run(task, signal ? { signal } : {})) as EncodeReply | Failure;
    } catch (err) {
      throw this.failure(err, describe(task), signal);
    }
    if ('ok' in reply) {
      const code = Object.hasOwn(catalogue, reply.code) ? (reply.code as ErrorCode) : 'INTERNAL';
      throw new QuantdError(
        code,
        code === 'INTERNAL' ? { detail: `worker: ${reply.message}` } : reply.params,
      );
    }
    return reply;
  }

  /**
   * A whole-tensor TypeScript reference op on a worker (src/kernels/reference-task.ts): the
   * greedy range search, and the re-run that gives a rejected input its exact error.
   */
  async reference<K extends ReferenceCall>(
    call: K,
    signal?: AbortSignal,
  ): Promise<ReferenceResults[K['kind']]> {
    let reply: { ok: true; value: unknown } | Failure;
    try {
      reply = (await this.piscina.run({ op: 'reference', call }, signal ? { signal } : {})) as typeof reply;
    } catch (err) {
      throw this.failure(err, 'input' in call ? call.input.name : call.kind, signal);
    }
    if (reply.ok) return reply.value as ReferenceResults[K['kind']];
    throw failed(reply);
  }

  /**
   * Layout encode tasks on this pool's threads, one admitted operation each: a layout's tensors
   * are a model's weights, so they never run on the event loop, whatever their size.
   */
  encoding(): Encoding {
    return {
      parallelism: this.parallelism,
      shared: true,
      kernels: this.kernels,
      encode: async (task, signal) => {
        const release = this.admit();
        try {
          return await this.encode(task, signal);
        } finally {
          release();
        }
      },
    };
  }

  /** A test-only task (QUANTD_TEST_HOOKS=1 workers): `__exit` kills its worker, `__spin` holds it. */
  async runTestTask(
    task: { op: '__exit' } | { op: '__spin'; ms: number },
    signal?: AbortSignal,
  ): Promise<unknown> {
    return this.piscina.run(task, signal ? { signal } : {});
  }

  private runOne(task: KernelTask, signal?: AbortSignal): Promise<Reply> {
    return this.piscina.run(task, signal ? { signal } : {}) as Promise<Reply>;
  }

  private failure(reason: unknown, tensor: string, signal?: AbortSignal): QuantdError {
    if (reason instanceof QuantdError) return reason;
    // Aborted: the signal's reason says why (REQUEST_TIMEOUT, the client gone), not Piscina's
    // AbortError.
    if (signal?.aborted) {
      return signal.reason instanceof QuantdError
        ? signal.reason
        : new QuantdError('CANCELLED', { detail: '' });
    }
    const message = reason instanceof Error ? reason.message : String(reason);
    return new QuantdError('WORKER_FAILED', { tensor, detail: message.split('\n')[0] });
  }

  /** Stops admitting, lets running tasks finish, then ends the workers. */
  async close(): Promise<void> {
    this.closed = true;
    await this.piscina.close();
  }

  /** Ends the workers at once, failing whatever runs. */
  async destroy(): Promise<void> {
    this.closed = true;
    await this.piscina.destroy();
  }
}

/** The tensor an encode task works on, for WORKER_FAILED messages. */
function describe(task: EncodeTask): string {
  return 'tensor' in task.call ? task.call.tensor : task.call.kind;
}

/** A worker's failure reply as the error it was: a catalogued one keeps its code and parameters. */
function failed(reply: Failure): QuantdError {
  const code = Object.hasOwn(catalogue, reply.code) ? (reply.code as ErrorCode) : 'INTERNAL';
  return new QuantdError(code, code === 'INTERNAL' ? { detail: `worker: ${reply.message}` } : reply.params);
}
