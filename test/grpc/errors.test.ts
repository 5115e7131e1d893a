/**
 * Every catalogued error a gRPC client can reach, over a real connection: each maps to the
 * catalogue's gRPC status (catalogue[code].grpc through GrpcStatus), with details "CODE: message"
 * (the catalogue message filled from the params), trailing metadata quantd-code = CODE and
 * quantd-params (JSON). Unary inputs and options, QuantizeStream protocol errors (chunk order,
 * byte counts, headers, QUANTD_STREAM_LIMIT), grpc-js's own message limit (QUANTD_BODY_LIMIT),
 * load shedding (OVERLOADED → UNAVAILABLE) and bearer-token auth (QUANTD_API_KEYS).
 *
 * Not reachable over gRPC: FILE_NOT_FOUND, FILE_UNREADABLE, OUTPUT_UNWRITABLE (no paths),
 * UNSUPPORTED_MEDIA_TYPE, NOT_ACCEPTABLE, HEADER_INVALID, NOT_FOUND (HTTP only; an unknown
 * method is grpc-js's UNIMPLEMENTED), CONFIG_INVALID and BACKEND_UNAVAILABLE (start-up),
 * WORKER_FAILED and INTERNAL (no request makes a worker die), CANCELLED (the client is gone:
 * slow.test.ts checks the abort), REQUEST_TIMEOUT (slow.test.ts).
 */
import { readFileSync } from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { StDType } from '../../src/core/index.js';
import type { ErrorCode } from '../../src/errors/index.js';
import { QTENSOR_FORMAT, serializeSafetensors } from '../../src/format/index.js';
import { MODEL } from '../cli/run-cli.js';
import { rawFile } from '../format/helpers.js';
import {
  bearer,
  bytesOf,
  expectGrpcError,
  quantizerClient,
  rejection,
  runStream,
  startTestServer,
  streamMessages,
  unary,
  type OperationRequest,
  type QuantizerClient,
  type StreamHeader,
  type StreamRequest,
  type TestServer,
  type UnaryRpc,
} from './helpers.js';

const BODY_LIMIT = 64 * 1024;
const STREAM_LIMIT = 1024 * 1024;
let t: TestServer;
let client: QuantizerClient;

beforeAll(async () => {
  t = await startTestServer({ QUANTD_BODY_LIMIT: '64k', QUANTD_STREAM_LIMIT: '1m', QUANTD_POOL_SIZE: '1' });
  client = await quantizerClient(t.target);
});
afterAll(async () => {
  client?.close();
  await t?.server.shutdown('test');
});

interface T {
  readonly name: string;
  readonly dtype: StDType;
  readonly shape: readonly number[];
  readonly data: Uint8Array;
}
const f32 = (...v: number[]): Uint8Array => bytesOf(Float32Array.from(v));
const i32 = (...v: number[]): Uint8Array => bytesOf(Int32Array.from(v));
const file = (tensors: readonly T[], metadata: Record<string, string> | null = null): Uint8Array =>
  serializeSafetensors(tensors, metadata);
const entry = (dtype: string, shape: number[], offsets: [number, number]): string =>
  JSON.stringify({ dtype, shape, data_offsets: offsets });

const W: T = { name: 'w', dtype: 'F32', shape: [2, 4], data: f32(0, 1, -1, 2, 0.5, -0.25, 3, -3) };
const scale = (...v: number[]): T => ({ name: 'w.scale', dtype: 'F32', shape: [v.length], data: f32(...v) });
const zp = (...v: number[]): T => ({
  name: 'w.zero_point',
  dtype: 'I32',
  shape: [v.length],
  data: i32(...v),
});
const META = JSON.stringify({
  qdtype: 'int8',
  scheme: 'per_tensor',
  mode: 'affine',
  shape: [2, 4],
  axis: null,
  group_size: null,
  quant_min: -128,
  quant_max: 127,
  source_dtype: 'float32',
});
const CODES: T = { name: 'w', dtype: 'I8', shape: [2, 4], data: new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8]) };
const CONTAINER = file([CODES, scale(0.5), zp(0)], { format: QTENSOR_FORMAT, w: META });
const MODEL_BYTES = readFileSync(MODEL);

const tensor = (dtype: string, shape: number[], data: Uint8Array): OperationRequest => ({
  tensor: { dtype, shape, data },
});
const st = (bytes: Uint8Array): OperationRequest => ({ safetensors: bytes });

interface Case {
  readonly label: string;
  readonly rpc: UnaryRpc;
  readonly request: OperationRequest;
  readonly code: ErrorCode;
  readonly fragments?: readonly string[];
}

const CASES: readonly Case[] = [
  // --- the request itself -----------------------------------------------------------------------
  {
    label: 'no input',
    rpc: 'Quantize',
    request: { spec: { qdtype: 'int8' } },
    code: 'USAGE',
    fragments: ['OperationRequest needs `safetensors` or `tensor`'],
  },
  {
    label: 'a spec given to Dequantize',
    rpc: 'Dequantize',
    request: { ...st(CONTAINER), spec: { qdtype: 'int4' } },
    code: 'OPTION_INVALID',
    fragments: ['option spec does not apply to Dequantize', 'int4'],
  },
  {
    label: 'a tensor of dtype int8',
    rpc: 'Quantize',
    request: tensor('int8', [4], new Uint8Array(4)),
    code: 'OPTION_INVALID',
    fragments: ['option tensor.dtype must be float32, float16 or bfloat16', '(got int8)'],
  },
  {
    label: 'a tensor of dtype I32 (a safetensors name, not a float one)',
    rpc: 'ChooseQParams',
    request: tensor('I32', [4], new Uint8Array(16)),
    code: 'OPTION_INVALID',
    fragments: ['(got I32)'],
  },
  {
    label: 'a tensor without a dtype',
    rpc: 'FakeQuantize',
    request: { tensor: { shape: [4], data: f32(1, 2, 3, 4) } },
    code: 'OPTION_INVALID',
    fragments: ['option tensor.dtype'],
  },
  {
    label: 'dtype given to Quantize',
    rpc: 'Quantize',
    request: { ...tensor('float32', [2], f32(1, 2)), dtype: 'float16' },
    code: 'OPTION_INVALID',
    fragments: ['option dtype is not an option of quantize'],
  },
  {
    label: 'a tensor whose data does not match its shape',
    rpc: 'Quantize',
    request: tensor('float32', [2, 3], f32(1, 2, 3, 4)),
    code: 'SAFETENSORS_SIZE_MISMATCH',
    fragments: ['request tensor: tensor tensor of dtype F32 and shape [2, 3] needs 24 bytes', 'span 16'],
  },
  // --- options ------------------------------------------------------------------------------------
  {
    label: 'an unknown qdtype',
    rpc: 'Quantize',
    request: { ...st(file([W])), spec: { qdtype: 'int9' } },
    code: 'UNKNOWN_QDTYPE',
    fragments: ['unknown qdtype int9; expected one of int8'],
  },
  {
    label: 'an unknown scheme',
    rpc: 'ChooseQParams',
    request: { ...tensor('float32', [2], f32(1, 2)), spec: { scheme: 'per_row' } },
    code: 'UNKNOWN_SCHEME',
    fragments: ['unknown scheme per_row'],
  },
  {
    label: 'an unknown mode',
    rpc: 'FakeQuantize',
    request: { ...st(file([W])), spec: { mode: 'asymmetric' } },
    code: 'UNKNOWN_MODE',
    fragments: ['unknown mode asymmetric'],
  },
  {
    label: 'an unknown output dtype (Dequantize)',
    rpc: 'Dequantize',
    request: { ...st(CONTAINER), dtype: 'float64' },
    code: 'UNKNOWN_DTYPE',
    fragments: ['unknown output dtype float64'],
  },
  {
    label: 'an unknown output dtype (FakeQuantize)',
    rpc: 'FakeQuantize',
    request: { ...st(file([W])), dtype: 'int8' },
    code: 'UNKNOWN_DTYPE',
    fragments: ['unknown output dtype int8'],
  },
  {
    label: 'float_qparams per_tensor',
    rpc: 'Quantize',
    request: { ...st(file([W])), spec: { mode: 'float_qparams' } },
    code: 'MODE_UNSUPPORTED',
    fragments: ['float_qparams is defined for per_channel only'],
  },
  {
    label: 'an unknown range_search',
    rpc: 'ChooseQParams',
    request: { ...st(file([W])), spec: { range_search: 'best' } },
    code: 'OPTION_INVALID',
    fragments: ['must be minmax or greedy'],
  },
  {
    label: 'fake-quantize per_group',
    rpc: 'FakeQuantize',
    request: { ...st(file([W])), spec: { scheme: 'per_group' } },
    code: 'FEATURE_UNSUPPORTED',
    fragments: ['not per_group'],
  },
  {
    label: 'quant_min == quant_max (proto3 optional fields)',
    rpc: 'Quantize',
    request: { ...st(file([W])), spec: { quant_min: 5, quant_max: 5 } },
    code: 'QUANT_RANGE_INVALID',
    fragments: ['quant_min (5) must be smaller than quant_max (5)'],
  },
  {
    label: 'eps 0 (a proto3 optional field)',
    rpc: 'ChooseQParams',
    request: { ...st(file([W])), spec: { eps: 0 } },
    code: 'EPS_INVALID',
    fragments: ['got 0'],
  },
  {
    label: 'axis 3 of a 2-D tensor (a proto3 optional field)',
    rpc: 'Quantize',
    request: { ...st(file([W])), spec: { scheme: 'per_channel', axis: 3 } },
    code: 'AXIS_OUT_OF_RANGE',
    fragments: ['axis 3 is out of range for tensor w of shape [2, 4] (rank 2)'],
  },
  // --- tensors ------------------------------------------------------------------------------------
  {
    label: 'include of an integer tensor',
    rpc: 'Quantize',
    request: { ...st(MODEL_BYTES), spec: { include: ['position_ids'] } },
    code: 'INPUT_DTYPE_UNSUPPORTED',
    fragments: ['tensor position_ids has dtype I64'],
  },
  {
    label: 'NaN in a tensor',
    rpc: 'Quantize',
    request: tensor('float32', [3], f32(1, NaN, 2)),
    code: 'INPUT_NOT_FINITE',
    fragments: ['tensor tensor holds NaN at flat index 1; choose_qparams needs finite input'],
  },
  {
    label: '-Infinity in a named float16 tensor',
    rpc: 'ChooseQParams',
    request: {
      tensor: { name: 'h', dtype: 'float16', shape: [3], data: bytesOf(Uint16Array.of(0x3c00, 0xfc00, 0)) },
    },
    code: 'INPUT_NOT_FINITE',
    fragments: ['tensor h holds -Infinity at flat index 1'],
  },
  {
    label: 'an empty tensor',
    rpc: 'Quantize',
    request: tensor('float32', [0, 3], new Uint8Array(0)),
    code: 'EMPTY_TENSOR',
    fragments: ['tensor tensor has no elements (shape [0, 3])'],
  },
  {
    label: 'per_channel on a scalar (default axis 0)',
    rpc: 'Quantize',
    request: { ...tensor('float32', [], f32(1)), spec: { scheme: 'per_channel' } },
    code: 'AXIS_OUT_OF_RANGE',
    fragments: ['rank 0'],
  },
  {
    label: 'per_group on a 1-D tensor',
    rpc: 'Quantize',
    request: { ...tensor('float32', [4], f32(1, 2, 3, 4)), spec: { scheme: 'per_group' } },
    code: 'SHAPE_UNSUPPORTED',
    fragments: ['tensor tensor has shape [4]; per_group needs a 2-D tensor'],
  },
  {
    label: 'the default group size 128 against K = 130',
    rpc: 'Quantize',
    request: { ...tensor('float32', [2, 130], new Uint8Array(2 * 130 * 4)), spec: { scheme: 'per_group' } },
    code: 'GROUP_SIZE_INVALID',
    fragments: ['tensor tensor: K = 130 is not divisible by group_size'],
  },
  {
    label: 'group_size 3 against K = 4 (a proto3 optional field)',
    rpc: 'Quantize',
    request: { ...st(file([W])), spec: { scheme: 'per_group', group_size: 3 } },
    code: 'GROUP_SIZE_INVALID',
    fragments: ['tensor w: K = 4 is not divisible by group_size'],
  },
  {
    label: 'a range whose scale overflows',
    rpc: 'Quantize',
    request: tensor('float32', [2], f32(-3e38, 3e38)),
    code: 'RANGE_OVERFLOW',
    fragments: ['gives scale Infinity'],
  },
  {
    label: 'an include glob that matches nothing',
    rpc: 'Quantize',
    request: { ...st(MODEL_BYTES), spec: { include: ['nomatch*', 'neither'] } },
    code: 'NO_TENSOR_SELECTED',
    fragments: ['(include nomatch*, neither)'],
  },
  {
    label: 'fake-quantize beside an existing x.mask',
    rpc: 'FakeQuantize',
    request: st(
      file([
        { name: 'x', dtype: 'F32', shape: [4], data: f32(1, 2, 3, 4) },
        { name: 'x.mask', dtype: 'BOOL', shape: [4], data: new Uint8Array(4) },
      ]),
    ),
    code: 'NAME_COLLISION',
    fragments: ['request: the output would hold two tensors named x.mask'],
  },
  // --- given qparams ------------------------------------------------------------------------------
  {
    label: 'a given scale of 0',
    rpc: 'Quantize',
    request: st(file([W, scale(0), zp(0)])),
    code: 'SCALE_INVALID',
  },
  {
    label: 'a given zero point outside int8',
    rpc: 'Quantize',
    request: st(file([W, scale(0.1), zp(200)])),
    code: 'ZERO_POINT_OUT_OF_RANGE',
    fragments: ['zero_point[0] = 200 is outside [-128, 127]'],
  },
  {
    label: 'a fractional zero point in mode affine',
    rpc: 'Quantize',
    request: st(file([W, scale(0.1), { name: 'w.zero_point', dtype: 'F32', shape: [1], data: f32(1.5) }])),
    code: 'ZERO_POINT_INVALID',
  },
  {
    label: 'a scale of shape [3] for per_tensor',
    rpc: 'Quantize',
    request: st(file([W, scale(0.1, 0.1, 0.1), zp(0)])),
    code: 'QPARAMS_SHAPE_MISMATCH',
  },
  {
    label: 'a scale stored as I32',
    rpc: 'Quantize',
    request: st(file([W, { name: 'w.scale', dtype: 'I32', shape: [1], data: i32(1) }, zp(0)])),
    code: 'QPARAMS_DTYPE_INVALID',
  },
  {
    label: 'a zero point without a scale',
    rpc: 'Quantize',
    request: st(file([W, zp(0)])),
    code: 'QPARAMS_MISSING',
  },
  // --- malformed safetensors ----------------------------------------------------------------------
  {
    label: 'bytes shorter than the length prefix',
    rpc: 'Quantize',
    request: st(Uint8Array.of(1, 2, 3)),
    code: 'SAFETENSORS_TRUNCATED',
    fragments: ['request safetensors: file is shorter than the 8-byte header length'],
  },
  {
    label: 'empty safetensors bytes',
    rpc: 'Quantize',
    request: st(new Uint8Array(0)),
    code: 'SAFETENSORS_TRUNCATED',
  },
  {
    label: 'a header that is not JSON',
    rpc: 'Quantize',
    request: st(rawFile('{"w": ', 0)),
    code: 'SAFETENSORS_INVALID',
    fragments: ['request safetensors: the header is not valid JSON'],
  },
  {
    label: 'a header length over the 100 MB cap',
    rpc: 'ChooseQParams',
    request: st(rawFile('{}', 6, 200_000_000n)),
    code: 'SAFETENSORS_HEADER_TOO_LARGE',
  },
  {
    label: 'an unknown dtype in the header',
    rpc: 'Quantize',
    request: st(rawFile(`{"w":${entry('F31', [2], [0, 8])}}`, 8)),
    code: 'SAFETENSORS_DTYPE_UNKNOWN',
  },
  {
    label: 'offsets that do not match the shape',
    rpc: 'Quantize',
    request: st(rawFile(`{"w":${entry('F32', [3], [0, 8])}}`, 8)),
    code: 'SAFETENSORS_SIZE_MISMATCH',
  },
  {
    label: 'overlapping offsets',
    rpc: 'Quantize',
    request: st(rawFile(`{"a":${entry('F32', [2], [0, 8])},"b":${entry('F32', [1], [4, 8])}}`, 8)),
    code: 'SAFETENSORS_OFFSETS_INVALID',
  },
  {
    label: 'a duplicate tensor name',
    rpc: 'Quantize',
    request: st(rawFile(`{"w":${entry('F32', [1], [0, 4])},"w":${entry('F32', [1], [0, 4])}}`, 4)),
    code: 'SAFETENSORS_DUPLICATE_KEY',
  },
  // --- containers ---------------------------------------------------------------------------------
  {
    label: 'a container lacking the scale its metadata names',
    rpc: 'Dequantize',
    request: st(file([CODES, zp(0)], { format: QTENSOR_FORMAT, w: META })),
    code: 'QTENSOR_INVALID',
    fragments: ['the container lacks w.scale'],
  },
  {
    label: 'Dequantize of a plain safetensors file',
    rpc: 'Dequantize',
    request: st(MODEL_BYTES),
    code: 'NOT_A_QTENSOR',
  },
];

describe.concurrent('unary RPCs: catalogue status, details "CODE: message", quantd-code trailer', () => {
  it.each(CASES.map((c) => [c.label, c] as const))('%s', async (_label, c) => {
    const err = await rejection(unary(client, c.rpc, c.request));
    expectGrpcError(err, c.code, c.fragments);
  });

  it('the valid inputs those cases start from succeed (they fail for the stated reason)', async () => {
    const ok = await unary(client, 'Dequantize', st(CONTAINER));
    expect(ok.safetensors!.byteLength).toBeGreaterThan(0);
    await unary(client, 'Quantize', st(file([W])));
    await unary(client, 'Quantize', st(file([W, scale(0.1), zp(0)])));
    await unary(client, 'Quantize', tensor('float32', [2, 3], f32(1, 2, 3, 4, 5, 6)));
    await unary(client, 'FakeQuantize', { ...st(file([W])), dtype: 'float16' });
  });

  it('a tensor with negative dimensions is refused (as X-Tensor-Shape: -2 is over HTTP)', async () => {
    // [-2, -2] has 4 "elements": 16 bytes of float32 would match it
    const err = await rejection(unary(client, 'Quantize', tensor('float32', [-2, -2], f32(1, 2, 3, 4))));
    expect(err.code, err.details).toBe(grpc.status.INVALID_ARGUMENT);
    expect(err.metadata.get('quantd-code').length, err.details).toBe(1);
  });

  it("a tensor named __metadata__ (the safetensors header key) is refused as the client's error", async () => {
    const err = await rejection(
      unary(client, 'Quantize', {
        tensor: { name: '__metadata__', dtype: 'float32', shape: [2], data: f32(1, 2) },
      }),
    );
    expect(err.code, err.details).toBe(grpc.status.INVALID_ARGUMENT);
    expect(err.metadata.get('quantd-code').length, err.details).toBe(1);
  });

  it('a message over QUANTD_BODY_LIMIT: RESOURCE_EXHAUSTED (grpc-js), and the server still answers', async () => {
    const big = new Uint8Array(BODY_LIMIT + 1024);
    const err = await rejection(unary(client, 'Quantize', tensor('float32', [big.byteLength / 4], big)));
    expect(err.code, err.details).toBe(grpc.status.RESOURCE_EXHAUSTED);
    expect(err.details).toMatch(/larger than max/);
    const ok = await unary(client, 'Quantize', tensor('float32', [2], f32(1, 2)));
    expect(ok.safetensors!.byteLength).toBeGreaterThan(0);
  });

  it('a result over QUANTD_BODY_LIMIT: RESULT_TOO_LARGE (RESOURCE_EXHAUSTED), pointing to QuantizeStream', async () => {
    // fake-quantize returns the values and a mask: 1.25x its float32 input
    const n = Math.floor((BODY_LIMIT * 0.9) / 4);
    const err = await rejection(
      unary(client, 'FakeQuantize', tensor('float32', [n], bytesOf(new Float32Array(n).fill(0.5)))),
    );
    expect(err.code, err.details).toBe(grpc.status.RESOURCE_EXHAUSTED);
    expect(err.metadata.get('quantd-code')).toEqual(['RESULT_TOO_LARGE']);
    expect(err.details).toMatch(/use QuantizeStream/);
  });

  it('a message just under QUANTD_BODY_LIMIT is taken', async () => {
    const n = (BODY_LIMIT - 256) / 4;
    const ok = await unary(
      client,
      'ChooseQParams',
      tensor('float32', [n], bytesOf(new Float32Array(n).fill(1.5))),
    );
    expect(ok.safetensors!.byteLength).toBeGreaterThan(0);
  });
});

// --- QuantizeStream --------------------------------------------------------------------------------

const DATA = bytesOf(Float32Array.from({ length: 512 }, (_, i) => Math.cos(i)));
const rawHeader = (total: number) => ({
  total_bytes: total,
  tensor: { dtype: 'float32', shape: [total / 4] },
});
const chunk = (offset: number, data: Uint8Array): StreamRequest => ({ chunk: { offset, data } });

interface StreamCase {
  readonly label: string;
  readonly messages: readonly StreamRequest[];
  readonly code: ErrorCode;
  readonly fragments?: readonly string[];
}

const STREAM_CASES: readonly StreamCase[] = [
  {
    label: 'a chunk before the header',
    messages: [chunk(0, DATA), { header: rawHeader(DATA.byteLength) }],
    code: 'STREAM_INVALID',
    fragments: ['QuantizeStream: the first message must be a header'],
  },
  {
    label: 'no header at all (chunks only)',
    messages: [chunk(0, DATA)],
    code: 'STREAM_INVALID',
    fragments: ['the first message must be a header'],
  },
  {
    label: 'no message at all',
    messages: [],
    code: 'STREAM_INVALID',
    fragments: ['the stream ended without a header'],
  },
  {
    label: 'a second header',
    messages: [{ header: rawHeader(DATA.byteLength) }, { header: rawHeader(DATA.byteLength) }],
    code: 'STREAM_INVALID',
    fragments: ['a second header arrived'],
  },
  {
    label: 'a second header after a chunk',
    messages: [
      { header: rawHeader(DATA.byteLength) },
      chunk(0, DATA.subarray(0, 1024)),
      { header: rawHeader(1024) },
    ],
    code: 'STREAM_INVALID',
    fragments: ['a second header arrived'],
  },
  {
    label: 'a gap between chunks',
    messages: [
      { header: rawHeader(DATA.byteLength) },
      chunk(0, DATA.subarray(0, 1024)),
      chunk(1500, DATA.subarray(1500)),
    ],
    code: 'STREAM_INVALID',
    fragments: ['a chunk starts at offset 1500, but 1024 bytes have arrived'],
  },
  {
    label: 'overlapping chunks',
    messages: [
      { header: rawHeader(DATA.byteLength) },
      chunk(0, DATA.subarray(0, 1024)),
      chunk(512, DATA.subarray(512)),
    ],
    code: 'STREAM_INVALID',
    fragments: ['a chunk starts at offset 512, but 1024 bytes have arrived'],
  },
  {
    label: 'a first chunk not at offset 0',
    messages: [{ header: rawHeader(DATA.byteLength) }, chunk(4, DATA.subarray(4))],
    code: 'STREAM_INVALID',
    fragments: ['offset 4, but 0 bytes'],
  },
  {
    label: 'more bytes than total_bytes',
    messages: [{ header: rawHeader(1024) }, chunk(0, DATA)],
    code: 'STREAM_INVALID',
    fragments: ['the chunks carry more than total_bytes = 1024'],
  },
  {
    label: 'more bytes than total_bytes, in a later chunk',
    messages: [
      { header: rawHeader(1024) },
      chunk(0, DATA.subarray(0, 1024)),
      chunk(1024, DATA.subarray(1024, 1028)),
    ],
    code: 'STREAM_INVALID',
    fragments: ['more than total_bytes = 1024'],
  },
  {
    label: 'fewer bytes than total_bytes',
    messages: [{ header: rawHeader(DATA.byteLength) }, chunk(0, DATA.subarray(0, 1024))],
    code: 'BODY_INCOMPLETE',
    fragments: ['the request body ended after 1024 of 2048 bytes'],
  },
  {
    label: 'a header and no chunk',
    messages: [{ header: rawHeader(DATA.byteLength) }],
    code: 'BODY_INCOMPLETE',
    fragments: ['after 0 of 2048 bytes'],
  },
  {
    label: 'total_bytes over QUANTD_STREAM_LIMIT',
    messages: [{ header: rawHeader(STREAM_LIMIT + 4) }, chunk(0, DATA)],
    code: 'PAYLOAD_TOO_LARGE',
    fragments: [`${STREAM_LIMIT + 4} bytes exceeds the limit of ${STREAM_LIMIT} bytes`],
  },
  {
    label: 'total_bytes of 2^53',
    messages: [{ header: { total_bytes: 2 ** 53 } }],
    code: 'PAYLOAD_TOO_LARGE',
  },
  {
    label: 'an unknown operation',
    messages: [...streamMessages({ ...rawHeader(DATA.byteLength), operation: 'quantise' }, DATA, 1024)],
    code: 'STREAM_INVALID',
    fragments: ['unknown operation "quantise"'],
  },
  {
    label: 'a spec on dequantize',
    messages: [
      ...streamMessages(
        { operation: 'dequantize', spec: { qdtype: 'int4' }, total_bytes: CONTAINER.byteLength },
        CONTAINER,
        64,
      ),
    ],
    code: 'OPTION_INVALID',
    fragments: ['does not apply to Dequantize'],
  },
  {
    label: 'an unknown qdtype',
    messages: [...streamMessages({ ...rawHeader(DATA.byteLength), spec: { qdtype: 'int9' } }, DATA, 1024)],
    code: 'UNKNOWN_QDTYPE',
  },
  {
    label: 'a raw tensor of dtype I64',
    messages: [
      ...streamMessages({ total_bytes: 16, tensor: { dtype: 'I64', shape: [2] } }, new Uint8Array(16), 8),
    ],
    code: 'OPTION_INVALID',
    fragments: ['option tensor.dtype', '(got I64)'],
  },
  {
    label: 'a raw tensor whose bytes do not match its shape',
    messages: [
      ...streamMessages({ total_bytes: 12, tensor: { dtype: 'float32', shape: [4] } }, new Uint8Array(12), 8),
    ],
    code: 'SAFETENSORS_SIZE_MISMATCH',
    fragments: ['stream tensor: tensor tensor of dtype F32 and shape [4] needs 16 bytes'],
  },
  {
    label: 'NaN in a raw tensor',
    messages: [...streamMessages(rawHeader(8), f32(NaN, 1), 8)],
    code: 'INPUT_NOT_FINITE',
  },
  {
    label: 'a malformed safetensors file',
    messages: [...streamMessages({ total_bytes: 14 }, rawFile('{"w": ', 0), 7)],
    code: 'SAFETENSORS_INVALID',
    fragments: ['stream: the header is not valid JSON'],
  },
];

describe.concurrent('QuantizeStream errors', () => {
  it.each(STREAM_CASES.map((c) => [c.label, c] as const))('%s', async (_label, c) => {
    const outcome = await runStream(client, c.messages);
    expect(outcome.responses, 'no result before the error').toEqual([]);
    expect(outcome.error, `status ${outcome.status.code} ${outcome.status.details}`).not.toBeNull();
    expectGrpcError(outcome.error!, c.code, c.fragments);
  });

  it('the valid stream those cases start from succeeds', async () => {
    const outcome = await runStream(client, streamMessages(rawHeader(DATA.byteLength), DATA, 1024));
    expect(outcome.status.code, outcome.status.details).toBe(grpc.status.OK);
    expect(outcome.responses[0]?.part).toBe('result');
  });

  it('a stream of exactly QUANTD_STREAM_LIMIT bytes is taken', async () => {
    const data = bytesOf(new Float32Array(STREAM_LIMIT / 4).fill(0.25));
    const header = { ...rawHeader(STREAM_LIMIT), operation: 'qparams', chunk_bytes: 32 * 1024 };
    const outcome = await runStream(client, streamMessages(header, data, 32 * 1024));
    expect(outcome.status.code, outcome.status.details).toBe(grpc.status.OK);
  });
});

describe.concurrent('QuantizeStream header validation', () => {
  // A stream exists for inputs of gigabytes: what the header alone shows to be wrong is refused
  // at the header, not after the whole input has been uploaded.
  const cases: [string, StreamHeader, ErrorCode][] = [
    ['an unknown operation', { ...rawHeader(DATA.byteLength), operation: 'quantise' }, 'STREAM_INVALID'],
    ['an unknown qdtype', { ...rawHeader(DATA.byteLength), spec: { qdtype: 'int9' } }, 'UNKNOWN_QDTYPE'],
    [
      'a raw tensor of dtype I64',
      { total_bytes: 16, tensor: { dtype: 'I64', shape: [2] } },
      'OPTION_INVALID',
    ],
  ];
  it.each(cases)('%s is refused before any chunk arrives', async (_label, header, code) => {
    const outcome = await runStream(client, [{ header }], { keepOpen: true, deadline: Date.now() + 1000 });
    expect(outcome.status.code, outcome.status.details).not.toBe(grpc.status.DEADLINE_EXCEEDED);
    expectGrpcError(outcome.error!, code);
  });
});

describe('load shedding', () => {
  it('OVERLOADED → UNAVAILABLE while the only admission slot is held by an open stream', async () => {
    // QUANTD_POOL_SIZE=1, QUANTD_QUEUE_LIMIT=0: one request in flight at a time
    const s = await startTestServer({ QUANTD_POOL_SIZE: '1', QUANTD_QUEUE_LIMIT: '0' });
    const c = await quantizerClient(s.target);
    try {
      const call = c.QuantizeStream();
      const status = new Promise<grpc.StatusObject>((resolve) => call.on('status', resolve));
      call.on('data', () => undefined);
      call.on('error', () => undefined);
      call.write({ header: rawHeader(DATA.byteLength) });
      // the header has arrived once a second call is refused
      let err: grpc.ServiceError | undefined;
      for (let i = 0; i < 50 && !err; i++) {
        await new Promise((r) => setTimeout(r, 10));
        err = await unary(c, 'Quantize', tensor('float32', [2], f32(1, 2))).then(
          () => undefined,
          (e: grpc.ServiceError) => e,
        );
      }
      expect(err, 'a call while the stream holds the slot').toBeDefined();
      const params = expectGrpcError(err!, 'OVERLOADED', ['retry later']);
      expect(params['limit']).toBe(1);
      // the open stream still completes, then calls are admitted again
      call.write(chunk(0, DATA));
      call.end();
      expect((await status).code).toBe(grpc.status.OK);
      const ok = await unary(c, 'Quantize', tensor('float32', [2], f32(1, 2)));
      expect(ok.safetensors!.byteLength).toBeGreaterThan(0);
    } finally {
      c.close();
      await s.server.shutdown('test');
    }
  });
});

describe('authentication (QUANTD_API_KEYS)', () => {
  const KEY = 'k3y-0123456789abcdef';
  const OTHER_KEY = 'second-key-0123456789';
  let a: TestServer;
  let ac: QuantizerClient;
  beforeAll(async () => {
    a = await startTestServer({ QUANTD_API_KEYS: `${KEY}, ${OTHER_KEY}` });
    ac = await quantizerClient(a.target);
  });
  afterAll(async () => {
    ac?.close();
    await a?.server.shutdown('test');
  });
  const REQ = tensor('float32', [3], f32(1, 2, 3));
  const meta = (value: string): grpc.Metadata => {
    const m = new grpc.Metadata();
    m.set('authorization', value);
    return m;
  };

  it.each([
    ['no authorization metadata', undefined, 'the request has no Authorization header'],
    ['a Basic credential', meta('Basic dXNlcjpwYXNz'), 'the Authorization header is not a bearer token'],
    ['a wrong key', bearer('not-a-configured-key-at-all'), 'the bearer token is not a configured key'],
    ['a key prefix', bearer(KEY.slice(0, -1)), 'not a configured key'],
    ['a token scheme', meta(`Token ${KEY}`), 'not a bearer token'],
  ])('UNAUTHENTICATED: %s (unary)', async (_label, metadata, fragment) => {
    const err = await rejection(unary(ac, 'Quantize', REQ, metadata ? { metadata } : {}));
    expectGrpcError(err, 'UNAUTHORIZED', [fragment]);
  });

  it('UNAUTHENTICATED for QuantizeStream without a key, before any input is read', async () => {
    const outcome = await runStream(ac, streamMessages(rawHeader(DATA.byteLength), DATA, 1024));
    expectGrpcError(outcome.error!, 'UNAUTHORIZED', ['no Authorization header']);
  });

  it.each([
    ['the first key', KEY],
    ['the second key', OTHER_KEY],
  ])('%s works for unary calls and streams', async (_label, key) => {
    const ok = await unary(ac, 'Quantize', REQ, { metadata: bearer(key) });
    expect(ok.safetensors!.byteLength).toBeGreaterThan(0);
    const lower = meta(`bearer ${key}`);
    expect(
      (await unary(ac, 'ChooseQParams', REQ, { metadata: lower })).safetensors!.byteLength,
    ).toBeGreaterThan(0);
    const outcome = await runStream(ac, streamMessages(rawHeader(DATA.byteLength), DATA, 1024), {
      metadata: bearer(key),
    });
    expect(outcome.status.code, outcome.status.details).toBe(grpc.status.OK);
  });

  it('the HTTP side of the same server wants the same key', async () => {
    const res = await fetch(`${a.base}/v1/qparams`, {
      method: 'POST',
      headers: {
        'content-type': 'application/octet-stream',
        'x-tensor-dtype': 'float32',
        'x-tensor-shape': '3',
      },
      body: f32(1, 2, 3),
    });
    expect(res.status).toBe(401);
  });
});
