/**
 * Errors as RFC 9457 problem details (application/problem+json), each carrying its catalogue
 * code. Fastify's own errors (unknown route, bad content type, malformed JSON) are mapped onto
 * the catalogue too, so every error a client sees has a stable code.
 */
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { catalogue, isQuantdError, QuantdError, type ErrorCode } from '../errors/index.js';

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

/** A QuantdError for anything thrown while handling a request. */
export function asQuantdError(err: unknown): QuantdError {
  if (isQuantdError(err)) return err;
  const fe = err as Partial<FastifyError>;
  switch (fe.code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new QuantdError('UNSUPPORTED_MEDIA_TYPE', { type: fe.message?.split(': ')[1] ?? 'unknown' });
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new QuantdError('PAYLOAD_TOO_LARGE', { size: 'unknown', limit: 'the configured limit' });
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new QuantdError('HEADER_INVALID', {
        header: 'Content-Length',
        detail: fe.message ?? '',
        value: '',
      });
    default:
      if (typeof fe.statusCode === 'number' && fe.statusCode >= 400 && fe.statusCode < 500) {
        return new QuantdError('USAGE', { detail: fe.message ?? 'bad request' });
      }
      return new QuantdError('INTERNAL', { detail: err instanceof Error ? err.message : String(err) });
  }
}

export function problemOf(error: QuantdError, request: FastifyRequest): Problem {
  const def = catalogue[error.code];
  return {
    type: `urn:quantd:error:${error.code}`,
    title: def.title,
    status: def.http,
    detail: error.message,
    code: error.code,
    instance: request.url,
    request_id: String(request.id),
    params: error.toJSON().params,
  };
}

export function sendProblem(error: QuantdError, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const problem = problemOf(error, request);
  if (problem.status === 503) reply.header('Retry-After', '1');
  if (problem.status === 401) reply.header('WWW-Authenticate', 'Bearer realm="quantd"');
  if (problem.status >= 500) request.log.error({ err: error, code: error.code }, error.message);
  else request.log.info({ code: error.code }, error.message);
  return reply.code(problem.status).type('application/problem+json').send(problem);
}
