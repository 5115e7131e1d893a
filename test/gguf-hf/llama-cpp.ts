/**
 * A real llama.cpp for the GGUF conversion tests: node-llama-cpp's prebuilt CPU binaries (no
 * build, no download, no GPU). Loads a GGUF, tokenizes, and returns next-token logits.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { GgufFileReader } from '../../src/format/gguf-file.js';
import {
  LlamaLogLevel,
  getLlama,
  type ControlledEvaluateInputItem,
  type Llama,
  type LlamaModel,
  type Token,
} from 'node-llama-cpp';

export const FIXTURES = new URL('./fixtures/', import.meta.url).pathname;

/** The parsed header (key/values, tensor infos) of a GGUF file quantd wrote. */
export async function ggufHeader(path: string): Promise<GgufFileReader['header']> {
  const reader = await GgufFileReader.open(path);
  try {
    return reader.header;
  } finally {
    await reader.close();
  }
}

/** What test/gguf-hf/generate.py computed with the reference tokenizer and forward pass. */
export interface Expected {
  readonly text: string;
  readonly ids: readonly number[];
  readonly prompt: string;
  readonly promptIds: readonly number[];
  readonly logits: readonly number[];
}

export const fixtureDir = (name: string): string => join(FIXTURES, name);

export function expected(name: string): Expected {
  return JSON.parse(readFileSync(join(FIXTURES, `${name}.expected.json`), 'utf8')) as Expected;
}

let llama: Promise<Llama> | undefined;

/** One llama.cpp per test file, CPU only, quiet. */
export function llamaCpp(): Promise<Llama> {
  llama ??= getLlama({ gpu: false, build: 'never', progressLogs: false, logLevel: LlamaLogLevel.error });
  return llama;
}

export async function loadModel(path: string): Promise<LlamaModel> {
  return (await llamaCpp()).loadModel({ modelPath: path, gpuLayers: 0 });
}

/**
 * The logits after each token of `ids` (row i predicts token i + 1), evaluated in one sequence.
 * Float32 KV cache and no flash attention: llama.cpp then computes in float32 throughout, so
 * an F32 model matches the float32 reference to rounding.
 */
export async function logitsAfterEach(model: LlamaModel, ids: readonly number[]): Promise<Float32Array[]> {
  const context = await model.createContext({
    contextSize: 64,
    threads: 1,
    flashAttention: false,
    experimentalKvCacheKeyType: 'F32',
    experimentalKvCacheValueType: 'F32',
  });
  try {
    const out = await context
      .getSequence()
      .controlledEvaluate(
        ids.map((t): ControlledEvaluateInputItem => [t as Token, { generateNext: { logits: true } }]),
      );
    return out.map((o, i) => {
      const logits = o?.next?.logits;
      if (!logits) throw new Error(`no logits after token ${i}`);
      const row = new Float32Array(logits.size);
      for (const [token, value] of logits) row[token] = value;
      return row;
    });
  } finally {
    await context.dispose();
  }
}

export function argmax(x: Float32Array): number {
  let best = 0;
  for (let i = 1; i < x.length; i++) if (x[i]! > x[best]!) best = i;
  return best;
}

export function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i]! - b[i]!));
  return d;
}
