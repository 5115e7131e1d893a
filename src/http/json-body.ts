/**
 * JSON request bodies, read within a small limit of their own.
 *
 * Why: Fastify's JSON and text parsers read a body up to the server's body limit (2 GiB, sized
 * for tensors) and then decode it into one string; V8's strings end at 2^29 - 24 characters, so a
 * body between 512 MiB and the limit made Node throw ERR_STRING_TOO_LONG outside any handler and
 * end the process (4–11 s after the send). Here a JSON body is refused on its declared length
 * before a byte is read (413 PAYLOAD_TOO_LARGE naming the setting), a chunked one as soon as it
 * passes the limit, and it is decoded as strict UTF-8 (a malformed byte is a 400, not a silent
 * U+FFFD) and parsed by Fastify's own secure parser (no __proto__ or constructor.prototype keys),
 * with every failure a rejected promise that the route's error handler answers. A route that
 * carries larger JSON names its own limit in its config (jsonLimitOf); a route whose JSON may hold
 * such keys as data sets `jsonPlain` and gets JSON.parse (own data properties, never a prototype).
 *
 * text/plain gets no parser at all: no route takes it, so it is 415 before the body is read.
 */
import type { IncomingMessage } from 'node:http';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { QuantdError } from '../errors/index.js';
import { declaredLength, readBody } from './body.js';

/** A JSON body's limit and the setting that sets it (named in the 413). */
export interface JsonLimit {
  readonly limit: number;
  readonly setting: string;
}

/** The JSON limit of `request`'s route: its config's `jsonLimit`, else `fallback`. */
export function jsonLimitOf(request: FastifyRequest, fallback: JsonLimit): JsonLimit {
  const own = request.routeOptions.config as { jsonLimit?: JsonLimit } | undefined;
  return own?.jsonLimit ?? fallback;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * The body of `request` as text, read from `payload` within `limit`: refused before reading
 * when its declared length is over the limit, cut as soon as a chunked body passes it, and
 * refused when it is not UTF-8.
 */
export async function readJsonText(
  request: FastifyRequest,
  payload: IncomingMessage,
  { limit, setting }: JsonLimit,
): Promise<string> {
  const bytes = await readBody(
    payload,
    declaredLength(request.headers['content-length'], limit, setting),
    limit,
    setting,
  );
  try {
    return utf8.decode(bytes);
  } catch {
    throw new QuantdError('USAGE', { detail: 'the JSON request body is not valid UTF-8' });
  }
}

/**
 * The content-type parser of application/json for `app`'s routes: the route's JSON limit (or
 * `fallback`), then Fastify's secure JSON parse. A request that matched no route is not read at
 * all: its 404 needs no body (problem.ts closes the connection if much of it is left).
 */
export function jsonBodyParser(
  app: FastifyInstance,
  fallback: JsonLimit,
): (request: FastifyRequest, payload: IncomingMessage) => Promise<unknown> {
  const parse = app.getDefaultJsonParser('error', 'error');
  return async (request, payload) => {
    if (request.is404) return undefined;
    const text = await readJsonText(request, payload, jsonLimitOf(request, fallback));
    if ((request.routeOptions.config as { jsonPlain?: boolean } | undefined)?.jsonPlain === true) {
      // a route whose JSON may name keys such as __proto__ as data (calibration imports)
      try {
        return text === '' ? null : (JSON.parse(text) as unknown);
      } catch (err) {
        throw new QuantdError('USAGE', { detail: `the body is not JSON: ${(err as Error).message}` });
      }
    }
    return new Promise((resolve, reject) =>
      parse(request, text, (err, body) => (err ? reject(err) : resolve(body))),
    );
  };
}
