/**
 * Linear-layer statistics in a server's calibration sessions (real `quantd serve` processes):
 * batches posted to a session with a `"statistics": "linear"` rule add up to the Hessians the core
 * gathers (bit for bit, batch order kept); GET …/statistics serves them as a layer statistics file;
 * they survive SIGKILL with the batches acknowledged before it, and the session keeps one
 * statistics file on disk; a refused batch changes nothing. A model folder holding that file,
 * quantized with `--layout gptq --calibration` through `--remote` (a folder-upload job), gives
 * the same files as the CLI offline, without the statistics file among them.
 */
import { copyFileSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { accumulateLinearStats, emptyLinearStats, type LinearStats } from '../../src/core/linear-stats.js';
import { indexLayerStats, readLayerStats, writeLayerStats } from '../../src/format/layer-stats.js';
import { serializeSafetensors } from '../../src/format/safetensors.js';
import { quantdAsync } from '../cli/cli-helpers.js';
import { send } from '../http/helpers.js';
import {
  finished,
  json,
  startChildServer,
  submitPath,
  tempDir,
  waitJob,
  type ChildServer,
} from '../jobs/helpers.js';
import {
  BATCHES,
  DOWN_PROJ,
  Q_PROJ,
  RECIPE,
  batchTensors,
  writeBatch,
  writeModel,
} from '../gptq/calibrated.helpers.js';

const root = tempDir('calibration-statistics');
const data = join(root, 'data');
let server: ChildServer;
const env = { QUANTD_DATA_DIR: data };

beforeAll(async () => {
  mkdirSync(data);
  server = await startChildServer(env);
}, 30_000);
afterAll(async () => {
  if (server?.alive()) await server.stop();
  rmSync(root, { recursive: true, force: true });
});

const post = (path: string, body: string | Uint8Array, type = 'application/json') =>
  send(server.port, path, { headers: { 'content-type': type }, body });

function batchBody(b: number): Uint8Array {
  const path = join(root, `batch-${b}.safetensors`);
  writeBatch(path, b);
  return readFileSync(path);
}

function expected(batches: readonly number[]): Map<string, LinearStats> {
  const out = new Map<string, LinearStats>();
  for (const b of batches) {
    for (const t of batchTensors(b)) {
      const k = t.shape[t.shape.length - 1]!;
      out.set(t.name, accumulateLinearStats(t.name, out.get(t.name) ?? emptyLinearStats(k), t.x, t.shape));
    }
  }
  return out;
}

/** GET …/statistics, written to a file and read back with the format's reader. */
async function statistics(id: string, file: string): Promise<Map<string, LinearStats>> {
  const reply = await send(server.port, `/v1/calibrations/${id}/statistics`);
  expect(reply.status, reply.body.toString()).toBe(200);
  expect(Number(reply.headers['content-length'])).toBe(reply.body.byteLength);
  writeFileSync(file, reply.body);
  const out = new Map<string, LinearStats>();
  for (const [name, ref] of await indexLayerStats(file)) out.set(name, await readLayerStats(ref, name));
  return out;
}

function expectSame(got: Map<string, LinearStats>, want: Map<string, LinearStats>): void {
  expect([...got.keys()].sort()).toEqual([...want.keys()].sort());
  for (const [name, w] of want) {
    const g = got.get(name)!;
    expect(g.tokens, name).toBe(w.tokens);
    expect(Buffer.from(g.hessian.buffer).equals(Buffer.from(w.hessian.buffer)), name).toBe(true);
    expect(Buffer.from(g.absSum.buffer).equals(Buffer.from(w.absSum.buffer)), name).toBe(true);
  }
}

const statsFiles = (): string[] =>
  readdirSync(join(data, 'calibrations')).filter((f) => f.endsWith('.stats'));

describe('a session gathering linear-layer statistics', () => {
  let id: string;

  it('adds every batch to the Hessians, as the core does, and serves them as a statistics file', async () => {
    id = json<{ id: string }>(await post('/v1/calibrations', JSON.stringify({ recipe: RECIPE }))).id;
    for (let b = 0; b < BATCHES; b++) {
      const reply = await post(`/v1/calibrations/${id}/batches`, batchBody(b), 'application/x-safetensors');
      expect(reply.status, reply.body.toString()).toBe(200);
    }
    const batches = Array.from({ length: BATCHES }, (_, b) => b);
    expectSame(await statistics(id, join(root, 's1.stats')), expected(batches));
    const summary = json<{ statistics: { name: string; in_features: number; tokens: number }[] }>(
      await send(server.port, `/v1/calibrations/${id}`),
    );
    expect(summary.statistics).toEqual(
      expect.arrayContaining([
        { name: `${Q_PROJ}.input`, in_features: 128, tokens: BATCHES * 128 },
        { name: `${DOWN_PROJ}.input`, in_features: 96, tokens: BATCHES * 128 },
      ]),
    );
    expect(statsFiles()).toEqual([`${id}.${BATCHES}.stats`]);
  });

  it('refuses a batch with NaN, another in_features or too large a layer, and keeps what it had', async () => {
    const x = new Float32Array(2 * 128).fill(1);
    x[77] = NaN;
    const bad = serializeSafetensors(
      [{ name: `${Q_PROJ}.input`, dtype: 'F32', shape: [2, 128], data: new Uint8Array(x.buffer) }],
      null,
    );
    let reply = await post(`/v1/calibrations/${id}/batches`, bad, 'application/x-safetensors');
    expect(json<{ code: string }>(reply).code).toBe('INPUT_NOT_FINITE');
    const narrow = serializeSafetensors(
      [{ name: `${DOWN_PROJ}.input`, dtype: 'F32', shape: [1, 64], data: new Uint8Array(256) }],
      null,
    );
    reply = await post(`/v1/calibrations/${id}/batches`, narrow, 'application/x-safetensors');
    expect(json<{ code: string; detail: string }>(reply)).toMatchObject({ code: 'SHAPE_UNSUPPORTED' });
    expect(reply.body.toString()).toContain('in_features 96');
    // a layer whose Hessian alone would pass the session's 2 GiB: refused before it is allocated
    const wide = serializeSafetensors(
      [
        {
          name: 'model.layers.9.mlp.down_proj.input',
          dtype: 'F32',
          shape: [1, 16384],
          data: new Uint8Array(65536),
        },
      ],
      null,
    );
    reply = await post(`/v1/calibrations/${id}/batches`, wide, 'application/x-safetensors');
    expect(reply.status).toBe(413);
    expect(json<{ code: string }>(reply).code).toBe('CALIBRATION_FULL');
    expectSame(await statistics(id, join(root, 's2.stats')), expected([0, 1, 2]));
  });

  it('keeps the acknowledged batches through SIGKILL; one statistics file per session', async () => {
    await server.kill();
    // what a batch killed between its statistics file and its JSON leaves: a file no JSON names
    writeFileSync(join(data, 'calibrations', `${id}.9.stats`), 'half a batch');
    server = await startChildServer(env);
    expectSame(await statistics(id, join(root, 's3.stats')), expected([0, 1, 2]));
    const reply = await post(`/v1/calibrations/${id}/batches`, batchBody(7), 'application/x-safetensors');
    expect(reply.status, reply.body.toString()).toBe(200);
    expectSame(await statistics(id, join(root, 's4.stats')), expected([0, 1, 2, 7]));
    expect(statsFiles()).toEqual([`${id}.4.stats`]);
    // a session without statistics rules has none to give
    const plain = json<{ id: string }>(
      await post(
        '/v1/calibrations',
        JSON.stringify({ recipe: { observers: [{ match: '*', observer: { kind: 'min_max' } }] } }),
      ),
    ).id;
    const none = await send(server.port, `/v1/calibrations/${plain}/statistics`);
    expect(json<{ code: string }>(none).code).toBe('NO_TENSOR_SELECTED');
    expect((await send(server.port, `/v1/calibrations/${id}`, { method: 'DELETE' })).status).toBe(204);
    expect(statsFiles()).toEqual([]);
  }, 60_000);
});

describe('a gptq job by path with calibration=FILE', () => {
  it('statistics of another model fail the job by name; a path outside the folder is refused at once', async () => {
    const dir = join(data, 'models', 'm');
    mkdirSync(dir, { recursive: true });
    writeModel(join(dir, 'model.safetensors'));
    const one = new Float32Array(64).fill(1);
    const wrong = new Map([
      [`${Q_PROJ}.input`, accumulateLinearStats('x', emptyLinearStats(64), one, [1, 64])],
    ]);
    await writeLayerStats(join(dir, 'wrong.stats'), wrong);
    const submitted = await submitPath(server.port, {
      input: 'models/m',
      params: { layout: 'gptq:calibration=wrong.stats' },
    });
    expect(submitted.status, submitted.body.toString()).toBe(202);
    const job = await waitJob(server.port, json<{ id: string }>(submitted).id, finished);
    expect(job.state).toBe('failed');
    expect(job.error).toMatchObject({ code: 'CALIBRATION_INVALID' });
    expect(job.error!.message).toContain('q_proj.weight has in_features 128');
    const outside = await submitPath(server.port, {
      input: 'models/m',
      params: { layout: 'gptq:calibration=../../layers.stats' },
    });
    expect(json<{ code: string; detail: string }>(outside).code).toBe('OPTION_INVALID');
    expect(outside.body.toString()).toContain('calibration must name a file of the model folder');
  }, 60_000);
});

describe('--layout gptq|awq --calibration through --remote', () => {
  const model = join(root, 'model');
  beforeAll(() => {
    mkdirSync(model);
    writeModel(join(model, 'model.safetensors'));
    writeFileSync(join(model, 'config.json'), JSON.stringify({ model_type: 'llama' }));
  });

  it.each(['gptq', 'awq'])(
    '%s: a folder upload with its statistics file: the files of the offline run, the statistics not among them',
    async (layout) => {
      copyFileSync(join(root, 's4.stats'), join(model, 'layers.stats'));
      const args = (out: string) => [
        'quantize',
        model,
        '-o',
        out,
        '--layout',
        `${layout}:group_size=32`,
        '--calibration',
        join(model, 'layers.stats'),
        '-q',
      ];
      let r = await quantdAsync(args(join(root, `local-${layout}`)));
      expect(r.code, r.stderr).toBe(0);
      r = await quantdAsync([...args(join(root, `remote-${layout}`)), '--remote', server.base]);
      expect(r.code, r.stderr).toBe(0);
      const local = readdirSync(join(root, `local-${layout}`)).sort();
      expect(readdirSync(join(root, `remote-${layout}`)).sort()).toEqual(local);
      expect(local).not.toContain('layers.stats');
      for (const f of local) {
        const a = readFileSync(join(root, `local-${layout}`, f));
        const b = readFileSync(join(root, `remote-${layout}`, f));
        expect(b.equals(a), f).toBe(true);
      }
    },
    60_000,
  );

  it('a single file whose result is several files: refused before the upload, pointing to the folder', async () => {
    const input = join(root, 'model', 'model.safetensors');
    const out = join(root, 'single.safetensors');
    const jobs = (): number => readdirSync(join(data, 'jobs')).length;
    const before = jobs();
    const r = await quantdAsync([
      'quantize',
      input,
      '-o',
      out,
      '--layout',
      'gptq',
      '-q',
      '--remote',
      server.base,
    ]);
    expect(r.stderr).toMatch(/FEATURE_UNSUPPORTED.*writes side files.*give --remote the model's folder/);
    expect(jobs()).toBe(before); // refused before anything was sent
    expect(readdirSync(root).filter((f) => f.startsWith('single'))).toEqual([]);
  }, 60_000);
});
