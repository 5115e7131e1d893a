/**
 * Safe defaults (issue 37, item 8): `npm start` / `quantd serve` listens on loopback unless told
 * otherwise, and refuses to start on any other address with authentication off unless
 * QUANTD_ALLOW_UNAUTHENTICATED says so; uploads are bounded at 64 GiB; JSON bodies have limits
 * of their own, which cannot be set past what a string holds.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { DEFAULT_HOST, isLoopbackHost, loadConfig, type Config } from '../../src/config.js';
import { QuantdError } from '../../src/errors/index.js';
import { reachNotice } from '../../src/server/serve.js';
import { BIN } from '../cli/run-cli.js';

const MiB = 1024 ** 2;
const GiB = 1024 ** 3;
const KEY = 'k'.repeat(32);

const data = mkdtempSync(join(tmpdir(), 'quantd-config-'));
afterAll(() => rmSync(data, { recursive: true, force: true }));

const configError = (env: Record<string, string>): QuantdError => {
  try {
    loadConfig(env);
  } catch (err) {
    return err as QuantdError;
  }
  throw new Error(`loadConfig accepted ${JSON.stringify(env)}`);
};

/** The environment of a child server: the test's, without any key or host it may carry. */
function childEnv(env: Record<string, string>): NodeJS.ProcessEnv {
  const base: NodeJS.ProcessEnv = { ...process.env };
  for (const key of ['QUANTD_HOST', 'QUANTD_API_KEYS', 'QUANTD_ADMIN_KEYS', 'QUANTD_ALLOW_UNAUTHENTICATED'])
    delete base[key];
  return {
    ...base,
    QUANTD_HTTP_PORT: '0',
    QUANTD_GRPC_PORT: '0',
    QUANTD_POOL_SIZE: '1',
    QUANTD_LOG_LEVEL: 'warn',
    QUANTD_DATA_DIR: data,
    ...env,
  };
}

describe('defaults', () => {
  it('loopback, a 64 GiB upload limit, 1 / 8 / 4 MiB JSON limits, authentication not waived', () => {
    const config = loadConfig({});
    expect(config.host).toBe('127.0.0.1');
    expect(DEFAULT_HOST).toBe('127.0.0.1');
    expect(config.allowUnauthenticated).toBe(false);
    expect(config.uploadLimit).toBe(64 * GiB);
    expect(config.jsonLimit).toBe(MiB);
    expect(config.calibrationImportLimit).toBe(8 * MiB);
    expect(config.oipJsonLimit).toBe(4 * MiB);
    expect(config.bodyLimit).toBe(2 * GiB); // tensors: unchanged
  });

  it('JSON limits are set in sizes, up to 256 MiB (a decoded body must fit in one string)', () => {
    const config = loadConfig({
      QUANTD_JSON_LIMIT: '1m',
      QUANTD_CALIBRATION_IMPORT_LIMIT: '256m',
      QUANTD_OIP_JSON_LIMIT: '65536',
    });
    expect([config.jsonLimit, config.calibrationImportLimit, config.oipJsonLimit]).toEqual([
      MiB,
      256 * MiB,
      65536,
    ]);
    for (const key of ['QUANTD_JSON_LIMIT', 'QUANTD_CALIBRATION_IMPORT_LIMIT', 'QUANTD_OIP_JSON_LIMIT']) {
      for (const value of ['257m', '1g', '600m']) {
        const err = configError({ [key]: value });
        expect(err.code).toBe('CONFIG_INVALID');
        expect(err.params['key']).toBe(key);
        expect(err.message).toContain('at most 268435456 bytes');
      }
      expect(configError({ [key]: '12 parsecs' }).params['key']).toBe(key);
    }
  });
});

describe('listening beyond loopback needs keys, or saying so', () => {
  it.each([
    '127.0.0.1',
    '127.0.0.2',
    '127.255.255.254',
    'localhost',
    'LocalHost',
    '::1',
    '[::1]',
    '0:0:0:0:0:0:0:1',
    '::ffff:127.0.0.1',
  ])('%s is loopback: no key needed', (host) => {
    expect(isLoopbackHost(host)).toBe(true);
    expect(loadConfig({ QUANTD_HOST: host }).host).toBe(host);
  });

  it.each([
    '0.0.0.0',
    '::',
    '[::]',
    '10.0.0.7',
    '192.168.1.20',
    '::ffff:10.0.0.1',
    'fe80::1',
    'quantd.internal',
    '128.0.0.1',
  ])('%s is not: refused without a key, with CONFIG_INVALID naming both remedies', (host) => {
    expect(isLoopbackHost(host)).toBe(false);
    const err = configError({ QUANTD_HOST: host });
    expect(err.code).toBe('CONFIG_INVALID');
    expect(err.params['key']).toBe('QUANTD_HOST');
    expect(err.params['value']).toBe(host);
    expect(err.message).toContain('QUANTD_API_KEYS');
    expect(err.message).toContain('QUANTD_ALLOW_UNAUTHENTICATED=1');
  });

  it('is allowed with API keys, with admin keys alone, or with QUANTD_ALLOW_UNAUTHENTICATED', () => {
    expect(loadConfig({ QUANTD_HOST: '0.0.0.0', QUANTD_API_KEYS: KEY }).host).toBe('0.0.0.0');
    expect(loadConfig({ QUANTD_HOST: '::', QUANTD_ADMIN_KEYS: KEY }).host).toBe('::');
    for (const on of ['1', 'true', 'YES']) {
      const config = loadConfig({ QUANTD_HOST: '0.0.0.0', QUANTD_ALLOW_UNAUTHENTICATED: on });
      expect([config.host, config.allowUnauthenticated]).toEqual(['0.0.0.0', true]);
    }
    for (const off of ['0', 'false', 'no', '']) {
      expect(configError({ QUANTD_HOST: '0.0.0.0', QUANTD_ALLOW_UNAUTHENTICATED: off }).params['key']).toBe(
        'QUANTD_HOST',
      );
    }
    const err = configError({ QUANTD_HOST: '0.0.0.0', QUANTD_ALLOW_UNAUTHENTICATED: 'sure' });
    expect(err.params['key']).toBe('QUANTD_ALLOW_UNAUTHENTICATED');
  });

  it('the start-up notice says how to listen wider, or that authentication is off', () => {
    const notice = (env: Record<string, string>): string | null => reachNotice(loadConfig(env) as Config);
    expect(notice({})).toBe(
      'only this machine can connect (QUANTD_HOST=127.0.0.1); to serve others, set QUANTD_HOST=0.0.0.0 (or one of its addresses) with QUANTD_API_KEYS',
    );
    expect(notice({ QUANTD_HOST: '0.0.0.0', QUANTD_API_KEYS: KEY })).toBeNull();
    expect(notice({ QUANTD_HOST: '0.0.0.0', QUANTD_ALLOW_UNAUTHENTICATED: '1' })).toMatch(
      /^warning: authentication is off on 0\.0\.0\.0 \(QUANTD_ALLOW_UNAUTHENTICATED\)/,
    );
  });
});

describe('quantd serve', () => {
  it('refuses 0.0.0.0 without a key: exit 1, CONFIG_INVALID on stderr naming both remedies', () => {
    const r = spawnSync(process.execPath, [BIN, 'serve'], {
      env: childEnv({ QUANTD_HOST: '0.0.0.0' }),
      encoding: 'utf8',
      timeout: 30_000,
    });
    expect(r.status, r.stdout + r.stderr).toBe(1);
    expect(r.stdout).not.toContain('listening');
    expect(r.stderr).toContain('CONFIG_INVALID');
    expect(r.stderr).toContain('QUANTD_HOST');
    expect(r.stderr).toContain('QUANTD_API_KEYS');
    expect(r.stderr).toContain('QUANTD_ALLOW_UNAUTHENTICATED=1');
  });

  /** Starts `quantd serve` with `env`; resolves with its stdout once it listens, then stops it. */
  async function startupOutput(env: Record<string, string>): Promise<string> {
    const child = spawn(process.execPath, [BIN, 'serve'], { env: childEnv(env) });
    let out = '';
    try {
      await new Promise<void>((resolve, reject) => {
        child.stdout.on('data', (d: Buffer) => {
          out += d.toString();
          if (/listening: .*\n.*\n/.test(out)) resolve();
        });
        child.once('exit', (code) => reject(new Error(`exited ${code}: ${out}`)));
      });
    } finally {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
    }
    return out;
  }

  it('listens on 127.0.0.1 by default and says how to listen wider', async () => {
    const out = await startupOutput({});
    expect(out).toMatch(/listening: http:\/\/127\.0\.0\.1:\d+ grpc 127\.0\.0\.1:\d+ /);
    expect(out).toContain('only this machine can connect (QUANTD_HOST=127.0.0.1)');
  });

  it('listens on 0.0.0.0 without keys when QUANTD_ALLOW_UNAUTHENTICATED=1, and warns', async () => {
    const out = await startupOutput({ QUANTD_HOST: '0.0.0.0', QUANTD_ALLOW_UNAUTHENTICATED: '1' });
    expect(out).toMatch(/listening: http:\/\/0\.0\.0\.0:\d+ /);
    expect(out).toContain('warning: authentication is off on 0.0.0.0');
  });
});
