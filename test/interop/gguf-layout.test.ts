/**
 * The gguf interop layout end to end: a synthetic llama-like safetensors model → GGUF (checked
 * with the independent @huggingface/gguf parser and byte for byte against the block
 * quantizers) → float32 safetensors, for every type; llama.cpp's per-tensor type rules and
 * fallbacks; llama.cpp names with the q/k permutation; options and bad input.
 */
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gguf as hfGguf } from '@huggingface/gguf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { floatDTypeOfSt, type StDType } from '../../src/core/dtypes.js';
import {
  QUANT_TYPES,
  ggmlDecode,
  ggmlEncode,
  ggmlTypeByName,
  type GgmlQuantType,
} from '../../src/core/interop/ggml.js';
import { bytesOf, toFloat32 } from '../../src/core/tensor.js';
import { GgufFileReader, GgufFileWriter } from '../../src/format/gguf-file.js';
import { serializeSafetensors } from '../../src/format/safetensors.js';
import { LAYOUTS } from '../../src/service/layouts/index.js';
import {
  LLAMA_FTYPE,
  ggufLayout,
  ggufTensorType,
  llamaGgufName,
  permuteHeads,
} from '../../src/service/layouts/gguf.js';
import { parseRaw, synthetic, type SynthTensor } from '../model/helpers.js';

/** @huggingface/gguf's metadata, by key (its typings only know standard keys). */
const meta = (parsed: { metadata: unknown }): Record<string, unknown> =>
  parsed.metadata as Record<string, unknown>;

const DIR = mkdtempSync(join(tmpdir(), 'quantd-gguf-layout-'));
afterAll(() => rmSync(DIR, { recursive: true, force: true }));
let seq = 0;
const tmp = (name: string): string => join(DIR, `${seq++}-${name}`);

let MODEL = '';
let TENSORS: SynthTensor[] = [];

beforeAll(async () => {
  const synth = await synthetic();
  // hidden 256: every projection's rows are whole Q4_K / Q6_K super-blocks; small vocab and MLP
  // keep the K-quant runs short
  const options = { layers: 1, hidden: 256, intermediate: 256, vocab: 32 } as {
    layers: number;
    hidden: number;
  };
  TENSORS = synth.llamaTensors(options);
  MODEL = join(DIR, 'llama.safetensors');
  synth.writeModelFile(MODEL, TENSORS);
});

/** The float32 values of a tensor of the input model. */
function inputFloats(name: string): { x: Float32Array; shape: number[] } {
  const raw = parseRaw(readFileSync(MODEL));
  const t = raw.byName.get(name)!;
  return { x: toFloat32(new Uint8Array(t.data), floatDTypeOfSt(t.dtype as StDType)!), shape: [...t.shape] };
}

function customModel(
  tensors: Array<{ name: string; shape: number[]; values?: (i: number) => number; dtype?: StDType }>,
): string {
  const path = tmp('custom.safetensors');
  const file = serializeSafetensors(
    tensors.map((t) => {
      const n = t.shape.reduce((a, b) => a * b, 1);
      const x = Float32Array.from({ length: n }, (_, i) =>
        t.values ? t.values(i) : Math.sin(i * 0.37) * 0.05,
      );
      if (t.dtype === 'I32')
        return { name: t.name, dtype: 'I32', shape: t.shape, data: bytesOf(Int32Array.from(x)) };
      return { name: t.name, dtype: 'F32', shape: t.shape, data: bytesOf(x) };
    }),
    { format: 'pt' },
  );
  writeFileSync(path, file);
  return path;
}

describe('registration', () => {
  it('is the "gguf" layout, with its options', () => {
    expect(LAYOUTS.get('gguf')).toBe(ggufLayout);
    expect(Object.keys(ggufLayout.options).sort()).toEqual([
      'arch',
      'ftype',
      'heads',
      'imatrix',
      'kv_heads',
      'name',
      'names',
      'output_tensor_type',
      'pure',
      'split_max_size',
      'tensor_type',
      'token_embedding_type',
      'type',
    ]);
  });

  it('detects GGUF files by their magic', () => {
    expect(ggufLayout.detect('x.gguf', Buffer.from('GGUF\x03\x00\x00\x00'))).toBe(true);
    expect(ggufLayout.detect('x.safetensors', Buffer.from('\x10\x00\x00\x00\x00\x00\x00\x00{"'))).toBe(false);
    expect(ggufLayout.detect('x', new Uint8Array(2))).toBe(false);
  });
});

describe.each(QUANT_TYPES)('a llama-like model as %s', (type: GgmlQuantType) => {
  let out = '';
  let result: Awaited<ReturnType<typeof ggufLayout.write>>;

  beforeAll(async () => {
    out = tmp(`model-${type}.gguf`);
    result = await ggufLayout.write(MODEL, out, { type });
  });

  it('is read by @huggingface/gguf: metadata, names, ggml-order shapes, types', async () => {
    const parsed = await hfGguf(out, { allowLocalFile: true });
    expect(meta(parsed)['version']).toBe(3);
    expect(meta(parsed)['general.architecture']).toBe('llama');
    expect(meta(parsed)['general.name']).toBe('llama');
    expect(meta(parsed)['general.file_type']).toBe(LLAMA_FTYPE[type]);
    expect(meta(parsed)['general.quantization_version']).toBe(2);
    expect(meta(parsed)['general.alignment']).toBe(32);
    const floats = TENSORS.filter(([, dtype]) => dtype !== 'I64');
    expect(parsed.tensorInfos.map((t) => t.name)).toEqual(floats.map(([name]) => name));
    for (const [i, [name, , shape]] of floats.entries()) {
      const t = parsed.tensorInfos[i]!;
      expect(t.shape.map(Number), name).toEqual([...shape].reverse());
      expect(t.dtype, name).toBe(shape.length === 1 ? 0 : ggmlTypeByName(type)!.id);
      expect(Number(t.offset) % 32, name).toBe(0);
    }
    expect(result.files).toEqual([out]);
    expect(result.tensors.find((t) => t.name === 'model.rotary_emb.position_ids')).toMatchObject({
      type: 'skipped',
    });
  });

  it('holds exactly the block quantizer bytes, and reads back to their dequantization', async () => {
    const back = tmp(`back-${type}.safetensors`);
    expect(await ggufLayout.read(out, back)).toEqual({ tensors: TENSORS.length - 1 });
    const st = parseRaw(readFileSync(back));
    const r = await GgufFileReader.open(out);
    try {
      for (const t of r.header.tensors) {
        const { x, shape } = inputFloats(t.name);
        const encoded = ggmlEncode(t.type.name as GgmlQuantType, x, shape.at(-1)!);
        expect(Buffer.from(await r.read(t)).equals(Buffer.from(encoded)), t.name).toBe(true);
        const out32 = st.byName.get(t.name)!;
        expect(out32.dtype).toBe('F32');
        expect(out32.shape).toEqual(shape);
        const expected = bytesOf(ggmlDecode(t.type.name, encoded, x.length));
        expect(Buffer.from(out32.data).equals(Buffer.from(expected)), t.name).toBe(true);
      }
    } finally {
      await r.close();
    }
  });
});

describe('quantization error stays within each type’s bound', () => {
  // relative RMS error on weight-like data; 4-bit ~ 1/16 of the block range, 8-bit ~ 1/256
  const BOUND: Record<GgmlQuantType, number> = {
    Q8_0: 0.01,
    Q6_K: 0.04,
    Q5_0: 0.06,
    Q5_1: 0.06,
    Q5_K: 0.06,
    Q3_K: 0.25,
    Q2_K: 0.45,
    Q4_0: 0.12,
    Q4_1: 0.12,
    Q4_K: 0.12,
    IQ4_NL: 0.12,
    IQ4_XS: 0.12,
  };
  it.each(QUANT_TYPES)('%s', (type) => {
    const { x } = inputFloats('model.layers.0.mlp.up_proj.weight');
    const y = ggmlDecode(type, ggmlEncode(type, x, 256), x.length);
    let err = 0;
    let sig = 0;
    let maxRel = 0;
    for (let i = 0; i < x.length; i++) {
      err += (x[i]! - y[i]!) ** 2;
      sig += x[i]! ** 2;
    }
    for (let b = 0; b < x.length; b += 32) {
      let amax = 0;
      let e = 0;
      for (let i = b; i < b + 32; i++) {
        amax = Math.max(amax, Math.abs(x[i]!));
        e = Math.max(e, Math.abs(x[i]! - y[i]!));
      }
      if (amax > 0) maxRel = Math.max(maxRel, e / amax);
    }
    expect(Math.sqrt(err / sig)).toBeLessThan(BOUND[type]);
    // per 32-block worst case: half a step plus the clamp of the extreme opposite the scale
    const step = {
      Q8_0: 1 / 127,
      Q6_K: 1 / 32,
      Q5_0: 1 / 16,
      Q5_1: 2 / 31,
      Q4_0: 1 / 8,
      Q4_1: 2 / 15,
      Q4_K: 2 / 15,
      Q3_K: 1 / 3,
      Q2_K: 2 / 3,
      // a 5-bit code's step is 1/31 of the range, but the sub-block's min and scale are 6-bit
      // roundings of the fit's (measured 0.097 on these weights, byte-equal to llama.cpp)
      Q5_K: 1 / 10,
      // the grid's widest gap (113 − 89) over the scale's reach (127)
      IQ4_NL: 24 / 127,
      IQ4_XS: 24 / 127,
    };
    expect(maxRel).toBeLessThanOrEqual(step[type] * 1.05 + 1e-3);
  });
});

describe('per-tensor types follow llama.cpp', () => {
  it('rank ≤ 1 is F32, non-weights F16, partial blocks fall back as llama-quantize does', () => {
    expect(ggufTensorType('model.norm.weight', [256], 'Q4_K')).toMatchObject({ type: 'F32' });
    expect(ggufTensorType('scalar', [], 'Q8_0')).toMatchObject({ type: 'F32' });
    expect(ggufTensorType('pos_embd', [64, 32], 'Q8_0')).toMatchObject({ type: 'F16' });
    expect(ggufTensorType('a.weight', [4, 64], 'Q8_0')).toEqual({ type: 'Q8_0' });
    expect(ggufTensorType('a.weight', [4, 100], 'Q8_0')).toMatchObject({
      type: 'F16',
      note: expect.stringMatching(/100 is not a multiple of 32/),
    });
    expect(ggufTensorType('a.weight', [4, 96], 'Q4_K')).toMatchObject({
      type: 'Q5_0',
      note: expect.stringMatching(/fallback/),
    });
    expect(ggufTensorType('a.weight', [4, 96], 'Q6_K')).toMatchObject({ type: 'Q8_0' });
    expect(ggufTensorType('a.weight', [4, 100], 'Q6_K')).toMatchObject({ type: 'F16' });
    expect(ggufTensorType('a.weight', [4, 96], 'IQ4_XS')).toMatchObject({ type: 'IQ4_NL' });
    expect(ggufTensorType('conv.weight', [2, 3, 256], 'Q4_K')).toEqual({ type: 'Q4_K' });
  });

  it('writes those choices, with dims reversed, and reports them', async () => {
    const input = customModel([
      { name: 'odd.weight', shape: [3, 100] },
      { name: 'k96.weight', shape: [2, 96] },
      { name: 'conv.weight', shape: [2, 3, 256] },
      { name: 'bias', shape: [7] },
      { name: 'idx', shape: [4], dtype: 'I32' },
    ]);
    const out = tmp('custom.gguf');
    const result = await ggufLayout.write(input, out, { type: 'Q4_K', arch: 'test' });
    expect(result.tensors.map((t) => [t.name, t.type])).toEqual([
      ['odd.weight', 'F16'],
      ['k96.weight', 'Q5_0'],
      ['conv.weight', 'Q4_K'],
      ['bias', 'F32'],
      ['idx', 'skipped'],
    ]);
    const parsed = await hfGguf(out, { allowLocalFile: true });
    expect(meta(parsed)['general.architecture']).toBe('test');
    expect(meta(parsed)['general.file_type']).toBe(14);
    expect(parsed.tensorInfos.map((t) => [t.name, t.shape.map(Number), t.dtype])).toEqual([
      ['odd.weight', [100, 3], 1],
      ['k96.weight', [96, 2], 6],
      ['conv.weight', [256, 3, 2], 12],
      ['bias', [7], 0],
    ]);
    const back = tmp('custom-back.safetensors');
    await ggufLayout.read(out, back);
    const st = parseRaw(readFileSync(back));
    expect(st.tensors.map((t) => [t.name, t.shape])).toEqual([
      ['odd.weight', [3, 100]],
      ['k96.weight', [2, 96]],
      ['conv.weight', [2, 3, 256]],
      ['bias', [7]],
    ]);
    // F32 and F16 (these values are exact in float16? no: F16 rounds) read back as written
    const bias = new Float32Array(new Uint8Array(st.byName.get('bias')!.data).buffer);
    expect(Array.from(bias)).toEqual(
      Array.from({ length: 7 }, (_, i) => Math.fround(Math.sin(i * 0.37) * 0.05)),
    );
  });
});

describe('llama.cpp names (names=gguf)', () => {
  it('maps the llama checkpoint names as convert_hf_to_gguf.py does', () => {
    expect(llamaGgufName('model.embed_tokens.weight')).toBe('token_embd.weight');
    expect(llamaGgufName('model.layers.12.self_attn.o_proj.weight')).toBe('blk.12.attn_output.weight');
    expect(llamaGgufName('model.layers.0.post_attention_layernorm.weight')).toBe('blk.0.ffn_norm.weight');
    expect(llamaGgufName('model.layers.3.mlp.down_proj.weight')).toBe('blk.3.ffn_down.weight');
    expect(llamaGgufName('lm_head.weight')).toBe('output.weight');
    expect(llamaGgufName('model.layers.0.self_attn.rotary_emb.inv_freq')).toBeNull();
    expect(llamaGgufName('vision.patch_embed.weight')).toBeUndefined();
  });

  it('permutes q/k rows like LlamaModel.permute (reshape(h, 2, r, c).swapaxes(1, 2))', () => {
    // 2 heads, 8 rows of 1 column: head h, half s, index i -> row h*4 + s*2 + i
    const x = Float32Array.from({ length: 8 }, (_, i) => i);
    expect(Array.from(permuteHeads(x, 8, 2, 'q'))).toEqual([0, 2, 1, 3, 4, 6, 5, 7]);
    expect(() => permuteHeads(x, 8, 3, 'q')).toThrow(/cannot be split into 3 heads/);
  });

  it('writes llama.cpp names, permuted q and k, and drops nothing else', async () => {
    const out = tmp('names.gguf');
    const result = await ggufLayout.write(MODEL, out, {
      type: 'Q8_0',
      names: 'gguf',
      heads: '4',
      kv_heads: '2',
    });
    const names = result.tensors.filter((t) => t.type !== 'skipped').map((t) => t.name);
    expect(names).toContain('blk.0.attn_q.weight');
    expect(names).toContain('token_embd.weight');
    expect(names).toContain('output_norm.weight');
    const r = await GgufFileReader.open(out);
    try {
      for (const [hf, gg, heads] of [
        ['model.layers.0.self_attn.q_proj.weight', 'blk.0.attn_q.weight', 4],
        ['model.layers.0.self_attn.k_proj.weight', 'blk.0.attn_k.weight', 2],
        ['model.layers.0.self_attn.v_proj.weight', 'blk.0.attn_v.weight', 0],
      ] as const) {
        const { x, shape } = inputFloats(hf);
        const rows = shape[0]!;
        const cols = shape[1]!;
        // the permutation written out independently: new[h][i][s] = old[h][s][i]
        const want = new Float32Array(x.length);
        const r2 = heads ? rows / heads / 2 : 0;
        for (let row = 0; row < rows; row++) {
          let src = row;
          if (heads) {
            const h = Math.floor(row / (2 * r2));
            const i = Math.floor((row % (2 * r2)) / 2);
            const s = row % 2;
            src = h * 2 * r2 + s * r2 + i;
          }
          want.set(x.subarray(src * cols, src * cols + cols), row * cols);
        }
        const t = r.header.tensors.find((k) => k.name === gg)!;
        expect(Buffer.from(await r.read(t)).equals(Buffer.from(ggmlEncode('Q8_0', want, cols))), gg).toBe(
          true,
        );
      }
    } finally {
      await r.close();
    }
  });

  it('needs heads, and a llama checkpoint', async () => {
    await expect(ggufLayout.write(MODEL, tmp('x.gguf'), { names: 'gguf' })).rejects.toMatchObject({
      code: 'OPTION_INVALID',
      message: expect.stringMatching(/heads is required with names=gguf/),
    });
    const other = customModel([{ name: 'encoder.weight', shape: [2, 32] }]);
    await expect(ggufLayout.write(other, tmp('x.gguf'), { names: 'gguf', heads: '2' })).rejects.toMatchObject(
      {
        code: 'FEATURE_UNSUPPORTED',
      },
    );
  });
});

describe('options and bad input', () => {
  it.each([
    [{ type: 'IQ2_XS' }, /option gguf:type must be one of Q8_0, Q4_0/],
    [{ typo: 'x' }, /typo is not an option of the gguf layout/],
    [{ names: 'hf' }, /option gguf:names must be keep or gguf/],
    [{ heads: '4' }, /heads only applies with names=gguf/],
    [{ names: 'gguf', heads: '0' }, /heads must be a positive integer/],
    [{ arch: 'Llama 3' }, /option gguf:arch must be a lowercase architecture name/],
  ])('%j → OPTION_INVALID', async (options, message) => {
    await expect(ggufLayout.write(MODEL, tmp('x.gguf'), options)).rejects.toMatchObject({
      code: 'OPTION_INVALID',
      message: expect.stringMatching(message),
    });
  });

  it('accepts a lowercase type name', async () => {
    const out = tmp('lower.gguf');
    const input = customModel([{ name: 'w.weight', shape: [2, 256] }]);
    await ggufLayout.write(input, out, { type: 'q4_k', arch: 'x' });
    expect(meta(await hfGguf(out, { allowLocalFile: true }))['general.file_type']).toBe(14);
  });

  it('a model that is not llama-like needs arch', async () => {
    const other = customModel([{ name: 'encoder.weight', shape: [2, 32] }]);
    await expect(ggufLayout.write(other, tmp('x.gguf'), {})).rejects.toMatchObject({
      code: 'OPTION_INVALID',
      message: expect.stringMatching(/arch is required/),
    });
  });

  it('NaN or Inf in a tensor → INPUT_NOT_FINITE, and no output file', async () => {
    const sub = mkdtempSync(join(DIR, 'nan-'));
    const input = customModel([{ name: 'w.weight', shape: [2, 32], values: (i) => (i === 40 ? NaN : 0.1) }]);
    await expect(ggufLayout.write(input, join(sub, 'o.gguf'), { arch: 'x' })).rejects.toMatchObject({
      code: 'INPUT_NOT_FINITE',
      message: 'tensor w.weight holds NaN at flat index 40; GGUF Q8_0 needs finite input',
    });
    expect(readdirSync(sub)).toEqual([]);
  });

  it('values beyond float16 → FEATURE_UNSUPPORTED (ggml would reject the infinite scale)', async () => {
    const input = customModel([{ name: 'w.weight', shape: [1, 32], values: () => 1e9 }]);
    await expect(ggufLayout.write(input, tmp('x.gguf'), { arch: 'x' })).rejects.toMatchObject({
      code: 'FEATURE_UNSUPPORTED',
      message: expect.stringMatching(/beyond float16's range/),
    });
  });

  it('reading a type quantd cannot decode → FEATURE_UNSUPPORTED; integer tensors pass through', async () => {
    const path = tmp('q2k.gguf');
    const w = await GgufFileWriter.create(
      path,
      [],
      [
        { name: 'ids', dims: [3], type: 'I32' },
        { name: 'w', dims: [256], type: 'IQ2_XS' },
      ],
    );
    await w.write('ids', bytesOf(Int32Array.of(7, -1, 3)));
    await w.write('w', new Uint8Array(74));
    await w.commit();
    await expect(ggufLayout.read(path, tmp('x.safetensors'))).rejects.toMatchObject({
      code: 'FEATURE_UNSUPPORTED',
      message: expect.stringMatching(/tensor "w" is IQ2_XS/),
    });
    const ok = tmp('ids.gguf');
    const w2 = await GgufFileWriter.create(ok, [], [{ name: 'ids', dims: [3], type: 'I32' }]);
    await w2.write('ids', bytesOf(Int32Array.of(7, -1, 3)));
    await w2.commit();
    const back = tmp('ids.safetensors');
    await ggufLayout.read(ok, back);
    const t = parseRaw(readFileSync(back)).byName.get('ids')!;
    expect([t.dtype, t.shape, Array.from(new Int32Array(new Uint8Array(t.data).buffer))]).toEqual([
      'I32',
      [3],
      [7, -1, 3],
    ]);
  });

  it('a malformed GGUF input → GGUF_INVALID', async () => {
    const path = tmp('bad.gguf');
    writeFileSync(path, Buffer.from('GGUF\x01\x00\x00\x00'));
    await expect(ggufLayout.read(path, tmp('x.safetensors'))).rejects.toMatchObject({ code: 'GGUF_INVALID' });
  });

  it('reports progress per tensor, and stops on abort without leaving a file', async () => {
    const seen: string[] = [];
    const out = tmp('progress.gguf');
    await ggufLayout.write(
      MODEL,
      out,
      { type: 'Q4_0' },
      { onProgress: (p) => seen.push(`${p.tensorsDone}/${p.tensorsTotal}`) },
    );
    expect(seen.at(-1)).toBe(`${TENSORS.length - 1}/${TENSORS.length - 1}`);
    const sub = mkdtempSync(join(DIR, 'abort-'));
    const controller = new AbortController();
    const aborted = ggufLayout.write(
      MODEL,
      join(sub, 'o.gguf'),
      { type: 'Q4_0' },
      {
        signal: controller.signal,
        onProgress: () => controller.abort(),
      },
    );
    await expect(aborted).rejects.toMatchObject({ code: 'CANCELLED' });
    expect(existsSync(join(sub, 'o.gguf'))).toBe(false);
    expect(readdirSync(sub)).toEqual([]);
  });
});
