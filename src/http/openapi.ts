/**
 * The OpenAPI description served at /docs (@fastify/swagger + UI). Route schemas here document;
 * validation is quantd's own (src/service/request.ts), so that every rejection carries a
 * catalogue code. Binary request bodies are described with their two content types.
 */
import type { FastifyInstance } from 'fastify';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import { SPEC_OPTION_ROWS, defaultTextOf, type OptionRow, type SpecOptionName } from '../core/index.js';
import {
  ALL_OPTION_ROWS,
  OPERATION_OPTION_ROWS,
  OPERATIONS,
  RECIPE_KEYS,
  RULE_KEYS,
  type Operation,
} from '../service/index.js';
import { LAYOUTS } from '../service/layouts/index.js';

const JSON_TYPE: Readonly<Record<OptionRow['kind'], string>> = {
  enum: 'string',
  integer: 'integer',
  number: 'number',
  boolean: 'boolean',
  string: 'string',
  strings: 'array',
};

/** The query parameter schema of one option row (documentation: quantd validates itself). */
function optionSchema(row: OptionRow): Record<string, unknown> {
  const defaultText = defaultTextOf(row);
  // a fixed default is the schema's own; one that depends (mode, quant_min) is told in words
  const description =
    row.default === undefined && defaultText !== undefined ? `${row.doc} (default ${defaultText})` : row.doc;
  return {
    type: JSON_TYPE[row.kind],
    ...(row.kind === 'strings' && { items: { type: 'string' } }),
    ...(row.values && { enum: [...row.values] }),
    ...(row.default !== undefined && { default: row.default }),
    description,
    example: row.kind === 'strings' ? [row.example] : row.example,
  };
}

/** The query parameters (schema properties) of a list of option rows. */
export function optionQuery(rows: readonly OptionRow[]): Record<string, Record<string, unknown>> {
  return Object.fromEntries(rows.map((row) => [row.name, optionSchema(row)]));
}

/** The spec options as JSON values (a recipe's default and its rules). */
const specProperties = (): Record<string, Record<string, unknown>> => optionQuery(SPEC_OPTION_ROWS);

const wholeNumber = (description: string): Record<string, unknown> => ({
  type: 'integer',
  minimum: 0,
  description,
});

/** A rule's own keys; its other keys (RULE_KEYS) are the spec options. */
const RULE_FIELDS: Record<Exclude<(typeof RULE_KEYS)[number], SpecOptionName>, Record<string, unknown>> = {
  glob: { type: 'string', description: 'tensor names to match, a glob (`*` crosses dots); this or regex' },
  regex: {
    type: 'string',
    description: 'tensor names to match, a regular expression (unanchored); this or glob',
  },
  skip: { type: 'boolean', description: 'pass the matching tensors through (then no spec options)' },
  name: { type: 'string', description: 'how reports and errors name the rule' },
  min_size: wholeNumber('tensors of fewer elements pass through (overrides the recipe’s)'),
  skip_1d: { type: 'boolean', description: '1-D tensors pass through (overrides the recipe’s)' },
};

/** A recipe object (docs/models.md): exactly the keys the recipe parser takes (src/service/recipe.ts). */
export function recipeSchema(): Record<string, unknown> {
  const spec = specProperties();
  const rule = {
    type: 'object',
    additionalProperties: false,
    description:
      'the first rule whose pattern matches a tensor decides: skip it, or quantize it with the rule’s spec',
    properties: Object.fromEntries(
      RULE_KEYS.map((key) => [
        key,
        key in RULE_FIELDS ? RULE_FIELDS[key as keyof typeof RULE_FIELDS] : spec[key],
      ]),
    ),
  };
  const fields: Record<(typeof RECIPE_KEYS)[number], Record<string, unknown>> = {
    default: {
      description: 'the spec of the tensors no rule matches, or "skip": they pass through',
      oneOf: [
        { type: 'object', additionalProperties: false, properties: spec },
        { type: 'string', enum: ['skip'] },
      ],
    },
    rules: { type: 'array', items: rule },
    min_size: { ...wholeNumber('tensors of fewer elements pass through'), default: 0 },
    skip_1d: { type: 'boolean', default: true, description: '1-D tensors (norms, biases) pass through' },
  };
  return {
    type: 'object',
    additionalProperties: false,
    properties: Object.fromEntries(RECIPE_KEYS.map((key) => [key, fields[key]])),
    example: {
      default: { qdtype: 'int8', scheme: 'per_channel' },
      rules: [{ glob: '*.embed_tokens.*', skip: true }],
    },
  };
}

/** The `layout` parameter of a job: the registered layouts (src/service/layouts) and their options. */
export function layoutSchema(): Record<string, unknown> {
  const names = [...LAYOUTS.keys()];
  const each = [...LAYOUTS.values()].map((l) => `${l.name} (${Object.keys(l.options).join(', ')})`);
  return {
    type: 'string',
    pattern: `^(${names.join('|')})(:.*)?$`,
    description:
      'write the model in an interop layout instead, NAME[:key=value,...] (op quantize, no other option): ' +
      each.join('; '),
    example: 'gguf:type=Q4_K',
  };
}

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
  const query = optionQuery(OPERATION_OPTION_ROWS[op]);
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

const JOB_ID_PARAM = {
  type: 'object',
  properties: { id: { type: 'string', format: 'uuid', description: 'the job id' } },
};
const json = (description: string): Record<string, unknown> => ({
  description,
  content: { 'application/json': { schema: { type: 'object' } } },
});
const binary = (description: string): Record<string, unknown> => ({
  description,
  content: { 'application/x-safetensors': { schema: { type: 'string', format: 'binary' } } },
});

/** Schemas (documentation) of the job routes (docs/models.md, "Jobs over HTTP"). */
export function jobRouteSchemas(): Record<
  'submit' | 'list' | 'get' | 'result' | 'resultFile' | 'report' | 'remove',
  Record<string, unknown>
> {
  const tags = ['jobs'];
  return {
    submit: {
      summary: 'Submit a whole-model job: upload the model, or name it by path in the data directory',
      description:
        'With a binary body the model is streamed to disk and OPTIONS are query parameters (those of ' +
        '/v1/quantize, plus op, dtype, layout and the recipe parameters recipe, rule, skip, min_size, keep_1d). ' +
        'With application/json: {"input": PATH, "op", "params": {OPTIONS}, "recipe": {…}}.',
      tags,
      querystring: {
        type: 'object',
        properties: {
          op: { type: 'string', enum: [...OPERATIONS], default: 'quantize' },
          ...optionQuery(ALL_OPTION_ROWS),
          layout: layoutSchema(),
        },
      },
      body: {
        content: {
          'application/x-safetensors': { schema: { type: 'string', format: 'binary' } },
          'application/octet-stream': { schema: { type: 'string', format: 'binary' } },
          // a model folder: regular files of one level, POSIX ustar (what --remote sends)
          'application/x-tar': { schema: { type: 'string', format: 'binary' } },
          'application/json': {
            schema: {
              type: 'object',
              required: ['input'],
              additionalProperties: false,
              properties: {
                input: {
                  type: 'string',
                  description: 'a file, an index or a directory, relative to the data directory',
                },
                op: { type: 'string', enum: [...OPERATIONS], default: 'quantize' },
                params: {
                  type: 'object',
                  description: 'the options of the query form but op and recipe (JSON values)',
                  properties: {
                    ...optionQuery(ALL_OPTION_ROWS.filter((r) => r.name !== 'recipe')),
                    layout: layoutSchema(),
                  },
                },
                recipe: recipeSchema(),
              },
            },
          },
        },
      },
      response: {
        202: json('The job (Location: /v1/jobs/ID)'),
        400: problem,
        401: problem,
        403: problem,
        404: problem,
        413: problem,
        415: problem,
        500: problem,
        503: problem,
        507: problem,
      },
    },
    list: {
      summary: "The caller's jobs (an admin key's: all), newest first, a page at a time",
      tags,
      querystring: {
        type: 'object',
        properties: {
          limit: { type: 'integer', minimum: 1, maximum: 1000, default: 100 },
          cursor: { type: 'string', description: 'the `next` of the page before' },
        },
      },
      response: { 200: json('{"jobs": [job, …], "next": CURSOR} (next only when more follow)') },
    },
    get: {
      summary: 'A job: state, progress, ETA, error, result files',
      tags,
      params: JOB_ID_PARAM,
      response: { 200: json('The job'), 404: problem },
    },
    result: {
      summary: 'The result: the file (single-file result) or the list of files (sharded)',
      tags,
      params: JOB_ID_PARAM,
      response: {
        200: binary('The file (ETag: its data SHA-256), or JSON listing the files'),
        404: problem,
        409: problem,
      },
    },
    resultFile: {
      summary: 'One file of the result (a shard, the index)',
      tags,
      params: {
        type: 'object',
        properties: { id: JOB_ID_PARAM.properties.id, file: { type: 'string' } },
      },
      response: { 200: binary('The file'), 404: problem, 409: problem },
    },
    report: {
      summary: 'The quality report of a succeeded job',
      tags,
      params: JOB_ID_PARAM,
      response: { 200: json('The report (quantd.report/1)'), 404: problem, 409: problem },
    },
    remove: {
      summary: 'Cancel a queued or running job (202, the job), or remove a finished one (204)',
      tags,
      params: JOB_ID_PARAM,
      response: {
        202: json('The cancelled job'),
        204: { description: 'Removed', type: 'null' },
        404: problem,
      },
    },
  };
}

/**
 * The Content-Security-Policy of /docs, in place of the API's (security-headers.ts): Swagger UI's
 * own scripts, styles and images from this server (its React code sets inline styles), requests
 * to this server only ("Try it out"), and no framing, no inline or remote script.
 */
const DOCS_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "font-src 'self' data:",
  "connect-src 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
  "form-action 'none'",
].join('; ');

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
      // The job routes document their own bodies (jobRouteSchemas).
      if (!url.startsWith('/v1/') || url.startsWith('/v1/jobs') || !schema) return { schema, url };
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
  await app.register(swaggerUi, { routePrefix: '/docs', staticCSP: DOCS_POLICY });
}
