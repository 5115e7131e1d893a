/**
 * `quantd calibrate` offline: a folder of activation batches and an observer recipe in, the
 * qparams the core observers give out; run in two parts (--save-state, --resume) it gives the
 * same qparams as in one; layer statistics are the TypeScript's sums, computed by the kernels; the
 * summary says what was gathered; progress goes by batches, unless --no-progress; mistakes are
 * one-line errors that leave no file behind.
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
import { accumulateLinearStats, emptyLinearStats } from '../../src/core/linear-stats.js';
import { indexLayerStats, readLayerStats } from '../../src/format/layer-stats.js';
import { parseSafetensors } from '../../src/format/safetensors.js';
import { parseCommand } from '../../src/cli/args.js';
import { calibrate } from '../../src/cli/calibrate-command.js';
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
    expect(r.stderr).toMatch(
      /^calibrated 2 tensors over 3 batches \(2 observers, 420 values; \d\.\d KiB in \d+\.\d\d s\) → q\.safetensors; kernels: \w+ \w+.*\n$/,
    );
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

  it('statistics alone: the summary counts each layer’s tokens (not “0 values”); the sums are the TypeScript’s, from the kernels', async () => {
    writeFileSync(
      join(dir, 'stats-recipe.json'),
      JSON.stringify({ observers: [{ match: '*', statistics: 'linear' }] }),
    );
    const r = await succeeds(dir, [
      'calibrate',
      'batches',
      '--observers',
      'stats-recipe.json',
      '--statistics',
      'layers.stats',
    ]);
    expect(r.stderr).toMatch(
      /^calibrated 2 tensors over 3 batches \(statistics of 2 layers, 12–24 tokens each; .*\) → statistics layers\.stats; kernels: /,
    );
    // block.input [8, 16]: 24 tokens of 16; block.out [4, 3]: 4 tokens of 3 per batch
    const index = await indexLayerStats(join(dir, 'layers.stats'));
    for (const name of ['block.input', 'block.out']) {
      let want = emptyLinearStats(name === 'block.input' ? 16 : 3);
      for (const b of batches) {
        const t = b.find((x) => x.name === name)!;
        want = accumulateLinearStats(name, want, new Float32Array(t.data.slice().buffer), t.shape);
      }
      const got = await readLayerStats(index.get(name)!, name);
      expect(got.tokens).toBe(name === 'block.input' ? 24 : 12);
      expect(Buffer.from(got.hessian.buffer).equals(Buffer.from(want.hessian.buffer))).toBe(true);
      expect(Buffer.from(got.absSum.buffer).equals(Buffer.from(want.absSum.buffer))).toBe(true);
    }
  });

  it('the kernels do the work: the summary names them, native where the addon is built', async () => {
    const r = await succeeds(dir, [
      'calibrate',
      'batches',
      '--observers',
      'recipe.json',
      '-o',
      'k.safetensors',
    ]);
    expect(r.stderr).toMatch(/; kernels: native (avx512|avx2|scalar)\n$/);
  });

  it('progress by batches on a terminal, ended on its own line; none with --no-progress or -q', async () => {
    const run = async (...flags: string[]): Promise<{ progress: string[]; summary: string[] }> => {
      const progress: string[] = [];
      const summary: string[] = [];
      const out = join(dir, `p${flags.join('')}.safetensors`);
      const parsed = parseCommand('calibrate', [
        join(dir, 'batches'),
        '--observers',
        join(dir, 'recipe.json'),
        '-o',
        out,
        ...flags,
      ]);
      await calibrate(parsed, {
        stdout: () => {},
        stderr: (text) => void summary.push(text),
        progress: { isTTY: true, write: (text) => void progress.push(text) },
      });
      return { progress, summary };
    };
    const shown = await run();
    // the last update always draws (the bar full), then done() ends its line before the summary
    expect(shown.progress.at(-2)).toMatch(
      new RegExp(`^\\r\\x1b\\[2K\\[#{24}\\] calibrate: 3/3 batches, (\\d\\.\\d KiB)/\\1, .*/s, ETA 0s$`),
    );
    expect(shown.progress.at(-1)).toBe('\n');
    expect(shown.summary).toHaveLength(1);
    const hidden = await run('--no-progress');
    expect(hidden.progress).toEqual([]);
    expect(hidden.summary).toHaveLength(1);
    expect((await run('-q')).progress).toEqual([]);
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
