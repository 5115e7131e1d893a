/**
 * The "gptq" layout: golden vectors from an independent torch transcription of AutoGPTQ's
 * quantizer and packer (golden/gptq_reference.py), hand-checked codes, the round trip, the tensor
 * shapes GPTQ loaders allocate, and the errors.
 */
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import type { FloatDType } from '../../src/core/dtypes.js';
import { float16BitsFromFloat32, float32FromFloat16Bits } from '../../src/core/float16.js';
import {
  gptqDequantize,
  gptqOnesPattern,
  gptqQuantize,
  gptqUnpackCodes,
  gptqUnpackZeros,
  type GptqBits,
} from '../../src/core/interop/gptq.js';
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

interface GptqCase {
  name: string;
  shape: [number, number];
  dtype: FloatDType;
  bits: GptqBits;
  group_size: number;
  sym: boolean;
  weight: string[];
  qweight: string[];
  qzeros: string[];
  scales: string[];
  g_idx: number[];
  autogptq_qzeros_agree: boolean | null;
  zero_point_zero_groups: number;
  codes_clamped: number;
}

const GOLDEN = golden<GptqCase>('gptq_vectors.json');
const gptq = LAYOUTS.get('gptq')!;
const scratch = tempRoot('quantd-gptq-');
afterAll(() => scratch.cleanup());

function quantizeCase(c: GptqCase) {
  return gptqQuantize(c.name, goldenWeight(c.weight, c.dtype), c.shape, c.dtype, {
    bits: c.bits,
    groupSize: c.group_size,
    sym: c.sym,
  });
}

describe('GPTQ golden vectors (AutoGPTQ quantizer + pack, torch 1.13 transcription)', () => {
  it('covers sym and asym, 2/4/8 bits, group sizes 32/64/128/-1, a partial group, all three dtypes', () => {
    expect(GOLDEN.cases.length).toBeGreaterThanOrEqual(7);
    expect(new Set(GOLDEN.cases.map((c) => c.bits))).toEqual(new Set([2, 4, 8]));
    expect(new Set(GOLDEN.cases.map((c) => c.dtype))).toEqual(new Set(['float32', 'float16', 'bfloat16']));
    expect(GOLDEN.cases.some((c) => c.group_size === -1)).toBe(true);
    expect(GOLDEN.cases.some((c) => c.zero_point_zero_groups > 0)).toBe(true);
    expect(GOLDEN.cases.some((c) => c.codes_clamped > 0)).toBe(true);
    expect(GOLDEN.note).toContain('qlinear_cuda_old.py');
  });

  it.each(GOLDEN.cases.map((c) => [c.name, c] as const))(
    '%s: qweight, qzeros, scales, g_idx are byte-exact',
    (_, c) => {
      const p = quantizeCase(c);
      expect(hex32(p.qweight)).toEqual(c.qweight);
      expect(hex32(p.qzeros)).toEqual(c.qzeros);
      expect(hex16(p.scales)).toEqual(c.scales);
      expect(Array.from(p.gIdx)).toEqual(c.g_idx);
      expect(p.zeroPointZero).toBe(c.zero_point_zero_groups);
      expect(p.clampedCodes).toBe(c.codes_clamped);
      // where no zero point is 0, AutoGPTQ's own `zeros - 1` packing gives the same words
      if (c.zero_point_zero_groups === 0) expect(c.autogptq_qzeros_agree).toBe(true);
    },
  );
});

describe('GPTQ hand-checked values', () => {
  const sym = GOLDEN.cases.find((c) => c.name === 'bf16_int4_g32_sym')!;
  const asym = GOLDEN.cases.find((c) => c.name === 'f16_int4_g32_asym')!;

  it('exact .5 ties round half to even (scale 1, zero point 8)', () => {
    const p = quantizeCase(sym);
    const codes = gptqUnpackCodes(p.qweight, 32, 64, 4);
    // row 1: 0.5 1.5 2.5 -0.5 -1.5 -2.5 7.5 -7.5 3.5 -3.5 6.5 -6.5 4.5 5.5 0 -0
    expect(Array.from(codes.subarray(64, 64 + 16))).toEqual([
      8, 10, 10, 8, 6, 6, 15, 0, 12, 4, 14, 2, 12, 14, 8, 8,
    ]);
    expect(float32FromFloat16Bits(p.scales[1]!)).toBe(1);
    // row 1, group 0: the word of inputs 0..7 holds codes 8,10,10,8,6,6,15,0 LSB first
    expect(hex32([p.qweight[1]!])).toEqual(['0x0f668aa8']);
  });

  it('an all-zero group gets the range [-1, 1]: scale 2/15, codes at the zero point', () => {
    const p = quantizeCase(sym);
    expect(p.scales[0]).toBe(float16BitsFromFloat32(Math.fround(2 / 15)));
    const codes = gptqUnpackCodes(p.qweight, 32, 64, 4);
    expect(Array.from(codes.subarray(0, 32))).toEqual(new Array(32).fill(8));
    // asym: zero = round(1 / f32(2/15)) = round(7.4999995) = 7, stored as 6
    const q = quantizeCase(asym);
    expect(gptqUnpackZeros(q.qzeros, 2, 32, 4)[0]).toBe(7);
    expect(q.qzeros[0]! & 15).toBe(6);
  });

  it('symmetric zero points are stored as 2^(bits-1) - 1 (v1 minus one)', () => {
    const p = quantizeCase(sym);
    expect(hex32(p.qzeros)).toEqual(new Array(p.qzeros.length).fill('0x77777777'));
  });

  it('a zero-point tie rounds to even: round(2.5) = 2', () => {
    const q = quantizeCase(asym);
    expect(gptqUnpackZeros(q.qzeros, 2, 32, 4)[3]).toBe(2); // group 0, row 3
  });

  it('zero point 0 is stored with the v2 -> v1 borrow and read back exactly', () => {
    const q = quantizeCase(asym);
    const zeros = gptqUnpackZeros(q.qzeros, 2, 32, 4);
    expect(zeros[32 + 2]).toBe(0); // group 1, row 2: all positive
    expect(zeros[0 + 9]).toBe(0); // group 0, row 9
    // the field itself reads 0xF and its neighbour one less (the borrow), as GPTQModel writes it
    expect((q.qzeros[4]! >>> 8) & 15).toBe(15);
    expect(gptqOnesPattern(4)).toBe(0x11111111);
    expect(gptqOnesPattern(2)).toBe(0x55555555);
    expect(gptqOnesPattern(8)).toBe(0x01010101);
  });
});

/** scale · (code − zero) from the packed tensors, unpacked here with plain shifts. */
function referenceDequant(
  c: GptqCase,
  qweight: Int32Array,
  qzeros: Int32Array,
  scales: Uint16Array,
  gIdx: readonly number[] = c.g_idx,
): Float32Array {
  const [out, inF] = c.shape;
  const { bits } = c;
  const perWord = 32 / bits;
  const mask = 2 ** bits - 1;
  const ones = gptqOnesPattern(bits);
  const w = new Float32Array(out * inF);
  for (let r = 0; r < out; r++) {
    for (let i = 0; i < inF; i++) {
      const g = gIdx[i]!;
      const code = (qweight[Math.floor(i / perWord) * out + r]! >>> ((i % perWord) * bits)) & mask;
      const zword = (qzeros[g * ((out * bits) / 32) + Math.floor(r / perWord)]! + ones) >>> 0;
      const zero = (zword >>> ((r % perWord) * bits)) & mask;
      w[r * inF + i] = float32FromFloat16Bits(scales[g * out + r]!) * (code - zero);
    }
  }
  return w;
}

describe('GPTQ dequantization', () => {
  it.each(GOLDEN.cases.map((c) => [c.name, c] as const))(
    '%s: scale · (code − zero), close to the input',
    (_, c) => {
      const qweight = Int32Array.from(words(c.qweight));
      const qzeros = Int32Array.from(words(c.qzeros));
      const scales = Uint16Array.from(words(c.scales));
      const [out, inF] = c.shape;
      const groups = scales.length / out;
      const w = gptqDequantize(
        qweight,
        qzeros,
        Float32Array.from(scales, float32FromFloat16Bits),
        Int32Array.from(c.g_idx),
        out,
        inF,
        groups,
        c.bits,
      );
      expect(w).toEqual(referenceDequant(c, qweight, qzeros, scales));
      // without g_idx the groups are taken to be equal runs of in / groups (not so for a partial group)
      if (c.g_idx.every((g, i) => g === Math.floor(i / (inF / groups)))) {
        const noIdx = gptqDequantize(
          qweight,
          qzeros,
          Float32Array.from(scales, float32FromFloat16Bits),
          null,
          out,
          inF,
          groups,
          c.bits,
        );
        expect(noIdx).toEqual(w);
      }
      // RTN: within half a step of every unclamped input (sym clamps the top of all-positive groups)
      const x = goldenWeight(c.weight, c.dtype);
      let within = 0;
      for (let k = 0; k < x.length; k++) {
        const s = float32FromFloat16Bits(scales[c.g_idx[k % inF]! * out + Math.floor(k / inF)]!);
        if (Math.abs(w[k]! - x[k]!) <= s / 2 + s * 0.01) within++;
      }
      expect(within / x.length).toBeGreaterThan(0.97);
    },
  );
});

describe('GPTQ act-order files', () => {
  it('dequantization follows g_idx, whatever its order', () => {
    const c = GOLDEN.cases.find((k) => k.name === 'f16_int4_g32_asym')!;
    const qweight = Int32Array.from(words(c.qweight));
    const qzeros = Int32Array.from(words(c.qzeros));
    const scales = Uint16Array.from(words(c.scales));
    const permuted = c.g_idx.map((_, i) => (i * 7) % 2); // interleaved groups, as desc_act writes them
    const w = gptqDequantize(
      qweight,
      qzeros,
      Float32Array.from(scales, float32FromFloat16Bits),
      Int32Array.from(permuted),
      32,
      64,
      2,
      4,
    );
    expect(w).toEqual(referenceDequant(c, qweight, qzeros, scales, permuted));
    expect(w).not.toEqual(referenceDequant(c, qweight, qzeros, scales));
  });
});

describe('gptq layout: write, read, detect', () => {
  const model = join(scratch.dir, 'llama.safetensors');
  const outDir = join(scratch.dir, 'out');
  const out = join(outDir, 'model.safetensors');
  let written: Awaited<ReturnType<typeof gptq.write>>;

  it('writes a GPTQ checkpoint with the tensors and shapes AutoGPTQ / vLLM allocate', async () => {
    await writeLlama(model, 4); // layer 3 is float16, the others bfloat16
    mkdirSync(outDir, { recursive: true });
    const progress: number[] = [];
    written = await gptq.write(model, out, {}, { onProgress: (p) => progress.push(p.tensorsDone) });
    expect(written.files).toEqual([out, join(outDir, 'model.quantize_config.json')]);
    expect(progress.at(-1)).toBe(readRaw(model).tensors.length);
    const src = readRaw(model);
    const file = readRaw(out);
    expect(file.metadata).toMatchObject({ format: 'pt', 'quantd.layout': 'gptq' });
    let quantized = 0;
    for (const t of src.tensors) {
      const m = /^(.*)\.(?:self_attn\.[qkvo]_proj|mlp\.(?:gate|up|down)_proj)\.weight$/.test(t.name)
        ? t.name.slice(0, -'.weight'.length)
        : null;
      if (m === null) {
        // embeddings, lm_head, norms, the I64 buffer: byte-identical
        expect(sameBytes(file.byName.get(t.name)!.data, t.data), t.name).toBeNull();
        expect(file.byName.get(t.name)!.dtype).toBe(t.dtype);
        continue;
      }
      quantized++;
      const [o, i] = t.shape as [number, number];
      // AutoGPTQ qlinear_cuda_old.QuantLinear.__init__ buffers (and vLLM GPTQLinearMethod.create_weights):
      // qweight (in // 32 * bits, out) int32, qzeros (ceil(in / gs), out // 32 * bits) int32,
      // scales (ceil(in / gs), out) float16, g_idx (in,) int32
      const g = Math.ceil(i / 128);
      expect(file.byName.has(t.name), t.name).toBe(false);
      expect([file.byName.get(`${m}.qweight`)!.dtype, file.byName.get(`${m}.qweight`)!.shape]).toEqual([
        'I32',
        [(i / 32) * 4, o],
      ]);
      expect([file.byName.get(`${m}.qzeros`)!.dtype, file.byName.get(`${m}.qzeros`)!.shape]).toEqual([
        'I32',
        [g, (o / 32) * 4],
      ]);
      expect([file.byName.get(`${m}.scales`)!.dtype, file.byName.get(`${m}.scales`)!.shape]).toEqual([
        'F16',
        [g, o],
      ]);
      expect([file.byName.get(`${m}.g_idx`)!.dtype, file.byName.get(`${m}.g_idx`)!.shape]).toEqual([
        'I32',
        [i],
      ]);
      // the same bytes as the core quantizer on this tensor
      const dtype = t.dtype === 'BF16' ? 'bfloat16' : 'float16';
      const p = gptqQuantize(t.name, floatsOf(t), t.shape, dtype, { bits: 4, groupSize: 128, sym: true });
      expect(int32sOf(file.byName.get(`${m}.qweight`)!)).toEqual(p.qweight);
      expect(uint16sOf(file.byName.get(`${m}.scales`)!)).toEqual(p.scales);
    }
    expect(quantized).toBe(28);
    expect(file.tensors.length).toBe(src.tensors.length + quantized * 3);
    expect(written.tensors.filter((t) => t.type === 'gptq int4 g128 sym')).toHaveLength(28);
    // nothing but the two files (no temporary file left behind)
    expect(tree(outDir)).toEqual(['model.quantize_config.json', 'model.safetensors']);
  });

  it('writes OUT.quantize_config.json as AutoGPTQ does (BaseQuantizeConfig.to_dict + checkpoint_format)', () => {
    const config = JSON.parse(readFileSync(join(outDir, 'model.quantize_config.json'), 'utf8')) as Record<
      string,
      unknown
    >;
    expect(config).toEqual({
      bits: 4,
      group_size: 128,
      damp_percent: 0.01,
      desc_act: false,
      static_groups: false,
      sym: true,
      true_sequential: true,
      model_name_or_path: null,
      model_file_base_name: 'model',
      quant_method: 'gptq',
      checkpoint_format: 'gptq',
    });
  });

  it('reads it back: every .weight dequantized to F32, everything else unchanged', async () => {
    const back = join(scratch.dir, 'back.safetensors');
    const { tensors } = await gptq.read(out, back);
    const src = readRaw(model);
    const file = readRaw(out);
    const deq = readRaw(back);
    expect(tensors).toBe(src.tensors.length);
    expect(deq.tensors.map((t) => t.name)).toEqual(src.tensors.map((t) => t.name));
    for (const t of src.tensors) {
      const d = deq.byName.get(t.name)!;
      if (!file.byName.has(t.name)) {
        const m = t.name.slice(0, -'.weight'.length);
        expect([d.dtype, d.shape]).toEqual(['F32', t.shape]);
        const [o, i] = t.shape as [number, number];
        const expected = gptqDequantize(
          int32sOf(file.byName.get(`${m}.qweight`)!),
          int32sOf(file.byName.get(`${m}.qzeros`)!),
          floatsOf(file.byName.get(`${m}.scales`)!),
          int32sOf(file.byName.get(`${m}.g_idx`)!),
          o,
          i,
          Math.ceil(i / 128),
          4,
        );
        expect(floatsOf(d)).toEqual(expected);
        // round to nearest: within one step of the input (half a step, or one where sym clamps the top)
        const x = floatsOf(t);
        const s = floatsOf(file.byName.get(`${m}.scales`)!);
        const worst = floatsOf(d).reduce(
          (a, v, k) =>
            Math.max(a, Math.abs(v - x[k]!) / s[Math.floor((k % i) / 128) * o + Math.floor(k / i)]!),
          0,
        );
        expect(worst).toBeLessThanOrEqual(1.001);
      } else {
        expect(sameBytes(d.data, t.data), t.name).toBeNull();
      }
    }
  });

  it('detects GPTQ files by their companion tensors, from a short head too', async () => {
    expect(gptq.detect(out, head(out))).toBe(true);
    expect(gptq.detect(out, head(out, 16))).toBe(true); // the rest of the header read from the file
    expect(gptq.detect(model, head(model))).toBe(false);
    expect(gptq.detect(out, new Uint8Array([1, 2, 3]))).toBe(false);
    const awqOut = join(scratch.dir, 'awq.safetensors');
    await LAYOUTS.get('awq')!.write(model, awqOut, {});
    expect(gptq.detect(awqOut, head(awqOut))).toBe(false);
    expect(LAYOUTS.get('awq')!.detect(out, head(out))).toBe(false);
  });

  it('takes bits, group_size and sym: 8-bit per-row asym, 2-bit', async () => {
    const o8 = join(scratch.dir, 'g8', 'm8.safetensors');
    mkdirSync(join(scratch.dir, 'g8'), { recursive: true });
    await gptq.write(model, o8, { bits: '8', group_size: '-1', sym: 'false' });
    const f = readRaw(o8);
    expect(f.byName.get('model.layers.0.mlp.down_proj.qweight')!.shape).toEqual([256 / 4, 128]);
    expect(f.byName.get('model.layers.0.mlp.down_proj.qzeros')!.shape).toEqual([1, 32]);
    expect(f.byName.get('model.layers.0.mlp.down_proj.g_idx')!.data).toEqual(Buffer.alloc(256 * 4));
    const cfg = JSON.parse(readFileSync(join(scratch.dir, 'g8', 'm8.quantize_config.json'), 'utf8'));
    expect(cfg).toMatchObject({ bits: 8, group_size: -1, sym: false, model_file_base_name: 'm8' });
    const back = join(scratch.dir, 'g8', 'back.safetensors');
    await gptq.read(o8, back);
    const x = floatsOf(readRaw(model).byName.get('model.layers.1.self_attn.q_proj.weight')!);
    const y = floatsOf(readRaw(back).byName.get('model.layers.1.self_attn.q_proj.weight')!);
    expect(y.reduce((a, v, k) => Math.max(a, Math.abs(v - x[k]!)), 0)).toBeLessThan(0.002);
    // bfloat16 layers at 8 bits asym: a few codes GPTQ's packing re-derives as 256 are clamped, and said so
    const report = await gptq.write(model, join(scratch.dir, 'g8', 'again.safetensors'), {
      bits: '8',
      group_size: '-1',
      sym: 'false',
    });
    for (const t of report.tensors.filter((t) => t.note?.includes('clamped')))
      expect(t.type).toBe('gptq int8 per-row asym');
    const o2 = join(scratch.dir, 'g8', 'm2.safetensors');
    await gptq.write(model, o2, { bits: '2', group_size: '32' });
    expect(readRaw(o2).byName.get('model.layers.0.mlp.up_proj.qweight')!.shape).toEqual([
      (128 / 32) * 2,
      256,
    ]);
  });
});

describe('gptq layout: errors', () => {
  const dir = scratch.dir;
  const model = join(dir, 'e-llama.safetensors');

  it('rejects unknown options and bad values (OPTION_INVALID)', async () => {
    await writeLlama(model, 1);
    const out = join(dir, 'e.safetensors');
    expect(await errorCode(() => gptq.write(model, out, { bogus: '1' }))).toBe('OPTION_INVALID');
    expect(await errorCode(() => gptq.write(model, out, { bits: '3' }))).toBe('OPTION_INVALID');
    expect(await errorCode(() => gptq.write(model, out, { group_size: '0' }))).toBe('OPTION_INVALID');
    expect(await errorCode(() => gptq.write(model, out, { sym: 'maybe' }))).toBe('OPTION_INVALID');
    expect(existsSync(out)).toBe(false);
  });

  it('rejects weights GPTQ cannot hold, non-finite values, missing linear layers', async () => {
    const bad = join(dir, 'bad.safetensors');
    const out = join(dir, 'bad-out.safetensors');
    const w = (name: string, shape: number[], fill = 0.01) => ({
      name,
      dtype: 'F32',
      shape,
      data: f32Bytes(new Array(shape[0]! * shape[1]!).fill(fill)),
    });
    writeSafetensors(bad, [w('model.layers.0.mlp.up_proj.weight', [40, 64])]);
    expect(await errorCode(() => gptq.write(bad, out, {}))).toBe('SHAPE_UNSUPPORTED');
    const nan = w('model.layers.0.mlp.up_proj.weight', [32, 64]);
    new Float32Array(nan.data.buffer)[5] = NaN;
    writeSafetensors(bad, [nan]);
    expect(await errorCode(() => gptq.write(bad, out, {}))).toBe('INPUT_NOT_FINITE');
    writeSafetensors(bad, [w('model.embed_tokens.weight', [32, 64])]);
    expect(await errorCode(() => gptq.write(bad, out, {}))).toBe('NO_TENSOR_SELECTED');
    writeSafetensors(bad, [
      {
        name: 'model.layers.0.mlp.up_proj.weight',
        dtype: 'I32',
        shape: [32, 32],
        data: new Uint8Array(4096),
      },
    ]);
    expect(await errorCode(() => gptq.write(bad, out, {}))).toBe('INPUT_DTYPE_UNSUPPORTED');
    // a range so small that its float16 scale is 0: AutoGPTQ's pack would write garbage
    writeSafetensors(bad, [w('model.layers.0.mlp.up_proj.weight', [32, 64], 1e-9)]);
    expect(await errorCode(() => gptq.write(bad, out, {}))).toBe('FEATURE_UNSUPPORTED');
    // an input that already holds X.qweight beside X.weight
    writeSafetensors(bad, [
      w('model.layers.0.mlp.up_proj.weight', [32, 64]),
      { name: 'model.layers.0.mlp.up_proj.qweight', dtype: 'F32', shape: [1], data: f32Bytes([0]) },
    ]);
    expect(await errorCode(() => gptq.write(bad, out, {}))).toBe('NAME_COLLISION');
    expect(existsSync(out)).toBe(false);
  });

  it('casts the bias of a quantized layer to float16 and passes other biases through', async () => {
    const m = join(dir, 'bias.safetensors');
    const out = join(dir, 'bias-out.safetensors');
    writeSafetensors(m, [
      {
        name: 'model.layers.0.self_attn.q_proj.weight',
        dtype: 'F32',
        shape: [32, 32],
        data: f32Bytes(new Array(1024).fill(0.5)),
      },
      {
        name: 'model.layers.0.self_attn.q_proj.bias',
        dtype: 'F32',
        shape: [32],
        data: f32Bytes(new Array(32).fill(0.1)),
      },
      { name: 'model.norm.bias', dtype: 'F32', shape: [2], data: f32Bytes([0.1, 0.2]) },
    ]);
    const res = await gptq.write(m, out, {});
    const f = readRaw(out);
    expect(f.byName.get('model.layers.0.self_attn.q_proj.bias')!.dtype).toBe('F16');
    expect(uint16sOf(f.byName.get('model.layers.0.self_attn.q_proj.bias')!)[0]).toBe(
      float16BitsFromFloat32(0.1),
    );
    expect(f.byName.get('model.norm.bias')!.dtype).toBe('F32');
    expect(res.tensors.find((t) => t.name === 'model.layers.0.self_attn.q_proj.bias')!.type).toBe('F16');
  });

  it('read: malformed GPTQ files are LAYOUT_INVALID, 3-bit is FEATURE_UNSUPPORTED', async () => {
    const bad = join(dir, 'bad-gptq.safetensors');
    const back = join(dir, 'bad-back.safetensors');
    const i32 = (name: string, shape: number[]) => ({
      name,
      dtype: 'I32',
      shape,
      data: new Uint8Array(shape[0]! * shape[1]! * 4),
    });
    const scales = { name: 'l.mlp.up_proj.scales', dtype: 'F16', shape: [1, 32], data: new Uint8Array(64) };
    writeSafetensors(bad, [i32('l.mlp.up_proj.qweight', [4, 32]), scales]);
    expect(await errorCode(() => gptq.read(bad, back))).toBe('LAYOUT_INVALID'); // no qzeros
    writeSafetensors(bad, [
      i32('l.mlp.up_proj.qweight', [4, 32]),
      i32('l.mlp.up_proj.qzeros', [1, 5]),
      scales,
    ]);
    expect(await errorCode(() => gptq.read(bad, back))).toBe('LAYOUT_INVALID'); // 5 words for 32 outputs
    writeSafetensors(bad, [
      i32('l.mlp.up_proj.qweight', [3, 32]),
      i32('l.mlp.up_proj.qzeros', [1, 3]),
      scales,
    ]);
    expect(await errorCode(() => gptq.read(bad, back))).toBe('FEATURE_UNSUPPORTED');
    const gIdx = {
      name: 'l.mlp.up_proj.g_idx',
      dtype: 'I32',
      shape: [32],
      data: new Uint8Array(Int32Array.from(new Array(32).fill(3)).buffer),
    };
    writeSafetensors(bad, [
      i32('l.mlp.up_proj.qweight', [4, 32]),
      i32('l.mlp.up_proj.qzeros', [1, 4]),
      scales,
      gIdx,
    ]);
    expect(await errorCode(() => gptq.read(bad, back))).toBe('LAYOUT_INVALID'); // g_idx 3 of 1 group
    expect(existsSync(back)).toBe(false);
  });

  it('honours an aborted signal (CANCELLED) and leaves no output', async () => {
    const out = join(dir, 'cancelled.safetensors');
    const ac = new AbortController();
    ac.abort();
    expect(await errorCode(() => gptq.write(model, out, {}, { signal: ac.signal }))).toBe('CANCELLED');
    expect(existsSync(out)).toBe(false);
  });
});
