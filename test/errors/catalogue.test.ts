/**
 * Pins the error catalogue (src/errors/catalogue.ts): the codes clients match on and what each
 * maps to. The table below is written out by hand on purpose — it is the contract. Adding,
 * removing or re-mapping a code fails here until the table is updated with it, deliberately.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

import {
  GrpcStatus,
  QuantdError,
  catalogue,
  exitCodeFor,
  formatMessage,
  grpcStatusFor,
  isQuantdError,
  type ErrorCode,
} from '../../src/errors/index.js';

/** code → [HTTP status, gRPC status name, CLI exit code]. */
const CONTRACT: Record<string, readonly [number, string, number]> = {
  USAGE: [400, 'INVALID_ARGUMENT', 2],
  OPTION_INVALID: [400, 'INVALID_ARGUMENT', 2],
  UNKNOWN_QDTYPE: [400, 'INVALID_ARGUMENT', 2],
  UNKNOWN_SCHEME: [400, 'INVALID_ARGUMENT', 2],
  UNKNOWN_MODE: [400, 'INVALID_ARGUMENT', 2],
  UNKNOWN_DTYPE: [400, 'INVALID_ARGUMENT', 2],
  MODE_UNSUPPORTED: [400, 'INVALID_ARGUMENT', 2],
  QUANT_RANGE_INVALID: [400, 'INVALID_ARGUMENT', 2],
  EPS_INVALID: [400, 'INVALID_ARGUMENT', 2],
  FEATURE_UNSUPPORTED: [400, 'INVALID_ARGUMENT', 2],
  TEXT_INVALID: [400, 'INVALID_ARGUMENT', 2],
  MODEL_UNRUNNABLE: [400, 'INVALID_ARGUMENT', 2],
  ENGINE_UNAVAILABLE: [501, 'UNIMPLEMENTED', 2],
  INPUT_DTYPE_UNSUPPORTED: [400, 'INVALID_ARGUMENT', 2],
  INPUT_NOT_FINITE: [400, 'INVALID_ARGUMENT', 2],
  EMPTY_TENSOR: [400, 'INVALID_ARGUMENT', 2],
  AXIS_OUT_OF_RANGE: [400, 'INVALID_ARGUMENT', 2],
  SHAPE_UNSUPPORTED: [400, 'INVALID_ARGUMENT', 2],
  GROUP_SIZE_INVALID: [400, 'INVALID_ARGUMENT', 2],
  RANGE_OVERFLOW: [400, 'INVALID_ARGUMENT', 2],
  RECIPE_INVALID: [400, 'INVALID_ARGUMENT', 2],
  RECIPE_RULE_FAILED: [400, 'INVALID_ARGUMENT', 2],
  NO_TENSOR_SELECTED: [400, 'INVALID_ARGUMENT', 2],
  NAME_COLLISION: [400, 'INVALID_ARGUMENT', 2],
  TENSOR_NAME_RESERVED: [400, 'INVALID_ARGUMENT', 2],
  SCALE_INVALID: [400, 'INVALID_ARGUMENT', 2],
  ZERO_POINT_OUT_OF_RANGE: [400, 'INVALID_ARGUMENT', 2],
  ZERO_POINT_INVALID: [400, 'INVALID_ARGUMENT', 2],
  QPARAMS_SHAPE_MISMATCH: [400, 'INVALID_ARGUMENT', 2],
  QPARAMS_DTYPE_INVALID: [400, 'INVALID_ARGUMENT', 2],
  QPARAMS_MISSING: [400, 'INVALID_ARGUMENT', 2],
  SAFETENSORS_INVALID: [400, 'INVALID_ARGUMENT', 2],
  FILE_NOT_SAFETENSORS: [400, 'INVALID_ARGUMENT', 2],
  SAFETENSORS_HEADER_TOO_LARGE: [413, 'RESOURCE_EXHAUSTED', 2],
  SAFETENSORS_TOO_MANY_TENSORS: [413, 'RESOURCE_EXHAUSTED', 2],
  SAFETENSORS_TRUNCATED: [400, 'INVALID_ARGUMENT', 2],
  SAFETENSORS_OFFSETS_INVALID: [400, 'INVALID_ARGUMENT', 2],
  SAFETENSORS_DTYPE_UNKNOWN: [400, 'INVALID_ARGUMENT', 2],
  SAFETENSORS_SIZE_MISMATCH: [400, 'INVALID_ARGUMENT', 2],
  SAFETENSORS_DUPLICATE_KEY: [400, 'INVALID_ARGUMENT', 2],
  QTENSOR_INVALID: [400, 'INVALID_ARGUMENT', 2],
  GGUF_INVALID: [400, 'INVALID_ARGUMENT', 2],
  LAYOUT_INVALID: [400, 'INVALID_ARGUMENT', 2],
  HF_MODEL_INVALID: [400, 'INVALID_ARGUMENT', 2],
  TOKENIZER_INPUT_INVALID: [400, 'INVALID_ARGUMENT', 2],
  NOT_A_QTENSOR: [400, 'INVALID_ARGUMENT', 2],
  SHARD_INDEX_INVALID: [400, 'INVALID_ARGUMENT', 2],
  CHECKSUM_MISMATCH: [400, 'INVALID_ARGUMENT', 2],
  CHECKSUM_MISSING: [400, 'INVALID_ARGUMENT', 2],
  FILE_NOT_FOUND: [404, 'NOT_FOUND', 2],
  FILE_UNREADABLE: [400, 'INVALID_ARGUMENT', 2],
  STORAGE_FULL: [507, 'RESOURCE_EXHAUSTED', 2],
  OUTPUT_IS_INPUT: [400, 'INVALID_ARGUMENT', 2],
  OUTPUT_EXISTS: [400, 'INVALID_ARGUMENT', 2],
  OUTPUT_UNWRITABLE: [500, 'INTERNAL', 2],
  UNAUTHORIZED: [401, 'UNAUTHENTICATED', 2],
  PAYLOAD_TOO_LARGE: [413, 'RESOURCE_EXHAUSTED', 2],
  RESULT_TOO_LARGE: [500, 'RESOURCE_EXHAUSTED', 1],
  MEMORY_BUDGET_EXCEEDED: [413, 'RESOURCE_EXHAUSTED', 2],
  ENCODING_UNSUPPORTED: [415, 'INVALID_ARGUMENT', 2],
  EXPECTATION_FAILED: [417, 'INVALID_ARGUMENT', 2],
  UNSUPPORTED_MEDIA_TYPE: [415, 'INVALID_ARGUMENT', 2],
  NOT_ACCEPTABLE: [406, 'INVALID_ARGUMENT', 2],
  NOT_FOUND: [404, 'NOT_FOUND', 2],
  PATH_FORBIDDEN: [403, 'PERMISSION_DENIED', 2],
  SERVER_UNREACHABLE: [502, 'UNAVAILABLE', 1],
  JOB_NOT_FOUND: [404, 'NOT_FOUND', 2],
  JOB_NOT_READY: [409, 'FAILED_PRECONDITION', 2],
  BODY_INCOMPLETE: [400, 'INVALID_ARGUMENT', 2],
  ARCHIVE_INVALID: [400, 'INVALID_ARGUMENT', 2],
  IMATRIX_INVALID: [400, 'INVALID_ARGUMENT', 2],
  OBSERVER_INVALID: [400, 'INVALID_ARGUMENT', 2],
  OBSERVED_RANGE_INVALID: [400, 'INVALID_ARGUMENT', 2],
  CALIBRATION_NOT_FOUND: [404, 'NOT_FOUND', 2],
  CALIBRATION_INVALID: [400, 'INVALID_ARGUMENT', 2],
  CALIBRATION_FULL: [413, 'RESOURCE_EXHAUSTED', 2],
  CALIBRATION_MEMORY: [507, 'RESOURCE_EXHAUSTED', 2],
  QUOTA_EXCEEDED: [429, 'RESOURCE_EXHAUSTED', 2],
  BODY_TOO_SLOW: [408, 'DEADLINE_EXCEEDED', 2],
  HEAD_TOO_SLOW: [408, 'DEADLINE_EXCEEDED', 2],
  STREAM_IDLE: [408, 'DEADLINE_EXCEEDED', 2],
  STREAM_INVALID: [400, 'INVALID_ARGUMENT', 2],
  INFER_REQUEST_INVALID: [400, 'INVALID_ARGUMENT', 2],
  INFER_INPUT_INVALID: [400, 'INVALID_ARGUMENT', 2],
  HEADER_INVALID: [400, 'INVALID_ARGUMENT', 2],
  REQUEST_TIMEOUT: [504, 'DEADLINE_EXCEEDED', 1],
  CONFIG_INVALID: [500, 'FAILED_PRECONDITION', 1],
  BACKEND_UNAVAILABLE: [500, 'FAILED_PRECONDITION', 1],
  OVERLOADED: [503, 'UNAVAILABLE', 1],
  QUEUE_UNAVAILABLE: [503, 'UNAVAILABLE', 1],
  SHUTTING_DOWN: [503, 'UNAVAILABLE', 1],
  CANCELLED: [499, 'CANCELLED', 1],
  RESULT_CORRUPT: [500, 'DATA_LOSS', 1],
  WORKER_FAILED: [500, 'INTERNAL', 1],
  INTERNAL: [500, 'INTERNAL', 1],
};

/** The gRPC status codes the catalogue may name, with their numbers from the gRPC spec. */
const GRPC_SPEC: Record<string, number> = {
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  ABORTED: 10,
  OUT_OF_RANGE: 11,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  DATA_LOSS: 15,
  UNAUTHENTICATED: 16,
};

const CODES = Object.keys(catalogue) as ErrorCode[];
const PARAM = /\{([^{}]*)\}/g;

/** The names a template's {params} use, in order. */
const paramsOf = (template: string): string[] => Array.from(template.matchAll(PARAM), (m) => m[1]!);

describe('the catalogue is the contract', () => {
  it('holds exactly the codes of the table (none added, none removed)', () => {
    expect([...CODES].sort()).toEqual(Object.keys(CONTRACT).sort());
  });

  it.each(Object.entries(CONTRACT))('%s maps to HTTP / gRPC / exit %j', (code, [http, grpc, exit]) => {
    const c = code as ErrorCode;
    expect(catalogue[c], `${code} is in the catalogue`).toBeDefined();
    expect(catalogue[c].http).toBe(http);
    expect(catalogue[c].grpc).toBe(grpc);
    expect(grpcStatusFor(c)).toBe(GRPC_SPEC[grpc]);
    expect(exitCodeFor(c)).toBe(exit);
    expect(new QuantdError(c, {}).httpStatus).toBe(http);
  });

  it('gRPC status numbers are the gRPC spec’s', () => {
    expect({ ...GrpcStatus }).toEqual(GRPC_SPEC);
  });

  it('every code has a title and a message, and codes are UPPER_SNAKE', () => {
    for (const code of CODES) {
      expect(code).toMatch(/^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*$/);
      expect(catalogue[code].title.trim(), code).not.toBe('');
      expect(catalogue[code].message.trim(), code).not.toBe('');
    }
  });
});

describe('message templates', () => {
  it.each(CODES)('%s: every {param} is a simple identifier, and no brace is left unpaired', (code) => {
    const template = catalogue[code].message;
    for (const name of paramsOf(template))
      expect(name, `${code}: {${name}}`).toMatch(/^[A-Za-z_][A-Za-z0-9_]*$/);
    expect(template.replace(PARAM, ''), code).not.toMatch(/[{}]/);
  });

  it.each(CODES)('%s: formatMessage fills every param', (code) => {
    const params = Object.fromEntries(paramsOf(catalogue[code].message).map((p) => [p, `<${p}>`]));
    const message = formatMessage(code, params);
    expect(message).not.toMatch(/[{}]/);
    for (const value of Object.values(params)) expect(message).toContain(value);
    expect(new QuantdError(code, params).message).toBe(message);
  });

  it('fills params by name, wherever they appear', () => {
    expect(formatMessage('AXIS_OUT_OF_RANGE', { axis: -3, tensor: 'enc.w', shape: '[2, 3]', rank: 2 })).toBe(
      'axis -3 is out of range for tensor enc.w of shape [2, 3] (rank 2)',
    );
    expect(
      formatMessage('ZERO_POINT_OUT_OF_RANGE', {
        tensor: 'w',
        index: 3,
        value: 300,
        quant_min: 0,
        quant_max: 255,
      }),
    ).toBe('tensor w: zero_point[3] = 300 is outside [0, 255]');
  });

  it('shows -0 as "-0" (String(-0) is "0")', () => {
    expect(formatMessage('SCALE_INVALID', { tensor: 'w', index: 0, value: -0 })).toBe(
      'tensor w: scale[0] = -0; scales must be finite, > 0, with a finite float32 reciprocal',
    );
    expect(formatMessage('SCALE_INVALID', { tensor: 'w', index: 0, value: 0 })).toContain('scale[0] = 0;');
  });

  it('shows NaN, infinities, bigints, booleans and null as such, and a missing param as "?"', () => {
    const shown = (value: Parameters<typeof formatMessage>[1][string]): string =>
      formatMessage('EPS_INVALID', { value }).replace(/^.*got /, '');
    expect(shown(NaN)).toBe('NaN');
    expect(shown(-Infinity)).toBe('-Infinity');
    expect(shown(2n ** 64n)).toBe('18446744073709551616');
    expect(shown(true)).toBe('true');
    expect(shown(null)).toBe('null');
    expect(shown(undefined)).toBe('?');
    expect(formatMessage('EPS_INVALID', {})).toMatch(/got \?$/);
  });

  it('does not interpret $ patterns or braces in values', () => {
    expect(formatMessage('FILE_NOT_FOUND', { path: "$& $' {path}" })).toBe(
      "cannot open $& $' {path}: no such file",
    );
  });
});

describe('QuantdError', () => {
  it('carries code, params, message and name, and is recognised by isQuantdError', () => {
    const params = { tensor: 'w', index: 2, value: 'NaN', op: 'choose_qparams' };
    const err = new QuantdError('INPUT_NOT_FINITE', params);
    expect(err).toBeInstanceOf(Error);
    expect(err.name).toBe('QuantdError');
    expect(err.code).toBe('INPUT_NOT_FINITE');
    expect(err.params).toEqual(params);
    expect(err.message).toBe('tensor w holds NaN at flat index 2; choose_qparams needs finite input');
    expect(isQuantdError(err)).toBe(true);
    expect(isQuantdError(new Error(err.message))).toBe(false);
    expect(isQuantdError({ code: 'INPUT_NOT_FINITE', message: err.message })).toBe(false);
  });

  it('toJSON() round-trips through structuredClone (worker boundaries)', () => {
    const err = new QuantdError('SAFETENSORS_HEADER_TOO_LARGE', {
      source: 'model.safetensors',
      size: 2n ** 64n - 1n,
      limit: 100_000_000,
    });
    const json = err.toJSON();
    const cloned = structuredClone(json);
    expect(cloned).toEqual(json);
    expect(cloned).toEqual({
      code: 'SAFETENSORS_HEADER_TOO_LARGE',
      message: 'model.safetensors: header of 18446744073709551615 bytes exceeds the limit of 100000000 bytes',
      // bigint params travel as their decimal text, so JSON.stringify works on them too
      params: { source: 'model.safetensors', size: '18446744073709551615', limit: 100_000_000 },
    });
    expect(JSON.parse(JSON.stringify(err))).toEqual(json);
    // Rebuilt on the other side, it is the same error.
    const rebuilt = new QuantdError(cloned.code, cloned.params);
    expect(rebuilt.message).toBe(err.message);
    expect(rebuilt.toJSON()).toEqual(json);
  });

  it('toJSON() of every code survives structuredClone with -0, NaN and null params intact', () => {
    for (const code of CODES) {
      const params = { value: -0, index: NaN, detail: null, tensor: 'w' };
      const json = new QuantdError(code, params).toJSON();
      const cloned = structuredClone(json);
      expect(cloned, code).toEqual(json);
      expect(Object.is(cloned.params['value'], -0), code).toBe(true);
    }
  });
});

describe('every code is tested somewhere', () => {
  const TEST_ROOT = join(new URL('../', import.meta.url).pathname);
  const SELF = new URL(import.meta.url).pathname;

  it("each code appears quoted (e.g. 'SCALE_INVALID') in a test file other than this one", () => {
    const files = readdirSync(TEST_ROOT, { recursive: true, encoding: 'utf8' })
      .map((f) => join(TEST_ROOT, f))
      .filter((f) => /\.(ts|js|mjs)$/.test(f) && f !== SELF);
    expect(files.length).toBeGreaterThan(0);
    const text = files.map((f) => readFileSync(f, 'utf8')).join('\n');
    const untested = CODES.filter((code) => !text.includes(`'${code}'`));
    expect(untested, `codes no test under ${relative(process.cwd(), TEST_ROOT)}/ names`).toEqual([]);
  });
});
