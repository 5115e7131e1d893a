/**
 * The Open Inference Protocol endpoints on a real server, by the spec client (client.ts): health,
 * server and model metadata over HTTP and gRPC; the request bodies stock clients send (no
 * Content-Type, octet-stream, gzip, deflate); and the errors the spec defines — `{"error": "..."}`
 * as application/json with the catalogue's status over HTTP (404 unknown model, 400 bad datatype,
 * shape, binary framing, parameters), the catalogue's status with "CODE: message" over gRPC.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { catalogue, type ErrorCode } from '../../src/errors/index.js';
import { expectGrpcError, startTestServer, type TestServer } from '../grpc/helpers.js';
import { REPO } from '../cli/run-cli.js';
import {
  call,
  floatBytes,
  floats,
  grpcError,
  grpcInfer,
  inferMessage,
  inferenceClient,
  json,
  request,
  restBody,
  restInfer,
  restOutputs,
  type HttpReply,
  type InferenceClient,
  type InputTensor,
} from './client.js';

let t: TestServer;
let client: InferenceClient;
const dataDir = mkdtempSync(join(tmpdir(), 'quantd-oip-'));
const VERSION = (JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { version: string }).version;

beforeAll(async () => {
  t = await startTestServer({ QUANTD_DATA_DIR: dataDir });
  client = inferenceClient(t.target);
});
afterAll(async () => {
  client?.close();
  await t?.server.shutdown('test');
  rmSync(dataDir, { recursive: true, force: true });
});

const input: InputTensor = {
  name: 'input',
  datatype: 'FP32',
  shape: [2, 3],
  bytes: floatBytes(floats(6, 3), 'FP32'),
};

/** Asserts the protocol's error answer: the catalogue status, application/json, {"error": "CODE: ..."}. */
function expectError(reply: HttpReply, code: ErrorCode, fragments: readonly string[] = []): string {
  const text = reply.body.toString('utf8');
  expect(reply.status, text).toBe(catalogue[code].http);
  expect(String(reply.headers['content-type'])).toMatch(/^application\/json/);
  const body = JSON.parse(text) as Record<string, unknown>;
  expect(Object.keys(body)).toEqual(['error']);
  const message = body['error'] as string;
  expect(message.startsWith(`${code}: `), message).toBe(true);
  for (const f of fragments) expect(message).toContain(f);
  return message;
}

const MODELS = {
  quantize: { inputs: ['input'], outputs: ['codes', 'scale', 'zero_point'] },
  dequantize: { inputs: ['codes', 'scale', 'zero_point'], outputs: ['output'] },
  fake_quantize: { inputs: ['input'], outputs: ['output', 'mask'] },
  choose_qparams: { inputs: ['input'], outputs: ['scale', 'zero_point'] },
};

describe('HTTP: health and metadata', () => {
  it('GET /v2/health/live and /v2/health/ready answer 200 with a JSON body', async () => {
    const live = await request(t.base, '/v2/health/live');
    expect(live.status).toBe(200);
    expect(live.headers['content-type']).toMatch(/^application\/json/);
    expect(json(live)).toMatchObject({ live: true });
    const ready = await request(t.base, '/v2/health/ready');
    expect(ready.status).toBe(200);
    expect(json(ready)).toMatchObject({ ready: true });
  });

  it.each(['/v2', '/v2/'])(
    'GET %s: name quantd, the package version, binary_tensor_data among the extensions',
    async (path) => {
      // /v2/ is the server metadata path of KServe's OpenAPI document (rest_predict_v2.yaml)
      const reply = await request(t.base, path);
      expect(reply.status, reply.body.toString()).toBe(200);
      const meta = json(reply);
      expect(meta).toMatchObject({ name: 'quantd', version: VERSION });
      expect(meta['extensions']).toContain('binary_tensor_data');
    },
  );

  it.each(Object.entries(MODELS))(
    'GET /v2/models/%s (and /versions/1): metadata; /ready: 200',
    async (name, io) => {
      for (const path of [`/v2/models/${name}`, `/v2/models/${name}/versions/1`]) {
        const reply = await request(t.base, path);
        expect(reply.status, reply.body.toString()).toBe(200);
        const meta = json(reply) as {
          name: string;
          versions: string[];
          platform: string;
          inputs: { name: string; datatype: string; shape: number[] }[];
          outputs: { name: string; datatype: string; shape: number[] }[];
        };
        expect(meta).toMatchObject({ name, versions: ['1'], platform: 'quantd' });
        expect(meta.inputs.map((i) => i.name)).toEqual(io.inputs);
        expect(meta.outputs.map((o) => o.name)).toEqual(io.outputs);
        for (const tensor of [...meta.inputs, ...meta.outputs]) {
          expect(typeof tensor.datatype).toBe('string');
          expect(tensor.shape).toEqual([-1]);
        }
      }
      for (const path of [`/v2/models/${name}/ready`, `/v2/models/${name}/versions/1/ready`]) {
        const reply = await request(t.base, path);
        expect(reply.status).toBe(200);
        expect(json(reply)).toEqual({ name, ready: true });
      }
    },
  );

  it('an unknown model, version or route is 404 {"error"}', async () => {
    expectError(await request(t.base, '/v2/models/quantise'), 'NOT_FOUND', [
      'quantise',
      'quantize, dequantize',
    ]);
    expectError(await request(t.base, '/v2/models/quantise/ready'), 'NOT_FOUND');
    expectError(await request(t.base, '/v2/models/quantize/versions/2'), 'NOT_FOUND', ['version "2"']);
    expectError(await request(t.base, '/v2/models/quantize/versions/2/ready'), 'NOT_FOUND');
    expectError(await restInfer(t.base, 'quantise', [input]), 'NOT_FOUND');
    expectError(
      await request(t.base, '/v2/models/quantize/versions/3/infer', { body: restBody([input], {}).body }),
      'NOT_FOUND',
    );
    expectError(
      await request(t.base, '/v2/repository/index', { method: 'POST', body: Buffer.from('{}') }),
      'NOT_FOUND',
    );
  });

  it('versions/1 infers like the unversioned path', async () => {
    const reply = await request(t.base, '/v2/models/quantize/versions/1/infer', {
      body: restBody([input], {}).body,
    });
    expect(reply.status, reply.body.toString()).toBe(200);
    expect(json(reply)).toMatchObject({ model_name: 'quantize', model_version: '1' });
  });
});

describe('HTTP: the bodies stock clients send', () => {
  let baseline: Buffer;
  beforeAll(async () => {
    const reply = await restInfer(t.base, 'quantize', [input]);
    expect(reply.status).toBe(200);
    baseline = reply.body;
  });

  it.each([
    ['no Content-Type, JSON data', { contentType: null }],
    ['text/plain', { contentType: 'text/plain' }],
    ['application/json; charset=utf-8', { contentType: 'application/json; charset=utf-8' }],
    ['gzip', { encoding: 'gzip' }],
    ['deflate (zlib)', { encoding: 'deflate' }],
    ['deflate (raw)', { encoding: 'deflate-raw', contentType: null }],
  ] as const)('%s: the same answer', async (_label, options) => {
    const reply = await restInfer(t.base, 'quantize', [input], options);
    expect(reply.status, reply.body.toString()).toBe(200);
    expect(reply.body.equals(baseline)).toBe(true);
  });

  it.each([
    ['no Content-Type', null],
    ['application/octet-stream', 'application/octet-stream'],
  ] as const)('binary data with %s, and gzip: the same outputs', async (_label, contentType) => {
    for (const encoding of [undefined, 'gzip'] as const) {
      const reply = await restInfer(t.base, 'quantize', [input], {
        binaryInputs: true,
        contentType,
        ...(encoding && { encoding }),
      });
      expect(reply.status, reply.body.toString()).toBe(200);
      const { outputs } = restOutputs(reply);
      const { outputs: expected } = restOutputs({ ...reply, headers: {}, body: baseline });
      for (const [name, out] of expected)
        expect(Buffer.from(outputs.get(name)!.bytes!).equals(Buffer.from(out.bytes!))).toBe(true);
    }
  });

  it('a binary response: Inference-Header-Content-Length, octet-stream, binary_data_size on each output', async () => {
    const reply = await restInfer(t.base, 'quantize', [input], { parameters: { binary_data_output: true } });
    expect(reply.status).toBe(200);
    expect(reply.headers['content-type']).toMatch(/^application\/octet-stream/);
    const length = Number(reply.headers['inference-header-content-length']);
    expect(Number(reply.headers['content-length'])).toBe(reply.body.byteLength);
    const head = JSON.parse(reply.body.subarray(0, length).toString()) as {
      outputs: { parameters: Record<string, number> }[];
    };
    const sizes = head.outputs.map((o) => o.parameters['binary_data_size']!);
    expect(length + sizes.reduce((a, b) => a + b, 0)).toBe(reply.body.byteLength);
  });

  it('JSON data may be nested (row-major)', async () => {
    const flat = await restInfer(t.base, 'quantize', [input]);
    const values = Array.from(new Float32Array(input.bytes.slice().buffer));
    const nested = {
      inputs: [
        { name: 'input', datatype: 'FP32', shape: [2, 3], data: [values.slice(0, 3), values.slice(3)] },
      ],
    };
    const reply = await request(t.base, '/v2/models/quantize/infer', {
      body: Buffer.from(JSON.stringify(nested)),
    });
    expect(reply.status).toBe(200);
    expect(reply.body.equals(flat.body)).toBe(true);
  });
});

/** POST a raw body to the infer path of `model`. */
function post(
  model: string,
  body: string | Buffer,
  headers: Record<string, string> = {},
): Promise<HttpReply> {
  return request(t.base, `/v2/models/${model}/infer`, {
    headers,
    body: typeof body === 'string' ? Buffer.from(body) : body,
  });
}

const infer = (inputs: unknown[], extra: Record<string, unknown> = {}): string =>
  JSON.stringify({ inputs, ...extra });

describe('the timeout parameter on a tensor computed at once (no timer, the deadline checked after)', () => {
  it('a 1 µs timeout: 504 REQUEST_TIMEOUT over REST, DEADLINE_EXCEEDED over gRPC', async () => {
    const reply = await restInfer(t.base, 'quantize', [input], { parameters: { timeout: 1 } });
    expect(reply.status).toBe(504);
    expectError(reply, 'REQUEST_TIMEOUT');
    const err = await grpcError(grpcInfer(client, 'quantize', [input], { parameters: { timeout: 1 } }));
    expectGrpcError(err, 'REQUEST_TIMEOUT');
    expect(err.code).toBe(grpc.status.DEADLINE_EXCEEDED);
  });

  it('a timeout of a minute: answered', async () => {
    const reply = await restInfer(t.base, 'quantize', [input], { parameters: { timeout: 60_000_000 } });
    expect(reply.status, reply.body.toString()).toBe(200);
  });
});

describe('HTTP: errors are 400 {"error"}', () => {
  it('wrong datatype: INT64 to quantize (INPUT_DTYPE_UNSUPPORTED), an unknown datatype', async () => {
    expectError(
      await post('quantize', infer([{ name: 'input', datatype: 'INT64', shape: [2], data: [1, 2] }])),
      'INPUT_DTYPE_UNSUPPORTED',
      ['INT64'],
    );
    expectError(
      await post('quantize', infer([{ name: 'input', datatype: 'FLOAT32', shape: [2], data: [1, 2] }])),
      'INFER_INPUT_INVALID',
      ['FLOAT32'],
    );
    expectError(
      await post('dequantize', infer([{ name: 'codes', datatype: 'FP32', shape: [1], data: [1] }])),
      'INFER_INPUT_INVALID',
      ['codes', 'FP32'],
    );
  });

  it('wrong shape: shape × datatype size ≠ the data', async () => {
    const { body, headerLength } = restBody([{ ...input, shape: [2, 2] }], { binaryInputs: true });
    expectError(
      await post('quantize', body, { 'inference-header-content-length': String(headerLength) }),
      'INFER_INPUT_INVALID',
      ['[2, 2]', '16 bytes', '24'],
    );
    expectError(
      await post('quantize', infer([{ name: 'input', datatype: 'FP32', shape: [2, 3], data: [1, 2, 3] }])),
      'INFER_INPUT_INVALID',
      ['6 elements', 'data has 3'],
    );
    expectError(
      await post('quantize', infer([{ name: 'input', datatype: 'FP32', shape: [-1, 3], data: [1, 2, 3] }])),
      'INFER_INPUT_INVALID',
      ['shape'],
    );
    expectError(
      await post('quantize', infer([{ name: 'input', datatype: 'FP32', shape: [2], data: [1, 'two'] }])),
      'INFER_INPUT_INVALID',
      ['data[1]'],
    );
  });

  it('binary sizes that do not add up, and Inference-Header-Content-Length past the body', async () => {
    const { body, headerLength } = restBody([input], { binaryInputs: true });
    const length = String(headerLength);
    // bytes left over after the inputs' binary_data_size
    expectError(
      await post('quantize', Buffer.concat([body, Buffer.alloc(4)]), {
        'inference-header-content-length': length,
      }),
      'INFER_REQUEST_INVALID',
      ['28 bytes of binary data', 'add up to 24'],
    );
    // binary_data_size past the end of the body
    expectError(
      await post('quantize', body.subarray(0, body.byteLength - 1), {
        'inference-header-content-length': length,
      }),
      'INFER_REQUEST_INVALID',
      ['runs past'],
    );
    expectError(
      await post('quantize', body, { 'inference-header-content-length': String(body.byteLength + 1) }),
      'HEADER_INVALID',
      ['Inference-Header-Content-Length', 'past the end'],
    );
    expectError(await post('quantize', body, { 'inference-header-content-length': 'ten' }), 'HEADER_INVALID');
    // binary data without the header: the JSON has trailing bytes
    expectError(await post('quantize', body), 'INFER_REQUEST_INVALID', ['Inference-Header-Content-Length']);
    expectError(
      await post(
        'quantize',
        infer([
          { name: 'input', datatype: 'FP32', shape: [1], data: [1], parameters: { binary_data_size: 4 } },
        ]),
      ),
      'INFER_REQUEST_INVALID',
      ['both'],
    );
  });

  it('malformed requests', async () => {
    expectError(await post('quantize', '{"inputs": ['), 'INFER_REQUEST_INVALID', ['not a JSON object']);
    expectError(await post('quantize', '[]'), 'INFER_REQUEST_INVALID');
    expectError(
      await request(t.base, '/v2/models/quantize/infer', { method: 'POST' }),
      'INFER_REQUEST_INVALID',
      ['empty'],
    );
    expectError(await post('quantize', '{"inputs": {}}'), 'INFER_REQUEST_INVALID', ['"inputs"']);
    expectError(
      await post('quantize', infer([{ name: 'input', datatype: 'FP32', shape: [1] }])),
      'INFER_REQUEST_INVALID',
      ['neither'],
    );
    expectError(await post('quantize', infer([])), 'INFER_INPUT_INVALID', ['missing']);
    expectError(
      await post('quantize', infer([{ name: 'weights', datatype: 'FP32', shape: [1], data: [1] }])),
      'INFER_INPUT_INVALID',
      ['not an input of model quantize'],
    );
    expectError(
      await post(
        'quantize',
        infer([{ name: 'input', datatype: 'FP32', shape: [1], data: [1] }], { outputs: [{ name: 'mask' }] }),
      ),
      'INFER_REQUEST_INVALID',
      ['not an output of model quantize'],
    );
    expectError(
      await post('quantize', infer([{ name: 'input', datatype: 'FP32', shape: [1], data: [1] }], { id: 7 })),
      'INFER_REQUEST_INVALID',
    );
  });

  it('invalid parameters: unknown ones, bad values, not objects', async () => {
    const one = [{ name: 'input', datatype: 'FP32', shape: [2], data: [1, -1] }];
    expectError(await post('quantize', infer(one, { parameters: { qdtpye: 'int4' } })), 'OPTION_INVALID', [
      'qdtpye',
      'is not a parameter of model quantize',
    ]);
    expectError(await post('quantize', infer(one, { parameters: { include: '*' } })), 'OPTION_INVALID', [
      'include',
    ]);
    expectError(await post('quantize', infer(one, { parameters: { qdtype: 'int3' } })), 'UNKNOWN_QDTYPE');
    expectError(await post('quantize', infer(one, { parameters: { axis: 1 } })), 'OPTION_INVALID', [
      'per_channel only',
    ]);
    expectError(
      await post('quantize', infer(one, { parameters: { binary_data_output: 'yes' } })),
      'OPTION_INVALID',
      ['boolean'],
    );
    expectError(await post('quantize', infer(one, { parameters: { timeout: -5 } })), 'OPTION_INVALID', [
      'microseconds',
    ]);
    expectError(
      await post('quantize', infer(one, { parameters: { qdtype: ['int4'] } })),
      'INFER_REQUEST_INVALID',
      ['string, a number or a boolean'],
    );
    expectError(
      await post('fake_quantize', infer(one, { parameters: { scheme: 'per_group' } })),
      'FEATURE_UNSUPPORTED',
    );
    expectError(await post('dequantize', infer([], { parameters: { eps: 0.001 } })), 'OPTION_INVALID', [
      'is not a parameter of model dequantize',
    ]);
    expectError(
      await post(
        'quantize',
        infer([
          {
            name: 'input',
            datatype: 'FP32',
            shape: [1],
            data: [1],
            parameters: { shared_memory_region: 'a' },
          },
        ]),
      ),
      'INFER_INPUT_INVALID',
      ['shared_memory_region'],
    );
  });

  it('dequantize: packed codes need logical_shape; qparams must fit', async () => {
    const scale = { name: 'scale', datatype: 'FP32', shape: [1], data: [0.5] };
    const zp = { name: 'zero_point', datatype: 'INT32', shape: [1], data: [0] };
    const params = { parameters: { qdtype: 'int4' } };
    expectError(
      await post(
        'dequantize',
        infer([{ name: 'codes', datatype: 'UINT8', shape: [2], data: [1, 2] }, scale, zp], params),
      ),
      'INFER_INPUT_INVALID',
      ['logical_shape'],
    );
    expectError(
      await post(
        'dequantize',
        infer(
          [
            {
              name: 'codes',
              datatype: 'UINT8',
              shape: [2],
              data: [1, 2],
              parameters: { logical_shape: '5' },
            },
            scale,
            zp,
          ],
          params,
        ),
      ),
      'INFER_INPUT_INVALID',
      ['[3]'],
    );
    expectError(
      await post(
        'dequantize',
        infer([
          { name: 'codes', datatype: 'INT8', shape: [2], data: [1, 2] },
          { ...scale, shape: [2], data: [1, 1] },
          zp,
        ]),
      ),
      'INFER_INPUT_INVALID',
      ['scale', 'have shape [1]'],
    );
    expectError(
      await post(
        'dequantize',
        infer([
          { name: 'codes', datatype: 'INT8', shape: [2], data: [1, 2] },
          scale,
          { ...zp, datatype: 'FP32' },
        ]),
      ),
      'INFER_INPUT_INVALID',
      ['zero_point', 'INT32'],
    );
    expectError(
      await post(
        'dequantize',
        infer([{ name: 'codes', datatype: 'INT8', shape: [2], data: [1, 2] }, { ...scale, data: [-1] }, zp]),
      ),
      'SCALE_INVALID',
    );
    const ok = await post(
      'dequantize',
      infer(
        [
          {
            name: 'codes',
            datatype: 'UINT8',
            shape: [2],
            data: [0x21, 0x03],
            parameters: { logical_shape: '3' },
          },
          scale,
          zp,
        ],
        params,
      ),
    );
    expect(ok.status, ok.body.toString()).toBe(200);
    expect(json(ok)).toMatchObject({
      outputs: [{ name: 'output', datatype: 'FP32', shape: [3], data: [0.5, 1, 1.5] }],
    });
  });

  it('numeric errors keep their code; NaN outputs need binary data', async () => {
    const nan = new Uint8Array(new Float32Array([1, NaN]).buffer);
    const { body, headerLength } = restBody([{ ...input, shape: [2], bytes: nan }], { binaryInputs: true });
    expectError(
      await post('quantize', body, { 'inference-header-content-length': String(headerLength) }),
      'INPUT_NOT_FINITE',
      ['NaN'],
    );
    // float8_e4m3fn 0x7f is NaN: JSON cannot carry the dequantized NaN; binary data can
    const fp8 = [
      { name: 'codes', datatype: 'UINT8', shape: [2], data: [0x38, 0x7f] },
      { name: 'scale', datatype: 'FP32', shape: [1], data: [1] },
      { name: 'zero_point', datatype: 'INT32', shape: [1], data: [0] },
    ];
    const params = { qdtype: 'float8_e4m3fn' };
    expectError(await post('dequantize', infer(fp8, { parameters: params })), 'INFER_REQUEST_INVALID', [
      'NaN',
      'binary data',
    ]);
    const binary = await post(
      'dequantize',
      infer(fp8, { parameters: { ...params, binary_data_output: true } }),
    );
    expect(binary.status, binary.body.toString()).toBe(200);
    const out = restOutputs(binary).outputs.get('output')!;
    const values = new Float32Array(new Uint8Array(out.bytes!).buffer);
    expect(values[0]).toBe(1);
    expect(values[1]).toBeNaN();
  });

  it('Content-Encoding: unknown codings and corrupt data are 400', async () => {
    const body = Buffer.from(infer([{ name: 'input', datatype: 'FP32', shape: [1], data: [1] }]));
    expectError(await post('quantize', body, { 'content-encoding': 'br' }), 'HEADER_INVALID', [
      'Content-Encoding',
    ]);
    expectError(await post('quantize', body, { 'content-encoding': 'gzip' }), 'HEADER_INVALID', [
      'does not decompress',
    ]);
  });

  it('FP16 JSON numbers round to FP16 (the exact values come back)', async () => {
    const reply = await post(
      'fake_quantize',
      infer([{ name: 'input', datatype: 'FP16', shape: [3], data: [0.1, 1 + 2 ** -11 + 2 ** -30, -3] }], {
        parameters: { dtype: 'float16', qdtype: 'int16' },
      }),
    );
    expect(reply.status, reply.body.toString()).toBe(200);
    const output = (json(reply)['outputs'] as { name: string; datatype: string; data: number[] }[])[0]!;
    expect(output.datatype).toBe('FP16');
    // 0.1 → FP16 0.0999755859375; 1 + 2^-11 + ε rounds up to 1 + 2^-10
    expect(output.data).toEqual([0.0999755859375, 1 + 2 ** -10, -3]);
  });
});

describe('gRPC: health and metadata', () => {
  it('ServerLive, ServerReady, ServerMetadata', async () => {
    expect(await call(client, 'ServerLive', {})).toEqual({ live: true });
    expect(await call(client, 'ServerReady', {})).toEqual({ ready: true });
    const meta = await call(client, 'ServerMetadata', {});
    expect(meta).toMatchObject({ name: 'quantd', version: VERSION });
    expect(meta['extensions']).toContain('binary_tensor_data');
  });

  it.each(Object.entries(MODELS))('ModelMetadata and ModelReady of %s', async (name, io) => {
    for (const version of ['', '1']) {
      const meta = (await call(client, 'ModelMetadata', { name, version })) as {
        name: string;
        versions: string[];
        inputs: { name: string; shape: string[] }[];
        outputs: { name: string }[];
      };
      expect(meta).toMatchObject({ name, versions: ['1'], platform: 'quantd' });
      expect(meta.inputs.map((i) => i.name)).toEqual(io.inputs);
      expect(meta.inputs[0]!.shape).toEqual(['-1']);
      expect(meta.outputs.map((o) => o.name)).toEqual(io.outputs);
      expect(await call(client, 'ModelReady', { name, version })).toEqual({ ready: true });
    }
  });

  it('an unknown model or version is NOT_FOUND', async () => {
    expectGrpcError(await grpcError(call(client, 'ModelMetadata', { name: 'quantise' })), 'NOT_FOUND', [
      'quantise',
    ]);
    expectGrpcError(
      await grpcError(call(client, 'ModelReady', { name: 'quantize', version: '9' })),
      'NOT_FOUND',
    );
    expectGrpcError(await grpcError(grpcInfer(client, 'quantise', [input])), 'NOT_FOUND');
  });

  it('RPCs of Triton that quantd does not serve are UNIMPLEMENTED', async () => {
    const stream = client['ModelStreamInfer'] as unknown as () => grpc.ClientDuplexStream<unknown, unknown>;
    const status = await new Promise<grpc.StatusObject>((resolve) => {
      const s = stream.call(client);
      s.on('status', resolve);
      s.on('error', () => {});
      s.on('data', () => {});
      s.end();
    });
    expect(status.code).toBe(grpc.status.UNIMPLEMENTED);
  });

  it('server reflection lists inference.GRPCInferenceService', async () => {
    const require = createRequire(import.meta.url);
    const dir = join(dirname(require.resolve('@grpc/reflection/package.json')), 'build', 'proto');
    const definition = protoLoader.loadSync('grpc/reflection/v1/reflection.proto', {
      keepCase: true,
      oneofs: true,
      includeDirs: [dir],
    });
    const pkg = grpc.loadPackageDefinition(definition) as unknown as {
      grpc: { reflection: { v1: { ServerReflection: grpc.ServiceClientConstructor } } };
    };
    type Listing = { list_services_response?: { service: { name: string }[] } };
    const reflection = new pkg.grpc.reflection.v1.ServerReflection(
      t.target,
      grpc.credentials.createInsecure(),
    ) as unknown as grpc.Client & {
      ServerReflectionInfo(): grpc.ClientDuplexStream<Record<string, string>, Listing>;
    };
    const stream = reflection.ServerReflectionInfo();
    const names = await new Promise<string[]>((resolve, reject) => {
      stream.on('data', (r: Listing) =>
        resolve((r.list_services_response?.service ?? []).map((s) => s.name)),
      );
      stream.on('error', reject);
      stream.write({ list_services: '' });
    });
    stream.end();
    reflection.close();
    expect(names).toContain('inference.GRPCInferenceService');
    expect(names).toContain('quantd.v1.Quantizer');
  });
});

describe('gRPC: errors', () => {
  it('wrong datatype, wrong size, wrong framing: INVALID_ARGUMENT with the catalogue code', async () => {
    expectGrpcError(
      await grpcError(
        grpcInfer(client, 'quantize', [{ ...input, datatype: 'INT64', bytes: new Uint8Array(48) }]),
      ),
      'INPUT_DTYPE_UNSUPPORTED',
    );
    expectGrpcError(
      await grpcError(grpcInfer(client, 'quantize', [{ ...input, shape: [2, 2] }])),
      'INFER_INPUT_INVALID',
      ['16 bytes'],
    );
    const message = inferMessage('quantize', [input]);
    expectGrpcError(
      await grpcError(
        call(client, 'ModelInfer', {
          ...message,
          rawInputContents: [],
          inputs: message['inputs'] as object[],
        }),
      ),
      'INFER_INPUT_INVALID',
      ['fp32_contents has 0'],
    );
    expectGrpcError(
      await grpcError(
        call(client, 'ModelInfer', {
          ...message,
          rawInputContents: [Buffer.from(input.bytes), Buffer.alloc(4)],
        }),
      ),
      'INFER_REQUEST_INVALID',
      ['2 entries for 1 inputs'],
    );
    const both = inferMessage('quantize', [input], { typed: true });
    expectGrpcError(
      await grpcError(call(client, 'ModelInfer', { ...both, rawInputContents: [Buffer.from(input.bytes)] })),
      'INFER_REQUEST_INVALID',
      ['each input one way'],
    );
    expectGrpcError(
      await grpcError(grpcInfer(client, 'quantize', [input], { parameters: { qdtpye: 'int4' } })),
      'OPTION_INVALID',
      ['qdtpye'],
    );
    expectGrpcError(
      await grpcError(grpcInfer(client, 'quantize', [input], { outputs: ['mask'] })),
      'INFER_REQUEST_INVALID',
    );
  });

  it('FP16 and BF16 inputs go as raw contents only', async () => {
    const fp16 = { ...input, datatype: 'FP16', bytes: floatBytes(floats(6, 3), 'FP16') };
    const message = inferMessage('quantize', [fp16]);
    const inputs = (message['inputs'] as Record<string, unknown>[]).map((i) => ({
      ...i,
      contents: { fp32Contents: [1, 2, 3, 4, 5, 6] },
    }));
    expectGrpcError(
      await grpcError(call(client, 'ModelInfer', { ...message, inputs, rawInputContents: [] })),
      'INFER_INPUT_INVALID',
      ['raw_input_contents'],
    );
    const { outputs } = await grpcInfer(client, 'quantize', [fp16]);
    expect(outputs.get('codes')!.datatype).toBe('INT8');
  });

  it('typed contents in, typed contents out; raw out when an output has no typed form (BF16)', async () => {
    const typed = await grpcInfer(client, 'fake_quantize', [input], { typed: true });
    expect(typed.outputs.get('output')!.data).toHaveLength(6);
    const bf16 = await grpcInfer(client, 'fake_quantize', [input], {
      typed: true,
      parameters: { dtype: 'bfloat16' },
    });
    expect((bf16.response['rawOutputContents'] as Buffer[]).length).toBe(2);
    expect(bf16.outputs.get('output')!.datatype).toBe('BF16');
  });
});
