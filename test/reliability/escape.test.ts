/**
 * No job reads outside its roots (issue 37, item 5). A model folder named by path holds, beside
 * its weights and config.json, symlinks: one to /etc/passwd, one to another key's job result and
 * its report. Before, a folder output (the plain model run, nf4, fp4, gptq, awq) copied them into
 * the result, following the links, so key A downloaded /etc/passwd and key B's model and report.
 * Now every file a job may read — every entry of the folder, the files a layout names — goes
 * through one check (src/jobs/paths.ts, ReadRoots): at submission (403 PATH_FORBIDDEN, no job
 * made) and again when the job starts (links added after the submission: the job fails with
 * PATH_FORBIDDEN and leaves no result). Not one byte of /etc/passwd or of key B's files reaches
 * key A.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { send, type Reply } from '../http/helpers.js';
import { writeLlama } from '../interop/gptq-awq-bnb.helpers.js';
import { startChildServer, type ChildServer } from './server.js';

const KEY_A = 'key-a-0123456789abcdef';
const KEY_B = 'key-b-0123456789abcdef';
const root = mkdtempSync(join(tmpdir(), 'quantd-escape-'));
const data = join(root, 'data');
let server: ChildServer;
/** Every body key A received, to search for the secrets. */
const seenByA: Buffer[] = [];
let bModel: Buffer;
let bReport: Buffer;
const passwd = readFileSync('/etc/passwd');

const auth = (key: string): Record<string, string> => ({ authorization: `Bearer ${key}` });

async function asA(path: string, body?: unknown): Promise<Reply> {
  const reply = await send(server.port, path, {
    headers: { ...auth(KEY_A), ...(body !== undefined && { 'content-type': 'application/json' }) },
    ...(body !== undefined && { body: JSON.stringify(body) }),
  });
  seenByA.push(reply.body);
  return reply;
}

interface JobView {
  id: string;
  state: string;
  error: { code: string; message: string } | null;
  result: { files: { name: string }[] } | null;
}

async function waitFinished(id: string, key: string, ms = 60_000): Promise<JobView> {
  const deadline = Date.now() + ms;
  for (;;) {
    const reply = await send(server.port, `/v1/jobs/${id}`, { headers: auth(key) });
    if (key === KEY_A) seenByA.push(reply.body);
    const job = JSON.parse(reply.body.toString()) as JobView;
    if (['succeeded', 'failed', 'cancelled'].includes(job.state)) return job;
    if (Date.now() > deadline) throw new Error(`job ${id} did not finish: ${reply.body.toString()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Waits for key A's job and downloads every file of its result (into seenByA). */
async function downloadAll(id: string): Promise<void> {
  const job = await waitFinished(id, KEY_A);
  for (const file of job.result?.files ?? [])
    await asA(`/v1/jobs/${id}/result/${encodeURIComponent(file.name)}`);
}

/** A model folder: weights with linear layers, a config.json, and `links` (name → target). */
async function modelFolder(name: string, links: Readonly<Record<string, string>>): Promise<string> {
  const dir = join(data, 'models', name);
  mkdirSync(dir, { recursive: true });
  await writeLlama(join(dir, 'model.safetensors'), 1, 64);
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ model_type: 'llama', hidden_size: 64 }));
  writeFileSync(join(dir, 'README.md'), 'a model\n');
  for (const [link, target] of Object.entries(links)) symlinkSync(target, join(dir, link));
  return dir;
}

/** Layouts that copy a folder's other files into their result, and the plain model run. */
const COPYING: ReadonlyArray<readonly [string, Record<string, string>]> = [
  ['the model run (qdtype=int8)', { qdtype: 'int8' }],
  ['layout=nf4', { layout: 'nf4' }],
  ['layout=fp4', { layout: 'fp4' }],
  ['layout=gptq', { layout: 'gptq' }],
  ['layout=awq', { layout: 'awq' }],
  // reads config.json and the tokenizer files into the GGUF it writes
  ['layout=gguf', { layout: 'gguf:type=Q8_0,name=x' }],
];

beforeAll(async () => {
  mkdirSync(join(data, 'models'), { recursive: true });
  server = await startChildServer({
    QUANTD_DATA_DIR: data,
    QUANTD_API_KEYS: `${KEY_A},${KEY_B}`,
    QUANTD_JOB_CONCURRENCY: '1',
    // every kernel task spins this long: a job of key A holds the only runner while another waits
    QUANTD_TEST_HOOKS: '1',
    QUANTD_TEST_TASK_DELAY_MS: '1500',
  });
  // key B's finished job: the files key A's links point at
  const model = await modelFolder('b-own', {});
  const reply = await send(server.port, '/v1/jobs', {
    headers: { ...auth(KEY_B), 'content-type': 'application/json' },
    body: JSON.stringify({ input: 'models/b-own/model.safetensors', params: { qdtype: 'int8' } }),
  });
  expect(reply.status, reply.body.toString()).toBe(202);
  const b = JSON.parse(reply.body.toString()) as JobView;
  expect((await waitFinished(b.id, KEY_B)).state).toBe('succeeded');
  bModel = readFileSync(join(data, 'jobs', b.id, 'result', 'model.safetensors'));
  bReport = readFileSync(join(data, 'jobs', b.id, 'report.json'));
  rmSync(model, { recursive: true });
  const bFiles = join(data, 'jobs', b.id);
  await modelFolder('evil', {
    'passwd.txt': '/etc/passwd',
    'b-model.dat': join(bFiles, 'result', 'model.safetensors'),
    'b-report.json': join(bFiles, 'report.json'),
  });
  await modelFolder('passwd-only', { 'notes.txt': '/etc/passwd' });
  await modelFolder('jobs-only', { 'tokenizer.json': join(bFiles, 'report.json') });
}, 120_000);

afterAll(async () => {
  await server?.stop();
  rmSync(root, { recursive: true, force: true });
});

describe('a model folder with symlinks out of the allowed roots', () => {
  for (const [what, params] of COPYING) {
    it(`${what}: 403 PATH_FORBIDDEN at submission, no job made`, async () => {
      for (const [folder, detail] of [
        [
          'evil',
          /(passwd\.txt|b-model\.dat) leads outside|b-(model\.dat|report\.json) is in the data directory's jobs area/,
        ],
        ['passwd-only', /notes\.txt leads outside the data directory/],
        ['jobs-only', /tokenizer\.json is in the data directory's jobs area/],
      ] as const) {
        const reply = await asA('/v1/jobs', { input: `models/${folder}`, params });
        // accepted (as before the fix): what key A then gets, for the last test to search
        if (reply.status === 202) await downloadAll((JSON.parse(reply.body.toString()) as JobView).id);
        expect(reply.status, `${folder}: ${reply.body.toString()}`).toBe(403);
        const problem = JSON.parse(reply.body.toString()) as { code: string; detail: string };
        expect(problem.code).toBe('PATH_FORBIDDEN');
        expect(problem.detail).toMatch(detail);
      }
      const list = JSON.parse((await asA('/v1/jobs')).body.toString()) as { jobs: JobView[] };
      expect(list.jobs).toEqual([]);
    });
  }

  it('links added after the submission: the job fails PATH_FORBIDDEN when it starts, and leaves no result', async () => {
    // a job of key A's own holds the only runner (QUANTD_TEST_TASK_DELAY_MS per kernel task)
    await modelFolder('blocker', {});
    const blocker = await asA('/v1/jobs', { input: 'models/blocker', params: { layout: 'nf4' } });
    expect(blocker.status, blocker.body.toString()).toBe(202);
    const later = await modelFolder('later', {});
    const ids: string[] = [];
    for (const [, params] of COPYING.slice(0, 5)) {
      const reply = await asA('/v1/jobs', { input: 'models/later', params });
      expect(reply.status, reply.body.toString()).toBe(202);
      ids.push((JSON.parse(reply.body.toString()) as JobView).id);
    }
    const blockerJob = JSON.parse(blocker.body.toString()) as JobView;
    const running = JSON.parse((await asA(`/v1/jobs/${blockerJob.id}`)).body.toString()) as JobView;
    expect(running.state, 'the blocker still runs: the later jobs wait').not.toBe('succeeded');
    symlinkSync('/etc/passwd', join(later, 'passwd.txt'));
    for (const id of ids) {
      const job = await waitFinished(id, KEY_A);
      expect(job.state, JSON.stringify(job)).toBe('failed');
      expect(job.error?.code).toBe('PATH_FORBIDDEN');
      expect(job.error?.message).toContain('passwd.txt leads outside the data directory');
      expect(job.result).toBeNull();
      expect((await asA(`/v1/jobs/${id}/result`)).status).not.toBe(200);
      expect((await asA(`/v1/jobs/${id}/result/passwd.txt`)).status).not.toBe(200);
    }
    expect((await waitFinished(blockerJob.id, KEY_A)).state).toBe('succeeded');
  }, 120_000);

  it('not one byte of /etc/passwd or of key B’s result and report reached key A', () => {
    const all = Buffer.concat(seenByA);
    const firstLine = passwd.subarray(0, passwd.indexOf(0x0a));
    expect(all.includes(firstLine)).toBe(false);
    const digest = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
    for (const body of seenByA) expect([digest(bModel), digest(bReport)]).not.toContain(digest(body));
    expect(all.includes(bReport.subarray(0, 64))).toBe(false);
    expect(server.alive()).toBe(true);
  });
});
