/**
 * Jobs over HTTP (docs/models.md, "Jobs over HTTP"): whole-model runs done in the background by
 * the job manager (src/jobs/), persisted in the data directory.
 *
 *   POST   /v1/jobs?OPTIONS            body: the model (application/x-safetensors or
 *                                      application/octet-stream), streamed to disk → 202 job;
 *                                      or a model folder (application/x-tar), unpacked as it arrives
 *   POST   /v1/jobs                    body: application/json {"input", "op", "params", "recipe"} → 202 job
 *   GET    /v1/jobs                    {"jobs": [job, …]} newest first
 *   GET    /v1/jobs/events             the caller's jobs as server-sent events (job-events.ts)
 *   GET    /v1/jobs/ID                 the job
 *   GET    /v1/jobs/ID/result          single file: the file; sharded: {"sharded": true, "files": […]}
 *   GET    /v1/jobs/ID/result/FILE     one file of the result
 *   GET    /v1/jobs/ID/report          the quality report
 *   DELETE /v1/jobs/ID                 queued/running: cancelled, 202 job; finished: removed, 204
 *
 * An upload is never held in memory: this scope's parser for the binary types hands the handler
 * the request stream, which is written to the job's input file as it arrives (store.ts). Before a
 * byte is read, the options are validated (400), the declared length is checked against
 * QUANTD_UPLOAD_LIMIT (413, in app.ts's onRequest hook, by this route's body limit) and against the
 * free space of the data directory (507). The JSON form is read within QUANTD_JSON_LIMIT (json-body.ts).
 * Result, report and file downloads take a slot of the download pool (QUANTD_DOWNLOAD_LIMIT), not
 * a compute slot, and are cut when their client stops reading (stall.ts).
 */
import { open, type FileHandle } from 'node:fs/promises';
import type { IncomingMessage } from 'node:http';
import { extname, join } from 'node:path';
import type { Readable } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { QuantdError } from '../errors/index.js';
import { DEFAULT_PAGE, MAX_PAGE, type JobManager } from '../jobs/manager.js';
import { callerOf } from './caller.js';
import { paramsOf, submissionFromQuery, operationOf } from '../jobs/request.js';
import { openFolderSink } from '../jobs/folder-upload.js';
import { receiveUpload, type ResultFile } from '../jobs/store.js';
import { OCTET_TYPE, SAFETENSORS_TYPE, bodyStopReason, declaredLength, onBodyCutShort } from './body.js';
import { readJsonText } from './json-body.js';
import { jobRouteSchemas } from './openapi.js';
import { checkedReadStream, sendCheck } from '../jobs/verify.js';
import { registerJobEvents } from './job-events.js';
import type { LiveStreams } from '../service/index.js';

export interface JobRouteDeps {
  readonly jobs: JobManager;
  /** QUANTD_UPLOAD_LIMIT: the largest model upload, in bytes. */
  readonly uploadLimit: number;
  /** QUANTD_JSON_LIMIT: the largest JSON job request, in bytes. */
  readonly jsonLimit: number;
  /** The live streams' cap: GET /v1/jobs/events counts against it. */
  readonly liveStreams: LiveStreams;
  /** QUANTD_STREAM_IDLE_MS: an event stream's client that stops reading is cut after it. */
  readonly streamIdleMs: number;
}

/**
 * The routes that send a finished file from disk: they take a slot of the download pool
 * (QUANTD_DOWNLOAD_LIMIT), not a compute slot (app.ts).
 */
const DOWNLOAD = { download: true } as const;

/** A model folder uploaded as one body: regular files of one level (src/format/tar.ts). */
export const TAR_TYPE = 'application/x-tar';

const JSON_FIELDS = ['input', 'op', 'params', 'recipe'];

/**
 * The uploaded body: the request stream itself, unread (tagged so that it is not taken for JSON),
 * watched from the moment it is parsed for a client that goes before its end.
 */
class Upload {
  readonly gone: Promise<void>;
  readonly dispose: () => void;
  constructor(
    readonly stream: IncomingMessage,
    /** A model folder as application/x-tar (unpacked into the job's input folder). */
    readonly folder = false,
  ) {
    ({ gone: this.gone, dispose: this.dispose } = clientGone(stream));
  }
}

const sendJson = (reply: FastifyReply, status: number, value: unknown): FastifyReply =>
  reply.code(status).type('application/json').send(JSON.stringify(value));

/**
 * Settles when the client has gone before the end of its body: a half-closed connection (Node's
 * parser reports it to client-error.ts, which tells the reader registered with onBodyCutShort,
 * so that the request is not ended and its socket stays open for the problem response) or a
 * closed one. `dispose` removes the listeners (the socket may carry further requests).
 */
function clientGone(request: IncomingMessage): { gone: Promise<void>; dispose: () => void } {
  const socket = request.socket;
  let dispose = (): void => {};
  const gone = new Promise<void>((resolve) => {
    const done = (): void => resolve();
    const stopListening = onBodyCutShort(request, done);
    if (socket.destroyed) resolve();
    socket.once('close', done);
    dispose = () => {
      stopListening();
      socket.off('close', done);
    };
  });
  return { gone, dispose };
}

async function submitUpload(deps: JobRouteDeps, request: FastifyRequest, upload: Upload): Promise<unknown> {
  try {
    return await receive(deps, request, upload);
  } finally {
    upload.dispose();
  }
}

async function receive(deps: JobRouteDeps, request: FastifyRequest, upload: Upload): Promise<unknown> {
  const { jobs, uploadLimit } = deps;
  const submission = submissionFromQuery(request.query as Record<string, unknown>);
  jobs.checkSubmission(submission); // a bad option is a 400 before the body is read
  const expected = declaredLength(request.headers['content-length'], uploadLimit, 'QUANTD_UPLOAD_LIMIT');
  await jobs.store.ensureRoot();
  if (expected !== null) {
    let free: number | null = null;
    try {
      free = await jobs.store.freeBytes();
    } catch (err) {
      request.log.warn({ err }, 'jobs: free space of the data directory unknown');
    }
    if (free !== null && expected > free) throw new QuantdError('STORAGE_FULL', { path: jobs.data.jobs });
  }
  const { id, path } = await jobs.beginUpload(submission, expected, upload.folder, callerOf(request));
  let bytes: number;
  try {
    bytes = await receiveUpload(upload.stream as Readable, path, {
      expected,
      limit: uploadLimit,
      cut: upload.gone,
      ...(upload.folder && { open: openFolderSink }),
    });
  } catch (err) {
    await jobs.abandonUpload(id);
    throw bodyStopReason(upload.stream) ?? err; // stopped by the server (too slow): say so
  }
  return jobs.acceptUpload(id, bytes);
}

/** GET /v1/jobs?limit=N&cursor=C: a page of the caller's jobs, `next` when more follow. */
function pageOf(jobs: JobManager, request: FastifyRequest): { jobs: unknown[]; next?: string } {
  const query = (request.query ?? {}) as Record<string, unknown>;
  for (const key of Object.keys(query)) {
    if (key !== 'limit' && key !== 'cursor') {
      throw new QuantdError('OPTION_INVALID', {
        option: key,
        detail: 'is not a parameter of GET /v1/jobs (limit, cursor)',
        value: String(query[key]),
      });
    }
  }
  let limit: number | undefined;
  if (query['limit'] !== undefined) {
    const text = String(query['limit']);
    limit = Number(text);
    if (!/^\d+$/.test(text) || limit < 1 || limit > MAX_PAGE) {
      throw new QuantdError('OPTION_INVALID', {
        option: 'limit',
        detail: `must be an integer from 1 to ${MAX_PAGE} (default ${DEFAULT_PAGE})`,
        value: text,
      });
    }
  }
  const cursor = query['cursor'] === undefined ? undefined : String(query['cursor']);
  const page = jobs.page(callerOf(request), {
    ...(limit !== undefined && { limit }),
    ...(cursor !== undefined && { cursor }),
  });
  return page.next === null ? { jobs: page.jobs } : { jobs: page.jobs, next: page.next };
}

async function submitJson(deps: JobRouteDeps, request: FastifyRequest, body: unknown): Promise<unknown> {
  const query = Object.keys((request.query as Record<string, unknown> | undefined) ?? {});
  if (query.length > 0) {
    throw new QuantdError('OPTION_INVALID', {
      option: query[0]!,
      detail: 'is a query parameter of a JSON job request; give options in "params"',
      value: String((request.query as Record<string, unknown>)[query[0]!]),
    });
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new QuantdError('USAGE', {
      detail: 'a JSON job request is an object {"input", "op", "params", "recipe"}',
    });
  }
  const fields = body as Record<string, unknown>;
  for (const key of Object.keys(fields)) {
    if (!JSON_FIELDS.includes(key)) {
      throw new QuantdError('OPTION_INVALID', {
        option: key,
        detail: `is not a field of a job request (fields: ${JSON_FIELDS.join(', ')})`,
        value: JSON.stringify(fields[key]) ?? 'undefined',
      });
    }
  }
  const input = fields['input'];
  if (typeof input !== 'string') {
    throw new QuantdError('OPTION_INVALID', {
      option: 'input',
      detail: 'must be the path of a model in the data directory (a file, an index or a directory)',
      value: JSON.stringify(input) ?? '(missing)',
    });
  }
  const params = { ...paramsOf(fields['params']) };
  if (params['op'] !== undefined && fields['op'] !== undefined && params['op'] !== fields['op']) {
    throw new QuantdError('OPTION_INVALID', {
      option: 'op',
      detail: 'is given twice, differently (in the request and in "params")',
      value: `${String(fields['op'])}, ${String(params['op'])}`,
    });
  }
  const op = operationOf(fields['op'] ?? params['op']);
  delete params['op'];
  if (params['recipe'] !== undefined) {
    throw new QuantdError('OPTION_INVALID', {
      option: 'recipe',
      detail: 'goes beside "params" in a JSON job request, as an object',
      value: String(params['recipe']),
    });
  }
  const recipe = fields['recipe'];
  return deps.jobs.submitPath(
    recipe === undefined ? { op, params } : { op, params, recipe },
    input,
    callerOf(request),
  );
}

const TYPES: Readonly<Record<string, string>> = {
  '.safetensors': SAFETENSORS_TYPE,
  '.json': 'application/json',
};

/** Opens a file to send; one that is gone is FILE_NOT_FOUND (named by `shown`). */
async function openFile(path: string, shown: string): Promise<FileHandle> {
  try {
    return await open(path, 'r');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT')
      throw new QuantdError('FILE_NOT_FOUND', { path: shown });
    throw err;
  }
}

/**
 * Streams one result file of job `id`, hashed as it is sent (verify.ts): Content-Length, and ETag
 * = its data SHA-256 where it has one. A file that does not match what the job recorded is cut
 * short of its Content-Length (or refused with RESULT_CORRUPT when no byte went out yet), and the
 * job is marked failed.
 */
async function sendFile(
  request: FastifyRequest,
  reply: FastifyReply,
  jobs: JobManager,
  id: string,
  dir: string,
  file: ResultFile,
): Promise<FastifyReply> {
  const etag = file.data_sha256 === null ? null : `"${file.data_sha256}"`;
  if (etag !== null) reply.header('ETag', etag);
  const match = request.headers['if-none-match'];
  if (
    etag !== null &&
    match !== undefined &&
    match.split(',').some((t) => t.trim() === etag || t.trim() === '*')
  ) {
    return reply.code(304).send();
  }
  const path = join(dir, file.name);
  const handle = await openFile(path, file.name);
  let body: Readable;
  let size: number;
  try {
    size = (await handle.stat()).size;
    if (size !== file.bytes) {
      throw new QuantdError('INTERNAL', { detail: `result file ${file.name} changed while being opened` });
    }
    const sent = await sendCheck(path, file, (problem) => jobs.resultCorrupt(id, problem));
    body = checkedReadStream(handle, size, sent);
  } catch (err) {
    await handle.close();
    throw err;
  }
  return reply
    .header('Content-Length', String(size))
    .header('Content-Disposition', `attachment; filename="${file.name.replace(/[^\x20-\x7e]|["\\]/g, '_')}"`)
    .type(TYPES[extname(file.name)] ?? OCTET_TYPE)
    .send(body);
}

/**
 * The job routes, in a scope of their own: the binary types are handed over unread (streamed to
 * disk by the handler), JSON is read with a small limit, anything else is 415.
 */
export function registerJobRoutes(app: FastifyInstance, deps: JobRouteDeps): PromiseLike<unknown> {
  const { jobs } = deps;
  return app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser(
      [SAFETENSORS_TYPE, OCTET_TYPE],
      async (_request: FastifyRequest, payload: IncomingMessage) => new Upload(payload),
    );
    scope.addContentTypeParser(
      TAR_TYPE,
      async (_request: FastifyRequest, payload: IncomingMessage) => new Upload(payload, true),
    );
    scope.addContentTypeParser(
      'application/json',
      async (request: FastifyRequest, payload: IncomingMessage) => {
        const text = await readJsonText(request, payload, {
          limit: deps.jsonLimit,
          setting: 'QUANTD_JSON_LIMIT',
        });
        try {
          return JSON.parse(text) as unknown;
        } catch (err) {
          throw new QuantdError('USAGE', {
            detail: `the job request is not valid JSON: ${(err as Error).message}`,
          });
        }
      },
    );
    const schemas = jobRouteSchemas();

    scope.post(
      '/v1/jobs',
      // the route's body limit is the upload limit: app.ts refuses a larger declared length (413)
      {
        schema: schemas.submit,
        bodyLimit: deps.uploadLimit,
        // an upload is streamed to disk: its bytes are not held against the memory budget
        config: { limitSetting: 'QUANTD_UPLOAD_LIMIT', bodyOnDisk: true },
      },
      async (request, reply) => {
        const body = request.body;
        let job: unknown;
        if (body instanceof Upload) job = await submitUpload(deps, request, body);
        else if (body !== undefined) job = await submitJson(deps, request, body);
        else
          throw new QuantdError('UNSUPPORTED_MEDIA_TYPE', {
            type: request.headers['content-type'] ?? '(none)',
          });
        const id = (job as { id: string }).id;
        return sendJson(reply.header('Location', `/v1/jobs/${id}`), 202, job);
      },
    );

    scope.get('/v1/jobs', { schema: schemas.list }, async (request, reply) =>
      sendJson(reply, 200, pageOf(jobs, request)),
    );

    registerJobEvents(scope, jobs, deps.liveStreams, deps.streamIdleMs);

    scope.get('/v1/jobs/:id', { schema: schemas.get }, async (request, reply) =>
      sendJson(reply, 200, await jobs.get((request.params as { id: string }).id, callerOf(request))),
    );

    scope.get(
      '/v1/jobs/:id/result',
      { schema: schemas.result, exposeHeadRoute: false, config: DOWNLOAD },
      async (request, reply) => {
        const { id } = request.params as { id: string };
        const { result, dir } = await jobs.result(id, callerOf(request));
        if (!result.sharded && result.files.length === 1)
          return sendFile(request, reply, jobs, id, dir, result.files[0]!);
        return sendJson(reply, 200, {
          sharded: result.sharded,
          files: result.files.map((f) => ({
            ...f,
            href: `/v1/jobs/${id}/result/${encodeURIComponent(f.name)}`,
          })),
        });
      },
    );

    scope.get(
      '/v1/jobs/:id/result/:file',
      { schema: schemas.resultFile, exposeHeadRoute: false, config: DOWNLOAD },
      async (request, reply) => {
        const { id, file } = request.params as { id: string; file: string };
        const { result, dir } = await jobs.result(id, callerOf(request));
        const found = result.files.find((f) => f.name === file);
        if (!found) {
          throw new QuantdError('NOT_FOUND', {
            detail: `job ${id} has no result file ${JSON.stringify(file)} (files: ${result.files.map((f) => f.name).join(', ')})`,
          });
        }
        return sendFile(request, reply, jobs, id, dir, found);
      },
    );

    scope.get(
      '/v1/jobs/:id/report',
      { schema: schemas.report, exposeHeadRoute: false, config: DOWNLOAD },
      async (request, reply) => {
        const path = await jobs.reportPath((request.params as { id: string }).id, callerOf(request));
        const handle = await openFile(path, jobs.data.shown(path));
        const size = (await handle.stat()).size;
        return reply
          .header('Content-Length', String(size))
          .type('application/json')
          .send(handle.createReadStream());
      },
    );

    scope.delete('/v1/jobs/:id', { schema: schemas.remove }, async (request, reply) => {
      const job = await jobs.delete((request.params as { id: string }).id, callerOf(request));
      if (job === null) return reply.code(204).send();
      return sendJson(reply, 202, job);
    });
  });
}
