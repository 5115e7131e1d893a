/**
 * `quantd calibrate` offline: a folder of activation batches and an observer recipe in, the
 * qparams the core observers give out; run in two parts (--save-state, --resume) it gives the
 * same qparams as in one; mistakes are one-line errors that leave no file behind.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import {
  newObserverState,
  observe,
  observerConfig,
  observerQParams,
} from '../../src/core/observers/index.js';
import { parseSafetensors } from '../../src/format/safetensors.js';
import { failsWith, scratch, succeeds, writeTensors, type InputTensor } from './cli-helpers.js';
import { tempDir } from './run-cli.js';

const tmp = tempDir();
afterAll(() => tmp.cleanup());

const RECIPE = {
  observers: [
    { match: '*.input', observer: { kind: 'histogram', bins: 128 } },
    { match: '*.out', observer: { kind: 'per_channel_min_max', ch_axis: 1 } },
  ],
};

function values(seed: number, n: number): Float32Array {
  let s = seed;
  return Float32Array.from({ length: n }, () => {
    s = (s * 48271) % 2147483647;
    return (s / 2147483647 - 0.3) * seed;
  });
}

const f32Tensor = (name: string, shape: number[], x: Float32Array): InputTensor => ({
  name,
  dtype: 'F32',
  shape,
  data: new Uint8Array(x.buffer),
});

const batches = [1, 2, 3].map((i) => [
  f32Tensor('block.input', [8, 16], values(i + 10, 128)),
  f32Tensor('block.out', [4, 3], values(i + 20, 12)),
]);

function expected(upTo: number): Record<string, number[]> {
  const out: Record<string, number[]> = {};
  for (const [name, rule] of [
    ['block.input', RECIPE.observers[0]!],
    ['block.out', RECIPE.observers[1]!],
  ] as const) {
    const config = observerConfig(rule.observer);
    const state = newObserverState(config);
    for (const b of batches.slice(0, upTo)) {
      const t = b.find((x) => x.name === name)!;
      observe(config, state, new Float32Array(t.data.slice().buffer), t.shape);
    }
    const qp = observerQParams(config, state);
    out[`${name}.scale`] = Array.from(qp.scale);
    out[`${name}.zero_point`] = Array.from(qp.zeroPoint);
  }
  return out;
}

function stored(path: string): Record<string, number[]> {
  const { header, tensorBytes } = parseSafetensors(new Uint8Array(readFileSync(path)), path);
  return Object.fromEntries(
    header.entries.map((e) => {
      const bytes = new Uint8Array(tensorBytes(e));
      return [
        e.name,
        Array.from(e.dtype === 'F32' ? new Float32Array(bytes.buffer) : new Int32Array(bytes.buffer)),
      ];
    }),
  );
}

describe('quantd calibrate', () => {
  const dir = scratch(tmp.dir);
  mkdirSync(join(dir, 'batches'));
  batches.forEach((b, i) => writeTensors(join(dir, 'batches', `batch-${i}.safetensors`), b));
  writeFileSync(join(dir, 'recipe.json'), JSON.stringify(RECIPE));

  it('writes the qparams of the observers over a folder of batches', async () => {
    const r = await succeeds(dir, [
      'calibrate',
      'batches',
      '--observers',
      'recipe.json',
      '-o',
      'q.safetensors',
    ]);
    expect(r.stderr).toBe('calibrated 2 tensors over 3 batches (420 values) → q.safetensors\n');
    expect(stored(join(dir, 'q.safetensors'))).toEqual(expected(3));
  });

  it('in two parts (--save-state, then --resume) as in one', async () => {
    await succeeds(dir, [
      'calibrate',
      'batches/batch-0.safetensors',
      'batches/batch-1.safetensors',
      '--observers',
      'recipe.json',
      '-o',
      'q2.safetensors',
      '--save-state',
      'state.json',
    ]);
    expect(stored(join(dir, 'q2.safetensors'))).toEqual(expected(2));
    await succeeds(dir, [
      'calibrate',
      'batches/batch-2.safetensors',
      '--resume',
      'state.json',
      '-o',
      'q3.safetensors',
      '-q',
    ]);
    expect(stored(join(dir, 'q3.safetensors'))).toEqual(expected(3));
  });

  it('refuses mistakes in one line, writing nothing', async () => {
    await failsWith(dir, ['calibrate', 'batches', '--observers', 'recipe.json'], 'USAGE', ['needs -o']);
    await failsWith(dir, ['calibrate', 'batches', '-o', 'x.safetensors'], 'USAGE', [
      '--observers',
      '--resume',
    ]);
    await failsWith(
      dir,
      ['calibrate', 'batches', '--observers', 'recipe.json', '-o', 'q.safetensors'],
      'OUTPUT_EXISTS',
    );
    writeTensors(join(dir, 'other.safetensors'), [f32Tensor('unrelated', [2], Float32Array.of(1, 2))]);
    await failsWith(
      dir,
      ['calibrate', 'other.safetensors', '--observers', 'recipe.json', '-o', 'y.safetensors'],
      'NO_TENSOR_SELECTED',
      ['other.safetensors: no tensor matches a rule of the recipe'],
    );
    writeFileSync(
      join(dir, 'bad.json'),
      JSON.stringify({ observers: [{ match: '*', observer: { kind: 'mean' } }] }),
    );
    await failsWith(
      dir,
      ['calibrate', 'batches', '--observers', 'bad.json', '-o', 'z.safetensors'],
      'RECIPE_INVALID',
      ['observers[0].observer'],
    );
  });
});
