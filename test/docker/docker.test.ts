/**
 * No Docker engine runs here, so the image is kept honest another way: the Dockerfile's
 * structure is checked (multi-stage, current LTS base, non-root, HEALTHCHECK, the files it copies
 * exist, no wasm rebuild in the user's image build), the runtime stage's file set is laid out in a
 * directory exactly as its COPY lines lay it out, and the image's CMD and HEALTHCHECK, with its
 * ENV, run there as real processes — also with QUANTD_HOST set to one address, which the
 * HEALTHCHECK must follow. The compose file is checked against the Dockerfile: loopback-only
 * ports by default, an upload limit, the image's health check.
 */
import { spawn, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
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
  it('is multi-stage on the current Node LTS, builds the addon, and ships the committed wasm', () => {
    const froms = instructions.filter((l) => l.startsWith('FROM '));
    expect(froms.length).toBeGreaterThanOrEqual(2);
    for (const from of froms) expect(from).toMatch(/^FROM node:24-bookworm(-slim)? /);
    const build = instructions.join('\n');
    expect(build).toMatch(/npm ci/);
    expect(build).toMatch(/build\/Release\/quantd\.node/);
    // the reproducibility check of the wasm is CI's (npm run check:wasm), not the user's build
    expect(build).not.toMatch(/build-wasm|clang/);
    expect(finalStage.join('\n')).toMatch(/COPY --from=build \/app\/native\/wasm\/quantd\.wasm/);
  });

  it('.dockerignore keeps data, models, tests and build outputs out of the context', () => {
    const ignored = readFileSync(join(ROOT, '.dockerignore'), 'utf8').split('\n');
    for (const entry of ['node_modules', 'dist', 'build', 'data', 'test', '*.safetensors', '*.gguf']) {
      expect(ignored, entry).toContain(entry);
    }
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

  /**
   * The runtime stage's files, laid out as its `COPY --from=build /app/X ./Y` lines lay them out
   * (node_modules linked rather than copied), in a fresh directory: what the image runs from.
   */
  function runtimeLayout(): string {
    const dir = mkdtempSync(join(tmpdir(), 'quantd-image-'));
    for (const line of finalStage.filter((l) => l.startsWith('COPY --from=build '))) {
      const [from, to] = line.split(/\s+/).slice(2) as [string, string];
      const source = join(ROOT, from.replace(/^\/app\//, ''));
      // COPY's rule: a destination ending in / is a directory the source goes into
      const target = to.endsWith('/') ? join(dir, to, basename(from)) : join(dir, to);
      mkdirSync(dirname(target), { recursive: true });
      if (from.endsWith('node_modules')) symlinkSync(source, target);
      else cpSync(source, target, { recursive: true });
    }
    return dir;
  }

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
    const image = runtimeLayout();
    const data = mkdtempSync(join(tmpdir(), 'quantd-image-data-'));
    const child = spawn(process.execPath, cmd.slice(1), {
      cwd: image,
      env: { ...env, QUANTD_DATA_DIR: data },
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
        cwd: image,
        env: { ...env, QUANTD_HTTP_PORT: String(port) },
      });
      expect(probe.status).toBe(0);
      const body = (await (await fetch(`http://127.0.0.1:${port}/healthz`)).json()) as {
        status: string;
        backend: string;
      };
      expect(body.status).toBe('ok');
      // the runtime stage's files hold the native addon, and the server found it
      expect(body.backend).toBe('native');
      // and the console, built in the build stage
      const page = await fetch(`http://127.0.0.1:${port}/ui/`);
      expect(page.status).toBe(200);
      expect(await page.text()).toContain('<title>quantd console</title>');
    } finally {
      child.kill('SIGTERM');
    }
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    expect(code).toBe(0);
    rmSync(image, { recursive: true, force: true });
    rmSync(data, { recursive: true, force: true });
    // and the HEALTHCHECK fails when nothing listens
    const health = jsonArgs(finalStage.find((l) => l.startsWith('HEALTHCHECK '))!);
    const down = spawnSync(process.execPath, health.slice(1), {
      cwd: ROOT,
      env: { ...process.env, QUANTD_HTTP_PORT: '1' },
    });
    expect(down.status).toBe(1);
  });
});

describe("the image's address needs keys", () => {
  /** `bin/quantd.js serve` with the image's ENV (every address) and `env`, ports moved off. */
  function serveAsImage(env: Record<string, string>) {
    const image = imageEnv();
    expect(image['QUANTD_HOST']).toBe('0.0.0.0');
    const base: NodeJS.ProcessEnv = { ...process.env };
    for (const key of ['QUANTD_API_KEYS', 'QUANTD_ADMIN_KEYS', 'QUANTD_ALLOW_UNAUTHENTICATED'])
      delete base[key];
    delete base['NODE_ENV'];
    const data = mkdtempSync(join(tmpdir(), 'quantd-image-keys-'));
    return {
      data,
      env: { ...base, ...image, QUANTD_HTTP_PORT: '0', QUANTD_GRPC_PORT: '0', QUANTD_DATA_DIR: data, ...env },
    };
  }

  it('without QUANTD_API_KEYS or QUANTD_ALLOW_UNAUTHENTICATED the CMD exits 1 naming both; with a key it serves', async () => {
    const refused = serveAsImage({});
    try {
      const r = spawnSync(process.execPath, ['bin/quantd.js', 'serve'], {
        cwd: ROOT,
        env: refused.env,
        encoding: 'utf8',
        timeout: 30_000,
      });
      expect(r.status, r.stdout + r.stderr).toBe(1);
      expect(r.stderr).toMatch(/CONFIG_INVALID.*QUANTD_HOST/);
      expect(r.stderr).toContain('QUANTD_API_KEYS');
      expect(r.stderr).toContain('QUANTD_ALLOW_UNAUTHENTICATED=1');
    } finally {
      rmSync(refused.data, { recursive: true, force: true });
    }
    // with a key: listening on every address, and the HEALTHCHECK finds it
    const { data, env } = serveAsImage({ QUANTD_API_KEYS: 'image-test-key-0123456789' });
    const child = spawn(process.execPath, ['bin/quantd.js', 'serve'], { cwd: ROOT, env });
    try {
      const port = await new Promise<number>((resolve, reject) => {
        let out = '';
        child.stdout.on('data', (d: Buffer) => {
          out += d.toString();
          const m = /listening: http:\/\/0\.0\.0\.0:(\d+)/.exec(out);
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
    } finally {
      child.kill('SIGTERM');
      await new Promise((resolve) => child.once('exit', resolve));
      rmSync(data, { recursive: true, force: true });
    }
  });
});

describe('the HEALTHCHECK follows QUANTD_HOST', () => {
  it('asks the address the server listens on (127.0.0.2 here), not always 127.0.0.1', async () => {
    const health = jsonArgs(finalStage.find((l) => l.startsWith('HEALTHCHECK '))!);
    const data = mkdtempSync(join(tmpdir(), 'quantd-image-host-'));
    const env = {
      ...process.env,
      ...imageEnv(),
      QUANTD_HOST: '127.0.0.2',
      QUANTD_HTTP_PORT: '0',
      QUANTD_GRPC_PORT: '0',
    };
    const child = spawn(process.execPath, ['bin/quantd.js', 'serve'], {
      cwd: ROOT,
      env: { ...env, QUANTD_DATA_DIR: data },
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
      const probe = (host: string): number | null =>
        spawnSync(process.execPath, health.slice(1), {
          cwd: ROOT,
          env: { ...env, QUANTD_HOST: host, QUANTD_HTTP_PORT: String(port) },
        }).status;
      expect(probe('127.0.0.2')).toBe(0);
      expect(probe('127.0.0.3')).toBe(1); // nothing listens there: the probe really asks the address
    } finally {
      child.kill('SIGTERM');
      await new Promise((resolve) => child.once('exit', resolve));
      rmSync(data, { recursive: true, force: true });
    }
  });
});

describe('docker-compose.yml', () => {
  const compose = parse(readFileSync(join(ROOT, 'docker-compose.yml'), 'utf8')) as {
    services: Record<string, Record<string, unknown>>;
    volumes?: Record<string, unknown>;
  };
  const service = compose.services['quantd']!;

  it('builds this Dockerfile and publishes the HTTP and gRPC ports on loopback only', () => {
    expect(service['build']).toBe('.');
    // one server: 8080 and 50051; replicas scaled in the cluster profile: one port each of the range
    expect(service['ports']).toEqual(['127.0.0.1:8080-8087:8080', '127.0.0.1:50051-50058:50051']);
  });

  it('the cluster profile: Redis with AOF, HAProxy on loopback for HTTP and gRPC, the replicas on one volume', () => {
    const redis = compose.services['redis']!;
    const balancer = compose.services['balancer']!;
    expect(redis['profiles']).toEqual(['cluster']);
    expect(balancer['profiles']).toEqual(['cluster']);
    expect((redis['command'] as string[]).join(' ')).toContain('--appendonly yes');
    expect(balancer['ports']).toEqual(['127.0.0.1:8090:8080', '127.0.0.1:50090:50051']);
    expect(balancer['volumes']).toEqual(['./deploy/haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro']);
    const env = service['environment'] as Record<string, string>;
    expect(env['QUANTD_REDIS_URL']).toBe('${QUANTD_REDIS_URL:-}');
    // a single server does not need Redis: the dependency is not required outside the profile
    expect(service['depends_on']).toEqual({ redis: { condition: 'service_healthy', required: false } });
    const haproxy = readFileSync(join(ROOT, 'deploy', 'haproxy.cfg'), 'utf8');
    expect(haproxy).toMatch(/bind :50051 proto h2/);
    expect(haproxy).toMatch(
      /server-template quantd \d+ quantd:50051 proto h2 check port 8080 check-proto h1/,
    );
    expect(haproxy).toMatch(/option httpchk GET \/readyz/);
  });

  it('bounds uploads (the default of a bare server is 64 GiB)', () => {
    const env = service['environment'] as Record<string, string>;
    expect(env['QUANTD_UPLOAD_LIMIT']).toMatch(/^\d+[kmg]$/);
  });

  it('passes the keys and the waiver through, neither given: a bare `up` is refused until one is', () => {
    const env = service['environment'] as Record<string, string>;
    expect(env['QUANTD_API_KEYS']).toBe('${QUANTD_API_KEYS:-}');
    expect(env['QUANTD_ALLOW_UNAUTHENTICATED']).toBe('${QUANTD_ALLOW_UNAUTHENTICATED:-}');
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
