/**
 * HTTP/2 flow-control windows of the gRPC server, wider than Node's 64 KiB defaults.
 *
 * With 64 KiB per stream and per connection, a client may send 64 KiB and must then wait for the
 * server's WINDOW_UPDATE: a 2 MiB message takes 32 round trips, each a turn of both event loops.
 * Under a storm of refused calls (10× capacity, clients retrying at once) those turns are slow,
 * and the calls the server did admit starved: 6 finished in 4 s, against 114 with the windows
 * below (measured with grpc-js on both sides, 2 cores). A window only lets a client send ahead;
 * what it sends is read by the call that receives it, or dropped with a refused stream.
 *
 * grpc-js has no option for the server's windows, so this sets them where grpc-js creates its
 * HTTP/2 server: the settings it passes to Node, and each new session's connection window. Both
 * are grpc-js internals (pinned by package-lock.json); if they change, the server refuses to
 * start instead of silently running with the small windows (the test in test/grpc fails first).
 */
import type * as http2 from 'node:http2';
import type * as grpc from '@grpc/grpc-js';

export interface Windows {
  /** SETTINGS_INITIAL_WINDOW_SIZE: what a client may send on one stream ahead of the server. */
  readonly stream: number;
  /** The connection's window: what it may send on all its streams together. */
  readonly connection: number;
}

/** A 4 MiB message fits one stream's window; a few of them the connection's. */
export const WINDOWS: Windows = { stream: 4 * 2 ** 20, connection: 16 * 2 ** 20 };

interface GrpcServerInternals {
  commonServerOptions?: http2.ServerOptions;
  _setupHandlers?: (server: http2.Http2Server, ...rest: unknown[]) => unknown;
}

/** Widens the windows of every connection `server` will accept; call before binding it. */
export function widenWindows(server: grpc.Server, windows: Windows = WINDOWS): void {
  const internals = server as unknown as GrpcServerInternals;
  const options = internals.commonServerOptions;
  const setup = internals._setupHandlers;
  if (typeof options !== 'object' || typeof setup !== 'function') {
    throw new Error('@grpc/grpc-js changed its server internals: cannot set the HTTP/2 flow-control windows');
  }
  options.settings = { ...options.settings, initialWindowSize: windows.stream };
  internals._setupHandlers = (http2Server, ...rest) => {
    http2Server.on('session', (session: http2.ServerHttp2Session) => {
      session.setLocalWindowSize(windows.connection);
    });
    return setup.call(server, http2Server, ...rest);
  };
}
