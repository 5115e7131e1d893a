/**
 * POST /v1/linear-error on a real server: the report is the core's (computed on the pool, the
 * same numbers as in this thread), finer weights give smaller errors, and bad bodies and options
 * are clear refusals.
 */
import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { linearErrorReport, linearOutput, outputError } from '../../src/core/linear-eval.js';
import { parseSpec } from '../../src/core/index.js';
import { send, type TestServer } from './helpers.js';
import { json, modelBytes, startJobServer, tempDir, type Tensor } from '../jobs/helpers.js';

function values(n: number, seed: number, scale: number): Float32Array {
  let s = seed;
  return Float32Array.from({ length: n }, () => {
    s = (s * 16807) % 2147483647;
    return (s / 2147483647 - 0.5) * scale;
  });
}
const f32 = (name: string, shape: number[], x: Float32Array): Tensor => ({
  name,
  dtype: 'F32',
  shape,
  data: new Uint8Array(x.buffer),
});

const [n, inF, out] = [64, 96, 48];
const x = values(n * inF, 3, 4);
for (let s = 0; s < n; s++) x[s * inF + 5]! *= 20; // an outlier input channel
const w = values(out * inF, 7, 0.2);
const bias = values(out, 11, 0.1);
const body = modelBytes([f32('x', [4, 16, inF], x), f32('weight', [out, inF], w), f32('bias', [out], bias)]);

interface Report {
  n: number;
  weight_only: { rel_mse: number; sqnr_db: number; max_abs_error: number };
  qlinear_int8: { rel_mse: number; sqnr_db: number; max_abs_error: number };
  weight_spec: Record<string, string>;
}

describe('POST /v1/linear-error', () => {
  let dir: string;
  let server: TestServer;
  beforeAll(async () => {
    dir = tempDir('linear-error');
    server = await startJobServer(dir);
  });
  afterAll(async () => {
    await server?.server.shutdown('test done');
    rmSync(dir, { recursive: true, force: true });
  });
  const post = (query: string, payload: Uint8Array = body) =>
    send(server.port, `/v1/linear-error${query}`, {
      headers: { 'content-type': 'application/x-safetensors' },
      body: payload,
    });

  it("reports the core's numbers, and finer weights err less", async () => {
    const layer = { x, n, inFeatures: inF, w, outFeatures: out, bias };
    const reports: Report[] = [];
    for (const [query, options] of [
      ['?qdtype=int8&scheme=per_channel', { qdtype: 'int8', scheme: 'per_channel' }],
      [
        '?qdtype=int4&scheme=per_group&group_size=32',
        { qdtype: 'int4', scheme: 'per_group', group_size: '32' },
      ],
      ['?qdtype=int4&scheme=per_tensor', { qdtype: 'int4', scheme: 'per_tensor' }],
    ] as const) {
      const reply = await post(query);
      expect(reply.status, reply.body.toString()).toBe(200);
      const report = json<Report>(reply);
      const local = linearErrorReport(layer, parseSpec(options));
      expect(report).toEqual({ ...local, weight_spec: options });
      reports.push(report);
    }
    expect(reports[0]!.n).toBe(n);
    const [int8, int4g, int4t] = reports.map((r) => r.weight_only.rel_mse);
    expect(int8!).toBeLessThan(int4g!);
    expect(int4g!).toBeLessThan(int4t!);
    expect(reports[0]!.qlinear_int8.sqnr_db).toBeGreaterThan(25);
    // the metrics mean what they say
    const e = outputError([3, 4], [3, 1]);
    expect(e).toEqual({ rel_mse: 9 / 25, sqnr_db: 10 * Math.log10(25 / 9), max_abs_error: 3 });
    expect(
      linearOutput({
        x: Float32Array.of(1, 2),
        n: 1,
        inFeatures: 2,
        w: Float32Array.of(3, 4),
        outFeatures: 1,
      }),
    ).toEqual(Float64Array.of(11));
  });

  it('refuses bad bodies and options clearly', async () => {
    const cases: [string, Uint8Array, string, string][] = [
      ['', modelBytes([f32('x', [2, inF], values(2 * inF, 1, 1))]), 'USAGE', 'needs tensors x'],
      [
        '',
        modelBytes([f32('x', [2, 5], values(10, 1, 1)), f32('weight', [out, inF], w)]),
        'USAGE',
        'must end in in_features 96',
      ],
      [
        '',
        modelBytes([
          f32('x', [2, inF], values(2 * inF, 1, 1)),
          f32('weight', [out, inF], w),
          f32('bias', [3], values(3, 1, 1)),
        ]),
        'USAGE',
        'bias must be [48]',
      ],
      ['?colour=red', body, 'OPTION_INVALID', 'is not an option of linear-error'],
      ['?qdtype=int5', body, 'UNKNOWN_QDTYPE', 'int5'],
    ];
    for (const [query, payload, code, fragment] of cases) {
      const reply = await post(query, payload);
      expect(reply.status, `${code} ${fragment}`).toBe(400);
      const problem = json<{ code: string; detail: string }>(reply);
      expect(problem.code).toBe(code);
      expect(problem.detail).toContain(fragment);
    }
  });
});
