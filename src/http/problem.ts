/**
 * Errors as RFC 9457 problem details (application/problem+json), each carrying its catalogue
 * code. Fastify's own errors (unknown route, bad content type, malformed JSON) are mapped onto
 * the catalogue too, so every error a client sees has a stable code.
 */
import type { IncomingMessage } from 'node:http';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import {
  catalogue,
  isQuantdError,
  isServerFault,
  QuantdError,
  toQuantdError,
  type ErrorCode,
} from '../errors/index.js';
import { bodyBytesReceived } from './body.js';
import { awaitingContinue } from './continue.js';
import { discardInKernel, lingerOnClose } from './linger.js';

export const PROBLEM_TYPE = 'application/problem+json';

export interface Problem {
  readonly type: string;
  readonly title: string;
  readonly status: number;
  readonly detail: string;
  readonly code: ErrorCode;
  readonly instance: string;
  readonly request_id: string;
  readonly params: Readonly<Record<string, unknown>>;
}

/** The media type a request declared, as sent (for messages), or "(none)". */
function contentTypeOf(request: FastifyRequest | undefined): string {
  const type = request?.headers['content-type']?.trim();
  return type ? type : '(none)';
}

/** A QuantdError for anything thrown while handling a request. */
export function asQuantdError(err: unknown, request?: FastifyRequest): QuantdError {
  if (isQuantdError(err)) return err;
  const fe = err as Partial<FastifyError>;
  switch (fe.code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      // the message is Fastify's wording; the type is the request's own
      return new QuantdError('UNSUPPORTED_MEDIA_TYPE', { type: contentTypeOf(request) });
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new QuantdError('PAYLOAD_TOO_LARGE', {
        size: 'unknown',
        limit: 'the configured limit',
        setting: 'QUANTD_BODY_LIMIT',
      });
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new QuantdError('HEADER_INVALID', {
        header: 'Content-Length',
        detail: fe.message ?? '',
        value: String(request?.headers['content-length'] ?? ''),
      });
    default:
      if (typeof fe.statusCode === 'number' && fe.statusCode >= 400 && fe.statusCode < 500) {
        return new QuantdError('USAGE', { detail: fe.message ?? 'bad request' });
      }
      return toQuantdError(err);
  }
}

/** The problem document of `error` for the request at `instance` with id `requestId`. */
export function problemDocument(error: QuantdError, instance: string, requestId: string): Problem {
  const def = catalogue[error.code];
  return {
    type: `urn:quantd:error:${error.code}`,
    title: def.title,
    status: def.http,
    detail: error.message,
    code: error.code,
    instance,
    request_id: requestId,
    params: error.toJSON().params,
  };
}

export function problemOf(error: QuantdError, request: FastifyRequest): Problem {
  return problemDocument(error, request.url, String(request.id));
}

/** Headers every problem of this status carries. */
export function problemHeaders(status: number): Record<string, string> {
  if (status === 503) return { 'Retry-After': '1' };
  if (status === 429) return { 'Retry-After': '10' }; // a job quota: a job must finish first
  if (status === 401) return { 'WWW-Authenticate': 'Bearer realm="quantd"' };
  return {};
}

/** An unread remainder up to this size is read and discarded by Node: the connection lives on. */
const DISCARDABLE_BODY = 64 * 1024;

/**
 * Whether the connection must close after this answer: the request's body was not read to its
 * end and what is left of it is unbounded (chunked), large (refused on its headers: 413, 401,
 * 503), or no longer framed (read past a limit, cut short). Node reads and discards a small
 * remainder itself, keeping the connection.
 */
function mustClose(error: QuantdError, raw: IncomingMessage): boolean {
  if (raw.complete) return false;
  if (error.code === 'PAYLOAD_TOO_LARGE' || error.code === 'BODY_INCOMPLETE') return true;
  if (error.code === 'HEADER_INVALID' && error.params['header'] === 'Content-Length') return true;
  const declared = Number(raw.headers['content-length'] ?? NaN);
  if (!Number.isSafeInteger(declared)) return raw.headers['transfer-encoding'] !== undefined;
  return declared - bodyBytesReceived(raw) > DISCARDABLE_BODY;
}

/**
 * Settles the unread body of a request answered with `error`; true when the answer must close
 * the connection (send `Connection: close`). The rest of such a body is not wanted, and must not
 * be read as the next request: it is discarded while the problem is written and after it, until
 * the client has sent it all (linger.ts), so that the client reads the answer. The kernel drops
 * it where it can, else Node's parser reads it. A body cut short has nothing more to come, a
 * client waiting for 100 Continue sends none, and a client cut for its slowness is not waited for.
 */
export function settleUnreadBody(error: QuantdError, raw: IncomingMessage): boolean {
  if (!mustClose(error, raw)) return false;
  const lingers = error.code !== 'BODY_INCOMPLETE' && error.code !== 'BODY_TOO_SLOW';
  const sends = error.code !== 'BODY_INCOMPLETE' && !awaitingContinue(raw);
  if (sends && !(lingers && discardInKernel(raw.socket))) raw.resume();
  if (lingers) lingerOnClose(raw.socket);
  return true;
}

export function sendProblem(error: QuantdError, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const problem = problemOf(error, request);
  reply.headers(problemHeaders(problem.status));
  if (settleUnreadBody(error, request.raw)) reply.header('Connection', 'close');
  if (isServerFault(error.code)) request.log.error({ err: error, code: error.code }, error.message);
  else request.log.info({ code: error.code }, error.message);
  return reply.code(problem.status).type(PROBLEM_TYPE).send(problem);
}
