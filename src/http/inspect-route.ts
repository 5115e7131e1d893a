/**
 * POST /v1/inspect[?size=N]: `quantd inspect --json` of a safetensors file — its tensors with
 * dtypes, shapes, schemes and compression. Only the header is needed, so a client may send the
 * file's first 8 + header-length bytes and the whole file's size as `size` (the console does,
 * for a multi-gigabyte model); without `size` the body is the whole file. The data section is
 * never read: the checksum is reported as recorded, not verified.
 */
import type { FastifyInstance } from 'fastify';
import { QuantdError } from '../errors/index.js';
import { inspectHeaderBytes } from '../service/inspect.js';

const SOURCE = 'request body';

function sizeOf(query: Record<string, unknown>, body: Uint8Array): number {
  for (const key of Object.keys(query)) {
    if (key !== 'size') {
      throw new QuantdError('OPTION_INVALID', {
        option: key,
        detail: 'is not a parameter of POST /v1/inspect (size)',
        value: String(query[key]),
      });
    }
  }
  const text = query['size'];
  if (text === undefined) return body.byteLength;
  const size = Number(text);
  if (
    typeof text !== 'string' ||
    !/^\d+$/.test(text) ||
    !Number.isSafeInteger(size) ||
    size < body.byteLength
  ) {
    throw new QuantdError('OPTION_INVALID', {
      option: 'size',
      detail: `must be the whole file's size in bytes, at least the ${body.byteLength} bytes sent`,
      value: String(text),
    });
  }
  return size;
}

export function registerInspectRoute(app: FastifyInstance): void {
  app.post(
    '/v1/inspect',
    {
      schema: {
        tags: ['operations'],
        summary: "A safetensors file's tensors, dtypes, shapes, schemes and compression (its header)",
        querystring: { type: 'object', properties: { size: { type: 'string' } } },
      },
    },
    async (request, reply) => {
      const body = request.body;
      if (!(body instanceof Uint8Array)) {
        throw new QuantdError('UNSUPPORTED_MEDIA_TYPE', {
          type: String(request.headers['content-type'] ?? '(none)'),
        });
      }
      const size = sizeOf((request.query ?? {}) as Record<string, unknown>, body);
      const summary = await inspectHeaderBytes(body, size, SOURCE);
      return reply.code(200).type('application/json').send(JSON.stringify(summary));
    },
  );
}
