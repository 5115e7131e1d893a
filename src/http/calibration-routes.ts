/**
 * Calibration sessions over HTTP (docs/observers.md): observers held by the server, fed with
 * activation batches, read out as qparams.
 *
 *   POST   /v1/calibrations               {"recipe": …} or {"state": EXPORT} (+ "ttl_seconds") → 201 session
 *   GET    /v1/calibrations               {"calibrations": [session, …]} newest first (counts only)
 *   GET    /v1/calibrations/ID            the session: its observers and how much each has seen
 *   POST   /v1/calibrations/ID/batches    body: a safetensors of activations → what it observed
 *   GET    /v1/calibrations/ID/qparams    a safetensors of NAME.scale / NAME.zero_point
 *   GET    /v1/calibrations/ID/statistics the layer statistics file (NAME.hessian, …) for gptq:calibration=
 *   GET    /v1/calibrations/ID/state      the export form (quantd.calibration/1), to import elsewhere
 *   DELETE /v1/calibrations/ID            204
 *
 * A creation body is JSON within QUANTD_CALIBRATION_IMPORT_LIMIT (json-body.ts); a batch body is
 * read whole (QUANTD_BODY_LIMIT), like the op routes' tensors; batches into one session are
 * folded one at a time and acknowledged once on disk (src/service/calibration/). A batch whose
 * observers are still at work on the pool when its client leaves, or when
 * QUANTD_REQUEST_TIMEOUT_MS has passed, is abandoned whole (the op routes' request signal).
 * A session's JSON (a recipe, or an import's export form) is parsed on the event loop, so it is
 * at most QUANTD_CALIBRATION_IMPORT_LIMIT (a 413 before it is read when declared larger); the
 * export is streamed out a piece at a time as the client reads it.
 */
import { Readable } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { QuantdError } from '../errors/index.js';
import type { CalibrationStore, CreateRequest } from '../service/calibration/store.js';
import { callerOf } from './caller.js';
import { requestSignal } from './op-routes.js';

export interface CalibrationRouteDeps {
  readonly calibrations: CalibrationStore;
  /** QUANTD_REQUEST_TIMEOUT_MS: a batch not folded by then is abandoned whole (504) */
  readonly requestTimeoutMs: number;
  /**
   * QUANTD_CALIBRATION_IMPORT_LIMIT: the largest creation body. It may carry a session's export
   * (about 11 KB per histogram observer), more than the other JSON bodies' QUANTD_JSON_LIMIT.
   */
  readonly importLimit: number;
}

const tags = ['calibration'];
const idParam = {
  type: 'object',
  properties: { id: { type: 'string', description: 'the session id' } },
  required: ['id'],
};

const sendJson = (reply: FastifyReply, status: number, value: unknown): FastifyReply =>
  reply.code(status).type('application/json').send(JSON.stringify(value));

export async function registerCalibrationRoutes(
  app: FastifyInstance,
  deps: CalibrationRouteDeps,
): Promise<void> {
  const store = deps.calibrations;
  const idOf = (request: FastifyRequest): string => (request.params as { id: string }).id;

  // A session's JSON may name a tensor __proto__: a session that observed one exports it so, and
  // its import must take it back. The secure parser refuses such keys; this route reads its body
  // with the same limits (json-body.ts) but parses it with JSON.parse (jsonPlain), whose keys are
  // own data properties, never a prototype, and the store reads them through Object.entries into
  // Maps and null-prototype objects only.
  app.post(
    '/v1/calibrations',
    {
      config: {
        jsonLimit: { limit: deps.importLimit, setting: 'QUANTD_CALIBRATION_IMPORT_LIMIT' },
        jsonPlain: true,
      },
      schema: {
        tags,
        summary: 'Create a calibration session from a recipe, or continue an exported one',
        body: {
          type: 'object',
          properties: {
            recipe: {
              type: 'object',
              description: '{"observers": [{"match": GLOB | "regex": RE, "observer": {"kind": …, …}}]}',
            },
            state: {
              type: 'object',
              description: 'an export (quantd.calibration/1) to continue under a new id',
            },
            ttl_seconds: {
              type: 'number',
              description: 'idle time before the session expires (default 86400)',
            },
          },
        },
      },
    },
    async (request, reply) => {
      if (request.body === null || typeof request.body !== 'object' || ArrayBuffer.isView(request.body)) {
        throw new QuantdError('USAGE', {
          detail:
            'a calibration session is created from an application/json body {"recipe": …} or {"state": …}',
        });
      }
      const session = await store.create(request.body as CreateRequest, callerOf(request));
      return sendJson(reply, 201, session.summary());
    },
  );

  app.get(
    '/v1/calibrations',
    { schema: { tags, summary: 'The calibration sessions, newest first' } },
    async (request, reply) =>
      sendJson(reply, 200, { calibrations: store.list(callerOf(request)).map((s) => s.summary(false)) }),
  );

  app.get(
    '/v1/calibrations/:id',
    { schema: { tags, summary: 'A calibration session and what its observers have seen', params: idParam } },
    async (request, reply) => sendJson(reply, 200, store.get(idOf(request), callerOf(request)).summary()),
  );

  app.post(
    '/v1/calibrations/:id/batches',
    {
      schema: {
        tags,
        summary: 'Fold a batch of activations (application/x-safetensors) into the observers',
        params: idParam,
      },
    },
    async (request, reply) => {
      const body = request.body;
      if (!(body instanceof Uint8Array)) {
        throw new QuantdError('UNSUPPORTED_MEDIA_TYPE', {
          type: String(request.headers['content-type'] ?? '(none)'),
          detail: 'send the batch as application/x-safetensors (or application/octet-stream)',
        });
      }
      const result = await store.fold(
        idOf(request),
        body,
        callerOf(request),
        requestSignal(reply, deps.requestTimeoutMs),
      );
      return sendJson(reply, 200, result);
    },
  );

  app.get(
    '/v1/calibrations/:id/qparams',
    {
      schema: {
        tags,
        summary: "Every observer's qparams as NAME.scale / NAME.zero_point (safetensors)",
        params: idParam,
      },
    },
    async (request, reply) => {
      const id = idOf(request);
      const file = await store.qparams(id, callerOf(request), requestSignal(reply, deps.requestTimeoutMs));
      return reply
        .code(200)
        .type('application/x-safetensors')
        .header('Content-Disposition', `attachment; filename="calibration-${id}.safetensors"`)
        .send(Buffer.from(file.buffer, file.byteOffset, file.byteLength));
    },
  );

  app.get(
    '/v1/calibrations/:id/statistics',
    {
      // a file sent from disk: a slot of the download pool (QUANTD_DOWNLOAD_LIMIT), as a job's result
      config: { download: true },
      schema: {
        tags,
        summary:
          "The linear-layer statistics (NAME.hessian, NAME.abs_sum, NAME.tokens) as a layer statistics file, for the gptq layout's calibration= option",
        params: idParam,
      },
    },
    async (request, reply) => {
      const id = idOf(request);
      const { handle, size } = await store.openStatistics(id, callerOf(request));
      return reply
        .code(200)
        .type('application/x-safetensors')
        .header('Content-Length', String(size))
        .header('Content-Disposition', `attachment; filename="calibration-${id}.stats"`)
        .send(handle.createReadStream()); // the stream closes the handle when it ends or fails
    },
  );

  app.get(
    '/v1/calibrations/:id/state',
    { schema: { tags, summary: 'The session in its export form (quantd.calibration/1)', params: idParam } },
    async (request, reply) => {
      const pieces = await store.exportText(idOf(request), callerOf(request));
      // bytes, not objects: a stream of objects would ask for 16 pieces (16 MiB of base64) at once
      return reply
        .code(200)
        .type('application/json')
        .send(Readable.from(pieces, { objectMode: false }));
    },
  );

  app.delete(
    '/v1/calibrations/:id',
    { schema: { tags, summary: 'Delete a calibration session', params: idParam } },
    async (request, reply) => {
      await store.remove(idOf(request), callerOf(request));
      return reply.code(204).send();
    },
  );
}
