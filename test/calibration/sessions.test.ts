/**
 * Calibration sessions over HTTP against real servers: the qparams a session gives equal the
 * core observers' over the same batches (the server runs them on its worker pool); a hundred
 * concurrent uploads lose no element; a server killed with SIGKILL resumes every acknowledged
 * batch; refusals leave a session as it was; export, import, delete and expiry.
 */
import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import {
  newObserverState,
  observe,
  observerConfig,
  observerQParams,
  type ObserverOptions,
} from '../../src/core/observers/index.js';
import { parseSafetensors } from '../../src/format/safetensors.js';
import { send, type TestServer } from '../http/helpers.js';
import {
  json,
  modelBytes,
  startChildServer,
  startJobServer,
  tempDir,
  type ChildServer,
  type Tensor,
} from '../jobs/helpers.js';

const RECIPE = {
  observers: [
    { match: 'layers.0.*.input', observer: { kind: 'histogram', bins: 256 } },
    { regex: '\\.input$', observer: { kind: 'moving_average_min_max', averaging_constant: 0.1 } },
    {
      match: '*.proj_out',
      observer: { kind: 'per_channel_min_max', dtype: 'qint8', qscheme: 'per_channel_symmetric' },
    },
  ],
};

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

function activations(seed: number, n: number, scale: number): Float32Array {
  const r = rng(seed);
  return Float32Array.from({ length: n }, () => (r() - 0.4) * scale);
}

const tensor = (name: string, shape: number[], x: Float32Array): Tensor => ({
  name,
  dtype: 'F32',
  shape,
  data: new Uint8Array(x.buffer, x.byteOffset, x.byteLength),
});

/** Batch i: two inputs and a per-channel output; tensor "ignored" matches no rule. */
function batch(i: number): Tensor[] {
  return [
    tensor('layers.0.mlp.input', [4, 64], activations(i * 3 + 1, 256, 1 + i)),
    tensor('layers.1.attn.input', [2, 32], activations(i * 3 + 2, 64, 2 + (i % 3))),
    tensor('layers.1.proj_out', [6, 10], activations(i * 3 + 3, 60, 0.5 + i / 4)),
    tensor('ignored', [3], activations(99, 3, 1)),
  ];
}

/** The qparams the core observers give for `batches` (name → [scale, zero_point]). */
function expectedQParams(batches: Tensor[][]): Record<string, [number[], number[]]> {
  const out: Record<string, [number[], number[]]> = {};
  const seen = new Map<
    string,
    { config: ReturnType<typeof observerConfig>; state: ReturnType<typeof newObserverState> }
  >();
  for (const b of batches) {
    for (const t of b) {
      const rule = RECIPE.observers.find((r) =>
        'match' in r
          ? new RegExp(`^${r.match!.replace(/\./g, '\\.').replace(/\*/g, '[^/]*')}$`).test(t.name)
          : new RegExp(r.regex!).test(t.name),
      );
      if (!rule) continue;
      let w = seen.get(t.name);
      if (!w) {
        const config = observerConfig(rule.observer as ObserverOptions);
        w = { config, state: newObserverState(config) };
        seen.set(t.name, w);
      }
      observe(w.config, w.state, new Float32Array(t.data.slice().buffer), t.shape);
    }
  }
  for (const [name, w] of seen) {
    const qp = observerQParams(w.config, w.state);
    out[name] = [Array.from(qp.scale), Array.from(qp.zeroPoint)];
  }
  return out;
}

function qparamsOf(body: Uint8Array): Record<string, [number[], number[]]> {
  const { header, tensorBytes } = parseSafetensors(body, 'qparams');
  const out: Record<string, [number[], number[]]> = {};
  for (const e of header.entries) {
    const bytes = new Uint8Array(tensorBytes(e));
    const values =
      e.dtype === 'F32'
        ? Array.from(new Float32Array(bytes.buffer))
        : Array.from(new Int32Array(bytes.buffer));
    const [name, part] = [
      e.name.slice(0, e.name.lastIndexOf('.')),
      e.name.slice(e.name.lastIndexOf('.') + 1),
    ];
    out[name] ??= [[], []];
    out[name]![part === 'scale' ? 0 : 1] = values;
  }
  return out;
}

const post = (port: number, path: string, value: unknown) =>
  send(port, path, { headers: { 'content-type': 'application/json' }, body: JSON.stringify(value) });
const upload = (port: number, id: string, tensors: Tensor[]) =>
  send(port, `/v1/calibrations/${id}/batches`, {
    headers: { 'content-type': 'application/x-safetensors' },
    body: modelBytes(tensors),
  });

interface Summary {
  id: string;
  batches: number;
  observed: number;
  observers: { name: string; kind: string; observed: number }[];
}

describe('calibration sessions over HTTP', () => {
  let dir: string;
  let server: TestServer;
  beforeAll(async () => {
    dir = tempDir('calibration');
    server = await startJobServer(dir);
  });
  afterAll(async () => {
    await server?.server.shutdown('test done');
    rmSync(dir, { recursive: true, force: true });
  });

  it('gives the qparams the observers give, and /v1/quantize takes them', async () => {
    const created = await post(server.port, '/v1/calibrations', { recipe: RECIPE });
    expect(created.status, created.body.toString()).toBe(201);
    const { id } = json<Summary>(created);
    const batches = [0, 1, 2, 3].map(batch);
    for (const b of batches) {
      const r = await upload(server.port, id, b);
      expect(r.status, r.body.toString()).toBe(200);
      expect(json<{ ignored: string[] }>(r).ignored).toEqual(['ignored']);
    }
    const summary = json<Summary>(await send(server.port, `/v1/calibrations/${id}`));
    expect(summary.batches).toBe(4);
    expect(summary.observers.map((o) => [o.name, o.kind]).sort()).toEqual([
      ['layers.0.mlp.input', 'histogram'],
      ['layers.1.attn.input', 'moving_average_min_max'],
      ['layers.1.proj_out', 'per_channel_min_max'],
    ]);
    const reply = await send(server.port, `/v1/calibrations/${id}/qparams`);
    expect(reply.status).toBe(200);
    expect(reply.headers['content-type']).toBe('application/x-safetensors');
    expect(qparamsOf(reply.body)).toEqual(expectedQParams(batches));

    // an activation quantized with the session's qparams, given beside it
    const { header, tensorBytes } = parseSafetensors(reply.body, 'qparams');
    const given = header.entries
      .filter((e) => e.name.startsWith('layers.1.attn.input.'))
      .map((e) => ({ name: e.name, dtype: e.dtype, shape: e.shape, data: tensorBytes(e).slice() }));
    const x = batches[3]![1]!;
    const q = await send(server.port, '/v1/quantize?qdtype=uint8&scheme=per_tensor', {
      headers: { 'content-type': 'application/x-safetensors' },
      body: modelBytes([x, ...given]),
    });
    expect(q.status, q.body.toString()).toBe(200);
  });

  it('a hundred concurrent uploads into one session lose no element', async () => {
    const { id } = json<Summary>(await post(server.port, '/v1/calibrations', { recipe: RECIPE }));
    // beyond the server's admission limit an upload is refused whole (503 OVERLOADED) and retried
    const uploadUntilTaken = async (i: number) => {
      for (;;) {
        const r = await upload(server.port, id, [
          tensor('layers.5.x.input', [7], activations(i + 1000, 7, 3)),
        ]);
        if (r.status !== 503) return r;
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    };
    const replies = await Promise.all(Array.from({ length: 100 }, (_, i) => uploadUntilTaken(i)));
    expect(
      replies.map((r) => r.status),
      replies.find((r) => r.status !== 200)?.body.toString(),
    ).toEqual(Array(100).fill(200));
    expect(new Set(replies.map((r) => json<{ batches: number }>(r).batches)).size).toBe(100);
    const summary = json<Summary>(await send(server.port, `/v1/calibrations/${id}`));
    expect([summary.batches, summary.observed]).toEqual([100, 700]);
  });

  it('refuses bad recipes, unknown sessions and bad batches clearly, leaving the session as it was', async () => {
    const bad = await post(server.port, '/v1/calibrations', {
      recipe: { observers: [{ match: '*', observer: { kind: 'histogram', bins: 0 } }] },
    });
    expect(bad.status).toBe(400);
    expect(json<{ code: string; detail: string }>(bad)).toMatchObject({ code: 'RECIPE_INVALID' });
    expect(json<{ detail: string }>(bad).detail).toMatch(
      /observers\[0\]\.observer: .*bins must be an integer/,
    );

    const missing = await send(server.port, '/v1/calibrations/0123456789abcdef01234567');
    expect([missing.status, json<{ code: string }>(missing).code]).toEqual([404, 'CALIBRATION_NOT_FOUND']);

    const { id } = json<Summary>(await post(server.port, '/v1/calibrations', { recipe: RECIPE }));
    expect((await upload(server.port, id, batch(0))).status).toBe(200);
    const before = (await send(server.port, `/v1/calibrations/${id}/state`)).body.toString();

    const none = await upload(server.port, id, [tensor('unrelated', [2], Float32Array.of(1, 2))]);
    expect(json<{ code: string }>(none).code).toBe('NO_TENSOR_SELECTED');
    const nan = batch(1);
    new Float32Array(nan[0]!.data.buffer, nan[0]!.data.byteOffset, 256)[17] = NaN;
    const refused = await upload(server.port, id, nan);
    expect(refused.status).toBe(400);
    expect(json<{ code: string; detail: string }>(refused)).toMatchObject({ code: 'INPUT_NOT_FINITE' });
    expect(refused.body.toString()).toContain('layers.0.mlp.input');
    const otherChannels = await upload(server.port, id, [
      tensor('layers.1.proj_out', [5, 2], activations(3, 10, 1)),
    ]);
    expect(json<{ code: string; detail: string }>(otherChannels)).toMatchObject({ code: 'OBSERVER_INVALID' });
    expect(json<{ detail: string }>(otherChannels).detail).toMatch(
      /5 channels on axis 0; the observer has seen 6/,
    );
    const wrongType = await send(server.port, `/v1/calibrations/${id}/batches`, {
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    expect(wrongType.status).toBe(415);
    expect((await send(server.port, `/v1/calibrations/${id}/state`)).body.toString()).toBe(before);
  });

  it('exports, imports under a new id, deletes, and expires', async () => {
    const { id } = json<Summary>(await post(server.port, '/v1/calibrations', { recipe: RECIPE }));
    for (const i of [5, 6]) await upload(server.port, id, batch(i));
    const state = json<{ format: string }>(await send(server.port, `/v1/calibrations/${id}/state`));
    expect(state.format).toBe('quantd.calibration/1');
    const imported = json<Summary>(await post(server.port, '/v1/calibrations', { state }));
    expect(imported.id).not.toBe(id);
    for (const s of [id, imported.id]) await upload(server.port, s, batch(7));
    const [a, b] = await Promise.all(
      [id, imported.id].map((s) => send(server.port, `/v1/calibrations/${s}/qparams`)),
    );
    expect(qparamsOf(b!.body)).toEqual(qparamsOf(a!.body));
    expect(qparamsOf(a!.body)).toEqual(expectedQParams([5, 6, 7].map(batch)));

    expect((await send(server.port, `/v1/calibrations/${id}`, { method: 'DELETE' })).status).toBe(204);
    expect((await send(server.port, `/v1/calibrations/${id}`)).status).toBe(404);

    const short = json<Summary>(
      await post(server.port, '/v1/calibrations', { recipe: RECIPE, ttl_seconds: 0.3 }),
    );
    expect((await send(server.port, `/v1/calibrations/${short.id}`)).status).toBe(200);
    await new Promise((r) => setTimeout(r, 400));
    expect((await send(server.port, `/v1/calibrations/${short.id}`)).status).toBe(404);
    const ttl = await post(server.port, '/v1/calibrations', { recipe: RECIPE, ttl_seconds: -1 });
    expect(json<{ code: string }>(ttl).code).toBe('OPTION_INVALID');
  });
});

describe('a calibration session survives the server being killed', () => {
  it('resumes every acknowledged batch after SIGKILL', async () => {
    const dir = tempDir('calibration-restart');
    const env = { QUANTD_DATA_DIR: dir, QUANTD_HTTP_PORT: '0', QUANTD_GRPC_PORT: '0' };
    let first: ChildServer | undefined;
    let second: ChildServer | undefined;
    try {
      first = await startChildServer(env);
      const { id } = json<Summary>(await post(first.port, '/v1/calibrations', { recipe: RECIPE }));
      for (const i of [0, 1, 2]) expect((await upload(first.port, id, batch(i))).status).toBe(200);
      // one more batch in flight when the process dies: acknowledged or not, never half-kept
      const inFlight = upload(first.port, id, batch(3)).catch(() => null);
      await first.kill();
      const acknowledged = (await inFlight)?.status === 200;

      second = await startChildServer(env);
      const summary = json<Summary>(await send(second.port, `/v1/calibrations/${id}`));
      const kept = summary.batches;
      expect(kept === 3 || kept === 4).toBe(true);
      if (acknowledged) expect(kept).toBe(4);
      expect((await upload(second.port, id, batch(9))).status).toBe(200);
      const reply = await send(second.port, `/v1/calibrations/${id}/qparams`);
      const seen = [0, 1, 2, ...(kept === 4 ? [3] : []), 9].map(batch);
      expect(qparamsOf(reply.body)).toEqual(expectedQParams(seen));
    } finally {
      // whatever failed, no server process outlives the test
      if (first?.alive()) await first.kill();
      if (second?.alive()) await second.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('calibration sessions belong to the API key that created them', () => {
  const KEY_A = 'calibration-key-aaaaaaaaaaaa';
  const KEY_B = 'calibration-key-bbbbbbbbbbbb';
  const ADMIN = 'calibration-admin-cccccccccccc';
  let dir: string;
  let server: TestServer;
  beforeAll(async () => {
    dir = tempDir('calibration-auth');
    server = await startJobServer(dir, { QUANTD_API_KEYS: `${KEY_A},${KEY_B}`, QUANTD_ADMIN_KEYS: ADMIN });
  });
  afterAll(async () => {
    await server?.server.shutdown('test done');
    rmSync(dir, { recursive: true, force: true });
  });
  const as = (key: string, path: string, options: { method?: string; body?: string } = {}) =>
    send(server.port, path, {
      ...options,
      headers: {
        authorization: `Bearer ${key}`,
        ...(options.body !== undefined && { 'content-type': 'application/json' }),
      },
    });

  it("another key's session is not found, nor listed; an admin key sees every session", async () => {
    const created = await as(KEY_A, '/v1/calibrations', { body: JSON.stringify({ recipe: RECIPE }) });
    expect(created.status).toBe(201);
    const { id } = json<Summary>(created);
    expect((await as(KEY_A, `/v1/calibrations/${id}`)).status).toBe(200);
    const other = await as(KEY_B, `/v1/calibrations/${id}/state`);
    expect([other.status, json<{ code: string }>(other).code]).toEqual([404, 'CALIBRATION_NOT_FOUND']);
    expect((await as(KEY_B, `/v1/calibrations/${id}`, { method: 'DELETE' })).status).toBe(404);
    const listed = (key: string) =>
      as(key, '/v1/calibrations').then((r) =>
        json<{ calibrations: Summary[] }>(r).calibrations.map((s) => s.id),
      );
    expect(await listed(KEY_B)).toEqual([]);
    expect(await listed(KEY_A)).toEqual([id]);
    expect(await listed(ADMIN)).toEqual([id]);
    expect((await send(server.port, `/v1/calibrations/${id}`)).status).toBe(401);
  });
});
