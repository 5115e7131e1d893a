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
 * nothing; app.ts skips routes marked `holdsNoSlot`) — instead it counts against the live streams'
 * cap (src/service/live-streams.ts: QUANTD_LIVE_STREAMS in all, QUANTD_LIVE_STREAMS_PER_CLIENT per
 * key, or per address with authentication off) —, sends a comment every heartbeat so that proxies
 * keep it open, ends when the server drains, and is dropped if a client stops reading: once the
 * socket's buffers are full, after QUANTD_STREAM_IDLE_MS without progress (stall.ts), or past
 * MAX_BACKLOG unsent bytes, whichever comes first.
 */
import type { ServerResponse } from 'node:http';
import type { FastifyInstance } from 'fastify';
import { MAX_PAGE, type JobEvent, type JobManager } from '../jobs/manager.js';
import { clientOf, type LiveStreams } from '../service/index.js';
import { callerOf } from './caller.js';
import { cutWhenStalled } from './stall.js';

const FLUSH_MS = 200;
/** A comment this often keeps proxies from closing a quiet stream (and the idle timeout off it). */
const HEARTBEAT_MS = 15_000;
/** Unsent bytes past which a client that does not read is dropped (it reconnects and re-syncs). */
const MAX_BACKLOG = 4 * 1024 * 1024;

const frame = (event: string, data: unknown): string => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;

export function registerJobEvents(
  scope: FastifyInstance,
  jobs: JobManager,
  liveStreams: LiveStreams,
  idleMs: number,
): void {
  const open = new Set<ServerResponse>();
  // a quiet stream whose client reads must not look idle: its socket sees a write at least twice
  // per idle period
  const heartbeatMs = Math.min(HEARTBEAT_MS, Math.floor(idleMs / 2));
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
      const leave = liveStreams.enter(
        clientOf(caller.owner, request.socket.remoteAddress),
        'job event streams',
      );
      reply.hijack();
      const response = reply.raw;
      cutWhenStalled(response, idleMs, request.log);
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
      const heartbeat = setInterval(() => send(': keep-alive\n\n'), heartbeatMs);
      response.once('close', () => {
        open.delete(response);
        leave();
        stop();
        clearInterval(heartbeat);
        if (timer !== null) clearTimeout(timer);
      });
      send(frame('snapshot', { jobs: jobs.page(caller, { limit: MAX_PAGE }).jobs }));
    },
  );
}
