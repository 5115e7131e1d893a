/**
 * More than one accept per event-loop iteration. Node 20's libuv accepts one connection per
 * listening handle and loop iteration; when the loop is busy (uploads being read, answers being
 * written) new connections wait in the kernel's listen queue, however little the server then
 * spends on them. Under a storm of clients that are refused and connect again, the queue held
 * 20-25 connections and a client waited for its accept ~10× longer than the server took to answer.
 *
 * So the server listens through ACCEPTORS handles on duplicates of its one listening socket (the
 * addon's duplicateDescriptor): each accepts in every iteration, and hands its connection to the
 * HTTP server as Node documents ('connection'). The port, the socket and its backlog are the same;
 * closing the server closes them all at once. Where the addon has no socket helpers (not Linux,
 * not built) the server keeps its one handle.
 */
import type { Server as HttpServer } from 'node:http';
import { createServer, type Server, type ServerOpts } from 'node:net';

import { loadSocketHelpers } from '../kernels/native.js';

/** Listening handles in all: up to this many connections accepted per loop iteration. */
export const ACCEPTORS = 16;

/** The options `server` makes its sockets with (an HTTP server keeps half-open ones, sets no delay). */
function socketOptionsOf(server: HttpServer): ServerOpts {
  const own = server as unknown as Required<
    Pick<
      ServerOpts,
      'allowHalfOpen' | 'pauseOnConnect' | 'noDelay' | 'keepAlive' | 'keepAliveInitialDelay' | 'highWaterMark'
    >
  >;
  return {
    allowHalfOpen: own.allowHalfOpen,
    pauseOnConnect: own.pauseOnConnect,
    noDelay: own.noDelay,
    keepAlive: own.keepAlive,
    keepAliveInitialDelay: own.keepAliveInitialDelay,
    highWaterMark: own.highWaterMark,
  };
}

/** Adds ACCEPTORS - 1 listening handles to a listening `server`; returns how many it added. */
export async function acceptMore(server: HttpServer, acceptors = ACCEPTORS): Promise<number> {
  const helpers = loadSocketHelpers();
  const fd = (server as unknown as { _handle?: { fd?: number } | null })._handle?.fd;
  if (helpers === undefined || typeof fd !== 'number' || fd < 0) return 0;
  const extra: Server[] = [];
  for (let i = 1; i < acceptors; i++) {
    const copy = helpers.duplicateDescriptor(fd);
    if (copy < 0) break;
    const acceptor = createServer(socketOptionsOf(server), (socket) => server.emit('connection', socket));
    try {
      await new Promise<void>((resolve, reject) => {
        acceptor.once('error', reject);
        acceptor.listen({ fd: copy }, () => {
          acceptor.off('error', reject);
          resolve();
        });
      });
    } catch {
      break; // the handles so far serve (only an unusable socket fails here)
    }
    extra.push(acceptor);
  }
  if (extra.length === 0) return 0;
  // Closing the server must stop every handle from accepting, at once (close() stops accepting
  // and then waits for the connections; its 'close' event would come too late), and is done
  // once the connections of every handle have ended: each handle counts those it accepted.
  const close = server.close.bind(server);
  server.close = ((callback?: (err?: Error) => void) => {
    const drained = extra.map((acceptor) => new Promise<void>((resolve) => acceptor.close(() => resolve())));
    return close((err?: Error) => {
      void Promise.all(drained).then(() => callback?.(err));
    });
  }) as typeof server.close;
  return extra.length;
}
