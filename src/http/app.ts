/**
 * The Fastify application: op routes, health, readiness, metrics and docs, with the hooks every
 * request passes — bearer auth on every /v1 route (matched or not), then for matched /v1 routes
 * refusal while draining, early 413 on a declared oversize body and admission (503 + Retry-After
 * when the server is full: its slots, or the memory budget for the declared body), all before any
 * body is read; a response whose client stops reading is cut (stall.ts) — and one error handler
 * that turns everything into problem+json with a catalogue code (client-error.ts does the same for
 * requests Node's parser rejects). JSON bodies have small limits of their own (json-body.ts), and
 * every answer carries the security headers (security-headers.ts).
 */
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { Config } from '../config.js';
import { QuantdError } from '../errors/index.js';
import { describeKernels } from '../kernels/index.js';
import { Admission, LiveStreams, errorsForClients } from '../service/index.js';
import { makeAuthenticator } from '../service/auth.js';
import { setCaller } from './caller.js';
import type { ComputeHandle } from '../pool/index.js';
import { binaryBodyParser, bodyBytesReceived, declaredLength, stopBody } from './body.js';
import { jsonBodyParser } from './json-body.js';
import { watchBodyPace } from './pace.js';
import { answerExpectation, clientErrorHandler } from './client-error.js';
import { createMetrics, type HttpMetrics } from './metrics.js';
import { registerOpRoutes, OCTET_TYPE, SAFETENSORS_TYPE } from './op-routes.js';
import { registerJobRoutes } from './job-routes.js';
import { registerCalibrationRoutes } from './calibration-routes.js';
import { registerLinearErrorRoute } from './linear-error-route.js';
import { registerInspectRoute } from './inspect-route.js';
import { registerConsole } from './ui-routes.js';
import type { CalibrationStore } from '../service/calibration/store.js';
import { registerOipRoutes } from './oip-routes.js';
import type { JobManager } from '../jobs/manager.js';
import { registerDocs } from './openapi.js';
import { asQuantdError, sendProblem } from './problem.js';
import { admitRequest } from '../service/envelope.js';
import { continueWhenRead } from './continue.js';
import { installEarlyShed, routeAdmission } from './shed.js';
import { installSecurityHeaders } from './security-headers.js';
import { BODY_FACTOR, keepSlot } from './budget.js';
import { cutWhenStalled } from './stall.js';

export interface AppOptions {
  readonly config: Config;
  readonly handle: ComputeHandle;
  readonly version: string;
  /** False while draining for shutdown: /readyz answers 503 and new requests are refused. */
  readonly isReady: () => boolean;
  /**
   * Shared with the gRPC server (default: one of poolSize + queueLimit slots and the memory
   * budget, for this app alone).
   */
  readonly admission?: Admission;
  /** Result downloads' pool, shared with the gRPC server (default: QUANTD_DOWNLOAD_LIMIT of its own). */
  readonly downloads?: Admission;
  /** Live streams' cap, shared with the gRPC server (default: QUANTD_LIVE_STREAMS of its own). */
  readonly liveStreams?: LiveStreams;
  /** The job manager: /v1/jobs is served when given. */
  readonly jobs?: JobManager;
  /** Calibration sessions: /v1/calibrations is served when given. */
  readonly calibrations?: CalibrationStore;
  /** /metrics' registry, shared with the gRPC server (default: one of this app's own). */
  readonly metrics?: HttpMetrics;
  /**
   * Refuse compute requests before Fastify sees them while every slot is taken (shed.ts); default
   * true. Off, every refusal takes Fastify's path (tests compare the two answers).
   */
  readonly earlyShed?: boolean;
}

/** The API: every route under it needs the bearer token and takes an admission slot. */
const API_PREFIX = '/v1/';

/**
 * Whether a request is for the API. By the route it matched — the router decodes the path, so
 * /%761/quantize is /v1/quantize — and, for a request that matched nothing, by its path decoded
 * the same way (an undecodable path counts as the API: it gets the token check, never a pass).
 */
function isApiRequest(request: FastifyRequest): boolean {
  const route = request.routeOptions.url;
  if (route !== undefined) return route.startsWith(API_PREFIX);
  try {
    return decodeURIComponent(request.url.split('?', 1)[0]!).startsWith(API_PREFIX);
  } catch {
    return true;
  }
}

export async function buildApp(options: AppOptions): Promise<FastifyInstance> {
  const { config, handle } = options;
  // every problem this app sends names the server's files relative to its data directory
  const forClients = errorsForClients(config.dataDir);
  const problem = (err: unknown, request: FastifyRequest, reply: FastifyReply): FastifyReply =>
    sendProblem(forClients(asQuantdError(err, request)), request, reply);
  const app = Fastify({
    logger: { level: config.logLevel },
    requestIdHeader: 'x-request-id',
    bodyLimit: config.bodyLimit,
    forceCloseConnections: false,
    // While draining, requests on open connections reach the hooks below, which refuse API
    // requests with a problem (Fastify's own 503 would be plain JSON without a code).
    return503OnClosing: false,
    clientErrorHandler,
    // A connection must send each request's head within headersTimeout, or it is answered 408
    // HEAD_TOO_SLOW and closed (Node's default, 60 s checked every 30 s, let a client that sends
    // nothing, or blank lines, hold a connection for up to 90 s). Checked every second.
    http: {
      headersTimeout: config.headersTimeoutMs,
      connectionsCheckingInterval: Math.min(1000, config.headersTimeoutMs),
    },
    // Errors Fastify raises before routing (a path with malformed percent-encoding) are problems too.
    frameworkErrors: problem,
  });
  app.server.on('checkExpectation', answerExpectation);
  continueWhenRead(app);
  // Schemas document; quantd validates requests itself, with catalogue codes.
  app.setValidatorCompiler(() => () => true);

  const authenticate = makeAuthenticator(config.apiKeys, config.adminKeys);
  const admission =
    options.admission ?? new Admission(config.poolSize + config.queueLimit, config.memoryBudget);
  const downloads = options.downloads ?? new Admission(config.downloadLimit);
  const liveStreams = options.liveStreams ?? new LiveStreams(config.liveStreams, config.liveStreamsPerClient);
  const metrics =
    options.metrics ?? createMetrics(handle, options.jobs, { admission, downloads, liveStreams });
  const pace = { idleMs: config.bodyIdleMs, minBytesPerSecond: config.bodyMinRate };
  if (options.earlyShed !== false) {
    const { isReady } = options;
    installEarlyShed(app, {
      admission,
      isReady,
      authenticate,
      bodyLimit: config.bodyLimit,
      metrics,
      log: app.log,
    });
  }
  // after early shedding: its refusals carry the headers too
  installSecurityHeaders(app.server);

  // Binary bodies for every route; the op routes accept nothing else (op-routes.ts). JSON within
  // QUANTD_JSON_LIMIT, never Fastify's own parsers: they read up to the body limit, then decode
  // into one string that V8 cannot hold past 512 MiB (json-body.ts). No text/plain: no route
  // takes it, so it is 415 before the body is read.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser([SAFETENSORS_TYPE, OCTET_TYPE], binaryBodyParser(config.bodyLimit));
  app.addContentTypeParser(
    'application/json',
    jsonBodyParser(app, { limit: config.jsonLimit, setting: 'QUANTD_JSON_LIMIT' }),
  );

  app.addHook('onRequest', async (request, reply) => {
    const started = process.hrtime.bigint();
    let release: (() => void) | undefined = undefined;
    // Every body must keep a minimum pace (pace.ts), or the server stops reading it: 408.
    const hasBody =
      request.headers['transfer-encoding'] !== undefined ||
      Number(request.headers['content-length'] ?? 0) > 0;
    const unwatch = hasBody
      ? watchBodyPace(request.raw, pace, (err) => {
          request.log.info({ err }, 'request body too slow: stopped reading it');
          stopBody(request.raw, err);
        })
      : undefined;
    // One listener does the bookkeeping of every request: metrics, and the admission slot.
    reply.raw.once('close', () => {
      unwatch?.();
      release?.();
      const route = request.routeOptions.url ?? 'unmatched';
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      const bytesIn = bodyBytesReceived(request.raw);
      const bytesOut = Number(reply.getHeader('content-length') ?? 0) || 0;
      metrics.observe(route, request.method, reply.statusCode, seconds, bytesIn, bytesOut);
    });
    if (!isApiRequest(request)) return;
    // Every API path needs the token, routes that do not exist too (no route probing).
    if (authenticate) setCaller(request, authenticate(request.headers.authorization));
    if (request.routeOptions.url === undefined) return; // the not-found handler answers
    // /v1 bodies are never compressed (/v2 decodes gzip and deflate itself): a coding the server
    // would otherwise ignore must not be read as the raw bytes it is not
    const coding = request.headers['content-encoding']?.trim().toLowerCase();
    if (coding !== undefined && coding !== '' && coding !== 'identity') {
      throw new QuantdError('ENCODING_UNSUPPORTED', {
        value: request.headers['content-encoding']!.replace(/[^\x20-\x7e]/g, '?').slice(0, 100),
        detail: 'send /v1 bodies uncompressed (identity)',
      });
    }
    // draining comes first: retry elsewhere or later (503 + Retry-After), whatever the request
    if (!options.isReady()) throw new QuantdError('SHUTTING_DOWN', {});
    // the route's own limit where it sets one (uploads to /v1/jobs: QUANTD_UPLOAD_LIMIT); a live
    // stream (GET /v1/jobs/events) computes nothing: it must not hold a compute slot, nor a
    // download of a finished file, which is I/O (its own pool: never-read downloads once held
    // every compute slot)
    const rule = routeAdmission(
      request.routeOptions.config,
      request.routeOptions.bodyLimit,
      config.bodyLimit,
    );
    const declared = declaredLength(request.headers['content-length'], rule.limit, rule.setting);
    if (rule.pool === 'download') release = admitRequest({ admission: downloads, isReady: options.isReady });
    if (rule.pool !== 'compute') return;
    const slot = admitRequest({ admission, isReady: options.isReady });
    release = slot;
    keepSlot(request.raw, slot);
    // a declared body is charged now, before a byte of it is read; a chunked one as it grows
    if (rule.chargesBody && declared !== null && declared > 0) {
      slot.charge(declared * BODY_FACTOR, `a body of ${declared} bytes`);
    }
  });

  app.addHook('onSend', (request, reply, payload, done) => {
    // While draining, every response closes its connection: keep-alive clients must not hold the
    // server open until QUANTD_SHUTDOWN_TIMEOUT_MS.
    if (!options.isReady()) reply.header('Connection', 'close');
    // from here the client must read what is sent, or be cut
    cutWhenStalled(reply.raw, config.streamIdleMs, request.log);
    done(null, payload);
  });

  app.setErrorHandler(problem);
  app.setNotFoundHandler((request, reply) =>
    problem(
      new QuantdError('NOT_FOUND', { detail: `no route ${request.method} ${request.url}` }),
      request,
      reply,
    ),
  );

  await registerDocs(app, options.version);

  // Probes come every few seconds: their request lines are logged only when debugging.
  const probeLogLevel = config.logLevel === 'debug' || config.logLevel === 'trace' ? config.logLevel : 'warn';
  app.get(
    '/healthz',
    {
      logLevel: probeLogLevel,
      schema: { tags: ['operations'], summary: 'Liveness; reports the kernel backend' },
    },
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
    {
      logLevel: probeLogLevel,
      schema: { tags: ['operations'], summary: 'Readiness: pool up, not draining' },
    },
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

  await registerOpRoutes(app, {
    compute: handle.compute,
    requestTimeoutMs: config.requestTimeoutMs,
    bodyLimit: config.bodyLimit,
    inlineLimit: config.inlineLimit,
  });
  await registerLinearErrorRoute(app, { compute: handle.compute, requestTimeoutMs: config.requestTimeoutMs });
  registerInspectRoute(app);
  await registerConsole(app);
  if (options.jobs) {
    await registerJobRoutes(app, {
      jobs: options.jobs,
      uploadLimit: config.uploadLimit,
      jsonLimit: config.jsonLimit,
      liveStreams,
      streamIdleMs: config.streamIdleMs,
    });
  }
  if (options.calibrations) {
    await registerCalibrationRoutes(app, {
      calibrations: options.calibrations,
      requestTimeoutMs: config.requestTimeoutMs,
      importLimit: config.calibrationImportLimit,
    });
  }
  // Open Inference Protocol (KServe v2 / Triton) under /v2: its own auth, admission and error
  // format (oip-routes.ts; health open, metadata and inference behind the token).
  await registerOipRoutes(app, {
    compute: handle.compute,
    admission,
    authenticate,
    isReady: options.isReady,
    isWarm: () => handle.pool === null || handle.pool.started,
    version: options.version,
    bodyLimit: config.bodyLimit,
    jsonLimit: config.oipJsonLimit,
    requestTimeoutMs: config.requestTimeoutMs,
    inlineLimit: config.inlineLimit,
  });
  return app;
}
