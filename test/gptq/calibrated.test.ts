/**
 * The GPTQ algorithm through the gptq layout, offline: `quantd calibrate --statistics` gathers
 * each projection's input Hessian from activation batches, `quantd quantize --layout gptq
 * --calibration` writes a checkpoint whose codes, zero points, scales and g_idx are exactly what
 * the core solver (gptq-solve.ts, checked against a torch reference in gptq-solve.test.ts) and
 * packer give for those Hessians, and the layers' output error on the calibration inputs is far
 * below round-to-nearest's. A projection without statistics stays round-to-nearest and the
 * report says so; mismatched or foreign statistics are refused by name.
 */
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { gptqDequantize, gptqPackSolution, type GptqBits } from '../../src/core/interop/gptq.js';
import { gptqSolve } from '../../src/core/interop/gptq-solve.js';
import { linearOutput } from '../../src/core/linear-eval.js';
import { accumulateLinearStats, emptyLinearStats, type LinearStats } from '../../src/core/linear-stats.js';
import { indexLayerStats, readLayerStats, writeLayerStats } from '../../src/format/layer-stats.js';
import { quantdAsync, readStored } from '../cli/cli-helpers.js';
import { tempDir } from '../jobs/helpers.js';
import {
  BATCHES,
  DOWN_PROJ,
  Q_PROJ,
  RECIPE,
  SHAPES,
  UP_PROJ,
  batchTensors,
  calibrateModel,
  weight,
  writeBatch,
  writeModel,
} from './calibrated.helpers.js';

const root = tempDir('gptq-calibrated');
const model = join(root, 'model');
const stats = join(root, 'layers.stats');

beforeAll(async () => {
  const r = await calibrateModel(root, writeModel, writeBatch, BATCHES, RECIPE, stats);
  expect(r.stderr).toContain('calibrated 2 tensors over 3 batches');
  expect(r.code).toBe(0);
}, 60_000);
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** The statistics the core gathers from the batches, in their order. */
function expectedStats(): Map<string, LinearStats> {
  const out = new Map<string, LinearStats>();
  for (let b = 0; b < BATCHES; b++) {
    for (const t of batchTensors(b)) {
      const k = t.shape[t.shape.length - 1]!;
      out.set(t.name, accumulateLinearStats(t.name, out.get(t.name) ?? emptyLinearStats(k), t.x, t.shape));
    }
  }
  return out;
}

interface Options {
  bits: GptqBits;
  groupSize: number;
  sym: boolean;
  actOrder: boolean;
  damp?: number;
}

async function quantize(out: string, layout: string, calibration = true): Promise<string> {
  const args = ['quantize', model, '-o', out, '--layout', layout, '-q', '--report', `${out}.report.json`];
  const r = await quantdAsync(calibration ? [...args, '--calibration', stats] : args);
  expect(r.stderr).toBe('');
  expect(r.code).toBe(0);
  return join(out, 'model.safetensors');
}

const view = <T>(C: new (b: ArrayBuffer) => T, d: Uint8Array): T => new C(d.slice().buffer);

/** Output error of `m` on its calibration inputs with the checkpoint's dequantized weight. */
function outputError(file: string, m: string, bits: GptqBits): number {
  const f = readStored(file);
  const [out, inF] = SHAPES[m]!;
  const scales = view(Uint16Array, f.tensor(`${m}.scales`).data);
  const w = gptqDequantize(
    view(Int32Array, f.tensor(`${m}.qweight`).data),
    view(Int32Array, f.tensor(`${m}.qzeros`).data),
    Float32Array.from(scales, (h) => halfToFloat(h)),
    view(Int32Array, f.tensor(`${m}.g_idx`).data),
    out,
    inF,
    scales.length / out,
    bits,
  );
  let err = 0;
  let ref = 0;
  for (let b = 0; b < BATCHES; b++) {
    const t = batchTensors(b).find((x) => x.name === `${m}.input`)!;
    const layer = {
      x: t.x,
      n: t.x.length / inF,
      inFeatures: inF,
      w: weight(m, 11 + [Q_PROJ, DOWN_PROJ, UP_PROJ].indexOf(m)),
      outFeatures: out,
    };
    const y = linearOutput(layer);
    const yq = linearOutput(layer, Float64Array.from(w));
    for (let j = 0; j < y.length; j++) {
      err += (y[j]! - yq[j]!) ** 2;
      ref += y[j]! ** 2;
    }
  }
  return err / ref;
}

function halfToFloat(h: number): number {
  const e = (h >> 10) & 31;
  const m = h & 1023;
  const v = e === 0 ? m * 2 ** -24 : (1 + m / 1024) * 2 ** (e - 15);
  return h & 0x8000 ? -v : v;
}

describe('quantd calibrate --statistics', () => {
  it('writes each matched input’s Hessian, |x| sums and token count, equal to the core’s', async () => {
    const layers = await indexLayerStats(stats);
    expect([...layers.keys()].sort()).toEqual([`${DOWN_PROJ}.input`, `${Q_PROJ}.input`]);
    for (const [name, want] of expectedStats()) {
      const got = await readLayerStats(layers.get(name)!, name);
      expect(got.tokens).toBe(BATCHES * 128);
      expect(Buffer.from(got.hessian.buffer).equals(Buffer.from(want.hessian.buffer))).toBe(true);
      expect(Buffer.from(got.absSum.buffer).equals(Buffer.from(want.absSum.buffer))).toBe(true);
    }
    // the observer rule beside the statistics still gives q_proj's qparams
    expect(readStored(join(root, 'qparams.safetensors')).names).toEqual([
      `${Q_PROJ}.input.scale`,
      `${Q_PROJ}.input.zero_point`,
    ]);
  });
});

describe('quantd quantize --layout gptq --calibration', () => {
  it.each([
    { bits: 4, groupSize: 32, sym: true, actOrder: false },
    { bits: 4, groupSize: 32, sym: false, actOrder: true },
    { bits: 2, groupSize: -1, sym: false, actOrder: false, damp: 0.1 },
  ] as Options[])(
    '%o: the solver’s codes exactly, output error far below RTN',
    async (o) => {
      const tag = `${o.bits}-${o.groupSize}-${o.sym}-${o.actOrder}`;
      const layout =
        `gptq:bits=${o.bits},group_size=${o.groupSize},sym=${o.sym}` +
        (o.actOrder ? ',desc_act=true' : '') +
        (o.damp !== undefined ? `,damp_percent=${o.damp}` : '');
      const file = await quantize(join(root, `out-${tag}`), layout);
      const f = readStored(file);
      const want = expectedStats();
      for (const m of [Q_PROJ, DOWN_PROJ]) {
        const [out, inF] = SHAPES[m]!;
        const w = weight(m, 11 + [Q_PROJ, DOWN_PROJ].indexOf(m));
        const solution = gptqSolve(m, w, out, inF, want.get(`${m}.input`)!.hessian, {
          bits: o.bits,
          groupSize: o.groupSize,
          sym: o.sym,
          damp: o.damp ?? 0.01,
          blockSize: 128,
          actOrder: o.actOrder,
        });
        const p = gptqPackSolution(m, solution, out, inF, o.bits);
        const same = (name: string, a: ArrayBufferView): void =>
          expect(
            Buffer.from(f.tensor(`${m}.${name}`).data).equals(Buffer.from(a.buffer)),
            `${m}.${name}`,
          ).toBe(true);
        same('qweight', p.qweight);
        same('qzeros', p.qzeros);
        same('scales', p.scales);
        same('g_idx', p.gIdx);
        if (o.actOrder) expect([...p.gIdx].some((g, i) => i > 0 && g < p.gIdx[i - 1]!)).toBe(true);
      }
      const rtn = await quantize(
        join(root, `rtn-${tag}`),
        layout.replace(/,desc_act=true|,damp_percent=[^,]*/g, ''),
        false,
      );
      const report = JSON.parse(readFileSync(`${join(root, `out-${tag}`)}.report.json`, 'utf8')) as {
        tensors: { name: string; type: string; note?: string; output_error?: { relative_mse: number } }[];
      };
      const row = (n: string) => report.tensors.find((t) => t.name === n)!;
      for (const m of [Q_PROJ, DOWN_PROJ]) {
        const gptq = outputError(file, m, o.bits);
        const base = outputError(rtn, m, o.bits);
        expect(gptq, `${m}: GPTQ ${gptq} vs RTN ${base}`).toBeLessThan(0.7 * base);
        // the report's figure, from the statistics alone, is the error on the tokens themselves
        expect(Math.abs(row(`${m}.weight`).output_error!.relative_mse / gptq - 1)).toBeLessThan(1e-9);
      }
      expect(row(`${UP_PROJ}.weight`).output_error).toBeUndefined();
      // the projection without statistics is round-to-nearest, as in the RTN run, and says so
      const r = readStored(rtn);
      for (const name of ['qweight', 'qzeros', 'scales', 'g_idx']) {
        expect(
          Buffer.from(f.tensor(`${UP_PROJ}.${name}`).data).equals(
            Buffer.from(r.tensor(`${UP_PROJ}.${name}`).data),
          ),
        ).toBe(true);
      }
      expect(row(`${Q_PROJ}.weight`).type).toContain('GPTQ');
      expect(row(`${Q_PROJ}.weight`).note).toContain(`GPTQ from ${BATCHES * 128} tokens of ${Q_PROJ}.input`);
      expect(row(`${UP_PROJ}.weight`).note).toContain('round-to-nearest');
      const config = JSON.parse(
        readFileSync(join(root, `out-${tag}`, 'quantize_config.json'), 'utf8'),
      ) as Record<string, unknown>;
      expect(config['desc_act']).toBe(o.actOrder);
      expect(config['damp_percent']).toBe(o.damp ?? 0.01);
      // the statistics file is the run's input, not a file of the model: nothing of it is copied
      expect(readFileSync(join(root, `out-${tag}`, 'config.json'), 'utf8')).toContain('quantization_config');
    },
    60_000,
  );

  it('refuses statistics that do not fit the model, naming the tensor', async () => {
    const wrong = join(root, 'wrong.stats');
    const s = emptyLinearStats(64);
    await writeLayerStats(
      wrong,
      new Map([[`${Q_PROJ}.input`, accumulateLinearStats('x', s, new Float32Array(64).fill(1), [1, 64])]]),
    );
    let r = await quantdAsync([
      'quantize',
      model,
      '-o',
      join(root, 'bad1'),
      '--layout',
      'gptq',
      '--calibration',
      wrong,
    ]);
    expect(r.stderr).toMatch(/CALIBRATION_INVALID.*64 input features.*q_proj\.weight has in_features 128/);
    expect(r.code).not.toBe(0);

    const foreign = join(root, 'foreign.stats');
    await writeLayerStats(foreign, new Map([['encoder.block.0.input', s]]));
    r = await quantdAsync([
      'quantize',
      join(model, 'model.safetensors'),
      '-o',
      join(root, 'bad2.safetensors'),
      '--layout',
      'gptq',
      '--calibration',
      foreign,
    ]);
    expect(r.stderr).toMatch(/CALIBRATION_INVALID.*none of its 1 layers \(encoder\.block\.0\.input\)/);

    r = await quantdAsync([
      'quantize',
      model,
      '-o',
      join(root, 'bad3'),
      '--layout',
      'gptq',
      '--calibration',
      join(model, 'config.json'),
    ]);
    expect(r.stderr).toMatch(/config\.json/);
    expect(r.code).not.toBe(0);

    r = await quantdAsync(['quantize', model, '-o', join(root, 'bad4'), '--layout', 'gptq:desc_act=true']);
    expect(r.stderr).toMatch(/OPTION_INVALID.*gptq:desc_act.*calibration=FILE/);

    r = await quantdAsync([
      'quantize',
      model,
      '-o',
      join(root, 'bad5'),
      '--layout',
      'nf4',
      '--calibration',
      stats,
    ]);
    expect(r.stderr).toMatch(/--calibration .*applies to --layout gptq or --layout awq/);
  }, 60_000);
});
