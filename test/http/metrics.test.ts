/**
 * /metrics counts gRPC calls (by method and status code) and jobs (by state, finished by final
 * state, the bytes their results hold), on a real server: real gRPC calls and real jobs over
 * HTTP, then a scrape whose series must hold exactly those counts.
 */
import { rmSync } from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { jobsClient, call, type JobsClient } from '../grpc/jobs-helpers.js';
import { floats, quantizerClient, rejection, unary, type QuantizerClient } from '../grpc/helpers.js';
import { send } from './helpers.js';
import {
  f32Tensor,
  finished,
  modelBytes,
  smallModel,
  startJobServer,
  submitUpload,
  tempDir,
  waitJob,
} from '../jobs/helpers.js';
import type { TestServer } from './helpers.js';

/** The scrape as `name{labels}` → value (labels as prom-client writes them, in label order). */
async function scrape(port: number): Promise<Map<string, number>> {
  const reply = await send(port, '/metrics');
  expect(reply.status).toBe(200);
  const samples = new Map<string, number>();
  for (const line of reply.body.toString().split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    samples.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return samples;
}

const tensor = (values: Float32Array) => ({
  name: 'w',
  dtype: 'float32',
  shape: [values.length],
  data: new Uint8Array(values.buffer),
});

describe('/metrics: gRPC calls and jobs', () => {
  let dir: string;
  let server: TestServer;
  let quantizer: QuantizerClient;
  let jobs: JobsClient;
  beforeAll(async () => {
    dir = tempDir('metrics');
    server = await startJobServer(dir);
    const target = `127.0.0.1:${server.server.grpcPort}`;
    quantizer = await quantizerClient(target);
    jobs = await jobsClient(target);
  });
  afterAll(async () => {
    quantizer?.close();
    jobs?.close();
    await server?.server.shutdown('test done');
    rmSync(dir, { recursive: true, force: true });
  });

  it('counts gRPC calls by method and status code', async () => {
    const before = await scrape(server.port);
    expect([...before.keys()].some((k) => k.startsWith('quantd_grpc_calls_total'))).toBe(false);

    for (let i = 0; i < 2; i++)
      await unary(quantizer, 'Quantize', { tensor: tensor(floats(8, i)), spec: {} });
    const bad = await rejection(
      unary(quantizer, 'Quantize', { tensor: tensor(floats(8, 3)), spec: { qdtype: 'int5' } }),
    );
    expect(bad.code).toBe(grpc.status.INVALID_ARGUMENT);
    await unary(quantizer, 'ChooseQParams', { tensor: tensor(floats(8, 4)), spec: {} });
    const missing = await call(jobs, 'Get', { id: '00000000-0000-4000-8000-000000000000' }).catch(
      (e: grpc.ServiceError) => e,
    );
    expect((missing as grpc.ServiceError).code).toBe(grpc.status.NOT_FOUND);

    const after = await scrape(server.port);
    const calls = (method: string, code: string): number | undefined =>
      after.get(`quantd_grpc_calls_total{method="quantd.v1.${method}",code="${code}"}`);
    expect(calls('Quantizer/Quantize', 'OK')).toBe(2);
    expect(calls('Quantizer/Quantize', 'INVALID_ARGUMENT')).toBe(1);
    expect(calls('Quantizer/ChooseQParams', 'OK')).toBe(1);
    expect(calls('Jobs/Get', 'NOT_FOUND')).toBe(1);
    expect(
      after.get('quantd_grpc_call_duration_seconds_count{method="quantd.v1.Quantizer/Quantize",code="OK"}'),
    ).toBe(2);
    const series = [...after.keys()].filter((k) => k.startsWith('quantd_grpc_calls_total'));
    expect(series).toHaveLength(4);
  });

  it('counts jobs by state, jobs finished, and the bytes of their results', async () => {
    const zero = await scrape(server.port);
    for (const state of ['queued', 'running', 'succeeded', 'failed', 'cancelled']) {
      expect(zero.get(`quantd_jobs{state="${state}"}`), state).toBe(0);
    }
    for (const state of ['succeeded', 'failed', 'cancelled']) {
      expect(zero.get(`quantd_jobs_finished_total{state="${state}"}`), state).toBe(0);
    }
    expect(zero.get('quantd_job_result_bytes')).toBe(0);

    const ok = await submitUpload(server.port, modelBytes(smallModel()), '?qdtype=int8');
    const done = await waitJob(server.port, ok.id, finished);
    expect(done.state).toBe('succeeded');
    // a NaN is met only when the job reads the data: the job fails while running
    const nan = f32Tensor('w', [4, 4], 1);
    new Float32Array(nan.data.buffer, nan.data.byteOffset, 16)[5] = NaN;
    const bad = await submitUpload(server.port, modelBytes([nan]), '?qdtype=int8');
    expect((await waitJob(server.port, bad.id, finished)).state).toBe('failed');

    const files = (done.result as { files: { bytes: number }[] }).files;
    const bytes = files.reduce((sum, f) => sum + f.bytes, 0);
    expect(bytes).toBeGreaterThan(0);
    const after = await scrape(server.port);
    expect(after.get('quantd_jobs{state="succeeded"}')).toBe(1);
    expect(after.get('quantd_jobs{state="failed"}')).toBe(1);
    expect(after.get('quantd_jobs{state="queued"}')).toBe(0);
    expect(after.get('quantd_jobs_finished_total{state="succeeded"}')).toBe(1);
    expect(after.get('quantd_jobs_finished_total{state="failed"}')).toBe(1);
    expect(after.get('quantd_jobs_finished_total{state="cancelled"}')).toBe(0);
    expect(after.get('quantd_job_result_bytes')).toBe(bytes);

    // removing the jobs empties the gauges; the counters keep what happened
    for (const id of [ok.id, bad.id]) {
      expect((await send(server.port, `/v1/jobs/${id}`, { method: 'DELETE' })).status).toBe(204);
    }
    const removed = await scrape(server.port);
    expect(removed.get('quantd_jobs{state="succeeded"}')).toBe(0);
    expect(removed.get('quantd_job_result_bytes')).toBe(0);
    expect(removed.get('quantd_jobs_finished_total{state="succeeded"}')).toBe(1);
  });
});
