/**
 * The "nf4" / "fp4" layouts: golden vectors from an independent transcription of bitsandbytes'
 * CUDA quantizer (golden/bnb_reference.py; bitsandbytes itself is not installed), the decision
 * trees at their thresholds, the quant state, the round trip (double-quantized states included),
 * the tensor names and shapes transformers' loader expects, and the errors.
 */
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import {
  FP4_CODE,
  NF4_CODE,
  bnbDequantize,
  bnbQuantStateJson,
  bnbQuantize,
  fp4Code,
  nf4Code,
  type BnbQuantType,
} from '../../src/core/interop/bnb.js';
import { LAYOUTS } from '../../src/service/layouts/index.js';
import {
  errorCode,
  f32Bytes,
  floatsOf,
  golden,
  goldenWeight,
  head,
  hex32,
  readRaw,
  sameBytes,
  tempRoot,
  tree,
  writeLlama,
  writeSafetensors,
} from './gptq-awq-bnb.helpers.js';

interface BnbCase {
  name: string;
  shape: number[];
  dtype: 'float32' | 'float16' | 'bfloat16';
  quant_type: BnbQuantType;
  blocksize: number;
  weight: string[];
  packed: string;
  absmax: string[];
  quant_map: string[];
  quant_state: string;
  argmin_differs: number;
}

const GOLDEN = golden<BnbCase>('bnb_vectors.json');
const nf4 = LAYOUTS.get('nf4')!;
const fp4 = LAYOUTS.get('fp4')!;
const scratch = tempRoot('quantd-bnb-');
afterAll(() => scratch.cleanup());

const f = Math.fround;

describe('bitsandbytes golden vectors (kQuantizeBlockwise + dQuantizeNF4/FP4 transcription)', () => {
  it('covers nf4 and fp4, three dtypes, blocksizes 64 and 128, odd counts and all-zero blocks', () => {
    expect(new Set(GOLDEN.cases.map((c) => c.quant_type))).toEqual(new Set(['nf4', 'fp4']));
    expect(new Set(GOLDEN.cases.map((c) => c.dtype))).toEqual(new Set(['float32', 'float16', 'bfloat16']));
    expect(GOLDEN.cases.some((c) => c.shape.reduce((a, b) => a * b) % 2 === 1)).toBe(true);
    expect(GOLDEN.note).toContain('kQuantizeBlockwise');
    // the torch fallback's argmin would differ on threshold values: why quantd follows the kernel
    expect(GOLDEN.cases.some((c) => c.argmin_differs > 0)).toBe(true);
  });

  it.each(GOLDEN.cases.map((c) => [c.name, c] as const))(
    '%s: packed codes, absmax, quant_map, quant_state are exact',
    (_, c) => {
      const p = bnbQuantize(c.name, goldenWeight(c.weight, c.dtype), c.quant_type, c.blocksize);
      expect(Buffer.from(p.packed).toString('hex')).toBe(c.packed);
      expect(hex32(new Uint32Array(p.absmax.buffer))).toEqual(c.absmax);
      expect(hex32(new Uint32Array((c.quant_type === 'nf4' ? NF4_CODE : FP4_CODE).slice().buffer))).toEqual(
        c.quant_map,
      );
      expect(bnbQuantStateJson(c.quant_type, c.blocksize, c.dtype, c.shape)).toBe(c.quant_state);
    },
  );
});

describe('bitsandbytes code choice', () => {
  it('NF4: a value exactly on a threshold takes the lower code; one ulp above, the upper', () => {
    const up = (x: number) => {
      const a = new Float32Array([x]);
      const u = new Uint32Array(a.buffer);
      u[0] = x >= 0 ? u[0]! + 1 : u[0]! - 1;
      return a[0]!;
    };
    const t = f(0.03979014977812767); // midpoint of 0 (code 7) and 0.0796 (code 8)
    expect(nf4Code(t)).toBe(7);
    expect(nf4Code(up(t))).toBe(8);
    expect(nf4Code(f(-0.045525018125772476))).toBe(6);
    expect(nf4Code(1)).toBe(15);
    expect(nf4Code(-1)).toBe(0);
    expect(nf4Code(0)).toBe(7);
    expect(nf4Code(-0)).toBe(7);
    expect(nf4Code(NaN)).toBe(0); // an all-zero block: 0 * inf
  });

  it('FP4: sign-magnitude, -0 is positive, thresholds strict', () => {
    expect(fp4Code(1)).toBe(3);
    expect(fp4Code(-1)).toBe(11);
    expect(fp4Code(-0)).toBe(0);
    expect(fp4Code(f(0.29166667))).toBe(7); // on the threshold between 0.25 (7) and 0.3333 (4)
    expect(fp4Code(f(0.3))).toBe(4);
    expect(fp4Code(-f(0.00260417))).toBe(8); // -0 code: the magnitude rounds to 0
    expect(fp4Code(NaN)).toBe(0);
    // code 8 is stored as +0.0 in quant_map (get_4bit_type's Python literal -0 is the integer 0)
    expect(Object.is(FP4_CODE[8], 0)).toBe(true);
    expect(Array.from(FP4_CODE.subarray(0, 8))).toEqual([
      0,
      f(0.0625 / 12),
      f(8 / 12),
      1,
      f(4 / 12),
      0.5,
      f(2 / 12),
      0.25,
    ]);
  });

  it('dequantization is quant_map[code] · absmax, high nibble first', () => {
    const x = Float32Array.from([0.5, -1, 0, 0.25, 1]);
    const p = bnbQuantize('x', x, 'nf4', 64);
    expect(Array.from(p.packed)).toEqual([(nf4Code(0.5) << 4) | 0, (7 << 4) | nf4Code(0.25), (15 << 4) | 7]);
    const back = bnbDequantize(p.packed, p.absmax, NF4_CODE, 64, 5);
    expect(Array.from(back)).toEqual([NF4_CODE[nf4Code(0.5)], -1, 0, NF4_CODE[nf4Code(0.25)], 1]);
  });
});

describe('nf4 / fp4 layouts: write, read, detect', () => {
  const model = join(scratch.dir, 'llama.safetensors');

  it.each(['nf4', 'fp4'] as const)('%s: the state dict transformers saves for a Linear4bit', async (type) => {
    const layout = LAYOUTS.get(type)!;
    if (!existsSync(model)) await writeLlama(model, 2);
    const dir = join(scratch.dir, type);
    mkdirSync(dir, { recursive: true });
    const out = join(dir, 'model.safetensors');
    const res = await layout.write(model, out, { blocksize: '64' });
    expect(res.files).toEqual([out, join(dir, 'model.quantization_config.json')]);
    expect(tree(dir)).toEqual(['model.quantization_config.json', 'model.safetensors']);
    const src = readRaw(model);
    const file = readRaw(out);
    expect(file.metadata).toMatchObject({ format: 'pt' });
    let quantized = 0;
    for (const t of src.tensors) {
      if (!/\.(?:self_attn\.[qkvo]_proj|mlp\.(?:gate|up|down)_proj)\.weight$/.test(t.name)) {
        expect(sameBytes(file.byName.get(t.name)!.data, t.data), t.name).toBeNull();
        continue;
      }
      quantized++;
      const n = t.shape[0]! * t.shape[1]!;
      // bitsandbytes quantize_4bit: out = zeros(((n + 1) // 2, 1), uint8); absmax float32 [blocks];
      // QuantState.as_dict(packed=True): quant_map float32 [16], quant_state.bitsandbytes__<type> uint8
      // (the keys transformers' Bnb4BitHfQuantizer and QuantState.from_dict look for)
      expect([file.byName.get(t.name)!.dtype, file.byName.get(t.name)!.shape]).toEqual(['U8', [n / 2, 1]]);
      expect([
        file.byName.get(`${t.name}.absmax`)!.dtype,
        file.byName.get(`${t.name}.absmax`)!.shape,
      ]).toEqual(['F32', [n / 64]]);
      expect([
        file.byName.get(`${t.name}.quant_map`)!.dtype,
        file.byName.get(`${t.name}.quant_map`)!.shape,
      ]).toEqual(['F32', [16]]);
      const state = file.byName.get(`${t.name}.quant_state.bitsandbytes__${type}`)!;
      expect(state.dtype).toBe('U8');
      const dtype = t.dtype === 'BF16' ? 'bfloat16' : 'float16';
      expect(JSON.parse(state.data.toString('utf8'))).toEqual({
        quant_type: type,
        blocksize: 64,
        dtype,
        shape: t.shape,
      });
      expect(state.data.toString('utf8')).toBe(
        `{"quant_type": "${type}", "blocksize": 64, "dtype": "${dtype}", "shape": [${t.shape.join(', ')}]}`,
      );
      const p = bnbQuantize(t.name, floatsOf(t), type, 64);
      expect(sameBytes(file.byName.get(t.name)!.data, p.packed)).toBeNull();
    }
    expect(quantized).toBe(14);
    expect(file.tensors.length).toBe(src.tensors.length + quantized * 3);

    const cfg = JSON.parse(readFileSync(join(dir, 'model.quantization_config.json'), 'utf8'));
    expect(cfg.quantization_config).toMatchObject({
      quant_method: 'bitsandbytes',
      load_in_4bit: true,
      load_in_8bit: false,
      bnb_4bit_quant_type: type,
      bnb_4bit_use_double_quant: false,
      bnb_4bit_compute_dtype: 'bfloat16', // the dtype of every quantized layer (float32 when they differ)
      bnb_4bit_quant_storage: 'uint8',
      llm_int8_skip_modules: ['model.embed_tokens', 'lm_head'],
    });
    // BitsAndBytesConfig.post_init requires a float threshold
    expect(readFileSync(join(dir, 'model.quantization_config.json'), 'utf8')).toContain(
      '"llm_int8_threshold": 6.0',
    );

    // read back: X.weight F32 of the state's shape, = quant_map[code] · absmax
    const back = join(dir, 'back.safetensors');
    const { tensors } = await layout.read(out, back);
    expect(tensors).toBe(src.tensors.length);
    const deq = readRaw(back);
    expect(deq.tensors.map((t) => t.name)).toEqual(src.tensors.map((t) => t.name));
    const name = 'model.layers.1.mlp.gate_proj.weight';
    const d = deq.byName.get(name)!;
    expect([d.dtype, d.shape]).toEqual(['F32', [256, 128]]);
    const expected = bnbDequantize(
      Uint8Array.from(file.byName.get(name)!.data),
      floatsOf(file.byName.get(`${name}.absmax`)!),
      type === 'nf4' ? NF4_CODE : FP4_CODE,
      64,
      256 * 128,
    );
    expect(floatsOf(d)).toEqual(expected);
    const x = floatsOf(src.byName.get(name)!);
    const absmax = floatsOf(file.byName.get(`${name}.absmax`)!);
    const worst = expected.reduce(
      (a, v, k) => Math.max(a, Math.abs(v - x[k]!) / absmax[Math.floor(k / 64)]!),
      0,
    );
    expect(worst).toBeLessThan(type === 'nf4' ? 0.153 : 0.167); // half the widest gap of the code book

    expect(layout.detect(out, head(out))).toBe(true);
    expect(layout.detect(out, head(out, 8))).toBe(true);
    expect(LAYOUTS.get(type === 'nf4' ? 'fp4' : 'nf4')!.detect(out, head(out))).toBe(false);
    expect(layout.detect(model, head(model))).toBe(false);
    expect(LAYOUTS.get('gptq')!.detect(out, head(out))).toBe(false);
  });

  it('blocksize 128 and a single-dtype model name their compute dtype', async () => {
    const m = join(scratch.dir, 'one.safetensors');
    writeSafetensors(m, [
      {
        name: 'model.layers.0.self_attn.o_proj.weight',
        dtype: 'F32',
        shape: [4, 33],
        data: f32Bytes(Array.from({ length: 132 }, (_, k) => Math.sin(k))),
      },
      {
        name: 'model.layers.0.self_attn.o_proj.bias',
        dtype: 'F32',
        shape: [4],
        data: f32Bytes([1, 2, 3, 4]),
      },
    ]);
    const dir = join(scratch.dir, 'one');
    mkdirSync(dir, { recursive: true });
    const out = join(dir, 'm.safetensors');
    await nf4.write(m, out, { blocksize: '128', compress_statistics: 'false' });
    const file = readRaw(out);
    expect(file.byName.get('model.layers.0.self_attn.o_proj.weight')!.shape).toEqual([66, 1]);
    expect(file.byName.get('model.layers.0.self_attn.o_proj.weight.absmax')!.shape).toEqual([2]);
    expect(file.byName.get('model.layers.0.self_attn.o_proj.bias')!.dtype).toBe('F32'); // Linear4bit keeps its bias
    const cfg = JSON.parse(readFileSync(join(dir, 'm.quantization_config.json'), 'utf8'));
    expect(cfg.quantization_config.bnb_4bit_compute_dtype).toBe('float32');
    expect(cfg.quantization_config.llm_int8_skip_modules).toBeNull();
  });

  it('reads double-quantized states (nested absmax, nested quant map, offset)', async () => {
    // 4 blocks of 2 values; absmax = nested_quant_map[code] * nested_absmax[i // 2] + offset
    const nestedMap = Float32Array.from({ length: 256 }, (_, k) => (k - 128) / 128);
    const codes = Uint8Array.from([192, 64, 255, 128]); // 0.5, -0.5, 0.9921875, 0
    const nestedAbsmax = Float32Array.from([2, 4]);
    const offset = 1.25;
    const state = `{"quant_type": "nf4", "blocksize": 2, "dtype": "bfloat16", "shape": [2, 4], "nested_blocksize": 2, "nested_dtype": "float32", "nested_offset": ${offset}}`;
    const packed = Uint8Array.from([0xf0, 0x7f, 0x08, 0xe1]);
    const m = join(scratch.dir, 'nested.safetensors');
    writeSafetensors(m, [
      { name: 'l.mlp.up_proj.weight', dtype: 'U8', shape: [4, 1], data: packed },
      { name: 'l.mlp.up_proj.weight.absmax', dtype: 'U8', shape: [4], data: codes },
      {
        name: 'l.mlp.up_proj.weight.quant_map',
        dtype: 'F32',
        shape: [16],
        data: new Uint8Array(NF4_CODE.slice().buffer),
      },
      {
        name: 'l.mlp.up_proj.weight.nested_absmax',
        dtype: 'F32',
        shape: [2],
        data: new Uint8Array(nestedAbsmax.buffer),
      },
      {
        name: 'l.mlp.up_proj.weight.nested_quant_map',
        dtype: 'F32',
        shape: [256],
        data: new Uint8Array(nestedMap.buffer),
      },
      {
        name: 'l.mlp.up_proj.weight.quant_state.bitsandbytes__nf4',
        dtype: 'U8',
        shape: [state.length],
        data: new TextEncoder().encode(state),
      },
    ]);
    const back = join(scratch.dir, 'nested-back.safetensors');
    await nf4.read(m, back);
    const absmax = [f(0.5 * 2) + 1.25, f(-0.5 * 2) + 1.25, f(f(127 / 128) * 4) + 1.25, 0 * 4 + 1.25].map(f);
    const codes4 = [15, 0, 7, 15, 0, 8, 14, 1];
    const expected = codes4.map((c, i) => f(NF4_CODE[c]! * absmax[Math.floor(i / 2)]!));
    const d = readRaw(back).byName.get('l.mlp.up_proj.weight')!;
    expect([d.dtype, d.shape]).toEqual(['F32', [2, 4]]);
    expect(Array.from(floatsOf(d))).toEqual(expected);
  });
});

describe('nf4 / fp4 layouts: errors', () => {
  it('rejects bad options, double quantization, malformed states', async () => {
    const dir = scratch.dir;
    const m = join(dir, 'e.safetensors');
    const out = join(dir, 'e-out.safetensors');
    writeSafetensors(m, [
      { name: 'x.mlp.down_proj.weight', dtype: 'F32', shape: [2, 2], data: f32Bytes([1, 2, 3, NaN]) },
    ]);
    expect(await errorCode(() => nf4.write(m, out, { blocksize: '100' }))).toBe('OPTION_INVALID');
    expect(await errorCode(() => fp4.write(m, out, { compress_statistics: 'true' }))).toBe(
      'FEATURE_UNSUPPORTED',
    );
    expect(await errorCode(() => fp4.write(m, out, { group_size: '64' }))).toBe('OPTION_INVALID');
    expect(await errorCode(() => nf4.write(m, out, {}))).toBe('INPUT_NOT_FINITE');
    expect(existsSync(out)).toBe(false);
    const state = (text: string) => ({
      name: 'w.weight.quant_state.bitsandbytes__nf4',
      dtype: 'U8',
      shape: [text.length],
      data: new TextEncoder().encode(text),
    });
    const parts = [
      { name: 'w.weight', dtype: 'U8', shape: [2, 1], data: new Uint8Array(2) },
      { name: 'w.weight.absmax', dtype: 'F32', shape: [1], data: f32Bytes([1]) },
      { name: 'w.weight.quant_map', dtype: 'F32', shape: [16], data: new Uint8Array(64) },
    ];
    writeSafetensors(m, [
      ...parts,
      state('{"quant_type": "int4", "blocksize": 64, "dtype": "float16", "shape": [2, 2]}'),
    ]);
    expect(await errorCode(() => nf4.read(m, join(dir, 'b.safetensors')))).toBe('LAYOUT_INVALID');
    writeSafetensors(m, [...parts, state('not json')]);
    expect(await errorCode(() => nf4.read(m, join(dir, 'b.safetensors')))).toBe('LAYOUT_INVALID');
    writeSafetensors(m, [
      ...parts,
      state('{"quant_type": "nf4", "blocksize": 64, "dtype": "float16", "shape": [4, 4]}'),
    ]);
    expect(await errorCode(() => nf4.read(m, join(dir, 'b.safetensors')))).toBe('LAYOUT_INVALID'); // 8 bytes needed, 2 given
    writeSafetensors(m, [
      ...parts,
      state('{"quant_type": "nf4", "blocksize": 64, "dtype": "float16", "shape": [2, 2]}'),
    ]);
    await nf4.read(m, join(dir, 'b.safetensors'));
    expect(readRaw(join(dir, 'b.safetensors')).byName.get('w.weight')!.shape).toEqual([2, 2]);
  });
});
