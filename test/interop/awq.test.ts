/**
 * The "awq" layout: golden vectors from an independent torch transcription of AutoAWQ's
 * pseudo_quantize_tensor + WQLinear_GEMM.from_linear (golden/awq_reference.py), hand-checked
 * values, the packing order, the round trip, the loader shapes and the errors.
 */
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { float32FromFloat16Bits, roundToFloat16 } from '../../src/core/float16.js';
import {
  AWQ_ORDER,
  AWQ_SLOT,
  awqDequantize,
  awqQuantize,
  awqUnpack,
  toHalf,
} from '../../src/core/interop/awq.js';
import { LAYOUTS } from '../../src/service/layouts/index.js';
import {
  errorCode,
  f32Bytes,
  floatsOf,
  golden,
  goldenWeight,
  head,
  hex16,
  hex32,
  int32sOf,
  readRaw,
  sameBytes,
  tempRoot,
  tree,
  uint16sOf,
  words,
  writeLlama,
  writeSafetensors,
} from './gptq-awq-bnb.helpers.js';

interface AwqCase {
  name: string;
  shape: [number, number];
  dtype: string;
  group_size: number;
  weight: string[];
  qweight: string[];
  qzeros: string[];
  scales: string[];
}

const GOLDEN = golden<AwqCase>('awq_vectors.json');
const awq = LAYOUTS.get('awq')!;
const scratch = tempRoot('quantd-awq-');
afterAll(() => scratch.cleanup());

const quantizeCase = (c: AwqCase) =>
  awqQuantize(c.name, goldenWeight(c.weight, c.dtype), c.shape, { groupSize: c.group_size });

describe('AWQ golden vectors (AutoAWQ pseudo_quantize_tensor + WQLinear_GEMM.from_linear)', () => {
  it('covers group sizes 32/64/128/-1 and float16, bfloat16, float32 inputs', () => {
    expect(GOLDEN.cases.map((c) => c.group_size).sort()).toEqual([-1, 128, 32, 64]);
    expect(new Set(GOLDEN.cases.map((c) => c.dtype))).toEqual(new Set(['float16', 'bfloat16', 'float32']));
    expect(GOLDEN.note).toContain('from_linear');
  });

  it.each(GOLDEN.cases.map((c) => [c.name, c] as const))(
    '%s: qweight, qzeros, scales are byte-exact',
    (_, c) => {
      const p = quantizeCase(c);
      expect(hex32(p.qweight)).toEqual(c.qweight);
      expect(hex32(p.qzeros)).toEqual(c.qzeros);
      expect(hex16(p.scales)).toEqual(c.scales);
    },
  );
});

describe('float16 rounding of AWQ arithmetic', () => {
  it('toHalf rounds to nearest even like the float32 path, at every float16 midpoint and around it', () => {
    const f32 = new Float32Array(1);
    const u32 = new Uint32Array(f32.buffer);
    const bad: number[] = [];
    const check = (x: number) => {
      if (!Object.is(toHalf(x), roundToFloat16(x))) bad.push(x);
    };
    for (let bits = 0; bits < 0x7c00; bits++) {
      const lo = float32FromFloat16Bits(bits);
      const mid = (lo + float32FromFloat16Bits(bits + 1)) / 2; // exact in float32
      for (const x of [lo, -lo, mid, -mid]) {
        f32[0] = x;
        check(x);
        const u = u32[0]!;
        for (const d of [-1, 1]) {
          u32[0] = u + d;
          check(f32[0]!);
        }
      }
    }
    for (const x of [
      0,
      -0,
      65504,
      65519.99,
      65520,
      -65520,
      1e6,
      Infinity,
      -Infinity,
      5.960464477539063e-8,
      2.98e-8,
    ])
      check(x);
    expect(bad).toEqual([]);
    expect(Number.isNaN(toHalf(NaN))).toBe(true);
  });
});

describe('AWQ hand-checked values', () => {
  const c = GOLDEN.cases.find((k) => k.name === 'f16_g32')!;
  const p = quantizeCase(c);
  const codes = awqUnpack(p.qweight, 64, 32); // [in, out]
  const zeros = awqUnpack(p.qzeros, 2, 32); // [groups, out]

  it('packs output columns in the order [0, 2, 4, 6, 1, 3, 5, 7]', () => {
    expect(AWQ_ORDER).toEqual([0, 2, 4, 6, 1, 3, 5, 7]);
    for (let j = 0; j < 8; j++) expect(AWQ_ORDER[AWQ_SLOT[j]!]).toBe(j);
    // nibble k of 0x76543210 holds k: output column ORDER[k] reads k
    expect(Array.from(awqUnpack(Int32Array.of(0x76543210), 1, 8))).toEqual([0, 4, 1, 5, 2, 6, 3, 7]);
  });

  it('an all-zero group: range clamped to float16(1e-5), scale 11 · 2^-24, codes 0', () => {
    expect(p.scales[0]).toBe(0x000b);
    expect(zeros[0]).toBe(0);
    for (let i = 0; i < 32; i++) expect(codes[i * 32 + 0]).toBe(0);
  });

  it('all-positive and all-negative groups clamp the zero point to 0 and 15', () => {
    expect(zeros[1]).toBe(0); // row 1, group 0
    expect(zeros[2]).toBe(15); // row 2, group 0
  });

  it('exact .5 ties (scale 1, zero point 7) round half to even; a zero-point tie too', () => {
    expect(float32FromFloat16Bits(p.scales[3]!)).toBe(1);
    expect(zeros[3]).toBe(7);
    // row 3: -7, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 4.5
    expect(Array.from({ length: 9 }, (_, i) => codes[i * 32 + 3])).toEqual([0, 7, 9, 9, 7, 5, 5, 11, 11]);
    expect(zeros[4]).toBe(2); // -round(-2.5) = 2
  });
});

describe('AWQ dequantization', () => {
  it.each(GOLDEN.cases.map((c) => [c.name, c] as const))(
    '%s: scale · (code − zero), unpacked independently',
    (_, c) => {
      const [out, inF] = c.shape;
      const qweight = Int32Array.from(words(c.qweight));
      const qzeros = Int32Array.from(words(c.qzeros));
      const scales = Float32Array.from(words(c.scales), float32FromFloat16Bits);
      const groups = scales.length / out;
      const w = awqDequantize(qweight, qzeros, scales, out, inF, groups);
      const nibble = (word: number, col: number) => (word >>> (4 * [0, 4, 1, 5, 2, 6, 3, 7][col % 8]!)) & 15;
      for (let r = 0; r < out; r++) {
        for (let i = 0; i < inF; i++) {
          const g = Math.floor(i / (inF / groups));
          const code = nibble(qweight[i * (out / 8) + Math.floor(r / 8)]!, r);
          const zero = nibble(qzeros[g * (out / 8) + Math.floor(r / 8)]!, r);
          expect(w[r * inF + i]).toBe(scales[g * out + r]! * (code - zero));
        }
      }
    },
  );
});

describe('awq layout: write, read, detect', () => {
  const model = join(scratch.dir, 'llama.safetensors');
  const outDir = join(scratch.dir, 'out');
  const out = join(outDir, 'model.safetensors');

  it('writes the tensors and shapes WQLinear_GEMM / vLLM AWQ allocate', async () => {
    await writeLlama(model, 2);
    mkdirSync(outDir, { recursive: true });
    const res = await awq.write(model, out, {});
    expect(res.files).toEqual([out, join(outDir, 'model.quantization_config.json')]);
    const src = readRaw(model);
    const file = readRaw(out);
    expect(file.metadata).toMatchObject({ format: 'pt', 'quantd.layout': 'awq' });
    let quantized = 0;
    for (const t of src.tensors) {
      if (!/\.(?:self_attn\.[qkvo]_proj|mlp\.(?:gate|up|down)_proj)\.weight$/.test(t.name)) {
        expect(sameBytes(file.byName.get(t.name)!.data, t.data), t.name).toBeNull();
        continue;
      }
      quantized++;
      const m = t.name.slice(0, -'.weight'.length);
      const [o, i] = t.shape as [number, number];
      // awq/modules/linear/gemm.py WQLinear_GEMM.__init__ (and vLLM AWQLinearMethod.create_weights):
      // qweight (in, out // 8) int32, qzeros (in // gs, out // 8) int32, scales (in // gs, out) float16
      expect([file.byName.get(`${m}.qweight`)!.dtype, file.byName.get(`${m}.qweight`)!.shape]).toEqual([
        'I32',
        [i, o / 8],
      ]);
      expect([file.byName.get(`${m}.qzeros`)!.dtype, file.byName.get(`${m}.qzeros`)!.shape]).toEqual([
        'I32',
        [i / 128, o / 8],
      ]);
      expect([file.byName.get(`${m}.scales`)!.dtype, file.byName.get(`${m}.scales`)!.shape]).toEqual([
        'F16',
        [i / 128, o],
      ]);
      expect(file.byName.has(`${m}.g_idx`) || file.byName.has(t.name)).toBe(false);
      const p = awqQuantize(t.name, floatsOf(t), t.shape, { groupSize: 128 });
      expect(int32sOf(file.byName.get(`${m}.qweight`)!)).toEqual(p.qweight);
      expect(uint16sOf(file.byName.get(`${m}.scales`)!)).toEqual(p.scales);
    }
    expect(quantized).toBe(14);
    expect(file.tensors.length).toBe(src.tensors.length + quantized * 2);
    expect(tree(outDir)).toEqual(['model.quantization_config.json', 'model.safetensors']);
  });

  it('writes the quantization_config to merge into config.json (AwqConfig.to_transformers_dict)', () => {
    const cfg = JSON.parse(readFileSync(join(outDir, 'model.quantization_config.json'), 'utf8'));
    expect(cfg).toEqual({
      quantization_config: {
        quant_method: 'awq',
        zero_point: true,
        group_size: 128,
        bits: 4,
        version: 'gemm',
        modules_to_not_convert: ['model.embed_tokens', 'lm_head'],
      },
    });
  });

  it('reads it back to F32 weights equal to the core dequantization', async () => {
    const back = join(scratch.dir, 'back.safetensors');
    await awq.read(out, back);
    const src = readRaw(model);
    const file = readRaw(out);
    const deq = readRaw(back);
    expect(deq.tensors.map((t) => t.name)).toEqual(src.tensors.map((t) => t.name));
    const t = src.byName.get('model.layers.1.mlp.down_proj.weight')!;
    const m = 'model.layers.1.mlp.down_proj';
    const expected = awqDequantize(
      int32sOf(file.byName.get(`${m}.qweight`)!),
      int32sOf(file.byName.get(`${m}.qzeros`)!),
      floatsOf(file.byName.get(`${m}.scales`)!),
      128,
      256,
      2,
    );
    const d = deq.byName.get(t.name)!;
    expect([d.dtype, d.shape]).toEqual(['F32', [128, 256]]);
    expect(floatsOf(d)).toEqual(expected);
    const x = floatsOf(t);
    const s = floatsOf(file.byName.get(`${m}.scales`)!);
    const worst = expected.reduce(
      (a, v, k) =>
        Math.max(a, Math.abs(v - x[k]!) / s[Math.floor((k % 256) / 128) * 128 + Math.floor(k / 256)]!),
      0,
    );
    expect(worst).toBeLessThanOrEqual(0.51);
    expect(
      sameBytes(deq.byName.get('model.norm.weight')!.data, src.byName.get('model.norm.weight')!.data),
    ).toBeNull();
  });

  it('detects AWQ files (qweight without g_idx, scales 8x wider than qweight)', () => {
    expect(awq.detect(out, head(out))).toBe(true);
    expect(awq.detect(out, head(out, 8))).toBe(true);
    expect(awq.detect(model, head(model))).toBe(false);
    expect(LAYOUTS.get('gptq')!.detect(out, head(out))).toBe(false);
  });

  it('group_size -1: one group per row', async () => {
    const o = join(scratch.dir, 'rowwise.safetensors');
    await awq.write(model, o, { group_size: '-1', bits: '4' });
    const f = readRaw(o);
    expect(f.byName.get('model.layers.0.mlp.down_proj.qzeros')!.shape).toEqual([1, 16]);
    expect(f.byName.get('model.layers.0.mlp.down_proj.scales')!.shape).toEqual([1, 128]);
  });
});

describe('awq layout: errors', () => {
  it('rejects bad options, shapes, group sizes, malformed files', async () => {
    const dir = scratch.dir;
    const bad = join(dir, 'bad.safetensors');
    const out = join(dir, 'bad-out.safetensors');
    const w = (shape: number[]) => ({
      name: 'model.layers.0.mlp.up_proj.weight',
      dtype: 'F32',
      shape,
      data: f32Bytes(new Array(shape[0]! * shape[1]!).fill(0.01)),
    });
    writeSafetensors(bad, [w([8, 64])]);
    expect(await errorCode(() => awq.write(bad, out, { bits: '8' }))).toBe('OPTION_INVALID');
    expect(await errorCode(() => awq.write(bad, out, { sym: 'true' }))).toBe('OPTION_INVALID');
    expect(await errorCode(() => awq.write(bad, out, { group_size: '48' }))).toBe('GROUP_SIZE_INVALID');
    writeSafetensors(bad, [w([12, 64])]);
    expect(await errorCode(() => awq.write(bad, out, {}))).toBe('SHAPE_UNSUPPORTED');
    const inf = w([8, 64]);
    new Float32Array(inf.data.buffer)[3] = Infinity;
    writeSafetensors(bad, [inf]);
    expect(await errorCode(() => awq.write(bad, out, { group_size: '64' }))).toBe('INPUT_NOT_FINITE');
    expect(existsSync(out)).toBe(false);
    // a range that overflows float16 leaves no scale to store
    writeSafetensors(bad, [
      { ...w([8, 64]), data: f32Bytes(Array.from({ length: 512 }, (_, k) => (k % 2 ? 60000 : -60000))) },
    ]);
    expect(await errorCode(() => awq.write(bad, out, { group_size: '64' }))).toBe('FEATURE_UNSUPPORTED');
    // read: qzeros of the wrong width
    const i32 = (name: string, shape: number[]) => ({
      name,
      dtype: 'I32',
      shape,
      data: new Uint8Array(shape[0]! * shape[1]! * 4),
    });
    writeSafetensors(bad, [
      i32('l.mlp.up_proj.qweight', [64, 1]),
      i32('l.mlp.up_proj.qzeros', [1, 2]),
      { name: 'l.mlp.up_proj.scales', dtype: 'F16', shape: [1, 8], data: new Uint8Array(16) },
    ]);
    expect(await errorCode(() => awq.read(bad, join(dir, 'back.safetensors')))).toBe('LAYOUT_INVALID');
  });
});
