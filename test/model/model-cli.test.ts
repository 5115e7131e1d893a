/**
 * A whole-model recipe run through the real binary, on the synthetic llama-like model (202
 * tensors: bf16 / f16 weights, f32 norms, an I64 buffer). The output must be a valid safetensors
 * file by a parser written here from the spec; every passed-through tensor must be the input's
 * bytes; every quantized tensor must be, byte for byte, what a plain single-spec run of its rule
 * gives; the data checksum must be the SHA-256 of the data section; the report must say what
 * happened; concurrency and the memory budget must not change a byte; and the flag form of a
 * recipe must give the file its JSON form gives.
 */
import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import {
  dequantizeTensor,
  floatDTypeOfSt,
  parseSpec,
  planLayout,
  toFloat32,
  typedView,
  type QParams,
  type SpecOptions,
  type StDType,
} from '../../src/core/index.js';
import { serializeSafetensors } from '../../src/format/index.js';
import type { QualityReport } from '../../src/service/index.js';
import { expectCliError, failsWith, quantdAsync, readStored, succeeds } from '../cli/cli-helpers.js';
import type { CliResult } from '../cli/run-cli.js';
import {
  DOC_RECIPE,
  DOC_RULE_FLAGS,
  readRaw,
  sameBytes,
  sha256,
  synthetic,
  tempRoot,
  tree,
  type RawFile,
  type SynthTensor,
} from './helpers.js';

const tmp = tempRoot();
afterAll(() => tmp.cleanup());
const at = (name: string): string => join(tmp.dir, name);

const MODEL = at('model.safetensors');
const OUT = at('out.safetensors');
const MLP = 'rule 2 (*.mlp.*)';
const QKV = 'rule 3 (re:self_attn\\.(q|k|v)_proj)';

let tensors: SynthTensor[];
let input: RawFile;
let output: RawFile;
let report: QualityReport;
let mainRun: CliResult;
/** Tensor names per rule label, by this test's own reading of the recipe. */
const byRule = new Map<string, string[]>();
const ruleRuns = new Map<string, RawFile>();

/** What the recipe must decide for each tensor, worked out here independently of src/service. */
function expectedRule(name: string, dtype: string, shape: readonly number[]): string | null {
  if (dtype === 'I64') return null;
  if (name.includes('.embed_tokens.')) return null;
  if (shape.length === 1) return null;
  if (name.includes('.mlp.')) return MLP;
  if (/self_attn\.(q|k|v)_proj/.test(name)) return QKV;
  return 'default';
}

/** The recipe with min_size, skip_1d and per-rule overrides, and the same thing as flags. */
const RECIPE_B = {
  default: { qdtype: 'int8', scheme: 'per_channel' },
  rules: [
    { glob: '*.embed_tokens.*', skip: true },
    { glob: '*norm*', qdtype: 'uint8', min_size: 0 },
    { glob: '*.mlp.*', qdtype: 'int4', scheme: 'per_group', group_size: 128, mode: 'symmetric' },
  ],
  min_size: 10000,
  skip_1d: false,
};
const FLAGS_B = [
  '--qdtype',
  'int8',
  '--scheme',
  'per_channel',
  '--skip',
  '*.embed_tokens.*',
  '--rule',
  '*norm*:qdtype=uint8,min_size=0',
  '--rule',
  '*.mlp.*:qdtype=int4,scheme=per_group,group_size=128,mode=symmetric',
  '--min-size',
  '10000',
  '--keep-1d',
];

async function ok(args: readonly string[]): Promise<CliResult> {
  const r = await quantdAsync(args, tmp.dir);
  if (r.code !== 0) throw new Error(`quantd ${args.join(' ')} exited ${r.code}: ${r.stderr}`);
  return r;
}

beforeAll(async () => {
  const synth = await synthetic();
  tensors = synth.llamaTensors();
  synth.writeModelFile(MODEL, tensors);
  writeFileSync(at('recipe.json'), JSON.stringify(DOC_RECIPE));
  mkdirSync(at('reports'));
  writeFileSync(at('recipe-b.json'), JSON.stringify(RECIPE_B));
  for (const [name, dtype, shape] of tensors) {
    const rule = expectedRule(name, dtype, shape);
    if (rule !== null) byRule.set(rule, [...(byRule.get(rule) ?? []), name]);
  }
  const model = ['quantize', MODEL, '--no-progress'];
  const runs: Array<Promise<unknown>> = [
    ok([...model, '-o', OUT, '--recipe', 'recipe.json']).then((r) => (mainRun = r)),
    ok([
      ...model,
      '-o',
      at('c1.safetensors'),
      '--recipe',
      'recipe.json',
      '--concurrency',
      '1',
      '--report',
      at('reports/c1.json'),
      '-q',
    ]),
    ok([
      ...model,
      '-o',
      at('c4.safetensors'),
      '--recipe',
      'recipe.json',
      '--concurrency',
      '4',
      '--memory',
      '1M',
      '-q',
    ]),
    ok([...model, '-o', at('b-recipe.safetensors'), '--recipe', 'recipe-b.json', '-q']),
    ok([...model, '-o', at('b-flags.safetensors'), ...FLAGS_B, '-q']),
    ...[...byRule].map(([rule, names], k) =>
      ok([
        ...model,
        '-o',
        at(`rule-${k}.safetensors`),
        '-q',
        ...DOC_RULE_FLAGS[rule]!,
        ...names.flatMap((n) => ['--include', n]),
      ]).then(() => ruleRuns.set(rule, readRaw(at(`rule-${k}.safetensors`)))),
    ),
  ];
  await Promise.all(runs);
  input = readRaw(MODEL);
  output = readRaw(OUT);
  report = JSON.parse(readFileSync(at('out.report.json'), 'utf8')) as QualityReport;
});

describe('quantize MODEL --recipe: the output file', () => {
  it('the synthetic model is what the tests assume: 202 tensors, bf16/f16/f32/I64', () => {
    expect(tensors).toHaveLength(202);
    expect(new Set(tensors.map((t) => t[1]))).toEqual(new Set(['BF16', 'F16', 'F32', 'I64']));
    expect([...byRule.keys()].sort()).toEqual([MLP, QKV, 'default'].sort());
    expect(mainRun.stderr).toContain('quantize: 155 tensors transformed, 47 passed through');
    expect(mainRun.stdout).toBe('');
  });

  it('opens with an independent parser and with src/format, the same tensors in input order', () => {
    const stored = readStored(OUT);
    expect(stored.names).toEqual(output.tensors.map((t) => t.name));
    const expectedNames = tensors.flatMap(([name, dtype, shape]) =>
      expectedRule(name, dtype, shape) === null ? [name] : [name, `${name}.scale`, `${name}.zero_point`],
    );
    expect(output.tensors.map((t) => t.name)).toEqual(expectedNames);
    for (const t of output.tensors) {
      const s = stored.tensor(t.name);
      expect(s.dtype).toBe(t.dtype);
      expect(s.shape).toEqual(t.shape);
      expect(sameBytes(s.data, t.data), t.name).toBeNull();
    }
    // the header is padded so the data section starts 8-byte aligned
    expect((8 + output.headerLength) % 8).toBe(0);
  });

  it('every passed-through tensor is byte-identical to the input', () => {
    const passed = tensors.filter(([n, d, s]) => expectedRule(n, d, s) === null);
    expect(passed.map((t) => t[0])).toEqual(
      expect.arrayContaining([
        'model.embed_tokens.weight',
        'model.norm.weight',
        'model.rotary_emb.position_ids',
        'model.layers.0.input_layernorm.weight',
      ]),
    );
    expect(passed).toHaveLength(47);
    for (const [name] of passed) {
      const a = output.byName.get(name)!;
      const b = input.byName.get(name)!;
      expect(a.dtype, name).toBe(b.dtype);
      expect(a.shape, name).toEqual(b.shape);
      expect(sameBytes(a.data, b.data), name).toBeNull();
      expect(output.metadata![name], name).toBeUndefined();
    }
  });

  it('every quantized tensor equals a plain single-spec run of its rule (codes, scale, zero_point, meta)', () => {
    let compared = 0;
    for (const [rule, names] of byRule) {
      const plain = ruleRuns.get(rule)!;
      for (const name of names) {
        for (const key of [name, `${name}.scale`, `${name}.zero_point`]) {
          const a = output.byName.get(key);
          const b = plain.byName.get(key);
          expect(a, `${key} in the recipe output`).toBeDefined();
          expect(b, `${key} in the ${rule} run`).toBeDefined();
          expect([a!.dtype, a!.shape], key).toEqual([b!.dtype, b!.shape]);
          expect(sameBytes(a!.data, b!.data), `${key} (${rule})`).toBeNull();
          compared++;
        }
        expect(JSON.parse(output.metadata![name]!), name).toEqual(JSON.parse(plain.metadata![name]!));
      }
    }
    expect(compared).toBe(155 * 3);
  });

  it('metadata: the container format and each quantized tensor meta', () => {
    const meta = output.metadata!;
    expect(meta['format']).toBe('quantd.qtensor/1');
    const mlp = JSON.parse(meta['model.layers.3.mlp.down_proj.weight']!) as Record<string, unknown>;
    expect(mlp).toMatchObject({
      qdtype: 'int4',
      scheme: 'per_group',
      mode: 'symmetric',
      group_size: 128,
      shape: [128, 256],
      source_dtype: 'float16', // layer 3 is the f16 one of every four
    });
    const head = JSON.parse(meta['lm_head.weight']!) as Record<string, unknown>;
    expect(head).toMatchObject({ qdtype: 'int8', scheme: 'per_channel', mode: 'affine', axis: 0 });
    expect(output.byName.get('model.layers.3.mlp.down_proj.weight')).toMatchObject({
      dtype: 'U8',
      shape: [(128 * 256) / 2],
    });
    expect(output.byName.get('model.layers.3.mlp.down_proj.weight.scale')).toMatchObject({
      dtype: 'F32',
      shape: [128, 2],
    });
    const keys = Object.keys(meta).filter((k) => k !== 'format' && k !== 'quantd.data_sha256');
    expect(keys.sort()).toEqual([...byRule.values()].flat().sort());
  });

  it('quantd.data_sha256 is the SHA-256 of the data section', () => {
    expect(output.metadata!['quantd.data_sha256']).toBe(sha256(output.data));
    expect(output.metadata!['quantd.data_sha256']).toMatch(/^[0-9a-f]{64}$/);
  });
});

describe('inspect --verify', () => {
  it('passes on the recipe output', async () => {
    const r = await succeeds(tmp.dir, ['inspect', '--verify', OUT]);
    expect(r.stdout).toContain(`data sha256: ${sha256(output.data)} (verified)`);
  });

  it('CHECKSUM_MISMATCH (exit 2) after one data byte is flipped', async () => {
    const bytes = readFileSync(OUT);
    const damaged = at('damaged.safetensors');
    const where = 8 + output.headerLength + Math.floor(output.data.length / 2);
    bytes[where] = bytes[where]! ^ 0x01;
    writeFileSync(damaged, bytes);
    const r = await quantdAsync(['inspect', '--verify', damaged]);
    expect(r.code).toBe(2);
    expectCliError(r, 'CHECKSUM_MISMATCH', [damaged, sha256(output.data), sha256(readRaw(damaged).data)]);
  });

  it('CHECKSUM_MISSING for a file that records no checksum (a plain run)', async () => {
    const plain = at('rule-0.safetensors');
    expect(readRaw(plain).metadata!['quantd.data_sha256']).toBeUndefined();
    expectCliError(await quantdAsync(['inspect', '--verify', plain]), 'CHECKSUM_MISSING', [plain]);
  });
});

describe('the quality report (OUT.report.json)', () => {
  it('format and summary counts', () => {
    expect(report.format).toBe('quantd.report/1');
    const quantized = [...byRule.values()].flat().length;
    expect(report.summary.tensors_quantized).toBe(quantized);
    expect(report.summary.tensors_quantized).toBe(155);
    expect(report.summary.tensors_passed_through).toBe(202 - 155);
    expect(report.tensors).toHaveLength(155);
    expect(report.passed_through).toHaveLength(47);
    expect(report.summary.bytes_in).toBe(input.data.length);
    const outData = output.data.length;
    expect(report.summary.bytes_out).toBe(outData);
    expect(report.summary.compression_ratio).toBeCloseTo(input.data.length / outData, 10);
    expect(report.summary.elements).toBe(report.tensors.reduce((n, t) => n + t.elements, 0));
    expect(report.summary.worst).toEqual(report.tensors.slice(0, 5).map((t) => t.name));
    expect(report.summary.seconds).toBeGreaterThan(0);
  });

  it('tensors are listed worst first (ascending SQNR), each with the rule that chose it', () => {
    const sqnr = report.tensors.map((t) => t.sqnr_db);
    expect(sqnr.every((s) => typeof s === 'number')).toBe(true);
    expect(sqnr).toEqual([...(sqnr as number[])].sort((a, b) => a - b));
    for (const t of report.tensors) {
      const [, dtype, shape] = tensors.find(([n]) => n === t.name)!;
      expect(t.rule, t.name).toBe(expectedRule(t.name, dtype, shape));
      const raw = input.byName.get(t.name)!;
      expect(t.bytes_in, t.name).toBe(raw.data.length);
      expect(t.bytes_out, t.name).toBe(
        [t.name, `${t.name}.scale`, `${t.name}.zero_point`].reduce(
          (n, k) => n + output.byName.get(k)!.data.length,
          0,
        ),
      );
      expect(t.elements).toBe(shape.reduce((a, b) => a * b, 1));
      expect(t.source_dtype).toBe(dtype === 'BF16' ? 'bfloat16' : 'float16');
    }
  });

  it('unused_rules lists the rule that matched nothing', () => {
    expect(report.unused_rules).toEqual(['rule 4 (never matches)']);
  });

  it('passed_through says why', () => {
    const reasons = new Map(report.passed_through.map((p) => [p.name, p.reason]));
    expect(reasons.get('model.embed_tokens.weight')).toBe('skipped by rule (rule 1 (*.embed_tokens.*))');
    expect(reasons.get('model.rotary_emb.position_ids')).toBe('I64, not a float tensor');
    expect(reasons.get('model.norm.weight')).toBe('1-D tensor (default)');
    expect(reasons.get('model.layers.21.post_attention_layernorm.weight')).toBe('1-D tensor (default)');
    expect(report.passed_through.find((p) => p.name === 'model.rotary_emb.position_ids')).toEqual({
      name: 'model.rotary_emb.position_ids',
      dtype: 'I64',
      shape: [1, 64],
      reason: 'I64, not a float tensor',
    });
  });

  it('int8 per_channel tensors have a higher SQNR than int4 ones', () => {
    const int8 = report.tensors.filter((t) => t.qdtype === 'int8').map((t) => t.sqnr_db!);
    const int4 = report.tensors.filter((t) => t.qdtype === 'int4').map((t) => t.sqnr_db!);
    expect(int8.length).toBe(89);
    expect(int4.length).toBe(66);
    expect(Math.min(...int8)).toBeGreaterThan(Math.max(...int4));
  });

  it('the statistics are those of dequantize(quantize(x)) against x', () => {
    const specs: Record<string, SpecOptions> = {
      'model.layers.5.mlp.gate_proj.weight': DOC_RECIPE.rules[1] as SpecOptions,
      'model.layers.7.self_attn.k_proj.weight': { qdtype: 'int8', scheme: 'per_channel' },
      'lm_head.weight': { qdtype: 'int8', scheme: 'per_channel' },
    };
    for (const [name, options] of Object.entries(specs)) {
      const { glob: _g, ...rest } = options as SpecOptions & { glob?: string };
      const src = input.byName.get(name)!;
      const dtype = floatDTypeOfSt(src.dtype as StDType)!;
      const shape = src.shape;
      const spec = parseSpec(rest);
      const x = toFloat32(new Uint8Array(src.data), dtype);
      const zp = output.byName.get(`${name}.zero_point`)!;
      const qparams: QParams = {
        scale: typedView(Float32Array, new Uint8Array(output.byName.get(`${name}.scale`)!.data)),
        zeroPoint: typedView(Int32Array, new Uint8Array(zp.data)),
      };
      const back = typedView(
        Float32Array,
        dequantizeTensor(
          {
            name,
            data: new Uint8Array(output.byName.get(name)!.data),
            spec,
            layout: planLayout(name, shape, spec),
            qparams,
          },
          'float32',
        ),
      );
      let err2 = 0;
      let sig2 = 0;
      let maxErr = 0;
      for (let i = 0; i < x.length; i++) {
        const e = x[i]! - back[i]!;
        err2 += e * e;
        sig2 += x[i]! * x[i]!;
        maxErr = Math.max(maxErr, Math.abs(e));
      }
      const t = report.tensors.find((r) => r.name === name)!;
      expect(t.sqnr_db!, name).toBeCloseTo(10 * Math.log10(sig2 / err2), 6);
      expect(t.rmse / Math.sqrt(err2 / x.length), name).toBeCloseTo(1, 6);
      expect(t.max_abs_error, name).toBeCloseTo(maxErr, 9);
    }
  });
});

describe('where the report goes, and what does not change the output', () => {
  it('--report PATH writes the report there (and not beside the output)', () => {
    const r = JSON.parse(readFileSync(at('reports/c1.json'), 'utf8')) as QualityReport;
    expect(r.format).toBe('quantd.report/1');
    expect(r.summary.tensors_quantized).toBe(155);
    expect(r.tensors.map((t) => [t.name, t.sqnr_db])).toEqual(report.tensors.map((t) => [t.name, t.sqnr_db]));
    expect(existsSync(at('c1.report.json'))).toBe(false);
    expect(tree(tmp.dir).filter((n) => n.includes('quantd-tmp'))).toEqual([]);
  });

  it('--concurrency 1 and --concurrency 4 --memory 1M give byte-identical files', () => {
    const main = readFileSync(OUT);
    expect(sameBytes(readFileSync(at('c1.safetensors')), main)).toBeNull();
    expect(sameBytes(readFileSync(at('c4.safetensors')), main)).toBeNull();
  });

  it('--skip / --rule / --min-size / --keep-1d give the file the same recipe in JSON gives', () => {
    const b = readFileSync(at('b-recipe.safetensors'));
    expect(sameBytes(readFileSync(at('b-flags.safetensors')), b)).toBeNull();
    const reportB = JSON.parse(readFileSync(at('b-recipe.report.json'), 'utf8')) as QualityReport;
    const reportF = JSON.parse(readFileSync(at('b-flags.report.json'), 'utf8')) as QualityReport;
    const strip = (r: QualityReport) => ({ ...r, summary: { ...r.summary, seconds: 0 } });
    expect(strip(reportF)).toEqual(strip(reportB));
    // what the recipe means: norms (1-D, 128 elements) by the rule that lowers min_size,
    // k/v projections (8192 elements) pass under min_size 10000, q/o quantized by the default
    const raw = readRaw(at('b-recipe.safetensors'));
    const meta = (n: string) =>
      raw.metadata![n] && (JSON.parse(raw.metadata![n]!) as Record<string, unknown>);
    expect(meta('model.norm.weight')).toMatchObject({ qdtype: 'uint8', scheme: 'per_tensor' });
    expect(meta('model.layers.0.self_attn.k_proj.weight')).toBeUndefined();
    expect(meta('model.layers.0.self_attn.q_proj.weight')).toMatchObject({
      qdtype: 'int8',
      scheme: 'per_channel',
    });
    expect(
      reportB.passed_through.find((p) => p.name === 'model.layers.0.self_attn.k_proj.weight')?.reason,
    ).toBe('8192 elements < min_size 10000 (default)');
    expect(reportB.tensors.find((t) => t.name === 'model.norm.weight')?.rule).toBe('rule 2 (*norm*)');
  });
});

describe('recipe errors through the binary', () => {
  it('RECIPE_INVALID names the rule; nothing is written', async () => {
    const dir = tempRoot();
    try {
      writeFileSync(
        join(dir.dir, 'bad.json'),
        JSON.stringify({
          rules: [
            { glob: '*.embed*', skip: true },
            { glob: '*.mlp.*', qdtype: 'int3' },
          ],
        }),
      );
      copyFileSync(MODEL, join(dir.dir, 'm.safetensors'));
      const before = tree(dir.dir);
      const r = await quantdAsync(
        ['quantize', 'm.safetensors', '-o', 'o.safetensors', '--recipe', 'bad.json'],
        dir.dir,
      );
      expectCliError(r, 'RECIPE_INVALID', ['rule 2 (*.mlp.*)', 'UNKNOWN_QDTYPE']);
      const both = await quantdAsync(
        [
          'quantize',
          'm.safetensors',
          '-o',
          'o.safetensors',
          '--recipe',
          join(tmp.dir, 'recipe.json'),
          '--qdtype',
          'int4',
        ],
        dir.dir,
      );
      expectCliError(both, 'RECIPE_INVALID', ['default', 'both in the recipe and as options']);
      expect(tree(dir.dir)).toEqual(before);
    } finally {
      dir.cleanup();
    }
  });

  it('RECIPE_RULE_FAILED names the rule and the tensor, before anything is written', async () => {
    const dir = tempRoot();
    try {
      const r = await quantdAsync(
        ['quantize', MODEL, '-o', 'o.safetensors', '--rule', '*.down_proj.*:scheme=per_group,group_size=96'],
        dir.dir,
      );
      expectCliError(r, 'RECIPE_RULE_FAILED', [
        'rule 1 (*.down_proj.*)',
        'model.layers.0.mlp.down_proj.weight',
        'GROUP_SIZE_INVALID',
      ]);
      expect(tree(dir.dir)).toEqual([]);
    } finally {
      dir.cleanup();
    }
  });

  it('TENSOR_NAME_RESERVED: a model tensor named "format"', async () => {
    const dir = tempRoot();
    try {
      for (const name of ['format']) {
        // ("quantd.data_sha256" too: recipe.test.ts, in process)
        const file = join(dir.dir, 'm.safetensors');
        writeFileSync(
          file,
          serializeSafetensors(
            [
              { name: 'w', dtype: 'F32', shape: [4, 4], data: new Uint8Array(64) },
              { name, dtype: 'F32', shape: [4], data: new Uint8Array(16) },
            ],
            null,
          ),
        );
        const r = await quantdAsync(
          ['quantize', file, '-o', 'o.safetensors', '--recipe', join(tmp.dir, 'recipe.json')],
          dir.dir,
        );
        expectCliError(r, 'TENSOR_NAME_RESERVED', [name]);
        expect(tree(dir.dir)).toEqual(['m.safetensors']);
      }
    } finally {
      dir.cleanup();
    }
  });
});

describe('the report path', () => {
  it('a --report path that cannot be written fails before the model is run, and names no temporary file', async () => {
    // Bug: the report is written after the output, so the run exits 2 (OUTPUT_UNWRITABLE) with
    // the output file already in place; and the message names the report's temporary file
    // (".r.json.quantd-tmp-<random>") instead of the path the user gave.
    const dir = tempRoot();
    try {
      const message = await failsWith(
        dir.dir,
        [
          'quantize',
          MODEL,
          '-o',
          'o.safetensors',
          '--recipe',
          join(tmp.dir, 'recipe.json'),
          '--report',
          'nodir/r.json',
        ],
        'OUTPUT_UNWRITABLE',
        ['nodir/r.json'],
      );
      expect(message).not.toContain('quantd-tmp');
    } finally {
      dir.cleanup();
    }
  });
});
