/**
 * Uploads that must not become jobs, on real servers over raw sockets where no client library
 * would send the request:
 *  - a body shorter than its Content-Length, the connection half-closed: 400 BODY_INCOMPLETE,
 *    and nothing left in the jobs directory; the connection reset mid-body: nothing left either;
 *  - larger than QUANTD_UPLOAD_LIMIT: 413 PAYLOAD_TOO_LARGE before a byte is read (declared), or
 *    once past the limit (chunked); nothing left;
 *  - a declared length larger than the free space: 507 STORAGE_FULL before a byte is read;
 *  - a data directory that cannot be created: 500 OUTPUT_UNWRITABLE naming it (relative to itself);
 *  - an upload is written to disk as it arrives (half of it is there before the rest is sent).
 */
import { existsSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { expectProblem, parseRaw, rawExchange, send, type TestServer } from '../http/helpers.js';
import {
  SAFETENSORS,
  f32Tensor,
  finished,
  modelBytes,
  smallModel,
  startJobServer,
  tempDir,
  waitJob,
} from './helpers.js';

const root = tempDir('uploads');
const data = join(root, 'data');
let t: TestServer;

beforeAll(async () => {
  t = await startJobServer(data, { QUANTD_UPLOAD_LIMIT: '64k' });
});
afterAll(async () => {
  await t?.server.shutdown('test done');
  rmSync(root, { recursive: true, force: true });
});

const jobDirs = (): string[] => (existsSync(join(data, 'jobs')) ? readdirSync(join(data, 'jobs')) : []);

const head = (length: number | null, extra = ''): string =>
  `POST /v1/jobs?qdtype=int8 HTTP/1.1\r\nHost: x\r\nContent-Type: ${SAFETENSORS}\r\n` +
  (length === null ? 'Transfer-Encoding: chunked\r\n' : `Content-Length: ${length}\r\n`) +
  `${extra}\r\n`;

async function noJobsLeft(): Promise<void> {
  const deadline = Date.now() + 5000;
  while (jobDirs().length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  expect(jobDirs()).toEqual([]);
  expect((await send(t.port, '/v1/jobs')).body.toString()).toBe('{"jobs":[]}');
}

describe('an upload that ends early creates no job', () => {
  const body = modelBytes(smallModel(1));

  it.each([100, 0])(
    'body shorter than Content-Length, half-closed after %i ms: 400 BODY_INCOMPLETE, no files',
    async (waitMs) => {
      const r = await rawExchange(t.port, [
        head(body.byteLength),
        body.subarray(0, 1000),
        { waitMs },
        'half-close',
      ]);
      const response = parseRaw(r.text)!;
      expect(response, r.text).not.toBeNull();
      expectProblem(
        { status: response.status, headers: response.headers, body: response.body },
        'BODY_INCOMPLETE',
        [`after 1000 of ${body.byteLength} bytes`],
      );
      await noJobsLeft();
    },
  );

  it('connection reset mid-body: no job, no files', async () => {
    await new Promise<void>((resolve) => {
      const socket = net.connect({ port: t.port, host: '127.0.0.1' }, () => {
        socket.write(head(body.byteLength));
        socket.write(body.subarray(0, 2000));
        // wait until the server has the job directory, then reset the connection
        const poll = setInterval(() => {
          if (jobDirs().length > 0) {
            clearInterval(poll);
            socket.resetAndDestroy();
            resolve();
          }
        }, 5);
      });
      socket.on('error', () => {});
    });
    await noJobsLeft();
  });
});

describe('limits', () => {
  it('declared larger than QUANTD_UPLOAD_LIMIT: 413 before reading, no files', async () => {
    const r = await rawExchange(t.port, [head(65 * 1024)]);
    const response = parseRaw(r.text)!;
    expectProblem(
      { status: response.status, headers: response.headers, body: response.body },
      'PAYLOAD_TOO_LARGE',
    );
    expect(response.headers['connection']).toBe('close');
    await noJobsLeft();
  });

  it('chunked past the limit: 413 once past it, no files', async () => {
    const reply = await send(t.port, '/v1/jobs', {
      headers: { 'content-type': SAFETENSORS },
      body: new Uint8Array(80 * 1024),
      chunked: 8192,
    });
    expectProblem(reply, 'PAYLOAD_TOO_LARGE', ['more than 65536']);
    await noJobsLeft();
  });

  it('a chunked upload within the limit is a job', async () => {
    const model = modelBytes([f32Tensor('w', [16, 64], 3)]);
    const reply = await send(t.port, '/v1/jobs?scheme=per_channel', {
      headers: { 'content-type': SAFETENSORS },
      body: model,
      chunked: 1000,
    });
    expect(reply.status, reply.body.toString()).toBe(202);
    const job = JSON.parse(reply.body.toString()) as { id: string; input: { bytes: number } };
    expect(job.input.bytes).toBe(model.byteLength);
    expect((await waitJob(t.port, job.id, finished)).state).toBe('succeeded');
    expect((await send(t.port, `/v1/jobs/${job.id}`, { method: 'DELETE' })).status).toBe(204);
  });
});

describe('storage', () => {
  it('larger than the free space: 507 STORAGE_FULL before a byte is read', async () => {
    const big = await startJobServer(join(root, 'big'), { QUANTD_UPLOAD_LIMIT: '1048576g' });
    try {
      // 2^50 bytes (1 PiB): within the limit, beyond any test machine's disk
      const r = await rawExchange(big.port, [head(2 ** 50)]);
      const response = parseRaw(r.text)!;
      expectProblem(
        { status: response.status, headers: response.headers, body: response.body },
        'STORAGE_FULL',
        // the server's own paths are relative to its data directory (src/service/client-errors.ts)
        ['writing jobs;'],
      );
      expect(response.body).not.toContain(root);
      expect(readdirSync(join(root, 'big', 'jobs'))).toEqual([]);
    } finally {
      await big.server.shutdown('test done');
    }
  });

  it('an unwritable data directory: 500 OUTPUT_UNWRITABLE naming it', async () => {
    // a data directory under a regular file cannot be created, even by root (ENOTDIR)
    mkdirSync(join(root, 'blocked'));
    writeFileSync(join(root, 'blocked', 'file'), 'not a directory');
    const dataDir = join(root, 'blocked', 'file', 'data');
    const blocked = await startJobServer(dataDir);
    try {
      const reply = await send(blocked.port, '/v1/jobs', {
        headers: { 'content-type': SAFETENSORS },
        body: modelBytes(smallModel(2)),
      });
      expectProblem(reply, 'OUTPUT_UNWRITABLE', ['cannot write jobs:']);
      expect(reply.body.toString()).not.toContain(root);
      // the rest of the API still answers
      expect((await send(blocked.port, '/v1/jobs')).body.toString()).toBe('{"jobs":[]}');
    } finally {
      await blocked.server.shutdown('test done');
    }
  });

  it('an upload is streamed to disk as it arrives, not held until its end', async () => {
    // 8 MiB: the first half is on disk before the second half is sent
    const body = modelBytes([f32Tensor('big', [512, 4096], 5)]);
    const half = body.byteLength / 2;
    const bigLimit = await startJobServer(join(root, 'stream'), { QUANTD_UPLOAD_LIMIT: '1g' });
    try {
      const s = net.connect({ port: bigLimit.port, host: '127.0.0.1' });
      let answer = '';
      s.on('data', (d: Buffer) => (answer += d.toString('latin1')));
      s.write(head(body.byteLength));
      s.write(body.subarray(0, half));
      const jobs = join(root, 'stream', 'jobs');
      const onDisk = (): number => {
        const ids = existsSync(jobs) ? readdirSync(jobs) : [];
        const file = ids.length === 1 ? join(jobs, ids[0]!, 'input.safetensors') : null;
        return file && existsSync(file) ? statSync(file).size : 0;
      };
      const deadline = Date.now() + 10_000;
      while (onDisk() < half - (1 << 20) && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 10));
      expect(onDisk()).toBeGreaterThanOrEqual(half - (1 << 20));
      expect(answer).toBe('');
      s.write(body.subarray(half));
      while (!parseRaw(answer)?.complete && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 10));
      const response = parseRaw(answer)!;
      expect(response.status, answer).toBe(202);
      const job = JSON.parse(response.body) as { id: string; input: unknown };
      expect(job.input).toEqual({ kind: 'upload', bytes: body.byteLength });
      expect((await waitJob(bigLimit.port, job.id, finished)).state).toBe('succeeded');
      s.destroy();
    } finally {
      await bigLimit.server.shutdown('test done');
    }
  });
});
