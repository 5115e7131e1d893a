/**
 * A full disk: the data directory on a 64 MiB tmpfs (mounted here; that takes root). Uploads and
 * job outputs bigger than the space fail with STORAGE_FULL (507) and leave no partial or
 * temporary file, the server stays up, and a small job afterwards succeeds; a CLI write bigger
 * than the space fails the same way (exit 2). Where the mount is impossible the tests are
 * skipped with the reason printed, except on CI as root, where they must run.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { quantdAsync } from '../cli/cli-helpers.js';
import { expectProblem, send } from '../http/helpers.js';
import {
  SAFETENSORS,
  f32Tensor,
  finished,
  json,
  modelBytes,
  smallModel,
  submitPath,
  submitUpload,
  tempDir,
  waitJob,
  type Job,
} from '../jobs/helpers.js';
import { sendRaw } from './fuzz/raw-http.js';
import { startChildServer, type ChildServer } from './server.js';

const MIB = 1024 * 1024;
const root = tempDir('disk-full');
const mountPoint = join(root, 'tmpfs');

/** Mounts the tmpfs; returns why it could not, or null. */
function mountTmpfs(): string | null {
  mkdirSync(mountPoint, { recursive: true });
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64m', 'tmpfs', mountPoint], { stdio: 'pipe' });
    return null;
  } catch (err) {
    const stderr = (err as { stderr?: Buffer }).stderr?.toString().trim();
    return `mount -t tmpfs failed (${stderr || (err as Error).message}); running as uid ${process.getuid?.()}`;
  }
}

const unavailable = mountTmpfs();
if (unavailable !== null) {
  console.log(`disk-full tests skipped: ${unavailable}`);
  if (process.env['CI'] && process.getuid?.() === 0) {
    throw new Error(`CI runs as root, so the disk-full tests must run: ${unavailable}`);
  }
}

const data = join(mountPoint, 'data');
let server: ChildServer | undefined;

afterAll(async () => {
  await server?.kill();
  if (unavailable === null) execFileSync('umount', [mountPoint]);
  rmSync(root, { recursive: true, force: true });
});

/** Every file under `dir`, relative to it. */
function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => relative(dir, join(e.parentPath, e.name)))
    .sort();
}

/** A float32 model of `count` 4 MiB matrices. */
function model(count: number, seed: number): Uint8Array {
  return modelBytes(
    Array.from({ length: count }, (_, i) => f32Tensor(`layer.${i}.weight`, [1024, 1024], seed + i)),
  );
}

async function expectAlive(s: ChildServer): Promise<void> {
  expect(s.alive(), s.stderr().slice(-2000)).toBe(true);
  expect((await send(s.port, '/healthz')).status).toBe(200);
}

describe.skipIf(unavailable !== null)('the data directory on a full disk (64 MiB tmpfs)', () => {
  it('an upload declared bigger than the free space: 507 STORAGE_FULL at once', async () => {
    server = await startChildServer({ QUANTD_DATA_DIR: data });
    const answer = await sendRaw(
      server.port,
      {
        head: `POST /v1/jobs?qdtype=int8 HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: ${SAFETENSORS}\r\nContent-Length: ${80 * MIB}`,
        body: Buffer.alloc(0),
      },
      10_000,
    );
    const problem = expectProblem(
      { status: answer.status, headers: Object.fromEntries(answer.headers), body: answer.body },
      'STORAGE_FULL',
    );
    console.log(`declared upload: ${problem.detail}`);
    // the server's paths are its own business: relative to the data directory
    expect(problem.detail).toContain('writing jobs;');
    expect(JSON.stringify(problem)).not.toContain(root);
    expect(filesUnder(data)).toEqual([]);
    await expectAlive(server);
  });

  it('a chunked upload that fills the disk: 507 STORAGE_FULL, the partial upload removed', async () => {
    const reply = await send(server!.port, '/v1/jobs?qdtype=int8', {
      headers: { 'content-type': SAFETENSORS },
      body: model(20, 1), // 80 MiB
      chunked: MIB,
    }).catch((err: Error) => err);
    expect(reply, 'an answer, not a broken connection').not.toBeInstanceOf(Error);
    const problem = expectProblem(reply as Exclude<typeof reply, Error>, 'STORAGE_FULL');
    console.log(`chunked upload: ${problem.detail}`);
    expect(problem.detail).toMatch(/writing jobs\/[0-9a-f-]{36}\/input\.safetensors;/);
    expect(JSON.stringify(problem)).not.toContain(root);
    expect(filesUnder(data)).toEqual([]);
    await expectAlive(server!);
  });

  it('a job by path whose result cannot fit: 507 STORAGE_FULL at submission, nothing queued', async () => {
    // 36 MiB on the disk; fake-quantize would write 45 MiB, more than the 28 MiB left
    mkdirSync(join(data, 'models'), { recursive: true });
    writeFileSync(join(data, 'models', 'big.safetensors'), model(9, 300));
    const before = filesUnder(join(data, 'jobs'));
    const reply = await submitPath(server!.port, {
      input: 'models/big.safetensors',
      params: { op: 'fake-quantize', qdtype: 'int8' },
    });
    const problem = expectProblem(reply, 'STORAGE_FULL');
    expect(problem.detail).toContain('writing jobs;');
    expect(filesUnder(join(data, 'jobs'))).toEqual(before);
    // the same model quantized to int8 (9 MiB) fits
    const fits = await submitPath(server!.port, {
      input: 'models/big.safetensors',
      params: { qdtype: 'int8' },
    });
    expect(fits.status, fits.body.toString()).toBe(202);
    const done = await waitJob(server!.port, json<Job>(fits).id, finished, 60_000);
    expect(done.state, JSON.stringify(done.error)).toBe('succeeded');
    // the disk as it was for the tests that follow
    expect((await send(server!.port, `/v1/jobs/${done.id}`, { method: 'DELETE' })).status).toBe(204);
    rmSync(join(data, 'models'), { recursive: true });
    await expectAlive(server!);
  });

  it('a job whose output does not fit: failed STORAGE_FULL, no partial file; a small job then succeeds', async () => {
    // 36 MiB in; fake-quantize writes 36 MiB of floats and 9 MiB of masks: more than is left
    const big = await submitUpload(server!.port, model(9, 100), '?op=fake-quantize&qdtype=int8');
    const failed = await waitJob(server!.port, big.id, finished, 60_000);
    expect(failed.state).toBe('failed');
    expect(failed.error!.code).toBe('STORAGE_FULL');
    console.log(`the job's error: ${failed.error!.message}`);
    expect(failed.error!.message).not.toContain(root);
    // its record stays; no result, partial or temporary, is left
    expect(filesUnder(join(data, 'jobs', big.id)).filter((f) => f !== 'input.safetensors')).toEqual([
      'job.json',
    ]);
    await expectAlive(server!);

    const small = await submitUpload(server!.port, modelBytes(smallModel(5)), '?qdtype=int8');
    const done = await waitJob(server!.port, small.id, finished);
    expect(done.state, JSON.stringify(done.error)).toBe('succeeded');
    expect((await send(server!.port, `/v1/jobs/${small.id}/result`)).status).toBe(200);
    expect(filesUnder(data).filter((f) => f.includes('quantd-tmp'))).toEqual([]);
  });

  it('the CLI writing more than the space: STORAGE_FULL, exit 2, no partial file', async () => {
    const input = join(root, 'big.safetensors');
    writeFileSync(input, model(18, 200)); // 72 MiB, on the ordinary disk
    const outDir = join(mountPoint, 'cli');
    mkdirSync(outDir);
    const r = await quantdAsync([
      'fake-quantize',
      input,
      '-o',
      join(outDir, 'out.safetensors'),
      '--qdtype',
      'int8',
    ]);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(/^error STORAGE_FULL: /);
    expect(r.stderr, 'the CLI names the full path').toContain(outDir);
    expect(readdirSync(outDir)).toEqual([]);
  });
});
