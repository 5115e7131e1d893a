/**
 * executePlan, in process: steps run concurrently within a byte budget and are written in plan
 * order, so the output never depends on concurrency, the budget or which step finishes first;
 * the budget holds; the error of a run is that of its first failing step in plan order, after
 * which nothing is written and nothing is left running; an AbortSignal cancels a run.
 *
 * A wrapper around the compute delays steps by name (so that completion order differs from plan
 * order) and counts the calls in flight; a wrapper around the source and sink tracks the bytes
 * each step holds from its first read until its last output is written.
 */
import { describe, expect, it } from 'vitest';

import { QuantdError } from '../../src/errors/index.js';
import { parseSafetensors, serializeSafetensors, type TensorEntry } from '../../src/format/index.js';
import { createCompute } from '../../src/pool/index.js';
import {
  combineRecipe,
  executePlan,
  planOperation,
  referenceCompute,
  stepCost,
  type Compute,
  type ExecuteOptions,
  type Plan,
  type TensorSink,
  type TensorSource,
} from '../../src/service/index.js';
import { plantedBytes, type PlantedSpec } from './helpers.js';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

type Spec = PlantedSpec;

const floatBytes = (spec: Spec, seed: number): Uint8Array => plantedBytes(spec, seed);

/** A model in memory and the plan of a recipe run over it. */
function model(specs: readonly Spec[]): { plan: Plan; bytes: Uint8Array } {
  const bytes = serializeSafetensors(
    specs.map((s, k) => ({ ...s, data: floatBytes(s, 1000 + k) })),
    null,
  );
  const { header } = parseSafetensors(bytes, 'model');
  const recipe = combineRecipe({
    defaults: { qdtype: 'int8', scheme: 'per_channel' },
    rules: ['*.mlp.*:qdtype=int4,scheme=per_group,group_size=32,mode=symmetric'],
  });
  const plan = planOperation(
    header,
    { op: 'quantize', spec: recipe.defaultSpec!, recipe, outDType: 'float32', include: [], exclude: [] },
    'model',
  );
  return { plan, bytes };
}

function layers(n: number, plants: Readonly<Record<number, Spec['plant']>> = {}): Spec[] {
  const out: Spec[] = [];
  for (let i = 0; i < n; i++) {
    out.push(
      { name: `l${i}.norm`, dtype: 'F32', shape: [64] },
      {
        name: `l${i}.attn.w`,
        dtype: i % 2 ? 'BF16' : 'F32',
        shape: [32 + 8 * (i % 3), 64],
        plant: plants[i],
      },
      { name: `l${i}.mlp.w`, dtype: 'BF16', shape: [48, 64] },
    );
  }
  return out;
}

interface Instrumented {
  readonly source: TensorSource;
  readonly sink: TensorSink;
  readonly compute: Compute;
  readonly writes: Array<[string, Uint8Array]>;
  /** Kernel calls in flight now, and the most at once. */
  inFlight: number;
  maxInFlight: number;
  /** stepCost bytes of steps between their first read and their last write: now, and the most. */
  held: number;
  maxHeld: number;
  maxHeldSteps: number;
  /** Signals the compute was given that were aborted while the call ran. */
  abortedCalls: number;
  /** Step indexes in the order their first read came. */
  readonly started: number[];
}

/**
 * Source, sink and compute over `bytes`, instrumented. `delay(name)` is how long the kernel call
 * for a tensor waits first (so later steps may finish earlier).
 */
function instrument(
  plan: Plan,
  bytes: Uint8Array,
  inner: Compute = referenceCompute,
  delay: (name: string) => number = () => 0,
): Instrumented {
  const file = parseSafetensors(bytes, 'model');
  const stepOf = new Map<string, number>();
  const lastOutput = new Map<string, number>();
  plan.steps.forEach((s, k) => {
    if (s.kind !== 'dequantize') stepOf.set(s.entry.name, k);
    lastOutput.set(s.outputs.at(-1)!.name, k);
  });
  const holding = new Set<number>();
  const state: Instrumented = {
    writes: [],
    inFlight: 0,
    maxInFlight: 0,
    held: 0,
    maxHeld: 0,
    maxHeldSteps: 0,
    abortedCalls: 0,
    started: [],
    source: {
      async read(entry: TensorEntry, shared = false): Promise<Uint8Array> {
        const k = stepOf.get(entry.name);
        if (k !== undefined && !holding.has(k)) {
          holding.add(k);
          if (!state.started.includes(k)) state.started.push(k);
          state.held += stepCost(plan.steps[k]!);
          state.maxHeld = Math.max(state.maxHeld, state.held);
          state.maxHeldSteps = Math.max(state.maxHeldSteps, holding.size);
        }
        await sleep(0);
        const view = file.tensorBytes(entry);
        const out = new Uint8Array(
          shared ? new SharedArrayBuffer(view.length) : new ArrayBuffer(view.length),
        );
        out.set(view);
        return out;
      },
    },
    sink: {
      async write(name: string, data: Uint8Array): Promise<void> {
        state.writes.push([name, data.slice()]);
        const k = lastOutput.get(name);
        if (k !== undefined && holding.delete(k)) state.held -= stepCost(plan.steps[k]!);
        await sleep(0);
      },
    },
    compute: {
      ...inner,
      backend: inner.backend,
      ...(inner.sharedInputs !== undefined && { sharedInputs: inner.sharedInputs }),
      quantize: async (input, spec, given, signal, options) => {
        state.inFlight++;
        state.maxInFlight = Math.max(state.maxInFlight, state.inFlight);
        try {
          const ms = delay(input.name);
          if (ms > 0) await sleep(ms);
          return await inner.quantize(input, spec, given, signal, options);
        } finally {
          if (signal?.aborted) state.abortedCalls++;
          state.inFlight--;
        }
      },
    },
  };
  return state;
}

/** Deterministic per-name delays, 0–7 ms, so that steps finish out of order. */
const jitter = (name: string): number => [...name].reduce((h, c) => (h * 31 + c.charCodeAt(0)) >>> 0, 7) % 8;

async function run(
  plan: Plan,
  bytes: Uint8Array,
  options: ExecuteOptions,
  inner?: Compute,
  delay: (name: string) => number = jitter,
) {
  const t = instrument(plan, bytes, inner, delay);
  const summary = await executePlan(plan, t.source, t.sink, t.compute, { quality: true, ...options });
  return { t, summary };
}

async function rejection(p: Promise<unknown>): Promise<QuantdError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(QuantdError);
    return err as QuantdError;
  }
  throw new Error('expected the run to fail');
}

describe('executePlan: concurrency and the budget never change the output', () => {
  const { plan, bytes } = model(layers(8));
  const expectedNames = plan.tensors.map((t) => t.name);

  it('concurrency 1 / 8 and a tiny / no budget: identical writes, in identical (plan) order', async () => {
    const base = await run(plan, bytes, { concurrency: 1 });
    expect(base.t.writes.map(([n]) => n)).toEqual(expectedNames);
    expect(base.summary).toMatchObject({ transformed: 16, passedThrough: 8 });
    for (const options of [
      { concurrency: 8 },
      { concurrency: 8, memoryBudget: 1 },
      { concurrency: 8, memoryBudget: Infinity },
      { concurrency: 3, memoryBudget: 40 * 2 ** 20 },
      { concurrency: 1, memoryBudget: 1 },
    ]) {
      const r = await run(plan, bytes, options);
      expect(
        r.t.writes.map(([n]) => n),
        JSON.stringify(options),
      ).toEqual(expectedNames);
      r.t.writes.forEach(([name, data], k) => {
        expect(
          Buffer.from(data).equals(Buffer.from(base.t.writes[k]![1])),
          `${name} ${JSON.stringify(options)}`,
        ).toBe(true);
      });
      expect(r.summary).toEqual(base.summary);
    }
  });

  it('steps really do run at once when concurrency and budget allow, and never more', async () => {
    const wide = await run(plan, bytes, { concurrency: 8 }, undefined, () => 5);
    expect(wide.t.maxInFlight).toBeGreaterThan(1);
    expect(wide.t.maxInFlight).toBeLessThanOrEqual(8);
    const one = await run(plan, bytes, { concurrency: 1 }, undefined, () => 2);
    expect(one.t.maxInFlight).toBe(1);
  });

  it('the memory budget is respected: steps held together stay within it', async () => {
    const costs = plan.steps.map(stepCost);
    const quantizeCost = Math.max(...plan.steps.filter((s) => s.kind !== 'copy').map(stepCost));
    for (const budget of [1, quantizeCost, 2 * quantizeCost + 1, 3.5 * quantizeCost]) {
      const r = await run(plan, bytes, { concurrency: 8, memoryBudget: budget }, undefined, () => 3);
      if (r.t.maxHeldSteps > 1) expect(r.t.maxHeld, `budget ${budget}`).toBeLessThanOrEqual(budget);
      if (budget < Math.min(...costs)) expect(r.t.maxHeldSteps, 'a tiny budget: one step at a time').toBe(1);
    }
    // a budget of three quantize steps lets more than one run: it is a budget, not a lock
    const roomy = await run(
      plan,
      bytes,
      { concurrency: 8, memoryBudget: 3.5 * quantizeCost },
      undefined,
      () => 3,
    );
    expect(roomy.t.maxHeldSteps).toBeGreaterThan(1);
    expect(roomy.t.maxHeld).toBeLessThanOrEqual(3.5 * quantizeCost);
  });

  it('the worker-pool compute gives the reference compute bytes at concurrency 8', async () => {
    const handle = createCompute();
    try {
      const base = await run(plan, bytes, { concurrency: 1 });
      const pooled = await run(plan, bytes, { concurrency: 8, releaseOutputs: false }, handle.compute);
      expect(pooled.t.writes.map(([n]) => n)).toEqual(expectedNames);
      pooled.t.writes.forEach(([name, data], k) => {
        expect(Buffer.from(data).equals(Buffer.from(base.t.writes[k]![1])), name).toBe(true);
      });
    } finally {
      await handle.close();
    }
  });
});

describe('executePlan: the first failure in plan order', () => {
  // layer 1's attention (step 4) holds a NaN and is slow; layer 5's (step 16) an Inf and is fast
  const { plan, bytes } = model(layers(8, { 1: { 5: NaN }, 5: { 0: Infinity } }));
  const slowFirst = (name: string): number => (name === 'l1.attn.w' ? 60 : name === 'l5.attn.w' ? 0 : 2);
  const failing = plan.steps.findIndex((s) => s.kind !== 'dequantize' && s.entry.name === 'l1.attn.w');
  const before = plan.steps.slice(0, failing).flatMap((s) => s.outputs.map((o) => o.name));

  for (const concurrency of [1, 8]) {
    it(`concurrency ${concurrency}: the error of the first failing step, nothing written after it, nothing left running`, async () => {
      const t = instrument(plan, bytes, referenceCompute, slowFirst);
      const err = await rejection(
        executePlan(plan, t.source, t.sink, t.compute, { concurrency, quality: true }),
      );
      expect(err.code).toBe('INPUT_NOT_FINITE');
      expect(err.message).toContain('l1.attn.w');
      expect(err.message).not.toContain('l5.attn.w');
      expect(t.inFlight, 'kernel calls still running when executePlan rejected').toBe(0);
      expect(t.writes.map(([n]) => n)).toEqual(before);
      await sleep(80);
      expect(
        t.writes.map(([n]) => n),
        'writes after the run failed',
      ).toEqual(before);
      expect(t.inFlight).toBe(0);
    });
  }

  it('a later step failing first stops new steps from starting', async () => {
    const { plan: p, bytes: b } = model(layers(12, { 1: { 5: NaN }, 5: { 0: Infinity } }));
    const t = instrument(p, b, referenceCompute, slowFirst);
    await rejection(executePlan(p, t.source, t.sink, t.compute, { concurrency: 8, quality: true }));
    const fast = p.steps.findIndex((s) => s.kind !== 'dequantize' && s.entry.name === 'l5.attn.w');
    expect(t.started).toContain(fast);
    // steps start in plan order, at most 8 at once: none beyond the 8 after the failed one
    expect(Math.max(...t.started)).toBeLessThan(fast + 8);
    expect(t.started.length).toBeLessThan(p.steps.length);
  });

  it('on the worker pool too: the first failing step in plan order, and the pool still works after', async () => {
    // tensors over the pool's inline limit (256K elements) run on worker threads; in-flight
    // tasks of later steps are aborted when the run fails
    const big: Spec[] = [];
    for (let i = 0; i < 10; i++) {
      const plant: Spec['plant'] = i === 3 ? { 70_000: NaN } : i === 6 ? { 0: -Infinity } : undefined;
      big.push({ name: `b${i}.attn.w`, dtype: 'F32', shape: [512, 512], ...(plant && { plant }) });
    }
    const { plan: p, bytes: b } = model(big);
    const handle = createCompute();
    try {
      const t = instrument(p, b, handle.compute);
      const err = await rejection(
        executePlan(p, t.source, t.sink, t.compute, { concurrency: 8, quality: true }),
      );
      expect(err.code).toBe('INPUT_NOT_FINITE');
      expect(err.message).toContain('b3.attn.w');
      expect(t.writes.map(([n]) => n)).toEqual(p.tensors.slice(0, 9).map((x) => x.name));
      expect(t.inFlight).toBe(0);
      const { plan: ok, bytes: okBytes } = model(big.slice(0, 3));
      const again = await run(ok, okBytes, { concurrency: 8 }, handle.compute);
      expect(again.t.writes).toHaveLength(9);
    } finally {
      await handle.close();
    }
  });

  it('a failing sink write is the error of the run, and nothing is written after it', async () => {
    const { plan: p, bytes: b } = model(layers(4));
    const t = instrument(p, b);
    const sink: TensorSink = {
      async write(name, data) {
        if (name === 'l1.attn.w.scale') throw new QuantdError('STORAGE_FULL', { path: 'out' });
        return t.sink.write(name, data);
      },
    };
    const err = await rejection(executePlan(p, t.source, sink, t.compute, { concurrency: 4 }));
    expect(err.code).toBe('STORAGE_FULL');
    expect(t.writes.at(-1)![0]).toBe('l1.attn.w');
    expect(t.inFlight).toBe(0);
  });
});

describe('executePlan: cancellation', () => {
  const { plan, bytes } = model(layers(6));

  it('an aborted signal before the run: CANCELLED, nothing written', async () => {
    const t = instrument(plan, bytes);
    const controller = new AbortController();
    controller.abort();
    const err = await rejection(
      executePlan(plan, t.source, t.sink, t.compute, { concurrency: 4, signal: controller.signal }),
    );
    expect(err.code).toBe('CANCELLED');
    expect(t.writes).toEqual([]);
  });

  it('aborting mid-run (between steps): CANCELLED, the writes stop, nothing left running', async () => {
    const t = instrument(plan, bytes, referenceCompute, () => 3);
    const controller = new AbortController();
    const sink: TensorSink = {
      async write(name, data) {
        await t.sink.write(name, data);
        if (name === 'l1.norm') controller.abort();
      },
    };
    const err = await rejection(
      executePlan(plan, t.source, sink, t.compute, { concurrency: 1, signal: controller.signal }),
    );
    expect(err.code).toBe('CANCELLED');
    const written = t.writes.length;
    expect(written).toBeLessThan(plan.tensors.length);
    expect(t.inFlight).toBe(0);
    await sleep(30);
    expect(t.writes.length).toBe(written);
  });

  it('a QuantdError as the abort reason (a timeout) is the error thrown', async () => {
    const t = instrument(plan, bytes, referenceCompute, () => 3);
    const controller = new AbortController();
    const sink: TensorSink = {
      async write(name, data) {
        await t.sink.write(name, data);
        if (name === 'l0.mlp.w') controller.abort(new QuantdError('REQUEST_TIMEOUT', { ms: 5 }));
      },
    };
    const err = await rejection(
      executePlan(plan, t.source, sink, t.compute, { concurrency: 2, signal: controller.signal }),
    );
    expect(err.code).toBe('REQUEST_TIMEOUT');
  });

  it('an abort after every step has started still cancels the run (the writes check the signal)', async () => {
    // Bug: executePlan checks the signal only when a step starts. With concurrency >= the number
    // of steps every step has started before the first write, so a cancellation that arrives
    // while outputs are being written is ignored and the run "succeeds" (a cancelled job or a
    // request whose client left is completed and reported as done).
    const t = instrument(plan, bytes);
    const controller = new AbortController();
    const sink: TensorSink = {
      async write(name, data) {
        await t.sink.write(name, data);
        if (name === 'l0.norm') controller.abort();
      },
    };
    const outcome = await executePlan(plan, t.source, sink, t.compute, {
      concurrency: 64,
      signal: controller.signal,
    }).then(
      () => 'resolved',
      (err: unknown) => (err instanceof QuantdError ? err.code : String(err)),
    );
    expect(outcome).toBe('CANCELLED');
    expect(t.writes.length).toBeLessThan(plan.tensors.length);
  });
});

describe('executePlan: buffers handed back to the compute', () => {
  // Bug (in the allocate/release change to execute.ts): a copy step's input is its output, and
  // with releaseOutputs both loops hand it back — the same buffer released twice. BufferArena
  // happens to ignore a buffer already in its free list, but a Compute whose release is not
  // idempotent would hand one buffer to two later reads.
  const { plan, bytes } = model(layers(4));

  for (const releaseOutputs of [true, false]) {
    it(`releaseOutputs ${releaseOutputs}: no buffer is released twice${releaseOutputs ? '' : ', no output at all'}`, async () => {
      const t = instrument(plan, bytes);
      const released = new Map<ArrayBufferLike, number>();
      const outputs = new Set<ArrayBufferLike>();
      const compute: Compute = {
        ...t.compute,
        release: (d) => void released.set(d.buffer, (released.get(d.buffer) ?? 0) + 1),
      };
      const sink: TensorSink = {
        async write(name, data) {
          outputs.add(data.buffer);
          return t.sink.write(name, data);
        },
      };
      await executePlan(plan, t.source, sink, compute, { concurrency: 4, releaseOutputs });
      const twice = [...released.values()].filter((n) => n > 1).length;
      expect(twice, 'buffers released more than once').toBe(0);
      if (!releaseOutputs) {
        expect(
          [...outputs].filter((b) => released.has(b)).length,
          'outputs released though the caller owns them',
        ).toBe(0);
      }
    });
  }
});
