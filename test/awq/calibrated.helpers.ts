/**
 * A small two-layer llama-shaped model and calibration batches for the AWQ-from-statistics tests.
 * Layer 0 has as many key/value heads as query heads (so v_proj's rows can take o_proj's scales),
 * layer 1 has grouped-query attention (k/v of 32 rows: o_proj is only clipped); the batches hold
 * one input per group of layers that share it (q_proj's for q/k/v, gate_proj's for gate/up), and
 * none for layer 1's down_proj (it stays round-to-nearest, and up_proj's rows are not divided).
 * Inputs are correlated and outlier-heavy (../gptq/calibrated.helpers.ts's generator).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { serializeSafetensors } from '../../src/format/safetensors.js';
import { activations } from '../gptq/calibrated.helpers.js';

const L0 = 'model.layers.0';
const L1 = 'model.layers.1';

/** [out, in] of each projection */
export const SHAPES: Record<string, readonly [number, number]> = {};
for (const [l, kv] of [
  [L0, 64],
  [L1, 32],
] as const) {
  SHAPES[`${l}.self_attn.q_proj`] = [64, 64];
  SHAPES[`${l}.self_attn.k_proj`] = [kv, 64];
  SHAPES[`${l}.self_attn.v_proj`] = [kv, 64];
  SHAPES[`${l}.self_attn.o_proj`] = [64, 64];
  SHAPES[`${l}.mlp.gate_proj`] = [128, 64];
  SHAPES[`${l}.mlp.up_proj`] = [128, 64];
  SHAPES[`${l}.mlp.down_proj`] = [64, 128];
}
export const NORMS = [L0, L1].flatMap((l) => [`${l}.input_layernorm`, `${l}.post_attention_layernorm`]);

/** The activation whose statistics each projection's input has (its group's, or its own). */
export const INPUT_OF: Record<string, string | undefined> = {};
for (const l of [L0, L1]) {
  for (const p of ['q', 'k', 'v']) INPUT_OF[`${l}.self_attn.${p}_proj`] = `${l}.self_attn.q_proj.input`;
  INPUT_OF[`${l}.self_attn.o_proj`] = `${l}.self_attn.o_proj.input`;
  for (const p of ['gate', 'up']) INPUT_OF[`${l}.mlp.${p}_proj`] = `${l}.mlp.gate_proj.input`;
}
INPUT_OF[`${L0}.mlp.down_proj`] = `${L0}.mlp.down_proj.input`;

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

const gauss = (r: () => number): number => (r() + r() + r() + r() - 2) * 1.7;

export function weight(m: string): Float32Array {
  const [out, inF] = SHAPES[m]!;
  const r = rng(Object.keys(SHAPES).indexOf(m) + 31);
  return Float32Array.from({ length: out * inF }, () => gauss(r) * 0.05);
}

export function norm(n: string): Float32Array {
  const r = rng(NORMS.indexOf(n) + 7);
  return Float32Array.from({ length: 64 }, () => 1 + 0.1 * gauss(r));
}

const TOKENS = 128;
export const BATCHES = 3;
const ACTIVATIONS = [...new Set(Object.values(INPUT_OF))] as string[];

/** The tokens of an activation in batch b, [TOKENS, in]. */
export function batchInput(name: string, b: number): Float32Array {
  const k = ACTIVATIONS.indexOf(name);
  const inF = name.includes('down_proj') ? 128 : 64;
  return activations(inF, TOKENS, 40 + k, 300 + 10 * k + b);
}

/** All batches of an activation, [BATCHES · TOKENS, in]. */
export function allInputs(name: string): Float32Array {
  const parts = Array.from({ length: BATCHES }, (_, b) => batchInput(name, b));
  const x = new Float32Array(parts.reduce((n, p) => n + p.length, 0));
  parts.reduce((at, p) => (x.set(p, at), at + p.length), 0);
  return x;
}

const bytes = (a: Float32Array): Uint8Array => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);

function modelTensors() {
  const tensors = [
    {
      name: 'model.embed_tokens.weight',
      shape: [16, 64],
      data: Float32Array.from({ length: 1024 }, Math.sin),
    },
    ...NORMS.map((n) => ({ name: `${n}.weight`, shape: [64], data: norm(n) })),
    ...Object.keys(SHAPES).map((m) => ({ name: `${m}.weight`, shape: [...SHAPES[m]!], data: weight(m) })),
    { name: 'model.norm.weight', shape: [64], data: new Float32Array(64).fill(1) },
  ];
  return tensors.map((t) => ({ ...t, dtype: 'F32' as const, data: bytes(t.data) }));
}

export function writeModel(path: string): void {
  writeFileSync(path, serializeSafetensors(modelTensors(), null));
}

/**
 * The same model in two shards with an index, split so that groups span both: layer 0's norms
 * and up_proj in the first, its q/k/v and down_proj (and all of layer 1) in the second.
 */
export function writeShardedModel(dir: string): void {
  const second = /self_attn\.[qkv]_proj|mlp\.down_proj|layers\.1\./;
  const shards = ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors'];
  const weightMap: Record<string, string> = {};
  shards.forEach((file, k) => {
    const tensors = modelTensors().filter((t) => second.test(t.name) === (k === 1));
    for (const t of tensors) weightMap[t.name] = file;
    writeFileSync(join(dir, file), serializeSafetensors(tensors, null));
  });
  const index = { metadata: { total_size: 0 }, weight_map: weightMap };
  writeFileSync(join(dir, 'model.safetensors.index.json'), JSON.stringify(index));
}

export function writeBatch(path: string, b: number): void {
  const tensors = ACTIVATIONS.map((name) => {
    const x = batchInput(name, b);
    return { name, dtype: 'F32' as const, shape: [TOKENS, x.length / TOKENS], data: bytes(x) };
  });
  writeFileSync(path, serializeSafetensors(tensors, null));
}

export const RECIPE = { observers: [{ match: '*.input', statistics: 'linear' }] };
