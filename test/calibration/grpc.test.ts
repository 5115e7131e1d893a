/**
 * quantd.v1.Calibrations against a real server: a session created over gRPC is fed by a client
 * stream of batches, read over HTTP too (one store), and gives the same qparams file both ways;
 * a refused batch fails the stream and keeps the batches before it; bad streams are refused.
 */
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { grpcServerModule, rejection, startTestServer, type TestServer } from '../grpc/helpers.js';
import { modelBytes, tempDir, type Tensor } from '../jobs/helpers.js';
import { receive, type Chunk } from '../grpc/jobs-helpers.js';

type Callback = (err: grpc.ServiceError | null, response: Record<string, unknown>) => void;
type Client = grpc.Client & {
  Create(request: object, callback: Callback): void;
  Get(request: object, callback: Callback): void;
  List(request: object, callback: Callback): void;
  QParams(request: object, callback: Callback): void;
  Export(request: object, callback: Callback): void;
  Delete(request: object, callback: Callback): void;
  LinearError(request: object, callback: Callback): void;
  Observe(callback: Callback): grpc.ClientWritableStream<object>;
  Statistics(request: object): grpc.ClientReadableStream<Chunk>;
};

const RECIPE = { observers: [{ match: '*.input', observer: { kind: 'histogram', bins: 64 } }] };

const tensor = (name: string, values: number[]): Tensor => ({
  name,
  dtype: 'F32',
  shape: [values.length],
  data: new Uint8Array(Float32Array.from(values).buffer),
});

const batch = (i: number): Uint8Array =>
  modelBytes([
    tensor('a.input', [i, -2 * i, 0.5, 3 + i]),
    tensor('b.input', [1, 2, i]),
    tensor('c.other', [7]),
  ]);

describe('quantd.v1.Calibrations', () => {
  let dir: string;
  let server: TestServer;
  let client: Client;
  beforeAll(async () => {
    dir = tempDir('calibration-grpc');
    server = await startTestServer({ QUANTD_DATA_DIR: dir, QUANTD_CALIBRATION_IMPORT_LIMIT: '64k' });
    const { LOADER_OPTIONS } = await grpcServerModule();
    const definition = protoLoader.loadSync('quantd/v1/calibration.proto', LOADER_OPTIONS);
    const proto = grpc.loadPackageDefinition(definition) as unknown as {
      quantd: { v1: { Calibrations: grpc.ServiceClientConstructor } };
    };
    client = new proto.quantd.v1.Calibrations(
      server.target,
      grpc.credentials.createInsecure(),
    ) as unknown as Client;
  });
  afterAll(async () => {
    client?.close();
    await server?.server.shutdown('test done');
    rmSync(dir, { recursive: true, force: true });
  });

  const call = <K extends 'Create' | 'Get' | 'List' | 'QParams' | 'Export' | 'Delete' | 'LinearError'>(
    rpc: K,
    request: object,
  ) =>
    new Promise<Record<string, unknown>>((resolve, reject) =>
      client[rpc](request, (err, response) => (err ? reject(err) : resolve(response))),
    );
  const observe = (messages: object[]) =>
    new Promise<Record<string, unknown>>((resolve, reject) => {
      const stream = client.Observe((err, response) => (err ? reject(err) : resolve(response)));
      for (const m of messages) stream.write(m);
      stream.end();
    });

  it('creates, streams batches, and gives the qparams HTTP gives', async () => {
    const created = await call('Create', { recipe_json: JSON.stringify(RECIPE) });
    const id = created['id'] as string;
    expect(created['batches']).toBe(0);
    const reply = await observe([
      { id, safetensors: batch(1) },
      { safetensors: batch(2) },
      { id, safetensors: batch(3) },
    ]);
    expect(reply).toMatchObject({
      batches: 3,
      folded: 3,
      observed: ['a.input', 'b.input'],
      ignored: ['c.other'],
    });
    const got = await call('Get', { id });
    expect(got).toMatchObject({ id, batches: 3, observed: 21 });
    const viaGrpc = (await call('QParams', { id }))['safetensors'] as Buffer;
    const viaHttp = Buffer.from(
      await (await fetch(`${server.base}/v1/calibrations/${id}/qparams`)).arrayBuffer(),
    );
    expect(viaGrpc.equals(viaHttp)).toBe(true);
    const state = JSON.parse((await call('Export', { id }))['json'] as string) as {
      format: string;
      batches: number;
    };
    expect([state.format, state.batches]).toEqual(['quantd.calibration/1', 3]);
    const listed = (await call('List', {}))['calibrations'] as { id: string }[];
    expect(listed.map((s) => s.id)).toContain(id);
    await call('Delete', { id });
    const gone = await rejection(call('Get', { id }));
    expect([gone.code, gone.metadata.get('quantd-code')[0]]).toEqual([
      grpc.status.NOT_FOUND,
      'CALIBRATION_NOT_FOUND',
    ]);
  });

  it('Statistics streams the layer statistics file HTTP serves; none without a statistics rule', async () => {
    const recipe = { observers: [{ match: '*.input', statistics: 'linear' }] };
    const id = (await call('Create', { recipe_json: JSON.stringify(recipe) }))['id'] as string;
    await observe([{ id, safetensors: batch(1) }, { safetensors: batch(4) }]);
    const got = await call('Get', { id });
    expect(got['statistics']).toEqual([
      { name: 'a.input', in_features: 4, tokens: 2 },
      { name: 'b.input', in_features: 3, tokens: 2 },
    ]);
    const viaGrpc = await receive(client.Statistics({ id }));
    expect(viaGrpc.error).toBeNull();
    const viaHttp = Buffer.from(
      await (await fetch(`${server.base}/v1/calibrations/${id}/statistics`)).arrayBuffer(),
    );
    expect(viaGrpc.files.map((f) => f.name)).toEqual(['statistics.stats']);
    expect(viaGrpc.files[0]!.bytes.equals(viaHttp)).toBe(true);
    const plain = (await call('Create', { recipe_json: JSON.stringify(RECIPE) }))['id'] as string;
    const none = await receive(client.Statistics({ id: plain }));
    expect(none.error?.metadata.get('quantd-code')[0]).toBe('NO_TENSOR_SELECTED');
  });

  it('a refused batch fails the stream and keeps the batches before it', async () => {
    const id = (await call('Create', { recipe_json: JSON.stringify(RECIPE) }))['id'] as string;
    const bad = modelBytes([tensor('a.input', [1, NaN])]);
    const err = await rejection(
      observe([{ id, safetensors: batch(1) }, { safetensors: bad }, { safetensors: batch(2) }]),
    );
    expect([err.code, err.metadata.get('quantd-code')[0]]).toEqual([
      grpc.status.INVALID_ARGUMENT,
      'INPUT_NOT_FINITE',
    ]);
    expect((await call('Get', { id }))['batches']).toBe(1);
  });

  it('a cancelled stream keeps the batches folded before it and frees its admission slot', async () => {
    // a server admitting 3 calls at once (pool 2 + queue 1): a leaked slot would show after 3
    const small = await startTestServer({ QUANTD_DATA_DIR: join(dir, 'small'), QUANTD_QUEUE_LIMIT: '1' });
    let c: Client | undefined;
    try {
      const { LOADER_OPTIONS } = await grpcServerModule();
      const proto = grpc.loadPackageDefinition(
        protoLoader.loadSync('quantd/v1/calibration.proto', LOADER_OPTIONS),
      ) as unknown as {
        quantd: { v1: { Calibrations: grpc.ServiceClientConstructor } };
      };
      const client = new proto.quantd.v1.Calibrations(
        small.target,
        grpc.credentials.createInsecure(),
      ) as unknown as Client;
      c = client;
      const get = (id: string) =>
        new Promise<Record<string, unknown>>((resolve, reject) =>
          client.Get({ id }, (err, r) => (err ? reject(err) : resolve(r))),
        );
      const id = await new Promise<string>((resolve, reject) =>
        client.Create({ recipe_json: JSON.stringify(RECIPE) }, (err, r) =>
          err ? reject(err) : resolve(r['id'] as string),
        ),
      );
      for (let i = 1; i <= 4; i++) {
        const stream = client.Observe(() => {});
        stream.write({ id, safetensors: batch(i) });
        const deadline = Date.now() + 5000;
        while (((await get(id))['batches'] as number) < i && Date.now() < deadline) {
          await new Promise((r) => setTimeout(r, 10));
        }
        stream.cancel();
      }
      await new Promise((r) => setTimeout(r, 50));
      // every batch folded before its stream was cancelled is kept, and calls are still admitted
      expect((await get(id))['batches']).toBe(4);
    } finally {
      c?.close();
      await small.server.shutdown('test done');
    }
  });

  it("LinearError gives HTTP's /v1/linear-error report", async () => {
    const x = Float32Array.from({ length: 8 * 32 }, (_, i) => Math.sin(i) * (i % 32 === 3 ? 20 : 1));
    const w = Float32Array.from({ length: 16 * 32 }, (_, i) => Math.cos(i * 0.7) * 0.1);
    const body = modelBytes([
      { name: 'x', dtype: 'F32', shape: [8, 32], data: new Uint8Array(x.buffer) },
      { name: 'weight', dtype: 'F32', shape: [16, 32], data: new Uint8Array(w.buffer) },
    ]);
    const spec = { qdtype: 'int4', scheme: 'per_group', group_size: '16' };
    const viaGrpc = await call('LinearError', { safetensors: body, weight_spec: spec });
    const reply = await fetch(`${server.base}/v1/linear-error?qdtype=int4&scheme=per_group&group_size=16`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-safetensors' },
      body,
    });
    const viaHttp = (await reply.json()) as Record<string, unknown>;
    expect(viaGrpc).toEqual({
      n: viaHttp['n'],
      in_features: viaHttp['in_features'],
      out_features: viaHttp['out_features'],
      weight_only: viaHttp['weight_only'],
      qlinear_int8: viaHttp['qlinear_int8'],
    });
    const bad = await rejection(call('LinearError', { safetensors: body, weight_spec: { colour: 'red' } }));
    expect(bad.metadata.get('quantd-code')[0]).toBe('OPTION_INVALID');
  });

  it('refuses streams without a session, naming two sessions, or empty, and bad recipes', async () => {
    const noId = await rejection(observe([{ safetensors: batch(1) }]));
    expect(noId.details).toContain('the first CalibrationBatch needs id');
    const id = (await call('Create', { recipe_json: JSON.stringify(RECIPE) }))['id'] as string;
    const two = await rejection(
      observe([
        { id, safetensors: batch(1) },
        { id: 'f'.repeat(24), safetensors: batch(2) },
      ]),
    );
    expect(two.details).toContain("names session ffffffffffffffffffffffff; the stream's first named");
    const empty = await rejection(observe([]));
    expect(empty.details).toContain('Observe needs at least one CalibrationBatch');
    const recipe = await rejection(call('Create', { recipe_json: '{"observers": [' }));
    expect(recipe.metadata.get('quantd-code')[0]).toBe('RECIPE_INVALID');
  });

  it('refuses a state_json past QUANTD_CALIBRATION_IMPORT_LIMIT unparsed; Export of a session gives what Create takes back', async () => {
    const big = await rejection(call('Create', { state_json: `{"pad": "${'x'.repeat(70_000)}"}` }));
    expect(big.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    expect(big.metadata.get('quantd-code')[0]).toBe('PAYLOAD_TOO_LARGE');
    expect(big.details).toContain('QUANTD_CALIBRATION_IMPORT_LIMIT');
    const id = (await call('Create', { recipe_json: JSON.stringify(RECIPE) }))['id'] as string;
    await observe([
      { id, safetensors: batch(1) },
      { id, safetensors: batch(2) },
    ]);
    const exported = (await call('Export', { id }))['json'] as string;
    const again = (await call('Create', { state_json: exported }))['id'] as string;
    expect(JSON.parse((await call('Export', { id: again }))['json'] as string)).toMatchObject({
      batches: 2,
      observers: JSON.parse(exported).observers,
    });
  });
});
