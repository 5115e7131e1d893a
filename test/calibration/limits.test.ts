/**
 * What calibration state may cost (src/service/calibration/limits.ts), on the store alone: every
 * bound refuses before any work — a histogram's bins when the recipe is read, channels and
 * in_features by the batch's shape, a session's bytes and the server's budget before the
 * compute is called — and an import is checked like a creation (ttl_seconds capped, counts that
 * are counts, 1e300 in any number a catalogued 400). Tensors called __proto__, constructor or
 * prototype are kept through the session file and a restart. The issue's own vectors against a
 * real server are in test/reliability/calibration.test.ts.
 */
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { referenceCompute, type Compute } from '../../src/core/compute.js';
import { isQuantdError } from '../../src/errors/index.js';
import { serializeSafetensors } from '../../src/format/safetensors.js';
import { exportObserver } from '../../src/format/observer-state.js';
import { newObserverState, observe, observerConfig } from '../../src/core/observers/index.js';
import { serverBudget, type CalibrationLimits } from '../../src/service/calibration/limits.js';
import { loadConfig } from '../../src/config.js';
import { cgroupLimit } from '../../src/service/host-memory.js';
import { CalibrationSession } from '../../src/service/calibration/session.js';
import { CalibrationStore } from '../../src/service/calibration/store.js';
import { tempDir } from '../jobs/helpers.js';

const root = tempDir('calibration-limits');
afterAll(() => rmSync(root, { recursive: true, force: true }));

const LIMITS: CalibrationLimits = {
  maxBins: 4096,
  maxChannels: 64,
  maxFeatures: 128,
  sessionBytes: 1024 * 1024,
};

let dirs = 0;
/** A started store on a fresh data directory (its path too, for a restart on it). */
async function store(
  options: { limits?: CalibrationLimits; budgetBytes?: number; compute?: Compute } = {},
): Promise<{ store: CalibrationStore; dataDir: string }> {
  const dataDir = join(root, String(dirs++));
  const s = new CalibrationStore({
    dataDir,
    compute: options.compute ?? referenceCompute,
    limits: options.limits ?? LIMITS,
    ...(options.budgetBytes !== undefined && { budgetBytes: options.budgetBytes }),
  });
  await s.start();
  return { store: s, dataDir };
}

/** A batch: float32 tensors of the given shapes, values i % 7 - 3. */
function batch(...tensors: [string, number[]][]): Uint8Array {
  return serializeSafetensors(
    tensors.map(([name, shape]) => {
      const n = shape.reduce((a, b) => a * b, 1);
      const x = Float32Array.from({ length: n }, (_, i) => (i % 7) - 3);
      return { name, dtype: 'F32' as const, shape, data: new Uint8Array(x.buffer) };
    }),
    null,
  );
}

/** The catalogued code and HTTP status `work` fails with (it must fail). */
async function codeOf(work: () => unknown): Promise<{ code: string; status: number }> {
  try {
    await work();
  } catch (err) {
    return isQuantdError(err)
      ? { code: err.code, status: err.httpStatus }
      : { code: `not catalogued: ${String(err)}`, status: 0 };
  }
  throw new Error('it did not fail');
}

/** A compute that counts its calls: a refusal must come before any. */
function counting(): Compute & { calls: number } {
  const c = {
    ...referenceCompute,
    calls: 0,
    observe: (call: Parameters<NonNullable<Compute['observe']>>[0]) => {
      c.calls++;
      return referenceCompute.observe!(call);
    },
    accumulateStats: (call: Parameters<NonNullable<Compute['accumulateStats']>>[0]) => {
      c.calls++;
      return referenceCompute.accumulateStats!(call);
    },
  };
  return c;
}

const recipeOf = (rule: Record<string, unknown>): { observers: unknown[] } => ({
  observers: [{ match: '*', ...rule }],
});

describe('bounds checked before any work', () => {
  it('refuses histogram bins past QUANTD_CALIBRATION_MAX_BINS, and a merge grid past 128 times that, when the recipe is read', async () => {
    const { store: s } = await store();
    expect(
      await codeOf(() => s.create({ recipe: recipeOf({ observer: { kind: 'histogram', bins: 1 << 20 } }) })),
    ).toEqual({ code: 'RECIPE_INVALID', status: 400 });
    expect(
      await codeOf(() =>
        s.create({
          recipe: recipeOf({ observer: { kind: 'histogram', bins: 4096, upsample_rate: 256 } }),
        }),
      ),
    ).toEqual({ code: 'RECIPE_INVALID', status: 400 });
    const ok = await s.create({ recipe: recipeOf({ observer: { kind: 'histogram', bins: 4096 } }) });
    expect(ok.batches).toBe(0);
    await s.stop();
  });

  it('refuses a per-channel batch of more channels than QUANTD_CALIBRATION_MAX_CHANNELS, and linear statistics wider than QUANTD_CALIBRATION_MAX_FEATURES, before computing', async () => {
    const compute = counting();
    const { store: s } = await store({ compute });
    const channels = await s.create({ recipe: recipeOf({ observer: { kind: 'per_channel_min_max' } }) });
    expect(await codeOf(() => s.fold(channels.id, batch(['a', [65, 2]])))).toEqual({
      code: 'CALIBRATION_FULL',
      status: 413,
    });
    const stats = await s.create({ recipe: recipeOf({ statistics: 'linear' }) });
    expect(await codeOf(() => s.fold(stats.id, batch(['a', [1, 129]])))).toEqual({
      code: 'CALIBRATION_FULL',
      status: 413,
    });
    expect(compute.calls).toBe(0);
    // at the limits, they fold
    await s.fold(channels.id, batch(['a', [64, 2]]));
    await s.fold(stats.id, batch(['a', [3, 128]]));
    expect(compute.calls).toBe(2);
    await s.stop();
  });

  it('refuses a batch that would take a session past QUANTD_CALIBRATION_SESSION_BYTES, leaving it as it was', async () => {
    const compute = counting();
    const { store: s } = await store({ compute });
    // 4096 bins: 16 KiB a tensor; the session holds 1 MiB, so 64 tensors at most
    const session = await s.create({ recipe: recipeOf({ observer: { kind: 'histogram', bins: 4096 } }) });
    const names = (from: number, n: number): [string, number[]][] =>
      Array.from({ length: n }, (_, i): [string, number[]] => [`t${from + i}`, [8]]);
    await s.fold(session.id, batch(...names(0, 60)));
    expect(await codeOf(() => s.fold(session.id, batch(...names(60, 10))))).toEqual({
      code: 'CALIBRATION_FULL',
      status: 413,
    });
    expect(compute.calls).toBe(60);
    expect(session.observers.size).toBe(60);
    expect(session.batches).toBe(1);
    await s.fold(session.id, batch(...names(0, 60))); // the tensors it has: no growth
    await s.stop();
  });

  it("refuses past the server's budget (every session together) with CALIBRATION_MEMORY; a deleted session gives its bytes back", async () => {
    // statistics of in_features 100: 80 800 bytes a session, and the fold's new sums beside them
    const { store: s } = await store({ budgetBytes: 300_000 });
    const sessions: CalibrationSession[] = [];
    for (let i = 0; i < 4; i++) sessions.push(await s.create({ recipe: recipeOf({ statistics: 'linear' }) }));
    await s.fold(sessions[0]!.id, batch(['x', [2, 100]]));
    await s.fold(sessions[1]!.id, batch(['x', [2, 100]]));
    await s.fold(sessions[2]!.id, batch(['x', [2, 100]]));
    expect(s.budget.bytes).toBe(3 * 80_800);
    expect(await codeOf(() => s.fold(sessions[3]!.id, batch(['x', [2, 100]])))).toEqual({
      code: 'CALIBRATION_MEMORY',
      status: 507,
    });
    // a session that has its statistics cannot add to them either: the new sums are a copy
    expect(await codeOf(() => s.fold(sessions[0]!.id, batch(['x', [2, 100]])))).toEqual({
      code: 'CALIBRATION_MEMORY',
      status: 507,
    });
    expect(s.budget.bytes).toBe(3 * 80_800);
    await s.remove(sessions[1]!.id);
    expect(s.budget.bytes).toBe(2 * 80_800);
    await s.fold(sessions[3]!.id, batch(['x', [2, 100]]));
    expect(s.budget.bytes).toBe(3 * 80_800);
    await s.stop();
  });
});

/** An export of one min/max observer named `name`, with `fields` over it. */
function state(fields: Record<string, unknown> = {}, observerFields: Record<string, unknown> = {}): unknown {
  const config = observerConfig({ kind: 'min_max' });
  const s = newObserverState(config);
  observe(config, s, [1, 2, 3], [3]);
  return {
    format: 'quantd.calibration/1',
    id: 'x',
    created: '2026-01-01T00:00:00.000Z',
    updated: '2026-01-01T00:00:00.000Z',
    ttl_seconds: 3600,
    batches: 2,
    recipe: recipeOf({ observer: { kind: 'min_max' } }),
    observers: { a: { ...exportObserver(config, s), ...observerFields } },
    ...fields,
  };
}

describe('what a session watches, counted and listed', () => {
  it('counts tensors gathering statistics towards the 10 000 a session watches', async () => {
    const compute = counting();
    const { store: s } = await store({ compute });
    const session = await s.create({ recipe: recipeOf({ statistics: 'linear' }) });
    const tiny = (from: number, n: number): [string, number[]][] =>
      Array.from({ length: n }, (_, i): [string, number[]] => [`x${from + i}`, [1, 1]]);
    await s.fold(session.id, batch(...tiny(0, 9_000)));
    expect(await codeOf(() => s.fold(session.id, batch(...tiny(9_000, 1_001))))).toEqual({
      code: 'CALIBRATION_FULL',
      status: 413,
    });
    expect(compute.calls).toBe(9_000);
    expect(session.stats.size).toBe(9_000);
    await s.stop();
  });

  it("lists sessions by their counts; a session's own summary lists its observers and layers", async () => {
    const { store: s } = await store();
    const session = await s.create({ recipe: recipeOf({ observer: { kind: 'min_max' } }) });
    await s.fold(
      session.id,
      batch(...Array.from({ length: 500 }, (_, i): [string, number[]] => [`t${i}`, [2]])),
    );
    const [listed] = s.list().map((x) => x.summary(false));
    expect(listed).toMatchObject({ id: session.id, observer_count: 500, observed: 1000, observers: [] });
    expect(session.summary()['observers']).toHaveLength(500);
    await s.stop();
  });
});

describe('an import is checked as a creation is', () => {
  it('caps ttl_seconds and refuses batches that are not a count, 1e300 wherever a number goes: catalogued 400s, never a 500', async () => {
    const { store: s } = await store();
    const refusals: Record<string, unknown> = {
      'ttl_seconds 1e300': state({ ttl_seconds: 1e300 }),
      'ttl_seconds past 30 days': state({ ttl_seconds: 31 * 86400 }),
      'ttl_seconds 0': state({ ttl_seconds: 0 }),
      'batches -3': state({ batches: -3 }),
      'batches 1.5': state({ batches: 1.5 }),
      'batches 1e300': state({ batches: 1e300 }),
      'observed 1e300': state({}, { observed: 1e300 }),
      'eps 1e300': state({}, { observer: { kind: 'min_max', eps: 1e300 } }),
      'quant_max 1e300': state({}, { observer: { kind: 'min_max', quant_min: 0, quant_max: 1e300 } }),
      'bins 1e300': state(
        { recipe: recipeOf({ observer: { kind: 'histogram', bins: 1e300 } }) },
        { observer: { kind: 'histogram', bins: 1e300 } },
      ),
      'created 1e300': state({ created: 1e300 }),
      'recipe bins past the limit': state({
        recipe: recipeOf({ observer: { kind: 'histogram', bins: 8192 } }),
      }),
    };
    for (const [what, value] of Object.entries(refusals)) {
      expect((await codeOf(() => s.create({ state: value }))).status, what).toBe(400);
    }
    expect(await codeOf(() => s.create({ state: state(), ttl_seconds: 1e300 }))).toEqual({
      code: 'OPTION_INVALID',
      status: 400,
    });
    const imported = await s.create({ state: state({ ttl_seconds: 30 * 86400 }) });
    expect(imported.batches).toBe(2);
    expect(s.list()).toHaveLength(1);
    await s.stop();
  });

  it('refuses an import holding more than a session may (channels, bytes)', async () => {
    const { store: s } = await store();
    const config = observerConfig({ kind: 'per_channel_min_max' });
    const wide = newObserverState(config);
    observe(config, wide, new Float32Array(65 * 2), [65, 2]);
    const exported = state({ recipe: recipeOf({ observer: { kind: 'per_channel_min_max' } }) });
    (exported as { observers: unknown }).observers = { a: exportObserver(config, wide) };
    expect(await codeOf(() => s.create({ state: exported }))).toEqual({
      code: 'OBSERVER_INVALID',
      status: 400,
    });
    const hist = observerConfig({ kind: 'histogram', bins: 4096 });
    const many = Object.fromEntries(
      Array.from({ length: 70 }, (_, i) => [`t${i}`, exportObserver(hist, newObserverState(hist))]),
    );
    const big = state({ recipe: recipeOf({ observer: { kind: 'histogram', bins: 4096 } }), observers: many });
    expect(await codeOf(() => s.create({ state: big }))).toEqual({ code: 'CALIBRATION_FULL', status: 413 });
    await s.stop();
  });
});

describe('a session file an earlier version wrote from an unchecked import', () => {
  it('is kept at start, its ttl_seconds capped and its batches a count, not set aside', async () => {
    const { store: first, dataDir } = await store();
    const session = await first.create({ state: state() });
    await first.stop();
    const file = join(dataDir, 'calibrations', `${session.id}.json`);
    const saved = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
    writeFileSync(file, JSON.stringify({ ...saved, ttl_seconds: 1e9, batches: 2.5 }));
    const second = new CalibrationStore({ dataDir, compute: referenceCompute, limits: LIMITS });
    await second.start();
    const kept = second.get(session.id);
    expect(kept.ttlSeconds).toBe(30 * 86400);
    expect(kept.batches).toBe(2);
    expect(kept.summary()['expires']).toEqual(expect.any(String));
    await second.stop();
  });
});

describe('tensor names that are Object.prototype keys', () => {
  const NAMES = ['__proto__', 'constructor', 'prototype', 'toString', 'hasOwnProperty'];

  it('are observed, written to the session file and restored after a restart; an import of them too', async () => {
    const { store: first, dataDir } = await store();
    const session = await first.create({ recipe: recipeOf({ observer: { kind: 'min_max' } }) });
    await first.fold(session.id, batch(...NAMES.map((n): [string, number[]] => [n, [4]])));
    const saved = JSON.parse(readFileSync(join(dataDir, 'calibrations', `${session.id}.json`), 'utf8')) as {
      observers: object;
    };
    expect(Object.keys(saved.observers).sort()).toEqual([...NAMES].sort());
    // an export given back as JSON text (as a client sends it): its __proto__ key is an own key
    const text = [...(await first.exportText(session.id))].join('');
    const imported = await first.create({ state: JSON.parse(text) as unknown });
    expect([...imported.observers.keys()].sort()).toEqual([...NAMES].sort());
    await first.stop();

    const second = new CalibrationStore({ dataDir, compute: referenceCompute, limits: LIMITS });
    await second.start();
    for (const id of [session.id, imported.id]) {
      const restored = second.get(id);
      expect([...restored.observers.keys()].sort(), id).toEqual([...NAMES].sort());
      expect(restored.observers.get('__proto__')!.state.observed).toBe(4);
    }
    await second.stop();
  });
});

describe('the export form, written in pieces', () => {
  it('is the JSON of the export object, whatever its size', async () => {
    const { store: s } = await store({ limits: { ...LIMITS, sessionBytes: 64 * 1024 * 1024 } });
    const session = await s.create({ recipe: recipeOf({ observer: { kind: 'histogram', bins: 4096 } }) });
    // 120 histograms of 4096 bins: 2.6 MB of base64, so several pieces
    await s.fold(
      session.id,
      batch(...Array.from({ length: 120 }, (_, i): [string, number[]] => [`t${i}`, [64]])),
    );
    const pieces = [...(await s.exportText(session.id))];
    expect(pieces.length).toBeGreaterThan(1);
    expect(JSON.parse(pieces.join(''))).toEqual(JSON.parse(JSON.stringify(session.exported())));
    expect(CalibrationSession.restore(JSON.parse(pieces.join('')), { id: 'again' }).observers.size).toBe(120);
    await s.stop();
  });
});

describe('the configuration', () => {
  it('reads QUANTD_CALIBRATION_*; the server budget defaults to a quarter of the host memory', () => {
    const defaults = loadConfig({});
    expect(defaults.calibrationMaxBins).toBe(16384);
    expect(defaults.calibrationMaxFeatures).toBe(8192);
    expect(defaults.calibrationSessionBytes).toBe(2 * 1024 ** 3);
    expect(defaults.calibrationBytes).toBeNull();
    expect(defaults.calibrationImportLimit).toBe(8 * 1024 ** 2);
    expect(serverBudget(defaults.calibrationBytes, 8 * 1024 ** 3)).toBe(2 * 1024 ** 3);
    const set = loadConfig({ QUANTD_CALIBRATION_BYTES: '24m', QUANTD_CALIBRATION_MAX_CHANNELS: '128' });
    expect(serverBudget(set.calibrationBytes, 8 * 1024 ** 3)).toBe(24 * 1024 ** 2);
    expect(set.calibrationMaxChannels).toBe(128);
    for (const [key, value] of [
      ['QUANTD_CALIBRATION_MAX_FEATURES', '16385'],
      ['QUANTD_CALIBRATION_MAX_BINS', '0'],
      ['QUANTD_CALIBRATION_BYTES', '1e300'],
    ]) {
      let code: string | undefined;
      try {
        loadConfig({ [key!]: value });
      } catch (err) {
        code = isQuantdError(err) ? err.code : String(err);
      }
      expect(code, key).toBe('CONFIG_INVALID');
    }
  });
});

describe("the host's memory", () => {
  it('takes a cgroup v2 or v1 limit, and none from "max" or an unlimited v1 value', () => {
    const files = (map: Record<string, string>) => (path: string) => {
      if (!(path in map)) throw new Error('ENOENT');
      return map[path]!;
    };
    expect(cgroupLimit(files({ '/sys/fs/cgroup/memory.max': '4294967296\n' }))).toBe(4294967296);
    expect(cgroupLimit(files({ '/sys/fs/cgroup/memory.max': 'max\n' }))).toBeNull();
    expect(cgroupLimit(files({ '/sys/fs/cgroup/memory/memory.limit_in_bytes': '2147483648\n' }))).toBe(
      2147483648,
    );
    expect(
      cgroupLimit(files({ '/sys/fs/cgroup/memory/memory.limit_in_bytes': '9223372036854771712\n' })),
    ).toBeNull();
    expect(cgroupLimit(files({}))).toBeNull();
  });
});
