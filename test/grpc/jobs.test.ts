/**
 * quantd.v1.Jobs (proto/quantd/v1/jobs.proto) on a real server (127.0.0.1, ephemeral ports) with a
 * real @grpc/grpc-js client: path jobs with interop layouts (gguf, onnx), with spec options and
 * recipe parameters, and with a recipe, polled with Get until they succeed; Result streams every
 * file byte-identical to HTTP's /v1/jobs/ID/result/FILE and to the CLI's output; the Job message
 * mirrors HTTP's JSON field by field; List, Report; and the unhappy paths, each with its catalogue
 * code, status and trailers. Cancelling and results of unfinished jobs: jobs-cancel.test.ts.
 */
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type * as Config from '../../src/config.js';
import type { ComputeHandle } from '../../src/pool/index.js';
import type * as Service from '../../src/service/index.js';
import { quantdAsync } from '../cli/cli-helpers.js';
import { REPO } from '../cli/run-cli.js';
import { writeLlama } from '../interop/gptq-awq-bnb.helpers.js';
import { expectSameTensors, f32Tensor, smallModel, tempDir, writeModel, type Job } from '../jobs/helpers.js';
import {
  bearer,
  decodeContainer,
  grpcServerModule,
  expectGrpcError,
  rejection,
  startTestServer,
  type TestServer,
} from './helpers.js';
import {
  CHUNK_LIMIT,
  asMessage,
  call,
  done,
  httpGet,
  httpJson,
  jobsClient,
  plain,
  receive,
  waitGrpcJob,
  type JobMessage,
  type JobsClient,
  type SubmitRequest,
} from './jobs-helpers.js';

const root = tempDir('grpc');
const data = join(root, 'data');
const scratch = join(root, 'scratch');
let t: TestServer;
let client: JobsClient;

const RECIPE = {
  default: { qdtype: 'int8', scheme: 'per_channel' },
  rules: [{ glob: '*.attn.*', qdtype: 'int4', scheme: 'per_group', group_size: 16, mode: 'symmetric' }],
  skip_1d: false,
};

beforeAll(async () => {
  mkdirSync(join(data, 'models'), { recursive: true });
  mkdirSync(scratch);
  await writeLlama(join(data, 'models', 'tiny.safetensors'), 1, 64);
  writeModel(join(data, 'models', 'small.safetensors'), smallModel(3));
  // 2.5 MiB of float32: a fake-quantize result of the same size needs three chunks
  writeModel(join(data, 'models', 'wide.safetensors'), [f32Tensor('wide.weight', [640, 1024], 5)]);
  writeFileSync(join(scratch, 'recipe.json'), JSON.stringify(RECIPE));
  writeFileSync(join(root, 'outside.safetensors'), readFileSync(join(data, 'models', 'small.safetensors')));
  t = await startTestServer({ QUANTD_DATA_DIR: data });
  client = await jobsClient(t.target);
});
afterAll(async () => {
  client?.close();
  await t?.server.shutdown('test done');
  rmSync(root, { recursive: true, force: true });
});

/** Submits over gRPC and polls Get until the job has succeeded. */
async function runJob(request: SubmitRequest): Promise<JobMessage> {
  const submitted = await call(client, 'Submit', request);
  expect(submitted).toMatchObject({ state: 'queued', op: request.op ?? 'quantize' });
  expect(submitted.input).toMatchObject({ kind: 'path', path: request.path });
  const job = await waitGrpcJob(client, submitted.id, done);
  expect(job.state, JSON.stringify(job.error)).toBe('succeeded');
  return job;
}

/** `quantd OP IN -o DIR/NAME ARGS`; the directory's files by name. */
async function cli(
  input: string,
  name: string,
  args: string[],
  op = 'quantize',
): Promise<Map<string, Buffer>> {
  const dir = join(scratch, `cli-${readdirSync(scratch).length}`);
  mkdirSync(dir);
  const r = await quantdAsync([op, join(data, input), '-o', join(dir, name), '-q', ...args]);
  expect(r.code, r.stderr).toBe(0);
  return new Map(readdirSync(dir).map((f) => [f, readFileSync(join(dir, f))]));
}

/** Streams every file of the result (file empty) and checks it against HTTP's download of each. */
async function resultFiles(job: JobMessage): Promise<Map<string, Buffer>> {
  const got = await receive(client.Result({ id: job.id }));
  expect(got.error?.details ?? null).toBeNull();
  const listed = job.result!.files!;
  expect(got.files.map((f) => f.name)).toEqual(listed.map((f) => f.name));
  for (const [i, f] of got.files.entries()) {
    expect(f.total, f.name).toBe(listed[i]!.bytes);
    expect(f.bytes.byteLength, f.name).toBe(listed[i]!.bytes);
    expect(f.sha, f.name).toBe(listed[i]!.data_sha256);
    const http = await httpGet(t.base, `/v1/jobs/${job.id}/result/${encodeURIComponent(f.name)}`);
    expect(http.status, f.name).toBe(200);
    expect(f.bytes.equals(http.body), `${f.name}: same bytes as HTTP`).toBe(true);
  }
  return new Map(got.files.map((f) => [f.name, f.bytes]));
}

function expectSameFiles(actual: Map<string, Buffer>, expected: Map<string, Buffer>): void {
  expect([...actual.keys()].sort()).toEqual([...expected.keys()].sort());
  for (const [name, bytes] of expected) expect(actual.get(name)!.equals(bytes), name).toBe(true);
}

describe('layout jobs', () => {
  it('gguf: Get mirrors the HTTP job; Result is the CLI’s file, byte for byte', async () => {
    const job = await runJob({ path: 'models/tiny.safetensors', layout: 'gguf:type=Q4_0' });
    const http = await httpJson<Job>(t.base, `/v1/jobs/${job.id}`);
    expect(plain(job)).toEqual(asMessage(http));
    expect(job.result!.files!.map((f) => f.name)).toEqual(['tiny.gguf']);
    const files = await resultFiles(job);
    expectSameFiles(files, await cli('models/tiny.safetensors', 'tiny.gguf', ['--layout', 'gguf:type=Q4_0']));
    // the single-file result over HTTP is the file itself: the same bytes again
    expect((await httpGet(t.base, `/v1/jobs/${job.id}/result`)).body.equals(files.get('tiny.gguf')!)).toBe(
      true,
    );
    // a layout job's report (its tensors' types) is HTTP's, byte for byte
    const report = await receive(client.Report({ id: job.id }));
    expect(report.error?.details ?? null).toBeNull();
    const httpReport = await httpGet(t.base, `/v1/jobs/${job.id}/report`);
    expect(report.files[0]!.bytes.equals(httpReport.body)).toBe(true);
    expect(JSON.parse(httpReport.body.toString())).toMatchObject({
      format: 'quantd.layout-report/1',
      layout: 'gguf',
      files: ['tiny.gguf'],
    });
  });

  it('onnx: both files in one stream, or one by name, byte-identical to the CLI', async () => {
    const layout = 'onnx:block_size=32';
    const job = await runJob({ path: 'models/tiny.safetensors', layout });
    expect(job.result!.files!.map((f) => f.name)).toEqual(['tiny.onnx', 'tiny.onnx.data']);
    const expected = await cli('models/tiny.safetensors', 'tiny.onnx', ['--layout', layout]);
    expectSameFiles(await resultFiles(job), expected);
    const one = await receive(client.Result({ id: job.id, file: 'tiny.onnx.data' }));
    expect(one.files.map((f) => f.name)).toEqual(['tiny.onnx.data']);
    expect(one.files[0]!.bytes.equals(expected.get('tiny.onnx.data')!)).toBe(true);
    expect(one.files[0]!.bytes.byteLength, 'more than one chunk').toBeGreaterThan(0);
  });
});

describe('spec and recipe jobs', () => {
  it('spec options and recipe parameters: the same file as the HTTP job with the same options', async () => {
    const job = await runJob({
      path: 'models/small.safetensors',
      spec: { qdtype: 'int4', scheme: 'per_channel', mode: 'symmetric' },
      skip: ['*.norm.*'],
      keep_1d: true,
      min_size: 0,
    });
    const viaHttp = await httpJson<Job>(t.base, '/v1/jobs', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        input: 'models/small.safetensors',
        params: {
          qdtype: 'int4',
          scheme: 'per_channel',
          mode: 'symmetric',
          skip: '*.norm.*',
          keep_1d: 'true',
          min_size: 0,
        },
      }),
    });
    const httpJob = await waitGrpcJob(client, viaHttp.id, done);
    expect(httpJob.state).toBe('succeeded');
    expect(job.result).toEqual(httpJob.result); // same names, sizes and data hashes
    const files = await resultFiles(job);
    const http = await httpGet(t.base, `/v1/jobs/${viaHttp.id}/result`);
    expect(files.get('small.safetensors')!.equals(http.body)).toBe(true);
    // the options took effect: the 1-D bias quantized (keep_1d), the norm skipped
    const { metadata } = decodeContainer(files.get('small.safetensors')!);
    expect(JSON.parse(metadata['model.layers.0.mlp.bias']!)).toMatchObject({
      qdtype: 'int4',
      scheme: 'per_channel',
    });
    expect(metadata['model.norm.weight']).toBeUndefined();
  });

  it('a recipe (JSON text): the same tensors as the CLI’s --recipe, and the same report as HTTP', async () => {
    const job = await runJob({ path: 'models/small.safetensors', recipe_json: JSON.stringify(RECIPE) });
    const files = await resultFiles(job);
    const expected = await cli('models/small.safetensors', 'small.safetensors', [
      '--recipe',
      join(scratch, 'recipe.json'),
    ]);
    // the job's file also records its data hash in the metadata: compare everything else
    expectSameTensors(files.get('small.safetensors')!, expected.get('small.safetensors')!, 'recipe job');
    const report = await receive(client.Report({ id: job.id }));
    expect(report.error?.details ?? null).toBeNull();
    expect(report.files.map((f) => f.name)).toEqual(['report.json']);
    const http = await httpGet(t.base, `/v1/jobs/${job.id}/report`);
    expect(report.files[0]!.bytes.equals(http.body)).toBe(true);
  });
});

describe('chunks', () => {
  it('a result over 1 MiB comes in chunks of at most 1 MiB, the same bytes as HTTP and the CLI', async () => {
    const job = await runJob({
      path: 'models/wide.safetensors',
      op: 'fake-quantize',
      spec: { qdtype: 'int8' },
    });
    const got = await receive(client.Result({ id: job.id }));
    const bytes = job.result!.files![0]!.bytes;
    expect(bytes).toBeGreaterThan(3 * CHUNK_LIMIT);
    expect(got.files.map((f) => [f.name, f.chunks])).toEqual([
      ['wide.safetensors', Math.ceil(bytes / CHUNK_LIMIT)],
    ]);
    const files = await resultFiles(job);
    const expected = await cli(
      'models/wide.safetensors',
      'wide.safetensors',
      ['--qdtype', 'int8'],
      'fake-quantize',
    );
    expectSameTensors(files.get('wide.safetensors')!, expected.get('wide.safetensors')!, 'fake-quantize job');
  });
});

describe('List', () => {
  it('lists the jobs newest first, as HTTP does', async () => {
    const { jobs = [] } = await call(client, 'List', {});
    const http = await httpJson<{ jobs: Job[] }>(t.base, '/v1/jobs');
    expect(jobs.length).toBeGreaterThanOrEqual(4);
    expect(plain(jobs)).toEqual(asMessage(http.jobs));
  });
});

describe('errors: catalogue code, status and trailers', () => {
  const UNKNOWN = '0b7e0c8e-6f4a-4a53-9d55-3c1f0b2a9e71';

  it.each([
    ['Get', UNKNOWN],
    ['Get', '../../etc'],
    ['Cancel', UNKNOWN],
  ] as const)('%s of an unknown job (%s) is JOB_NOT_FOUND', async (rpc, id) => {
    expectGrpcError(await rejection(call(client, rpc, { id })), 'JOB_NOT_FOUND');
  });

  it('Result and Report of an unknown job are JOB_NOT_FOUND', async () => {
    expectGrpcError((await receive(client.Result({ id: UNKNOWN }))).error!, 'JOB_NOT_FOUND');
    expectGrpcError((await receive(client.Report({ id: UNKNOWN }))).error!, 'JOB_NOT_FOUND');
  });

  it.each([
    ['a path escaping the data dir', { path: '../outside.safetensors' }, 'PATH_FORBIDDEN', []],
    ['an absolute path elsewhere', { path: join(root, 'outside.safetensors') }, 'PATH_FORBIDDEN', []],
    ['no path', { spec: { qdtype: 'int8' } }, 'OPTION_INVALID', ['path']],
    [
      'an unknown layout',
      { path: 'models/tiny.safetensors', layout: 'tflite' },
      'OPTION_INVALID',
      ['layout'],
    ],
    [
      'a bad gguf type',
      { path: 'models/tiny.safetensors', layout: 'gguf:type=Q9_K' },
      'OPTION_INVALID',
      ['Q9_K'],
    ],
    [
      'a spec option beside a layout',
      { path: 'models/tiny.safetensors', layout: 'gguf', spec: { qdtype: 'int8' } },
      'OPTION_INVALID',
      ['qdtype', 'does not apply'],
    ],
    [
      'a recipe beside a layout',
      { path: 'models/tiny.safetensors', layout: 'gguf', recipe_json: '{}' },
      'OPTION_INVALID',
      ['recipe'],
    ],
    ['an unknown op', { path: 'models/small.safetensors', op: 'compress' }, 'OPTION_INVALID', ['op']],
    [
      'a bad qdtype',
      { path: 'models/small.safetensors', spec: { qdtype: 'int3' } },
      'UNKNOWN_QDTYPE',
      ['int3'],
    ],
    [
      'recipe JSON that is not JSON',
      { path: 'models/small.safetensors', recipe_json: '{' },
      'RECIPE_INVALID',
      [],
    ],
    ['a missing model', { path: 'models/nope.safetensors' }, 'FILE_NOT_FOUND', []],
  ] as const)('Submit with %s', async (_label, request, code, fragments) => {
    const before = await call(client, 'List', {});
    const err = await rejection(call(client, 'Submit', request as SubmitRequest));
    expectGrpcError(err, code, fragments);
    // nothing was created
    expect((await call(client, 'List', {})).jobs?.length).toBe(before.jobs?.length);
  });

  it('Result naming a file the result does not have is NOT_FOUND, listing the files', async () => {
    const job = await runJob({ path: 'models/tiny.safetensors', layout: 'gguf:type=Q8_0' });
    const got = await receive(client.Result({ id: job.id, file: 'tiny.onnx' }));
    expect(got.files).toEqual([]);
    expectGrpcError(got.error!, 'NOT_FOUND', ['tiny.onnx', 'tiny.gguf']);
  });

  it('a gRPC server started without a job manager does not serve Jobs (UNIMPLEMENTED), as HTTP has no routes', async () => {
    const { startGrpc } = await grpcServerModule();
    const dist = (...parts: string[]): string => pathToFileURL(join(REPO, 'dist', 'src', ...parts)).href;
    const { loadConfig } = (await import(dist('config.js'))) as typeof Config;
    const { Admission } = (await import(dist('service', 'index.js'))) as typeof Service;
    const log = { info: () => {}, error: () => {} };
    const config = loadConfig({ QUANTD_HOST: '127.0.0.1', QUANTD_GRPC_PORT: '0', QUANTD_DATA_DIR: data });
    // no call reaches the compute: a stand-in handle will do
    const handle = { compute: {}, pool: null } as unknown as ComputeHandle;
    const bare = await startGrpc({ config, handle, admission: new Admission(4), isReady: () => true, log });
    const bareClient = await jobsClient(`127.0.0.1:${bare.port}`);
    try {
      const err = await rejection(call(bareClient, 'List', {}));
      expect(err.code).toBe(grpc.status.UNIMPLEMENTED);
    } finally {
      bareClient.close();
      await bare.shutdown(1000);
    }
  });

  it('with QUANTD_API_KEYS, the same bearer token as the other services', async () => {
    const key = 'k'.repeat(24);
    const auth = await startTestServer({ QUANTD_DATA_DIR: join(root, 'auth-data'), QUANTD_API_KEYS: key });
    const authed = await jobsClient(auth.target);
    try {
      expectGrpcError(await rejection(call(authed, 'List', {})), 'UNAUTHORIZED');
      expectGrpcError(await rejection(call(authed, 'List', {}, bearer('x'.repeat(24)))), 'UNAUTHORIZED');
      expectGrpcError(
        (await receive(authed.Result({ id: UNKNOWN }, bearer('w'.repeat(24))))).error!,
        'UNAUTHORIZED',
      );
      expect(await call(authed, 'List', {}, bearer(key))).toEqual({});
    } finally {
      authed.close();
      await auth.server.shutdown('test done');
    }
  });
});
