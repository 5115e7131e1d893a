/**
 * `quantd eval` end to end on a fixture model: the float decoder in ONNX Runtime and an F32 GGUF
 * in llama.cpp give the same perplexity (two engines, one network), a quantized GGUF and a
 * quantized model folder (GPTQ or compressed-tensors, dequantized for ONNX Runtime) move it and give a KL divergence, and
 * bad input is refused before any work. The quality claims themselves are tested on the trained
 * model (test/trained-llama).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { quantd, tempDir } from '../cli/run-cli.js';
import { HAVE_LLAMA_CPP, HAVE_ONNXRUNTIME } from '../setup/engines.js';

const MODEL = new URL('../gguf-hf/fixtures/llama-spm', import.meta.url).pathname;
const { dir, cleanup } = tempDir();
afterAll(cleanup);

// a few windows of 32 tokens of English (the fixture's tokenizer knows few pieces: many bytes)
const TEXT = join(dir, 'text.txt');
writeFileSync(
  TEXT,
  'The quick brown fox jumps over the lazy dog. Hello world, hello again, the world says hello. '.repeat(6),
);

interface Report {
  summary: {
    windows: number;
    reference: { perplexity: number };
    quantized?: {
      perplexity: number;
      perplexityRatio: number;
      kld: { mean: number; max: number };
      top1Agreement: number;
    };
  };
  layers: { layer: number; relative_rmse: number }[] | null;
}

function evaluate(args: readonly string[]): Report {
  const r = quantd([
    'eval',
    ...args,
    '--reference',
    MODEL,
    '--text',
    TEXT,
    '--seq-len',
    '32',
    '--json',
    '-q',
  ]);
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as Report;
}

describe.skipIf(!HAVE_ONNXRUNTIME || !HAVE_LLAMA_CPP)('quantd eval', () => {
  it('the reference alone: its perplexity', () => {
    const r = evaluate(['--windows', '3']);
    expect(r.summary.windows).toBe(3);
    expect(r.summary.reference.perplexity).toBeGreaterThan(1);
    expect(r.summary.quantized).toBeUndefined();
  });

  it('an F32 GGUF in llama.cpp equals the float decoder in ONNX Runtime', () => {
    const gguf = join(dir, 'f32.gguf');
    expect(quantd(['quantize', MODEL, '-o', gguf, '--layout', 'gguf:type=F32', '-q']).code).toBe(0);
    const r = evaluate([gguf, '--windows', '4']);
    const q = r.summary.quantized!;
    expect(Math.abs(q.perplexityRatio - 1)).toBeLessThan(1e-4);
    expect(q.kld.max).toBeLessThan(1e-5);
    expect(q.top1Agreement).toBe(1);
  });

  it('a Q4_0 GGUF and a GPTQ folder move the distribution; the folder gives layer errors too', () => {
    const gguf = join(dir, 'q4.gguf');
    expect(quantd(['quantize', MODEL, '-o', gguf, '--layout', 'gguf:type=Q4_0', '-q']).code).toBe(0);
    const g = evaluate([gguf, '--windows', '3']).summary.quantized!;
    expect(g.kld.mean).toBeGreaterThan(1e-3);
    const folder = join(dir, 'gptq');
    const made = quantd(['quantize', MODEL, '-o', folder, '--layout', 'gptq:bits=4,group_size=32', '-q']);
    expect(made.code, made.stderr).toBe(0);
    const r = evaluate([folder, '--windows', '3', '--layer-windows', '1']);
    expect(r.summary.quantized!.kld.mean).toBeGreaterThan(1e-3);
    expect(r.layers!.map((l) => l.layer)).toEqual([0, 1]);
    for (const l of r.layers!) expect(l.relative_rmse).toBeGreaterThan(0);
  });

  it("a compressed-tensors folder (vLLM's format) is read back and evaluated like any quantized folder", () => {
    const folder = join(dir, 'ct');
    const made = quantd([
      'quantize',
      MODEL,
      '-o',
      folder,
      '--layout',
      'compressed-tensors:group_size=32',
      '-q',
    ]);
    expect(made.code, made.stderr).toBe(0);
    const w4 = evaluate([folder, '--windows', '3']).summary.quantized!;
    expect(w4.kld.mean).toBeGreaterThan(1e-4);
    const fp8 = join(dir, 'ct-fp8');
    const made8 = quantd([
      'quantize',
      MODEL,
      '-o',
      fp8,
      '--layout',
      'compressed-tensors:scheme=FP8_DYNAMIC',
      '-q',
    ]);
    expect(made8.code, made8.stderr).toBe(0);
    // float8 weights with a scale per row move the distribution less than int4 in groups of 32
    expect(evaluate([fp8, '--windows', '3']).summary.quantized!.kld.mean).toBeLessThan(w4.kld.mean);
  });

  it('refuses a text shorter than one window, a window past the context, and a file it cannot run', () => {
    const short = join(dir, 'short.txt');
    writeFileSync(short, 'Hi.');
    const a = quantd(['eval', '--reference', MODEL, '--text', short, '--seq-len', '32']);
    expect(a.code).toBe(2);
    expect(a.stderr).toMatch(/^error TEXT_INVALID: .*fewer than one window of 32/);
    const b = quantd(['eval', '--reference', MODEL, '--text', TEXT, '--seq-len', '100000']);
    expect(b.stderr).toMatch(/^error OPTION_INVALID: option --seq-len is longer than the model's context/);
    const c = quantd(['eval', TEXT, '--reference', MODEL, '--text', TEXT, '--seq-len', '32']);
    expect(c.stderr).toMatch(/^error USAGE: .*takes a model folder, a \.gguf file or an \.onnx decoder/);
    const d = quantd(['eval', '--text', TEXT]);
    expect(d.stderr).toMatch(/^error USAGE: quantd eval needs --reference/);
  });
});
