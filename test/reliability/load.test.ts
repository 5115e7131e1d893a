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
import { Worker } from 'node:worker_threads';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { callRaw, loadMethods, rawClient } from './fuzz/grpc-cases.js';
import { startChildServer, type ChildServer } from './server.js';

const LONG = process.env['QUANTD_RELIABILITY'] === 'long';
const PHASE_MS = LONG ? 60_000 : 8_000;
/**
 * How fast a refusal must come: the service's target, 100 ms p99, is asserted on the server's own
 * time, from the request's head to its answer (its /metrics). What clients see adds this one
 * 2-core machine: the load clients run at the lowest priority and their queueing is printed
 * beside their figures (their event-loop delay), and the refusal probe — a client with its own
 * CPU, as one on another machine would be — still shares the machine's CPU and its loopback with
 * 30 clients pushing 2 MiB bodies. The probe's p99 measured 31-88 ms over HTTP and 64-92 ms over
 * gRPC here (2026-11-27); it is bounded at twice the target, so that a return of the HTTP accept
 * queue (157-351 ms before early shedding and several accepts per iteration) fails, while one
 * slow moment of a shared CI machine does not. /healthz is bounded to tell a stall from a hang.
 */
const DECISION_BOUND_MS = 100;
const PROBE_BOUND_MS = 200;
/** The refusal probe's pause between requests: over a hundred samples a phase, so p99 is not the maximum. */
const PROBE_PAUSE_MS = 20;
const LATENCY_BOUND_MS = 500;
/** The load clients' own figures carry their starvation: bounded only against a hang. */
const HANG_BOUND_MS = 5000;
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
const sorted = (answers: readonly Answer[]): number[] => answers.map((a) => a.ms).sort((a, b) => a - b);
const ms = (n: number): string => `${n.toFixed(1)} ms`;
const mib = (n: number): string => `${(n / 2 ** 20).toFixed(0)} MiB`;

/** What the watcher measured: peak RSS, /healthz times, and the refusal probe's refusals. */
interface Watched {
  readonly peakRss: number;
  readonly health: number[];
  readonly probeShed: number[];
}

/**
 * Samples the child's RSS, polls /healthz every 50 ms, and sends `probe` — one request of the
 * load's kind — every PROBE_PAUSE_MS, from this thread (normal priority, otherwise idle): the
 * refusals a client with its own CPU sees, as one on another machine would. The load keeps the server full, so the probe is
 * nearly always refused; its admitted requests are not counted.
 */
function watch(agent: Agent, probe: () => Promise<Answer>): { stop(): Promise<Watched> } {
  let peakRss = 0;
  const health: number[] = [];
  const probeShed: number[] = [];
  let running = true;
  const sampler = setInterval(() => {
    peakRss = Math.max(peakRss, server.rssBytes());
  }, 100);
  const pause = (ms = 50): Promise<void> => new Promise((r) => setTimeout(r, ms));
  const healthLoop = (async () => {
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
      await pause();
    }
  })();
  const probeLoop = (async () => {
    while (running) {
      const answer = await probe();
      if (answer.code === 'OVERLOADED') probeShed.push(answer.ms);
      await pause(PROBE_PAUSE_MS);
    }
  })();
  let stopped: Promise<Watched> | undefined;
  return {
    stop: () =>
      (stopped ??= (async () => {
        running = false;
        clearInterval(sampler);
        await Promise.all([healthLoop, probeLoop]);
        const byValue = (a: number, b: number): number => a - b;
        return { peakRss, health: health.sort(byValue), probeShed: probeShed.sort(byValue) };
      })()),
  };
}

/**
 * Runs `load` while watching (see watch, with `probe`): the watcher stops and its connection
 * closes however the load ends.
 */
async function underLoad<T>(probe: () => Promise<Answer>, load: () => Promise<T>): Promise<T & Watched> {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const watcher = watch(agent, probe);
  try {
    const result = await load();
    return { ...result, ...(await watcher.stop()) };
  } finally {
    await watcher.stop().catch(() => undefined);
    agent.destroy();
  }
}

/** The HTTP request of the load: 2 MiB of float32 to quantize. */
const HTTP_QUANTIZE = {
  path: '/v1/quantize?qdtype=int8&scheme=per_channel',
  headers: {
    'content-type': 'application/octet-stream',
    'content-length': tensor.length,
    'x-tensor-dtype': 'float32',
    'x-tensor-shape': `${ROWS},${COLS}`,
  },
};

/** The probe's HTTP request (a new connection each time, as a refusal closes it). */
function httpProbe(): Promise<Answer> {
  const start = performance.now();
  return new Promise((resolve) => {
    const req = request(
      `${server.base}${HTTP_QUANTIZE.path}`,
      { method: 'POST', headers: HTTP_QUANTIZE.headers, agent: false },
      (res) => {
        const elapsed = performance.now() - start;
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const body = Buffer.concat(chunks).toString('utf8');
          const code = res.statusCode === 503 ? (JSON.parse(body) as { code?: string }).code : undefined;
          resolve({ status: res.statusCode ?? 0, code, ms: elapsed });
        });
      },
    );
    req.on('error', () => resolve({ status: 0, code: 'NO_ANSWER', ms: performance.now() - start }));
    req.end(tensor);
  });
}

/** One answer as a load client saw it (load-clients.mjs). */
interface Answer {
  /** HTTP status (0: no answer) or gRPC status code. */
  readonly status: number;
  /** The quantd code of a refusal. */
  readonly code: string | undefined;
  /** Until the decision arrived (the answer's head / the status). */
  readonly ms: number;
}

/** How many threads the clients run on: a few event loops, as a few client machines would be. */
const CLIENT_THREADS = 3;

/**
 * Runs CLIENTS closed-loop clients for `durationMs` on CLIENT_THREADS worker threads; returns
 * their answers and the worst client thread's event-loop delay (p99).
 */
async function runClients(
  durationMs: number,
  data: { kind: 'http' | 'grpc'; body: Buffer } & Record<string, unknown>,
): Promise<{ answers: Answer[]; clientLoopP99: number }> {
  const endAt = Date.now() + durationMs;
  const results = await Promise.all(
    Array.from(
      { length: CLIENT_THREADS },
      () =>
        new Promise<{ answers: Answer[]; loopP99Ms: number }>((resolve, reject) => {
          const worker = new Worker(new URL('./load-clients.mjs', import.meta.url), {
            workerData: { ...data, clients: CLIENTS / CLIENT_THREADS, endAt },
          });
          worker.once('message', resolve);
          worker.once('error', reject);
        }),
    ),
  );
  return {
    answers: results.flatMap((r) => r.answers),
    clientLoopP99: Math.max(...results.map((r) => r.loopP99Ms)),
  };
}

/**
 * The server's own time for the requests of one histogram series (its /metrics), as the upper
 * bound of the bucket that holds the 99th percentile: what the server spent deciding, without
 * the clients' queueing.
 */
async function serverP99(metric: string, labels: RegExp): Promise<number> {
  const text = await (await fetch(`${server.base}/metrics`)).text();
  const buckets = text
    .split('\n')
    .filter((line) => line.startsWith(`${metric}_bucket{`) && labels.test(line))
    .map((line) => {
      const le = /le="([^"]+)"/.exec(line)![1]!;
      return { le: le === '+Inf' ? Infinity : Number(le), count: Number(/\} (\d+)$/.exec(line)![1]) };
    });
  const total = buckets.find((b) => b.le === Infinity)?.count ?? 0;
  return (buckets.find((b) => b.count >= 0.99 * total)?.le ?? NaN) * 1000;
}

describe(`${CLIENTS} closed-loop clients against a capacity of ${CAPACITY}`, () => {
  it('HTTP: every answer a success or a fast catalogued refusal; probe responsive; memory bounded', async () => {
    const { answers, clientLoopP99, peakRss, health, probeShed } = await underLoad(httpProbe, () =>
      runClients(PHASE_MS, {
        kind: 'http',
        body: tensor,
        http: { url: `${server.base}${HTTP_QUANTIZE.path}`, headers: HTTP_QUANTIZE.headers },
      }),
    );
    const decided = await serverP99(
      'quantd_http_request_duration_seconds',
      /route="\/v1\/quantize".*status="503"/,
    );
    await new Promise((r) => setTimeout(r, 5000));
    const idleRss = server.rssBytes();

    const accepted = sorted(answers.filter((a) => a.status === 200));
    const shed = sorted(answers.filter((a) => a.status === 503 && a.code === 'OVERLOADED'));
    // no answer at all: a refused client's connection reset before the 503 reached it (the
    // server lingers after a refusal so that this does not happen)
    const reset = answers.filter((a) => a.status === 0);
    const other = answers.filter(
      (a) => a.status !== 0 && a.status !== 200 && !(a.status === 503 && a.code === 'OVERLOADED'),
    );
    console.log(
      `load HTTP: ${answers.length} requests (${CLIENTS} clients, capacity ${CAPACITY}, ${PHASE_MS / 1000} s): ` +
        `accepted ${accepted.length} (p50 ${ms(quantile(accepted, 0.5))}, p99 ${ms(quantile(accepted, 0.99))}), ` +
        `shed ${shed.length} (load clients p50 ${ms(quantile(shed, 0.5))}, p99 ${ms(quantile(shed, 0.99))}, ` +
        `their threads' own event-loop delay p99 ${ms(clientLoopP99)}; probe ${probeShed.length} refusals ` +
        `p50 ${ms(quantile(probeShed, 0.5))}, p99 ${ms(quantile(probeShed, 0.99))}; server p99 <= ${ms(decided)}), ` +
        `reset before the 503 ${reset.length}, other ${other.length}; ` +
        `/healthz ${health.length} probes p99 ${ms(quantile(health, 0.99))}; ` +
        `peak RSS ${mib(peakRss)} (bound ${mib(RSS_BOUND)}), after 5 s idle ${mib(idleRss)}`,
    );
    expect(server.alive()).toBe(true);
    expect(other.slice(0, 5)).toEqual([]);
    expect(reset).toEqual([]);
    expect(accepted.length).toBeGreaterThan(0);
    expect(shed.length).toBeGreaterThan(accepted.length); // 10× capacity: most are refused
    expect(decided).toBeLessThanOrEqual(DECISION_BOUND_MS);
    expect(probeShed.length).toBeGreaterThan(10);
    expect(quantile(probeShed, 0.99)).toBeLessThan(PROBE_BOUND_MS);
    expect(quantile(shed, 0.99)).toBeLessThan(HANG_BOUND_MS);
    expect(quantile(health, 0.99)).toBeLessThan(LATENCY_BOUND_MS);
    expect(peakRss).toBeLessThan(RSS_BOUND);
  });

  it('gRPC: every call a success or a fast UNAVAILABLE with its quantd-code; probe responsive; memory bounded', async () => {
    // the request encoded once and sent as bytes: the clients cost what HTTP's cost
    const method = loadMethods().find((m) => m.path === '/quantd.v1.Quantizer/Quantize')!;
    const message = method.encode({
      tensor: { name: 'w', dtype: 'float32', shape: [ROWS, COLS], data: tensor },
      spec: { qdtype: 'int8', scheme: 'per_channel' },
    });
    const probeClient = rawClient(server.target);
    const grpcProbe = async (): Promise<Answer> => {
      const start = performance.now();
      const answer = await callRaw(probeClient, method, [message], 60_000);
      return { status: answer.code, code: answer.quantdCode, ms: performance.now() - start };
    };
    const { answers, clientLoopP99, peakRss, health, probeShed } = await underLoad(grpcProbe, () =>
      runClients(PHASE_MS, {
        kind: 'grpc',
        body: message,
        grpc: { target: server.target, path: method.path },
      }),
    ).finally(() => probeClient.close());
    const decided = await serverP99(
      'quantd_grpc_call_duration_seconds',
      /method="quantd\.v1\.Quantizer\/Quantize",code="UNAVAILABLE"/,
    );

    const outcomes = new Map<string, number>();
    for (const a of answers) {
      const key = a.status === 0 ? 'OK' : `${grpc.status[a.status]} ${String(a.code)}`;
      outcomes.set(key, (outcomes.get(key) ?? 0) + 1);
    }
    const accepted = sorted(answers.filter((a) => a.status === 0));
    const shed = sorted(answers.filter((a) => a.code === 'OVERLOADED'));
    console.log(
      `load gRPC: ${answers.length} calls (${CLIENTS} clients, capacity ${CAPACITY}, ${PHASE_MS / 1000} s): ` +
        `${JSON.stringify(Object.fromEntries(outcomes))}; accepted p50 ${ms(quantile(accepted, 0.5))}, ` +
        `p99 ${ms(quantile(accepted, 0.99))}; shed: load clients p50 ${ms(quantile(shed, 0.5))}, ` +
        `p99 ${ms(quantile(shed, 0.99))}, their threads' own event-loop delay p99 ${ms(clientLoopP99)}; ` +
        `probe ${probeShed.length} refusals p50 ${ms(quantile(probeShed, 0.5))}, ` +
        `p99 ${ms(quantile(probeShed, 0.99))}; server p99 <= ${ms(decided)}; /healthz ${health.length} probes p99 ` +
        `${ms(quantile(health, 0.99))}; peak RSS ${mib(peakRss)}`,
    );
    expect(server.alive()).toBe(true);
    expect([...outcomes.keys()].filter((k) => k !== 'OK' && k !== 'UNAVAILABLE OVERLOADED')).toEqual([]);
    expect(accepted.length).toBeGreaterThan(0);
    expect(shed.length).toBeGreaterThan(0);
    expect(decided).toBeLessThanOrEqual(DECISION_BOUND_MS);
    expect(probeShed.length).toBeGreaterThan(10);
    expect(quantile(probeShed, 0.99)).toBeLessThan(PROBE_BOUND_MS);
    expect(quantile(shed, 0.99)).toBeLessThan(HANG_BOUND_MS);
    expect(quantile(health, 0.99)).toBeLessThan(LATENCY_BOUND_MS);
    expect(peakRss).toBeLessThan(RSS_BOUND);
  });
});
