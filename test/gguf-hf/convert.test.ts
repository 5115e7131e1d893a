/**
 * Hugging Face model folder → GGUF → a real llama.cpp (node-llama-cpp), per architecture: the
 * file loads; it tokenizes a fixed multilingual text to the reference tokenizer's ids; F32 and
 * F16 files give the reference forward pass's logits (test/gguf-hf/generate.py, committed with
 * its vectors); quantized files pick the same next token as F32 at most positions (rates logged).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { LlamaModel } from 'node-llama-cpp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { GgufValue } from '../../src/format/gguf.js';
import { ggufLayout } from '../../src/service/layouts/gguf.js';
import { quantd } from '../cli/run-cli.js';
import {
  argmax,
  expected,
  fixtureDir,
  ggufHeader,
  loadModel,
  logitsAfterEach,
  maxAbsDiff,
} from './llama-cpp.js';

const DIR = mkdtempSync(join(tmpdir(), 'quantd-gguf-hf-'));
afterAll(() => rmSync(DIR, { recursive: true, force: true }));

const value = (v: GgufValue | undefined): unknown =>
  v?.type === 'array' ? v.value.map((x) => x.value) : v?.value;

/**
 * Minimum top-1 agreement with F32 over the prompt's positions. Random weights leave near ties
 * that 4-bit rounding flips (measured: Q8_0 94-100 %, Q4_0 65-100 %, Q4_K 76-100 %); a broken
 * quantization or layout agrees at chance, about 1/400.
 */
const AGREEMENT: Readonly<Record<string, number>> = { Q8_0: 0.9, Q4_0: 0.5, Q4_K: 0.5 };

interface Fixture {
  readonly name: string;
  readonly arch: string;
  readonly tokenizer: 'llama' | 'gpt2';
  /** tokenizer.ggml.pre. */
  readonly pre: string;
  /** Llama 3.1 rope scaling: a rope_freqs tensor computed from config.json. */
  readonly ropeFreqs: boolean;
  /** Whether the tokenizer prepends bos (then the reference prompt starts with it). */
  readonly addBos: boolean;
}

const FIXTURES: readonly Fixture[] = [
  { name: 'llama-spm', arch: 'llama', tokenizer: 'llama', pre: 'default', ropeFreqs: false, addBos: true },
  { name: 'llama3-bpe', arch: 'llama', tokenizer: 'gpt2', pre: 'llama-bpe', ropeFreqs: true, addBos: true },
  { name: 'qwen2-bpe', arch: 'qwen2', tokenizer: 'gpt2', pre: 'qwen2', ropeFreqs: false, addBos: false },
  { name: 'qwen3-bpe', arch: 'qwen3', tokenizer: 'gpt2', pre: 'qwen2', ropeFreqs: false, addBos: false },
  { name: 'phi3-spm', arch: 'phi3', tokenizer: 'llama', pre: 'default', ropeFreqs: false, addBos: true },
  { name: 'gemma2-spm', arch: 'gemma2', tokenizer: 'llama', pre: 'default', ropeFreqs: false, addBos: true },
];

describe.each(FIXTURES)('$name → GGUF → llama.cpp', ({ name, arch, tokenizer, pre, ropeFreqs, addBos }) => {
  const exp = expected(name);
  const files: Record<string, string> = {};
  const models: Record<string, LlamaModel> = {};
  let f32Logits: Float32Array[] = [];

  beforeAll(async () => {
    for (const type of ['F32', 'F16', 'Q8_0', 'Q4_0', 'Q4_K']) {
      files[type] = join(DIR, `${name}-${type}.gguf`);
      await ggufLayout.write(fixtureDir(name), files[type], { type });
      models[type] = await loadModel(files[type]);
    }
    f32Logits = await logitsAfterEach(models['F32']!, exp.promptIds);
  }, 120_000);
  afterAll(async () => {
    for (const m of Object.values(models)) await m.dispose();
  });

  it('writes the metadata llama.cpp reads', async () => {
    const { kvs, tensors } = await ggufHeader(files['Q8_0']!);
    expect(value(kvs.get('general.architecture'))).toBe(arch);
    expect(value(kvs.get('general.file_type'))).toBe(7);
    expect(value(kvs.get(`${arch}.block_count`))).toBe(2);
    expect(value(kvs.get(`${arch}.embedding_length`))).toBe(64);
    expect(value(kvs.get(`${arch}.attention.head_count_kv`))).toBe(arch === 'phi3' ? 4 : 2);
    expect(value(kvs.get('tokenizer.ggml.model'))).toBe(tokenizer);
    expect(value(kvs.get('tokenizer.ggml.pre'))).toBe(pre);
    expect(kvs.has('tokenizer.ggml.merges')).toBe(tokenizer === 'gpt2');
    expect(value(kvs.get('tokenizer.ggml.add_bos_token'))).toBe(addBos);
    const names = tensors.map((t) => t.name);
    expect(names).toContain(arch === 'phi3' ? 'blk.1.attn_qkv.weight' : 'blk.1.attn_q.weight');
    expect(names.includes('rope_freqs.weight')).toBe(ropeFreqs);
    const tokens = value(kvs.get('tokenizer.ggml.tokens')) as string[];
    expect(tokens).toHaveLength(exp.logits.length);
    if (addBos) expect(value(kvs.get('tokenizer.ggml.bos_token_id'))).toBe(exp.promptIds[0]);
    expect(value(kvs.get('tokenizer.chat_template'))).toMatch(/messages/);
    expect(value((await ggufHeader(files['F32']!)).kvs.get('general.file_type'))).toBe(0);
  });

  it('tokenizes a multilingual text to the reference tokenizer ids', () => {
    expect(models['Q8_0']!.tokenize(exp.text)).toEqual(exp.ids);
    expect(models['F32']!.tokenize(exp.prompt)).toEqual(exp.promptIds.slice(addBos ? 1 : 0));
  });

  it('F32 logits equal the reference forward pass', () => {
    const last = f32Logits[f32Logits.length - 1]!;
    expect(last).toHaveLength(exp.logits.length);
    // float32 rounding: within 1e-5 of the largest logit (Gemma 2's reach 30, its soft cap)
    const scale = Math.max(...exp.logits.map(Math.abs));
    expect(maxAbsDiff(last, exp.logits) / scale).toBeLessThan(1e-5);
  });

  it('F16 logits equal the reference forward pass to F16 activation rounding', async () => {
    const f16 = await logitsAfterEach(models['F16']!, exp.promptIds);
    const last = f16[f16.length - 1]!;
    const scale = Math.max(...exp.logits.map(Math.abs));
    expect(maxAbsDiff(last, exp.logits) / scale).toBeLessThan(2e-2);
    expect(argmax(last)).toBe(argmax(Float32Array.from(exp.logits)));
  });

  it.each(Object.keys(AGREEMENT))('%s picks the F32 next token', async (type) => {
    const quantized = await logitsAfterEach(models[type]!, exp.promptIds);
    const agree = quantized.filter((q, i) => argmax(q) === argmax(f32Logits[i]!)).length;
    const rate = agree / quantized.length;
    console.log(`${name} ${type}: top-1 agreement with F32 ${agree}/${quantized.length}`);
    expect(rate).toBeGreaterThanOrEqual(AGREEMENT[type]!);
  });

  it('the CLI converts the folder in one command (quantize DIR --layout gguf:type=Q8_0)', async () => {
    const out = join(DIR, `${name}-cli.gguf`);
    const r = quantd(['quantize', fixtureDir(name), '-o', out, '--layout', 'gguf:type=Q8_0']);
    expect(r.stderr).toMatch(/gguf: \d+ tensors/);
    expect(r.code).toBe(0);
    const model = await loadModel(out);
    try {
      const logits = await logitsAfterEach(model, exp.promptIds);
      expect(logits.map(argmax)).toEqual((await logitsAfterEach(models['Q8_0']!, exp.promptIds)).map(argmax));
    } finally {
      await model.dispose();
    }
  });
});
