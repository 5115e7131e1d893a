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
 * The same holds while the slots are not all taken but the memory budget is: a request whose
 * declared body would not fit the bytes left is answered here too.
 *
 * The answer is the one the onRequest hook (app.ts) would give: this path only answers when every
 * check the hook makes before admission passes — a static route under /v1/ that takes a slot,
 * the bearer token when keys are set, no content coding, not draining, a declared length within
 * the route's limit, a body the budget could hold at all. Anything else goes to Fastify as before,
 * which answers it as before.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';

import { QuantdError } from '../errors/index.js';
import type { Admission } from '../service/index.js';
import { bodyBytesReceived, declaredLength } from './body.js';
import { BODY_FACTOR } from './budget.js';
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

/**
 * A route's admission options (its Fastify `config`): `holdsNoSlot` for a live stream, which
 * computes nothing (GET /v1/jobs/events: capped on its own, src/service/live-streams.ts);
 * `download` for a route that sends a finished file from disk (its own pool,
 * QUANTD_DOWNLOAD_LIMIT); `bodyOnDisk` for one that streams its body to disk (its bytes are not
 * held in memory); `limitSetting`, the setting that names its own body limit.
 */
export interface RouteAdmissionConfig {
  readonly holdsNoSlot?: boolean;
  readonly download?: boolean;
  readonly bodyOnDisk?: boolean;
  readonly limitSetting?: string;
}

/** What admission makes of a route (its config and bodyLimit): the onRequest hook's rule too. */
export interface RouteAdmission {
  /**
   * The pool it takes a slot from: compute (the pool's threads and queue, and the memory
   * budget), download (QUANTD_DOWNLOAD_LIMIT), or none (a live stream).
   */
  readonly pool: 'compute' | 'download' | 'none';
  /** It takes a compute slot. */
  readonly takesSlot: boolean;
  /** Its declared body is held in memory: charged against the budget at admission. */
  readonly chargesBody: boolean;
  /** Its body limit (its own, else QUANTD_BODY_LIMIT) and the setting that names it. */
  readonly limit: number;
  readonly setting: string;
}

export function routeAdmission(
  config: unknown,
  bodyLimit: number | undefined,
  defaultLimit: number,
): RouteAdmission {
  const own = config as RouteAdmissionConfig | undefined;
  const pool = own?.holdsNoSlot === true ? 'none' : own?.download === true ? 'download' : 'compute';
  return {
    pool,
    takesSlot: pool === 'compute',
    chargesBody: pool === 'compute' && own?.bodyOnDisk !== true,
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
  const full = admission.inFlight >= admission.capacity;
  // a free slot and nothing charged: no request that passes the hook's checks is refused
  if ((!full && admission.bytesInFlight === 0) || !options.isReady()) return undefined;
  const url = req.url ?? '';
  const query = url.indexOf('?');
  const route = routes.get(`${req.method ?? ''} ${query < 0 ? url : url.slice(0, query)}`);
  if (route === undefined) return undefined;
  const coding = req.headers['content-encoding']?.trim().toLowerCase();
  if (coding !== undefined && coding !== '' && coding !== 'identity') return undefined;
  let declared: number | null;
  try {
    options.authenticate?.(req.headers.authorization);
    declared = declaredLength(req.headers['content-length'], route.limit, route.setting);
  } catch {
    return undefined; // 401, 400 or 413 first: the hook answers those
  }
  if (full) return route;
  const bytes = route.chargesBody && declared !== null ? declared * BODY_FACTOR : 0;
  // a body larger than the whole budget is the hook's 413 (MEMORY_BUDGET_EXCEEDED), not a 503
  if (bytes > admission.budget || admission.admits(bytes)) return undefined;
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
