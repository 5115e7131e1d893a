/**
 * GET /v1/jobs/events: the caller's jobs as a live stream (server-sent events), for the console
 * (/ui) and for scripts that would otherwise poll.
 *
 *   event: snapshot   data: {"jobs": [job, …]}   first, the newest MAX_PAGE jobs as GET /v1/jobs
 *   event: job        data: job                  a job as the API now shows it (new, progress, final)
 *   event: removed    data: {"id": ID}           a job deleted or swept
 *
 * Changes are coalesced per job and sent at most every FLUSH_MS, so a run that reports progress
 * per tensor costs a client a few events a second. The stream holds no admission slot (it computes
 * nothing; app.ts skips routes marked `holdsNoSlot`) — instead a key may hold STREAMS_PER_KEY
 * at once —, sends a comment every HEARTBEAT_MS so that proxies keep it open, ends when the
 * server drains, and is dropped if a client stops reading.
 */
import type { ServerResponse } from 'node:http';
import type { FastifyInstance } from 'fastify';
import { MAX_PAGE, type JobEvent, type JobManager } from '../jobs/manager.js';
import { QuantdError } from '../errors/index.js';
import { callerOf } from './caller.js';

const FLUSH_MS = 200;
/** Streams one key may hold open at once (a console tab holds one); more is 429 QUOTA_EXCEEDED. */
export const STREAMS_PER_KEY = 32;
const HEARTBEAT_MS = 15_000;
/** Unsent bytes past which a client that does not read is dropped (it reconnects and re-syncs). */
const MAX_BACKLOG = 4 * 1024 * 1024;

const frame = (event: string, data: unknown): string => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;

export function registerJobEvents(scope: FastifyInstance, jobs: JobManager): void {
  const open = new Set<ServerResponse>();
  /** Open streams by key id ('' with auth off or for an admin key without an id). */
  const perKey = new Map<string, number>();
  // draining: every stream ends, so that the server can close (clients reconnect elsewhere)
  scope.addHook('preClose', (done) => {
    for (const response of open) response.end();
    done();
  });

  scope.get(
    '/v1/jobs/events',
    {
      config: { holdsNoSlot: true },
      schema: {
        tags: ['jobs'],
        summary: "The caller's jobs as server-sent events: snapshot, then job and removed",
        produces: ['text/event-stream'],
      },
    },
    async (request, reply) => {
      const caller = callerOf(request);
      const key = caller.owner ?? '';
      const held = perKey.get(key) ?? 0;
      if (held >= STREAMS_PER_KEY) {
        throw new QuantdError('QUOTA_EXCEEDED', {
          detail: `${held} event streams open for this key, the most one key may hold (${STREAMS_PER_KEY}); close one`,
        });
      }
      perKey.set(key, held + 1);
      reply.hijack();
      const response = reply.raw;
      response.writeHead(200, {
        'content-type': 'text/event-stream; charset=utf-8',
        'cache-control': 'no-store',
        'x-accel-buffering': 'no',
      });
      open.add(response);
      const pending = new Map<string, JobEvent>();
      let timer: NodeJS.Timeout | null = null;
      const send = (text: string): void => {
        if (response.writableLength > MAX_BACKLOG) {
          request.log.info('jobs/events: client not reading; stream dropped');
          response.destroy();
          return;
        }
        response.write(text);
      };
      const flush = (): void => {
        timer = null;
        for (const event of pending.values()) {
          send('job' in event ? frame('job', event.job) : frame('removed', { id: event.removed }));
        }
        pending.clear();
      };
      const stop = jobs.watch(caller, (event) => {
        pending.set('job' in event ? event.job.id : event.removed, event);
        timer ??= setTimeout(flush, FLUSH_MS);
      });
      const heartbeat = setInterval(() => send(': keep-alive\n\n'), HEARTBEAT_MS);
      response.once('close', () => {
        open.delete(response);
        const left = (perKey.get(key) ?? 1) - 1;
        if (left > 0) perKey.set(key, left);
        else perKey.delete(key);
        stop();
        clearInterval(heartbeat);
        if (timer !== null) clearTimeout(timer);
      });
      send(frame('snapshot', { jobs: jobs.page(caller, { limit: MAX_PAGE }).jobs }));
    },
  );
}
