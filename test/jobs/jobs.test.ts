/**
 * Jobs over HTTP (docs/models.md), on a real server with a data directory of its own:
 *  - an uploaded model: 202 + Location, queued → succeeded, the result file byte-identical in
 *    every tensor to `quantd quantize` with the same options (plus a correct quantd.data_sha256),
 *    served with Content-Length and ETag = that SHA-256, a report worst first; the upload itself
 *    is gone once the job is done; DELETE of a finished job removes it (204);
 *  - a sharded model named by path (the JSON form): /result lists the files, each downloads and
 *    matches the CLI's shard, the index maps every output tensor; a recipe job;
 *  - paths that leave the data directory (.., absolute, a symlink, a shard that is a symlink, the
 *    jobs area): 403 PATH_FORBIDDEN; missing: 404 FILE_NOT_FOUND; unknown and malformed ids:
 *    404 JOB_NOT_FOUND; bad options, recipes, fields and models: 400 at submission, no job made.
 */
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { parseSafetensors } from '../../src/format/index.js';
import { quantdAsync } from '../cli/cli-helpers.js';
import { cliArgs, expectProblem, queryOf, send, type TestServer } from '../http/helpers.js';
import {
  JOB_KEYS,
  SAFETENSORS,
  cliFile,
  expectSameTensors,
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
  writeShardedModel,
  f32Tensor,
  type Job,
} from './helpers.js';

const root = tempDir('http');
const data = join(root, 'data');
const scratch = join(root, 'scratch');
let t: TestServer;

beforeAll(async () => {
  mkdirSync(data);
  mkdirSync(scratch);
  t = await startJobServer(data);
});
afterAll(async () => {
  await t?.server.shutdown('test done');
  rmSync(root, { recursive: true, force: true });
});

const jobDirs = (): string[] => (existsSync(join(data, 'jobs')) ? readdirSync(join(data, 'jobs')) : []);

/** SHA-256 of a safetensors file's data section. */
function dataSha256(bytes: Uint8Array): string {
  const headerLength = Number(Buffer.from(bytes.buffer, bytes.byteOffset, 8).readBigUInt64LE(0));
  return createHash('sha256')
    .update(bytes.subarray(8 + headerLength))
    .digest('hex');
}

describe('an uploaded model', () => {
  const OPTIONS = [
    ['qdtype', 'int8'],
    ['scheme', 'per_channel'],
    ['mode', 'symmetric'],
  ] as const;

  it('runs to succeeded, and its result is the CLI’s output, tensor for tensor', async () => {
    const model = smallModel(3);
    const input = writeModel(join(scratch, 'upload.safetensors'), model);
    const expected = await cliFile(input, join(scratch, 'upload.cli.safetensors'), OPTIONS);

    const submitted = await submitUpload(t.port, modelBytes(model), queryOf(OPTIONS));
    expect(Object.keys(submitted)).toEqual(JOB_KEYS);
    expect(submitted).toMatchObject({
      state: 'queued',
      op: 'quantize',
      input: { kind: 'upload', bytes: modelBytes(model).byteLength },
      finished_at: null,
      error: null,
      result: null,
    });
    expect(submitted.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(Number.isNaN(Date.parse(submitted.created_at))).toBe(false);

    const job = await waitJob(t.port, submitted.id, finished);
    expect(job.state, JSON.stringify(job.error)).toBe('succeeded');
    expect(job.attempts).toBe(1);
    expect(job.started_at).not.toBeNull();
    expect(job.finished_at).not.toBeNull();
    expect(job.progress).toMatchObject({ tensors_done: 4, tensors_total: 4, eta_seconds: 0 });
    expect(job.result!.sharded).toBe(false);
    expect(job.result!.files.map((f) => f.name)).toEqual(['model.safetensors']);

    const reply = await send(t.port, `/v1/jobs/${job.id}/result`);
    expect(reply.status).toBe(200);
    expect(reply.headers['content-type']).toBe(SAFETENSORS);
    expect(Number(reply.headers['content-length'])).toBe(reply.body.byteLength);
    expect(reply.body.byteLength).toBe(job.result!.files[0]!.bytes);
    const sha = dataSha256(reply.body);
    expect(job.result!.files[0]!.data_sha256).toBe(sha);
    expect(reply.headers['etag']).toBe(`"${sha}"`);
    expectSameTensors(reply.body, expected, 'upload result');
    expect(parseSafetensors(reply.body, 'result').header.metadata?.['quantd.data_sha256']).toBe(sha);

    // the same file by name; and an ETag match answers 304
    const byName = await send(t.port, `/v1/jobs/${job.id}/result/model.safetensors`);
    expect(byName.status).toBe(200);
    expect(byName.body.equals(reply.body)).toBe(true);
    const cached = await send(t.port, `/v1/jobs/${job.id}/result`, {
      headers: { 'if-none-match': `"${sha}"` },
    });
    expect(cached.status).toBe(304);

    // the report: every quantized tensor, worst (lowest SQNR) first
    const report = await send(t.port, `/v1/jobs/${job.id}/report`);
    expect(report.status).toBe(200);
    expect(report.headers['content-type']).toMatch(/^application\/json/);
    const r = json<{ format: string; tensors: { name: string; sqnr_db: number | null }[] }>(report);
    expect(r.format).toBe('quantd.report/1');
    // the 1-D bias and norm pass through (README, 1-D tensors): the matrices are quantized
    const matrices = model.filter((x) => x.shape.length >= 2).map((x) => x.name);
    expect(r.tensors.map((x) => x.name).sort()).toEqual(matrices.sort());
    const sqnr = r.tensors.map((x) => x.sqnr_db ?? Infinity);
    expect(sqnr).toEqual([...sqnr].sort((a, b) => a - b));

    // the upload is not kept once the job is done; the result and report are
    const files = readdirSync(join(data, 'jobs', job.id)).sort();
    expect(files).toEqual(['job.json', 'report.json', 'result']);

    // listed, newest first
    const second = await submitUpload(t.port, modelBytes(smallModel(4)), queryOf(OPTIONS));
    const list = json<{ jobs: Job[] }>(await send(t.port, '/v1/jobs'));
    expect(list.jobs.map((j) => j.id).slice(0, 2)).toEqual([second.id, job.id]);
    await waitJob(t.port, second.id, finished);

    // DELETE of a finished job removes it
    const removed = await send(t.port, `/v1/jobs/${job.id}`, { method: 'DELETE' });
    expect(removed.status).toBe(204);
    expect(existsSync(join(data, 'jobs', job.id))).toBe(false);
    expectProblem(await send(t.port, `/v1/jobs/${job.id}`), 'JOB_NOT_FOUND', [job.id]);
    expectProblem(await send(t.port, `/v1/jobs/${job.id}`, { method: 'DELETE' }), 'JOB_NOT_FOUND');
  });

  it('takes application/octet-stream too, and op=dequantize of a quantized model', async () => {
    const model = smallModel(5);
    const quantized = join(scratch, 'dq-in.safetensors');
    await cliFile(writeModel(join(scratch, 'dq-src.safetensors'), model), quantized, OPTIONS);
    const expected = await cliFile(
      quantized,
      join(scratch, 'dq.cli.safetensors'),
      [['dtype', 'bfloat16']],
      'dequantize',
    );
    const reply = await send(t.port, '/v1/jobs?op=dequantize&dtype=bfloat16', {
      headers: { 'content-type': 'application/octet-stream' },
      body: readFileSync(quantized),
    });
    expect(reply.status, reply.body.toString()).toBe(202);
    const job = await waitJob(t.port, json<Job>(reply).id, finished);
    expect(job).toMatchObject({ state: 'succeeded', op: 'dequantize' });
    const result = await send(t.port, `/v1/jobs/${job.id}/result`);
    expectSameTensors(result.body, expected, 'dequantize result');
  });
});

describe('a sharded model named by path', () => {
  it('writes one output shard per input shard and an index mapping every output tensor', async () => {
    const modelDir = join(data, 'models', 'sharded');
    mkdirSync(modelDir, { recursive: true });
    const shards = [smallModel(11).slice(0, 2), smallModel(12).slice(2)];
    const index = writeShardedModel(modelDir, shards);
    const OPTIONS = [
      ['qdtype', 'int4'],
      ['scheme', 'per_channel'],
      ['mode', 'symmetric'],
    ] as const;
    const cliOut = join(scratch, 'sharded-cli');
    const cli = await quantdAsync(['quantize', modelDir, '-o', cliOut, '-q', ...cliArgs(OPTIONS)]);
    expect(cli.code, cli.stderr).toBe(0);

    const reply = await submitPath(t.port, {
      input: 'models/sharded',
      op: 'quantize',
      params: Object.fromEntries(OPTIONS),
    });
    expect(reply.status, reply.body.toString()).toBe(202);
    const submitted = json<Job>(reply);
    expect(submitted.input).toMatchObject({ kind: 'path', path: 'models/sharded' });
    const job = await waitJob(t.port, submitted.id, finished);
    expect(job.state, JSON.stringify(job.error)).toBe('succeeded');
    expect(job.result!.sharded).toBe(true);
    const names = job.result!.files.map((f) => f.name);
    expect(names).toEqual(['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors', index]);

    const list = await send(t.port, `/v1/jobs/${job.id}/result`);
    expect(list.status).toBe(200);
    expect(list.headers['content-type']).toMatch(/^application\/json/);
    const listed = json<{ sharded: boolean; files: { name: string; bytes: number; href: string }[] }>(list);
    expect(listed.sharded).toBe(true);
    expect(listed.files.map((f) => f.name)).toEqual(names);

    const outputs = new Map<string, Buffer>();
    for (const f of listed.files) {
      const file = await send(t.port, f.href);
      expect(file.status, f.name).toBe(200);
      expect(file.body.byteLength).toBe(f.bytes);
      outputs.set(f.name, file.body);
    }
    for (const shard of names.slice(0, 2)) {
      expectSameTensors(outputs.get(shard)!, readFileSync(join(cliOut, shard)), shard);
    }
    const outIndex = JSON.parse(outputs.get(index)!.toString()) as { weight_map: Record<string, string> };
    const mapped = Object.keys(outIndex.weight_map).sort();
    const inShards = names
      .slice(0, 2)
      .flatMap((n) => parseSafetensors(outputs.get(n)!, n).header.entries.map((e) => e.name))
      .sort();
    expect(mapped).toEqual(inShards);
    expect(mapped).toContain('model.layers.0.mlp.weight.scale');
    for (const [tensor, shard] of Object.entries(outIndex.weight_map)) {
      expect(parseSafetensors(outputs.get(shard)!, shard).header.entries.some((e) => e.name === tensor)).toBe(
        true,
      );
    }

    // a file that is not the result's: 404, and never a path elsewhere
    expectProblem(await send(t.port, `/v1/jobs/${job.id}/result/other.safetensors`), 'NOT_FOUND');
    expectProblem(await send(t.port, `/v1/jobs/${job.id}/result/..%2Fjob.json`), 'NOT_FOUND');
  });

  it('runs a recipe given in the JSON form, and a single file by path is named like its input', async () => {
    mkdirSync(join(data, 'single'), { recursive: true });
    const model = smallModel(21);
    writeModel(join(data, 'single', 'weights.safetensors'), model);
    const recipe = {
      default: { qdtype: 'int8', scheme: 'per_channel' },
      rules: [{ glob: '*.attn.*', qdtype: 'int4', scheme: 'per_group', group_size: 32, mode: 'symmetric' }],
    };
    const recipePath = join(scratch, 'recipe.json');
    writeFileSync(recipePath, JSON.stringify(recipe));
    const expected = await cliFile(
      join(data, 'single', 'weights.safetensors'),
      join(scratch, 'recipe.cli.safetensors'),
      [['recipe', recipePath]],
    );
    const reply = await submitPath(t.port, { input: 'single/weights.safetensors', recipe });
    expect(reply.status, reply.body.toString()).toBe(202);
    const job = await waitJob(t.port, json<Job>(reply).id, finished);
    expect(job.state, JSON.stringify(job.error)).toBe('succeeded');
    expect(job.result!.files.map((f) => f.name)).toEqual(['weights.safetensors']);
    const result = await send(t.port, `/v1/jobs/${job.id}/result`);
    expectSameTensors(result.body, expected, 'recipe result');
  });
});

describe('paths are resolved inside the data directory', () => {
  beforeAll(() => {
    writeModel(join(root, 'outside.safetensors'), smallModel(31));
    mkdirSync(join(data, 'links'), { recursive: true });
    symlinkSync(join(root, 'outside.safetensors'), join(data, 'links', 'escape.safetensors'));
    // a shard index inside whose shard is a link to a file outside
    const linked = join(data, 'links', 'sharded');
    mkdirSync(linked);
    writeShardedModel(linked, [smallModel(32).slice(0, 2), smallModel(33).slice(2)]);
    rmSync(join(linked, 'model-00002-of-00002.safetensors'));
    writeModel(join(root, 'shard2.safetensors'), smallModel(33).slice(2));
    symlinkSync(join(root, 'shard2.safetensors'), join(linked, 'model-00002-of-00002.safetensors'));
    // a link that stays inside is fine
    writeModel(join(data, 'links', 'target.safetensors'), smallModel(34));
    symlinkSync(join(data, 'links', 'target.safetensors'), join(data, 'links', 'inside.safetensors'));
  });

  it.each([
    ['../outside.safetensors', 'is outside the data directory'],
    ['/etc/passwd', 'is outside the data directory'],
    ['links/../../outside.safetensors', 'is outside the data directory'],
    ['links/escape.safetensors', 'leads outside the data directory'],
    ['links/sharded', 'leads outside the data directory'],
    ['jobs', 'jobs area'],
  ])('%s: 403 PATH_FORBIDDEN', async (input, fragment) => {
    const before = jobDirs().length;
    const reply = await submitPath(t.port, { input, params: { qdtype: 'int8' } });
    expectProblem(reply, 'PATH_FORBIDDEN', [fragment], '/v1/jobs');
    expect(jobDirs().length).toBe(before);
  });

  it("another job's upload (the jobs area) is refused: 403", async () => {
    const job = await submitUpload(t.port, modelBytes(smallModel(35)));
    const done = await waitJob(t.port, job.id, finished);
    for (const input of [`jobs/${job.id}/result/model.safetensors`, join(data, 'jobs', job.id, 'result')]) {
      expectProblem(await submitPath(t.port, { input }), 'PATH_FORBIDDEN', ['jobs area']);
    }
    expect(done.state).toBe('succeeded');
  });

  it('a symlink that stays inside, and an absolute path inside, are accepted', async () => {
    for (const input of ['links/inside.safetensors', join(data, 'links', 'target.safetensors')]) {
      const reply = await submitPath(t.port, { input });
      expect(reply.status, reply.body.toString()).toBe(202);
      expect((await waitJob(t.port, json<Job>(reply).id, finished)).state).toBe('succeeded');
    }
  });

  it('a missing model is 404 FILE_NOT_FOUND, named as given', async () => {
    expectProblem(await submitPath(t.port, { input: 'nope/model.safetensors' }), 'FILE_NOT_FOUND', [
      'nope/model.safetensors',
    ]);
  });
});

describe('job ids', () => {
  it.each([
    ['an unknown id', '/v1/jobs/0b7e0c8e-6f4a-4a53-9d55-3c1f0b2a9e71'],
    ['an unknown id (result)', '/v1/jobs/0b7e0c8e-6f4a-4a53-9d55-3c1f0b2a9e71/result'],
    ['an unknown id (report)', '/v1/jobs/0b7e0c8e-6f4a-4a53-9d55-3c1f0b2a9e71/report'],
    ['a malformed id', '/v1/jobs/not-a-job'],
    ['a traversal', '/v1/jobs/..%2F..%2Fetc'],
    ['a traversal (result file)', '/v1/jobs/..%2F..%2Fetc/result/passwd'],
    ['upper case', '/v1/jobs/0B7E0C8E-6F4A-4A53-9D55-3C1F0B2A9E71'],
  ])('%s: 404 JOB_NOT_FOUND', async (_what, path) => {
    expectProblem(await send(t.port, path), 'JOB_NOT_FOUND');
    expectProblem(
      await send(t.port, path.replace(/\/result.*|\/report$/, ''), { method: 'DELETE' }),
      'JOB_NOT_FOUND',
    );
  });
});

describe('submissions are validated before anything is accepted', () => {
  const tiny = modelBytes([f32Tensor('w', [4, 8], 1)]);
  const notSafetensors = Buffer.concat([
    Buffer.from([16, 0, 0, 0, 0, 0, 0, 0]),
    Buffer.from('{"w": [1, 2],  }'),
  ]);

  it.each([
    ['?qdtype=int9', 'UNKNOWN_QDTYPE'],
    ['?qdtpye=int4', 'OPTION_INVALID'],
    ['?op=explode', 'OPTION_INVALID'],
    ['?scheme=per_group&group_size=0', 'OPTION_INVALID'],
    ['?recipe=%7Bnope', 'RECIPE_INVALID'],
    [`?recipe=${encodeURIComponent('{"rules":[{"glob":"*","qdtype":"int3"}]}')}`, 'RECIPE_INVALID'],
    ['?min_size=many', 'OPTION_INVALID'],
    ['?op=dequantize&rule=*:skip', 'OPTION_INVALID'],
  ] as const)('upload %s: 400 %s, no job', async (query, code) => {
    const before = jobDirs().length;
    const reply = await send(t.port, `/v1/jobs${query}`, {
      headers: { 'content-type': SAFETENSORS },
      body: tiny,
    });
    expectProblem(reply, code);
    expect(jobDirs().length).toBe(before);
  });

  it.each([
    ['a body that is not safetensors', notSafetensors, '', 'SAFETENSORS_INVALID'],
    ['a group size that does not divide a row', tiny, '?scheme=per_group&group_size=3', 'GROUP_SIZE_INVALID'],
    [
      'a recipe rule that does not fit',
      tiny,
      `?rule=${encodeURIComponent('w:scheme=per_group,group_size=3')}`,
      'RECIPE_RULE_FAILED',
    ],
  ] as const)('upload of %s: 400 once read, no job left', async (_what, body, query, code) => {
    const before = jobDirs().length;
    const reply = await send(t.port, `/v1/jobs${query}`, { headers: { 'content-type': SAFETENSORS }, body });
    const problem = expectProblem(reply, code);
    expect(problem.detail).not.toContain(data); // the upload is "upload", not where it is stored
    expect(jobDirs().length).toBe(before);
  });

  it.each([
    ['an unknown field', { input: 'single/weights.safetensors', priority: 1 }, 'OPTION_INVALID'],
    ['no input', { params: {} }, 'OPTION_INVALID'],
    ['a bad option', { input: 'single/weights.safetensors', params: { qdtype: 'int9' } }, 'UNKNOWN_QDTYPE'],
    [
      'an option of another op',
      { input: 'single/weights.safetensors', op: 'dequantize', params: { qdtype: 'int8' } },
      'OPTION_INVALID',
    ],
    [
      'a bad recipe',
      { input: 'single/weights.safetensors', recipe: { rules: [{ glob: '*', qdtpye: 'int4' }] } },
      'RECIPE_INVALID',
    ],
    ['an array', [1, 2], 'USAGE'],
  ])('JSON with %s: 400', async (_what, body, code) => {
    expectProblem(await submitPath(t.port, body as Record<string, unknown>), code as 'OPTION_INVALID');
  });

  it('an empty upload: 400, no job', async () => {
    const before = jobDirs().length;
    const reply = await send(t.port, '/v1/jobs', {
      headers: { 'content-type': SAFETENSORS },
      body: new Uint8Array(0),
    });
    expect(reply.status, reply.body.toString()).toBe(400);
    expect(jobDirs().length).toBe(before);
  });

  it('malformed JSON: 400 USAGE; another content type: 415; no body: 415', async () => {
    expectProblem(
      await send(t.port, '/v1/jobs', { headers: { 'content-type': 'application/json' }, body: '{"input": ' }),
      'USAGE',
      ['not valid JSON'],
    );
    expectProblem(
      await send(t.port, '/v1/jobs', { headers: { 'content-type': 'text/plain' }, body: 'model' }),
      'UNSUPPORTED_MEDIA_TYPE',
    );
    expectProblem(await send(t.port, '/v1/jobs', { method: 'POST' }), 'UNSUPPORTED_MEDIA_TYPE');
  });

  it('the routes are documented at /docs/json', async () => {
    const doc = json<{ paths: Record<string, unknown> }>(await send(t.port, '/docs/json'));
    expect(Object.keys(doc.paths)).toEqual(
      expect.arrayContaining([
        '/v1/jobs',
        '/v1/jobs/{id}',
        '/v1/jobs/{id}/result',
        '/v1/jobs/{id}/result/{file}',
        '/v1/jobs/{id}/report',
      ]),
    );
  });
});

describe('authentication', () => {
  it('the job routes need the bearer token like every /v1 route', async () => {
    const KEY = 'jobs-key-0123456789abcdef';
    const authData = join(root, 'auth-data');
    const auth = await startJobServer(authData, { QUANTD_API_KEYS: KEY });
    try {
      expectProblem(await send(auth.port, '/v1/jobs'), 'UNAUTHORIZED');
      expectProblem(await send(auth.port, '/v1/jobs/0b7e0c8e-6f4a-4a53-9d55-3c1f0b2a9e71'), 'UNAUTHORIZED');
      const body = modelBytes(smallModel(40));
      expectProblem(
        await send(auth.port, '/v1/jobs', { headers: { 'content-type': SAFETENSORS }, body }),
        'UNAUTHORIZED',
      );
      expect(existsSync(join(authData, 'jobs'))).toBe(false);
      const reply = await send(auth.port, '/v1/jobs', {
        headers: { 'content-type': SAFETENSORS, authorization: `Bearer ${KEY}` },
        body,
      });
      expect(reply.status).toBe(202);
      const list = await send(auth.port, '/v1/jobs', { headers: { authorization: `Bearer ${KEY}` } });
      expect(json<{ jobs: Job[] }>(list).jobs).toHaveLength(1);
    } finally {
      await auth.server.shutdown('test done');
    }
  });
});
