/**
 * The Piscina worker pool (dist/workers/kernel-worker.js, started through kernel-entry.cjs, built
 * by the test setup) with small pools (2 threads): tensors of ~100k elements split across the
 * workers give the reference's and the inline kernels' bytes (inputs in ArrayBuffers and in SharedArrayBuffers); admission control
 * (OVERLOADED, idempotent release); cancellation (CANCELLED, a spinning task aborted at once);
 * worker death (WORKER_FAILED naming the tensor, the worker replaced); the backend loader
 * (BACKEND_UNAVAILABLE with a one-line reason, auto → native here); and pools that do not keep
 * the process alive once closed or destroyed.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  chooseTensorQParams,
  dequantizeTensor,
  fakeQuantizeTensor,
  fromFloat32,
  parseSpec,
  planLayout,
  quantizeTensor,
  type FloatDType,
  type FloatInput,
  type QParams,
  type QuantSpec,
  type QuantizedInput,
  type SpecOptions,
} from '../../src/core/index.js';
import { QuantdError } from '../../src/errors/index.js';
import {
  ADDON_PATH,
  InlineExecutor,
  KernelCompute,
  loadKernels,
  loadNative,
  type Executor,
  type KernelTask,
} from '../../src/kernels/index.js';
import { createCompute, KernelPool, PoolCompute, WORKER_PATH } from '../../src/pool/index.js';
import { referenceCompute } from '../../src/service/compute.js';
import {
  describeError,
  expectSameBytes,
  expectSameOutcome,
  expectSameQParams,
  expectSameTyped,
  settle,
  type Outcome,
} from '../kernels/helpers.js';

// The addon must be built here (node scripts/build-native.js): without it this file fails.
const native = loadKernels('native', '');
const module = native.module!;

/** Pools and computes a test made, ended after it whatever happened. */
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const clean of cleanups.splice(0).reverse()) await clean();
});
function pool(options: { threads: number; maxQueue?: number; testHooks?: boolean }): KernelPool {
  const before = process.env['QUANTD_TEST_HOOKS'];
  if (options.testHooks) process.env['QUANTD_TEST_HOOKS'] = '1';
  else delete process.env['QUANTD_TEST_HOOKS'];
  try {
    const p = new KernelPool({ ...options, backend: native.backend, isa: native.isa });
    cleanups.push(() => p.destroy());
    return p;
  } finally {
    if (before === undefined) delete process.env['QUANTD_TEST_HOOKS'];
    else process.env['QUANTD_TEST_HOOKS'] = before;
  }
}

/** Deterministic values: mostly N(0, σ)-ish, some exact zeros, halves and a few outliers. */
function values(n: number, seed: number): Float32Array {
  let s = seed >>> 0;
  const next = (): number => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    const u = next();
    if (u < 0.02) x[i] = 0;
    else if (u < 0.05) x[i] = Math.round(next() * 64 - 32) + 0.5;
    else if (u < 0.051) x[i] = (next() - 0.5) * 4000;
    else x[i] = (next() + next() + next() - 1.5) * (1 + (i % 7));
  }
  return x;
}

function inputOf(
  name: string,
  x: Float32Array,
  shape: number[],
  spec: QuantSpec,
  dtype: FloatDType,
  shared: boolean,
): FloatInput {
  const bytes = dtype === 'float32' ? new Uint8Array(x.buffer.slice(0)) : fromFloat32(x, dtype);
  const buffer = shared ? new SharedArrayBuffer(bytes.length) : new ArrayBuffer(bytes.length);
  const data = new Uint8Array(buffer);
  data.set(bytes);
  return { name, dtype, data, layout: planLayout(name, shape, spec) };
}

interface Case {
  readonly name: string;
  readonly options: SpecOptions;
  readonly shape: number[];
  readonly dtype?: FloatDType;
  readonly fake?: boolean;
  readonly given?: (spec: QuantSpec) => QParams;
}

const CASES: Case[] = [
  { name: 'per_tensor int8', options: { qdtype: 'int8' }, shape: [250, 400], fake: true },
  {
    name: 'per_tensor uint8 symmetric, bfloat16 input',
    options: { qdtype: 'uint8', mode: 'symmetric' },
    shape: [100_003],
    dtype: 'bfloat16',
    fake: true,
  },
  {
    name: 'per_channel int8 axis 1',
    options: { qdtype: 'int8', scheme: 'per_channel', axis: 1 },
    shape: [400, 250],
    fake: true,
  },
  {
    name: 'per_channel uint4 float_qparams axis 0',
    options: { qdtype: 'uint4', scheme: 'per_channel', mode: 'float_qparams' },
    shape: [97, 1031],
    fake: true,
  },
  {
    name: 'per_group int4 g128',
    options: { qdtype: 'int4', scheme: 'per_group', group_size: 128 },
    shape: [100, 1024],
  },
  {
    name: 'per_group int2 g64, float16 input',
    options: { qdtype: 'int2', scheme: 'per_group', group_size: 64 },
    shape: [50, 2048],
    dtype: 'float16',
  },
  { name: 'per_token int8 affine', options: { qdtype: 'int8', scheme: 'per_token' }, shape: [4, 100, 250] },
  {
    name: 'per_token int8 symmetric',
    options: { qdtype: 'int8', scheme: 'per_token', mode: 'symmetric' },
    shape: [400, 250],
  },
  { name: 'fp8 e4m3fn per_tensor', options: { qdtype: 'float8_e4m3fn' }, shape: [100_000] },
  {
    name: 'fp8 e5m2 per_channel axis 0',
    options: { qdtype: 'float8_e5m2', scheme: 'per_channel' },
    shape: [320, 320],
  },
  {
    name: 'per_channel int16 axis 0, given qparams',
    options: { qdtype: 'int16', scheme: 'per_channel' },
    shape: [256, 400],
    fake: true,
    given: () => ({
      scale: Float32Array.from({ length: 256 }, (_, c) => 2 ** -(c % 13)),
      zeroPoint: Int32Array.from({ length: 256 }, (_, c) => (c * 37) % 1000),
    }),
  },
];

/** Reference, inline kernels and pool agree on every op of the case. */
async function checkCase(pc: PoolCompute, c: Case, shared: boolean, seed: number): Promise<void> {
  const inline = new KernelCompute(new InlineExecutor(module), module.backend);
  const spec = parseSpec(c.options);
  const x = values(
    c.shape.reduce((p, d) => p * d, 1),
    seed,
  );
  const input = inputOf('model.layers.7.weight', x, c.shape, spec, c.dtype ?? 'float32', shared);
  const given = c.given?.(spec);
  const computes = [
    ['inline kernels', inline],
    ['pool', pc],
  ] as const;

  const refQ = await settle(() => quantizeTensor(input, spec, given));
  expect(refQ.ok, describeOutcome(refQ)).toBe(true);
  for (const [who, compute] of computes) {
    expectSameOutcome(
      `${who} quantize`,
      await settle(() => compute.quantize(input, spec, given)),
      refQ,
      (k, r) => {
        expectSameTyped(`${who} codes`, k.data, r.data);
        expectSameQParams(`${who} quantize`, k.qparams, r.qparams);
      },
    );
    expectSameOutcome(
      `${who} chooseQParams`,
      await settle(() => compute.chooseQParams(input, spec, given)),
      await settle(() => chooseTensorQParams(input, spec, given)),
      (k, r) => expectSameQParams(`${who} chooseQParams`, k, r),
    );
  }
  if (!refQ.ok) return;
  const codes = shared ? sharedCopy(refQ.value.data) : refQ.value.data;
  const q = { name: input.name, data: codes, spec, layout: input.layout, qparams: refQ.value.qparams };
  for (const out of ['float32', 'float16', 'bfloat16'] as const) {
    const ref = await settle(() => dequantizeTensor(q, out));
    for (const [who, compute] of computes) {
      expectSameOutcome(
        `${who} dequantize to ${out}`,
        await settle(() => compute.dequantize(q, out)),
        ref,
        (k, r) => expectSameBytes(`${who} dequantize to ${out}`, k, r, out === 'float32' ? 4 : 2),
      );
    }
  }
  if (!c.fake) return;
  for (const out of ['float32', 'bfloat16'] as const) {
    const ref = await settle(() => fakeQuantizeTensor(input, spec, out, given));
    expect(ref.ok, describeOutcome(ref)).toBe(true);
    for (const [who, compute] of computes) {
      expectSameOutcome(
        `${who} fakeQuantize to ${out}`,
        await settle(() => compute.fakeQuantize(input, spec, out, given)),
        ref,
        (k, r) => {
          expectSameBytes(`${who} fakeQuantize to ${out}`, k.data, r.data, out === 'float32' ? 4 : 2);
          expectSameTyped(`${who} fakeQuantize mask`, k.mask, r.mask);
          expectSameQParams(`${who} fakeQuantize`, k.qparams, r.qparams);
        },
      );
    }
  }
}

const describeOutcome = (o: Outcome<unknown>): string => (o.ok ? 'ok' : o.error);

/** The input quantized by the reference, ready to dequantize. */
function quantizedOf(input: FloatInput, spec: QuantSpec): QuantizedInput {
  const { data, qparams } = quantizeTensor(input, spec);
  return { name: input.name, data, spec, layout: input.layout, qparams };
}

function sharedCopy(bytes: Uint8Array): Uint8Array {
  const copy = new Uint8Array(new SharedArrayBuffer(bytes.length));
  copy.set(bytes);
  return copy;
}

function isQuantdError(err: unknown, code: string): err is QuantdError {
  return err instanceof QuantdError && err.code === code;
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (err) {
    return err;
  }
  throw new Error('expected a rejection, got a result');
}

describe('split/merge on the pool (inlineLimit 0, minPart 1024, 2 threads)', () => {
  it.each([
    ['ArrayBuffer', false],
    ['SharedArrayBuffer', true],
  ] as const)(
    'every scheme on ~100k elements in a %s equals the reference and the inline kernels',
    async (_, shared) => {
      const pc = new PoolCompute({ ...native, module }, { threads: 2, inlineLimit: 0, minPart: 1024 });
      cleanups.push(() => pc.close());
      const workers = pc.workers();
      const run = vi.spyOn(workers, 'run');
      let seed = shared ? 1000 : 1;
      for (const c of CASES) {
        try {
          await checkCase(pc, c, shared, seed++);
        } catch (err) {
          throw new Error(`${c.name}: ${(err as Error).message}`);
        }
      }
      // the pool did the work, split in 2 ranges (one per thread), in shared memory
      const calls = run.mock.calls;
      expect(calls.length).toBeGreaterThan(CASES.length);
      const ops = new Set(calls.filter(([tasks]) => tasks.length === 2).map(([tasks]) => tasks[0]!.op));
      expect([...ops].sort()).toEqual([
        'chooseQuantize',
        'convert',
        'dequantize',
        'fakeQuantize',
        'minmax',
        'quantize',
      ]);
      // tensor data crosses to the workers in shared memory (determine's per-unit minima and maxima
      // are small arrays that came back from the workers: they are copied)
      for (const [tasks] of calls) {
        for (const task of tasks) {
          if (task.op === 'determine') continue;
          for (const [key, value] of Object.entries(task)) {
            if (ArrayBuffer.isView(value) && !(value.buffer instanceof SharedArrayBuffer)) {
              throw new Error(`${task.op} task: ${key} is not in a SharedArrayBuffer`);
            }
          }
        }
      }
      expect(workers.pending).toBe(0);
    },
  );
});

describe('admission control', () => {
  it('threads 1 + maxQueue 1: two operations are admitted, the third is OVERLOADED; release is idempotent', () => {
    const p = pool({ threads: 1, maxQueue: 1 });
    const first = p.admit();
    const second = p.admit();
    expect(p.pending).toBe(2);
    const err = (() => {
      try {
        p.admit();
      } catch (e) {
        return e;
      }
      return null;
    })();
    expect(isQuantdError(err, 'OVERLOADED'), describeError(err)).toBe(true);
    expect((err as QuantdError).message).toBe('the server is busy (2 jobs queued, limit 2); retry later');
    expect(p.pending).toBe(2);

    first();
    first(); // a second release of the same admission changes nothing
    expect(p.pending).toBe(1);
    const third = p.admit();
    expect(p.pending).toBe(2);
    expect(() => p.admit()).toThrow(QuantdError);
    second();
    third();
    third();
    expect(p.pending).toBe(0);
    p.admit()();
    expect(p.pending).toBe(0);
  });

  it('PoolCompute admits each operation: a second concurrent one on threads 1 + maxQueue 0 is OVERLOADED', async () => {
    const pc = new PoolCompute({ ...native, module }, { threads: 1, maxQueue: 0, inlineLimit: 0 });
    cleanups.push(() => pc.close());
    const spec = parseSpec({ qdtype: 'int8' });
    const input = inputOf('t', values(4096, 7), [4096], spec, 'float32', false);
    const first = pc.quantize(input, spec);
    const second = await settle(() => pc.quantize(input, spec));
    expect(second.ok ? 'ok' : second.error).toMatch(/^OVERLOADED: /);
    expectSameTyped('codes', (await first).data, quantizeTensor(input, spec).data);
    expect(pc.workers().pending).toBe(0);
    // released: the next one is admitted
    expectSameTyped('codes', (await pc.quantize(input, spec)).data, quantizeTensor(input, spec).data);
  });

  it('inlineUntilReady: an op runs in the calling thread until a worker has loaded the kernels, then on the pool', async () => {
    const pc = new PoolCompute({ ...native, module }, { threads: 1, inlineLimit: 0, inlineUntilReady: true });
    cleanups.push(() => pc.close());
    const spec = parseSpec({ qdtype: 'int4', scheme: 'per_group', group_size: 32 });
    const input = inputOf('t', values(64 * 128, 11), [64, 128], spec, 'float32', true);
    const expected = quantizeTensor(input, spec).data;
    const pool = pc.workers();
    expect(pool.ready).toBe(false); // the thread is still loading
    const inline = pc.quantize(input, spec);
    expect(pool.pending).toBe(0); // not admitted to the pool
    expectSameTyped('codes', (await inline).data, expected);
    await vi.waitFor(() => expect(pool.ready).toBe(true), { timeout: 20_000, interval: 5 });
    const pooled = pc.quantize(input, spec);
    expect(pool.pending).toBe(1);
    expectSameTyped('codes', (await pooled).data, expected);
  });

  it('a closed pool admits nothing (CANCELLED)', async () => {
    const p = pool({ threads: 1 });
    await p.close();
    const err = (() => {
      try {
        p.admit();
      } catch (e) {
        return e;
      }
      return null;
    })();
    expect(isQuantdError(err, 'CANCELLED'), describeError(err)).toBe(true);
  });
});

describe('cancellation (QUANTD_TEST_HOOKS=1)', () => {
  const spec = parseSpec({ qdtype: 'int8', scheme: 'per_channel', axis: 0 });
  const x = values(64 * 1024, 3);

  it('spinning tasks aborted after ~100 ms reject at once and free their workers; the pool still runs tasks', async () => {
    const p = pool({ threads: 2, testHooks: true });
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), 100);
    const t0 = performance.now();
    // one per worker: both threads are held until the abort terminates them
    const spins = [1, 2].map(() => rejection(p.runTestTask({ op: '__spin', ms: 5000 }, controller.signal)));
    const errors = await Promise.all(spins);
    const elapsed = performance.now() - t0;
    clearTimeout(timer);
    for (const err of errors) expect((err as Error).name, describeError(err)).toBe('AbortError');
    expect(elapsed).toBeGreaterThanOrEqual(90);
    expect(elapsed).toBeLessThan(1500);

    // both workers were replaced (a spinning one would hold its thread for 5 s)
    const compute = new KernelCompute(p, 'native', { minPart: 1024 });
    const input = inputOf('w', x, [64, 1024], spec, 'float32', true);
    const r = await compute.quantize(input, spec);
    expectSameTyped('codes after the abort', r.data, quantizeTensor(input, spec).data);
    expect(performance.now() - t0).toBeLessThan(2500);
  });

  it('PoolCompute: an aborted op is CANCELLED and releases its admission', async () => {
    const pc = new PoolCompute(
      { ...native, module },
      { threads: 2, maxQueue: 0, inlineLimit: 0, minPart: 1024 },
    );
    cleanups.push(() => pc.close());
    const input = inputOf('w', x, [64, 1024], spec, 'float32', false);
    for (let i = 0; i < 3; i++) {
      const aborted = await settle(() =>
        pc.dequantize(quantizedOf(input, spec), 'float16', AbortSignal.abort()),
      );
      expect(aborted.ok ? 'ok' : aborted.error).toBe('CANCELLED: the request was cancelled');
    }
    expect(pc.workers().pending).toBe(0);
    const r = await pc.dequantize(quantizedOf(input, spec), 'float16');
    expectSameBytes(
      'dequantized after cancellation',
      r,
      dequantizeTensor(quantizedOf(input, spec), 'float16'),
      2,
    );
  });

  it('an op with an already-aborted signal is CANCELLED; so is one aborted while queued', async () => {
    const p = pool({ threads: 2, testHooks: true });
    const compute = new KernelCompute(p, 'native', { minPart: 1024 });
    const input = inputOf('w', x, [64, 1024], spec, 'float32', false);

    const aborted = await settle(() => compute.quantize(input, spec, undefined, AbortSignal.abort()));
    expect(aborted.ok ? 'ok' : aborted.error).toBe('CANCELLED: the request was cancelled');

    // both workers busy: the op's tasks wait in Piscina's queue when the signal fires
    const busy = [p.runTestTask({ op: '__spin', ms: 600 }), p.runTestTask({ op: '__spin', ms: 600 })];
    const controller = new AbortController();
    const t0 = performance.now();
    const queued = settle(() => compute.fakeQuantize(input, spec, 'float32', undefined, controller.signal));
    setTimeout(() => controller.abort(), 50);
    const outcome = await queued;
    expect(outcome.ok ? 'ok' : outcome.error).toBe('CANCELLED: the request was cancelled');
    expect(performance.now() - t0).toBeLessThan(500);
    await Promise.all(busy);

    const r = await compute.fakeQuantize(input, spec, 'float32');
    expectSameBytes(
      'fake-quantized after cancellation',
      r.data,
      fakeQuantizeTensor(input, spec, 'float32').data,
      4,
    );
  });
});

describe('worker death', () => {
  const spec = parseSpec({ qdtype: 'int4', scheme: 'per_group', group_size: 128 });
  const x = values(64 * 1024, 5);

  it('a worker that exits fails its task; the pool replaces it and a real op then succeeds', async () => {
    const p = pool({ threads: 2, testHooks: true });
    const err = await rejection(p.runTestTask({ op: '__exit' }));
    expect((err as Error).message).toMatch(/exited/);
    const compute = new KernelCompute(p, 'native', { minPart: 1024 });
    const input = inputOf('w', x, [64, 1024], spec, 'float32', false);
    for (let i = 0; i < 3; i++) {
      const r = await compute.quantize(input, spec);
      expectSameTyped('codes after a worker died', r.data, quantizeTensor(input, spec).data);
    }
  });

  it('run() maps a worker death to WORKER_FAILED naming the tensor, also through KernelCompute', async () => {
    const p = pool({ threads: 2, testHooks: true });
    const exit = { op: '__exit' } as unknown as KernelTask;

    const direct = await settle(() => p.run([exit], 'model.embed.weight'));
    expect(direct.ok ? 'ok' : direct.error.split(':')[0]).toBe('WORKER_FAILED');
    expect(direct.ok ? 'ok' : direct.error).toMatch(
      /^WORKER_FAILED: a worker died while processing tensor model\.embed\.weight \(worker exited with code: 7\); it has been replaced$/,
    );

    // KernelCompute over the pool, its first task of each op swapped for one that kills its worker
    const dying: Executor = {
      parallelism: p.parallelism,
      shared: p.shared,
      run: (tasks, tensor, signal) => p.run([exit, ...tasks.slice(1)], tensor, signal),
    };
    const input = inputOf('model.layers.3.weight', x, [64, 1024], spec, 'float32', false);
    const viaCompute = await settle(() =>
      new KernelCompute(dying, 'native', { minPart: 1024 }).quantize(input, spec),
    );
    expect(viaCompute.ok ? 'ok' : viaCompute.error).toMatch(
      /^WORKER_FAILED: a worker died while processing tensor model\.layers\.3\.weight \(.*\); it has been replaced$/,
    );

    const r = await new KernelCompute(p, 'native', { minPart: 1024 }).quantize(input, spec);
    expectSameTyped('codes after WORKER_FAILED', r.data, quantizeTensor(input, spec).data);
  });

  it('without QUANTD_TEST_HOOKS the workers refuse test tasks (INTERNAL, the worker survives)', async () => {
    const p = pool({ threads: 1 });
    const refused = await settle(() => p.run([{ op: '__exit' } as unknown as KernelTask], 'w'));
    expect(refused.ok ? 'ok' : refused.error).toBe(
      'INTERNAL: internal error: worker: INTERNAL: unknown task __exit',
    );
    const input = inputOf('w', x, [64, 1024], spec, 'float32', true);
    const r = await new KernelCompute(p, 'native').quantize(input, spec);
    expectSameTyped('codes', r.data, quantizeTensor(input, spec).data);
  });
});

describe('backend loader', () => {
  it.each([
    ['native', 'simd128', /simd128/],
    ['wasm', 'avx2', /avx2/],
    ['bogus', '', /native, wasm, js or auto/],
    ['bogus', 'avx2', /native, wasm, js or auto/],
    // auto with an x86 ISA the CPU lacks: an error naming it, not a silent fall back to wasm
    ['auto', 'avx9000', /QUANTD_ISA=avx9000 was asked for/],
  ] as const)(
    'loadKernels(%j, %j) throws BACKEND_UNAVAILABLE with a one-line reason',
    (backend, isa, reason) => {
      let err: unknown = null;
      try {
        loadKernels(backend, isa);
      } catch (e) {
        err = e;
      }
      expect(isQuantdError(err, 'BACKEND_UNAVAILABLE'), describeError(err)).toBe(true);
      const message = (err as QuantdError).message;
      expect(message).not.toContain('\n');
      const named = backend === 'auto' ? 'native' : backend;
      expect(message.startsWith(`kernel backend ${named} is unavailable: `), message).toBe(true);
      expect(message).toMatch(reason);
    },
  );

  it('the native addon is built, and auto picks native with the best ISA, no fallbacks', () => {
    expect(existsSync(ADDON_PATH), `${ADDON_PATH} (node scripts/build-native.js)`).toBe(true);
    expect(existsSync(WORKER_PATH), `${WORKER_PATH} (built by the test setup)`).toBe(true);
    const auto = loadKernels('auto', '');
    expect(auto.backend).toBe('native');
    expect(auto.fallbacks).toEqual([]);
    expect(auto.module?.backend).toBe('native');
    expect(auto.isa).toBe(loadNative('').isa);
    expect(['avx512', 'avx2', 'scalar']).toContain(auto.isa);
    expect(loadKernels('native', '').isa).toBe(auto.isa);
  });

  it('auto with QUANTD_ISA=scalar still falls back to a wasm scalar build only if native cannot load', () => {
    const k = loadKernels('auto', 'scalar');
    expect(k.backend).toBe('native');
    expect(k.isa).toBe('scalar');
  });

  it("js is the TypeScript reference; createCompute('js') has no pool", async () => {
    expect(loadKernels('js', 'avx2')).toEqual({ backend: 'js', isa: 'ts', module: null, fallbacks: [] });
    const handle = createCompute({ backend: 'js' });
    cleanups.push(() => handle.close());
    expect(handle.compute).toBe(referenceCompute);
    expect(handle.pool).toBeNull();
  });

  it('createCompute(native) computes on the pool', async () => {
    const handle = createCompute({ backend: 'native', isa: '', threads: 2, inlineLimit: 0, minPart: 1024 });
    cleanups.push(() => handle.close());
    expect(handle.kernels.backend).toBe('native');
    const spec = parseSpec({ qdtype: 'uint8' });
    const input = inputOf('t', values(10_000, 9), [10_000], spec, 'float32', false);
    const r = await handle.compute.quantize(input, spec);
    expect(handle.pool?.started).toBe(true);
    expectSameTyped('codes', r.data, quantizeTensor(input, spec).data);
  });
});

describe('process lifetime', () => {
  const distUrl = (path: string): string =>
    pathToFileURL(fileURLToPath(new URL(`../../dist/src/${path}`, import.meta.url))).href;

  /** Runs a module script in a fresh node; resolves with its exit code, or 'hung' after `ms`. */
  function runScript(body: string, ms: number): Promise<{ code: number | 'hung'; out: string }> {
    const script = `
      import { loadKernels } from ${JSON.stringify(distUrl('kernels/index.js'))};
      import { KernelPool, PoolCompute } from ${JSON.stringify(distUrl('pool/index.js'))};
      import { parseSpec, planLayout } from ${JSON.stringify(distUrl('core/index.js'))};
      const k = loadKernels('native', '');
      const spec = parseSpec({ qdtype: 'int8' });
      const x = new Float32Array(50000).map((_, i) => Math.sin(i));
      const input = { name: 't', dtype: 'float32', data: new Uint8Array(x.buffer), layout: planLayout('t', [50000], spec) };
      ${body}
      console.log('end of script');
    `;
    return new Promise((resolve) => {
      const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      child.stderr.on('data', (d: Buffer) => (out += d.toString()));
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        resolve({ code: 'hung', out });
      }, ms);
      child.on('exit', (code) => {
        clearTimeout(timer);
        resolve({ code: code ?? -1, out });
      });
    });
  }

  it.each([
    [
      'PoolCompute.close()',
      `const pc = new PoolCompute({ ...k, module: k.module }, { threads: 2, inlineLimit: 0, minPart: 1024 });
       await pc.quantize(input, spec);
       await new Promise((r) => setTimeout(r, 50)); // idle
       await pc.close();`,
    ],
    [
      'KernelPool.destroy()',
      `const pool = new KernelPool({ threads: 2, backend: k.backend, isa: k.isa });
       await pool.run([{ op: 'convert', kind: 2, input: new Float32Array(new SharedArrayBuffer(64)), out: new Uint16Array(new SharedArrayBuffer(32)) }], 't');
       await new Promise((r) => setTimeout(r, 50)); // idle
       await pool.destroy();`,
    ],
  ])('an idle pool ended with %s lets the process exit', async (_, body) => {
    const { code, out } = await runScript(body, 15_000);
    expect(code, out).toBe(0);
    expect(out).toContain('end of script');
  });
});
