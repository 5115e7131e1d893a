/**
 * JSON bodies have small limits of their own (src/http/json-body.ts), checked before a byte is
 * read, and are decoded strictly: QUANTD_JSON_LIMIT for job requests and every other JSON body,
 * QUANTD_CALIBRATION_IMPORT_LIMIT for a calibration session's creation (it may carry an export),
 * QUANTD_OIP_JSON_LIMIT for the JSON part of a /v2 inference (sent, or decompressed). Small
 * limits here; test/reliability/json-bodies.test.ts sends the 600 MiB bodies that ended the
 * process before.
 */
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { expectProblem, parseRaw, rawExchange, send, type TestServer } from './helpers.js';
import { startJobServer, tempDir } from '../jobs/helpers.js';

const JSON_LIMIT = 8 * 1024;
const CALIBRATION_JSON_LIMIT = 16 * 1024;
const OIP_JSON_LIMIT = 12 * 1024;
const JSON_TYPE = { 'content-type': 'application/json' };

let t: TestServer;
beforeAll(async () => {
  t = await startJobServer(tempDir('json-bodies'), {
    QUANTD_JSON_LIMIT: String(JSON_LIMIT),
    QUANTD_CALIBRATION_IMPORT_LIMIT: String(CALIBRATION_JSON_LIMIT),
    QUANTD_OIP_JSON_LIMIT: String(OIP_JSON_LIMIT),
  });
});
afterAll(async () => {
  await t?.server.shutdown('test done');
});

/** `value` as JSON, padded with spaces to `bytes` bytes. */
const padded = (value: unknown, bytes: number): string => {
  const text = JSON.stringify(value);
  return text + ' '.repeat(Math.max(0, bytes - text.length));
};

const RECIPE = { recipe: { observers: [{ match: '*', observer: { kind: 'min_max' } }] } };

/** A head declaring `length` bytes, and no body: the answer, or null if none within 2 s. */
async function declared(path: string, length: number, headers: Record<string, string> = {}) {
  const head =
    `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Length: ${length}\r\n` +
    Object.entries({ 'Content-Type': 'application/json', ...headers })
      .map(([k, v]) => `${k}: ${v}\r\n`)
      .join('') +
    '\r\n';
  const r = await rawExchange(t.port, [head], { timeoutMs: 2000 });
  return parseRaw(r.text);
}

describe('QUANTD_JSON_LIMIT', () => {
  it('a job request: refused 413 on its declared length before the body, within it read', async () => {
    const reply = await declared('/v1/jobs', JSON_LIMIT + 1);
    expect(reply?.complete, 'answered without the body').toBe(true);
    expectProblem(reply!, 'PAYLOAD_TOO_LARGE', ['(QUANTD_JSON_LIMIT)']);
    expect(reply!.headers['connection']).toBe('close');
    // at the limit it is read and judged on its content (no such model)
    const within = await send(t.port, '/v1/jobs', {
      headers: JSON_TYPE,
      body: padded({ input: 'missing.safetensors', op: 'quantize' }, JSON_LIMIT),
    });
    expect(within.status, within.body.toString()).not.toBe(413);
  });

  it('a chunked body is cut once past the limit; other routes (inspect, DELETE) have the limit too', async () => {
    const chunked = await send(t.port, '/v1/jobs', {
      headers: JSON_TYPE,
      body: padded({ input: 'x' }, 4 * JSON_LIMIT),
      chunked: 1024,
    });
    const problem = expectProblem(chunked, 'PAYLOAD_TOO_LARGE', ['(QUANTD_JSON_LIMIT)']);
    expect(problem.params['size']).toBe(`more than ${JSON_LIMIT}`);
    for (const [method, path] of [
      ['POST', '/v1/inspect'],
      ['DELETE', '/v1/calibrations/abc'],
      ['POST', '/v1/calibrations/abc/batches'],
    ]) {
      const reply = await send(t.port, path!, {
        method,
        headers: JSON_TYPE,
        body: padded({}, JSON_LIMIT + 1),
      });
      expectProblem(reply, 'PAYLOAD_TOO_LARGE', ['(QUANTD_JSON_LIMIT)']);
    }
  });
});

describe('QUANTD_CALIBRATION_IMPORT_LIMIT', () => {
  it('a session from a recipe or an export: up to its own limit, past QUANTD_JSON_LIMIT', async () => {
    const created = await send(t.port, '/v1/calibrations', {
      headers: JSON_TYPE,
      body: padded(RECIPE, CALIBRATION_JSON_LIMIT),
    });
    expect(created.status, created.body.toString()).toBe(201);
    const over = await send(t.port, '/v1/calibrations', {
      headers: JSON_TYPE,
      body: padded(RECIPE, CALIBRATION_JSON_LIMIT + 1),
    });
    expectProblem(over, 'PAYLOAD_TOO_LARGE', ['(QUANTD_CALIBRATION_IMPORT_LIMIT)']);
  });
});

describe('decoding and parsing', () => {
  it('a body that is not UTF-8 is 400 USAGE, not read with replacement characters', async () => {
    // é as Latin-1's one byte 0xE9: Fastify's parser read it as U+FFFD and created the session
    const bad = Buffer.concat([
      Buffer.from('{"recipe": {"observers": [{"match": "caf'),
      Buffer.from([0xe9]),
      Buffer.from('*", "observer": {"kind": "min_max"}}]}}'),
    ]);
    const reply = await send(t.port, '/v1/calibrations', { headers: JSON_TYPE, body: bad });
    expectProblem(reply, 'USAGE', ['the JSON request body is not valid UTF-8']);
    // still parsed by the secure parser: an own __proto__ key is refused
    const poisoned = await send(t.port, '/v1/calibrations', {
      headers: JSON_TYPE,
      body: '{"recipe": {"observers": []}, "__proto__": {"polluted": true}}',
    });
    expect(poisoned.status).toBe(400);
  });

  it('text/plain is not taken by any route: 415 before the body is read', async () => {
    for (const path of ['/v1/calibrations', '/v1/inspect', '/v1/linear-error']) {
      const reply = await declared(path, 1 << 30, { 'Content-Type': 'text/plain' });
      expect(reply?.complete, `${path} answered without the body`).toBe(true);
      expectProblem(reply!, 'UNSUPPORTED_MEDIA_TYPE', ['text/plain']);
    }
  });
});

describe('QUANTD_OIP_JSON_LIMIT (/v2 inference)', () => {
  const infer = '/v2/models/quantize/infer';
  const request = (n: number): unknown => ({
    inputs: [
      { name: 'input', datatype: 'FP32', shape: [n], data: Array.from({ length: n }, (_, i) => i / 7) },
    ],
  });
  const error = (reply: { body: string | Buffer }): string =>
    (JSON.parse(reply.body.toString()) as { error: string }).error;

  it('a JSON body: within it inferred; over it refused on its declared length, before the body', async () => {
    const ok = await send(t.port, infer, { headers: JSON_TYPE, body: padded(request(64), OIP_JSON_LIMIT) });
    expect(ok.status, ok.body.toString()).toBe(200);
    const reply = await declared(infer, OIP_JSON_LIMIT + 1);
    expect(reply?.complete, 'answered without the body').toBe(true);
    expect(reply!.status).toBe(413);
    expect(error(reply!)).toMatch(/^PAYLOAD_TOO_LARGE: .*\(QUANTD_OIP_JSON_LIMIT\)$/);
  });

  it('the JSON part before binary data (Inference-Header-Content-Length) over it: 413 before the body', async () => {
    const reply = await declared(infer, 1 << 30, {
      'Content-Type': 'application/octet-stream',
      'Inference-Header-Content-Length': String(OIP_JSON_LIMIT + 1),
    });
    expect(reply?.complete, 'answered without the body').toBe(true);
    expect(reply!.status).toBe(413);
    expect(error(reply!)).toContain('QUANTD_OIP_JSON_LIMIT, for the JSON part');
  });

  it('chunked, or compressed and inflating past it: 413', async () => {
    const big = padded(request(64), 4 * OIP_JSON_LIMIT);
    const chunked = await send(t.port, infer, { headers: JSON_TYPE, body: big, chunked: 4096 });
    expect(chunked.status).toBe(413);
    expect(error(chunked)).toContain('QUANTD_OIP_JSON_LIMIT');
    const gz = gzipSync(big);
    expect(gz.byteLength).toBeLessThan(OIP_JSON_LIMIT);
    const inflated = await send(t.port, infer, {
      headers: { ...JSON_TYPE, 'content-encoding': 'gzip' },
      body: gz,
    });
    expect(inflated.status).toBe(413);
    expect(error(inflated)).toContain('QUANTD_OIP_JSON_LIMIT');
  });
});
