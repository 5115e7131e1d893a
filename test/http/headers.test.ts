/**
 * Request headers the server cannot honour get a catalogued problem, never Node's bare answer or
 * silence: an `Expect` other than 100-continue is 417 EXPECTATION_FAILED (problem+json, with its
 * code), and a /v1 body sent with a Content-Encoding (gzip, br, anything but identity) is 415
 * ENCODING_UNSUPPORTED instead of being read as raw tensor bytes.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import {
  expectProblem,
  octetHeaders,
  parseRaw,
  rawExchange,
  send,
  startTestServer,
  type TestServer,
} from './helpers.js';

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer();
});
afterAll(async () => {
  await t?.server.shutdown('test done');
});

const body = new Uint8Array(Float32Array.of(1, 2, 3, 4).buffer);

describe('headers the server cannot honour', () => {
  it('Expect: bogus is 417 EXPECTATION_FAILED as problem+json, and the connection closes', async () => {
    const r = await rawExchange(t.port, [
      'POST /v1/quantize HTTP/1.1\r\nHost: x\r\nExpect: bogus\r\nContent-Type: application/octet-stream\r\n' +
        'X-Tensor-Dtype: float32\r\nX-Tensor-Shape: 4\r\nContent-Length: 16\r\n\r\n',
    ]);
    const reply = parseRaw(r.text)!;
    expect(reply.headers['connection']).toBe('close');
    expectProblem({ status: reply.status, headers: reply.headers, body: reply.body }, 'EXPECTATION_FAILED', [
      'bogus',
    ]);
  });

  it('Expect: 100-continue still works', async () => {
    const reply = await send(t.port, '/v1/quantize?qdtype=int8', {
      headers: { ...octetHeaders('float32', [4]), expect: '100-continue' },
      body,
    });
    expect(reply.status, reply.body.toString()).toBe(200);
  });

  it.each(['gzip', 'br', 'x-custom'])(
    'Content-Encoding: %s on /v1 is 415 ENCODING_UNSUPPORTED',
    async (coding) => {
      const reply = await send(t.port, '/v1/quantize?qdtype=int8', {
        headers: { ...octetHeaders('float32', [4]), 'content-encoding': coding },
        body,
      });
      expectProblem(reply, 'ENCODING_UNSUPPORTED', [coding, 'identity']);
    },
  );

  it('Content-Encoding: identity is the body as it is', async () => {
    const reply = await send(t.port, '/v1/quantize?qdtype=int8', {
      headers: { ...octetHeaders('float32', [4]), 'content-encoding': 'identity' },
      body,
    });
    expect(reply.status, reply.body.toString()).toBe(200);
  });
});
