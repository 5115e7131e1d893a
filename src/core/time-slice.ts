/**
 * Long synchronous work that must not hold the event loop: a header of 65,536 tensors takes
 * hundreds of milliseconds to parse, plan and encode, and a server that does it in one go answers
 * no health check, no admission decision, nothing else meanwhile. Such work is written once, as a
 * generator that `yield`s between units (an entry, a tensor, a step), and run by one of two
 * drivers: `completeNow` runs it to the end at once (the CLI, tests, code that must stay
 * synchronous), `completeYielding` hands the event loop back whenever a slice of time is spent.
 * The same code gives the same result either way; only where it pauses differs.
 */

/** Work in units: yields between units, returns its result. */
export type Resumable<T> = Generator<void, T, undefined>;

/**
 * How long work runs before it yields: short enough that a request queued behind it waits no
 * more than this (the service's target is 100 ms p99 for /healthz), long enough that the pauses
 * cost nothing measurable (one setImmediate, a few microseconds, per slice).
 */
export const SLICE_MS = 10;

/** Runs `work` to its end without pausing. */
export function completeNow<T>(work: Resumable<T>): T {
  for (;;) {
    const next = work.next();
    if (next.done) return next.value;
  }
}

/** The event loop's turn: I/O callbacks (a health check, a new connection) run before we resume. */
export const yieldToLoop = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/**
 * A clock for a long asynchronous loop whose units may all complete without the loop turning
 * (promises that resolve at once chain as microtasks, which starve I/O as surely as a `for`
 * loop): `if (slice.due()) await slice.pause()` between units yields once a slice of time has
 * passed, and costs a look at the clock otherwise.
 */
export class LoopSlice {
  private started = performance.now();
  /** The turn being waited for: loops sharing this slice wait for one turn, not one each. */
  private waiting: Promise<void> | undefined;

  constructor(private readonly sliceMs = SLICE_MS) {}

  /**
   * Whether the slice is spent. It looks at the clock every time (about 30 ns): looking every
   * 64 units let 64 slow units (cold code, a large tensor's copy) run 600 ms without a turn.
   */
  due(): boolean {
    return performance.now() - this.started >= this.sliceMs;
  }

  /**
   * Yields to the event loop (call it when `due()`); a new slice starts after. Chains of work that
   * share the slice share the turn: each waiting on a turn of its own, they ran one after another
   * in one pass of the loop's immediate phase, a slice each, and held it 100 ms.
   */
  pause(): Promise<void> {
    return (this.waiting ??= yieldToLoop().then(() => {
      this.waiting = undefined;
      this.started = performance.now();
    }));
  }
}

/**
 * Runs `work` to its end, yielding to the event loop whenever a slice of `sliceMs` is spent. An
 * aborted `signal` (the client gone, the request's time up) stops it at the next pause with the
 * signal's reason: seconds of planning are not spent for nobody.
 */
export async function completeYielding<T>(
  work: Resumable<T>,
  signal?: AbortSignal,
  sliceMs = SLICE_MS,
): Promise<T> {
  const slice = new LoopSlice(sliceMs);
  for (;;) {
    const next = work.next();
    if (next.done) return next.value;
    if (slice.due()) {
      await slice.pause();
      if (signal?.aborted) throw signal.reason;
    }
  }
}
