/**
 * The query-parameter form of recipes on POST /v1/quantize (docs/models.md): `recipe=<JSON>`, and
 * the spec parameters as the default plus repeated `rule=`, `skip=`, `min_size`, `keep_1d`. A
 * real server (dist/, as test/http starts one); the tensors it returns must be those of the
 * CLI's recipe run over the same file; recipe mistakes are 400 problems naming the rule.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { quantdAsync } from '../cli/cli-helpers.js';
import {
  SAFETENSORS,
  expectProblem,
  readTensors,
  send,
  startTestServer,
  type TestServer,
  type Tensors,
} from '../http/helpers.js';
import { DOC_RECIPE, sameBytes, synthetic, tempRoot } from './helpers.js';

const tmp = tempRoot('quantd-model-http-');
const MODEL = join(tmp.dir, 'model.safetensors');
let server: TestServer;
let body: Uint8Array;

beforeAll(async () => {
  const synth = await synthetic();
  // 2 layers, hidden 128: 22 tensors, mlp rows of 128 and 256 (group_size 128 fits)
  synth.writeModelFile(MODEL, synth.llamaTensors({ layers: 2 }));
  body = readFileSync(MODEL);
  writeFileSync(join(tmp.dir, 'recipe.json'), JSON.stringify(DOC_RECIPE));
  server = await startTestServer();
});
afterAll(async () => {
  await server?.server.shutdown('test');
  tmp.cleanup();
});

function post(query: ReadonlyArray<readonly [string, string]>) {
  const q = new URLSearchParams(query.map(([k, v]): [string, string] => [k, v])).toString();
  return send(server.port, `/v1/quantize?${q}`, { body, headers: { 'content-type': SAFETENSORS } });
}

/** The CLI run of the same model with `args`; its tensors. */
async function cli(name: string, args: readonly string[]): Promise<Tensors> {
  const out = join(tmp.dir, name);
  const r = await quantdAsync(['quantize', MODEL, '-o', out, '-q', '--no-progress', ...args], tmp.dir);
  expect(r.code, r.stderr).toBe(0);
  return readTensors(readFileSync(out), out);
}

function expectSameTensors(http: Tensors, file: Tensors): void {
  expect(http.names).toEqual(file.names);
  for (const name of file.names) {
    const a = http.tensors.get(name)!;
    const b = file.tensors.get(name)!;
    expect([a.dtype, a.shape], name).toEqual([b.dtype, b.shape]);
    expect(sameBytes(a.data, b.data), name).toBeNull();
  }
  // the same container metadata, but for the checksum a file records
  const { ['quantd.data_sha256']: _sum, ...fileMeta } = file.metadata ?? {};
  const { ['quantd.data_sha256']: _none, ...httpMeta } = http.metadata ?? {};
  expect(httpMeta).toEqual(fileMeta);
}

describe('POST /v1/quantize with a recipe', () => {
  it('recipe=<JSON> gives the tensors of quantd quantize --recipe', async () => {
    const reply = await post([['recipe', JSON.stringify(DOC_RECIPE)]]);
    expect(reply.status, reply.body.toString()).toBe(200);
    const http = readTensors(reply.body);
    expectSameTensors(http, await cli('recipe.safetensors', ['--recipe', 'recipe.json']));
    expect(http.metadata!['model.layers.0.mlp.up_proj.weight']).toContain('"per_group"');
    expect(http.metadata!['model.embed_tokens.weight']).toBeUndefined();
  });

  it('spec parameters + rule= / skip= / min_size / keep_1d give the tensors of the same CLI flags', async () => {
    const reply = await post([
      ['qdtype', 'int8'],
      ['scheme', 'per_channel'],
      ['skip', '*.embed_tokens.*'],
      ['rule', '*norm*:qdtype=uint8,min_size=0'],
      ['rule', '*.mlp.*:qdtype=int4,scheme=per_group,group_size=128,mode=symmetric'],
      ['min_size', '10000'],
      ['keep_1d', 'true'],
    ]);
    expect(reply.status, reply.body.toString()).toBe(200);
    const file = await cli('flags.safetensors', [
      '--qdtype',
      'int8',
      '--scheme',
      'per_channel',
      '--skip',
      '*.embed_tokens.*',
      '--rule',
      '*norm*:qdtype=uint8,min_size=0',
      '--rule',
      '*.mlp.*:qdtype=int4,scheme=per_group,group_size=128,mode=symmetric',
      '--min-size',
      '10000',
      '--keep-1d',
    ]);
    const http = readTensors(reply.body);
    expectSameTensors(http, file);
    expect(http.metadata!['model.norm.weight']).toContain('"uint8"');
    expect(http.metadata!['model.layers.0.self_attn.k_proj.weight']).toBeUndefined(); // 8192 < 10000
  });

  it('recipe= and rule= together: the rules come before the recipe rules', async () => {
    const reply = await post([
      ['recipe', JSON.stringify(DOC_RECIPE)],
      ['rule', '*.down_proj.*:qdtype=int8,scheme=per_channel'],
    ]);
    expect(reply.status, reply.body.toString()).toBe(200);
    const http = readTensors(reply.body);
    expect(JSON.parse(http.metadata!['model.layers.1.mlp.down_proj.weight']!)).toMatchObject({
      qdtype: 'int8',
      scheme: 'per_channel',
    });
    expect(JSON.parse(http.metadata!['model.layers.1.mlp.up_proj.weight']!)).toMatchObject({
      qdtype: 'int4',
    });
  });
});

describe('recipe mistakes are 400 problems', () => {
  it('RECIPE_INVALID naming the rule', async () => {
    const recipe = {
      rules: [
        { glob: '*.embed_tokens.*', skip: true },
        { glob: '*.mlp.*', qdtype: 'int3' },
      ],
    };
    const reply = await post([['recipe', JSON.stringify(recipe)]]);
    expectProblem(reply, 'RECIPE_INVALID', ['rule 2 (*.mlp.*)', 'UNKNOWN_QDTYPE'], undefined);
    expect(reply.status).toBe(400);
  });

  it('RECIPE_INVALID: a recipe that is not JSON, a malformed rule=, the default given twice', async () => {
    expectProblem(await post([['recipe', '{"rules": [']]), 'RECIPE_INVALID', [
      '(parameter recipe)',
      'not valid JSON',
    ]);
    expectProblem(await post([['rule', '*.mlp.*']]), 'RECIPE_INVALID', ['rule "*.mlp.*"']);
    expectProblem(
      await post([
        ['recipe', JSON.stringify(DOC_RECIPE)],
        ['qdtype', 'int4'],
      ]),
      'RECIPE_INVALID',
      ['default', 'both in the recipe and as options'],
    );
  });

  it('RECIPE_RULE_FAILED naming the rule and the tensor', async () => {
    expectProblem(
      await post([['rule', '*.down_proj.*:scheme=per_group,group_size=96']]),
      'RECIPE_RULE_FAILED',
      ['rule 1 (*.down_proj.*)', 'model.layers.0.mlp.down_proj.weight'],
    );
  });

  it('keep_1d=maybe and min_size=-1 are OPTION_INVALID', async () => {
    expectProblem(await post([['keep_1d', 'maybe']]), 'OPTION_INVALID', ['keep_1d', 'maybe']);
    expectProblem(await post([['min_size', '-1']]), 'OPTION_INVALID', ['min_size', '-1']);
    expectProblem(
      await post([
        ['min_size', '1'],
        ['min_size', '2'],
      ]),
      'OPTION_INVALID',
      ['min_size', 'more than once'],
    );
  });
});
