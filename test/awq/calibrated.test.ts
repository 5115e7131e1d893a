/**
 * The AWQ algorithm through the awq layout, offline: `quantd calibrate --statistics` gathers the
 * inputs' statistics, `quantd quantize --layout awq --calibration` writes a checkpoint whose
 * norms and producing projections take exactly the scales the core search (awq-stats.ts, checked
 * against a torch reference in awq-stats.test.ts) finds, whose codes are exactly the core's for
 * the scaled and clipped weights, and whose layers' output error on the calibration inputs is well
 * below round-to-nearest's. What the statistics do not reach stays round-to-nearest, said so.
 */
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { awqDequantize, awqQuantize } from '../../src/core/interop/awq.js';
import { awqPlannedWeight, awqScalesFromStats } from '../../src/core/interop/awq-stats.js';
import { accumulateLinearStats, emptyLinearStats, type LinearStats } from '../../src/core/linear-stats.js';
import { float32FromFloat16Bits } from '../../src/core/float16.js';
import { indexLayerStats, readLayerStats, writeLayerStats } from '../../src/format/layer-stats.js';
import { quantdAsync, readStored } from '../cli/cli-helpers.js';
import { tempDir } from '../jobs/helpers.js';
import {
  BATCHES,
  INPUT_OF,
  NORMS,
  RECIPE,
  SHAPES,
  allInputs,
  norm,
  weight,
  writeBatch,
  writeModel,
  writeShardedModel,
} from './calibrated.helpers.js';
import { calibrateModel } from '../gptq/calibrated.helpers.js';
import { awqLayout } from '../../src/service/layouts/awq.js';
import type { Progress } from '../../src/service/model.js';

const root = tempDir('awq-calibrated');
const model = join(root, 'model');
const statsFile = join(root, 'layers.stats');
const stats = new Map<string, LinearStats>();

beforeAll(async () => {
  const r = await calibrateModel(root, writeModel, writeBatch, BATCHES, RECIPE, statsFile);
  expect(r.code).toBe(0);
  for (const [name, ref] of await indexLayerStats(statsFile))
    stats.set(name, await readLayerStats(ref, name));
}, 60_000);
afterAll(() => rmSync(root, { recursive: true, force: true }));

async function quantize(out: string, calibration: boolean): Promise<string> {
  const args = [
    'quantize',
    model,
    '-o',
    out,
    '--layout',
    'awq:group_size=64',
    '-q',
    '--report',
    `${out}.report.json`,
  ];
  const r = await quantdAsync(calibration ? [...args, '--calibration', statsFile] : args);
  expect(r.stderr).toBe('');
  expect(r.code).toBe(0);
  return join(out, 'model.safetensors');
}

const view = <T>(C: new (b: ArrayBuffer) => T, d: Uint8Array): T => new C(d.slice().buffer);
const OPTIONS = { bits: 4, groupSize: 64, zeroPoint: true, nGrid: 20, maxShrink: 0.5 };
const PARAMS = { groupSize: 64 };

/** The scales the core search gives each group, from the statistics and the original weights. */
function expectedScales(): { columns: Map<string, Float64Array>; rows: Map<string, Float64Array> } {
  const columns = new Map<string, Float64Array>();
  const rows = new Map<string, Float64Array>();
  const search = (members: string[]): Float64Array => {
    const s = awqScalesFromStats(
      stats.get(INPUT_OF[members[0]!]!)!,
      members.map(weight),
      members.map((m) => SHAPES[m]![0]),
      OPTIONS,
    ).scales;
    for (const m of members) columns.set(m, s);
    return s;
  };
  for (const l of ['model.layers.0', 'model.layers.1']) {
    search(['q', 'k', 'v'].map((p) => `${l}.self_attn.${p}_proj`));
    search(['gate', 'up'].map((p) => `${l}.mlp.${p}_proj`));
  }
  rows.set('model.layers.0.self_attn.v_proj', search(['model.layers.0.self_attn.o_proj']));
  rows.set('model.layers.0.mlp.up_proj', search(['model.layers.0.mlp.down_proj']));
  return { columns, rows };
}

/** ‖X·(W_eff − W)ᵀ‖² / ‖X·Wᵀ‖² of `m` in a checkpoint, W_eff = diag(rows)·dequant·diag(1/columns). */
function outputError(file: string, m: string, columns?: Float64Array, rows?: Float64Array): number {
  const f = readStored(file);
  const [out, inF] = SHAPES[m]!;
  const scales = view(Uint16Array, f.tensor(`${m}.scales`).data);
  const q = awqDequantize(
    view(Int32Array, f.tensor(`${m}.qweight`).data),
    view(Int32Array, f.tensor(`${m}.qzeros`).data),
    Float32Array.from(scales, float32FromFloat16Bits),
    out,
    inF,
    inF / 64,
  );
  const w = weight(m);
  const x = allInputs(INPUT_OF[m]!);
  let err = 0;
  let ref = 0;
  for (let t = 0; t < x.length / inF; t++) {
    for (let r = 0; r < out; r++) {
      let y = 0;
      let yq = 0;
      for (let i = 0; i < inF; i++) {
        const xi = x[t * inF + i]!;
        y += xi * w[r * inF + i]!;
        yq += xi * ((q[r * inF + i]! * (rows ? rows[r]! : 1)) / (columns ? columns[i]! : 1));
      }
      err += (y - yq) ** 2;
      ref += y * y;
    }
  }
  return err / ref;
}

describe('the AWQ algorithm through the awq layout', () => {
  let awq = '';
  let rtn = '';
  beforeAll(async () => {
    awq = await quantize(join(root, 'awq'), true);
    rtn = await quantize(join(root, 'rtn'), false);
  }, 120_000);

  it("folds each group's scales into its norm and into the projection before it", () => {
    const { columns, rows } = expectedScales();
    const f = readStored(awq);
    for (const n of NORMS) {
      const s = columns.get(
        `${n.replace(/\.(?:input|post_attention)_layernorm$/, '')}${n.includes('input') ? '.self_attn.q_proj' : '.mlp.gate_proj'}`,
      )!;
      const got = view(Float32Array, f.tensor(`${n}.weight`).data);
      expect([...got]).toEqual([...norm(n)].map((v, i) => Math.fround(v / s[i]!)));
    }
    // untouched: what no group reads
    expect([...view(Float32Array, f.tensor('model.norm.weight').data)]).toEqual(new Array(64).fill(1));
    expect(rows.size).toBe(2);
  });

  it("writes exactly the core's codes for the scaled, divided and clipped weights", () => {
    const { columns, rows } = expectedScales();
    const f = readStored(awq);
    for (const m of Object.keys(SHAPES)) {
      const [out, inF] = SHAPES[m]!;
      const input = INPUT_OF[m];
      const clipStats = input && !/\.(?:q|k)_proj$/.test(m) ? stats.get(input)! : null;
      const planned = awqPlannedWeight(
        weight(m),
        out,
        inF,
        { scales: columns.get(m) ?? null, rowDivide: rows.get(m) ?? null, clipStats },
        OPTIONS,
      ).weight;
      const p = awqQuantize(m, planned, [out, inF], PARAMS);
      expect(Buffer.from(f.tensor(`${m}.qweight`).data).equals(Buffer.from(p.qweight.buffer)), m).toBe(true);
      expect(Buffer.from(f.tensor(`${m}.qzeros`).data).equals(Buffer.from(p.qzeros.buffer)), m).toBe(true);
      expect(Buffer.from(f.tensor(`${m}.scales`).data).equals(Buffer.from(p.scales.buffer)), m).toBe(true);
    }
  });

  it("lowers the layers' output error on the calibration inputs well below round-to-nearest's", () => {
    const { columns, rows } = expectedScales();
    let awqSum = 0;
    let rtnSum = 0;
    const lines: string[] = [];
    const report = JSON.parse(readFileSync(`${join(root, 'awq')}.report.json`, 'utf8')) as {
      tensors: Array<{
        name: string;
        output_error?: { tokens: number; relative_mse: number; sqnr_db: number };
      }>;
    };
    for (const m of Object.keys(SHAPES).filter((k) => INPUT_OF[k])) {
      const a = outputError(awq, m, columns.get(m), rows.get(m));
      const r = outputError(rtn, m);
      // the report's figure, from the statistics alone, is the error on the tokens themselves
      const reported = report.tensors.find((t) => t.name === `${m}.weight`)!.output_error!;
      expect(reported.tokens).toBe(384);
      expect(Math.abs(reported.relative_mse / a - 1)).toBeLessThan(1e-9);
      expect(reported.sqnr_db).toBeCloseTo(-10 * Math.log10(a), 6);
      lines.push(
        `${m}: AWQ ${a.toExponential(3)} RTN ${r.toExponential(3)} (${(100 * (a / r - 1)).toFixed(0)} %)`,
      );
      awqSum += a;
      rtnSum += r;
    }
    console.log(lines.join('\n'));
    expect(awqSum).toBeLessThan(0.7 * rtnSum);
  });

  it('reports what AWQ did to each tensor, and what it could not reach', () => {
    const report = JSON.parse(readFileSync(`${join(root, 'awq')}.report.json`, 'utf8')) as {
      tensors: Array<{ name: string; type: string; note?: string }>;
    };
    const row = (name: string) => report.tensors.find((t) => t.name === name)!;
    expect(row('model.layers.0.self_attn.k_proj.weight').type).toBe('awq int4 g64 zero-point, AWQ');
    expect(row('model.layers.0.self_attn.k_proj.weight').note).toMatch(
      /^AWQ scales α = [0-9.]+ from 384 tokens of model\.layers\.0\.self_attn\.q_proj\.input \(one search for q_proj, k_proj, v_proj\); columns scaled by AWQ$/,
    );
    expect(row('model.layers.0.mlp.up_proj.weight').note).toMatch(
      /columns scaled by AWQ; rows divided by the next layer's scales; \d+ of 128 groups clipped$/,
    );
    expect(row('model.layers.1.self_attn.o_proj.weight').note).toMatch(/^\d+ of 64 groups clipped$/);
    expect(row('model.layers.1.mlp.down_proj.weight')).toMatchObject({
      type: 'awq int4 g64 zero-point',
      note: 'no statistics of model.layers.1.mlp.down_proj.input: round-to-nearest',
    });
    expect(row('model.layers.0.input_layernorm.weight').note).toBe(
      'divided by the AWQ scales of the layers after it',
    );
  });

  it('writes a sharded model as the single file, though groups span its shards', async () => {
    const sharded = join(root, 'sharded');
    mkdirSync(sharded);
    writeShardedModel(sharded);
    const out = join(root, 'sharded-out');
    const r = await quantdAsync([
      'quantize',
      sharded,
      '-o',
      out,
      '--layout',
      'awq:group_size=64',
      '--calibration',
      statsFile,
      '-q',
    ]);
    expect(r.code, r.stderr).toBe(0);
    const whole = readStored(awq);
    const shards = readdirSync(out).filter((f) => f.endsWith('.safetensors'));
    expect(shards).toHaveLength(2);
    let seen = 0;
    for (const file of shards) {
      const f = readStored(join(out, file));
      for (const name of f.names) {
        expect(Buffer.from(f.tensor(name).data).equals(Buffer.from(whole.tensor(name).data)), name).toBe(
          true,
        );
        seen++;
      }
    }
    expect(seen).toBe(whole.names.length);
  }, 60_000);
});

describe('progress', () => {
  it('names the scale searches before the first tensor is written', async () => {
    const seen: Progress[] = [];
    await awqLayout.write(
      join(model, 'model.safetensors'),
      join(root, 'progress.safetensors'),
      { group_size: '64', calibration: statsFile },
      { onProgress: (p) => seen.push(p) },
    );
    const searches = seen.filter((p) => p.tensor.startsWith('AWQ scales of '));
    expect(searches).toHaveLength(6);
    expect(seen.indexOf(searches[5]!)).toBe(5);
    expect(searches.every((p) => p.tensorsDone === 0 && p.bytesDone === 0)).toBe(true);
    expect(seen.at(-1)).toMatchObject({ tensorsDone: seen.at(-1)!.tensorsTotal });
  }, 60_000);
});

describe('statistics that do not fit are refused by name', () => {
  it('another in_features, statistics of another model, a file that is not statistics', async () => {
    const wrong = join(root, 'wrong.stats');
    const s = emptyLinearStats(32);
    const one = accumulateLinearStats('x', s, new Float32Array(32).fill(1), [1, 32]);
    await writeLayerStats(wrong, new Map([['model.layers.0.mlp.gate_proj.input', one]]));
    const run = (stats: string, out: string) =>
      quantdAsync([
        'quantize',
        model,
        '-o',
        join(root, out),
        '--layout',
        'awq:group_size=64',
        '--calibration',
        stats,
      ]);
    let r = await run(wrong, 'bad1');
    expect(r.stderr).toMatch(
      /CALIBRATION_INVALID.*32 input features.*model\.layers\.0\.mlp\.gate_proj\.weight has in_features 64/,
    );
    expect(r.code).not.toBe(0);
    const foreign = join(root, 'foreign.stats');
    await writeLayerStats(foreign, new Map([['encoder.block.0.input', s]]));
    r = await quantdAsync([
      'quantize',
      join(model, 'model.safetensors'),
      '-o',
      join(root, 'bad2.safetensors'),
      '--layout',
      'awq:group_size=64',
      '--calibration',
      foreign,
    ]);
    expect(r.stderr).toMatch(/CALIBRATION_INVALID.*none of its 1 layers \(encoder\.block\.0\.input\)/);
    r = await run(join(model, 'config.json'), 'bad3');
    expect(r.stderr).toMatch(/config\.json/);
    expect(r.code).not.toBe(0);
    for (const out of ['bad1', 'bad3']) expect(existsSync(join(root, out))).toBe(false);
  }, 60_000);
});
