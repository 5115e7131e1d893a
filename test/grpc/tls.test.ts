/**
 * gRPC over TLS (QUANTD_TLS_CERT / QUANTD_TLS_KEY): a self-signed certificate made with openssl
 * (which must be on the machine: without it this test fails, it does not skip). A client that
 * trusts the certificate calls Quantize and QuantizeStream and gets the bytes a plaintext server
 * gives; a plaintext client and a client that does not trust the certificate are refused.
 */
import { execFileSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import {
  assembleResult,
  bytesOf,
  expectGrpcError,
  expectSameBytes,
  floats,
  quantizerClient,
  rejection,
  runStream,
  startTestServer,
  streamMessages,
  unary,
  type OperationRequest,
  type QuantizerClient,
  type TestServer,
} from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'quantd-grpc-tls-'));
const CERT = join(dir, 'cert.pem');
const KEY = join(dir, 'key.pem');
const SHAPE = [32, 48];
const DATA = bytesOf(floats(SHAPE[0]! * SHAPE[1]!, 9));
const REQUEST: OperationRequest = {
  tensor: { dtype: 'float32', shape: SHAPE, data: DATA },
  spec: { qdtype: 'uint4' },
};

let tls: TestServer;
let plain: TestServer;
let secure: QuantizerClient;
let plainClient: QuantizerClient;
let expected: Buffer;

beforeAll(async () => {
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-days',
      '1',
      '-subj',
      '/CN=localhost',
      '-addext',
      'subjectAltName=DNS:localhost,IP:127.0.0.1',
      '-keyout',
      KEY,
      '-out',
      CERT,
    ],
    { stdio: 'pipe' },
  );
  [tls, plain] = await Promise.all([
    startTestServer({ QUANTD_TLS_CERT: CERT, QUANTD_TLS_KEY: KEY, QUANTD_POOL_SIZE: '1' }),
    // a TLS handshake left on its plaintext port holds its shutdown until the timeout
    startTestServer({ QUANTD_POOL_SIZE: '1', QUANTD_SHUTDOWN_TIMEOUT_MS: '1000' }),
  ]);
  secure = await quantizerClient(tls.target, grpc.credentials.createSsl(readFileSync(CERT)));
  plainClient = await quantizerClient(plain.target);
  expected = (await unary(plainClient, 'Quantize', REQUEST)).safetensors!;
});
afterAll(async () => {
  secure?.close();
  plainClient?.close();
  await Promise.all([tls?.server.shutdown('test'), plain?.server.shutdown('test')]);
  rmSync(dir, { recursive: true, force: true });
});

describe('TLS', () => {
  it("Quantize over TLS gives the plaintext server's bytes", async () => {
    const r = await unary(secure, 'Quantize', REQUEST);
    expectSameBytes(r.safetensors, expected, 'TLS vs plaintext');
  });

  it('the port speaks TLS with the certificate made here, and offers h2', async () => {
    const socket = connect({
      host: '127.0.0.1',
      port: tls.server.grpcPort,
      ca: readFileSync(CERT),
      servername: 'localhost',
      ALPNProtocols: ['h2'],
    });
    try {
      await once(socket, 'secureConnect');
      expect(socket.authorized).toBe(true);
      expect(socket.getPeerCertificate().subject.CN).toBe('localhost');
      expect(socket.alpnProtocol).toBe('h2');
    } finally {
      socket.destroy();
    }
  });

  it('QuantizeStream over TLS', async () => {
    const header = {
      total_bytes: DATA.byteLength,
      tensor: { dtype: 'float32', shape: SHAPE },
      spec: { qdtype: 'uint4' },
    };
    const outcome = await runStream(secure, streamMessages(header, DATA, 1000));
    expectSameBytes(assembleResult(outcome, 4 * 1024 * 1024).bytes, expected, 'stream over TLS');
  });

  it('errors over TLS carry the catalogue code', async () => {
    const err = await rejection(unary(secure, 'Quantize', { ...REQUEST, spec: { qdtype: 'int9' } }));
    expectGrpcError(err, 'UNKNOWN_QDTYPE', ['int9']);
  });

  it('a plaintext client is refused (UNAVAILABLE)', async () => {
    const c = await quantizerClient(tls.target);
    try {
      const err = await rejection(unary(c, 'Quantize', REQUEST, { deadline: Date.now() + 3000 }));
      expect(err.code, err.details).toBe(grpc.status.UNAVAILABLE);
    } finally {
      c.close();
    }
  });

  it('a client that does not trust the certificate is refused (UNAVAILABLE)', async () => {
    const c = await quantizerClient(tls.target, grpc.credentials.createSsl());
    try {
      const err = await rejection(unary(c, 'Quantize', REQUEST, { deadline: Date.now() + 3000 }));
      expect(err.code, err.details).toBe(grpc.status.UNAVAILABLE);
    } finally {
      c.close();
    }
  });

  it('a TLS client against the plaintext server is refused', async () => {
    const c = await quantizerClient(plain.target, grpc.credentials.createSsl(readFileSync(CERT)));
    try {
      const err = await rejection(unary(c, 'Quantize', REQUEST, { deadline: Date.now() + 3000 }));
      expect(err.code, err.details).toBe(grpc.status.UNAVAILABLE);
    } finally {
      c.close();
    }
  });
});
