/**
 * The unary RPCs (Quantize, Dequantize, FakeQuantize, ChooseQParams) against a real server, with a
 * safetensors input (the golden model; a qtensor container for Dequantize) and with one `tensor`
 * input in float32, float16 and bfloat16: form SAFETENSORS is, byte for byte, the file the CLI
 * writes for the same input and options and the body POST /v1/<op> returns on the same server;
 * form TENSORS decodes to the same tensors (names in container order, dtypes, shapes, bytes) and
 * the same metadata.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { bfloat16BitsFromFloat32, float16BitsFromFloat32, type StDType } from '../../src/core/index.js';
import { serializeSafetensors } from '../../src/format/index.js';
import { MODEL } from '../cli/run-cli.js';
import {
  OP_OF,
  bytesOf,
  cliArgs,
  cliOutput,
  decodeContainer,
  expectGrpcError,
  expectSameBytes,
  floats,
  httpOp,
  queryOf,
  quantizerClient,
  rejection,
  startTestServer,
  unary,
  type OperationRequest,
  type QuantizerClient,
  type SpecMessage,
  type TestServer,
  type UnaryRpc,
} from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'quantd-grpc-unary-'));
const MODEL_BYTES = readFileSync(MODEL);
let t: TestServer;
let client: QuantizerClient;

beforeAll(async () => {
  t = await startTestServer();
  client = await quantizerClient(t.target);
});
afterAll(async () => {
  client?.close();
  await t?.server.shutdown('test');
  rmSync(dir, { recursive: true, force: true });
});

/** Float test data in the three float dtypes, as little-endian bytes. */
function tensorBytes(dtype: 'float32' | 'float16' | 'bfloat16', n: number, seed: number): Uint8Array {
  const values = floats(n, seed);
  if (dtype === 'float32') return bytesOf(values);
  const bits = Uint16Array.from(
    values,
    dtype === 'float16' ? float16BitsFromFloat32 : bfloat16BitsFromFloat32,
  );
  return bytesOf(bits);
}
const ST: Record<'float32' | 'float16' | 'bfloat16', StDType> = {
  float32: 'F32',
  float16: 'F16',
  bfloat16: 'BF16',
};

interface Case {
  readonly label: string;
  readonly rpc: UnaryRpc;
  readonly spec?: SpecMessage;
  readonly dtype?: string;
  /** the safetensors input, or the one tensor */
  readonly input: () => { file: Uint8Array; request: Pick<OperationRequest, 'safetensors' | 'tensor'> };
  /** whether POST /v1/<op> can send the same input (an octet-stream tensor is always "tensor") */
  readonly http: boolean;
}

const modelInput = (): { file: Uint8Array; request: Pick<OperationRequest, 'safetensors'> } => ({
  file: MODEL_BYTES,
  request: { safetensors: MODEL_BYTES },
});

/** The container the int4 per_group case produces (CLI), the Dequantize input. */
let qtensor: Buffer;
const INT4_SPEC: SpecMessage = {
  qdtype: 'int4',
  scheme: 'per_group',
  group_size: 16,
  include: ['layers.*'],
  exclude: ['layers.0.bias'],
};

function tensorCase(
  rpc: UnaryRpc,
  dtype: 'float32' | 'float16' | 'bfloat16',
  shape: number[],
  spec: SpecMessage,
  extra: { outDType?: string; name?: string; dtypeName?: string } = {},
): Case {
  const n = shape.reduce((a, b) => a * b, 1);
  const data = tensorBytes(dtype, n, shape.length * 7919 + n);
  const name = extra.name ?? 'tensor';
  return {
    label: `${rpc}: one ${dtype} tensor ${JSON.stringify(shape)}${extra.name ? ` named ${name}` : ''} ${JSON.stringify(spec)}`,
    rpc,
    spec,
    ...(extra.outDType ? { dtype: extra.outDType } : {}),
    http: extra.name === undefined,
    input: () => ({
      file: serializeSafetensors([{ name, dtype: ST[dtype], shape, data }], null),
      request: {
        tensor: { ...(extra.name ? { name } : {}), dtype: extra.dtypeName ?? dtype, shape, data },
      },
    }),
  };
}

const CASES: readonly Case[] = [
  { label: 'Quantize: the model, defaults', rpc: 'Quantize', input: modelInput, http: true },
  {
    label: 'Quantize: the model, int4 per_group with include/exclude',
    rpc: 'Quantize',
    spec: INT4_SPEC,
    input: modelInput,
    http: true,
  },
  {
    label: 'Dequantize: an int4 per_group container to bfloat16',
    rpc: 'Dequantize',
    dtype: 'bfloat16',
    http: true,
    input: () => ({ file: qtensor, request: { safetensors: qtensor } }),
  },
  {
    label: 'FakeQuantize: the model, uint8 per_channel to float16',
    rpc: 'FakeQuantize',
    spec: { qdtype: 'uint8', scheme: 'per_channel', axis: 0 },
    dtype: 'float16',
    input: modelInput,
    http: true,
  },
  {
    label: 'ChooseQParams: the model, symmetric narrowed range, eps',
    rpc: 'ChooseQParams',
    spec: { mode: 'symmetric', quant_min: -127, quant_max: 127, eps: 1e-6 },
    input: modelInput,
    http: true,
  },
  tensorCase('Quantize', 'float32', [24, 40], { qdtype: 'float8_e4m3fn', scheme: 'per_channel', axis: -1 }),
  tensorCase('Quantize', 'float16', [16, 48], { qdtype: 'uint4', scheme: 'per_group', group_size: 16 }),
  tensorCase('Quantize', 'bfloat16', [3, 5, 32], { qdtype: 'int8', scheme: 'per_token' }),
  tensorCase(
    'FakeQuantize',
    'float32',
    [33, 7],
    { qdtype: 'int2', range_search: 'greedy' },
    { outDType: 'bfloat16' },
  ),
  tensorCase(
    'FakeQuantize',
    'float16',
    [8, 64],
    { qdtype: 'uint4', scheme: 'per_channel', axis: 1 },
    { outDType: 'float16' },
  ),
  tensorCase('FakeQuantize', 'bfloat16', [130], { qdtype: 'int16', mode: 'symmetric' }),
  tensorCase('ChooseQParams', 'float32', [12, 16], { scheme: 'per_channel', mode: 'float_qparams', axis: 1 }),
  tensorCase('ChooseQParams', 'float16', [4, 256], { qdtype: 'int4', scheme: 'per_group', group_size: 64 }),
  tensorCase('ChooseQParams', 'bfloat16', [2, 3, 4], { qdtype: 'uint8', quant_min: 0, quant_max: 200 }),
  tensorCase('Quantize', 'float32', [6, 10], { qdtype: 'int4' }, { name: 'model.w', dtypeName: 'F32' }),
  tensorCase('Quantize', 'float32', [], { qdtype: 'uint8' }),
];

/** CLI output per case label (computed before the tests, concurrently). */
const expected = new Map<string, Buffer>();

beforeAll(async () => {
  // the int4 case's own CLI output is the Dequantize input
  qtensor = await cliOutput('quantize', MODEL, join(dir, 'qtensor.safetensors'), cliArgs(INT4_SPEC));
  await Promise.all(
    CASES.map(async (c, i) => {
      if (c.rpc === 'Quantize' && c.spec === INT4_SPEC) return void expected.set(c.label, qtensor);
      const input = join(dir, `in-${i}.safetensors`);
      writeFileSync(input, c.input().file);
      expected.set(
        c.label,
        await cliOutput(OP_OF[c.rpc], input, join(dir, `out-${i}.safetensors`), cliArgs(c.spec, c.dtype)),
      );
    }),
  );
});

describe.concurrent('unary RPCs equal the CLI and HTTP byte for byte', () => {
  it.each(CASES.map((c) => [c.label, c] as const))('%s', async (_label, c) => {
    const want = expected.get(c.label)!;
    const { request } = c.input();
    const base: OperationRequest = {
      ...request,
      ...(c.spec ? { spec: c.spec } : {}),
      ...(c.dtype ? { dtype: c.dtype } : {}),
    };

    const st = await unary(client, c.rpc, { ...base, form: 'SAFETENSORS' });
    expectSameBytes(st.safetensors, want, 'form SAFETENSORS vs the CLI');
    expect(st.tensors ?? [], 'form SAFETENSORS carries no decoded tensors').toEqual([]);

    // the default form is SAFETENSORS
    const dflt = await unary(client, c.rpc, base);
    expectSameBytes(dflt.safetensors, want, 'the default form vs the CLI');

    const decoded = await unary(client, c.rpc, { ...base, form: 'TENSORS' });
    const container = decodeContainer(want);
    expect(decoded.safetensors ?? Buffer.alloc(0), 'form TENSORS carries no file').toHaveLength(0);
    expect(
      (decoded.tensors ?? []).map((x) => x.name),
      'tensor names in container order',
    ).toEqual(container.tensors.map((x) => x.name));
    (decoded.tensors ?? []).forEach((x, i) => {
      const e = container.tensors[i]!;
      // proto3 leaves an empty repeated field (a scalar's shape) and empty bytes out
      expect({ dtype: x.dtype, shape: x.shape ?? [] }, x.name).toEqual({ dtype: e.dtype, shape: e.shape });
      expectSameBytes(x.data ?? Buffer.alloc(0), e.data, `tensor ${x.name}`);
    });
    expect(decoded.metadata ?? {}, 'metadata').toEqual(container.metadata);
    expect(container.metadata['format'], 'a quantd container (the premise)').toBeDefined();

    if (c.http) {
      const t0 = request.tensor;
      const reply = await httpOp(
        t.base,
        OP_OF[c.rpc],
        queryOf(c.spec, c.dtype),
        t0
          ? { tensor: { dtype: t0.dtype!, shape: t0.shape!, data: t0.data! } }
          : { safetensors: request.safetensors! },
      );
      expect(reply.status, reply.body.toString()).toBe(200);
      expectSameBytes(st.safetensors, reply.body, `POST /v1/${OP_OF[c.rpc]} vs the gRPC result`);
    }
  });

  it('the cases differ from each other (the comparisons can tell results apart)', () => {
    const outs = [...expected.values()].map((b) => b.toString('base64'));
    expect(new Set(outs).size).toBe(outs.length);
  });

  it('Dequantize of a raw tensor: NOT_A_QTENSOR, as POST /v1/dequantize says', async () => {
    const data = bytesOf(floats(8, 1));
    const err = await rejection(
      unary(client, 'Dequantize', { tensor: { dtype: 'float32', shape: [8], data } }),
    );
    expectGrpcError(err, 'NOT_A_QTENSOR');
    const reply = await httpOp(t.base, 'dequantize', '', { tensor: { dtype: 'float32', shape: [8], data } });
    expect(reply.status).toBe(400);
    expect(JSON.parse(reply.body.toString()).code).toBe('NOT_A_QTENSOR');
  });
});

describe('repeated one-tensor calls reuse their plan, never its answer', () => {
  const spec: SpecMessage = { qdtype: 'int4', scheme: 'per_group', group_size: 16 };
  const shape = [4, 32];

  it('the same spec and tensor header with other data give the CLI bytes for that data', async () => {
    for (const seed of [21, 22]) {
      const data = tensorBytes('float32', 128, seed);
      const input = join(dir, `cache-${seed}.safetensors`);
      writeFileSync(input, serializeSafetensors([{ name: 'tensor', dtype: 'F32', shape, data }], null));
      const want = await cliOutput('quantize', input, join(dir, `cache-${seed}-out`), cliArgs(spec));
      for (const round of [1, 2]) {
        const got = await unary(client, 'Quantize', { spec, tensor: { dtype: 'float32', shape, data } });
        expectSameBytes(got.safetensors, want, `seed ${seed}, round ${round}`);
      }
    }
  });

  it('a planned call whose data does not fit its shape is still refused', async () => {
    const data = tensorBytes('float32', 128, 23);
    await unary(client, 'Quantize', { spec, tensor: { dtype: 'float32', shape, data } });
    const err = await rejection(
      unary(client, 'Quantize', { spec, tensor: { dtype: 'float32', shape, data: data.subarray(4) } }),
    );
    expectGrpcError(err, 'SAFETENSORS_SIZE_MISMATCH');
  });
});
