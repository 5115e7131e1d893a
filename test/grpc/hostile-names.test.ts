/**
 * Requests whose error parameters are not printable ASCII, or longer than a message shows them,
 * over a real connection to an in-process server: each answers its catalogued error — status,
 * details, quantd-code — with quantd-params decoding to exactly the parameters the server built
 * (the client's own text, or the printable form the message shows), and the server answers a
 * normal call afterwards. grpc-js throws on a metadata value that is not printable ASCII; before
 * quantd-params was made ASCII-safe that throw, unhandled in a promise, ended a server process
 * (here, in-process, vitest reports the unhandled rejection as an error and the call never ends).
 * Also a request message that is not valid protobuf: USAGE with quantd-code, on a unary, a
 * server-streaming and a bidirectional method.
 */
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { StDType } from '../../src/core/index.js';
import { serializeSafetensors } from '../../src/format/index.js';
import { tempDir } from '../jobs/helpers.js';
import {
  call as oipCall,
  floatBytes,
  floats,
  grpcError,
  inferenceClient,
  inferMessage,
  type InferenceClient,
} from '../oip/client.js';
import {
  bytesOf,
  expectGrpcError,
  quantizerClient,
  rejection,
  runStream,
  startTestServer,
  streamMessages,
  unary,
  type QuantizerClient,
  type TestServer,
} from './helpers.js';
import { call, jobsClient, receive, type JobsClient } from './jobs-helpers.js';

const root = tempDir('hostile');
let t: TestServer;
let quantizer: QuantizerClient;
let jobs: JobsClient;
let inference: InferenceClient;

beforeAll(async () => {
  mkdirSync(join(root, 'data'), { recursive: true });
  t = await startTestServer({ QUANTD_DATA_DIR: join(root, 'data'), QUANTD_POOL_SIZE: '1' });
  quantizer = await quantizerClient(t.target);
  jobs = await jobsClient(t.target);
  inference = inferenceClient(t.target);
});
afterAll(async () => {
  quantizer?.close();
  jobs?.close();
  inference?.close();
  await t?.server.shutdown('test');
  rmSync(root, { recursive: true, force: true });
});

/** A normal call still gets its answer: the server is up and serving. */
async function expectStillServing(): Promise<void> {
  const tensor = {
    name: 'w',
    dtype: 'F32' as StDType,
    shape: [4],
    data: bytesOf(Float32Array.of(1, -2, 3, 0.5)),
  };
  const response = await unary(quantizer, 'Quantize', {
    safetensors: serializeSafetensors([tensor], null),
    spec: { qdtype: 'int8' },
  });
  expect(response.safetensors?.byteLength, 'a normal Quantize answers').toBeGreaterThan(0);
}

/** A container with one float32 tensor named `name` holding a NaN. */
function nanModel(name: string): Uint8Array {
  const data = bytesOf(Float32Array.of(1, Number.NaN, 2, 3));
  return serializeSafetensors([{ name, dtype: 'F32', shape: [4], data }], null);
}

/** What the server shows of a client's string in a message: printable ASCII, at most 200 characters and an ellipsis. */
const shown = (text: string): string => {
  const printable = text.replace(/[^\x20-\x7e]/g, '?');
  return printable.length > 200 ? `${printable.slice(0, 200)}…` : printable;
};

const LONG_ID = 'a'.repeat(201);
const NAMES = ['é', 'tensor ✓ 名前', 'new\nline', 'percent %41 %'];

describe('Quantizer: a tensor name that is not printable ASCII', () => {
  it.each(NAMES)('unary Quantize of a NaN in tensor %j answers INPUT_NOT_FINITE naming it', async (name) => {
    const err = await rejection(
      unary(quantizer, 'Quantize', { safetensors: nanModel(name), spec: { qdtype: 'int8' } }),
    );
    const params = expectGrpcError(err, 'INPUT_NOT_FINITE', [name]);
    expect(params['tensor']).toBe(name);
    expect(String(err.metadata.get('quantd-params')[0])).toMatch(/^[\x20-\x7e]*$/);
    await expectStillServing();
  });

  it.each(NAMES)('QuantizeStream of a NaN in tensor %j answers INPUT_NOT_FINITE naming it', async (name) => {
    const bytes = nanModel(name);
    const outcome = await runStream(
      quantizer,
      streamMessages(
        { operation: 'quantize', spec: { qdtype: 'int8' }, total_bytes: bytes.byteLength },
        bytes,
        64,
      ),
    );
    expect(outcome.error, 'the stream fails').not.toBeNull();
    const params = expectGrpcError(outcome.error!, 'INPUT_NOT_FINITE', [name]);
    expect(params['tensor']).toBe(name);
    await expectStillServing();
  });

  it('a lone UTF-16 surrogate in a tensor name comes back in quantd-params; the details show U+FFFD', async () => {
    // the safetensors header is JSON, where "\ud800" is a valid escape of a lone surrogate
    const name = '\ud800';
    const err = await rejection(
      unary(quantizer, 'Quantize', { safetensors: nanModel(name), spec: { qdtype: 'int8' } }),
    );
    expect(err.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(err.metadata.get('quantd-code')).toEqual(['INPUT_NOT_FINITE']);
    const params = JSON.parse(String(err.metadata.get('quantd-params')[0])) as Record<string, unknown>;
    expect(params['tensor']).toBe(name);
    expect(err.details).toBe(
      `INPUT_NOT_FINITE: tensor \ufffd holds NaN at flat index 1; ${String(params['op'])} needs finite input`,
    );
    await expectStillServing();
  });
});

describe('Quantizer: a tensor name too long for metadata', () => {
  it('is cut, marked with …, in quantd-params and the details, and the answer arrives', async () => {
    const name = 'é'.repeat(20_000);
    const err = await rejection(
      unary(
        quantizer,
        'Quantize',
        { safetensors: nanModel(name), spec: { qdtype: 'int8' } },
        { deadline: Date.now() + 10_000 },
      ),
    );
    expect(err.code, err.details.slice(0, 100)).toBe(grpc.status.INVALID_ARGUMENT);
    expect(err.metadata.get('quantd-code')).toEqual(['INPUT_NOT_FINITE']);
    const raw = String(err.metadata.get('quantd-params')[0]);
    expect(raw.length).toBeLessThanOrEqual(3072);
    const tensor = (JSON.parse(raw) as Record<string, string>)['tensor']!;
    expect(tensor.endsWith('…')).toBe(true);
    expect(tensor.length).toBeGreaterThan(60);
    expect(name.startsWith(tensor.slice(0, -1))).toBe(true);
    expect(err.details.startsWith(`INPUT_NOT_FINITE: tensor ${'é'.repeat(60)}`)).toBe(true);
    expect(err.details.endsWith('…')).toBe(true);
    expect(encodeURI(err.details).length).toBeLessThanOrEqual(3072);
    await expectStillServing();
  });
});

describe('Jobs: ids and paths past 200 characters or not printable ASCII', () => {
  const ids = [LONG_ID, 'é', `${'é'.repeat(300)}`];

  it.each(ids.map((id) => [id.length, id]))(
    'Get and Cancel of a %i-character id answer JOB_NOT_FOUND',
    async (_, id) => {
      for (const rpc of ['Get', 'Cancel'] as const) {
        const params = expectGrpcError(await rejection(call(jobs, rpc, { id })), 'JOB_NOT_FOUND');
        expect(params['id'], rpc).toBe(shown(id));
      }
      await expectStillServing();
    },
  );

  it.each(ids.map((id) => [id.length, id]))(
    'the Result stream of a %i-character id answers JOB_NOT_FOUND',
    async (_, id) => {
      const { error } = await receive(jobs.Result({ id }));
      expect(error, 'the stream fails').not.toBeNull();
      expect(expectGrpcError(error!, 'JOB_NOT_FOUND')['id']).toBe(shown(id));
      await expectStillServing();
    },
  );

  it.each([
    ['a 300-character path', `${'d'.repeat(100)}/${'d'.repeat(100)}/${'m'.repeat(98)}`, 'FILE_NOT_FOUND'],
    ['a 300-character file name', 'm'.repeat(300), 'FILE_UNREADABLE'], // ENAMETOOLONG
    ['a non-ASCII path', 'modèles/é.safetensors', 'FILE_NOT_FOUND'],
  ] as const)('Submit of %s names it as the message shows it', async (_, path, code) => {
    const err = await rejection(call(jobs, 'Submit', { path, spec: { qdtype: 'int8' } }));
    const params = expectGrpcError(err, code);
    expect(params['path']).toBe(shown(path));
    await expectStillServing();
  });
});

describe('Open Inference Protocol: model and input names that are not printable ASCII', () => {
  const input = { name: 'input', datatype: 'FP32', shape: [2, 3], bytes: floatBytes(floats(6, 3), 'FP32') };

  it('ModelInfer of model é answers NOT_FOUND naming it', async () => {
    const err = await grpcError(oipCall(inference, 'ModelInfer', inferMessage('é', [input])));
    const params = expectGrpcError(err, 'NOT_FOUND', ['"é"']);
    expect(params['detail']).toContain('there is no model "é"');
    await expectStillServing();
  });

  it('ModelInfer with an input named é answers INFER_INPUT_INVALID naming it', async () => {
    const err = await grpcError(
      oipCall(inference, 'ModelInfer', inferMessage('quantize', [{ ...input, name: 'é' }])),
    );
    const params = expectGrpcError(err, 'INFER_INPUT_INVALID');
    expect(params['input']).toBe('é');
    await expectStillServing();
  });
});

describe('a request message that is not valid protobuf answers USAGE with quantd-code', () => {
  // field 15 with wire type 7, which protobuf does not have
  const MALFORMED = Buffer.from([0x7f]);
  const raw = (b: Buffer): Buffer => b;
  let client: grpc.Client;
  beforeAll(() => {
    client = new grpc.Client(t.target, grpc.credentials.createInsecure());
  });
  afterAll(() => client?.close());

  it.each([
    '/quantd.v1.Quantizer/Quantize',
    '/quantd.v1.Jobs/Get',
    '/inference.GRPCInferenceService/ModelInfer',
  ])('unary %s', async (path) => {
    const err = await rejection(
      new Promise((resolve, reject) =>
        client.makeUnaryRequest(path, raw, raw, MALFORMED, (e, r) => (e ? reject(e) : resolve(r))),
      ),
    );
    expectGrpcError(err, 'USAGE', [path, 'not a valid protobuf message']);
    await expectStillServing();
  });

  it('server-streaming /quantd.v1.Jobs/Result', async () => {
    const stream = client.makeServerStreamRequest('/quantd.v1.Jobs/Result', raw, raw, MALFORMED);
    const { error } = await receive(stream as grpc.ClientReadableStream<never>);
    expect(error, 'the stream fails').not.toBeNull();
    expectGrpcError(error!, 'USAGE', ['/quantd.v1.Jobs/Result']);
    await expectStillServing();
  });

  it('bidirectional /quantd.v1.Quantizer/QuantizeStream', async () => {
    const stream = client.makeBidiStreamRequest('/quantd.v1.Quantizer/QuantizeStream', raw, raw);
    const error = await new Promise<grpc.ServiceError>((resolve, reject) => {
      stream.on('error', resolve);
      stream.on('data', () => reject(new Error('no response was expected')));
      stream.on('end', () => reject(new Error('the stream ended without an error')));
      stream.write(MALFORMED);
    });
    expectGrpcError(error, 'USAGE', ['/quantd.v1.Quantizer/QuantizeStream']);
    stream.end();
    await expectStillServing();
  });
});
