/**
 * Jobs belong to the key that made them (QUANTD_API_KEYS), an admin key (QUANTD_ADMIN_KEYS) sees
 * them all, each key has a quota (QUANTD_JOB_QUOTA queued + running, QUANTD_JOB_LIMIT kept), and
 * GET /v1/jobs (gRPC List) returns pages: on a real server, over HTTP and gRPC.
 */
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { expectProblem, send, type TestServer } from '../http/helpers.js';
import { finished, json, smallModel, startJobServer, tempDir, writeModel, type Job } from './helpers.js';

const ALICE = 'alice-key-0123456789';
const BOB = 'bob-key-0123456789ab';
const ADMIN = 'admin-key-0123456789';
const root = tempDir('ownership');
let t: TestServer;

const auth = (key: string): Record<string, string> => ({ authorization: `Bearer ${key}` });

function submit(key: string): ReturnType<typeof send> {
  return send(t.port, '/v1/jobs', {
    headers: { 'content-type': 'application/json', ...auth(key) },
    body: JSON.stringify({ input: 'model.safetensors', params: { qdtype: 'int8' } }),
  });
}

async function submitted(key: string): Promise<Job> {
  const reply = await submit(key);
  expect(reply.status, reply.body.toString()).toBe(202);
  return json<Job>(reply);
}

/** Waits until `job` is finished, reading it as `key` (its owner). */
async function settled(job: Job, key: string): Promise<void> {
  for (let i = 0; i < 1500; i++) {
    const r = await send(t.port, `/v1/jobs/${job.id}`, { headers: auth(key) });
    if (finished(json<Job>(r))) return;
    await new Promise((res) => setTimeout(res, 20));
  }
  throw new Error(`job ${job.id} did not finish`);
}

async function listAll(key: string, limit: number): Promise<string[]> {
  const ids: string[] = [];
  let cursor: string | undefined;
  for (;;) {
    const q = `limit=${limit}${cursor ? `&cursor=${cursor}` : ''}`;
    const reply = await send(t.port, `/v1/jobs?${q}`, { headers: auth(key) });
    expect(reply.status, reply.body.toString()).toBe(200);
    const page = json<{ jobs: Job[]; next?: string }>(reply);
    expect(page.jobs.length).toBeLessThanOrEqual(limit);
    ids.push(...page.jobs.map((j) => j.id));
    if (page.next === undefined) return ids;
    cursor = page.next;
  }
}

beforeAll(async () => {
  writeModel(join(root, 'model.safetensors'), smallModel());
  t = await startJobServer(root, {
    QUANTD_API_KEYS: `${ALICE},${BOB}`,
    QUANTD_ADMIN_KEYS: ADMIN,
    QUANTD_JOB_QUOTA: '3',
    QUANTD_JOB_LIMIT: '12',
  });
});
afterAll(async () => {
  await t?.server.shutdown('test done');
});

describe('ownership, pagination and quotas', () => {
  const alices: Job[] = [];
  const bobs: Job[] = [];

  it("a key sees, reads and deletes only its own jobs; another key's job is JOB_NOT_FOUND", async () => {
    for (let i = 0; i < 3; i++) alices.push(await submitted(ALICE));
    bobs.push(await submitted(BOB));
    for (const job of alices) await settled(job, ALICE);
    await settled(bobs[0]!, BOB);
    const bob = bobs[0]!;
    for (const path of [`/v1/jobs/${bob.id}`, `/v1/jobs/${bob.id}/result`, `/v1/jobs/${bob.id}/report`]) {
      expectProblem(await send(t.port, path, { headers: auth(ALICE) }), 'JOB_NOT_FOUND');
    }
    expectProblem(
      await send(t.port, `/v1/jobs/${bob.id}`, { method: 'DELETE', headers: auth(ALICE) }),
      'JOB_NOT_FOUND',
    );
    expect((await send(t.port, `/v1/jobs/${bob.id}`, { headers: auth(BOB) })).status).toBe(200);
    expect((await send(t.port, `/v1/jobs/${bob.id}`, { headers: auth(ADMIN) })).status).toBe(200);
    expect(new Set(await listAll(ALICE, 100))).toEqual(new Set(alices.map((j) => j.id)));
    expect(await listAll(BOB, 100)).toEqual([bob.id]);
    expect(new Set(await listAll(ADMIN, 100))).toEqual(new Set([...alices, bob].map((j) => j.id)));
  });

  it('pages walk every job once, newest first; a bad limit or cursor is OPTION_INVALID', async () => {
    for (let i = 0; i < 6; i++) {
      const job = await submitted(ALICE);
      alices.push(job);
      await settled(job, ALICE);
    }
    const all = await listAll(ALICE, 100);
    expect(all).toHaveLength(alices.length);
    expect(await listAll(ALICE, 4)).toEqual(all);
    expect(await listAll(ALICE, 1)).toEqual(all);
    expect(all[0]).toBe(alices[alices.length - 1]!.id);
    expectProblem(await send(t.port, '/v1/jobs?limit=0', { headers: auth(ALICE) }), 'OPTION_INVALID');
    expectProblem(await send(t.port, '/v1/jobs?cursor=nonsense', { headers: auth(ALICE) }), 'OPTION_INVALID');
  });

  it('QUANTD_JOB_LIMIT: a key keeping that many jobs gets 429 QUOTA_EXCEEDED; deleting one frees room', async () => {
    while (alices.length < 12) {
      const job = await submitted(ALICE);
      alices.push(job);
      await settled(job, ALICE);
    }
    const refused = await submit(ALICE);
    expectProblem(refused, 'QUOTA_EXCEEDED', ['QUANTD_JOB_LIMIT 12']);
    expect(refused.headers['retry-after']).toBeDefined();
    expect((await submit(BOB)).status).toBe(202); // another key's room is its own
    const gone = alices.shift()!;
    expect(
      (await send(t.port, `/v1/jobs/${gone.id}`, { method: 'DELETE', headers: auth(ALICE) })).status,
    ).toBe(204);
    expect((await submit(ALICE)).status).toBe(202);
  });

  it('gRPC: List pages the caller own jobs; Get of another key is NOT_FOUND', async () => {
    const { JOBS_PROTO_FILE } = await import('../../src/grpc/jobs.js');
    const definition = protoLoader.loadSync(JOBS_PROTO_FILE, {
      includeDirs: [new URL('../../proto', import.meta.url).pathname],
      keepCase: true,
      longs: Number,
      enums: String,
      defaults: false,
    });
    const Jobs = (
      grpc.loadPackageDefinition(definition) as unknown as {
        quantd: { v1: { Jobs: grpc.ServiceClientConstructor } };
      }
    ).quantd.v1.Jobs;
    const client = new Jobs(
      `127.0.0.1:${t.server.grpcPort}`,
      grpc.credentials.createInsecure(),
    ) as unknown as Record<
      string,
      (req: unknown, md: grpc.Metadata, cb: (err: grpc.ServiceError | null, res: unknown) => void) => void
    >;
    const md = (key: string): grpc.Metadata => {
      const m = new grpc.Metadata();
      m.set('authorization', `Bearer ${key}`);
      return m;
    };
    const call = (rpc: string, req: unknown, key: string): Promise<unknown> =>
      new Promise((resolve, reject) =>
        client[rpc]!.call(client, req, md(key), (err, res) => (err ? reject(err) : resolve(res))),
      );
    const ids: string[] = [];
    let token = '';
    do {
      const page = (await call('List', { page_size: 5, page_token: token }, ALICE)) as {
        jobs?: Array<{ id: string }>;
        next_page_token?: string;
      };
      expect((page.jobs ?? []).length).toBeLessThanOrEqual(5);
      ids.push(...(page.jobs ?? []).map((j) => j.id));
      token = page.next_page_token ?? '';
    } while (token !== '');
    expect(ids).toEqual(await listAll(ALICE, 100));
    const err = (await call('Get', { id: bobs[0]!.id }, ALICE).catch((e: unknown) => e)) as grpc.ServiceError;
    expect(err.code).toBe(grpc.status.NOT_FOUND);
    (client as unknown as grpc.Client).close();
  });
});
