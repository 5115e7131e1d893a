/**
 * Every catalogued error a client can reach over HTTP (README: RFC 9457 problem+json with a
 * stable code): each case checks the catalogue's status, Content-Type application/problem+json,
 * `type` urn:quantd:error:CODE, `title`, `status`, a `detail` that is the catalogue message filled
 * from `params`, the request path as `instance`, and the offending value in the detail (the
 * request body is named "request body", the octet-stream tensor "tensor").
 *
 * Also the service's own errors: 413 before the body is read (declared Content-Length) and for a
 * chunked upload over QUANTD_BODY_LIMIT, 415, 406, 404, 401 with WWW-Authenticate, a body cut
 * short (BODY_INCOMPLETE), and X-Request-Id echoed as the problem's request_id.
 *
 * Not reachable over HTTP: FILE_NOT_FOUND, FILE_UNREADABLE, OUTPUT_UNWRITABLE (no paths),
 * CONFIG_INVALID and BACKEND_UNAVAILABLE (start-up; service.test.ts), WORKER_FAILED and INTERNAL
 * (no request makes a worker die), CANCELLED (its client is gone; while draining, Fastify's own
 * 503 answers first), USAGE (only Fastify's 4xx errors map to it: a malformed JSON body, which
 * should be 415). REQUEST_TIMEOUT and OVERLOADED: slow.test.ts.
 */
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { StDType } from '../../src/core/index.js';
import type { ErrorCode } from '../../src/errors/index.js';
import { QTENSOR_FORMAT, serializeSafetensors } from '../../src/format/index.js';
import { MODEL } from '../cli/run-cli.js';
import { rawFile } from '../format/helpers.js';
import {
  SAFETENSORS,
  expectProblem,
  expectSameBytes,
  octetHeaders,
  parseRaw,
  rawExchange,
  readTensors,
  send,
  startTestServer,
  type TestServer,
} from './helpers.js';

const LIMIT = 64 * 1024;
let t: TestServer;

beforeAll(async () => {
  t = await startTestServer({ QUANTD_BODY_LIMIT: '64k', QUANTD_POOL_SIZE: '1' });
});
afterAll(async () => {
  await t?.server.shutdown('test');
});

interface T {
  readonly name: string;
  readonly dtype: StDType;
  readonly shape: readonly number[];
  readonly data: Uint8Array;
}
const f32 = (...v: number[]): Uint8Array => new Uint8Array(Float32Array.from(v).buffer);
const i32 = (...v: number[]): Uint8Array => new Uint8Array(Int32Array.from(v).buffer);
const file = (tensors: readonly T[], metadata: Record<string, string> | null = null): Uint8Array =>
  serializeSafetensors(tensors, metadata);

const W: T = { name: 'w', dtype: 'F32', shape: [2, 4], data: f32(0, 1, -1, 2, 0.5, -0.25, 3, -3) };
const scale = (...v: number[]): T => ({ name: 'w.scale', dtype: 'F32', shape: [v.length], data: f32(...v) });
const zp = (...v: number[]): T => ({
  name: 'w.zero_point',
  dtype: 'I32',
  shape: [v.length],
  data: i32(...v),
});
const entry = (dtype: string, shape: number[], offsets: [number, number]): string =>
  JSON.stringify({ dtype, shape, data_offsets: offsets });

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

interface Case {
  readonly label: string;
  /** op and query string */
  readonly path: string;
  readonly body: Uint8Array;
  /** octet-stream [dtype, shape-header]; default: the body is a safetensors file */
  readonly octet?: readonly [string, string];
  readonly code: ErrorCode;
  readonly fragments: readonly string[];
}

const octet = (dtype: string, shape: string): readonly [string, string] => [dtype, shape];

const CASES: readonly Case[] = [
  // --- malformed safetensors bodies ------------------------------------------------------------
  {
    label: 'a body shorter than the length prefix',
    path: '/v1/quantize',
    body: Uint8Array.of(1, 2, 3),
    code: 'SAFETENSORS_TRUNCATED',
    fragments: ['request body: file is shorter than the 8-byte header length (expected 8 bytes, have 3)'],
  },
  {
    label: 'a header running past the end of the body',
    path: '/v1/qparams',
    body: rawFile('{}', 0, 100n),
    code: 'SAFETENSORS_TRUNCATED',
    fragments: [
      'request body: the 100-byte header runs past the end of the file (expected 108 bytes, have 10)',
    ],
  },
  {
    label: 'tensor data cut short',
    path: '/v1/fake-quantize',
    body: rawFile(`{"w":${entry('F32', [2], [0, 8])}}`, 4),
    code: 'SAFETENSORS_TRUNCATED',
    fragments: ['tensor "w" ends at data offset 8, past the end of the data section'],
  },
  {
    label: 'a 16-byte body whose prefix claims a 200 MB header (over the 100 MB cap)',
    path: '/v1/quantize',
    body: rawFile('{}', 6, 200_000_000n),
    code: 'SAFETENSORS_HEADER_TOO_LARGE',
    fragments: ['request body: header of 200000000 bytes exceeds the limit of 100000000 bytes'],
  },
  {
    label: 'a header length of 2^64 - 1',
    path: '/v1/dequantize',
    body: rawFile('{}', 0, 2n ** 64n - 1n),
    code: 'SAFETENSORS_HEADER_TOO_LARGE',
    fragments: ['header of 18446744073709551615 bytes'],
  },
  {
    label: 'a header that is not JSON',
    path: '/v1/quantize',
    body: rawFile('{"w": ', 0),
    code: 'SAFETENSORS_INVALID',
    fragments: ['request body: the header is not valid JSON'],
  },
  {
    label: 'a duplicate tensor name',
    path: '/v1/quantize',
    body: rawFile(`{"w":${entry('F32', [1], [0, 4])},"w":${entry('F32', [1], [0, 4])}}`, 4),
    code: 'SAFETENSORS_DUPLICATE_KEY',
    fragments: ['request body: the header names w more than once'],
  },
  {
    label: 'an unknown dtype in the header',
    path: '/v1/quantize',
    body: rawFile(`{"w":${entry('F31', [2], [0, 8])}}`, 8),
    code: 'SAFETENSORS_DTYPE_UNKNOWN',
    fragments: ['request body: tensor w has unknown dtype F31'],
  },
  {
    label: 'offsets that do not match the shape',
    path: '/v1/quantize',
    body: rawFile(`{"w":${entry('F32', [3], [0, 8])}}`, 8),
    code: 'SAFETENSORS_SIZE_MISMATCH',
    fragments: ['request body: tensor w of dtype F32 and shape [3] needs 12 bytes, but its offsets span 8'],
  },
  {
    label: 'overlapping offsets',
    path: '/v1/quantize',
    body: rawFile(`{"a":${entry('F32', [2], [0, 8])},"b":${entry('F32', [1], [4, 8])}}`, 8),
    code: 'SAFETENSORS_OFFSETS_INVALID',
    fragments: ['request body: tensor b: data_offsets [4, 8] overlap tensor "a", which ends at 8'],
  },
  // --- octet-stream bodies ---------------------------------------------------------------------
  {
    label: 'an octet-stream body whose length does not match X-Tensor-Shape',
    path: '/v1/quantize',
    body: f32(1, 2, 3, 4),
    octet: octet('float32', '2,3'),
    code: 'SAFETENSORS_SIZE_MISMATCH',
    fragments: [
      'request body: tensor tensor of dtype F32 and shape [2, 3] needs 24 bytes, but its offsets span 16',
    ],
  },
  {
    label: 'a bfloat16 octet-stream body of an odd byte count',
    path: '/v1/qparams',
    body: new Uint8Array(7),
    octet: octet('bfloat16', '4'),
    code: 'SAFETENSORS_SIZE_MISMATCH',
    fragments: ['dtype BF16 and shape [4] needs 8 bytes', 'span 7'],
  },
  {
    label: 'X-Tensor-Dtype int8',
    path: '/v1/quantize',
    body: new Uint8Array(4),
    octet: octet('int8', '4'),
    code: 'HEADER_INVALID',
    fragments: ['header X-Tensor-Dtype must be float32, float16 or bfloat16 (got int8)'],
  },
  {
    label: 'X-Tensor-Shape that is not a list of dimensions',
    path: '/v1/quantize',
    body: f32(1, 2),
    octet: octet('float32', '2,x'),
    code: 'HEADER_INVALID',
    fragments: ['header X-Tensor-Shape must be comma-separated dimensions', '(got 2,x)'],
  },
  {
    label: 'a negative dimension',
    path: '/v1/quantize',
    body: f32(1, 2),
    octet: octet('float32', '-2'),
    code: 'HEADER_INVALID',
    fragments: ['(got -2)'],
  },
  // --- options ---------------------------------------------------------------------------------
  {
    label: 'an unknown qdtype',
    path: '/v1/quantize?qdtype=int9',
    body: file([W]),
    code: 'UNKNOWN_QDTYPE',
    fragments: ['unknown qdtype int9; expected one of int8'],
  },
  {
    label: 'an unknown scheme',
    path: '/v1/qparams?scheme=per_row',
    body: file([W]),
    code: 'UNKNOWN_SCHEME',
    fragments: ['unknown scheme per_row'],
  },
  {
    label: 'an unknown mode',
    path: '/v1/fake-quantize?mode=asymmetric',
    body: file([W]),
    code: 'UNKNOWN_MODE',
    fragments: ['unknown mode asymmetric'],
  },
  {
    label: 'an unknown output dtype (dequantize)',
    path: '/v1/dequantize?dtype=float64',
    body: file([CODES, scale(0.5), zp(0)], { format: QTENSOR_FORMAT, w: META }),
    code: 'UNKNOWN_DTYPE',
    fragments: ['unknown output dtype float64'],
  },
  {
    label: 'an unknown output dtype (fake-quantize)',
    path: '/v1/fake-quantize?dtype=int8',
    body: file([W]),
    code: 'UNKNOWN_DTYPE',
    fragments: ['unknown output dtype int8'],
  },
  {
    label: 'an unknown query option',
    path: '/v1/quantize?qdtpye=int4',
    body: file([W]),
    code: 'OPTION_INVALID',
    fragments: ['option qdtpye is not an option of quantize', '(got int4)'],
  },
  {
    label: 'a spec option given to dequantize',
    path: '/v1/dequantize?qdtype=int4',
    body: file([CODES, scale(0.5), zp(0)], { format: QTENSOR_FORMAT, w: META }),
    code: 'OPTION_INVALID',
    fragments: ['option qdtype is not an option of dequantize'],
  },
  {
    label: 'a single-valued option given twice',
    path: '/v1/quantize?qdtype=int8&qdtype=int4',
    body: file([W]),
    code: 'OPTION_INVALID',
    fragments: ['option qdtype is given more than once (got int8, int4)'],
  },
  {
    label: 'a non-integer axis',
    path: '/v1/quantize?scheme=per_channel&axis=1.5',
    body: file([W]),
    code: 'OPTION_INVALID',
    fragments: ['must be an integer (got 1.5)'],
  },
  {
    label: 'float_qparams per_tensor',
    path: '/v1/quantize?mode=float_qparams',
    body: file([W]),
    code: 'MODE_UNSUPPORTED',
    fragments: ['float_qparams is defined for per_channel only'],
  },
  {
    label: 'quant_min == quant_max',
    path: '/v1/quantize?quant_min=5&quant_max=5',
    body: file([W]),
    code: 'QUANT_RANGE_INVALID',
    fragments: ['quant_min (5) must be smaller than quant_max (5)'],
  },
  {
    label: 'eps 0',
    path: '/v1/qparams?eps=0',
    body: file([W]),
    code: 'EPS_INVALID',
    fragments: ['got 0'],
  },
  {
    label: 'fake-quantize per_group',
    path: '/v1/fake-quantize?scheme=per_group',
    body: file([W]),
    code: 'FEATURE_UNSUPPORTED',
    fragments: ['not per_group'],
  },
  // --- tensors ---------------------------------------------------------------------------------
  {
    label: 'include of an integer tensor',
    path: '/v1/quantize?include=position_ids',
    body: readFileSync(MODEL),
    code: 'INPUT_DTYPE_UNSUPPORTED',
    fragments: ['tensor position_ids has dtype I64'],
  },
  {
    label: 'NaN in an octet-stream tensor',
    path: '/v1/quantize',
    body: f32(1, NaN, 2),
    octet: octet('float32', '3'),
    code: 'INPUT_NOT_FINITE',
    fragments: ['tensor tensor holds NaN at flat index 1; choose_qparams needs finite input'],
  },
  {
    label: '-Infinity in a safetensors tensor (qparams)',
    path: '/v1/qparams',
    body: file([{ ...W, data: f32(0, 1, -1, 2, 0.5, -Infinity, 3, -3) }]),
    code: 'INPUT_NOT_FINITE',
    fragments: ['tensor w holds -Infinity at flat index 5'],
  },
  {
    label: 'an empty tensor',
    path: '/v1/quantize',
    body: new Uint8Array(0),
    octet: octet('float32', '0,3'),
    code: 'EMPTY_TENSOR',
    fragments: ['tensor tensor has no elements (shape [0, 3])'],
  },
  {
    label: 'axis out of range',
    path: '/v1/quantize?scheme=per_channel&axis=3',
    body: file([W]),
    code: 'AXIS_OUT_OF_RANGE',
    fragments: ['axis 3 is out of range for tensor w of shape [2, 4] (rank 2)'],
  },
  {
    label: 'per_group on a 1-D tensor',
    path: '/v1/quantize?scheme=per_group',
    body: f32(1, 2, 3, 4),
    octet: octet('float32', '4'),
    code: 'SHAPE_UNSUPPORTED',
    fragments: ['tensor tensor has shape [4]; per_group needs a 2-D tensor'],
  },
  {
    label: 'a group size that does not divide K',
    path: '/v1/quantize?scheme=per_group&group_size=3',
    body: file([W]),
    code: 'GROUP_SIZE_INVALID',
    fragments: ['tensor w: K = 4 is not divisible by group_size'],
  },
  {
    label: 'a range whose scale overflows',
    path: '/v1/quantize',
    body: f32(-3e38, 3e38),
    octet: octet('float32', '2'),
    code: 'RANGE_OVERFLOW',
    fragments: ['tensor tensor: the value range', 'gives scale Infinity'],
  },
  {
    label: 'an include glob that matches nothing',
    path: '/v1/quantize?include=nomatch*&include=neither',
    body: readFileSync(MODEL),
    code: 'NO_TENSOR_SELECTED',
    fragments: ['no tensor of the input matched the selection (include nomatch*, neither)'],
  },
  {
    label: 'fake-quantize beside an existing x.mask',
    path: '/v1/fake-quantize',
    body: file([
      { name: 'x', dtype: 'F32', shape: [4], data: f32(1, 2, 3, 4) },
      { name: 'x.mask', dtype: 'BOOL', shape: [4], data: new Uint8Array(4) },
    ]),
    code: 'NAME_COLLISION',
    fragments: ['request body: the output would hold two tensors named x.mask'],
  },
  // --- given qparams ---------------------------------------------------------------------------
  {
    label: 'a given scale of 0',
    path: '/v1/quantize',
    body: file([W, scale(0), zp(0)]),
    code: 'SCALE_INVALID',
    fragments: ['tensor w: scale[0] = 0;'],
  },
  {
    label: 'a given zero point outside int8',
    path: '/v1/quantize',
    body: file([W, scale(0.1), zp(200)]),
    code: 'ZERO_POINT_OUT_OF_RANGE',
    fragments: ['tensor w: zero_point[0] = 200 is outside [-128, 127]'],
  },
  {
    label: 'a fractional zero point in mode affine',
    path: '/v1/quantize',
    body: file([W, scale(0.1), { name: 'w.zero_point', dtype: 'F32', shape: [1], data: f32(1.5) }]),
    code: 'ZERO_POINT_INVALID',
    fragments: ['tensor w: zero_point[0] = 1.5; mode affine needs integer zero points'],
  },
  {
    label: 'a scale of shape [3] for per_tensor',
    path: '/v1/quantize',
    body: file([W, scale(0.1, 0.1, 0.1), zp(0)]),
    code: 'QPARAMS_SHAPE_MISMATCH',
    fragments: ['tensor w: scale has shape [3], expected [1] for per_tensor'],
  },
  {
    label: 'a scale stored as I32',
    path: '/v1/quantize',
    body: file([W, { name: 'w.scale', dtype: 'I32', shape: [1], data: i32(1) }, zp(0)]),
    code: 'QPARAMS_DTYPE_INVALID',
    fragments: ['tensor w: scale has dtype I32'],
  },
  {
    label: 'a zero point without a scale',
    path: '/v1/quantize',
    body: file([W, zp(0)]),
    code: 'QPARAMS_MISSING',
    fragments: ['tensor w: w.zero_point is given without w.scale'],
  },
  // --- containers ------------------------------------------------------------------------------
  {
    label: 'a container lacking the scale its metadata names',
    path: '/v1/dequantize',
    body: file([CODES, zp(0)], { format: QTENSOR_FORMAT, w: META }),
    code: 'QTENSOR_INVALID',
    fragments: ['request body: tensor w: the container lacks w.scale'],
  },
  {
    label: 'dequantize of a plain safetensors file',
    path: '/v1/dequantize',
    body: readFileSync(MODEL),
    code: 'NOT_A_QTENSOR',
    fragments: ['request body: no tensor carries quantd.qtensor/1 metadata; nothing to dequantize'],
  },
];

describe.concurrent('problem+json for every input error', () => {
  it.each(CASES.map((c) => [c.label, c] as const))('%s', async (_label, c) => {
    const headers = c.octet ? octetHeaders(c.octet[0], c.octet[1]) : { 'content-type': SAFETENSORS };
    const reply = await send(t.port, c.path, { headers, body: c.body });
    expectProblem(reply, c.code, c.fragments, c.path);
  });

  it('the valid container those cases start from dequantizes (they fail for the stated reason)', async () => {
    const reply = await send(t.port, '/v1/dequantize', {
      headers: { 'content-type': SAFETENSORS },
      body: file([CODES, scale(0.5), zp(0)], { format: QTENSOR_FORMAT, w: META }),
    });
    expect(reply.status, reply.body.toString()).toBe(200);
    const out = readTensors(reply.body);
    expect(Array.from(new Float32Array(out.tensors.get('w')!.data.slice().buffer))).toEqual([
      0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4,
    ]);
  });

  it('errors in Accept: application/json requests are problem+json too', async () => {
    const reply = await send(t.port, '/v1/quantize?qdtype=int9', {
      headers: { 'content-type': SAFETENSORS, accept: 'application/json' },
      body: file([W]),
    });
    expectProblem(reply, 'UNKNOWN_QDTYPE', ['int9']);
  });
});

describe.concurrent('request headers', () => {
  it.each([
    [
      'X-Tensor-Shape missing',
      { 'content-type': 'application/octet-stream', 'x-tensor-dtype': 'float32' },
      'X-Tensor-Shape',
      '(got (missing))',
    ],
    [
      'X-Tensor-Dtype missing',
      { 'content-type': 'application/octet-stream', 'x-tensor-shape': '4' },
      'X-Tensor-Dtype',
      '(got (missing))',
    ],
  ])('HEADER_INVALID: %s', async (_label, headers, header, got) => {
    const reply = await send(t.port, '/v1/quantize', { headers, body: f32(1, 2, 3, 4) });
    const p = expectProblem(reply, 'HEADER_INVALID', [`header ${header} `, got]);
    expect(p.params['header']).toBe(header);
  });

  it.each([
    ['text/plain', 'hello'],
    ['application/json', '{"tensor": [1, 2, 3]}'],
  ])('UNSUPPORTED_MEDIA_TYPE: a %s body', async (type, body) => {
    const reply = await send(t.port, '/v1/quantize', { headers: { 'content-type': type }, body });
    expectProblem(reply, 'UNSUPPORTED_MEDIA_TYPE', [type]);
  });

  it('UNSUPPORTED_MEDIA_TYPE: a type without a parser names the type sent', async () => {
    const reply = await send(t.port, '/v1/quantize', {
      headers: { 'content-type': 'image/png' },
      body: f32(1),
    });
    expectProblem(reply, 'UNSUPPORTED_MEDIA_TYPE', ['content type image/png is not accepted']);
  });

  it('UNSUPPORTED_MEDIA_TYPE: a body without Content-Type', async () => {
    const reply = await send(t.port, '/v1/qparams', { body: f32(1, 2) });
    expectProblem(reply, 'UNSUPPORTED_MEDIA_TYPE');
  });

  it('UNSUPPORTED_MEDIA_TYPE: a JSON body is refused as JSON whatever it holds (malformed, empty)', async () => {
    for (const body of ['{"tensor": ', '']) {
      const reply = await send(t.port, '/v1/quantize', {
        headers: { 'content-type': 'application/json' },
        body,
      });
      expectProblem(reply, 'UNSUPPORTED_MEDIA_TYPE', ['application/json']);
    }
  });

  it.each(['text/html', 'application/xml, text/*'])('NOT_ACCEPTABLE: Accept %s', async (accept) => {
    const reply = await send(t.port, '/v1/quantize', {
      headers: { ...octetHeaders('float32', [2]), accept },
      body: f32(1, 2),
    });
    expectProblem(reply, 'NOT_ACCEPTABLE', [`cannot respond with ${accept}`]);
  });

  it.each([
    ['POST', '/v1/quantise'],
    ['GET', '/v1/quantize'],
    ['GET', '/nothing/here'],
  ])('NOT_FOUND: %s %s', async (method, path) => {
    const reply = await send(t.port, path, {
      method,
      ...(method === 'POST' ? { headers: octetHeaders('float32', [1]), body: f32(1) } : {}),
    });
    expectProblem(reply, 'NOT_FOUND', [`no route ${method} ${path}`], path);
  });
});

describe('request ids', () => {
  it('X-Request-Id is echoed as the problem request_id', async () => {
    const reply = await send(t.port, '/v1/quantize?qdtype=int9', {
      headers: { 'content-type': SAFETENSORS, 'x-request-id': 'trace-4711-abc' },
      body: file([W]),
    });
    expect(expectProblem(reply, 'UNKNOWN_QDTYPE').request_id).toBe('trace-4711-abc');
  });

  it('without X-Request-Id every problem gets its own id', async () => {
    const replies = await Promise.all([0, 1, 2].map(() => send(t.port, '/nope')));
    const ids = replies.map((r) => expectProblem(r, 'NOT_FOUND').request_id);
    expect(new Set(ids).size).toBe(3);
  });
});

describe('body limit (QUANTD_BODY_LIMIT=64k)', () => {
  it('a body of exactly the limit is read and computed', async () => {
    const data = new Uint8Array(new Float32Array(LIMIT / 4).fill(0.5).buffer);
    const reply = await send(t.port, '/v1/qparams', {
      headers: octetHeaders('float32', [LIMIT / 4]),
      body: data,
    });
    expect(reply.status, reply.body.toString()).toBe(200);
    expect(readTensors(reply.body).names).toEqual(['tensor.scale', 'tensor.zero_point']);
  });

  it('PAYLOAD_TOO_LARGE for a declared Content-Length over the limit, before any body byte is sent', async () => {
    const head =
      'POST /v1/quantize HTTP/1.1\r\nHost: test\r\nContent-Type: application/x-safetensors\r\n' +
      `Content-Length: ${LIMIT + 1}\r\nX-Request-Id: early-413\r\n\r\n`;
    // headers only: the response must come while the server still waits for the whole body
    const r = await rawExchange(t.port, [head], { timeoutMs: 2000 });
    const res = parseRaw(r.text);
    expect(res, `no response to the headers alone: ${JSON.stringify(r)}`).not.toBeNull();
    const p = expectProblem(
      { status: res!.status, headers: res!.headers, body: res!.body },
      'PAYLOAD_TOO_LARGE',
      [`the request body of ${LIMIT + 1} bytes exceeds the limit of ${LIMIT} bytes`],
      '/v1/quantize',
    );
    expect(p.request_id).toBe('early-413');
  });

  it('PAYLOAD_TOO_LARGE for a 1 TB declared body on the default limit too (no allocation, no wait)', async () => {
    const head =
      'POST /v1/fake-quantize HTTP/1.1\r\nHost: test\r\nContent-Type: application/octet-stream\r\n' +
      `X-Tensor-Dtype: float32\r\nX-Tensor-Shape: 1\r\nContent-Length: ${1e12}\r\n\r\n`;
    const big = await startTestServer({ QUANTD_POOL_SIZE: '1' });
    try {
      const res = parseRaw((await rawExchange(big.port, [head], { timeoutMs: 2000 })).text);
      expect(res).not.toBeNull();
      expectProblem({ status: res!.status, headers: res!.headers, body: res!.body }, 'PAYLOAD_TOO_LARGE', [
        `of ${1e12} bytes exceeds the limit of ${2 * 1024 ** 3} bytes`,
      ]);
    } finally {
      await big.server.shutdown('test');
    }
  });

  it('PAYLOAD_TOO_LARGE for a chunked upload that grows past the limit', async () => {
    const chunk = 16 * 1024;
    const steps: (string | { waitMs: number })[] = [
      'POST /v1/qparams HTTP/1.1\r\nHost: test\r\nContent-Type: application/octet-stream\r\n' +
        'X-Tensor-Dtype: float32\r\nX-Tensor-Shape: 32768\r\nTransfer-Encoding: chunked\r\n\r\n',
    ];
    for (let i = 0; i < 8; i++) {
      steps.push(`${chunk.toString(16)}\r\n${'\0'.repeat(chunk)}\r\n`, { waitMs: 20 });
    }
    steps.push('0\r\n\r\n');
    const r = await rawExchange(t.port, steps, { timeoutMs: 3000 });
    const res = parseRaw(r.text);
    expect(res, `no response before the connection ended (${r.error ?? 'closed'})`).not.toBeNull();
    expectProblem({ status: res!.status, headers: res!.headers, body: res!.body }, 'PAYLOAD_TOO_LARGE', [
      `exceeds the limit of ${LIMIT} bytes`,
    ]);
  });

  it('a chunked upload within the limit is read whole', async () => {
    const data = new Uint8Array(new Float32Array(4096).fill(-1.25).buffer);
    const reply = await send(t.port, '/v1/quantize', {
      headers: octetHeaders('float32', [4096]),
      body: data,
      chunked: 1000,
    });
    expect(reply.status, reply.body.toString()).toBe(200);
    expect(readTensors(reply.body).tensors.get('tensor')!.data.byteLength).toBe(4096);
  });

  it('BODY_INCOMPLETE when the request ends before Content-Length bytes arrived', async () => {
    const head =
      'POST /v1/quantize HTTP/1.1\r\nHost: test\r\nContent-Type: application/octet-stream\r\n' +
      'X-Tensor-Dtype: float32\r\nX-Tensor-Shape: 250\r\nContent-Length: 1000\r\n\r\n';
    const r = await rawExchange(t.port, [head, new Uint8Array(100), { waitMs: 50 }, 'half-close'], {
      timeoutMs: 2000,
    });
    const res = parseRaw(r.text);
    expect(res, `no response (${r.error ?? 'closed'})`).not.toBeNull();
    expectProblem({ status: res!.status, headers: res!.headers, body: res!.body }, 'BODY_INCOMPLETE', [
      'the request body ended after 100 of 1000 bytes',
    ]);
  });

  it('the server still serves after all of the above', async () => {
    const reply = await send(t.port, '/v1/quantize', {
      headers: octetHeaders('float32', [2]),
      body: f32(1, -1),
    });
    expect(reply.status).toBe(200);
  });
});

describe('bearer authentication (QUANTD_API_KEYS)', () => {
  const KEY_A = 'key-a-0123456789abcdef';
  const KEY_B = 'key-b-fedcba9876543210';
  let auth: TestServer;
  beforeAll(async () => {
    auth = await startTestServer({
      QUANTD_API_KEYS: `${KEY_A}, ${KEY_B}`,
      QUANTD_POOL_SIZE: '1',
      QUANTD_BODY_LIMIT: '64k',
    });
  });
  afterAll(async () => {
    await auth?.server.shutdown('test');
  });
  const op = (authorization?: string) =>
    send(auth.port, '/v1/quantize', {
      headers: { ...octetHeaders('float32', [4]), ...(authorization ? { authorization } : {}) },
      body: f32(1, 2, 3, -4),
    });

  it.each([
    ['no Authorization header', undefined, 'the request has no Authorization header'],
    ['a Basic credential', `Basic ${Buffer.from('u:p').toString('base64')}`, 'is not a bearer token'],
    ['a wrong token', 'Bearer key-c-not-configured-000', 'the bearer token is not a configured key'],
    ['a prefix of a key', `Bearer ${KEY_A.slice(0, -1)}`, 'not a configured key'],
    ['an empty bearer', 'Bearer ', 'is not a bearer token'],
  ])('UNAUTHORIZED with WWW-Authenticate: %s', async (_label, authorization, fragment) => {
    const reply = await op(authorization);
    expectProblem(reply, 'UNAUTHORIZED', [fragment, 'send Authorization: Bearer <key>']);
    expect(reply.headers['www-authenticate']).toMatch(/^Bearer realm="quantd"/);
  });

  it('either configured key works (scheme case-insensitive), and gives the unauthenticated bytes', async () => {
    const a = await op(`Bearer ${KEY_A}`);
    const b = await op(`bearer ${KEY_B}`);
    const open = await send(t.port, '/v1/quantize', {
      headers: octetHeaders('float32', [4]),
      body: f32(1, 2, 3, -4),
    });
    expect([a.status, b.status, open.status]).toEqual([200, 200, 200]);
    expectSameBytes(a.body, open.body, 'KEY_A');
    expectSameBytes(b.body, open.body, 'KEY_B');
  });

  it('an unauthenticated request is refused before its declared size is looked at (headers only)', async () => {
    const head =
      'POST /v1/quantize HTTP/1.1\r\nHost: test\r\nContent-Type: application/x-safetensors\r\n' +
      `Content-Length: ${LIMIT * 4}\r\n\r\n`;
    const res = parseRaw((await rawExchange(auth.port, [head], { timeoutMs: 2000 })).text);
    expect(res).not.toBeNull();
    expectProblem({ status: res!.status, headers: res!.headers, body: res!.body }, 'UNAUTHORIZED');
  });

  it.each(['/healthz', '/readyz', '/metrics', '/docs/json'])('%s stays open', async (path) => {
    const reply = await send(auth.port, path);
    expect(reply.status).toBe(200);
  });

  it.each(['/%761/quantize', '/%76%31/quantize', '/v%31/quantize'])(
    'a percent-encoded path that routes to an operation needs the token too: %s',
    async (path) => {
      // the router decodes the path; the auth hook must not look at the raw URL alone
      const reply = await send(auth.port, path, {
        headers: octetHeaders('float32', [4]),
        body: f32(1, 2, 3, -4),
      });
      expectProblem(reply, 'UNAUTHORIZED');
    },
  );

  it('unknown /v1 routes need the token too (no route probing)', async () => {
    expectProblem(await send(auth.port, '/v1/secret'), 'UNAUTHORIZED');
    expectProblem(
      await send(auth.port, '/v1/secret', { headers: { authorization: `Bearer ${KEY_A}` } }),
      'NOT_FOUND',
    );
  });
});
