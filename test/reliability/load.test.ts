/**
 * Ten times the server's capacity, from outside: a `quantd serve` child whose capacity is
 * QUANTD_POOL_SIZE + QUANTD_QUEUE_LIMIT requests in flight meets 10× as many closed-loop clients
 * sending real 2 MiB quantize requests over HTTP, then over gRPC, while /healthz is polled and
 * the child's RSS sampled. Every answer must be a success or a catalogued refusal (OVERLOADED:
 * 503 problem+json / UNAVAILABLE with quantd-code), refusals must come fast (they are decided
 * before the body is read), the probe must stay responsive, memory bounded, and the process
 * alive. The figures are printed for the record; QUANTD_RELIABILITY=long runs a minute a phase.
 */
import * as grpc from '@grpc/grpc-js';
import { Agent, request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { callRaw, loadMethods, rawClient } from './fuzz/grpc-cases.js';
import { startChildServer, type ChildServer } from './server.js';

const LONG = process.env['QUANTD_RELIABILITY'] === 'long';
const PHASE_MS = LONG ? 60_000 : 8_000;
/**
 * How fast a refusal and the probe must answer. The long form, run by hand on a quiet machine,
 * holds the service's target (100 ms). The short form runs in CI beside other jobs on a shared
 * 2-core machine, where the same build measured 35–122 ms p99 from run to run; its bound only
 * tells a refusal from a hang. What proves the refusal comes before the body is the RSS bound.
 */
const LATENCY_BOUND_MS = LONG ? 100 : 500;
const POOL = 1;
const QUEUE = 2;
const CAPACITY = POOL + QUEUE;
const CLIENTS = 10 * CAPACITY;
const ROWS = 1024;
const COLS = 512; // 2 MiB of float32
/**
 * Peak RSS allowed: the runtime and pool (~150 MiB measured idle), plus the admitted requests'
 * bodies, their float32 copies and outputs (CAPACITY × ~3 × 2 MiB), plus what V8 keeps between
 * collections under this churn — measured 250–400 MiB here; the bound leaves room for a slower,
 * busier machine, and is far below what unadmitted bodies would cost (CLIENTS × 2 MiB each).
 */
const RSS_BOUND = 768 * 1024 * 1024;

let server: ChildServer;
const tensor = Buffer.alloc(ROWS * COLS * 4);
for (let i = 0; i < ROWS * COLS; i++) tensor.writeFloatLE(Math.sin(i) * 8, i * 4);

beforeAll(async () => {
  server = await startChildServer({
    QUANTD_POOL_SIZE: String(POOL),
    QUANTD_QUEUE_LIMIT: String(QUEUE),
    // every request takes the pool (no small-tensor shortcut on the server's thread)
    QUANTD_INLINE_LIMIT: '0',
  });
});
afterAll(async () => {
  await server?.stop();
});

const quantile = (sorted: readonly number[], q: number): number =>
  sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
const ms = (n: number): string => `${n.toFixed(1)} ms`;
const mib = (n: number): string => `${(n / 2 ** 20).toFixed(0)} MiB`;

/** Samples the child's RSS and polls /healthz until stopped. */
function watch(agent: Agent): { stop(): Promise<{ peakRss: number; health: number[] }> } {
  let peakRss = 0;
  const health: number[] = [];
  let running = true;
  const sampler = setInterval(() => {
    peakRss = Math.max(peakRss, server.rssBytes());
  }, 100);
  const probe = (async () => {
    while (running) {
      const start = performance.now();
      const status = await new Promise<number>((resolve) => {
        request(`${server.base}/healthz`, { agent }, (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
        })
          .on('error', () => resolve(0))
          .end();
      });
      if (status !== 200) throw new Error(`/healthz answered ${status}`);
      health.push(performance.now() - start);
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  return {
    stop: async () => {
      running = false;
      clearInterval(sampler);
      await probe;
      return { peakRss, health: health.sort((a, b) => a - b) };
    },
  };
}

interface HttpAnswer {
  readonly status: number;
  readonly code: string | undefined;
  readonly ms: number;
}

/** One quantize request; resolves when the answer has been read. */
function quantizeOverHttp(agent: Agent): Promise<HttpAnswer> {
  const start = performance.now();
  return new Promise((resolve) => {
    const req = request(
      `${server.base}/v1/quantize?qdtype=int8&scheme=per_channel`,
      {
        method: 'POST',
        agent,
        headers: {
          'content-type': 'application/octet-stream',
          'content-length': tensor.length,
          'x-tensor-dtype': 'float32',
          'x-tensor-shape': `${ROWS},${COLS}`,
        },
      },
      (res) => {
        const elapsed = performance.now() - start; // the answer's head: the decision
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          let code: string | undefined;
          if (res.statusCode !== 200) {
            try {
              code = (JSON.parse(Buffer.concat(chunks).toString('utf8')) as { code?: string }).code;
            } catch {
              code = undefined;
            }
          }
          resolve({ status: res.statusCode ?? 0, code, ms: elapsed });
        });
      },
    );
    // a refused request's socket may close while its body is still going out: the answer
    // (already received) is what counts; a request that gets none is status 0
    req.on('error', () => resolve({ status: 0, code: 'NO_ANSWER', ms: performance.now() - start }));
    req.end(tensor);
  });
}

describe(`${CLIENTS} closed-loop clients against a capacity of ${CAPACITY}`, () => {
  it('HTTP: every answer a success or a fast catalogued refusal; probe responsive; memory bounded', async () => {
    const agent = new Agent({ keepAlive: true, maxSockets: CLIENTS + 1 });
    const probeAgent = new Agent({ keepAlive: true, maxSockets: 1 });
    const watcher = watch(probeAgent);
    const answers: HttpAnswer[] = [];
    const end = Date.now() + PHASE_MS;
    await Promise.all(
      Array.from({ length: CLIENTS }, async () => {
        while (Date.now() < end) answers.push(await quantizeOverHttp(agent));
      }),
    );
    const { peakRss, health } = await watcher.stop();
    agent.destroy();
    probeAgent.destroy();
    await new Promise((r) => setTimeout(r, 5000));
    const idleRss = server.rssBytes();

    const accepted = answers
      .filter((a) => a.status === 200)
      .map((a) => a.ms)
      .sort((a, b) => a - b);
    const shed = answers
      .filter((a) => a.status === 503 && a.code === 'OVERLOADED')
      .map((a) => a.ms)
      .sort((a, b) => a - b);
    // a refused client still sending its 2 MiB when the server closes may see the reset before
    // the 503 (the kernel drops what it had not read): no answer, to be retried like a 503
    const reset = answers.filter((a) => a.status === 0);
    const other = answers.filter(
      (a) => a.status !== 0 && a.status !== 200 && !(a.status === 503 && a.code === 'OVERLOADED'),
    );
    console.log(
      `load HTTP: ${answers.length} requests (${CLIENTS} clients, capacity ${CAPACITY}, ${PHASE_MS / 1000} s): ` +
        `accepted ${accepted.length} (p50 ${ms(quantile(accepted, 0.5))}, p99 ${ms(quantile(accepted, 0.99))}), ` +
        `shed ${shed.length} (p50 ${ms(quantile(shed, 0.5))}, p99 ${ms(quantile(shed, 0.99))}), ` +
        `reset before the 503 ${reset.length}, other ${other.length}; ` +
        `/healthz ${health.length} probes p99 ${ms(quantile(health, 0.99))}; ` +
        `peak RSS ${mib(peakRss)} (bound ${mib(RSS_BOUND)}), after 5 s idle ${mib(idleRss)}`,
    );
    expect(server.alive()).toBe(true);
    expect(other.slice(0, 5)).toEqual([]);
    expect(reset.length).toBeLessThan(0.05 * answers.length);
    expect(accepted.length).toBeGreaterThan(0);
    expect(shed.length).toBeGreaterThan(accepted.length); // 10× capacity: most are refused
    expect(quantile(shed, 0.99)).toBeLessThan(LATENCY_BOUND_MS);
    // the probe shares this process with the 30 clients, so its p99 carries their load too
    // (measured 32–50 ms); the server's own bound (< 50 ms under a heavy job) is the solo test's
    expect(quantile(health, 0.99)).toBeLessThan(LATENCY_BOUND_MS);
    expect(peakRss).toBeLessThan(RSS_BOUND);
  });

  it('gRPC: every call a success or UNAVAILABLE with its quantd-code; memory bounded', async () => {
    // the request encoded once and sent as bytes: the clients cost what HTTP's cost, so that the
    // probe measures the server, not this process encoding 2 MiB messages
    const method = loadMethods().find((m) => m.path === '/quantd.v1.Quantizer/Quantize')!;
    const message = method.encode({
      tensor: { name: 'w', dtype: 'float32', shape: [ROWS, COLS], data: tensor },
      spec: { qdtype: 'int8', scheme: 'per_channel' },
    });
    const clients = Array.from({ length: 3 }, () => rawClient(server.target));
    const probeAgent = new Agent({ keepAlive: true, maxSockets: 1 });
    const watcher = watch(probeAgent);
    const outcomes = new Map<string, number>();
    const shed: number[] = [];
    const end = Date.now() + PHASE_MS / 2;
    await Promise.all(
      Array.from({ length: CLIENTS }, async (_, i) => {
        while (Date.now() < end) {
          const start = performance.now();
          const answer = await callRaw(clients[i % clients.length]!, method, [message], 60_000);
          const key = answer.code === 0 ? 'OK' : `${grpc.status[answer.code]} ${String(answer.quantdCode)}`;
          if (answer.quantdCode === 'OVERLOADED') shed.push(performance.now() - start);
          outcomes.set(key, (outcomes.get(key) ?? 0) + 1);
        }
      }),
    );
    const { peakRss, health } = await watcher.stop();
    probeAgent.destroy();
    for (const c of clients) c.close();
    shed.sort((a, b) => a - b);
    console.log(
      `load gRPC: ${[...outcomes.values()].reduce((a, b) => a + b, 0)} calls (${CLIENTS} clients, ${PHASE_MS / 2000} s): ` +
        `${JSON.stringify(Object.fromEntries(outcomes))}; shed p50 ${ms(quantile(shed, 0.5))}, p99 ${ms(quantile(shed, 0.99))}; ` +
        `/healthz ${health.length} probes p99 ${ms(quantile(health, 0.99))}; peak RSS ${mib(peakRss)}`,
    );
    expect(server.alive()).toBe(true);
    expect([...outcomes.keys()].filter((k) => k !== 'OK' && k !== 'UNAVAILABLE OVERLOADED')).toEqual([]);
    expect(outcomes.get('OK') ?? 0).toBeGreaterThan(0);
    expect(outcomes.get('UNAVAILABLE OVERLOADED') ?? 0).toBeGreaterThan(0);
    // gRPC's refusals and the probe are printed, not bounded: 30 streams of 2 MiB on 3 HTTP/2
    // connections keep the event loop busy framing data the server then refuses (measured: shed
    // p99 ~0.5 s, /healthz p99 ~0.12 s) — see the README's limits
    expect(peakRss).toBeLessThan(RSS_BOUND);
  });
});
