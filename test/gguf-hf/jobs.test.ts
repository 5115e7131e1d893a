/**
 * A Hugging Face model folder named by path in a jobs request (HTTP; gRPC shares the runner)
 * with layout=gguf: the folder, sharded or not, becomes one model.gguf, byte-identical to
 * `quantd quantize DIR --layout gguf`. A folder without config.json keeps the single-file rule.
 */
import { copyFileSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { SafetensorsFileReader } from '../../src/format/safetensors-file.js';
import { ggufLayout } from '../../src/service/layouts/gguf.js';
import { expectProblem, send, type TestServer } from '../http/helpers.js';
import {
  finished,
  json,
  startJobServer,
  submitPath,
  tempDir,
  waitJob,
  writeShardedModel,
  type Job,
  type Tensor,
} from '../jobs/helpers.js';
import { fixtureDir } from './llama-cpp.js';

const root = tempDir('gguf-hf');
const data = join(root, 'data');
let t: TestServer;

/** The llama fixture's tensors, in file order. */
async function fixtureTensors(): Promise<Tensor[]> {
  const reader = await SafetensorsFileReader.open(join(fixtureDir('llama-spm'), 'model.safetensors'));
  try {
    const out: Tensor[] = [];
    for (const e of reader.header.entries) {
      out.push({ name: e.name, dtype: e.dtype, shape: e.shape, data: await reader.read(e, false) });
    }
    return out;
  } finally {
    await reader.close();
  }
}

beforeAll(async () => {
  const sharded = join(data, 'models', 'llama-sharded');
  mkdirSync(sharded, { recursive: true });
  for (const f of ['config.json', 'tokenizer.model', 'tokenizer_config.json']) {
    copyFileSync(join(fixtureDir('llama-spm'), f), join(sharded, f));
  }
  const tensors = await fixtureTensors();
  writeShardedModel(sharded, [tensors.slice(0, 7), tensors.slice(7)]);
  t = await startJobServer(data);
});
afterAll(async () => {
  await t?.server.shutdown('test done');
  rmSync(root, { recursive: true, force: true });
});

describe('jobs: a Hugging Face model folder → GGUF', () => {
  it('a sharded folder by path: one model.gguf, byte-identical to the conversion of the unsharded folder', async () => {
    const expected = join(root, 'expected.gguf');
    await ggufLayout.write(fixtureDir('llama-spm'), expected, { type: 'Q8_0', name: 'llama' });
    const reply = await submitPath(t.port, {
      input: 'models/llama-sharded',
      params: { layout: 'gguf:type=Q8_0,name=llama' },
    });
    expect(reply.status, reply.body.toString()).toBe(202);
    const job = await waitJob(t.port, json<Job>(reply).id, finished);
    expect(job.state, JSON.stringify(job.error)).toBe('succeeded');
    expect(job.result!.files.map((f) => f.name)).toEqual(['model.gguf']);
    const got = await send(t.port, `/v1/jobs/${job.id}/result/model.gguf`);
    expect(got.status).toBe(200);
    expect(got.body.equals(readFileSync(expected))).toBe(true);
  });

  it('split_max_size: the split set is the result, every file byte-identical to the CLI run', async () => {
    const expected = await ggufLayout.write(fixtureDir('llama-spm'), join(root, 'split.gguf'), {
      type: 'Q8_0',
      name: 'llama',
      split_max_size: '40K',
    });
    const reply = await submitPath(t.port, {
      input: 'models/llama-sharded',
      params: { layout: 'gguf:type=Q8_0,name=llama,split_max_size=40K' },
    });
    expect(reply.status, reply.body.toString()).toBe(202);
    const job = await waitJob(t.port, json<Job>(reply).id, finished);
    expect(job.state, JSON.stringify(job.error)).toBe('succeeded');
    const count = String(expected.files.length).padStart(5, '0');
    expect(job.result!.files.map((f) => f.name)).toEqual(
      expected.files.map((_, i) => `model-${String(i + 1).padStart(5, '0')}-of-${count}.gguf`),
    );
    for (const [i, f] of job.result!.files.entries()) {
      const got = await send(t.port, `/v1/jobs/${job.id}/result/${f.name}`);
      expect(got.status).toBe(200);
      expect(got.body.equals(readFileSync(expected.files[i]!))).toBe(true);
    }
  });

  it('a folder whose config.json leads outside the data directory is refused at submission', async () => {
    const folder = join(data, 'models', 'escape');
    mkdirSync(folder);
    copyFileSync(join(fixtureDir('llama-spm'), 'model.safetensors'), join(folder, 'model.safetensors'));
    writeFileSync(join(root, 'secret.json'), '{"not": "yours"}');
    symlinkSync(join(root, 'secret.json'), join(folder, 'config.json'));
    expectProblem(
      await submitPath(t.port, { input: 'models/escape', params: { layout: 'gguf' } }),
      'PATH_FORBIDDEN',
      ['models/escape/config.json', 'outside the data directory'],
    );
  });
});
