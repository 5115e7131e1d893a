/**
 * The "compressed-tensors" layout: byte for byte what compressed-tensors' own compressors write
 * for the weights llm-compressor's min-max observer calibrates (golden/compressed_tensors_reference.py
 * runs the reference functions themselves on torch), the values its decompress reads back (the
 * read path, including files quantd does not write: 2-bit packing, g_idx, FP8 per-tensor and
 * block scales), config.json's quantization_config against the reference's update_config, the
 * tensors a model folder gets, and the errors.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import {
  ctDequantize,
  ctQuantize,
  type CtFormat,
  type CtWeightArgs,
} from '../../src/core/interop/compressed-tensors.js';
import {
  packColumnsToInt32,
  packToInt32,
  unpackColumnsFromInt32,
  unpackFromInt32,
} from '../../src/core/interop/ct-pack.js';
import { roundBfloat16, roundFloat16 } from '../../src/core/dtype-arithmetic.js';
import {
  bfloat16BitsFromFloat32,
  float16BitsFromFloat32,
  float32FromBfloat16Bits,
  float32FromFloat16Bits,
} from '../../src/core/float16.js';
import { runEncodeTask } from '../../src/kernels/encoders.js';
import {
  CT_SCHEMES,
  ctQuantizationConfigText,
  schemeWeights,
} from '../../src/service/layouts/compressed-tensors-config.js';
import { LAYOUTS } from '../../src/service/layouts/index.js';
import { writeLayoutOutput } from '../../src/service/layouts/write-folder.js';
import { jsonText } from '../../src/service/layouts/quantization-config.js';
import {
  errorCode,
  floatsOf,
  head,
  readRaw,
  tempRoot,
  writeLlama,
  writeSafetensors,
  type InputTensor,
} from './gptq-awq-bnb.helpers.js';

interface CtTensor {
  dtype: string;
  shape: number[];
  hex: string;
}

interface CtCase {
  name: string;
  scheme: string;
  format: CtFormat;
  dtype: 'float32' | 'float16' | 'bfloat16';
  shape: [number, number];
  num_bits: number;
  type: 'int' | 'float';
  symmetric: boolean;
  strategy: string;
  group_size: number | null;
  weight: string;
  tensors: Record<string, CtTensor>;
  decompressed: CtTensor;
  float32_differs: number;
}

interface CtConfig {
  scheme: string;
  group_size: number | null;
  quantization_config: Record<string, unknown>;
  without_newer_fields: Record<string, unknown>;
  reads_back_same: boolean;
  older_refuses_newer_fields: boolean;
}

const FILE = JSON.parse(
  readFileSync(join(import.meta.dirname, 'golden', 'compressed_tensors_vectors.json'), 'utf8'),
) as { note: string; version: string; older_version: string; cases: CtCase[]; configs: CtConfig[] };

const layout = LAYOUTS.get('compressed-tensors')!;
const scratch = tempRoot('quantd-ct-');
afterAll(() => scratch.cleanup());

const WIDTH: Record<string, number> = { F32: 4, I32: 4, F16: 2, BF16: 2, I64: 8, I8: 1, F8_E4M3: 1 };
const ST = { float32: 'F32', float16: 'F16', bfloat16: 'BF16' } as const;

/** A golden tensor's bytes: its hex words, each the element's value, stored little-endian. */
function bytesOf(hex: string, dtype: string): Uint8Array {
  const w = WIDTH[dtype]!;
  const out = new Uint8Array(hex.length / 2);
  for (let e = 0; e < out.length / w; e++) {
    const word = hex.slice(e * w * 2, (e + 1) * w * 2);
    for (let b = 0; b < w; b++)
      out[e * w + b] = Number.parseInt(word.slice((w - 1 - b) * 2, (w - b) * 2), 16);
  }
  return out;
}

const hexOf = (bytes: Uint8Array, dtype: string): string => {
  const w = WIDTH[dtype]!;
  let s = '';
  for (let e = 0; e < bytes.length / w; e++) {
    for (let b = w - 1; b >= 0; b--) s += bytes[e * w + b]!.toString(16).padStart(2, '0');
  }
  return s;
};

const argsOf = (c: CtCase): CtWeightArgs => ({
  numBits: c.num_bits,
  type: c.type,
  symmetric: c.symmetric,
  groupSize: c.strategy === 'channel' ? null : c.group_size,
});

/** The order of a weight's tensors in the encoder's outputs. */
const ORDER: Record<CtFormat, string[]> = {
  'pack-quantized': ['weight_packed', 'weight_scale', 'weight_shape', 'weight_zero_point'],
  'int-quantized': ['weight', 'weight_scale', 'weight_zero_point'],
  'float-quantized': ['weight', 'weight_scale', 'weight_zero_point'],
};

const written = FILE.cases.filter((c) => !c.name.startsWith('read_'));

describe('golden vectors (compressed-tensors and llm-compressor run on torch)', () => {
  it('cover every scheme written, three dtypes, groups, channels, asymmetric zero points and padding', () => {
    expect(FILE.note).toContain('compressed-tensors 0.18.0');
    expect(new Set(written.map((c) => c.scheme))).toEqual(new Set(Object.keys(CT_SCHEMES)));
    expect(new Set(written.map((c) => c.dtype))).toEqual(new Set(['float32', 'float16', 'bfloat16']));
    expect(new Set(written.map((c) => c.strategy))).toEqual(new Set(['group', 'channel']));
    // codes a float32 computation of x / scale would get wrong: the dtype arithmetic matters
    expect(written.filter((c) => c.dtype === 'bfloat16' && c.float32_differs > 0).length).toBeGreaterThan(2);
    expect(written.some((c) => c.dtype === 'float16' && c.float32_differs > 0)).toBe(true);
  });

  it.each(written.map((c) => [c.name, c] as const))(
    '%s: every tensor written is the reference byte for byte',
    (_, c) => {
      const outputs = ORDER[c.format].filter((n) => c.tensors[n] !== undefined).map((n) => c.tensors[n]!);
      expect(Object.keys(c.tensors).sort()).toEqual(ORDER[c.format].filter((n) => c.tensors[n]).sort());
      const into = outputs.map((t) => new Uint8Array(bytesOf(t.hex, t.dtype).length));
      runEncodeTask(null, {
        op: 'encode',
        call: {
          kind: 'ct',
          tensor: c.name,
          shape: c.shape,
          dtype: c.dtype,
          weights: argsOf(c),
          format: c.format,
        },
        inputs: [bytesOf(c.weight, ST[c.dtype])],
        outputs: into,
      });
      outputs.forEach((t, i) => expect(hexOf(into[i]!, t.dtype)).toBe(t.hex));
    },
  );

  it.each(FILE.cases.map((c) => [c.name, c] as const))(
    '%s: read back as compressed-tensors decompresses it',
    async (_, c) => {
      const m = 'model.layers.0.mlp.down_proj';
      const path = join(scratch.dir, `${c.name}.safetensors`);
      const tensors: InputTensor[] = [
        {
          name: 'model.norm.weight',
          dtype: 'F32',
          shape: [2],
          data: new Uint8Array(new Float32Array([1, 2]).buffer),
        },
        ...Object.entries(c.tensors).map(([k, t]) => ({
          name: `${m}.${k}`,
          dtype: t.dtype,
          shape: t.shape,
          data: bytesOf(t.hex, t.dtype),
        })),
      ];
      writeSafetensors(path, tensors);
      expect(layout.detect(path, head(path))).toBe(true);
      const out = join(scratch.dir, `${c.name}.read.safetensors`);
      await layout.read(path, out);
      const file = readRaw(out);
      expect(file.tensors.map((t) => t.name)).toEqual(['model.norm.weight', `${m}.weight`]);
      const w = file.tensors[1]!;
      expect([w.dtype, w.shape]).toEqual(['F32', c.shape]);
      const expected = floatsOf({
        dtype: c.decompressed.dtype,
        data: bytesOf(c.decompressed.hex, c.decompressed.dtype),
      });
      expect(floatsOf(w)).toEqual(expected);
    },
  );
});

describe('int32 packing', () => {
  it('dense LSB-first words, offset codes, padded rows; columns packed along the rows', () => {
    const codes = Int8Array.from([-8, 7, 0, -1, 3, -4, 5, -6, 1]); // one row of 9 int4 codes
    const words = packToInt32(codes, 1, 9, 4);
    expect(Array.from(words, (v) => (v >>> 0).toString(16))).toEqual(['2d4b78f0', '9']);
    expect(Array.from(unpackFromInt32(words, 1, 9, 4))).toEqual(Array.from(codes));
    const grid = Int8Array.from([1, -2, 3, -4, 5, -6]); // [3, 2]
    const byCols = packColumnsToInt32(grid, 3, 2, 8);
    expect(Array.from(byCols, (v) => (v >>> 0).toString(16))).toEqual(['858381', '7a7c7e']);
    expect(Array.from(unpackColumnsFromInt32(byCols, 3, 2, 8))).toEqual(Array.from(grid));
    // widths that do not divide 32 (compressed-tensors 0.13+): codes straddle words
    const five = Int8Array.from({ length: 13 }, (_, i) => (i % 32) - 16);
    expect(Array.from(unpackFromInt32(packToInt32(five, 1, 13, 5), 1, 13, 5))).toEqual(Array.from(five));
  });
});

describe('arithmetic in the weight dtype', () => {
  it('roundFloat16 / roundBfloat16 are the float16.ts conversions: every half, its neighbours, its midpoints', () => {
    const f32 = new Float32Array(1);
    const u32 = new Uint32Array(f32.buffer);
    const near = (x: number): number[] => {
      f32[0] = x;
      const b = u32[0]!;
      return [-1, 0, 1].map((d) => {
        u32[0] = (b + d) >>> 0;
        return f32[0]!;
      });
    };
    let checked = 0;
    const wrong: number[] = [];
    for (let h = 0; h < 0x10000; h++) {
      const x = float32FromFloat16Bits(h);
      const next = float32FromFloat16Bits(h + 1);
      const xs = [...near(x), ...(Number.isFinite(next) ? near((x + next) / 2) : [65520, 65519.99, 1e6])];
      for (const v of xs) {
        if (!Object.is(roundFloat16(v), float32FromFloat16Bits(float16BitsFromFloat32(v)))) wrong.push(v);
        if (!Object.is(roundBfloat16(v), float32FromBfloat16Bits(bfloat16BitsFromFloat32(v)))) wrong.push(v);
        checked++;
      }
    }
    expect(wrong).toEqual([]);
    expect(checked).toBeGreaterThan(300_000);
  });
});

describe('numerics at the edges', () => {
  const args: CtWeightArgs = { numBits: 4, type: 'int', symmetric: true, groupSize: null };

  it('an all-zero row takes the dtype eps as its scale; an asymmetric one zero point 0', () => {
    const q = ctQuantize('x', new Float32Array(8), [1, 8], 'bfloat16', args);
    expect(q.scales[0]).toBe(2 ** -7);
    expect(Array.from(q.codes)).toEqual(new Array(8).fill(0));
    const a = ctQuantize('x', new Float32Array(8), [1, 8], 'float16', { ...args, symmetric: false });
    expect([a.scales[0], a.zeroPoints![0]]).toEqual([2 ** -10, 0]);
  });

  it('rounds x / scale to the weight dtype before rounding to an integer (bfloat16 double rounding)', () => {
    // find a bfloat16 weight whose float32 quotient is below a .5 that bfloat16 rounds it onto
    const bf16 = (x: number) => float32FromBfloat16Bits(bfloat16BitsFromFloat32(x));
    let found: { absmax: number; x: number } | undefined;
    for (let a = 1; !found && a < 2; a = bf16(a + 2 ** -7)) {
      const scale = roundBfloat16(a / 7.5);
      for (let x = 2 ** -3; x < a; x = bf16(x + x * 2 ** -7)) {
        const inBf16 = roundBfloat16(x / scale);
        if (inBf16 % 1 === 0.5 && Math.fround(x / scale) < inBf16 && Math.round(inBf16) % 2 === 0) {
          found = { absmax: a, x };
          break;
        }
      }
    }
    expect(found).toBeDefined();
    const { absmax, x } = found!;
    const scale = roundBfloat16(absmax / 7.5);
    const q = ctQuantize('x', Float32Array.from([absmax, x]), [1, 2], 'bfloat16', args);
    expect(q.scales[0]).toBe(scale);
    // float32 arithmetic would round down to the integer below; bfloat16's tie goes up to even
    expect(q.codes[1]).toBe(Math.floor(Math.fround(x / scale)) + 1);
  });

  it('float8: -0 becomes +0 (the zero point is added), a tiny negative keeps its sign', () => {
    const fp8: CtWeightArgs = { numBits: 8, type: 'float', symmetric: true, groupSize: null };
    const q = ctQuantize('x', Float32Array.from([448, -0, -1e-6, 1]), [1, 4], 'float32', fp8);
    expect(Array.from(q.codes)).toEqual([0x7e, 0x00, 0x80, 0x38]);
    const back = ctDequantize(
      Array.from([448, 0, -0, 1]),
      q.scales,
      null,
      { rows: 1, cols: 4, scaleRows: 1, scaleCols: 1, gIdx: null },
      'float32',
    );
    expect(Array.from(back)).toEqual([448, 0, -0, 1]);
  });
});

describe("config.json's quantization_config", () => {
  it.each(FILE.configs.map((c) => [`${c.scheme} ${c.group_size ?? ''}`, c] as const))(
    '%s: what update_config writes, less the keys older releases refuse',
    (_, c) => {
      const scheme = CT_SCHEMES[c.scheme]!;
      const weights =
        c.group_size === null
          ? scheme.weights
          : schemeWeights(scheme, c.group_size === -1 ? null : c.group_size);
      const text = ctQuantizationConfigText(scheme, weights, ['lm_head']);
      const sorted = (v: unknown): unknown =>
        Array.isArray(v)
          ? v.map(sorted)
          : v !== null && typeof v === 'object'
            ? Object.fromEntries(
                Object.keys(v)
                  .sort()
                  .map((k) => [k, sorted((v as Record<string, unknown>)[k])]),
              )
            : v;
      // Python's json.dump(indent=2, sort_keys=True) of the same object
      expect(text).toBe(jsonText(sorted(c.without_newer_fields) as Record<string, unknown>));
      expect(c.reads_back_same).toBe(true); // the newest release reads it as the config it wrote
      expect(c.older_refuses_newer_fields).toBe(true); // and the older one would refuse that
      expect(JSON.stringify(c.quantization_config)).toContain('scale_dtype');
    },
  );
});

describe('compressed-tensors layout: a model folder', () => {
  const folder = join(scratch.dir, 'llama');
  const config =
    '{\n  "architectures": ["LlamaForCausalLM"],\n  "rms_norm_eps": 1e-05,\n  "torch_dtype": "bfloat16"\n}\n';
  beforeAll(async () => {
    mkdirSync(folder, { recursive: true });
    await writeLlama(join(folder, 'model.safetensors'), 2);
    writeFileSync(join(folder, 'config.json'), config);
  });

  it.each([
    ['W4A16', undefined, ['weight_packed', 'weight_scale', 'weight_shape']],
    ['W4A16_ASYM', 64, ['weight_packed', 'weight_scale', 'weight_shape', 'weight_zero_point']],
    ['W8A16', -1, ['weight_packed', 'weight_scale', 'weight_shape']],
    ['W8A8', undefined, ['weight', 'weight_scale']],
    ['FP8_DYNAMIC', undefined, ['weight', 'weight_scale']],
  ] as const)(
    '%s (group_size %s): the tensors vLLM loads, config.json, and the read back',
    async (scheme, group, names) => {
      const out = join(scratch.dir, `out-${scheme}`);
      const options = group === undefined ? { scheme } : { scheme, group_size: String(group) };
      const result = await writeLayoutOutput(layout, folder, out, options);
      expect(result.files.map((f) => f.slice(out.length + 1)).sort()).toEqual([
        'config.json',
        'model.safetensors',
        'quantization_config.json',
      ]);
      const file = readRaw(join(out, 'model.safetensors'));
      const byName = new Map(file.tensors.map((t) => [t.name, t]));
      const m = 'model.layers.1.mlp.down_proj'; // [128, 256], bfloat16
      for (const n of names) expect(byName.has(`${m}.${n}`), n).toBe(true);
      expect(byName.has(`${m}.weight`)).toBe(scheme === 'W8A8' || scheme === 'FP8_DYNAMIC');
      expect(byName.get(`${m}.weight_scale`)!.dtype).toBe('BF16');
      expect(byName.get('lm_head.weight')!.dtype).toBe('BF16'); // left in float, and ignored
      const text = readFileSync(join(out, 'config.json'), 'utf8');
      expect(text.startsWith(config.trimEnd().slice(0, -2))).toBe(true); // the model's own keys as written
      const cfg = JSON.parse(text) as {
        quantization_config: { format: string; ignore: string[]; quant_method: string };
      };
      expect(cfg.quantization_config.quant_method).toBe('compressed-tensors');
      expect(cfg.quantization_config.format).toBe(CT_SCHEMES[scheme]!.format);
      expect(cfg.quantization_config.ignore).toEqual(['model.embed_tokens', 'lm_head']);
      // read back: the values the reference's decompress gives for the tensors quantd wrote
      const path = join(out, 'model.safetensors');
      expect(layout.detect(path, head(path))).toBe(true);
      const back = join(scratch.dir, `back-${scheme}.safetensors`);
      await layout.read(path, back);
      const original = readRaw(join(folder, 'model.safetensors')).tensors.find(
        (t) => t.name === `${m}.weight`,
      )!;
      const weights = schemeWeights(
        CT_SCHEMES[scheme]!,
        group === undefined ? undefined : group === -1 ? null : group,
      );
      const q = ctQuantize(m, floatsOf(original), original.shape, 'bfloat16', weights);
      const [rows, cols] = original.shape as [number, number];
      const values = weights.type === 'float' ? Array.from(q.codes, fp8Value) : Array.from(q.codes);
      const grid = { rows, cols, scaleRows: rows, scaleCols: q.scales.length / rows, gIdx: null };
      const expected = ctDequantize(values, q.scales, q.zeroPoints, grid, 'bfloat16');
      const read = readRaw(back).tensors.find((t) => t.name === `${m}.weight`)!;
      expect(floatsOf(read)).toEqual(expected);
      const rel = relativeError(floatsOf(original), expected);
      expect(rel).toBeLessThan(weights.type === 'float' ? 0.06 : weights.numBits === 8 ? 0.01 : 0.15);
    },
  );
});

function fp8Value(code: number): number {
  const sign = code & 0x80 ? -1 : 1;
  const e = (code >> 3) & 0xf;
  const m = code & 7;
  return sign * (e === 0 ? (m / 8) * 2 ** -6 : (1 + m / 8) * 2 ** (e - 7));
}

function relativeError(a: Float32Array, b: Float32Array): number {
  let num = 0;
  let den = 0;
  for (let i = 0; i < a.length; i++) {
    num += (a[i]! - b[i]!) ** 2;
    den += a[i]! ** 2;
  }
  return Math.sqrt(num / den);
}

describe('errors', () => {
  const model = join(scratch.dir, 'small.safetensors');
  const w = (values: number[], dtype = 'F32', shape = [1, values.length]): InputTensor => ({
    name: 'model.layers.0.mlp.up_proj.weight',
    dtype,
    shape,
    data:
      dtype === 'F32'
        ? new Uint8Array(new Float32Array(values).buffer)
        : new Uint8Array(new Uint16Array(values).buffer),
  });

  it('options: an unknown scheme, a preset not written, group_size where it does not apply', () => {
    expect(() => layout.checkOptions({ scheme: 'W5A5' })).toThrow(
      /option compressed-tensors:scheme must be one of W4A16/,
    );
    expect(() => layout.checkOptions({ scheme: 'fp8' })).toThrow(/FP8 needs static input_scale/);
    expect(() => layout.checkOptions({ scheme: 'int8' })).not.toThrow(); // compressed-tensors' alias of W8A8
    expect(() => layout.checkOptions({ scheme: 'W8A8', group_size: '128' })).toThrow(
      /option compressed-tensors:group_size applies to/,
    );
    expect(() => layout.checkOptions({ group_size: '0' })).toThrow(
      /group_size must be a positive integer or -1/,
    );
    expect(() => layout.checkOptions({ bits: '4' })).toThrow(
      /bits is not an option of the compressed-tensors layout/,
    );
  });

  it('a weight the format cannot hold, a non-finite value, a float16 range that overflows', async () => {
    writeSafetensors(model, [
      w(
        Array.from({ length: 96 }, (_, i) => i / 96),
        'F32',
        [1, 96],
      ),
    ]);
    expect(await errorCode(() => layout.write(model, join(scratch.dir, 'e1.safetensors'), {}))).toBe(
      'GROUP_SIZE_INVALID',
    );
    writeSafetensors(model, [w([1, Number.NaN, 2, 3])]);
    expect(
      await errorCode(() => layout.write(model, join(scratch.dir, 'e2.safetensors'), { group_size: '-1' })),
    ).toBe('INPUT_NOT_FINITE');
    writeSafetensors(model, [w([0x7800, 0xf800, 0, 0], 'F16')]); // [32768, -32768]: width 65536 > float16 max
    const err = await errorCode(() =>
      layout.write(model, join(scratch.dir, 'e3.safetensors'), { scheme: 'W4A16_ASYM', group_size: '-1' }),
    );
    expect(err).toBe('FEATURE_UNSUPPORTED');
    writeSafetensors(model, [{ ...w([1, 2]), name: 'model.norm.weight' }]);
    expect(await errorCode(() => layout.write(model, join(scratch.dir, 'e4.safetensors'), {}))).toBe(
      'NO_TENSOR_SELECTED',
    );
  });

  it('reading: inconsistent shapes, an unknown width, NVFP4 packing, a NaN code or scale', async () => {
    const m = 'model.layers.0.self_attn.q_proj';
    const t = (name: string, dtype: string, shape: number[], data: ArrayBufferView): InputTensor => ({
      name: `${m}.${name}`,
      dtype,
      shape,
      data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength),
    });
    const shape = t('weight_shape', 'I64', [2], BigInt64Array.from([2n, 64n]));
    const scale = t('weight_scale', 'F32', [2, 2], new Float32Array(4).fill(1));
    const cases: Array<[InputTensor[], string, RegExp]> = [
      [
        [t('weight_packed', 'I32', [2, 8], new Int32Array(16)), scale],
        'LAYOUT_INVALID',
        /weight_shape: is missing/,
      ],
      [
        [t('weight_packed', 'I32', [2, 5], new Int32Array(10)), scale, shape],
        'LAYOUT_INVALID',
        /5 words per row/,
      ],
      [
        [t('weight_packed', 'I32', [2, 6], new Int32Array(12)), scale, shape],
        'FEATURE_UNSUPPORTED',
        /packed with 3 bits/,
      ],
      [[t('weight_packed', 'U8', [2, 32], new Uint8Array(64)), scale, shape], 'FEATURE_UNSUPPORTED', /NVFP4/],
      [
        [
          t('weight_packed', 'I32', [2, 8], new Int32Array(16)),
          t('weight_scale', 'F32', [2, 3], new Float32Array(6)),
          shape,
        ],
        'LAYOUT_INVALID',
        /does not divide/,
      ],
      [
        [
          t('weight_packed', 'I32', [2, 8], new Int32Array(16)),
          scale,
          t('weight_shape', 'I64', [3], BigInt64Array.from([1n, 2n, 64n])),
        ],
        'FEATURE_UNSUPPORTED',
        /2-D weights only/,
      ],
      [
        [
          t('weight', 'F8_E4M3', [2, 2], Uint8Array.from([0, 0x7f, 1, 2])),
          t('weight_scale', 'F32', [2, 1], new Float32Array(2).fill(1)),
        ],
        'LAYOUT_INVALID',
        /NaN code/,
      ],
      [
        [
          t('weight', 'I8', [2, 2], Int8Array.from([0, 1, 2, 3])),
          t('weight_scale', 'BF16', [2, 1], Uint16Array.from([0x3f80, 0x7fc0])),
        ],
        'LAYOUT_INVALID',
        /weight_scale: weight_scale\[1\] = NaN; a scale must be finite and positive/,
      ],
      [
        [
          t('weight_packed', 'I32', [2, 8], new Int32Array(16)),
          scale,
          shape,
          t('weight_g_idx', 'I32', [64], new Int32Array(64).fill(5)),
        ],
        'LAYOUT_INVALID',
        /g_idx\[0\] = 5/,
      ],
    ];
    for (const [i, [tensors, code, message]] of cases.entries()) {
      const path = join(scratch.dir, `bad-${i}.safetensors`);
      writeSafetensors(path, tensors);
      let caught: { code?: string; message?: string } = {};
      try {
        await layout.read(path, join(scratch.dir, `bad-${i}.out.safetensors`));
      } catch (err) {
        caught = err as { code?: string; message?: string };
      }
      expect([i, caught.code]).toEqual([i, code]);
      expect(caught.message).toMatch(message);
    }
  });
});
