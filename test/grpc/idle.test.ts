/**
 * What a gRPC call may hold, seen by a raw HTTP/2 client, which can send a message's length
 * prefix and hold back its bytes, or stop reading, as no gRPC client library does:
 *  - the memory budget (src/grpc/early-admission.ts): a call is charged its message's size, times
 *    the server's copies, when the message's 5-byte prefix arrives — refused OVERLOADED when the
 *    budget cannot hold it now, MEMORY_BUDGET_EXCEEDED when it never could — before its bytes are
 *    received; a refused call's stream is reset NO_ERROR after its status, so that its client
 *    stops sending (src/grpc/idle.ts); a call that ends frees its charge at once;
 *  - the idle timeout (src/grpc/idle.ts): a call whose message stops half-way is answered
 *    DEADLINE_EXCEEDED / STREAM_IDLE, one whose client stops reading its result is reset.
 * Both reach grpc-js's HTTP/2 stream through its internals (src/grpc/call-stream.ts): if an
 * upgrade moves them, these tests fail.
 */
import * as http2 from 'node:http2';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import {
  bytesOf,
  expectGrpcError,
  floats,
  quantizerClass,
  quantizerClient,
  startTestServer,
  unary,
  type OperationRequest,
  type QuantizerClient,
  type TestServer,
} from './helpers.js';

const MiB = 2 ** 20;
const IDLE_MS = 300;

let t: TestServer;
let client: QuantizerClient;

beforeAll(async () => {
  // 8 MiB for requests in flight: a 1 MiB message is charged 3 MiB (src/grpc/budget.ts)
  t = await startTestServer({ QUANTD_MEMORY_BUDGET: '8m', QUANTD_STREAM_IDLE_MS: String(IDLE_MS) });
  client = await quantizerClient(t.target);
});
afterAll(async () => {
  client?.close();
  await t?.server.shutdown('test');
});

function connect(): Promise<http2.ClientHttp2Session> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://${t.target}`);
    session.once('remoteSettings', () => resolve(session));
    session.once('error', reject);
  });
}

/** What a raw call ended with: its status and quantd-code (trailers), its reset code, when. */
interface Ended {
  readonly status: number | undefined;
  readonly quantdCode: string | undefined;
  readonly rstCode: number;
  readonly ms: number;
}

/**
 * A call on `path` whose first message declares `length` bytes, of which `sent` are sent (the
 * rest held back, or with `trickle`, sent a byte every 50 ms: slow, but not idle).
 */
function rawCall(
  session: http2.ClientHttp2Session,
  path: string,
  length: number,
  sent: number,
  trickle = false,
): { stream: http2.ClientHttp2Stream; ended: Promise<Ended> } {
  const started = Date.now();
  const stream = session.request({
    ':method': 'POST',
    ':path': path,
    'content-type': 'application/grpc',
    te: 'trailers',
  });
  stream.on('error', () => undefined);
  const prefix = Buffer.alloc(5);
  prefix.writeUInt32BE(length, 1);
  stream.write(Buffer.concat([prefix, Buffer.alloc(sent)]));
  let status: number | undefined;
  let quantdCode: string | undefined;
  const take = (headers: http2.IncomingHttpHeaders): void => {
    if (headers['grpc-status'] !== undefined) status = Number(headers['grpc-status']);
    if (headers['quantd-code'] !== undefined) quantdCode = String(headers['quantd-code']);
  };
  stream.on('response', take);
  stream.on('trailers', take);
  stream.resume();
  const timer = trickle ? setInterval(() => stream.write(Buffer.alloc(1)), 50) : undefined;
  const ended = new Promise<Ended>((resolve) =>
    stream.once('close', () => {
      clearInterval(timer);
      resolve({ status, quantdCode, rstCode: stream.rstCode, ms: Date.now() - started });
    }),
  );
  return { stream, ended };
}

const held = (): Promise<number> =>
  t.server.http.inject({ url: '/metrics' }).then((r) => {
    const line = r.body.split('\n').find((l) => l.startsWith('quantd_admission_memory_bytes '));
    return Number(line?.split(' ')[1] ?? NaN);
  });

const REQUEST: OperationRequest = {
  tensor: { dtype: 'float32', shape: [256, 1024], data: bytesOf(floats(256 * 1024, 3)) }, // 1 MiB
};

describe('the memory budget, charged on the message prefix', () => {
  it('refuses a message the whole budget could not hold, before it arrives, and resets its stream', async () => {
    const session = await connect();
    try {
      // 4 MiB declared: 12 MiB charged, more than the 8 MiB budget; 100 bytes of it sent
      const { ended } = rawCall(session, '/quantd.v1.Quantizer/Quantize', 4 * MiB, 100);
      const end = await ended;
      expect(end.status).toBe(grpc.status.RESOURCE_EXHAUSTED);
      expect(end.quantdCode).toBe('MEMORY_BUDGET_EXCEEDED');
      expect(end.rstCode, 'its client is told to stop sending').toBe(http2.constants.NGHTTP2_NO_ERROR);
    } finally {
      session.destroy();
    }
  });

  it('refuses OVERLOADED what does not fit beside the calls in flight; an ended call frees its charge at once', async () => {
    const session = await connect();
    try {
      // 2 MiB declared, its bytes trickling: 6 MiB of the 8 charged while they come
      const first = rawCall(session, '/quantd.v1.Quantizer/Quantize', 2 * MiB, 100, true);
      await expect.poll(held, { timeout: 3000 }).toBe(6 * MiB);
      const err = await unary(client, 'Quantize', REQUEST).then(
        () => expect.fail('admitted beside the held call'),
        (e: grpc.ServiceError) => e,
      );
      expectGrpcError(err, 'OVERLOADED');
      first.stream.close(http2.constants.NGHTTP2_CANCEL);
      await first.ended;
      await expect.poll(held, { timeout: 1000 }).toBe(0);
      expect((await unary(client, 'Quantize', REQUEST)).safetensors).toBeDefined();
      expect(await held(), 'the charge is freed once the call has ended').toBe(0);
    } finally {
      session.destroy();
    }
  });
});

describe('the idle timeout', () => {
  it('answers a call whose message stops half-way DEADLINE_EXCEEDED / STREAM_IDLE', async () => {
    const session = await connect();
    try {
      const { ended } = rawCall(session, '/quantd.v1.Quantizer/Quantize', 1 * MiB, 4096);
      const end = await ended;
      expect(end.status).toBe(grpc.status.DEADLINE_EXCEEDED);
      expect(end.quantdCode).toBe('STREAM_IDLE');
      expect(end.ms).toBeGreaterThanOrEqual(IDLE_MS);
      expect(end.ms).toBeLessThan(10 * IDLE_MS);
      expect(await held()).toBe(0);
    } finally {
      session.destroy();
    }
  });

  it('resets the stream of a client that stops reading its result', async () => {
    const session = await connect();
    try {
      // a Quantize result of 256 KiB to a client that reads nothing: its stream window (64 KiB)
      // closes, the server's write stops
      const message = await quantizerMessage('Quantize', REQUEST);
      const stream = session.request({
        ':method': 'POST',
        ':path': '/quantd.v1.Quantizer/Quantize',
        'content-type': 'application/grpc',
        te: 'trailers',
      });
      stream.on('error', () => undefined);
      const prefix = Buffer.alloc(5);
      prefix.writeUInt32BE(message.byteLength, 1);
      stream.end(Buffer.concat([prefix, message]));
      stream.pause();
      const started = Date.now();
      const rstCode = await Promise.race([
        new Promise<number>((resolve) => stream.once('close', () => resolve(stream.rstCode))),
        new Promise<null>((resolve) => setTimeout(() => resolve(null), 30 * IDLE_MS)),
      ]);
      expect(rstCode, 'the stream was reset').toBe(http2.constants.NGHTTP2_CANCEL);
      expect(Date.now() - started).toBeLessThan(20 * IDLE_MS);
      expect(await held()).toBe(0);
    } finally {
      session.destroy();
    }
  });
});

/** The bytes of an OperationRequest message of `rpc`. */
async function quantizerMessage(rpc: string, request: OperationRequest): Promise<Buffer> {
  const service = (await quantizerClass()).service as unknown as Record<
    string,
    { requestSerialize(m: unknown): Buffer }
  >;
  return service[rpc]!.requestSerialize(request);
}
