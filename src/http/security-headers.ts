/**
 * The headers every HTTP answer carries, whatever answers it: a route, a problem, a 404, the
 * early shed (shed.ts), a live stream (job-events.ts), /v2, /metrics, /docs and /ui.
 *
 * Why every answer: the API's JSON and result files are served to whoever holds a key, often
 * through the console in a browser; a browser that sniffed a result as HTML, framed a page, sent
 * a URL with an id to another site, let another origin embed a response, or cached a tenant's
 * result on disk would give that data away. The console (/ui) and the API docs (/docs) are pages
 * and set a Content-Security-Policy of their own (ui-routes.ts, openapi.ts); everything else is
 * data, whose policy lets nothing load or run, and whose answers are not stored by any cache.
 *
 * They are set on the raw response before any handler sees it (installSecurityHeaders), so that
 * answers written without Fastify's reply carry them too; a route's own value of one of them
 * (Fastify's writeHead merges over setHeader) takes precedence. Answers written straight to the
 * socket (client-error.ts) add them to their head.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';

/** The policy of data answers: nothing loads, nothing runs, nothing frames them. */
export const API_CONTENT_SECURITY_POLICY = "default-src 'none'; frame-ancestors 'none'";

export const SECURITY_HEADERS: Readonly<Record<string, string>> = {
  'X-Content-Type-Options': 'nosniff',
  'X-Frame-Options': 'DENY',
  'Referrer-Policy': 'no-referrer',
  'Cross-Origin-Resource-Policy': 'same-origin',
  'Content-Security-Policy': API_CONTENT_SECURITY_POLICY,
  // results, jobs and sessions are a tenant's data: no shared or browser cache keeps them
  'Cache-Control': 'no-store',
};

const ENTRIES = Object.entries(SECURITY_HEADERS);

/** Sets SECURITY_HEADERS on `response` (before its head is written): about 2.5 µs. */
export function applySecurityHeaders(response: ServerResponse): void {
  for (const [name, value] of ENTRIES) response.setHeader(name, value);
}

/**
 * Puts applySecurityHeaders in front of every 'request' listener of `server`: call once the
 * listeners are in place (Fastify's, and early shedding's).
 */
export function installSecurityHeaders(server: Server): void {
  type Listener = (request: IncomingMessage, response: ServerResponse) => void;
  const listeners = server.listeners('request') as Listener[];
  server.removeAllListeners('request');
  server.on('request', (request: IncomingMessage, response: ServerResponse) => {
    applySecurityHeaders(response);
    for (const listener of listeners) listener.call(server, request, response);
  });
}
