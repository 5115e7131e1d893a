/**
 * The OpenAPI description served at /docs (@fastify/swagger + UI). Route schemas here document;
 * validation is quantd's own (src/service/request.ts), so that every rejection carries a
 * catalogue code. Binary request bodies are described with their two content types.
 */
import type { FastifyInstance } from 'fastify';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import { MODES, QDTYPES, SCHEMES } from '../core/index.js';
import type { Operation } from '../service/index.js';

const SPEC_QUERY = {
  qdtype: { type: 'string', enum: [...QDTYPES], default: 'int8' },
  scheme: { type: 'string', enum: [...SCHEMES], default: 'per_tensor' },
  mode: { type: 'string', enum: [...MODES], description: 'default affine (symmetric for fp8)' },
  axis: { type: 'integer', description: 'per_channel axis (default 0)' },
  group_size: { type: 'integer', description: 'per_group group size (default 128)' },
  quant_min: { type: 'integer' },
  quant_max: { type: 'integer' },
  eps: { type: 'number', description: 'smallest chosen scale (default 2^-23)' },
  range_search: { type: 'string', enum: ['minmax', 'greedy'] },
  include: { type: 'array', items: { type: 'string' }, description: 'tensor name globs to transform' },
  exclude: { type: 'array', items: { type: 'string' }, description: 'tensor name globs to pass through' },
};
const DTYPE_QUERY = {
  dtype: { type: 'string', enum: ['float32', 'float16', 'bfloat16'], default: 'float32' },
};

const SUMMARY: Record<Operation, string> = {
  quantize: 'Quantize float tensors into a quantd.qtensor/1 container',
  dequantize: 'Dequantize a quantd.qtensor/1 container back to float tensors',
  'fake-quantize': 'Quantize and dequantize in one step; writes NAME and NAME.mask',
  qparams: 'Choose quantization parameters; writes NAME.scale and NAME.zero_point',
};

const problem = {
  description: 'RFC 9457 problem details with the catalogue code',
  content: { 'application/problem+json': { schema: { $ref: 'problem#' } } },
};

export function opRouteSchema(op: Operation): Record<string, unknown> {
  const query =
    op === 'dequantize'
      ? DTYPE_QUERY
      : op === 'fake-quantize'
        ? { ...SPEC_QUERY, ...DTYPE_QUERY }
        : SPEC_QUERY;
  return {
    summary: SUMMARY[op],
    tags: ['operations'],
    querystring: { type: 'object', properties: query },
    headers: {
      type: 'object',
      properties: {
        'x-tensor-dtype': {
          type: 'string',
          description: 'octet-stream bodies: float32, float16 or bfloat16',
        },
        'x-tensor-shape': { type: 'string', description: 'octet-stream bodies: e.g. 4096,4096' },
      },
    },
    response: {
      200: {
        description:
          'The result: application/x-safetensors, or application/json with Accept: application/json',
        content: {
          'application/x-safetensors': { schema: { type: 'string', format: 'binary' } },
          'application/json': { schema: { type: 'object' } },
        },
      },
      400: problem,
      401: problem,
      413: problem,
      415: problem,
      503: problem,
    },
  };
}

export async function registerDocs(app: FastifyInstance, version: string): Promise<void> {
  app.addSchema({
    $id: 'problem',
    type: 'object',
    properties: {
      type: { type: 'string' },
      title: { type: 'string' },
      status: { type: 'integer' },
      detail: { type: 'string' },
      code: { type: 'string', description: 'stable catalogue code (src/errors/catalogue.ts)' },
      instance: { type: 'string' },
      request_id: { type: 'string' },
      params: { type: 'object', additionalProperties: true },
    },
  });
  await app.register(swagger, {
    openapi: {
      info: {
        title: 'quantd',
        version,
        description:
          'Quantization service: float tensors in, packed int8/int4/int2/fp8 codes and qparams out.',
      },
      components: {
        securitySchemes: {
          bearer: { type: 'http', scheme: 'bearer', description: 'when QUANTD_API_KEYS is set' },
        },
      },
    },
    transform: ({ schema, url }) => {
      if (!url.startsWith('/v1/') || !schema) return { schema, url };
      // Document the binary request bodies (not validated as JSON).
      return {
        schema: {
          ...schema,
          body: {
            content: {
              'application/x-safetensors': { schema: { type: 'string', format: 'binary' } },
              'application/octet-stream': { schema: { type: 'string', format: 'binary' } },
            },
          },
        } as typeof schema,
        url,
      };
    },
  });
  await app.register(swaggerUi, { routePrefix: '/docs' });
}
