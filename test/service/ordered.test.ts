/** runInOrder's signals: a lone unit gets the caller's (or none); several share one that stops them. */
import { describe, expect, it } from 'vitest';

import { runInOrder } from '../../src/service/ordered.js';

describe('runInOrder', () => {
  it("a single unit runs with the caller's signal as it is, or with none", async () => {
    const seen: Array<AbortSignal | undefined> = [];
    const work = {
      count: 1,
      cost: () => 1,
      run: async (_i: number, signal: AbortSignal | undefined) => void seen.push(signal),
      finish: async () => undefined,
    };
    await runInOrder(work);
    const caller = new AbortController();
    await runInOrder(work, { signal: caller.signal });
    expect(seen).toEqual([undefined, caller.signal]);
  });

  it("a single unit's failure is thrown, and an aborted caller starts nothing", async () => {
    const boom = new Error('boom');
    await expect(
      runInOrder({
        count: 1,
        cost: () => 1,
        run: async () => Promise.reject(boom),
        finish: async () => undefined,
      }),
    ).rejects.toBe(boom);
    const caller = new AbortController();
    caller.abort();
    let ran = false;
    await expect(
      runInOrder(
        { count: 1, cost: () => 1, run: async () => void (ran = true), finish: async () => undefined },
        { signal: caller.signal },
      ),
    ).rejects.toMatchObject({ code: 'CANCELLED' });
    expect(ran).toBe(false);
  });

  it("several units share a signal that the first failure aborts, and the caller's abort reaches", async () => {
    const signals: AbortSignal[] = [];
    const failure = new Error('unit 0 failed');
    const run = async (i: number, signal: AbortSignal | undefined): Promise<void> => {
      signals.push(signal!);
      if (i === 0) throw failure;
      await new Promise<void>((resolve) => signal!.addEventListener('abort', () => resolve()));
    };
    await expect(
      runInOrder({ count: 2, cost: () => 1, run, finish: async () => undefined }, { concurrency: 2 }),
    ).rejects.toBe(failure);
    expect(signals).toHaveLength(2);
    expect(signals[0]).toBe(signals[1]);
    expect(signals[0]!.aborted).toBe(true);

    const caller = new AbortController();
    const started: AbortSignal[] = [];
    const waiting = runInOrder(
      {
        count: 2,
        cost: () => 1,
        run: async (_i, signal) => {
          started.push(signal!);
          await new Promise<void>((resolve) => signal!.addEventListener('abort', () => resolve()));
        },
        finish: async () => undefined,
      },
      { concurrency: 2, signal: caller.signal },
    );
    await new Promise((r) => setImmediate(r));
    expect(started).toHaveLength(2);
    expect(started[0]).not.toBe(caller.signal);
    caller.abort();
    await expect(waiting).rejects.toMatchObject({ code: 'CANCELLED' });
  });
});
