/**
 * Lingering close, as web servers do it: after an answer that closes the connection while the
 * client is still sending its body (a 503 or 413 decided on the headers), the server sends its
 * FIN and keeps discarding what arrives until the client has finished or LINGER_MS has passed.
 *
 * Closing at once is what Node does, and then the client's next bytes reach a closed socket: its
 * kernel answers with a reset, and a reset makes the client's kernel drop what it had received
 * and not yet read — the 503 itself. Under 10× load a few refused clients in a thousand got no
 * answer at all, only ECONNRESET, for a request the server had answered.
 *
 * Discarding is done by the kernel where the addon offers it (native/addon/sockets.c, Linux, TCP):
 * from the moment of the refusal the socket is no longer read, and a short timer has the kernel
 * drop what has arrived, with no copy and no JavaScript per chunk. Reading refused bodies through
 * Node's parser cost the event loop most of its time under a storm of refused 2 MiB uploads, and
 * a busy loop accepts new connections late (Node's libuv accepts one per loop iteration). Without
 * the addon, Node's parser reads and discards, as it did before.
 */
import type { Socket } from 'node:net';

import { loadSocketHelpers, type SocketHelpers } from '../kernels/native.js';

/** How long a closing connection keeps discarding what its client still sends. */
export const LINGER_MS = 2000;
/** How often the kernel is asked to drop what refused connections have received. */
export const DISCARD_INTERVAL_MS = 4;

type DiscardReceived = SocketHelpers['discardReceived'];

/** A socket whose body is being dropped by the kernel. */
interface Discarding {
  /** The client has finished sending (its FIN was seen). */
  clientDone: boolean;
  /** The answer is out and the server's side closed: destroy once the client is done. */
  closing: boolean;
}

/** The fd and readStop of a TCP socket's libuv handle (Node's TCPWrap; not in its typings). */
interface TcpHandle {
  readonly fd?: number;
  readStop(): number;
}

const discarding = new Map<Socket, Discarding>();
let ticker: NodeJS.Timeout | undefined;
let systemDiscard: DiscardReceived | null | undefined;

function defaultDiscard(): DiscardReceived | undefined {
  if (systemDiscard === undefined) systemDiscard = loadSocketHelpers()?.discardReceived ?? null;
  return systemDiscard ?? undefined;
}

function handleOf(socket: Socket): TcpHandle | undefined {
  const handle = (socket as unknown as { _handle?: TcpHandle | null })._handle ?? undefined;
  return typeof handle?.fd === 'number' && handle.fd >= 0 ? handle : undefined;
}

/**
 * Stops reading `socket` and has the kernel drop its incoming bytes from now on; false (and
 * nothing changed) where that is not possible: no addon, not Linux, not a plain TCP socket (TLS,
 * a Unix socket). The caller then reads and discards in JavaScript.
 */
export function discardInKernel(socket: Socket, discard = defaultDiscard()): boolean {
  if (discard === undefined || socket.destroyed || typeof socket.remotePort !== 'number') return false;
  if ((socket as { encrypted?: boolean }).encrypted === true) return false;
  const handle = handleOf(socket);
  if (handle === undefined) return false;
  handle.readStop();
  discarding.set(socket, { clientDone: false, closing: false });
  socket.once('close', () => discarding.delete(socket));
  ticker ??= setInterval(() => dropReceived(discard), DISCARD_INTERVAL_MS).unref();
  dropReceived(discard);
  return true;
}

/** One tick: every discarding socket's received bytes dropped; finished ones destroyed. */
function dropReceived(discard: DiscardReceived): void {
  for (const [socket, state] of discarding) {
    const handle = handleOf(socket);
    if (socket.destroyed || handle === undefined) {
      discarding.delete(socket);
      continue;
    }
    if (state.clientDone) continue;
    // Node may start reading again (a resumed request stream): the parser must not see the body
    handle.readStop();
    const dropped = discard(handle.fd!);
    if (dropped >= 0) continue;
    if (dropped === -2) {
      discarding.delete(socket);
      socket.destroy();
      continue;
    }
    state.clientDone = true;
    // the client has finished: nothing is left unread, so closing sends a FIN, not a reset
    if (state.closing) closeWhenWritten(socket);
  }
  if (discarding.size === 0 && ticker !== undefined) {
    clearInterval(ticker);
    ticker = undefined;
  }
}

/**
 * Makes the close that follows this socket's current response a lingering one. Node ends the
 * socket of a `Connection: close` response with destroySoon(), so that is what is replaced.
 */
export function lingerOnClose(socket: Socket): void {
  socket.destroySoon = function lingeringClose(this: Socket): void {
    if (this.destroyed) return;
    this.end(); // the FIN follows the response; the socket stays readable (half-open)
    const timer = setTimeout(() => this.destroy(), LINGER_MS);
    timer.unref();
    this.once('close', () => clearTimeout(timer));
    const state = discarding.get(this);
    if (state === undefined) {
      this.once('end', () => this.destroy()); // the client has finished sending
    } else if (state.clientDone) {
      closeWhenWritten(this);
    } else {
      state.closing = true; // dropReceived closes it at the client's FIN
    }
  };
}

/** Destroys the socket once what was written to it (the answer, the FIN) has gone out. */
function closeWhenWritten(socket: Socket): void {
  discarding.delete(socket);
  if (socket.writableFinished) socket.destroy();
  else socket.once('finish', () => socket.destroy());
}
