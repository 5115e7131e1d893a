/**
 * gRPC admission on the call's metadata (src/grpc/early-admission.ts) and the server's HTTP/2
 * windows (src/grpc/flow-control.ts), seen by a raw HTTP/2 client, which can send a call's
 * metadata and hold back its message as no gRPC client library does:
 *  - the slot is taken when the metadata arrives: while a call's message is still on its way,
 *    the server counts it, and a capacity-1 server refuses the next call OVERLOADED (a check
 *    that only looked for a free slot let every call of a burst through, each then refused after
 *    its whole message had been received);
 *  - a call that ends before its message arrives gives its slot back;
 *  - the windows: 4 MiB per stream, 16 MiB per connection.
 */
import * as http2 from 'node:http2';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { WINDOWS } from '../../src/grpc/flow-control.js';
import {
  bytesOf,
  eventually,
  expectGrpcError,
  floats,
  quantizerClient,
  startTestServer,
  unary,
  type OperationRequest,
  type QuantizerClient,
  type TestServer,
} from './helpers.js';

const REQUEST: OperationRequest = {
  tensor: { dtype: 'float32', shape: [4, 8], data: bytesOf(floats(32, 5)) },
};

let t: TestServer;
let client: QuantizerClient;

beforeAll(async () => {
  // capacity 1: one worker, no queue
  t = await startTestServer({ QUANTD_POOL_SIZE: '1', QUANTD_QUEUE_LIMIT: '0' });
  client = await quantizerClient(t.target);
});
afterAll(async () => {
  client?.close();
  await t?.server.shutdown('test');
});

/** An HTTP/2 connection to the gRPC port. */
function connect(): Promise<http2.ClientHttp2Session> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://${t.target}`);
    session.once('remoteSettings', () => resolve(session));
    session.once('error', reject);
  });
}

/**
 * A Quantize call whose metadata is sent with the first bytes of a 1 MiB message, the rest held
 * back: the call is open on the server, its handler not yet started.
 */
function callWithoutItsMessage(session: http2.ClientHttp2Session): http2.ClientHttp2Stream {
  const stream = session.request({
    ':method': 'POST',
    ':path': '/quantd.v1.Quantizer/Quantize',
    'content-type': 'application/grpc',
    te: 'trailers',
  });
  const prefix = Buffer.alloc(5);
  prefix.writeUInt32BE(1 << 20, 1); // not compressed, 1 MiB follows
  stream.write(Buffer.concat([prefix, Buffer.alloc(100)]));
  stream.on('error', () => undefined);
  return stream;
}

/** Runs `check` every 50 ms until it gives true (true) or 3 s have passed (false). */
async function until(check: () => Promise<boolean>): Promise<boolean> {
  const end = Date.now() + 3000;
  while (Date.now() < end) {
    if (await check()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
}

describe('admission on the metadata', () => {
  it('a call whose message is still arriving holds the slot; the slot comes back when it ends', async () => {
    expect(
      (await unary(client, 'Quantize', REQUEST)).safetensors,
      'the premise: a call succeeds',
    ).toBeDefined();

    const session = await connect();
    try {
      const held = callWithoutItsMessage(session);
      // once the held call's metadata has reached the server, the next call is refused
      let refused: grpc.ServiceError | undefined;
      const refusedSoon = await until(() =>
        unary(client, 'Quantize', REQUEST).then(
          () => false,
          (err: grpc.ServiceError) => ((refused = err), true),
        ),
      );
      expect(refusedSoon, 'a call is refused while the held call has the slot').toBe(true);
      expectGrpcError(refused!, 'OVERLOADED');

      held.close(http2.constants.NGHTTP2_CANCEL);
      const admittedSoon = await until(() =>
        unary(client, 'Quantize', REQUEST).then(
          () => true,
          () => false,
        ),
      );
      expect(admittedSoon, 'the slot is given back when the held call ends').toBe(true);
    } finally {
      session.destroy(); // the held call with it, however the test ended
    }
  });
});

describe('HTTP/2 flow-control windows', () => {
  it(`${WINDOWS.stream / 2 ** 20} MiB per stream, ${WINDOWS.connection / 2 ** 20} MiB per connection`, async () => {
    const session = await connect();
    try {
      expect(session.remoteSettings.initialWindowSize).toBe(WINDOWS.stream);
      // the connection's window grows by a WINDOW_UPDATE right after the settings
      expect(await eventually(() => (session.state.remoteWindowSize ?? 0) >= WINDOWS.connection, 2000)).toBe(
        true,
      );
    } finally {
      session.close();
    }
  });
});
