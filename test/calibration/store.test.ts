/**
 * The calibration store on its own (reference compute, a temporary data directory): its
 * session limit, a damaged session file set aside at start, and the OpenAPI document of the
 * routes a running server serves.
 */
import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { referenceCompute } from '../../src/core/compute.js';
import { isQuantdError } from '../../src/errors/index.js';
import { CalibrationStore } from '../../src/service/calibration/store.js';
import { send, type TestServer } from '../http/helpers.js';
import { json, startJobServer, tempDir } from '../jobs/helpers.js';

const recipe = { observers: [{ match: '*', observer: { kind: 'min_max' } }] };

describe('the calibration store', () => {
  let dir: string;
  beforeAll(() => {
    dir = tempDir('calibration-store');
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("refuses a session beyond its limit with 'CALIBRATION_FULL'", async () => {
    const store = new CalibrationStore({
      dataDir: join(dir, 'a'),
      compute: referenceCompute,
      maxSessions: 2,
    });
    await store.start();
    try {
      await store.create({ recipe });
      await store.create({ recipe });
      let code: string | undefined;
      try {
        await store.create({ recipe });
      } catch (err) {
        code = isQuantdError(err) ? err.code : String(err);
      }
      expect(code).toBe('CALIBRATION_FULL');
    } finally {
      await store.stop();
    }
  });

  it('starts on a data directory it cannot write; creating a session is then OUTPUT_UNWRITABLE', async () => {
    mkdirSync(join(dir, 'blocked'));
    writeFileSync(join(dir, 'blocked', 'file'), 'not a directory');
    const store = new CalibrationStore({
      dataDir: join(dir, 'blocked', 'file', 'data'),
      compute: referenceCompute,
    });
    await store.start();
    try {
      let code: string | undefined;
      try {
        await store.create({ recipe });
      } catch (err) {
        code = isQuantdError(err) ? err.code : String(err);
      }
      expect(code).toBe('OUTPUT_UNWRITABLE');
      expect(store.list()).toEqual([]);
    } finally {
      await store.stop();
    }
  });

  it('sets a damaged session file aside at start and serves the others', async () => {
    const data = join(dir, 'b');
    const first = new CalibrationStore({ dataDir: data, compute: referenceCompute });
    await first.start();
    const kept = await first.create({ recipe });
    await first.stop();
    mkdirSync(join(data, 'calibrations'), { recursive: true });
    writeFileSync(
      join(data, 'calibrations', `${'ab'.repeat(12)}.json`),
      '{"format": "quantd.calibration/1", "recipe"',
    );
    const warnings: string[] = [];
    const second = new CalibrationStore({ dataDir: data, compute: referenceCompute });
    second.log = { warn: (_obj, msg) => warnings.push(msg) };
    await second.start();
    try {
      expect(second.list().map((s) => s.id)).toEqual([kept.id]);
      expect(warnings).toEqual(['calibration session unreadable: set aside']);
      expect(readdirSync(join(data, 'calibrations')).sort()).toEqual(
        [`${'ab'.repeat(12)}.json.damaged`, `${kept.id}.json`].sort(),
      );
    } finally {
      await second.stop();
    }
  });
});

describe('the calibration routes in the OpenAPI document', () => {
  let dir: string;
  let server: TestServer;
  beforeAll(async () => {
    dir = tempDir('calibration-openapi');
    server = await startJobServer(dir);
  });
  afterAll(async () => {
    await server?.server.shutdown('test done');
    rmSync(dir, { recursive: true, force: true });
  });

  it('documents every route', async () => {
    const doc = json<{ paths: Record<string, Record<string, unknown>> }>(
      await send(server.port, '/docs/json'),
    );
    const routes = Object.entries(doc.paths)
      .filter(([p]) => p.startsWith('/v1/calibrations'))
      .flatMap(([p, ops]) => Object.keys(ops).map((m) => `${m.toUpperCase()} ${p}`))
      .sort();
    expect(routes).toEqual(
      [
        'POST /v1/calibrations',
        'GET /v1/calibrations',
        'GET /v1/calibrations/{id}',
        'DELETE /v1/calibrations/{id}',
        'POST /v1/calibrations/{id}/batches',
        'GET /v1/calibrations/{id}/qparams',
        'GET /v1/calibrations/{id}/state',
        'GET /v1/calibrations/{id}/statistics',
      ].sort(),
    );
  });
});
