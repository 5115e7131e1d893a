/**
 * The option tables (src/core/spec-options.ts, src/service/options.ts) are the one place options
 * are written: every surface must show every row. These tests go row by row through the OpenAPI
 * document (which once lacked the recipe parameters), `quantd --help` and the CLI parser, the
 * remote query, the request parser, the recipe validator, the gRPC Spec fields, the OIP model
 * parameters and the catalogue messages that list allowed values.
 */
import Fastify from 'fastify';
import { beforeAll, describe, expect, it } from 'vitest';

import { COMMAND_OPTIONS, parseCommand, specOptionsOf } from '../../src/cli/args.js';
import { usage } from '../../src/cli/help.js';
import { remoteQuery } from '../../src/cli/remote.js';
import {
  CODE_SPEC_OPTION_NAMES,
  SPEC_OPTION_NAMES,
  SPEC_OPTION_ROWS,
  allowedText,
  flagKey,
  parseSpec,
  specToOptions,
  type OptionRow,
  type SpecOptions,
} from '../../src/core/index.js';
import { QuantdError } from '../../src/errors/index.js';
import { specValues } from '../../src/grpc/unary.js';
import { jobRouteSchemas, opRouteSchema, registerDocs } from '../../src/http/openapi.js';
import { MODELS } from '../../src/oip/models.js';
import {
  ALL_OPTION_ROWS,
  OPERATIONS,
  OPERATION_OPTION_ROWS,
  OUTPUT_DTYPE_ROW,
  RECIPE_OPTION_ROWS,
  SELECTION_OPTION_ROWS,
  operationRequest,
  parseRecipe,
} from '../../src/service/index.js';

/** A spec option set to its example, with the scheme the option needs to apply. */
function exampleOptions(row: OptionRow): SpecOptions {
  const scheme = row.name === 'axis' ? 'per_channel' : row.name === 'group_size' ? 'per_group' : undefined;
  return { ...(scheme && { scheme }), [row.name]: row.example } as SpecOptions;
}

/** What the parsed spec reports for the example (eps is kept as float32). */
const expectedValue = (row: OptionRow): unknown =>
  row.kind === 'number' ? Math.fround(row.example as number) : row.example;

const specRows: readonly OptionRow[] = SPEC_OPTION_ROWS;
const cliRows: readonly OptionRow[] = [
  ...SPEC_OPTION_ROWS,
  ...SELECTION_OPTION_ROWS,
  OUTPUT_DTYPE_ROW,
  ...RECIPE_OPTION_ROWS,
];

type Parameter = { name: string; in: string; schema: { enum?: string[]; type?: string } };
type Doc = { paths: Record<string, Record<string, { parameters?: Parameter[] }>> };

describe('the OpenAPI document', () => {
  let doc: Doc;
  beforeAll(async () => {
    const app = Fastify();
    app.setValidatorCompiler(() => () => true);
    await registerDocs(app, 'test');
    const noop = (): string => '';
    for (const op of OPERATIONS) app.post(`/v1/${op}`, { schema: opRouteSchema(op) }, noop);
    app.post('/v1/jobs', { schema: jobRouteSchemas().submit }, noop);
    await app.ready();
    doc = app.swagger() as unknown as Doc;
    await app.close();
  });

  const queryOf = (path: string): Parameter[] =>
    (doc.paths[path]!['post']!.parameters ?? []).filter((p) => p.in === 'query');

  it.each(OPERATIONS)('/v1/%s documents exactly the options the request parser takes', (op) => {
    const query = queryOf(`/v1/${op}`);
    expect(query.map((p) => p.name)).toEqual(OPERATION_OPTION_ROWS[op].map((row) => row.name));
    for (const row of OPERATION_OPTION_ROWS[op]) {
      const schema = query.find((p) => p.name === row.name)!.schema;
      expect(schema.enum, row.name).toEqual(row.values ? [...row.values] : undefined);
    }
  });

  it('documents the recipe parameters on the operations and on POST /v1/jobs', () => {
    const recipe = ['recipe', 'rule', 'skip', 'min_size', 'keep_1d'];
    for (const path of ['/v1/quantize', '/v1/qparams', '/v1/fake-quantize', '/v1/jobs']) {
      expect(
        queryOf(path).map((p) => p.name),
        path,
      ).toEqual(expect.arrayContaining(recipe));
    }
    const jobs = queryOf('/v1/jobs').map((p) => p.name);
    expect(jobs).toEqual(['op', ...ALL_OPTION_ROWS.map((row) => row.name), 'layout']);
    const types = Object.fromEntries(queryOf('/v1/jobs').map((p) => [p.name, p.schema.type]));
    expect(types).toMatchObject({ min_size: 'integer', keep_1d: 'boolean', rule: 'array', skip: 'array' });
  });
});

describe('the command line', () => {
  it.each(cliRows.map((row) => [row.flag, row] as const))('quantd --help lists %s', (flag, row) => {
    expect(usage()).toMatch(new RegExp(`\\n {2}${flag}[ \\n]`));
    for (const value of row.values ?? []) expect(usage()).toContain(value);
  });

  it.each(cliRows.map((row) => [row.flag, row] as const))('fake-quantize takes %s', (flag, row) => {
    expect(COMMAND_OPTIONS['fake-quantize']![flagKey(row)], flag).toBeDefined();
  });

  it.each(specRows.map((row) => [row.flag, row] as const))('%s reaches parseSpec', (flag, row) => {
    const options = exampleOptions(row);
    const args = Object.entries(options).flatMap(([name, value]) => [
      specRows.find((r) => r.name === name)!.flag,
      String(value),
    ]);
    const parsed = parseCommand('quantize', ['in.safetensors', ...args]);
    expect(
      specToOptions(parseSpec(specOptionsOf(parsed.values)))[row.name as keyof SpecOptions],
      flag,
    ).toEqual(expectedValue(row));
  });

  it('--remote sends every flag under its wire name', () => {
    const args = cliRows
      .filter((row) => row.name !== 'recipe') // a file, read and sent as JSON
      .flatMap((row) => (row.kind === 'boolean' ? [row.flag] : [row.flag, String(row.example)]));
    const parsed = parseCommand('fake-quantize', ['in.safetensors', ...args]);
    const query = remoteQuery('fake-quantize', parsed.values);
    for (const row of cliRows.filter((r) => r.name !== 'recipe')) {
      expect(query.getAll(row.name), row.name).toEqual([String(row.example)]);
    }
  });
});

describe('the service and the transports', () => {
  it.each(specRows.map((row) => [row.name, row] as const))(
    'the recipe validator takes %s, in the default and in a rule',
    (name, row) => {
      const options = exampleOptions(row);
      const recipe = parseRecipe({ default: options, rules: [{ glob: '*.mlp.*', ...options }] });
      expect(specToOptions(recipe.defaultSpec!)[name as keyof SpecOptions]).toEqual(expectedValue(row));
      expect(specToOptions(recipe.rules[0]!.spec!)[name as keyof SpecOptions]).toEqual(expectedValue(row));
    },
  );

  it('the recipe validator names every spec option when it refuses a key', () => {
    let error: unknown;
    try {
      parseRecipe({ default: { qdtpye: 'int4' } });
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(QuantdError);
    expect((error as QuantdError).message).toContain(`(keys: ${SPEC_OPTION_NAMES.join(', ')})`);
  });

  it.each(specRows.map((row) => [row.name, row] as const))(
    'a request parameter %s reaches the spec',
    (name, row) => {
      const params = Object.fromEntries(Object.entries(exampleOptions(row)).map(([k, v]) => [k, String(v)]));
      const request = operationRequest('quantize', params);
      expect(specToOptions(request.spec)[name as keyof SpecOptions]).toEqual(expectedValue(row));
    },
  );

  it('the recipe parameters make a recipe request', () => {
    for (const row of RECIPE_OPTION_ROWS) {
      const value = row.name === 'recipe' ? row.example : String(row.example);
      expect(operationRequest('qparams', { [row.name]: value }).recipe, row.name).toBeDefined();
    }
  });

  it('gRPC reads every spec option and the selection from a Spec message', () => {
    const message = Object.fromEntries([
      ...SPEC_OPTION_ROWS.map((row) => [row.name, row.example]),
      ...SELECTION_OPTION_ROWS.map((row) => [row.name, [row.example]]),
    ]);
    expect(Object.keys(specValues(message))).toEqual([
      ...SPEC_OPTION_NAMES,
      ...SELECTION_OPTION_ROWS.map((row) => row.name),
    ]);
  });

  it('the OIP models take the spec options; dequantize those that describe codes, and dtype', () => {
    expect(MODELS.quantize.parameters).toEqual(SPEC_OPTION_NAMES);
    expect(MODELS.choose_qparams.parameters).toEqual(SPEC_OPTION_NAMES);
    expect(MODELS.fake_quantize.parameters).toEqual([...SPEC_OPTION_NAMES, 'dtype']);
    expect(MODELS.dequantize.parameters).toEqual([...CODE_SPEC_OPTION_NAMES, 'dtype']);
    expect(CODE_SPEC_OPTION_NAMES).toEqual([
      'qdtype',
      'scheme',
      'mode',
      'axis',
      'group_size',
      'quant_min',
      'quant_max',
    ]);
  });
});

describe('the messages that list allowed values', () => {
  const enumRows = cliRows.filter((row) => row.values);

  it.each(enumRows.map((row) => [row.name, row] as const))(
    '%s: the error names exactly the table values',
    (name, row) => {
      let error: unknown;
      try {
        if (row === OUTPUT_DTYPE_ROW) operationRequest('dequantize', { dtype: 'bogus' });
        else parseSpec({ [name]: 'bogus' } as SpecOptions);
      } catch (err) {
        error = err;
      }
      expect(error).toBeInstanceOf(QuantdError);
      const { code, message } = error as QuantdError;
      expect(code).toBe(row.unknownCode ?? 'OPTION_INVALID');
      if (row.unknownCode) {
        expect(message).toBe(
          `unknown ${name === 'dtype' ? 'output dtype' : name} bogus; expected one of ${allowedText(row)}`,
        );
      } else {
        expect(message).toBe(`option ${name} must be ${row.values!.join(' or ')} (got bogus)`);
      }
    },
  );
});
