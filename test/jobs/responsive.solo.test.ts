/**
 * A layout job encodes on the worker pool, never on the event loop: while a real `quantd serve`
 * (a child process, so this test's own event loop measures nothing of the server's) writes a
 * 256 MiB model as GPTQ, four times one after another, `/healthz` keeps answering within 50 ms
 * at the 99th percentile. (Since GPTQ packs in the C kernels one such job takes about a second:
 * four give some 700 probes, so that the p99 is not the second-slowest probe, which one or two
 * garbage-collection pauses of the server would decide.) It runs alone (vitest.solo.config.ts): the latency it
 * measures is the server's, not that of other test processes competing for the CPU. The cores
 * the server keeps busy are printed (more than one on an otherwise idle machine).
 */
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { serializeSafetensors } from '../../src/format/index.js';
import { octetHeaders, send } from '../http/helpers.js';
import {
  finished,
  getJob,
  json,
  startChildServer,
  submitPath,
  tempDir,
  type ChildServer,
  type Job,
} from './helpers.js';

const root = tempDir('responsive');
const data = join(root, 'data');
let server: ChildServer;
/** GPTQ jobs on the model, run one after another. */
const JOBS = 4;

/** 16 linear weights of 4096 × 1024 float32 (16 MiB each): 256 MiB of input. */
function writeModel(path: string): number {
  const tensors = Array.from({ length: 16 }, (_, i) => {
    const values = new Float32Array(4096 * 1024);
    let s = 0x9e3779b9 ^ i;
    for (let k = 0; k < values.length; k++) {
      s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
      values[k] = (s / 2 ** 32 - 0.5) * 0.1;
    }
    return {
      name: `model.layers.${i}.mlp.up_proj.weight`,
      dtype: 'F32' as const,
      shape: [4096, 1024],
      data: new Uint8Array(values.buffer),
    };
  });
  const bytes = serializeSafetensors(tensors, null);
  writeFileSync(path, bytes);
  return bytes.byteLength;
}

/** user + system CPU seconds the process has used (/proc/PID/stat, in clock ticks of 1/100 s). */
function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

beforeAll(async () => {
  mkdirSync(join(data, 'models'), { recursive: true });
  writeModel(join(data, 'models', 'big.safetensors'));
  server = await startChildServer({ QUANTD_DATA_DIR: data, QUANTD_POOL_SIZE: '2' });
}, 120_000);
afterAll(async () => {
  await server?.stop();
  rmSync(root, { recursive: true, force: true });
});

describe('a 256 MiB GPTQ layout job', () => {
  it('leaves /healthz answering in < 50 ms (p99)', async () => {
    const ids: string[] = [];
    for (let n = 0; n < JOBS; n++) {
      const reply = await submitPath(server.port, {
        input: 'models/big.safetensors',
        op: 'quantize',
        params: { layout: 'gptq:bits=4,group_size=128' },
      });
      expect(reply.status, reply.body.toString()).toBe(202);
      ids.push(json<Job>(reply).id);
    }
    const pid = server.child.pid!;
    let jobs = await Promise.all(ids.map((id) => getJob(server.port, id)));
    const latencies: number[] = [];
    let cpuStart = 0;
    let wallStart = 0;
    let cpuEnd = 0;
    let wallEnd = 0;
    for (let i = 0; !jobs.every(finished); i++) {
      const t0 = performance.now();
      const health = await send(server.port, '/healthz');
      const took = performance.now() - t0;
      expect(health.status).toBe(200);
      if (jobs.some((j) => j.state === 'running')) {
        latencies.push(took);
        if (cpuStart === 0) [cpuStart, wallStart] = [cpuSeconds(pid), performance.now()];
        [cpuEnd, wallEnd] = [cpuSeconds(pid), performance.now()];
      }
      await new Promise((r) => setTimeout(r, 1)); // many probes: a p99 that one scheduler hiccup cannot decide
      if (i % 10 === 0) jobs = await Promise.all(ids.map((id) => getJob(server.port, id)));
    }
    for (const job of jobs) expect(job.state, JSON.stringify(job.error)).toBe('succeeded');
    const sorted = [...latencies].sort((a, b) => a - b);
    const cores = (cpuEnd - cpuStart) / ((wallEnd - wallStart) / 1000);
    const summary = `${latencies.length} probes, p50 ${percentile(sorted, 50).toFixed(1)} ms, p99 ${percentile(sorted, 99).toFixed(1)} ms, max ${sorted.at(-1)!.toFixed(1)} ms; ${cores.toFixed(2)} cores busy over ${((wallEnd - wallStart) / 1000).toFixed(1)} s`;
    console.log(`responsiveness: ${summary}`);
    expect(latencies.length, summary).toBeGreaterThan(20);
    expect(percentile(sorted, 99), summary).toBeLessThan(50);
  }, 180_000);
});

describe('a 16 MiB greedy range search (TypeScript only: no kernel covers it)', () => {
  it('runs on a worker: /healthz keeps answering in < 50 ms (p99)', async () => {
    const values = new Float32Array(1024 * 4096);
    for (let i = 0; i < values.length; i++) values[i] = Math.sin(i * 0.37) * (1 + (i % 97));
    const body = new Uint8Array(values.buffer);
    const request = send(
      server.port,
      '/v1/quantize?qdtype=int4&scheme=per_channel&axis=0&range_search=greedy',
      {
        headers: octetHeaders('float32', [1024, 4096]),
        body,
      },
    );
    let done = false;
    void request.finally(() => (done = true));
    const latencies: number[] = [];
    while (!done) {
      const t0 = performance.now();
      const health = await send(server.port, '/healthz');
      latencies.push(performance.now() - t0);
      expect(health.status).toBe(200);
      await new Promise((r) => setTimeout(r, 1)); // many probes: a p99 that one scheduler hiccup cannot decide
    }
    const reply = await request;
    expect(reply.status, reply.body.toString().slice(0, 300)).toBe(200);
    const sorted = [...latencies].sort((a, b) => a - b);
    const summary = `${latencies.length} probes, p50 ${percentile(sorted, 50).toFixed(1)} ms, p99 ${percentile(sorted, 99).toFixed(1)} ms, max ${sorted.at(-1)!.toFixed(1)} ms`;
    console.log(`greedy responsiveness: ${summary}`);
    expect(latencies.length, summary).toBeGreaterThan(20);
    expect(percentile(sorted, 99), summary).toBeLessThan(50);
  }, 180_000);
});
