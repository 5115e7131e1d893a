/**
 * The HTTP server's socket helpers (the addon's native/addon/sockets.c), on real loopback sockets:
 *  - discardInKernel (src/http/linger.ts): a refused client's body is dropped by the kernel,
 *    never read by the server (its bytesRead stays at the head), the client still writes it all
 *    and reads the answer, and the connection ends with a FIN once the client has finished;
 *  - acceptMore (src/http/multi-accept.ts): connections waiting in the listen queue while the
 *    loop was busy are accepted several in one loop iteration (Node's libuv takes one per
 *    handle), and close() stops every handle at once but completes only when the connections
 *    of every handle have ended.
 * Linux only, where the addon has them; elsewhere the server does without, as these tests do.
 */
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { Worker } from 'node:worker_threads';
import { afterEach, describe, expect, it } from 'vitest';

import { loadSocketHelpers } from '../../src/kernels/native.js';
import { discardInKernel, lingerOnClose } from '../../src/http/linger.js';
import { acceptMore } from '../../src/http/multi-accept.js';

const helpers = loadSocketHelpers();
const linux = process.platform === 'linux';

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const portOf = (server: { address(): unknown }): number => (server.address() as AddressInfo).port;

describe('socket helpers', () => {
  it('the addon offers them on Linux', () => {
    expect(helpers !== undefined).toBe(linux);
  });
});

describe.runIf(helpers !== undefined)('discardInKernel', () => {
  it('drops a refused body uncopied; the client sends it all, reads the answer, and gets a FIN', async () => {
    const BODY = 8 << 20;
    const ANSWER = 'HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n';
    let serverSide: Socket | undefined;
    let discarding: boolean | undefined;
    const server = createServer({ allowHalfOpen: true }, (socket) => {
      serverSide = socket;
      // the head has been read by the time a refusal is decided: take one chunk, then refuse
      socket.once('data', () => {
        discarding = discardInKernel(socket);
        lingerOnClose(socket);
        socket.write(ANSWER, () => socket.destroySoon());
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    cleanups.push(() => new Promise<void>((r) => server.close(() => r())));
    cleanups.push(() => void serverSide?.destroy());
    const client = connect(portOf(server), '127.0.0.1');
    cleanups.push(() => void client.destroy());
    client.pause(); // a blocking client: it reads nothing until its body is sent
    const seen = await new Promise<{ text: string; error: string | null }>((resolve) => {
      let text = '';
      let error: string | null = null;
      client.on('data', (d: Buffer) => (text += d.toString('latin1')));
      client.on('error', (e: NodeJS.ErrnoException) => (error = e.code ?? e.message));
      client.on('close', () => resolve({ text, error }));
      client.write(`POST / HTTP/1.1\r\nContent-Length: ${BODY}\r\n\r\n`);
      client.end(Buffer.alloc(BODY), () => client.resume());
    });
    expect(discarding).toBe(true);
    expect(seen.error, 'no reset: the answer was read').toBeNull();
    expect(seen.text).toBe(ANSWER);
    await new Promise((r) => (serverSide!.destroyed ? r(undefined) : serverSide!.once('close', r)));
    expect(serverSide!.bytesRead, 'the server read the head, not the body').toBeLessThan(1 << 20);
  });
});

/** Opens `count` connections from a worker thread; resolves `connected` (an Int32Array flag). */
function connectFromWorker(port: number, count: number): { flag: Int32Array; worker: Worker } {
  const flag = new Int32Array(new SharedArrayBuffer(4));
  const worker = new Worker(
    `
    const { connect } = require('node:net');
    const { workerData, parentPort } = require('node:worker_threads');
    const { port, count, flag } = workerData;
    let open = 0;
    const sockets = [];
    for (let i = 0; i < count; i++) {
      const s = connect(port, '127.0.0.1', () => {
        if (++open === count) { Atomics.store(flag, 0, 1); Atomics.notify(flag, 0); }
      });
      s.on('error', () => {});
      sockets.push(s);
    }
    parentPort.on('message', () => { for (const s of sockets) s.destroy(); parentPort.close(); });
    `,
    { eval: true, workerData: { port, count, flag } },
  );
  return { flag, worker };
}

/**
 * The most connections `server` accepted in one loop iteration, of `count` that connected while
 * this thread's loop was blocked (they wait in the listen queue meanwhile).
 */
async function acceptedPerIteration(server: HttpServer, count: number): Promise<number> {
  let iteration = 0;
  const perIteration = new Map<number, number>();
  let ticking = true;
  const tick = (): void => {
    iteration++;
    if (ticking) setImmediate(tick);
  };
  setImmediate(tick);
  let accepted = 0;
  const allAccepted = new Promise<void>((resolve) =>
    server.on('connection', () => {
      perIteration.set(iteration, (perIteration.get(iteration) ?? 0) + 1);
      if (++accepted === count) resolve();
    }),
  );
  const { flag, worker } = connectFromWorker(portOf(server), count);
  cleanups.push(async () => {
    worker.postMessage('done');
    await worker.terminate();
  });
  // block this loop until every connection is established (in the kernel, not yet accepted)
  while (Atomics.load(flag, 0) === 0) Atomics.wait(flag, 0, 0, 50);
  await allAccepted;
  ticking = false;
  return Math.max(...perIteration.values());
}

async function listening(): Promise<HttpServer> {
  const server = createHttpServer((_req, res) => res.end('ok'));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  cleanups.push(() => new Promise<void>((r) => server.close(() => r())));
  cleanups.push(() => server.closeAllConnections());
  return server;
}

describe.runIf(helpers !== undefined)('acceptMore', () => {
  it('accepts several queued connections per loop iteration', async () => {
    const server = await listening();
    expect(await acceptMore(server, 4)).toBe(3);
    expect(await acceptedPerIteration(server, 12)).toBeGreaterThanOrEqual(2);
  });

  it('close() stops every handle at once and completes when the last connection has ended', async () => {
    const server = await listening();
    await acceptMore(server, 4);
    const port = portOf(server);
    // which handle accepted each connection: the server's own, or one acceptMore added (net's
    // record of the accepting server, which counts the connection until it ends)
    const byExtraHandle = new Map<number, boolean>();
    server.on('connection', (s: Socket) =>
      byExtraHandle.set(s.remotePort!, (s as Socket & { _server?: unknown })._server !== server),
    );
    const clients: Socket[] = [];
    for (let i = 0; i < 64 && ![...byExtraHandle.values()].includes(true); i++) {
      clients.push(
        await new Promise<Socket>((resolve) => {
          const c = connect(port, '127.0.0.1', () => resolve(c));
        }),
      );
      await new Promise((r) => setTimeout(r, 5)); // accepted, by whichever handle
    }
    const extra = (c: Socket): boolean => byExtraHandle.get(c.localPort!) === true;
    expect(clients.some(extra), 'a connection accepted by an added handle').toBe(true);
    let closed = false;
    server.close(() => (closed = true));
    const refused = await new Promise<string>((resolve) => {
      const c = connect(port, '127.0.0.1', () => resolve('connected'));
      c.on('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
    });
    expect(refused, 'no handle listens after close()').toBe('ECONNREFUSED');
    // the connections of the server's own handle end first: those of the added ones remain
    for (const c of clients.filter((c) => !extra(c))) c.destroy();
    await new Promise((r) => setTimeout(r, 200));
    expect(closed, 'close() waits for the connections of the added handles').toBe(false);
    for (const c of clients.filter(extra)) c.destroy();
    await new Promise((r) => setTimeout(r, 200));
    expect(closed).toBe(true);
  });
});
