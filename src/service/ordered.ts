/**
 * The one streaming scheduler: units of work (a plan's steps, a layout's jobs) start in order,
 * several at once within a concurrency limit and a byte budget, and finish (write their outputs)
 * strictly in order, so the output is byte-identical to a one-at-a-time run while memory stays
 * bounded by the budget (or by the largest unit, which may always run alone).
 */
import { setMaxListeners } from 'node:events';
import { LoopSlice } from '../core/index.js';
import { throwIfAborted } from '../errors/index.js';

export interface OrderedWork<T> {
  readonly count: number;
  /** Bytes unit `i` holds from its start until it is finished. */
  cost(i: number): number;
  /** Starts unit `i` (reads its inputs, computes); `signal` aborts it (none: nothing can). */
  run(i: number, signal: AbortSignal | undefined): Promise<T>;
  /** Finishes unit `i` with its result (writes its outputs), in index order. */
  finish(i: number, result: T): Promise<void>;
}

export interface OrderedOptions {
  /** Units running at once (default 1). */
  readonly concurrency?: number | undefined;
  /** Bytes units in flight may hold together; a unit larger than this runs alone. Default: no limit. */
  readonly memoryBudget?: number | undefined;
  /** Aborts the run between units and inside them (client gone, timeout, shutdown). */
  readonly signal?: AbortSignal | undefined;
}

/**
 * Runs every unit. On the first failure (in index order) no further unit starts, units in
 * flight are aborted and awaited, and that failure is thrown.
 */
export async function runInOrder<T>(work: OrderedWork<T>, options: OrderedOptions = {}): Promise<void> {
  const concurrency = Math.max(1, options.concurrency ?? 1);
  const budget = options.memoryBudget ?? Infinity;
  // One signal for the units: the caller's abort, or ours on the first failure (a listener
  // rather than AbortSignal.any, which costs a measurable share of a small request). A single
  // unit has no sibling to stop when it fails: it gets the caller's signal as it is (none, for
  // a small request computed in this thread, which then allocates no controller at all).
  const stop = work.count > 1 ? new AbortController() : undefined;
  const signal = stop ? stop.signal : options.signal;
  const forward = (): void => stop!.abort(options.signal?.reason);
  if (stop) {
    // every kernel task of every unit in flight listens to it: more than Node's default of 10
    setMaxListeners(0, stop.signal);
    if (options.signal?.aborted) forward();
    else options.signal?.addEventListener('abort', forward, { once: true });
  }
  // Units computed in this thread (small tensors) settle as microtasks, one after another, and
  // microtasks never let the event loop turn: 65,535 one-element tensors held it for a second.
  // Between units, the loop gets its turn once a slice of time is spent.
  const slice = new LoopSlice();
  const running: Array<Promise<T> | undefined> = new Array(work.count);
  let started = 0;
  let held = 0;
  let inFlight = 0;
  let failed = false;

  /** Starts units in order while concurrency and the budget allow (a unit alone always may). */
  const launch = (): void => {
    while (!failed && started < work.count && inFlight < concurrency) {
      const i = started;
      const cost = work.cost(i);
      if (held > 0 && held + cost > budget) return;
      held += cost;
      inFlight++;
      const run = (async () => {
        throwIfAborted(signal);
        return work.run(i, signal);
      })();
      run.then(
        () => {
          inFlight--;
          // a unit that ends starts the next one: this chain too runs as microtasks, and ran a
          // whole plan's units ahead while the loop below paused, so it waits its turn as well
          if (slice.due()) void slice.pause().then(launch);
          else launch();
        },
        () => {
          inFlight--;
          failed = true;
        },
      );
      running[started++] = run;
    }
  };

  try {
    launch();
    for (let i = 0; i < work.count; i++) {
      const result = await running[i]!;
      throwIfAborted(signal); // cancelled while the last units ran: write nothing more
      running[i] = undefined;
      await work.finish(i, result);
      held -= work.cost(i);
      launch();
      if (slice.due()) await slice.pause();
    }
  } catch (err) {
    failed = true;
    stop?.abort(err);
    await Promise.allSettled(running.filter((r) => r !== undefined));
    throw err;
  } finally {
    if (stop) options.signal?.removeEventListener('abort', forward);
  }
}
