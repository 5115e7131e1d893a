/**
 * Requests Node's HTTP parser rejects before or while Fastify sees them ('clientError'): a
 * malformed or duplicate Content-Length, a connection half-closed in the middle of a body,
 * oversized headers. Fastify's default answers these with its own JSON; here they get problem+json
 * with a catalogue code like every other error:
 *  - a body cut short while its request is being handled: the body reader (body.ts) is told to
 *    stop, and the request's own error path answers BODY_INCOMPLETE with the counts, its id and
 *    its path, on the half-closed connection;
 *  - anything else: a problem written straight to the socket (HEADER_INVALID for Content-Length,
 *    USAGE for other malformed requests), then the connection is closed.
 */
import { randomUUID } from 'node:crypto';
import { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { QuantdError } from '../errors/index.js';
import { endBodyEarly } from './body.js';
import { PROBLEM_TYPE, problemDocument, problemHeaders } from './problem.js';
import { SECURITY_HEADERS } from './security-headers.js';

interface ParserError extends Error {
  code?: string;
  reason?: string;
  rawPacket?: Buffer;
}

/** The request line's target and the named headers of a raw request head (best effort). */
function parseHead(raw: Buffer | undefined): { target: string; headers: Map<string, string[]> } {
  const text = raw ? raw.toString('latin1') : '';
  const end = text.indexOf('\r\n\r\n');
  const lines = (end < 0 ? text : text.slice(0, end)).split('\r\n');
  const target = /^[A-Z]+ (\S+) HTTP\//.exec(lines[0] ?? '')?.[1] ?? '';
  const headers = new Map<string, string[]>();
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(':');
    if (colon <= 0) continue;
    const name = line.slice(0, colon).trim().toLowerCase();
    headers.set(name, [...(headers.get(name) ?? []), line.slice(colon + 1).trim()]);
  }
  return { target, headers };
}

/** Printable and short: a header value echoed in a message. */
const shown = (value: string): string => value.replace(/[^\x20-\x7e]/g, '?').slice(0, 200);

function errorFor(err: ParserError, headers: Map<string, string[]>, timeoutMs: number): QuantdError {
  const lengths = headers.get('content-length') ?? [];
  switch (err.code) {
    case 'HPE_INVALID_CONTENT_LENGTH':
      return new QuantdError('HEADER_INVALID', {
        header: 'Content-Length',
        detail: 'must be a byte count',
        value: shown(lengths.join(', ')),
      });
    case 'HPE_UNEXPECTED_CONTENT_LENGTH':
    case 'HPE_INVALID_TRANSFER_ENCODING': {
      const encodings = headers.get('transfer-encoding') ?? [];
      if (lengths.length > 0 && encodings.length > 0) {
        return new QuantdError('HEADER_INVALID', {
          header: 'Content-Length',
          detail: 'must not be sent together with Transfer-Encoding',
          value: shown(lengths.join(', ')),
        });
      }
      if (lengths.length > 1) {
        return new QuantdError('HEADER_INVALID', {
          header: 'Content-Length',
          detail: 'must be given once',
          value: shown(lengths.join(', ')),
        });
      }
      return new QuantdError('HEADER_INVALID', {
        header: 'Transfer-Encoding',
        detail: 'must end with chunked',
        value: shown(encodings.join(', ')),
      });
    }
    case 'HPE_HEADER_OVERFLOW':
      return new QuantdError('HEADER_INVALID', {
        header: 'fields',
        detail: 'are larger than the server accepts',
        value: `${err.rawPacket?.byteLength ?? 'too many'} bytes`,
      });
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      // Node's headersTimeout (the server sets no requestTimeout of its own): the head was slow.
      return new QuantdError('HEAD_TOO_SLOW', { ms: timeoutMs });
    case 'HPE_INVALID_EOF_STATE':
      return new QuantdError('USAGE', { detail: 'the connection ended in the middle of a request' });
    default:
      return new QuantdError('USAGE', {
        detail: `malformed HTTP request: ${err.reason ?? err.code ?? err.message}`,
      });
  }
}

/** Sockets already answered: the parser may report the same connection again. */
const answered = new WeakSet<Socket>();

/** Fastify's `clientErrorHandler` option (Fastify calls it with `this` the root instance). */
export function clientErrorHandler(this: FastifyInstance, error: Error, socket: Socket): void {
  const err = error as ParserError;
  // A reset connection is gone: nothing to answer.
  if (err.code === 'ECONNRESET' || socket.destroyed || answered.has(socket)) return;
  const inFlight = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
  if (err.code === 'HPE_INVALID_EOF_STATE' && inFlight && !inFlight.headersSent && !inFlight.req.complete) {
    // The client half-closed its connection mid-body: the body reader stops there and the request
    // is answered BODY_INCOMPLETE on this socket (still writable: the server allows half-open
    // connections), which then closes.
    endBodyEarly(inFlight.req);
    return;
  }
  const { target, headers } = parseHead(err.rawPacket);
  const problemError = errorFor(err, headers, this.server.headersTimeout);
  this.log.info({ code: problemError.code, parserError: err.code }, problemError.message);
  // As Node does: write an answer only where no response of this connection has begun.
  if (!socket.writable || (inFlight && inFlight.headersSent)) {
    socket.destroy(err);
    return;
  }
  answered.add(socket);
  const requestId = shown(headers.get('x-request-id')?.[0] ?? '') || randomUUID();
  const problem = problemDocument(problemError, shown(target), requestId);
  const body = JSON.stringify(problem);
  const head = Object.entries({
    ...SECURITY_HEADERS,
    'Content-Type': PROBLEM_TYPE,
    'Content-Length': String(Buffer.byteLength(body)),
    ...problemHeaders(problem.status),
    Connection: 'close',
  })
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('');
  // the answer, FIN, and the socket closed once written
  socket.end(`HTTP/1.1 ${problem.status} ${STATUS_CODES[problem.status] ?? ''}\r\n${head}\r\n${body}`, () =>
    socket.destroy(),
  );
}

/**
 * Node's answer to an `Expect` it does not understand is a bare 417 ('checkExpectation' without
 * a listener): this one is a problem with its code, and the connection closes (the body, if the
 * client sends one anyway, is not read).
 */
export function answerExpectation(request: IncomingMessage, response: ServerResponse): void {
  const error = new QuantdError('EXPECTATION_FAILED', {
    value: shown(String(request.headers['expect'] ?? '')),
  });
  const requestId = shown(String(request.headers['x-request-id'] ?? '')) || randomUUID();
  const body = JSON.stringify(problemDocument(error, shown(request.url ?? ''), requestId));
  // 'checkExpectation' comes instead of 'request': the security headers are not set yet
  response.writeHead(417, {
    ...SECURITY_HEADERS,
    'Content-Type': PROBLEM_TYPE,
    'Content-Length': String(Buffer.byteLength(body)),
    Connection: 'close',
  });
  response.end(body);
}
