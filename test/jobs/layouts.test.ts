/**
 * Layout jobs (docs/models.md, "Jobs over HTTP": `layout=NAME:key=value`): a model uploaded or
 * named by path is written in an interop layout by the server in the background, and every result
 * file — the model file and its side files — downloads byte-identical to `quantd quantize --layout`;
 * a layout job's report is the CLI's --report (files named as the result's); bad layouts, bad
 * layout options and options that do not apply with a layout are 400 at submission, with no job
 * made.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { quantdAsync } from '../cli/cli-helpers.js';
import { expectProblem, send, type TestServer } from '../http/helpers.js';
import { writeLlama } from '../interop/gptq-awq-bnb.helpers.js';
import {
  finished,
  json,
  startJobServer,
  submitPath,
  submitUpload,
  tempDir,
  waitJob,
  writeModel,
  writeShardedModel,
  smallModel,
  type Job,
} from './helpers.js';

const root = tempDir('layouts');
const data = join(root, 'data');
const scratch = join(root, 'scratch');
let t: TestServer;
/** The upload: named input.safetensors like the job's own copy (GGUF's general.name is the input's name). */
let upload: string;

beforeAll(async () => {
  mkdirSync(data);
  mkdirSync(scratch);
  mkdirSync(join(scratch, 'in'));
  upload = join(scratch, 'in', 'input.safetensors');
  await writeLlama(upload, 1, 64);
  mkdirSync(join(data, 'models'));
  await writeLlama(join(data, 'models', 'tiny.safetensors'), 1, 64);
  writeModel(join(data, 'models', 'small.safetensors'), smallModel(2));
  t = await startJobServer(data);
});
afterAll(async () => {
  await t?.server.shutdown('test done');
  rmSync(root, { recursive: true, force: true });
});

const jobDirs = (): string[] => (existsSync(join(data, 'jobs')) ? readdirSync(join(data, 'jobs')) : []);

/** `quantd quantize IN -o DIR/NAME --layout TEXT`; returns the directory's files by name. */
async function cliLayout(input: string, name: string, layout: string): Promise<Map<string, Buffer>> {
  const dir = join(scratch, `cli-${layout.replace(/[^a-z0-9]/gi, '_')}-${name}`);
  mkdirSync(dir);
  const r = await quantdAsync(['quantize', input, '-o', join(dir, name), '--layout', layout, '-q']);
  expect(r.code, r.stderr).toBe(0);
  return new Map(readdirSync(dir).map((f) => [f, readFileSync(join(dir, f))]));
}

function dataSha256(bytes: Uint8Array): string {
  const n = Number(Buffer.from(bytes.buffer, bytes.byteOffset, 8).readBigUInt64LE(0));
  return createHash('sha256')
    .update(bytes.subarray(8 + n))
    .digest('hex');
}

/** Every result file of a succeeded job, downloaded by name; checks the listing's sizes and hashes. */
async function download(job: Job): Promise<Map<string, Buffer>> {
  const out = new Map<string, Buffer>();
  for (const f of job.result!.files) {
    const reply = await send(t.port, `/v1/jobs/${job.id}/result/${encodeURIComponent(f.name)}`);
    expect(reply.status, f.name).toBe(200);
    expect(reply.body.byteLength, f.name).toBe(f.bytes);
    expect(Number(reply.headers['content-length'])).toBe(f.bytes);
    expect(f.data_sha256, f.name).toBe(f.name.endsWith('.safetensors') ? dataSha256(reply.body) : null);
    if (f.data_sha256 !== null) expect(reply.headers['etag']).toBe(`"${f.data_sha256}"`);
    out.set(f.name, reply.body);
  }
  return out;
}

function expectSameFiles(actual: Map<string, Buffer>, expected: Map<string, Buffer>): void {
  expect([...actual.keys()].sort()).toEqual([...expected.keys()].sort());
  for (const [name, bytes] of expected) expect(actual.get(name)!.equals(bytes), name).toBe(true);
}

async function runUpload(query: string): Promise<Job> {
  const submitted = await submitUpload(t.port, readFileSync(upload), query);
  expect(submitted).toMatchObject({ state: 'queued', op: 'quantize', result: null });
  const job = await waitJob(t.port, submitted.id, finished);
  expect(job.state, JSON.stringify(job.error)).toBe('succeeded');
  return job;
}

describe('a layout job of an uploaded model', () => {
  it('gguf: model.gguf, byte-identical to quantize --layout gguf, served as the result itself', async () => {
    const expected = await cliLayout(upload, 'model.gguf', 'gguf:type=Q4_K');
    // the query as a client writes it: the layout's ':' '=' and ',' left unencoded
    const job = await runUpload('?layout=gguf:type=Q4_K');
    expect(job.result).toMatchObject({ sharded: false });
    expect(job.result!.files.map((f) => f.name)).toEqual(['model.gguf']);
    expect(job.progress).toMatchObject({ tensors_done: job.progress!.tensors_total, eta_seconds: 0 });
    expectSameFiles(await download(job), expected);
    const whole = await send(t.port, `/v1/jobs/${job.id}/result`);
    expect(whole.status).toBe(200);
    expect(whole.headers['content-type']).toBe('application/octet-stream');
    expect(whole.body.equals(expected.get('model.gguf')!)).toBe(true);
    // the layout's report, as the CLI's --report writes it, naming the result's files
    const report = await send(t.port, `/v1/jobs/${job.id}/report`);
    expect(report.status, report.body.toString()).toBe(200);
    const cliReport = join(scratch, 'gguf-report.json');
    const r = await quantdAsync([
      'quantize',
      upload,
      '-o',
      join(scratch, 'gguf-report.gguf'),
      '--layout',
      'gguf:type=Q4_K',
      '--report',
      cliReport,
      '-q',
    ]);
    expect(r.code, r.stderr).toBe(0);
    const expectedReport = JSON.parse(readFileSync(cliReport, 'utf8')) as Record<string, unknown>;
    expect(JSON.parse(report.body.toString())).toEqual({ ...expectedReport, files: ['model.gguf'] });
    expect(readdirSync(join(data, 'jobs', job.id)).sort()).toEqual(['job.json', 'report.json', 'result']);
  });

  it('gptq: model.safetensors and model.quantize_config.json, both byte-identical, listed by /result', async () => {
    const expected = await cliLayout(upload, 'model.safetensors', 'gptq:bits=4,group_size=32');
    const job = await runUpload(`?layout=${encodeURIComponent('gptq:bits=4,group_size=32')}`);
    expect(job.result!.files.map((f) => f.name)).toEqual(['model.safetensors', 'model.quantize_config.json']);
    expectSameFiles(await download(job), expected);
    const listing = await send(t.port, `/v1/jobs/${job.id}/result`);
    expect(listing.status).toBe(200);
    expect(json(listing)).toEqual({
      sharded: false,
      files: job.result!.files.map((f) => ({ ...f, href: `/v1/jobs/${job.id}/result/${f.name}` })),
    });
    expectProblem(await send(t.port, `/v1/jobs/${job.id}/result/model.gguf`), 'NOT_FOUND', ['model.gguf']);
  });

  it('compressed-tensors: model.safetensors and model.quantization_config.json, byte-identical to the CLI', async () => {
    const layout = 'compressed-tensors:scheme=W4A16_ASYM,group_size=32';
    const expected = await cliLayout(upload, 'model.safetensors', layout);
    const job = await runUpload(`?layout=${encodeURIComponent(layout)}`);
    expect(job.result!.files.map((f) => f.name)).toEqual([
      'model.safetensors',
      'model.quantization_config.json',
    ]);
    expectSameFiles(await download(job), expected);
  });

  it('onnx: model.onnx and model.onnx.data, byte-identical to the CLI', async () => {
    const expected = await cliLayout(upload, 'model.onnx', 'onnx:block_size=16');
    const job = await runUpload('?layout=onnx:block_size=16');
    expect(job.result!.files.map((f) => f.name)).toEqual(['model.onnx', 'model.onnx.data']);
    expectSameFiles(await download(job), expected);
  });
});

describe('a layout job of a model named by path', () => {
  it('writes the layout under the input’s name (the JSON form), byte-identical to the CLI', async () => {
    const input = join(data, 'models', 'tiny.safetensors');
    const expected = await cliLayout(input, 'tiny.gguf', 'gguf:type=Q8_0,name=tiny');
    const reply = await submitPath(t.port, {
      input: 'models/tiny.safetensors',
      op: 'quantize',
      params: { layout: 'gguf:type=Q8_0,name=tiny' },
    });
    expect(reply.status, reply.body.toString()).toBe(202);
    const job = await waitJob(t.port, json<Job>(reply).id, finished);
    expect(job.state, JSON.stringify(job.error)).toBe('succeeded');
    expect(job.input).toMatchObject({ kind: 'path', path: 'models/tiny.safetensors' });
    expect(job.result!.files.map((f) => f.name)).toEqual(['tiny.gguf']);
    expectSameFiles(await download(job), expected);
    expect(existsSync(input)).toBe(true); // an input named by path is never removed
  });

  it('fails the job (not the submission) when the model has nothing the layout quantizes', async () => {
    const reply = await submitPath(t.port, { input: 'models/small.safetensors', params: { layout: 'gptq' } });
    expect(reply.status, reply.body.toString()).toBe(202);
    const job = await waitJob(t.port, json<Job>(reply).id, finished);
    expect(job).toMatchObject({ state: 'failed', error: { code: 'NO_TENSOR_SELECTED' }, result: null });
    expect(readdirSync(join(data, 'jobs', job.id))).toEqual(['job.json']);
  });
});

describe('layout submissions are validated before anything is accepted', () => {
  const body = (): Buffer => readFileSync(upload);

  it.each([
    ['an unknown layout', '?layout=tflite', 'OPTION_INVALID', ['layout', 'gguf, onnx']],
    ['a bad gguf type', '?layout=gguf:type=Q9_K', 'OPTION_INVALID', ['type', 'Q9_K']],
    ['a bad gptq bits', `?layout=${encodeURIComponent('gptq:bits=5')}`, 'OPTION_INVALID', ['bits', '5']],
    ['a bad onnx block size', '?layout=onnx:block_size=48', 'OPTION_INVALID', ['block_size', '48']],
    ['an unknown layout option', '?layout=awq:zero_point=true', 'OPTION_INVALID', ['zero_point', 'awq']],
    ['malformed options', '?layout=gguf:Q4_K', 'OPTION_INVALID', ['key=value']],
    ['an empty layout', '?layout=', 'OPTION_INVALID', ['layout']],
    ['gguf names=gguf without heads', '?layout=gguf:names=gguf', 'OPTION_INVALID', ['heads']],
    ['a spec option beside it', '?layout=gguf&qdtype=int8', 'OPTION_INVALID', ['qdtype', 'does not apply']],
    ['a recipe option beside it', '?layout=gguf&skip=*.norm*', 'OPTION_INVALID', ['skip', 'does not apply']],
    ['include beside it', '?layout=nf4&include=*.weight', 'OPTION_INVALID', ['include']],
    ['op other than quantize', '?layout=gguf&op=fake-quantize', 'OPTION_INVALID', ['quantize']],
    ['the layout twice', '?layout=gguf&layout=gptq', 'OPTION_INVALID', ['more than once']],
    [
      'an importance matrix outside the model folder',
      `?layout=${encodeURIComponent('gguf:ftype=Q4_K_M,imatrix=../../etc/imatrix.dat')}`,
      'OPTION_INVALID',
      ['imatrix must name a file of the model folder'],
    ],
    ['a bad llama-quantize file type', '?layout=gguf:ftype=Q4_K_XL', 'OPTION_INVALID', ['ftype', 'Q4_K_M']],
    [
      'a compressed-tensors scheme it does not write',
      '?layout=compressed-tensors:scheme=FP8',
      'FEATURE_UNSUPPORTED',
      ['FP8', 'FP8_DYNAMIC'],
    ],
    [
      'a compressed-tensors group size where the scheme has none',
      `?layout=${encodeURIComponent('compressed-tensors:scheme=W8A8,group_size=64')}`,
      'OPTION_INVALID',
      ['compressed-tensors:group_size', 'W8A8'],
    ],
  ] as const)('%s: 400 before the body is read, no job', async (_, query, code, fragments) => {
    const before = jobDirs().length;
    const reply = await send(t.port, `/v1/jobs${query}`, {
      headers: { 'content-type': 'application/x-safetensors' },
      body: body(),
    });
    expectProblem(reply, code, fragments);
    expect(jobDirs().length).toBe(before);
  });

  it('the JSON form: a bad option, a recipe beside a layout, a sharded input: 400, no job', async () => {
    mkdirSync(join(data, 'models', 'shards'));
    writeShardedModel(join(data, 'models', 'shards'), [smallModel(3).slice(0, 2), smallModel(3).slice(2)]);
    const before = jobDirs().length;
    expectProblem(
      await submitPath(t.port, { input: 'models/tiny.safetensors', params: { layout: 'onnx:sym=maybe' } }),
      'OPTION_INVALID',
      ['sym', 'maybe'],
    );
    expectProblem(
      await submitPath(t.port, {
        input: 'models/tiny.safetensors',
        params: { layout: 'gguf' },
        recipe: { default: { qdtype: 'int8' } },
      }),
      'OPTION_INVALID',
      ['recipe', 'does not apply'],
    );
    expectProblem(
      await submitPath(t.port, {
        input: 'models/tiny.safetensors',
        op: 'dequantize',
        params: { layout: 'gguf' },
      }),
      'OPTION_INVALID',
      ['quantize'],
    );
    expectProblem(
      await submitPath(t.port, { input: 'models/shards', params: { layout: 'gguf' } }),
      'FEATURE_UNSUPPORTED',
      ['one .safetensors file', 'sharded'],
    );
    expect(jobDirs().length).toBe(before);
  });
});
