/**
 * Early shedding: while every admission slot is taken, a request to a compute route is answered
 * 503 OVERLOADED as it arrives, before Fastify builds its request, runs its hooks and routes it.
 *
 * Why: under a storm of refused uploads (clients that reconnect and send again at once) the
 * refusals themselves were most of the event loop's work — Fastify's request, hook chain, thrown
 * error and reply, about a millisecond each on a small machine — and Node's libuv accepts one new
 * connection per loop iteration, so a busy loop made every new client wait in the listen queue
 * (p99 ~250 ms for an answer the server decided in under 5 ms). Answered here, a refusal costs a
 * few tens of microseconds, and with its body dropped by the kernel (linger.ts) the loop stays
 * free to accept.
 *
 * The answer is the one the onRequest hook (app.ts) would give: this path only answers when every
 * check the hook makes before admission passes — a static route under /v1/ that takes a slot,
 * the bearer token when keys are set, no content coding, not draining, a declared length within
 * the route's limit. Anything else goes to Fastify as before, which answers it as before.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';

import { QuantdError } from '../errors/index.js';
import type { Admission } from '../service/index.js';
import { bodyBytesReceived, declaredLength } from './body.js';
import type { HttpMetrics } from './metrics.js';
import { PROBLEM_TYPE, problemDocument, problemHeaders, settleUnreadBody } from './problem.js';

export interface EarlyShedOptions {
  readonly admission: Admission;
  /** False while draining: those refusals are SHUTTING_DOWN, left to the hook. */
  readonly isReady: () => boolean;
  /** Throws for a missing or unknown token (null: no keys set). */
  readonly authenticate: ((header: string | undefined) => unknown) | null;
  /** QUANTD_BODY_LIMIT: a route's limit unless it sets its own. */
  readonly bodyLimit: number;
  readonly metrics: HttpMetrics;
  readonly log: FastifyBaseLogger;
}

/** What admission makes of a route (its config and bodyLimit): the onRequest hook's rule too. */
export interface RouteAdmission {
  /** It takes a compute slot (a live stream, GET /v1/jobs/events, does not). */
  readonly takesSlot: boolean;
  /** Its body limit (its own, else QUANTD_BODY_LIMIT) and the setting that names it. */
  readonly limit: number;
  readonly setting: string;
}

export function routeAdmission(
  config: unknown,
  bodyLimit: number | undefined,
  defaultLimit: number,
): RouteAdmission {
  const own = config as { limitSetting?: string; holdsNoSlot?: boolean } | undefined;
  return {
    takesSlot: own?.holdsNoSlot !== true,
    limit: bodyLimit ?? defaultLimit,
    setting: own?.limitSetting ?? 'QUANTD_BODY_LIMIT',
  };
}

/** A route early shedding answers for. */
interface ShedRoute extends RouteAdmission {
  readonly url: string;
}

const API_PREFIX = '/v1/';
const BODY_METHODS = new Set(['POST', 'PUT', 'PATCH']);

/**
 * Installs early shedding on `app`: call before the routes are registered (it learns them as
 * they are added) and after Fastify has made its server.
 */
export function installEarlyShed(app: FastifyInstance, options: EarlyShedOptions): void {
  // "POST /v1/quantize" → the route: static paths only (a parametric path is left to the router)
  const routes = new Map<string, ShedRoute>();
  app.addHook('onRoute', (route) => {
    const admission = routeAdmission(route.config, route.bodyLimit, options.bodyLimit);
    if (!route.url.startsWith(API_PREFIX) || /[:*]/.test(route.url) || !admission.takesSlot) return;
    for (const method of [route.method].flat()) {
      if (BODY_METHODS.has(method)) routes.set(`${method} ${route.url}`, { url: route.url, ...admission });
    }
  });
  const server = app.server as Server;
  const handlers = server.listeners('request') as ((req: IncomingMessage, res: ServerResponse) => void)[];
  server.removeAllListeners('request');
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    const route = routes.size > 0 ? shedding(req, routes, options) : undefined;
    if (route !== undefined) refuse(req, res, route, options);
    else for (const handler of handlers) handler.call(server, req, res);
  });
}

/** The route of `req` when it is to be refused OVERLOADED here, else undefined (Fastify's). */
function shedding(
  req: IncomingMessage,
  routes: ReadonlyMap<string, ShedRoute>,
  options: EarlyShedOptions,
): ShedRoute | undefined {
  const { admission } = options;
  if (admission.inFlight < admission.capacity || !options.isReady()) return undefined;
  const url = req.url ?? '';
  const query = url.indexOf('?');
  const route = routes.get(`${req.method ?? ''} ${query < 0 ? url : url.slice(0, query)}`);
  if (route === undefined) return undefined;
  const coding = req.headers['content-encoding']?.trim().toLowerCase();
  if (coding !== undefined && coding !== '' && coding !== 'identity') return undefined;
  try {
    options.authenticate?.(req.headers.authorization);
    declaredLength(req.headers['content-length'], route.limit, route.setting);
  } catch {
    return undefined; // 401, 400 or 413 first: the hook answers those
  }
  return route;
}

/** Answers `req` 503 OVERLOADED as sendProblem would, and counts it as the hook would. */
function refuse(
  req: IncomingMessage,
  res: ServerResponse,
  route: ShedRoute,
  options: EarlyShedOptions,
): void {
  const started = process.hrtime.bigint();
  const { admission } = options;
  const error = new QuantdError('OVERLOADED', { queued: admission.inFlight, limit: admission.capacity });
  const header = req.headers['x-request-id'];
  const requestId = typeof header === 'string' && header !== '' ? header : randomUUID();
  const body = JSON.stringify(problemDocument(error, req.url ?? '', requestId));
  const bytesOut = Buffer.byteLength(body);
  const headers: Record<string, string> = {
    ...problemHeaders(503),
    'content-type': `${PROBLEM_TYPE}; charset=utf-8`,
    'content-length': String(bytesOut),
  };
  if (settleUnreadBody(error, req)) headers['connection'] = 'close';
  res.once('close', () => {
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    options.metrics.observe(route.url, req.method ?? '', 503, seconds, bodyBytesReceived(req), bytesOut);
  });
  options.log.info({ reqId: requestId, code: error.code }, error.message);
  res.writeHead(503, headers);
  res.end(body);
}
