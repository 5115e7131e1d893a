/**
 * The Fastify application: op routes, health, readiness, metrics and docs, with the hooks every
 * request passes — early 413 on a declared oversize body, bearer auth on /v1, admission (503 +
 * Retry-After when the server is full, before any body is read) — and one error handler that
 * turns everything into problem+json with a catalogue code.
 */
import type { IncomingMessage } from 'node:http';
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify';
import type { Config } from '../config.js';
import { QuantdError } from '../errors/index.js';
import { describeKernels } from '../kernels/index.js';
import { Admission } from '../service/index.js';
import type { ComputeHandle } from '../pool/index.js';
import { makeAuthenticator } from './auth.js';
import { declaredLength, readBody } from './body.js';
import { createMetrics } from './metrics.js';
import { registerOpRoutes, OCTET_TYPE, SAFETENSORS_TYPE } from './op-routes.js';
import { registerDocs } from './openapi.js';
import { asQuantdError, sendProblem } from './problem.js';

export interface AppOptions {
  readonly config: Config;
  readonly handle: ComputeHandle;
  readonly version: string;
  /** False while draining for shutdown: /readyz answers 503 and new requests are refused. */
  readonly isReady: () => boolean;
  /** Shared with the gRPC server (default: one of poolSize + queueLimit for this app alone). */
  readonly admission?: Admission;
}

const OP_PREFIX = '/v1/';

export async function buildApp(options: AppOptions): Promise<FastifyInstance> {
  const { config, handle } = options;
  const app = Fastify({
    logger: { level: config.logLevel },
    requestIdHeader: 'x-request-id',
    bodyLimit: config.bodyLimit,
    forceCloseConnections: false,
    return503OnClosing: true,
  });
  // Schemas document; quantd validates requests itself, with catalogue codes.
  app.setValidatorCompiler(() => () => true);

  const metrics = createMetrics(handle);
  const authenticate = makeAuthenticator(config.apiKeys);
  const admission = options.admission ?? new Admission(config.poolSize + config.queueLimit);

  app.addContentTypeParser(
    [SAFETENSORS_TYPE, OCTET_TYPE],
    async (request: FastifyRequest, payload: IncomingMessage) => {
      const length = declaredLength(request.headers['content-length'], config.bodyLimit);
      return readBody(payload, length, config.bodyLimit);
    },
  );

  app.addHook('onRequest', async (request, reply) => {
    const started = process.hrtime.bigint();
    let release: (() => void) | undefined;
    // One listener does the bookkeeping of every request: metrics, and the admission slot.
    reply.raw.once('close', () => {
      release?.();
      const route = request.routeOptions.url ?? 'unmatched';
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      const bytesIn = Number(request.headers['content-length'] ?? 0) || 0;
      const bytesOut = Number(reply.getHeader('content-length') ?? 0) || 0;
      metrics.observe(route, request.method, reply.statusCode, seconds, bytesIn, bytesOut);
    });
    if (!request.url.startsWith(OP_PREFIX)) return;
    authenticate?.(request.headers.authorization);
    if (!options.isReady()) throw new QuantdError('CANCELLED', { detail: ': the server is shutting down' });
    declaredLength(request.headers['content-length'], config.bodyLimit);
    release = admission.acquire();
  });

  app.setErrorHandler((err, request, reply) => sendProblem(asQuantdError(err), request, reply));
  app.setNotFoundHandler((request, reply) =>
    sendProblem(
      new QuantdError('NOT_FOUND', { detail: `no route ${request.method} ${request.url}` }),
      request,
      reply,
    ),
  );

  await registerDocs(app, options.version);

  app.get(
    '/healthz',
    { schema: { tags: ['operations'], summary: 'Liveness; reports the kernel backend' } },
    async () => ({
      status: 'ok',
      version: options.version,
      backend: handle.kernels.backend,
      isa: handle.kernels.isa,
      kernels: describeKernels(handle.kernels),
      uptime_seconds: Math.round(process.uptime()),
    }),
  );
  app.get(
    '/readyz',
    { schema: { tags: ['operations'], summary: 'Readiness: pool up, not draining' } },
    async (_req, reply) => {
      const ready = options.isReady() && (handle.pool === null || handle.pool.started);
      return reply
        .code(ready ? 200 : 503)
        .send({ status: ready ? 'ready' : 'not ready', draining: !options.isReady() });
    },
  );
  app.get('/metrics', { schema: { hide: true } }, async (_req, reply) =>
    reply.type(metrics.registry.contentType).send(await metrics.registry.metrics()),
  );

  registerOpRoutes(app, { compute: handle.compute, requestTimeoutMs: config.requestTimeoutMs });
  return app;
}
