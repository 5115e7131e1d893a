/** Runs the real quantd binary (bin/quantd.js, built by the test setup) as a child process. */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const REPO = new URL('../../', import.meta.url).pathname;
export const BIN = join(REPO, 'bin', 'quantd.js');
export const MODEL = join(REPO, 'test', 'golden', 'model.safetensors');

export interface CliResult {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

export function quantd(args: readonly string[], cwd?: string): CliResult {
  const r = spawnSync(process.execPath, [BIN, ...args], { cwd, encoding: 'utf8' });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

export function tempDir(): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'quantd-cli-'));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}
