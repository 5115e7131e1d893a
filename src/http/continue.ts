/**
 * `Expect: 100-continue`, answered when the body is wanted. A client that sends it (curl does for
 * bodies over 1 MiB) waits for the server's go-ahead before its body, so a request refused before
 * its body is read — 503 OVERLOADED, 401, 413, a 507 or 429 for an upload, a 400 for its options
 * — costs no body at all. Node answered 100 Continue on arrival, and a client then uploaded a
 * whole model only to be refused.
 *
 * The go-ahead goes out when something first reads the request's body (its `_read`), whichever
 * route or parser that is; a refusal sent before then leaves it unsent, and the client, seeing a
 * final status, sends no body.
 */
import type { IncomingMessage, Server } from 'node:http';
import type { FastifyInstance } from 'fastify';

/** Requests that still wait for their 100 Continue. */
const waiting = new WeakSet<IncomingMessage>();

/** Whether `request` asked for 100-continue and has not been told to send its body. */
export function awaitingContinue(request: IncomingMessage): boolean {
  return waiting.has(request);
}

export function continueWhenRead(app: FastifyInstance): void {
  // with a listener, Node leaves the 100 Continue to us and passes the request on as usual
  const server = app.server as Server;
  server.on('checkContinue', (request: IncomingMessage, response) => {
    waiting.add(request);
    const read = request._read.bind(request);
    request._read = (size: number) => {
      if (waiting.delete(request) && !response.headersSent) response.writeContinue();
      request._read = read;
      read(size);
    };
    server.emit('request', request, response);
  });
}
