/**
 * The OpenAPI document a real server serves (/docs/json) documents exactly what that server
 * accepts: each operation's query parameters are the options its refusal of an unknown option
 * lists; POST /v1/jobs adds op and layout (its layout names are the ones the server takes); and
 * the recipe object of a JSON job — its keys, a rule's keys, the default's keys — is what the
 * recipe parser's refusals list. The documented example recipe is accepted.
 */
import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { OPERATIONS } from '../../src/service/index.js';
import { send, octetHeaders, SAFETENSORS, type TestServer } from './helpers.js';
import { json, modelBytes, smallModel, startJobServer, tempDir } from '../jobs/helpers.js';

type Schema = {
  properties?: Record<string, Schema>;
  items?: Schema;
  oneOf?: Schema[];
  pattern?: string;
  example?: unknown;
  additionalProperties?: boolean;
};
type Operation = {
  parameters?: { name: string; in: string }[];
  requestBody?: { content: Record<string, { schema: Schema }> };
};
type Doc = { paths: Record<string, Record<string, Operation>> };
type Problem = { code: string; params: Record<string, string> };

/** The comma-separated list after `label` in a refusal's detail: "(options: a, b)" → [a, b]. */
function listed(detail: string, label: string): string[] {
  const match = new RegExp(`\\(${label}: ([^)]*)\\)`).exec(detail);
  expect(match, detail).not.toBeNull();
  return match![1]!.split(', ');
}

describe('the OpenAPI document of a running server', () => {
  let dir: string;
  let server: TestServer;
  let doc: Doc;
  beforeAll(async () => {
    dir = tempDir('openapi');
    server = await startJobServer(dir);
    const reply = await send(server.port, '/docs/json');
    expect(reply.status).toBe(200);
    doc = json<Doc>(reply);
  });
  afterAll(async () => {
    await server?.server.shutdown('test done');
    rmSync(dir, { recursive: true, force: true });
  });

  const query = (path: string): string[] =>
    (doc.paths[path]!['post']!.parameters ?? []).filter((p) => p.in === 'query').map((p) => p.name);
  const jobBody = (): Schema =>
    doc.paths['/v1/jobs']!['post']!.requestBody!.content['application/json']!.schema;

  /** The refusal of a request the server must turn down with `code`. */
  async function refusal(path: string, code: string, body: Uint8Array, headers: Record<string, string>) {
    const reply = await send(server.port, path, { headers, body });
    expect(reply.status, reply.body.toString()).toBe(400);
    const problem = json<Problem>(reply);
    expect(problem.code).toBe(code);
    return problem.params;
  }
  const tensorBody = new Uint8Array(new Float32Array([1, -2, 3, 0.5]).buffer);
  const model = modelBytes(smallModel());
  const upload = { 'content-type': SAFETENSORS };

  it.each(OPERATIONS)('/v1/%s documents exactly the options the server takes', async (op) => {
    const params = await refusal(
      `/v1/${op}?bogus=1`,
      'OPTION_INVALID',
      tensorBody,
      octetHeaders('float32', [4]),
    );
    expect(query(`/v1/${op}`)).toEqual(listed(params['detail']!, 'options'));
  });

  it('POST /v1/jobs documents op, every option and layout, with the layouts the server takes', async () => {
    const params = await refusal('/v1/jobs?op=fake-quantize&bogus=1', 'OPTION_INVALID', model, upload);
    expect(query('/v1/jobs')).toEqual(['op', ...listed(params['detail']!, 'options'), 'layout']);

    const layout = await refusal('/v1/jobs?layout=nope', 'OPTION_INVALID', model, upload);
    expect(layout['option']).toBe('layout');
    const taken = /must be one of (.*)$/.exec(layout['detail']!)![1]!.split(', ');
    const schema = jobBody().properties!['params']!.properties!['layout']!;
    expect(schema.pattern).toBe(`^(${taken.join('|')})(:.*)?$`);
  });

  it('documents the recipe object with exactly the keys the recipe parser takes', async () => {
    const recipe = jobBody().properties!['recipe']!;
    const refused = async (value: unknown): Promise<string[]> => {
      const q = encodeURIComponent(JSON.stringify(value));
      const params = await refusal(`/v1/jobs?recipe=${q}`, 'RECIPE_INVALID', model, upload);
      return listed(params['detail']!, 'keys');
    };
    expect(Object.keys(recipe.properties!)).toEqual(await refused({ bogus: 1 }));
    expect(Object.keys(recipe.properties!['rules']!.items!.properties!)).toEqual(
      await refused({ rules: [{ glob: '*', bogus: 1 }] }),
    );
    expect(Object.keys(recipe.properties!['default']!.oneOf![0]!.properties!)).toEqual(
      await refused({ default: { bogus: 1 } }),
    );
    for (const schema of [
      recipe,
      recipe.properties!['rules']!.items!,
      recipe.properties!['default']!.oneOf![0]!,
    ]) {
      expect(schema.additionalProperties).toBe(false);
    }

    const example = encodeURIComponent(JSON.stringify(recipe.example));
    const accepted = await send(server.port, `/v1/jobs?recipe=${example}`, { headers: upload, body: model });
    expect(accepted.status, accepted.body.toString()).toBe(202);
  });
});
