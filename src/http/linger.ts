/**
 * Lingering close, as web servers do it: after an answer that closes the connection while the
 * client is still sending its body (a 503 or 413 decided on the headers), the server sends its
 * FIN and keeps reading, discarding, until the client has finished or LINGER_MS has passed.
 *
 * Closing at once is what Node does, and then the client's next bytes reach a closed socket: its
 * kernel answers with a reset, and a reset makes the client's kernel drop what it had received
 * and not yet read — the 503 itself. Under 10× load a few refused clients in a thousand got no
 * answer at all, only ECONNRESET, for a request the server had answered.
 */
import type { Socket } from 'node:net';

/** How long a closing connection keeps reading what its client still sends. */
export const LINGER_MS = 2000;

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
    this.once('end', () => this.destroy()); // the client has finished sending
  };
}
