/**
 * The CLI never destroys data (src/cli/output-guard.ts): an output that is an input — by name,
 * through a symlink, as a hard link, a shard or index of a sharded input, a recipe — is refused
 * whatever the flags, and an existing output is replaced only with --force. Every refusal
 * leaves each input byte for byte as it was.
 */
import { createHash } from 'node:crypto';
import { linkSync, lstatSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { f32, failsWith, listing, readStored, scratch, succeeds, writeTensors } from './cli-helpers.js';
import { tempDir } from './run-cli.js';

const tmp = tempDir();
afterAll(() => tmp.cleanup());

const IN = 'x.safetensors';
const SHARDS = ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors'];
const INDEX = 'model.safetensors.index.json';

const sha256 = (path: string): string => createHash('sha256').update(readFileSync(path)).digest('hex');

/** SHA-256 of every file under `dir`, by name: what "untouched" means. */
function hashes(dir: string): Record<string, string> {
  const files = listing(dir).filter((name) => lstatSync(join(dir, name)).isFile());
  return Object.fromEntries(files.map((name) => [name, sha256(join(dir, name))]));
}

/** A directory holding IN: one float tensor (quantize turns it into int8 codes). */
function withInput(): string {
  const dir = scratch(tmp.dir);
  writeTensors(join(dir, IN), [
    { name: 'w', dtype: 'F32', shape: [2, 4], data: f32([1, -2, 3, -4, 5, -6, 7, -8]) },
  ]);
  return dir;
}

/** A directory holding model/: two shards and their index. */
function withShardedModel(): string {
  const dir = scratch(tmp.dir);
  mkdirSync(join(dir, 'model'));
  const names = ['a', 'b'];
  SHARDS.forEach((shard, i) =>
    writeTensors(join(dir, 'model', shard), [
      { name: names[i]!, dtype: 'F32', shape: [2, 2], data: f32([1, 2, 3, 4]) },
    ]),
  );
  const index = { metadata: { total_size: 32 }, weight_map: { a: SHARDS[0], b: SHARDS[1] } };
  writeFileSync(join(dir, 'model', INDEX), JSON.stringify(index));
  return dir;
}

/** Runs `args` in `dir` expecting `code`, and checks that no file changed, byte for byte. */
async function refused(
  dir: string,
  args: readonly string[],
  code: 'OUTPUT_IS_INPUT' | 'OUTPUT_EXISTS' | 'USAGE',
  fragments: readonly string[],
): Promise<void> {
  const before = hashes(dir);
  await failsWith(dir, args, code, fragments);
  expect(hashes(dir)).toEqual(before);
}

describe.concurrent('an output that is an input is refused, --force or not', () => {
  it.each([
    ['quantize', []],
    ['qparams', []],
    ['fake-quantize', []],
    ['quantize', ['--force']],
    ['quantize', ['--layout', 'nf4', '--force']],
  ])('%s %j: the same path', async (op, extra) => {
    const dir = withInput();
    await refused(dir, [op, IN, '-o', IN, ...extra], 'OUTPUT_IS_INPUT', [
      `the output ${IN} is the input ${IN}`,
      '--force does not change this',
    ]);
  });

  it('dequantize onto its own input', async () => {
    const dir = withInput();
    await succeeds(dir, ['quantize', IN, '-o', 'q.safetensors', '-q']);
    await refused(
      dir,
      ['dequantize', 'q.safetensors', '-o', './q.safetensors', '--force'],
      'OUTPUT_IS_INPUT',
      ['the output ./q.safetensors is the input q.safetensors'],
    );
  });

  it('through a symlink to the input', async () => {
    const dir = withInput();
    symlinkSync(IN, join(dir, 'link.safetensors'));
    await refused(dir, ['quantize', IN, '-o', 'link.safetensors', '--force'], 'OUTPUT_IS_INPUT', [
      'the output link.safetensors is the input x.safetensors',
    ]);
  });

  it('as a hard link to the input (same device and inode)', async () => {
    const dir = withInput();
    linkSync(join(dir, IN), join(dir, 'hard.safetensors'));
    await refused(dir, ['quantize', IN, '-o', 'hard.safetensors', '--force'], 'OUTPUT_IS_INPUT', [
      'the output hard.safetensors is the input x.safetensors',
    ]);
  });

  it('the input reached through a symlinked directory', async () => {
    const dir = withInput();
    symlinkSync('.', join(dir, 'same'));
    await refused(dir, ['quantize', `same/${IN}`, '-o', IN, '--force'], 'OUTPUT_IS_INPUT', [
      `the output ${IN} is the input same/${IN}`,
    ]);
  });

  it('a report over a shard of the sharded input', async () => {
    const dir = withShardedModel();
    await refused(
      dir,
      ['quantize', 'model', '-o', 'out', '--report', `model/${SHARDS[1]}`, '--force'],
      'OUTPUT_IS_INPUT',
      [`the output model/${SHARDS[1]} is the input model/${SHARDS[1]}`],
    );
  });

  it('the index of the sharded input, as the output of a layout run', async () => {
    const dir = withShardedModel();
    await refused(
      dir,
      ['quantize', 'model', '-o', `model/${INDEX}`, '--layout', 'nf4', '--force'],
      'OUTPUT_IS_INPUT',
      [`the output model/${INDEX} is the input model/${INDEX}`],
    );
  });

  it('the recipe file', async () => {
    const dir = withInput();
    writeFileSync(join(dir, 'recipe.json'), JSON.stringify({ default: { qdtype: 'int8' } }));
    await refused(
      dir,
      ['quantize', IN, '-o', 'recipe.json', '--recipe', 'recipe.json', '--force'],
      'OUTPUT_IS_INPUT',
      ['the output recipe.json is the input recipe.json'],
    );
  });
});

describe.concurrent('a report that is the output', () => {
  it('is a USAGE error before anything is written', async () => {
    const dir = withInput();
    await refused(dir, ['quantize', IN, '-o', 'q.safetensors', '--report', './q.safetensors'], 'USAGE', [
      '--report ./q.safetensors is the output itself',
    ]);
  });
});

describe.concurrent('an existing output is replaced only with --force', () => {
  it('a file: OUTPUT_EXISTS naming --force; with --force it is replaced', async () => {
    const dir = withInput();
    writeFileSync(join(dir, 'out.safetensors'), 'keep me');
    await refused(dir, ['quantize', IN, '-o', 'out.safetensors'], 'OUTPUT_EXISTS', [
      'out.safetensors already exists; pass --force to replace it',
    ]);
    await succeeds(dir, ['quantize', IN, '-o', 'out.safetensors', '--force', '-q']);
    expect(readStored(join(dir, 'out.safetensors')).tensor('w').dtype).toBe('I8');
  });

  it('a report (the default OUT.report.json of a recipe run)', async () => {
    const dir = withInput();
    writeFileSync(join(dir, 'out.report.json'), 'keep me');
    await refused(dir, ['quantize', IN, '-o', 'out.safetensors', '--skip', 'none'], 'OUTPUT_EXISTS', [
      'out.report.json already exists',
    ]);
  });

  it('a shard already in the output directory of a sharded run', async () => {
    const dir = withShardedModel();
    mkdirSync(join(dir, 'out'));
    writeFileSync(join(dir, 'out', SHARDS[0]!), 'keep me');
    await refused(dir, ['quantize', 'model', '-o', 'out', '-q'], 'OUTPUT_EXISTS', [
      `out/${SHARDS[0]} already exists`,
    ]);
    await succeeds(dir, ['quantize', 'model', '-o', 'out', '-q', '--force']);
    expect(readStored(join(dir, 'out', SHARDS[0]!)).names).toContain('a');
  });

  it("a model folder's output folder: the files the run would write in it", async () => {
    const dir = scratch(tmp.dir);
    mkdirSync(join(dir, 'model'));
    writeTensors(join(dir, 'model', 'model.safetensors'), [
      { name: 'w', dtype: 'F32', shape: [2, 4], data: f32([1, -2, 3, -4, 5, -6, 7, -8]) },
    ]);
    writeFileSync(join(dir, 'model', 'config.json'), '{"model_type": "llama"}');
    await succeeds(dir, ['quantize', 'model', '-o', 'out', '-q']);
    const written = hashes(join(dir, 'out'));
    await refused(dir, ['quantize', 'model', '-o', 'out', '-q'], 'OUTPUT_EXISTS', [
      'already exists; pass --force',
    ]);
    expect(hashes(join(dir, 'out'))).toEqual(written);
    await succeeds(dir, ['quantize', 'model', '-o', 'out', '-q', '--force']);
  });

  it("a layout's side file named after a file output", async () => {
    const dir = withInput();
    writeFileSync(join(dir, 'out.quantize_config.json'), 'keep me');
    await refused(dir, ['quantize', IN, '-o', 'out.safetensors', '--layout', 'gptq'], 'OUTPUT_EXISTS', [
      'out.quantize_config.json already exists',
    ]);
  });

  it('an existing empty output directory is fine for a sharded run', async () => {
    const dir = withShardedModel();
    mkdirSync(join(dir, 'out'));
    await succeeds(dir, ['quantize', 'model', '-o', 'out', '-q']);
  });
});
