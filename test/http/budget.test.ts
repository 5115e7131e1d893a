/**
 * HTTP admission by bytes and by pool (src/http/app.ts, shed.ts, body.ts, op-routes.ts):
 *  - a declared body is charged against the memory budget before it is read (times the copies
 *    this transport makes, src/http/budget.ts): 503 OVERLOADED when the budget cannot hold it
 *    beside the requests in flight — the same answer from early shedding as from Fastify's path —
 *    and 413 MEMORY_BUDGET_EXCEEDED when the budget could never hold it; a chunked body is
 *    charged as it grows;
 *  - downloads of finished results take the download pool (QUANTD_DOWNLOAD_LIMIT), not a compute
 *    slot: they are answered while every compute slot is held.
 * Real listening servers (inject() bypasses the server's listeners).
 */
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { REPO } from '../cli/run-cli.js';
import { expectProblem, octetHeaders, send, startTestServer, type TestServer } from './helpers.js';
import { SAFETENSORS, modelBytes, smallModel, submitUpload, tempDir, waitJob } from '../jobs/helpers.js';
import type * as App from '../../src/http/app.js';
import type * as Service from '../../src/service/index.js';

const APP_URL = pathToFileURL(join(REPO, 'dist', 'src', 'http', 'app.js')).href;
const SERVICE_URL = pathToFileURL(join(REPO, 'dist', 'src', 'service', 'index.js')).href;

const MiB = 2 ** 20;
const BUDGET = 8 * MiB;

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer({ QUANTD_POOL_SIZE: '1' });
});
afterAll(async () => {
  await t?.server.shutdown('test');
});

interface Served {
  readonly app: FastifyInstance;
  readonly port: number;
  /** A request of the app's admission, holding `bytes` of the budget until released. */
  hold(bytes: number): () => void;
}

/** An app on an admission of 8 slots and an 8 MiB budget, listening on an ephemeral port. */
async function budgetApp(earlyShed: boolean): Promise<Served> {
  const { buildApp } = (await import(APP_URL)) as typeof App;
  const { Admission } = (await import(SERVICE_URL)) as typeof Service;
  const admission = new Admission(8, BUDGET);
  const app = await buildApp({
    config: { ...t.server.config, bodyLimit: 64 * MiB },
    handle: t.server.handle,
    version: 'test',
    isReady: () => true,
    admission,
    earlyShed,
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  return {
    app,
    port: (app.server.address() as AddressInfo).port,
    hold(bytes) {
      const slot = admission.acquire();
      slot.charge(bytes, 'a request held by the test');
      return slot;
    },
  };
}

let early: Served;
let fastify: Served;
beforeAll(async () => {
  early = await budgetApp(true);
  fastify = await budgetApp(false);
});
afterAll(async () => {
  await early?.app.close();
  await fastify?.app.close();
});

const tensor = (bytes: number): Uint8Array => new Uint8Array(new Float32Array(bytes / 4).fill(0.5).buffer);
const quantize = (port: number, body: Uint8Array, chunked?: number): ReturnType<typeof send> =>
  send(port, '/v1/quantize?qdtype=int8', {
    headers: octetHeaders('float32', [body.byteLength / 4]),
    body,
    ...(chunked !== undefined && { chunked }),
  });

describe('the memory budget over HTTP', () => {
  it.each([
    ['early shedding', () => early],
    ["Fastify's path", () => fastify],
  ])('%s: 503 OVERLOADED for a body the budget cannot hold now; what fits passes', async (_name, served) => {
    const { port, hold } = served();
    const release = hold(6 * MiB);
    try {
      // 2 MiB declared: 3 MiB charged beside 6 of 8
      const refused = await quantize(port, tensor(2 * MiB));
      const problem = expectProblem(refused, 'OVERLOADED', ['retry later'], '/v1/quantize?qdtype=int8');
      expect(problem.params).toEqual({ queued: 1, limit: 8 });
      expect(refused.headers['retry-after']).toBe('1');
      // 256 KiB: 384 KiB charged, and its 64 KiB result once planned
      expect((await quantize(port, tensor(256 * 1024))).status).toBe(200);
    } finally {
      release();
    }
    expect((await quantize(port, tensor(2 * MiB))).status, 'the budget freed').toBe(200);
  });

  it('413 MEMORY_BUDGET_EXCEEDED for a body the whole budget could never hold, before it is read', async () => {
    // 6 MiB declared: 9 MiB charged, more than the 8 MiB budget
    const reply = await quantize(early.port, tensor(6 * MiB));
    const problem = expectProblem(reply, 'MEMORY_BUDGET_EXCEEDED', ['QUANTD_MEMORY_BUDGET']);
    expect(problem.params).toMatchObject({ need: 9 * MiB, budget: BUDGET });
    expect(reply.headers['connection'], 'the unread body: the connection closes').toBe('close');
  });

  it('charges a chunked body as it grows: refused once it passes what the budget has left', async () => {
    const release = early.hold(4 * MiB);
    try {
      // 4 MiB sent chunked: its buffer grows 1 → 2 → 4 MiB, charged 1.5 + 3 + 6 MiB
      expectProblem(await quantize(early.port, tensor(4 * MiB), 64 * 1024), 'OVERLOADED');
    } finally {
      release();
    }
    expect((await quantize(early.port, tensor(2 * MiB), 64 * 1024)).status, 'alone it fits').toBe(200);
  });
});

describe('downloads', () => {
  const root = tempDir('downloads');
  let s: TestServer;
  let id: string;
  beforeAll(async () => {
    // one compute slot (one thread, no queue), one download
    s = await startTestServer({
      QUANTD_DATA_DIR: root,
      QUANTD_POOL_SIZE: '1',
      QUANTD_QUEUE_LIMIT: '0',
      QUANTD_DOWNLOAD_LIMIT: '1',
    });
    id = (await submitUpload(s.port, modelBytes(smallModel()), '?qdtype=int8')).id;
    await waitJob(s.port, id, (j) => j.state === 'succeeded');
  });
  afterAll(async () => {
    await s?.server.shutdown('test');
    rmSync(root, { recursive: true, force: true });
  });

  it('are answered while every compute slot is held', async () => {
    // a request that declares a body and sends none holds the only compute slot
    const holder = net.connect(s.port, '127.0.0.1');
    holder.on('error', () => undefined);
    holder.write(
      'POST /v1/quantize?qdtype=int8 HTTP/1.1\r\nHost: x\r\ncontent-type: application/octet-stream\r\n' +
        'x-tensor-dtype: float32\r\nx-tensor-shape: 1024\r\ncontent-length: 4096\r\n\r\n',
    );
    try {
      await expect
        .poll(async () => (await quantize(s.port, tensor(4096))).status, { timeout: 3000 })
        .toBe(503);
      const result = await send(s.port, `/v1/jobs/${id}/result`);
      expect(result.status, result.body.toString().slice(0, 200)).toBe(200);
      expect(result.headers['content-type']).toBe(SAFETENSORS);
      expect((await send(s.port, `/v1/jobs/${id}/report`)).status).toBe(200);
    } finally {
      holder.destroy();
    }
  });
});
