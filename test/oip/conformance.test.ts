/**
 * The four quantd models over the Open Inference Protocol, by a client written from the spec
 * (client.ts), give the bytes of the native API: for each case, quantize, choose_qparams,
 * fake_quantize and a dequantize round trip over REST with JSON data, REST with binary data
 * (both directions), gRPC with raw contents and gRPC with typed contents equal POST /v1/<op> with
 * the same tensor, byte for byte. Also the output conventions (docs/oip.md): codes datatypes,
 * packed shapes, the codes parameters, and response parameters that dequantize takes back.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { startTestServer, type TestServer } from '../grpc/helpers.js';
import {
  elements,
  floatBytes,
  floats,
  grpcInfer,
  inferenceClient,
  request,
  responseParameters,
  restInfer,
  restOutputs,
  safetensors,
  v1,
  type InferenceClient,
  type InputTensor,
  type OutputTensor,
  type ParamValue,
} from './client.js';

let t: TestServer;
let client: InferenceClient;
const dataDir = mkdtempSync(join(tmpdir(), 'quantd-oip-'));

beforeAll(async () => {
  t = await startTestServer({ QUANTD_DATA_DIR: dataDir });
  client = inferenceClient(t.target);
});
afterAll(async () => {
  client?.close();
  await t?.server.shutdown('test');
  rmSync(dataDir, { recursive: true, force: true });
});

const TRANSPORTS = ['rest-json', 'rest-binary', 'grpc-raw', 'grpc-typed'] as const;
type Transport = (typeof TRANSPORTS)[number];

interface Result {
  readonly outputs: Map<string, OutputTensor>;
  readonly parameters: Record<string, ParamValue>;
}

async function infer(
  transport: Transport,
  model: string,
  inputs: readonly InputTensor[],
  parameters: Record<string, ParamValue>,
): Promise<Result> {
  if (transport.startsWith('rest')) {
    const binary = transport === 'rest-binary';
    const reply = await restInfer(t.base, model, inputs, {
      id: `${model}-${transport}`,
      parameters: binary ? { ...parameters, binary_data_output: true } : parameters,
      binaryInputs: binary,
      ...(binary && { contentType: 'application/octet-stream' }),
    });
    expect(reply.status, reply.body.toString().slice(0, 400)).toBe(200);
    if (binary) expect(reply.headers['inference-header-content-length']).toBeDefined();
    else expect(reply.headers['content-type']).toMatch(/^application\/json/);
    const { response, outputs } = restOutputs(reply);
    expect(response).toMatchObject({ model_name: model, model_version: '1', id: `${model}-${transport}` });
    return { outputs, parameters: (response['parameters'] ?? {}) as Record<string, ParamValue> };
  }
  const { response, outputs } = await grpcInfer(client, model, inputs, {
    parameters,
    typed: transport === 'grpc-typed',
    id: `${model}-${transport}`,
  });
  expect(response).toMatchObject({ modelName: model, modelVersion: '1', id: `${model}-${transport}` });
  return { outputs, parameters: responseParameters(response) };
}

/** Asserts an output equals a /v1 tensor: bytes, or exact values for FP16 / BF16 sent as JSON. */
function expectSame(
  out: OutputTensor | undefined,
  expected: { bytes: Uint8Array } | undefined,
  label: string,
): void {
  expect(out, `${label}: returned`).toBeDefined();
  expect(expected, `${label}: expected`).toBeDefined();
  if (out!.bytes) {
    expect(Buffer.from(out!.bytes).equals(Buffer.from(expected!.bytes)), `${label}: bytes`).toBe(true);
  } else {
    expect(out!.data, `${label}: exact values`).toEqual(elements(out!.datatype, expected!.bytes));
  }
}

const DATATYPE_OF_ST: Record<string, string> = {
  I8: 'INT8',
  U8: 'UINT8',
  I16: 'INT16',
  I32: 'INT32',
  F8_E4M3: 'UINT8',
  F8_E5M2: 'UINT8',
  F32: 'FP32',
  F16: 'FP16',
  BF16: 'BF16',
  BOOL: 'BOOL',
};

interface Case {
  readonly label: string;
  readonly datatype: 'FP32' | 'FP16' | 'BF16';
  readonly shape: readonly number[];
  readonly params: Record<string, string | number>;
  /** fake_quantize applies (per_tensor / per_channel integer grids). */
  readonly fake: boolean;
  readonly bits?: number;
}

const CASES: readonly Case[] = [
  { label: 'int8 per_tensor', datatype: 'FP32', shape: [4, 6], params: {}, fake: true },
  {
    label: 'int4 per_channel axis 1 (packed)',
    datatype: 'FP32',
    shape: [4, 5],
    params: { qdtype: 'int4', scheme: 'per_channel', axis: 1 },
    fake: true,
    bits: 4,
  },
  {
    label: 'uint2 per_group symmetric (packed)',
    datatype: 'FP32',
    shape: [3, 8],
    params: { qdtype: 'uint2', scheme: 'per_group', group_size: 4, mode: 'symmetric' },
    fake: false,
    bits: 2,
  },
  {
    label: 'float8_e4m3fn',
    datatype: 'FP32',
    shape: [3, 5],
    params: { qdtype: 'float8_e4m3fn' },
    fake: false,
  },
  {
    label: 'int16 per_channel symmetric',
    datatype: 'FP32',
    shape: [3, 4],
    params: { qdtype: 'int16', scheme: 'per_channel', mode: 'symmetric' },
    fake: true,
  },
  { label: 'int32 per_tensor', datatype: 'FP32', shape: [7], params: { qdtype: 'int32' }, fake: true },
  {
    label: 'per_token affine (FP32 zero points)',
    datatype: 'FP32',
    shape: [2, 3, 4],
    params: { scheme: 'per_token' },
    fake: false,
  },
  {
    label: 'uint8 float_qparams per_channel (FP32 zero points)',
    datatype: 'FP32',
    shape: [4, 3],
    params: { qdtype: 'uint8', scheme: 'per_channel', mode: 'float_qparams' },
    fake: false,
  },
  { label: 'BF16 input, uint8', datatype: 'BF16', shape: [5, 4], params: { qdtype: 'uint8' }, fake: true },
  {
    label: 'FP16 input, int4 per_group',
    datatype: 'FP16',
    shape: [2, 8],
    params: { qdtype: 'int4', scheme: 'per_group', group_size: 4 },
    fake: false,
    bits: 4,
  },
];

/** The /v1 container of quantize, as bytes (for /v1/dequantize). */
async function v1Container(input: InputTensor, query: Record<string, string | number>): Promise<Buffer> {
  const q = new URLSearchParams(
    Object.entries(query).map(([k, v]): [string, string] => [k, String(v)]),
  ).toString();
  const reply = await request(t.base, `/v1/quantize${q ? `?${q}` : ''}`, {
    headers: {
      'content-type': 'application/octet-stream',
      'x-tensor-dtype': { FP32: 'F32', FP16: 'F16', BF16: 'BF16' }[input.datatype]!,
      'x-tensor-shape': input.shape.join(','),
    },
    body: input.bytes,
  });
  expect(reply.status).toBe(200);
  return reply.body;
}

describe.each(CASES)('$label', (c) => {
  const numel = c.shape.reduce((a, d) => a * d, 1);
  const input: InputTensor = {
    name: 'input',
    datatype: c.datatype,
    shape: c.shape,
    bytes: floatBytes(floats(numel, c.label.length * 7919), c.datatype),
  };

  it.each(TRANSPORTS)(
    'over %s: quantize, choose_qparams, fake_quantize and dequantize give the /v1 bytes',
    async (transport) => {
      if (transport === 'grpc-typed' && c.datatype !== 'FP32') {
        // FP16 / BF16 have no typed contents in the protocol: raw only (grpc.test.ts checks the error)
        return;
      }
      const params = c.params;
      const native = await v1(t.base, 'quantize', params, { tensor: input });

      // quantize
      const q = await infer(transport, 'quantize', [input], params);
      expect([...q.outputs.keys()]).toEqual(['codes', 'scale', 'zero_point']);
      const codes = q.outputs.get('codes')!;
      const nativeCodes = native.get('tensor')!;
      expect(codes.datatype).toBe(DATATYPE_OF_ST[nativeCodes.dtype]);
      expect(codes.shape).toEqual(nativeCodes.shape);
      expect(codes.parameters).toMatchObject({
        qdtype: params['qdtype'] ?? 'int8',
        logical_shape: c.shape.join(','),
        bits: c.bits ?? (params['qdtype'] === 'int16' ? 16 : params['qdtype'] === 'int32' ? 32 : 8),
      });
      if (c.bits) expect(codes.shape).toEqual([Math.ceil((numel * c.bits) / 8)]);
      else expect(codes.shape).toEqual([...c.shape]);
      expectSame(codes, nativeCodes, 'codes');
      expectSame(q.outputs.get('scale'), native.get('tensor.scale'), 'scale');
      expectSame(q.outputs.get('zero_point'), native.get('tensor.zero_point'), 'zero_point');
      expect(q.outputs.get('scale')!.datatype).toBe('FP32');
      expect(q.outputs.get('zero_point')!.datatype).toBe(
        DATATYPE_OF_ST[native.get('tensor.zero_point')!.dtype],
      );
      expect(q.parameters).toMatchObject({
        qdtype: params['qdtype'] ?? 'int8',
        scheme: params['scheme'] ?? 'per_tensor',
      });

      // choose_qparams
      const nativeQp = await v1(t.base, 'qparams', params, { tensor: input });
      const qp = await infer(transport, 'choose_qparams', [input], params);
      expect([...qp.outputs.keys()]).toEqual(['scale', 'zero_point']);
      expectSame(qp.outputs.get('scale'), nativeQp.get('tensor.scale'), 'choose_qparams scale');
      expectSame(
        qp.outputs.get('zero_point'),
        nativeQp.get('tensor.zero_point'),
        'choose_qparams zero_point',
      );

      // fake_quantize (to bfloat16 in one case, float32 elsewhere)
      if (c.fake) {
        const fq = { ...params, ...(c.datatype === 'BF16' && { dtype: 'bfloat16' }) };
        const nativeFq = await v1(t.base, 'fake-quantize', fq, { tensor: input });
        const f = await infer(transport, 'fake_quantize', [input], fq);
        expect([...f.outputs.keys()]).toEqual(['output', 'mask']);
        expect(f.outputs.get('output')!.datatype).toBe(c.datatype === 'BF16' ? 'BF16' : 'FP32');
        expect(f.outputs.get('mask')!.datatype).toBe('BOOL');
        expectSame(f.outputs.get('output'), nativeFq.get('tensor'), 'fake_quantize output');
        expectSame(f.outputs.get('mask'), nativeFq.get('tensor.mask'), 'fake_quantize mask');
      }

      // dequantize what quantize returned, with its response parameters: /v1/dequantize's bytes
      const nativeDq = await v1(t.base, 'dequantize', {}, { safetensors: await v1Container(input, params) });
      const toInput = (
        name: string,
        out: OutputTensor,
        parameters?: Record<string, ParamValue>,
      ): InputTensor => ({
        name,
        datatype: out.datatype,
        shape: out.shape,
        bytes: out.bytes!,
        ...(parameters && { parameters }),
      });
      const dq = await infer(
        transport,
        'dequantize',
        [
          toInput('codes', codes, { logical_shape: String(codes.parameters['logical_shape']) }),
          toInput('scale', q.outputs.get('scale')!),
          toInput('zero_point', q.outputs.get('zero_point')!),
        ],
        q.parameters,
      );
      expect([...dq.outputs.keys()]).toEqual(['output']);
      expect(dq.outputs.get('output')!.shape).toEqual([...c.shape]);
      expectSame(dq.outputs.get('output'), nativeDq.get('tensor'), 'dequantize output');
    },
  );
});

describe('given qparams', () => {
  const shape = [4, 3];
  const input: InputTensor = {
    name: 'input',
    datatype: 'FP32',
    shape,
    bytes: floatBytes(floats(12, 5), 'FP32'),
  };
  const scale: InputTensor = {
    name: 'scale',
    datatype: 'FP32',
    shape: [4],
    bytes: new Uint8Array(new Float32Array([0.05, 0.1, 0.02, 0.5]).buffer),
  };
  const zeroPoint: InputTensor = {
    name: 'zero_point',
    datatype: 'INT32',
    shape: [4],
    bytes: new Uint8Array(new Int32Array([0, 3, -2, 10]).buffer),
  };
  const params = { scheme: 'per_channel' };

  it.each(TRANSPORTS)(
    'quantize and fake_quantize with scale / zero_point inputs give the /v1 bytes (%s)',
    async (transport) => {
      const file = safetensors([
        { name: 'tensor', dtype: 'F32', shape, data: input.bytes },
        { name: 'tensor.scale', dtype: 'F32', shape: [4], data: scale.bytes },
        { name: 'tensor.zero_point', dtype: 'I32', shape: [4], data: zeroPoint.bytes },
      ]);
      const native = await v1(t.base, 'quantize', params, { safetensors: file });
      const q = await infer(transport, 'quantize', [input, scale, zeroPoint], params);
      expectSame(q.outputs.get('codes'), native.get('tensor'), 'codes');
      expectSame(q.outputs.get('scale'), native.get('tensor.scale'), 'scale');
      expectSame(q.outputs.get('zero_point'), native.get('tensor.zero_point'), 'zero_point');

      const nativeFq = await v1(t.base, 'fake-quantize', params, { safetensors: file });
      const f = await infer(transport, 'fake_quantize', [input, scale, zeroPoint], params);
      expectSame(f.outputs.get('output'), nativeFq.get('tensor'), 'fake_quantize output');
      expectSame(f.outputs.get('mask'), nativeFq.get('tensor.mask'), 'fake_quantize mask');
    },
  );
});

describe('outputs requested', () => {
  const input: InputTensor = {
    name: 'input',
    datatype: 'FP32',
    shape: [2, 4],
    bytes: floatBytes(floats(8, 9), 'FP32'),
  };

  it('REST: the named outputs in the order named, each as JSON or binary data as asked', async () => {
    const native = await v1(t.base, 'quantize', {}, { tensor: input });
    const reply = await restInfer(t.base, 'quantize', [input], {
      parameters: { binary_data_output: true },
      outputs: [{ name: 'zero_point', binary_data: false }, { name: 'codes' }],
    });
    expect(reply.status, reply.body.toString()).toBe(200);
    const { response, outputs } = restOutputs(reply);
    expect([...outputs.keys()]).toEqual(['zero_point', 'codes']);
    const out = response['outputs'] as Record<string, unknown>[];
    expect(out[0]!['data'], 'binary_data false overrides binary_data_output').toBeDefined();
    expect(out[1]!['data'], 'binary_data_output for the output without binary_data').toBeUndefined();
    expectSame(outputs.get('codes'), native.get('tensor'), 'codes');
    expectSame(outputs.get('zero_point'), native.get('tensor.zero_point'), 'zero_point');
  });

  it('gRPC: the named outputs in the order named', async () => {
    const { outputs } = await grpcInfer(client, 'quantize', [input], { outputs: ['scale', 'codes'] });
    expect([...outputs.keys()]).toEqual(['scale', 'codes']);
  });
});

describe('a repeated request (the plan remembered) with other data', () => {
  const params = { qdtype: 'int4', scheme: 'per_group', group_size: 4 };

  it.each(TRANSPORTS)(
    'quantize and dequantize give the /v1 bytes each time, another shape between (%s)',
    async (transport) => {
      const shapes = [
        [2, 8],
        [2, 8],
        [4, 8],
        [2, 8],
      ] as const;
      for (const [i, shape] of shapes.entries()) {
        const input: InputTensor = {
          name: 'input',
          datatype: 'FP32',
          shape,
          bytes: floatBytes(floats(shape[0] * shape[1], 101 + i), 'FP32'),
        };
        const label = `request ${i} (${shape.join('x')})`;
        const native = await v1(t.base, 'quantize', params, { tensor: input });
        const q = await infer(transport, 'quantize', [input], params);
        expectSame(q.outputs.get('codes'), native.get('tensor'), `${label}: codes`);
        expectSame(q.outputs.get('scale'), native.get('tensor.scale'), `${label}: scale`);
        expectSame(q.outputs.get('zero_point'), native.get('tensor.zero_point'), `${label}: zero_point`);

        const nativeDq = await v1(
          t.base,
          'dequantize',
          {},
          { safetensors: await v1Container(input, params) },
        );
        const as = (name: string, out: OutputTensor): InputTensor => ({
          name,
          datatype: out.datatype,
          shape: out.shape,
          bytes: out.bytes!,
          ...(name === 'codes' && { parameters: { logical_shape: shape.join(',') } }),
        });
        const dq = await infer(
          transport,
          'dequantize',
          ['codes', 'scale', 'zero_point'].map((name) => as(name, q.outputs.get(name)!)),
          q.parameters,
        );
        expectSame(dq.outputs.get('output'), nativeDq.get('tensor'), `${label}: dequantize output`);
      }
    },
  );
});
