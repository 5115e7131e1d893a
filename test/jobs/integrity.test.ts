/**
 * A result is served only as it was written: every result file records its whole-file SHA-256
 * when the job finishes, every download hashes what it sends, and a file that no longer matches
 * (one byte flipped on disk) is refused with RESULT_CORRUPT — over HTTP (500, or, for a file of
 * several chunks, a response cut short: test/reliability/corrupt-result.test.ts) and over gRPC
 * (DATA_LOSS) — instead of being served with its old ETag. The job is then failed with
 * RESULT_CORRUPT: put back as it was, the file is not served again (run the job again).
 */
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { expectProblem, send, type TestServer } from '../http/helpers.js';
import { jobsClient, receive } from '../grpc/jobs-helpers.js';
import {
  finished,
  json,
  modelBytes,
  smallModel,
  startJobServer,
  submitPath,
  submitUpload,
  tempDir,
  waitJob,
  writeModel,
  type Job,
} from './helpers.js';

const root = tempDir('integrity');
const data = join(root, 'data');
let t: TestServer;

beforeAll(async () => {
  mkdirSync(join(data, 'models'), { recursive: true });
  writeModel(join(data, 'models', 'small.safetensors'), smallModel(3));
  t = await startJobServer(data);
});
afterAll(async () => {
  await t?.server.shutdown('test done');
  rmSync(root, { recursive: true, force: true });
});

const sha256 = (bytes: Uint8Array): string => createHash('sha256').update(bytes).digest('hex');

/** Flips one byte of the file in the middle; returns a function that puts it back. */
function flipByte(path: string): () => void {
  const original = readFileSync(path);
  const damaged = Buffer.from(original);
  const at = damaged.length >> 1;
  damaged[at] = damaged[at]! ^ 0x01;
  writeFileSync(path, damaged);
  return () => writeFileSync(path, original);
}

describe('result files are verified by their checksum before they are served', () => {
  it('a damaged safetensors result is 500 RESULT_CORRUPT over HTTP, and its job failed', async () => {
    const job = await waitJob(
      t.port,
      (await submitUpload(t.port, modelBytes(smallModel(1)), '?qdtype=int8')).id,
      finished,
    );
    expect(job.state, JSON.stringify(job.error)).toBe('succeeded');
    const file = job.result!.files[0]! as { name: string; sha256?: string };
    const good = await send(t.port, `/v1/jobs/${job.id}/result`);
    expect(good.status).toBe(200);
    expect(file.sha256).toBe(sha256(good.body));

    const restore = flipByte(join(data, 'jobs', job.id, 'result', file.name));
    try {
      // one chunk: nothing was sent when the hash failed, so the answer is a clean problem
      const bad = await send(t.port, `/v1/jobs/${job.id}/result`);
      expectProblem(bad, 'RESULT_CORRUPT', [file.name, file.sha256!]);
    } finally {
      restore();
    }
    const failed = await waitJob(t.port, job.id, finished);
    expect(failed).toMatchObject({ state: 'failed', error: { code: 'RESULT_CORRUPT' }, result: null });
    expectProblem(await send(t.port, `/v1/jobs/${job.id}/result`), 'JOB_NOT_READY', ['failed']);
  });

  it('over gRPC a damaged result is DATA_LOSS RESULT_CORRUPT, and its job failed', async () => {
    const job = await waitJob(
      t.port,
      (await submitUpload(t.port, modelBytes(smallModel(4)), '?qdtype=int8')).id,
      finished,
    );
    const file = job.result!.files[0]!;
    flipByte(join(data, 'jobs', job.id, 'result', file.name));
    const client = await jobsClient(`127.0.0.1:${t.server.grpcPort}`);
    try {
      const { error } = await receive(client.Result({ id: job.id }));
      expect(error?.code).toBe(grpc.status.DATA_LOSS);
      expect(error?.metadata.get('quantd-code')).toEqual(['RESULT_CORRUPT']);
      const again = await receive(client.Result({ id: job.id }));
      expect(again.error?.metadata.get('quantd-code')).toEqual(['JOB_NOT_READY']);
    } finally {
      client.close();
    }
    expect(await waitJob(t.port, job.id, finished)).toMatchObject({
      state: 'failed',
      error: { code: 'RESULT_CORRUPT' },
    });
  });

  it('a layout result without a data checksum (GGUF) is verified too', async () => {
    const reply = await submitPath(t.port, {
      input: 'models/small.safetensors',
      op: 'quantize',
      params: { layout: 'gguf:type=Q8_0,arch=test' },
    });
    expect(reply.status, reply.body.toString()).toBe(202);
    const job = await waitJob(t.port, json<Job>(reply).id, finished);
    expect(job.state, JSON.stringify(job.error)).toBe('succeeded');
    const name = job.result!.files[0]!.name;
    expect(job.result!.files[0]!.data_sha256).toBeNull();
    flipByte(join(data, 'jobs', job.id, 'result', name));
    expectProblem(await send(t.port, `/v1/jobs/${job.id}/result`), 'RESULT_CORRUPT', [name]);
    expect(await waitJob(t.port, job.id, finished)).toMatchObject({
      state: 'failed',
      error: { code: 'RESULT_CORRUPT' },
    });
  });
});
