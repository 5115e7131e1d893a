/**
 * A response whose client stops reading is cut after QUANTD_STREAM_IDLE_MS.
 *
 * Why: a download that is never read held its admission slot for as long as the client kept the
 * connection open — 66 of them made every compute request 503 for a whole 330 s run, and the
 * request timeout does not apply to a response already being sent. Node's socket timeout is the
 * right clock: it restarts on every byte read or written, and while a write waits in the socket
 * it fires only if that write has made no progress since the last check (net.js compares the
 * handle's write queue), so a slow reader that keeps reading is not cut, one that stopped is. It
 * is armed when the response starts (a request still computing is the request timeout's), and
 * Node replaces it with the keep-alive timeout once the response is out.
 */
import type { ServerResponse } from 'node:http';
import type { FastifyBaseLogger } from 'fastify';

export function cutWhenStalled(response: ServerResponse, idleMs: number, log: FastifyBaseLogger): void {
  response.setTimeout(idleMs, () => {
    log.info(
      { idleMs, unsent: response.socket?.writableLength },
      'response stalled: client not reading; cut',
    );
    // the status line went out long ago: closing the connection before the declared length is
    // the only way left to tell the client (and it frees the slot: the response closes)
    response.destroy();
  });
}
