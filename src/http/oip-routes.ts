/**
 * The Open Inference Protocol (KServe v2 / Triton) over HTTP, under /v2 (docs/oip.md): health,
 * server and model metadata, and inference on the four quantd models, with the binary tensor data
 * extension. Everything protocol-specific is in src/oip/; this file carries bytes.
 *
 * What stock clients need, and differs from /v1: bodies are taken whatever their Content-Type
 * (or none), gzip / deflate bodies (Content-Encoding) are decompressed — QUANTD_BODY_LIMIT
 * bounds the decompressed size too, and QUANTD_OIP_JSON_LIMIT the JSON part — and errors are `{"error": "CODE: message"}` as
 * application/json, with the catalogue's status. Health (live, ready, model ready) is open;
 * metadata and inference need the bearer token when QUANTD_API_KEYS is set, and inference takes
 * an admission slot (503 OVERLOADED when full; SHUTTING_DOWN while draining) before its body is
 * read, and charges its body against the memory budget (a declared one then, a chunked one as it
 * grows, a compressed one again once decompressed).
 */
import { Readable } from 'node:stream';
import { constants as bufferConstants } from 'node:buffer';
import type { IncomingMessage } from 'node:http';
import { promisify } from 'node:util';
import zlib from 'node:zlib';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { QuantdError, catalogue, isServerFault } from '../errors/index.js';
import {
  HEADER_LENGTH_HEADER,
  encodeRestResponse,
  errorJson,
  findModel,
  inferSignal,
  modelMetadata,
  parseRestInfer,
  prepareInfer,
  runInfer,
  serverMetadata,
  type InferResult,
} from '../oip/index.js';
import { PlanCache, type Admission, type Compute } from '../service/index.js';
import { declaredLength, readBody } from './body.js';
import { asQuantdError, problemHeaders, settleUnreadBody } from './problem.js';
import { admitRequest } from '../service/envelope.js';
import { BODY_FACTOR, keepSlot, slotOf } from './budget.js';

export const OIP_PREFIX = '/v2';

export interface OipRouteDeps {
  readonly compute: Compute;
  readonly admission: Admission;
  /** The bearer-token check (null: authentication off). */
  readonly authenticate: ((header: string | undefined) => void) | null;
  /** False while draining for shutdown: inference is refused, readiness answers false. */
  readonly isReady: () => boolean;
  /** Whether the compute can take work now (the pool is up): readiness. */
  readonly isWarm: () => boolean;
  readonly version: string;
  readonly bodyLimit: number;
  /** QUANTD_OIP_JSON_LIMIT: the largest JSON part of an inference request. */
  readonly jsonLimit: number;
  readonly requestTimeoutMs: number;
  /** Tensors under this many elements are computed in the request's thread (QUANTD_INLINE_LIMIT). */
  readonly inlineLimit: number;
}

/** Routes answered without the bearer token: health probes. */
const OPEN_ROUTES = new Set([
  '/v2/health/live',
  '/v2/health/ready',
  '/v2/models/:model/ready',
  '/v2/models/:model/versions/:version/ready',
]);

/** Responses up to this size go out in one write. */
const SMALL_RESPONSE = 1024 * 1024;

const asBuffer = (v: Uint8Array): Buffer => Buffer.from(v.buffer, v.byteOffset, v.byteLength);

const DECODERS = {
  gzip: promisify(zlib.gunzip),
  'x-gzip': promisify(zlib.gunzip),
  deflate: promisify(zlib.inflate),
  raw: promisify(zlib.inflateRaw),
} as const;

/** The request's content coding: identity, gzip or deflate (one of them). */
function contentCoding(header: string | undefined): 'identity' | 'gzip' | 'x-gzip' | 'deflate' {
  const codings = (header ?? '')
    .split(',')
    .map((c) => c.trim().toLowerCase())
    .filter((c) => c !== '' && c !== 'identity');
  if (codings.length === 0) return 'identity';
  const [coding] = codings;
  if (codings.length === 1 && (coding === 'gzip' || coding === 'x-gzip' || coding === 'deflate'))
    return coding;
  throw new QuantdError('HEADER_INVALID', {
    header: 'Content-Encoding',
    detail: 'must be gzip, deflate or identity',
    value: String(header).slice(0, 80),
  });
}

/**
 * How far a compressed body may expand: real tensors (JSON or binary) compress a few times, zeros
 * a few hundred; a "zip bomb" a million. A body may grow to this many times its compressed size
 * (at least MIN_INFLATED bytes), and never past the body limit.
 */
const MAX_INFLATION = 256;
const MIN_INFLATED = 64 * 1024 * 1024;

/**
 * A compressed body, decompressed off the event loop (zlib's thread pool) into at most its
 * allowance (MAX_INFLATION, the body limit): a body that would grow past it is refused as soon as
 * it does (PAYLOAD_TOO_LARGE), so a small "zip bomb" costs little memory and time. "deflate" is
 * the zlib format (RFC 9110); a raw deflate stream, as some clients send, is recognised by its
 * missing zlib header.
 */
async function decompress(
  body: Uint8Array,
  coding: 'gzip' | 'x-gzip' | 'deflate',
  { limit, setting }: BodyLimit,
): Promise<Uint8Array> {
  const zlibHeader =
    body.byteLength >= 2 && (body[0]! & 0x0f) === 8 && ((body[0]! << 8) | body[1]!) % 31 === 0;
  const decode = coding === 'deflate' && !zlibHeader ? DECODERS.raw : DECODERS[coding];
  const allowance = Math.min(limit, Math.max(MIN_INFLATED, body.byteLength * MAX_INFLATION));
  try {
    return await decode(body, { maxOutputLength: Math.min(allowance, bufferConstants.MAX_LENGTH) });
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    if (e.code === 'ERR_BUFFER_TOO_LARGE' || e instanceof RangeError) {
      throw new QuantdError('PAYLOAD_TOO_LARGE', {
        size: `more than ${allowance} decompressed (${MAX_INFLATION} times its ${body.byteLength} compressed bytes, or ${MIN_INFLATED})`,
        limit,
        setting,
      });
    }
    throw new QuantdError('HEADER_INVALID', {
      header: 'Content-Encoding',
      detail: `names ${coding}, but the body does not decompress (${e.message})`,
      value: coding,
    });
  }
}

interface BodyLimit {
  readonly limit: number;
  readonly setting: string;
}

/**
 * The limit of a request's body, sent and decompressed: QUANTD_BODY_LIMIT, and for a body that is
 * JSON alone (no Inference-Header-Content-Length: no binary data follows) QUANTD_OIP_JSON_LIMIT
 * too. JSON is parsed on the event loop, and decoded into one string first, which V8 cannot hold
 * past 512 MiB.
 */
function bodyLimitOf(request: FastifyRequest, deps: OipRouteDeps): BodyLimit {
  if (request.headers[HEADER_LENGTH_HEADER] !== undefined || deps.jsonLimit >= deps.bodyLimit) {
    return { limit: deps.bodyLimit, setting: 'QUANTD_BODY_LIMIT' };
  }
  return { limit: deps.jsonLimit, setting: 'QUANTD_OIP_JSON_LIMIT' };
}

/**
 * Refuses, before the body is read, a request whose declared length or declared JSON part
 * (Inference-Header-Content-Length) is over its limit; a malformed header is left to the parse.
 */
function checkDeclared(request: FastifyRequest, deps: OipRouteDeps): void {
  const { limit, setting } = bodyLimitOf(request, deps);
  declaredLength(request.headers['content-length'], limit, setting);
  const header = request.headers[HEADER_LENGTH_HEADER];
  const part = typeof header === 'string' && /^\s*\d+\s*$/.test(header) ? Number(header) : NaN;
  if (part > deps.jsonLimit) {
    throw new QuantdError('PAYLOAD_TOO_LARGE', {
      size: part,
      limit: deps.jsonLimit,
      setting: 'QUANTD_OIP_JSON_LIMIT, for the JSON part: send larger tensors as binary data',
    });
  }
}

/**
 * The body parser of /v2: any Content-Type (or none), decompressed, within its limit. A request
 * that matched no route is not read: its 404 needs no body.
 */
function oipBodyParser(
  deps: OipRouteDeps,
): (request: FastifyRequest, payload: IncomingMessage) => Promise<Uint8Array | undefined> {
  return async (request, payload) => {
    if (request.is404) return undefined;
    const coding = contentCoding(request.headers['content-encoding']);
    const limit = bodyLimitOf(request, deps);
    const slot = slotOf(request.raw);
    const charge = (bytes: number): void => slot?.charge(bytes * BODY_FACTOR, `a body of ${bytes} bytes`);
    const length = declaredLength(request.headers['content-length'], limit.limit, limit.setting);
    const body = await readBody(payload, length, limit.limit, limit.setting, charge);
    if (coding === 'identity') return body;
    const decoded = await decompress(body, coding, limit);
    charge(decoded.byteLength);
    return decoded;
  };
}

function sendError(err: unknown, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const error = asQuantdError(err, request);
  const status = catalogue[error.code].http;
  reply.headers(problemHeaders(status));
  // the rest of the body is not wanted: discarded while answering and after, so that a client
  // still sending reads its answer (a refusal before the body, a 413, comes here too), then closed
  if (settleUnreadBody(error, request.raw)) reply.header('Connection', 'close');
  if (isServerFault(error.code)) request.log.error({ err: error, code: error.code }, error.message);
  else request.log.info({ code: error.code }, error.message);
  return reply.code(status).type('application/json').send(errorJson(error));
}

interface ModelParams {
  readonly model: string;
  readonly version?: string;
}

async function infer(
  deps: OipRouteDeps,
  plans: PlanCache,
  request: FastifyRequest,
  reply: FastifyReply,
): Promise<FastifyReply> {
  const { model, version } = request.params as ModelParams;
  const body = request.body instanceof Uint8Array ? request.body : undefined;
  const prepared = prepareInfer(
    parseRestInfer(body, request.headers[HEADER_LENGTH_HEADER], model, version, {
      limit: deps.jsonLimit,
      setting: 'QUANTD_OIP_JSON_LIMIT',
    }),
  );
  const timing = inferSignal(prepared, deps.requestTimeoutMs, deps.inlineLimit);
  reply.raw.once('close', () => {
    if (!reply.raw.writableFinished) {
      timing.cancel(new QuantdError('CANCELLED', { detail: ': the client closed the connection' }));
    }
  });
  let result: InferResult;
  try {
    result = await runInfer(prepared, deps.compute, timing.signal, plans);
  } finally {
    timing.dispose();
  }
  reply.raw.once('close', result.release);
  timing.check();
  const { json, binary } = encodeRestResponse(result);
  if (binary.length === 0) return reply.type('application/json').send(json);
  const head = Buffer.from(json, 'utf8');
  const length = binary.reduce((n, b) => n + b.byteLength, head.byteLength);
  reply
    .header('Inference-Header-Content-Length', String(head.byteLength))
    .header('Content-Length', String(length))
    .type('application/octet-stream');
  const parts = [head, ...binary.map(asBuffer)];
  if (length <= SMALL_RESPONSE) return reply.send(Buffer.concat(parts, length));
  return reply.send(Readable.from(parts, { objectMode: false }));
}

const schema = (summary: string): { schema: Record<string, unknown> } => ({
  schema: { tags: ['open inference protocol'], summary },
});

/** /v2, in a scope of its own: its own body parser, error format and not-found answer. */
export function registerOipRoutes(app: FastifyInstance, deps: OipRouteDeps): PromiseLike<unknown> {
  const plans = new PlanCache();
  return app.register(
    async (scope) => {
      scope.removeAllContentTypeParsers();
      scope.addContentTypeParser('*', oipBodyParser(deps));
      scope.setErrorHandler((err, request, reply) => sendError(err, request, reply));
      scope.setNotFoundHandler((request, reply) => {
        try {
          deps.authenticate?.(request.headers.authorization);
          throw new QuantdError('NOT_FOUND', {
            detail: `no route ${request.method} ${request.url.split('?')[0]}`,
          });
        } catch (err) {
          return sendError(err, request, reply);
        }
      });

      scope.addHook('onRequest', async (request, reply) => {
        const route = request.routeOptions.url;
        if (route !== undefined && OPEN_ROUTES.has(route)) return;
        deps.authenticate?.(request.headers.authorization);
        if (route === undefined || !route.endsWith('/infer')) return;
        // before the body is read: the model exists, the server takes work, the body fits
        const { model, version } = request.params as ModelParams;
        findModel(model, version);
        // draining comes first: retry elsewhere or later (503 + Retry-After), as /v1
        if (!deps.isReady()) throw new QuantdError('SHUTTING_DOWN', {});
        checkDeclared(request, deps);
        const declared = declaredLength(request.headers['content-length'], deps.bodyLimit);
        const slot = admitRequest({ admission: deps.admission, isReady: deps.isReady });
        reply.raw.once('close', slot);
        keepSlot(request.raw, slot);
        if (declared !== null && declared > 0) {
          slot.charge(declared * BODY_FACTOR, `a body of ${declared} bytes`);
        }
      });

      // GET /v2 and GET /v2/ (Fastify's prefixTrailingSlash 'both'): the protocol's text gives
      // server metadata the first, KServe's OpenAPI document (rest_predict_v2.yaml) the second
      scope.get('/', schema('Server metadata'), async () => serverMetadata(deps.version));
      scope.get('/health/live', schema('Server liveness'), async () => ({ live: true }));
      scope.get('/health/ready', schema('Server readiness'), async (_request, reply) => {
        const ready = deps.isReady() && deps.isWarm();
        return reply.code(ready ? 200 : 503).send({ live: true, ready });
      });
      for (const base of ['/models/:model', '/models/:model/versions/:version']) {
        scope.get(base, schema('Model metadata'), async (request) => {
          const { model, version } = request.params as ModelParams;
          return modelMetadata(findModel(model, version));
        });
        scope.get(`${base}/ready`, schema('Model readiness'), async (request, reply) => {
          const { model, version } = request.params as ModelParams;
          const found = findModel(model, version);
          const ready = deps.isReady() && deps.isWarm();
          return reply.code(ready ? 200 : 503).send({ name: found.name, ready });
        });
        scope.post(`${base}/infer`, schema('Inference'), (request, reply) =>
          infer(deps, plans, request, reply),
        );
      }
    },
    { prefix: OIP_PREFIX },
  );
}
