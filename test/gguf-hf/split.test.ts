/**
 * llama.cpp's split GGUF (gguf:split_max_size=…) and general.size_label: the set is named and
 * keyed as llama.cpp's gguf-split writes it, a real llama.cpp (node-llama-cpp) loads it from its
 * first shard and computes what the single file computes, and the size label is spelled as
 * llama.cpp's converter spells it (vectors from test/gguf-hf/size_label.py).
 */
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { sizeLabel } from '../../src/core/interop/size-label.js';
import { planSplits, splitPath } from '../../src/format/gguf-split.js';
import type { GgufValue } from '../../src/format/gguf.js';
import { ggufLayout } from '../../src/service/layouts/gguf.js';
import { quantd } from '../cli/run-cli.js';
import { expected, fixtureDir, ggufHeader, loadModel, logitsAfterEach } from './llama-cpp.js';

const DIR = mkdtempSync(join(tmpdir(), 'quantd-gguf-split-'));
afterAll(() => rmSync(DIR, { recursive: true, force: true }));

const value = (v: GgufValue | undefined): unknown => v?.value;

describe('general.size_label', () => {
  const vectors = JSON.parse(readFileSync(new URL('./size-label.json', import.meta.url), 'utf8')) as Array<
    [number, string]
  >;

  it.each([
    [8_030_261_248, '8.0B'],
    [135_000_000, '135M'],
    [1_250_000, '1.2M'], // a tie: Python rounds half to even where toFixed rounds up
    [500, '0.50K'],
  ])('%d parameters → %s', (n, label) => {
    expect(sizeLabel(n)).toBe(label);
  });

  it(`spells ${vectors.length} counts exactly as the converter does`, () => {
    const wrong = vectors.filter(([n, label]) => sizeLabel(n) !== label);
    expect(wrong).toEqual([]);
  });
});

describe('planSplits', () => {
  it('fills each shard up to the soft limit, a larger tensor alone, order kept', () => {
    expect(planSplits([10, 10, 10, 10], 25)).toEqual([
      [0, 1],
      [2, 3],
    ]);
    expect(planSplits([10, 50, 10], 25)).toEqual([[0], [1], [2]]);
    expect(planSplits([10, 10], 1000)).toEqual([[0, 1]]);
  });

  it("names shards as llama.cpp's llama_split_path does", () => {
    expect(splitPath('/m/model.gguf', 0, 3)).toBe('/m/model-00001-of-00003.gguf');
    expect(splitPath('/m/model.gguf', 2, 3)).toBe('/m/model-00003-of-00003.gguf');
  });
});

describe('a model folder → split GGUF → llama.cpp', () => {
  const name = 'llama3-bpe';
  const exp = expected(name);

  it('writes shards with split.* keys, metadata in the first only, and llama.cpp runs the set', async () => {
    const single = join(DIR, 'single.gguf');
    const split = join(DIR, 'split.gguf');
    const one = await ggufLayout.write(fixtureDir(name), single, { type: 'Q8_0' });
    const many = await ggufLayout.write(fixtureDir(name), split, { type: 'Q8_0', split_max_size: '40K' });
    expect(one.files).toEqual([single]);
    expect(many.files.length).toBeGreaterThan(2);
    expect(existsSync(split)).toBe(false);
    const count = many.files.length;
    expect(many.files).toEqual(many.files.map((_, i) => splitPath(split, i, count)));

    const whole = await ggufHeader(single);
    expect(value(whole.kvs.get('general.size_label'))).toMatch(/^\d+(\.\d+)?[KMB]$/);
    expect(whole.kvs.has('split.count')).toBe(false);
    const names: string[] = [];
    for (const [i, file] of many.files.entries()) {
      const h = await ggufHeader(file);
      expect(value(h.kvs.get('split.no'))).toBe(i);
      expect(h.kvs.get('split.no')?.type).toBe('uint16');
      expect(value(h.kvs.get('split.count'))).toBe(count);
      expect(h.kvs.get('split.count')?.type).toBe('uint16');
      expect(value(h.kvs.get('split.tensors.count'))).toBe(whole.tensors.length);
      expect(h.kvs.get('split.tensors.count')?.type).toBe('int32');
      expect(h.kvs.has('general.architecture')).toBe(i === 0);
      expect(h.tensors.length).toBeGreaterThan(0);
      names.push(...h.tensors.map((t) => t.name));
    }
    expect(names).toEqual(whole.tensors.map((t) => t.name));
    const firstKvs = [...(await ggufHeader(many.files[0]!)).kvs.keys()].filter(
      (k) => !k.startsWith('split.'),
    );
    expect(firstKvs).toEqual([...whole.kvs.keys()]);

    const [a, b] = [await loadModel(single), await loadModel(many.files[0]!)];
    try {
      const ref = await logitsAfterEach(a, exp.promptIds);
      const got = await logitsAfterEach(b, exp.promptIds);
      expect(got).toEqual(ref);
    } finally {
      await a.dispose();
      await b.dispose();
    }
  }, 120_000);

  it('writes one plain file when the model fits, and refuses a bad size', async () => {
    const out = join(DIR, 'fits.gguf');
    const r = await ggufLayout.write(fixtureDir(name), out, { type: 'Q4_0', split_max_size: '2G' });
    expect(r.files).toEqual([out]);
    expect((await ggufHeader(out)).kvs.has('split.no')).toBe(false);
    await expect(
      ggufLayout.write(fixtureDir(name), join(DIR, 'bad.gguf'), { split_max_size: '2GiB' }),
    ).rejects.toMatchObject({ code: 'OPTION_INVALID' });
    await expect(
      ggufLayout.write(fixtureDir(name), join(DIR, 'bad.gguf'), { bogus: '1' }),
    ).rejects.toMatchObject({ code: 'OPTION_INVALID' });
  });

  it('the CLI writes the split set and names every file', () => {
    mkdirSync(join(DIR, 'cli'));
    const out = join(DIR, 'cli', 'model.gguf');
    const r = quantd([
      'quantize',
      fixtureDir(name),
      '-o',
      out,
      '--layout',
      'gguf:type=Q8_0,split_max_size=40K',
    ]);
    expect(r.code, r.stderr).toBe(0);
    const written = readdirSync(join(DIR, 'cli')).sort();
    expect(written[0]).toMatch(/^model-00001-of-000\d\d\.gguf$/);
    expect(written.every((f) => /^model-\d{5}-of-\d{5}\.gguf$/.test(f))).toBe(true);
  });
});
