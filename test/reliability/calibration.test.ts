/**
 * Calibration state against a real `quantd serve` child process (issue 37, items 3 and 9): what
 * an observer's options, a batch's shape or an import make a session hold is bounded before any
 * work, and the heavy work that is allowed runs off the event loop.
 *
 *  - a histogram of 2^20 bins is refused when the session is created;
 *  - linear statistics of a [1, 16000] batch (a 2 GB Σxᵀx) are refused before they are
 *    allocated, by the width limit;
 *  - sessions each within QUANTD_CALIBRATION_SESSION_BYTES but together past
 *    QUANTD_CALIBRATION_BYTES are refused (507 CALIBRATION_MEMORY) until one is deleted;
 *  - the heaviest folds the defaults allow (90 histograms of 16 384 bins merging, a 4096-input
 *    layer's statistics), their qparams and their export leave /healthz answering: its p99 and
 *    the server's own event-loop delay (its /metrics) stay under 100 ms;
 *  - deleting the sessions gives their memory back (the child's RSS falls);
 *  - imports: ttl_seconds capped, 1e300 and non-count batches a catalogued 400 (never a 500),
 *    observers called __proto__, constructor and prototype kept through kill -9, an import past
 *    QUANTD_CALIBRATION_IMPORT_LIMIT refused before it is read, and one within it (parsed on the
 *    event loop) a stall of under twice the target.
 *
 * The figures are printed for the record; QUANTD_RELIABILITY=long folds ten times as many
 * merging batches.
 */
import { rmSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { serializeSafetensors } from '../../src/format/safetensors.js';
import { send, type Reply } from '../http/helpers.js';
import { json, tempDir } from '../jobs/helpers.js';
import { startChildServer, type ChildServer } from './server.js';

const LONG = process.env['QUANTD_RELIABILITY'] === 'long';
const MERGES = LONG ? 20 : 2;
const MIB = 1024 * 1024;
/** The service's target: a health check answers within this, whatever one client makes it do. */
const TARGET_MS = 100;
/** No answer within this long is a stall (before: 23.8 s to 98.6 s). */
const ANSWER_MS = 30_000;

const root = tempDir('reliability-calibration');
const servers: ChildServer[] = [];
afterAll(async () => {
  await Promise.all(servers.map((s) => s.kill()));
  rmSync(root, { recursive: true, force: true });
});

async function start(name: string, env: Readonly<Record<string, string>> = {}): Promise<ChildServer> {
  const server = await startChildServer({ QUANTD_DATA_DIR: join(root, name), ...env });
  servers.push(server);
  return server;
}

const JSON_TYPE = { 'content-type': 'application/json' };
const post = (s: ChildServer, path: string, value: unknown): Promise<Reply> =>
  send(s.port, path, {
    body: JSON.stringify(value),
    headers: JSON_TYPE,
    signal: AbortSignal.timeout(ANSWER_MS),
  });
const get = (s: ChildServer, path: string): Promise<Reply> =>
  send(s.port, path, { signal: AbortSignal.timeout(ANSWER_MS) });
const del = (s: ChildServer, path: string): Promise<Reply> =>
  send(s.port, path, { method: 'DELETE', signal: AbortSignal.timeout(ANSWER_MS) });

/** A batch: float32 tensors of the given shapes, values (i % 7 - 3) · scale. */
function batch(tensors: readonly (readonly [string, readonly number[]])[], scale = 1): Uint8Array {
  return serializeSafetensors(
    tensors.map(([name, shape]) => {
      const n = shape.reduce((a, b) => a * b, 1);
      const x = Float32Array.from({ length: n }, (_, i) => ((i % 7) - 3) * scale);
      return { name, dtype: 'F32' as const, shape, data: new Uint8Array(x.buffer) };
    }),
    null,
  );
}

const fold = (s: ChildServer, id: string, body: Uint8Array): Promise<Reply> =>
  send(s.port, `/v1/calibrations/${id}/batches`, {
    body,
    headers: { 'content-type': 'application/x-safetensors' },
    signal: AbortSignal.timeout(ANSWER_MS),
  });

async function create(s: ChildServer, rule: Record<string, unknown>): Promise<string> {
  const reply = await post(s, '/v1/calibrations', { recipe: { observers: [{ match: '*', ...rule }] } });
  expect(reply.status, reply.body.toString()).toBe(201);
  return json<{ id: string }>(reply).id;
}

const codeOf = (reply: Reply): string => `${reply.status} ${json<{ code?: string }>(reply).code}`;
const quantile = (sorted: readonly number[], q: number): number =>
  sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
const ms = (n: number): string => `${n.toFixed(0)} ms`;
const mib = (n: number): string => `${(n / MIB).toFixed(0)} MiB`;

/** The server's own event-loop delay since the last scrape (prom-client resets it on each), in ms. */
async function loopLag(s: ChildServer): Promise<{ p99: number; max: number }> {
  const text = (await get(s, '/metrics')).body.toString();
  const read = (name: string): number => {
    const m = new RegExp(`^quantd_nodejs_eventloop_lag_${name}_seconds (\\S+)$`, 'm').exec(text);
    return m ? Number(m[1]) * 1000 : NaN;
  };
  return { p99: read('p99'), max: read('max') };
}

interface Watched {
  /** /healthz round trips, sorted */
  readonly health: number[];
  readonly peakRss: number;
}

/** Runs `work` while /healthz is polled every 20 ms (one keep-alive connection) and RSS sampled. */
async function watching<T>(s: ChildServer, work: () => Promise<T>): Promise<T & Watched> {
  await loopLag(s); // resets the server's delay histogram
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const health: number[] = [];
  let peakRss = s.rssBytes();
  let running = true;
  const sampler = setInterval(() => (peakRss = Math.max(peakRss, s.rssBytes())), 50);
  const poll = (async () => {
    while (running) {
      const started = performance.now();
      const status = await new Promise<number>((resolve) => {
        request(`${s.base}/healthz`, { agent }, (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
        })
          .on('error', () => resolve(0))
          .end();
      });
      expect(status, '/healthz').toBe(200);
      health.push(performance.now() - started);
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  try {
    const result = await work();
    return { ...result, health, peakRss };
  } finally {
    running = false;
    clearInterval(sampler);
    await poll;
    agent.destroy();
    health.sort((a, b) => a - b);
  }
}

describe('the issue’s vectors, refused before any work', () => {
  let server: ChildServer;
  beforeAll(async () => {
    server = await start('vectors');
  });

  it('a histogram of 2^20 bins is refused when the session is created', async () => {
    const reply = await post(server, '/v1/calibrations', {
      recipe: { observers: [{ match: '*', observer: { kind: 'histogram', bins: 1048576 } }] },
    });
    expect(codeOf(reply)).toBe('400 RECIPE_INVALID');
    expect(reply.body.toString()).toContain('QUANTD_CALIBRATION_MAX_BINS');
  });

  it('linear statistics of a [1, 16000] batch are refused by the width limit, before a byte is allocated', async () => {
    const id = await create(server, { statistics: 'linear' });
    const before = server.rssBytes();
    const started = performance.now();
    const reply = await fold(server, id, batch([['x', [1, 16000]]]));
    const took = performance.now() - started;
    expect(codeOf(reply)).toBe('413 CALIBRATION_FULL');
    expect(reply.body.toString()).toContain('QUANTD_CALIBRATION_MAX_FEATURES');
    const grown = server.rssBytes() - before;
    console.log(
      `[1, 16000] linear statistics: refused in ${ms(took)}, RSS ${grown >= 0 ? '+' : ''}${mib(grown)}`,
    );
    expect(grown).toBeLessThan(64 * MIB);
    expect(server.alive()).toBe(true);
  });
});

describe("the server's budget for every session together", () => {
  it('sessions each within QUANTD_CALIBRATION_SESSION_BYTES, together past QUANTD_CALIBRATION_BYTES: 507 until one is deleted', async () => {
    // statistics of in_features 700 take 8·700·701 = 3.9 MB: two fit a session of 8 MiB, six
    // sessions of one fit the server's 24 MiB, a seventh does not
    const server = await start('budget', {
      QUANTD_CALIBRATION_SESSION_BYTES: '8m',
      QUANTD_CALIBRATION_BYTES: '24m',
    });
    const layer = (name: string): readonly [string, readonly number[]] => [name, [2, 700]];
    const crowded = await create(server, { statistics: 'linear' });
    expect((await fold(server, crowded, batch([layer('a'), layer('b')]))).status).toBe(200);
    expect(codeOf(await fold(server, crowded, batch([layer('c')])))).toBe('413 CALIBRATION_FULL');
    const ids = [crowded];
    for (let i = 0; i < 4; i++) {
      const id = await create(server, { statistics: 'linear' });
      expect((await fold(server, id, batch([layer('a')]))).status).toBe(200);
      ids.push(id);
    }
    const last = await create(server, { statistics: 'linear' });
    const refused = await fold(server, last, batch([layer('a')]));
    expect(codeOf(refused)).toBe('507 CALIBRATION_MEMORY');
    expect(refused.body.toString()).toContain('QUANTD_CALIBRATION_BYTES');
    expect((await del(server, `/v1/calibrations/${ids[1]}`)).status).toBe(204);
    expect((await fold(server, last, batch([layer('a')]))).status).toBe(200);
    await server.kill();
  });
});

describe('the heaviest folds the defaults allow, off the event loop; their memory back on DELETE', () => {
  let server: ChildServer;
  beforeAll(async () => {
    server = await start('heavy');
  });

  it('/healthz p99 and the server’s event-loop delay stay under 100 ms; RSS falls after DELETE', async () => {
    const names = Array.from({ length: 90 }, (_, i): readonly [string, readonly number[]] => [`t${i}`, [16]]);
    // warm: the pool's threads, the routes, the first session file
    const warm = await create(server, { observer: { kind: 'min_max' } });
    await fold(server, warm, batch(names));
    await del(server, `/v1/calibrations/${warm}`);
    const baseline = server.rssBytes();

    const hist = await create(server, { observer: { kind: 'histogram', bins: 16384, upsample_rate: 128 } });
    const stats = await create(server, { statistics: 'linear' });
    const run = await watching(server, async () => {
      const times: Record<string, number> = {};
      const timed = async (what: string, work: () => Promise<Reply>, status = 200): Promise<Reply> => {
        const started = performance.now();
        const reply = await work();
        times[what] = (times[what] ?? 0) + performance.now() - started;
        expect(reply.status, `${what}: ${reply.body.toString().slice(0, 300)}`).toBe(status);
        return reply;
      };
      await timed('first batch', () => fold(server, hist, batch(names)));
      // each batch wider than the last: every histogram merges (2^21 cells each)
      for (let i = 1; i <= MERGES; i++)
        await timed('merging batches', () => fold(server, hist, batch(names, 3 ** i)));
      const qparams = await timed('qparams', () => get(server, `/v1/calibrations/${hist}/qparams`));
      const state = await timed('export', () => get(server, `/v1/calibrations/${hist}/state`));
      await timed('statistics [64, 4096]', () => fold(server, stats, batch([['x', [64, 4096]]])));
      return { times, qparamsBytes: qparams.body.length, stateBytes: state.body.length };
    });
    const lag = await loopLag(server);
    const held = server.rssBytes();
    expect((await del(server, `/v1/calibrations/${hist}`)).status).toBe(204);
    expect((await del(server, `/v1/calibrations/${stats}`)).status).toBe(204);
    let after = server.rssBytes();
    // a deletion collects at once, or within 10 s of the last collection (store.ts, freed)
    for (let waited = 0; waited < 12_000 && held - after <= 96 * MIB; waited += 100) {
      await new Promise((r) => setTimeout(r, 100));
      after = server.rssBytes();
    }
    console.log(
      `heavy folds (${Object.entries(run.times)
        .map(([k, v]) => `${k} ${ms(v)}`)
        .join(
          ', ',
        )}; export ${mib(run.stateBytes)}): /healthz ${run.health.length} probes p50 ${ms(quantile(run.health, 0.5))} ` +
        `p99 ${ms(quantile(run.health, 0.99))} max ${ms(run.health.at(-1)!)}; server event-loop delay p99 ${ms(lag.p99)} max ${ms(lag.max)}; ` +
        `RSS ${mib(baseline)} before, peak ${mib(run.peakRss)}, ${mib(held)} held, ${mib(after)} after DELETE`,
    );
    expect(quantile(run.health, 0.99)).toBeLessThan(TARGET_MS);
    expect(lag.p99).toBeLessThan(TARGET_MS);
    // the 128 MiB Σxᵀx went with the sessions (what stays is the heap's and malloc's own growth)
    expect(held - after).toBeGreaterThan(96 * MIB);
    expect(after).toBeLessThan(baseline + 128 * MIB);
  });
});

describe('imports', () => {
  let server: ChildServer;
  beforeAll(async () => {
    server = await start('imports');
  });

  const exported = (fields: Record<string, unknown> = {}): Record<string, unknown> => ({
    format: 'quantd.calibration/1',
    id: 'x',
    created: '2026-01-01T00:00:00.000Z',
    updated: '2026-01-01T00:00:00.000Z',
    ttl_seconds: 3600,
    batches: 1,
    recipe: { observers: [{ match: '*', observer: { kind: 'min_max' } }] },
    observers: {},
    ...fields,
  });

  it('caps ttl_seconds and refuses batches that are not a count and 1e300 anywhere: catalogued 400s', async () => {
    const cases: Record<string, Record<string, unknown>> = {
      'ttl_seconds 1e300': { ttl_seconds: 1e300 },
      'ttl_seconds 31 days': { ttl_seconds: 31 * 86400 },
      'batches -3': { batches: -3 },
      'batches 1.5': { batches: 1.5 },
      'batches 1e300': { batches: 1e300 },
      'an observer seen 1e300 times': {
        observers: {
          a: {
            format: 'quantd.observer/1',
            observer: { kind: 'min_max' },
            min: 'AACAPw==',
            max: 'AAAAQA==',
            observed: 1e300,
          },
        },
      },
      'eps 1e300': { recipe: { observers: [{ match: '*', observer: { kind: 'min_max', eps: 1e300 } }] } },
    };
    for (const [what, fields] of Object.entries(cases)) {
      const reply = await post(server, '/v1/calibrations', { state: exported(fields) });
      expect(reply.status, `${what}: ${reply.body.toString().slice(0, 200)}`).toBe(400);
    }
    expect(server.alive()).toBe(true);
  });

  it('keeps observers called __proto__, constructor and prototype through kill -9', async () => {
    const names = ['__proto__', 'constructor', 'prototype'];
    const observer = {
      format: 'quantd.observer/1',
      observer: { kind: 'min_max' },
      min: 'AACAPw==', // 1
      max: 'AAAAQA==', // 2
      observed: 2,
    };
    // written as text: an object literal's "__proto__" key would set a prototype, not a key
    const observers = `{${names.map((n) => `${JSON.stringify(n)}:${JSON.stringify(observer)}`).join(',')}}`;
    const text = JSON.stringify({ state: exported() }).replace('"observers":{}', `"observers":${observers}`);
    const reply = await send(server.port, '/v1/calibrations', { body: text, headers: JSON_TYPE });
    expect(reply.status, reply.body.toString()).toBe(201);
    const imported = json<{ id: string }>(reply).id;
    const made = await create(server, { observer: { kind: 'min_max' } });
    expect((await fold(server, made, batch(names.map((n) => [n, [4]])))).status).toBe(200);

    await server.kill();
    server = await start('imports');
    for (const id of [imported, made]) {
      const state = await get(server, `/v1/calibrations/${id}/state`);
      expect(state.status).toBe(200);
      const keys = Object.keys((JSON.parse(state.body.toString()) as { observers: object }).observers);
      expect(keys.sort(), id).toEqual([...names].sort());
    }
  });

  it('refuses an import past QUANTD_CALIBRATION_IMPORT_LIMIT before reading it; one within it leaves /healthz answering', async () => {
    const observer = (bins: number): Record<string, unknown> => ({
      format: 'quantd.observer/1',
      observer: { kind: 'histogram', bins },
      min: 'AACAvw==', // -1
      max: 'AACAPw==', // 1
      histogram: Buffer.from(new Float32Array(bins).fill(1).buffer).toString('base64'),
      observed: bins,
    });
    const many = (count: number): Record<string, unknown> =>
      exported({
        recipe: { observers: [{ match: '*', observer: { kind: 'histogram', bins: 16384 } }] },
        observers: Object.fromEntries(Array.from({ length: count }, (_, i) => [`t${i}`, observer(16384)])),
      });
    const large = Buffer.from(JSON.stringify({ state: many(800) })); // 67 MiB
    const started = performance.now();
    const refused = await send(server.port, '/v1/calibrations', { body: large, headers: JSON_TYPE });
    expect(codeOf(refused)).toBe('413 PAYLOAD_TOO_LARGE');
    expect(refused.body.toString()).toContain('QUANTD_CALIBRATION_IMPORT_LIMIT');
    const refusedIn = performance.now() - started;

    const allowed = Buffer.from(JSON.stringify({ state: many(85) })); // 7.1 MiB, within the 8 MiB default
    const run = await watching(server, async () => ({
      reply: await send(server.port, '/v1/calibrations', { body: allowed, headers: JSON_TYPE }),
    }));
    const lag = await loopLag(server);
    expect(run.reply.status, run.reply.body.toString().slice(0, 300)).toBe(201);
    console.log(
      `imports: ${mib(large.length)} refused in ${ms(refusedIn)}; ${mib(allowed.length)} accepted, /healthz p99 ${ms(quantile(run.health, 0.99))} ` +
        `max ${ms(run.health.at(-1)!)}, server event-loop delay p99 ${ms(lag.p99)} max ${ms(lag.max)}`,
    );
    // One parse and restore on the event loop (in-process, 14 MiB: 81 ms the first time, 16-25
    // after); its window holds that one stall and a few probes, so a p99 is its maximum, which
    // this shared machine stretches: twice the target, as load.test.ts allows its probe.
    expect(quantile(run.health, 0.99)).toBeLessThan(2 * TARGET_MS);
    expect(lag.max).toBeLessThan(2 * TARGET_MS);
  });
});
