/**
 * An interrupted CLI run leaves no litter (src/format/temp-files.ts, src/cli/signals.ts): SIGINT
 * or SIGTERM in the middle of writing a 256 MiB model removes the temporary file and exits 130 /
 * 143; temporary files a killed process left are removed by the next run writing there, while
 * those of a live process are kept; and git ignores the names.
 */
import { spawn, spawnSync } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readdirSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { f32, scratch, succeeds, writeTensors } from './cli-helpers.js';
import { BIN, REPO, tempDir } from './run-cli.js';

const tmp = tempDir();
afterAll(() => tmp.cleanup());

const BIG = join(tmp.dir, 'big.safetensors');
const TENSORS = 16;
const SIDE = 2048; // 16 tensors of 2048 × 2048 float32: 256 MiB

const SHARDS = ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors'];

/** Writes `count` tensors named from `first` into `path`: the header, then the same 16 MiB each. */
function writeBigFile(path: string, first: number, count: number): string[] {
  const data = new Uint8Array(new Float32Array(SIDE * SIDE).map((_, i) => Math.sin(i)).buffer);
  const entries = Array.from({ length: count }, (_, k) => [
    `layer.${first + k}.weight`,
    { dtype: 'F32', shape: [SIDE, SIDE], data_offsets: [k * data.length, (k + 1) * data.length] },
  ]);
  const json = JSON.stringify(Object.fromEntries(entries));
  const prefix = Buffer.alloc(8);
  prefix.writeBigUInt64LE(BigInt(Buffer.byteLength(json)));
  const fd = openSync(path, 'w');
  try {
    writeSync(fd, prefix);
    writeSync(fd, json);
    for (let k = 0; k < count; k++) writeSync(fd, data);
  } finally {
    closeSync(fd);
  }
  return entries.map(([name]) => name as string);
}

/** BIG (256 MiB), and the same tensors as a sharded model: model/ with two shards and an index. */
function writeBigModels(): void {
  writeBigFile(BIG, 0, TENSORS);
  mkdirSync(join(tmp.dir, 'model'));
  const weightMap: Record<string, string> = {};
  SHARDS.forEach((shard, s) => {
    const names = writeBigFile(join(tmp.dir, 'model', shard), (s * TENSORS) / 2, TENSORS / 2);
    for (const name of names) weightMap[name] = shard;
  });
  const index = { metadata: { total_size: TENSORS * SIDE * SIDE * 4 }, weight_map: weightMap };
  writeFileSync(join(tmp.dir, 'model', 'model.safetensors.index.json'), JSON.stringify(index));
}

/** Temporary files in `dir`, and in a sharded run's staging directory there. */
function temps(dir: string): string[] {
  const names = existsSync(dir) ? readdirSync(dir) : [];
  const staged = names.filter((n) => n.startsWith('.quantd-staging-')).flatMap((n) => temps(join(dir, n)));
  return [...names.filter((n) => n.includes('.quantd-tmp-')), ...staged];
}

/** Starts quantize BIG into `dir`, sends `signal` once its temporary file exists, returns the exit. */
async function interrupt(
  dir: string,
  signal: NodeJS.Signals,
  input = BIG,
  output = 'out.safetensors',
  watch = dir,
): Promise<{ code: number | null; stderr: string }> {
  const child = spawn(process.execPath, [BIN, 'quantize', input, '-o', output, '--no-progress'], {
    cwd: dir,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  let running = true;
  void exited.then(() => (running = false));
  while (running && temps(watch).length === 0) await new Promise((r) => setTimeout(r, 10));
  expect(running, `quantize ended before writing a temporary file: ${stderr}`).toBe(true);
  child.kill(signal);
  return { code: await exited, stderr };
}

describe('an interrupted run removes its temporary file', () => {
  beforeAll(writeBigModels, 120_000);

  it.each([
    ['SIGINT', 130],
    ['SIGTERM', 143],
  ] as const)(
    '%s mid-write: exit %d, no temporary file, no output',
    async (signal, exit) => {
      const dir = scratch(tmp.dir);
      const { code, stderr } = await interrupt(dir, signal);
      expect(code, stderr).toBe(exit);
      expect(stderr).toBe(`error CANCELLED: the request was cancelled by ${signal}\n`);
      expect(readdirSync(dir)).toEqual([]);
    },
    60_000,
  );

  it('SIGINT in a sharded run: the staging directory goes too', async () => {
    const dir = scratch(tmp.dir);
    const out = join(dir, 'out');
    const { code, stderr } = await interrupt(dir, 'SIGINT', join(tmp.dir, 'model'), 'out', out);
    expect(code, stderr).toBe(130);
    expect(readdirSync(out)).toEqual([]);
  }, 60_000);
});

describe('temporary files left by a killed process', () => {
  it('the next run writing there removes those of dead processes, keeps those of live ones', async () => {
    const dir = scratch(tmp.dir);
    mkdirSync(join(dir, 'sub'));
    writeTensors(join(dir, 'in.safetensors'), [
      { name: 'w', dtype: 'F32', shape: [4], data: f32([1, 2, 3, 4]) },
    ]);
    const dead = spawnSync(process.execPath, ['-e', '']).pid!; // has exited: its id names no process
    const stale = `.out.safetensors.quantd-tmp-${dead}-0123456789ab`;
    const live = `.out.safetensors.quantd-tmp-${process.pid}-0123456789ab`;
    const elsewhere = join('sub', stale); // not where this run writes: left alone
    for (const name of [stale, live, elsewhere]) writeFileSync(join(dir, name), 'partial');
    await succeeds(dir, ['quantize', 'in.safetensors', '-o', 'out.safetensors', '-q']);
    expect(existsSync(join(dir, stale))).toBe(false);
    expect(existsSync(join(dir, live))).toBe(true);
    expect(existsSync(join(dir, elsewhere))).toBe(true);
  });
});

describe('.gitignore', () => {
  it('ignores temporary files by the names the writers give them', () => {
    const name = 'test/.model.safetensors.quantd-tmp-1234-0123456789ab';
    expect(spawnSync('git', ['check-ignore', '--no-index', '-q', name], { cwd: REPO }).status).toBe(0);
  });
});
