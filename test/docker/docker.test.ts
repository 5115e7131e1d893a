/**
 * No Docker engine runs here, so the image is kept honest another way: the Dockerfile's
 * structure is checked (multi-stage, non-root, HEALTHCHECK, the files it copies exist), and the
 * exact commands the image runs — its CMD and its HEALTHCHECK, with its ENV — are run here as
 * real processes. The compose file is checked against the Dockerfile.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';

const ROOT = new URL('../../', import.meta.url).pathname;
const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');
/** Instructions with continuation lines joined. */
const instructions = dockerfile
  .replace(/\\\n/g, ' ')
  .split('\n')
  .map((l) => l.trim())
  .filter((l) => l && !l.startsWith('#'));
const finalStage = instructions.slice(instructions.map((l) => l.startsWith('FROM ')).lastIndexOf(true));
const jsonArgs = (instruction: string): string[] =>
  JSON.parse(instruction.slice(instruction.indexOf('['))) as string[];

function imageEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const line of finalStage.filter((l) => l.startsWith('ENV '))) {
    for (const [, key, value] of line.slice(4).matchAll(/(\w+)=(\S+)/g)) env[key!] = value!;
  }
  return env;
}

describe('Dockerfile', () => {
  it('is multi-stage and builds the addon and the wasm in the build stage', () => {
    expect(instructions.filter((l) => l.startsWith('FROM ')).length).toBeGreaterThanOrEqual(2);
    const build = instructions.join('\n');
    expect(build).toMatch(/npm ci/);
    expect(build).toMatch(/build\/Release\/quantd\.node/);
    expect(build).toMatch(/scripts\/build-wasm\.sh/);
  });

  it('runs as a non-root user with a HEALTHCHECK, and exposes the HTTP and gRPC ports', () => {
    const user = finalStage.filter((l) => l.startsWith('USER ')).pop();
    expect(user).toBeDefined();
    expect(user).not.toMatch(/USER\s+(root|0)\b/);
    expect(finalStage.some((l) => l.startsWith('HEALTHCHECK '))).toBe(true);
    expect(finalStage.find((l) => l.startsWith('EXPOSE '))).toMatch(/8080.*50051/);
  });

  it('copies only files that exist in the repository (the build context)', () => {
    for (const line of instructions.filter((l) => l.startsWith('COPY ') && !l.includes('--from'))) {
      const parts = line
        .split(/\s+/)
        .slice(1)
        .filter((p) => !p.startsWith('--'));
      for (const source of parts.slice(0, -1)) expect(existsSync(join(ROOT, source)), source).toBe(true);
    }
  });

  it('the CMD starts the server, the HEALTHCHECK passes against it, and SIGTERM stops it cleanly', async () => {
    const cmd = jsonArgs(finalStage.find((l) => l.startsWith('CMD '))!);
    expect(cmd).toEqual(['node', 'bin/quantd.js', 'serve']);
    // The image's ENV, with ports moved off 8080/50051 so that tests can run side by side.
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      ...imageEnv(),
      QUANTD_HOST: '127.0.0.1',
      QUANTD_HTTP_PORT: '0',
      QUANTD_GRPC_PORT: '0',
    };
    delete env['NODE_ENV'];
    const child = spawn(process.execPath, cmd.slice(1), {
      cwd: ROOT,
      env: { ...env, QUANTD_DATA_DIR: join(ROOT, 'build', 'test-data') },
    });
    try {
      const port = await new Promise<number>((resolve, reject) => {
        let out = '';
        child.stdout.on('data', (d: Buffer) => {
          out += d.toString();
          const m = /listening: http:\/\/[\d.]+:(\d+)/.exec(out);
          if (m) resolve(Number(m[1]));
        });
        child.once('exit', (code) => reject(new Error(`server exited with ${code}: ${out}`)));
      });
      const health = jsonArgs(finalStage.find((l) => l.startsWith('HEALTHCHECK '))!);
      const probe = spawnSync(process.execPath, health.slice(1), {
        cwd: ROOT,
        env: { ...env, QUANTD_HTTP_PORT: String(port) },
      });
      expect(probe.status).toBe(0);
      const body = (await (await fetch(`http://127.0.0.1:${port}/healthz`)).json()) as { status: string };
      expect(body.status).toBe('ok');
    } finally {
      child.kill('SIGTERM');
    }
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    expect(code).toBe(0);
    // and the HEALTHCHECK fails when nothing listens
    const health = jsonArgs(finalStage.find((l) => l.startsWith('HEALTHCHECK '))!);
    const down = spawnSync(process.execPath, health.slice(1), {
      cwd: ROOT,
      env: { ...process.env, QUANTD_HTTP_PORT: '1' },
    });
    expect(down.status).toBe(1);
  });
});

describe('docker-compose.yml', () => {
  const compose = parse(readFileSync(join(ROOT, 'docker-compose.yml'), 'utf8')) as {
    services: Record<string, Record<string, unknown>>;
    volumes?: Record<string, unknown>;
  };
  const service = compose.services['quantd']!;

  it('builds this Dockerfile and publishes the HTTP and gRPC ports', () => {
    expect(service['build']).toBe('.');
    expect(service['ports']).toEqual(expect.arrayContaining(['8080:8080', '50051:50051']));
  });

  it('keeps /data (QUANTD_DATA_DIR of the image) on a declared named volume', () => {
    const volumes = service['volumes'] as string[];
    const mount = volumes.find((v) => v.endsWith(`:${imageEnv()['QUANTD_DATA_DIR']}`));
    expect(mount).toBeDefined();
    expect(Object.keys(compose.volumes ?? {})).toContain(mount!.split(':')[0]);
  });

  it('restarts, health-checks with the image command and passes configuration through the environment', () => {
    expect(service['restart']).toMatch(/^(always|unless-stopped|on-failure)/);
    const healthcheck = service['healthcheck'] as { test: string[] };
    const imageCheck = jsonArgs(finalStage.find((l) => l.startsWith('HEALTHCHECK '))!);
    expect(healthcheck.test).toEqual(['CMD', ...imageCheck]);
    const env = service['environment'] as Record<string, string>;
    for (const key of Object.keys(env)) expect(key).toMatch(/^QUANTD_/);
    expect(Object.keys(env)).toContain('QUANTD_API_KEYS');
  });
});
