/**
 * A small llama-shaped model and calibration batches for the GPTQ-from-statistics tests: two
 * projections whose inputs are correlated and outlier-heavy (the regime where GPTQ's error
 * feedback pays: a few input channels 20× the others, each token a mix of 8 latent factors plus
 * noise), one projection the batches do not reach (it stays round-to-nearest), an embedding that
 * passes through. Deterministic (an LCG), so every test and the expectations agree.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { quantdAsync } from '../cli/cli-helpers.js';
import { serializeSafetensors } from '../../src/format/safetensors.js';

export const Q_PROJ = 'model.layers.0.self_attn.q_proj';
export const DOWN_PROJ = 'model.layers.0.mlp.down_proj';
export const UP_PROJ = 'model.layers.0.mlp.up_proj';
/** [out, in] of each projection */
export const SHAPES: Record<string, readonly [number, number]> = {
  [Q_PROJ]: [64, 128],
  [DOWN_PROJ]: [32, 96],
  [UP_PROJ]: [96, 64],
};

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

/** Roughly normal values (sum of four uniforms, centred). */
function gauss(r: () => number): number {
  return (r() + r() + r() + r() - 2) * 1.7;
}

export function weight(m: string, seed: number): Float32Array {
  const [out, inF] = SHAPES[m]!;
  const r = rng(seed);
  return Float32Array.from({ length: out * inF }, () => gauss(r) * 0.05);
}

/** Tokens [n, in] of a layer's input: 8 latent factors, noise, and outlier channels ×20. */
export function activations(inF: number, n: number, layer: number, seed: number): Float32Array {
  const m = rng(layer);
  const mix = Float64Array.from({ length: 8 * inF }, () => gauss(m));
  const r = rng(seed);
  const x = new Float32Array(n * inF);
  for (let t = 0; t < n; t++) {
    const z = Array.from({ length: 8 }, () => gauss(r));
    for (let i = 0; i < inF; i++) {
      let v = 0.3 * gauss(r);
      for (let k = 0; k < 8; k++) v += z[k]! * mix[k * inF + i]!;
      x[t * inF + i] = i % 17 === 3 ? v * 20 : v;
    }
  }
  return x;
}

const bytes = (a: Float32Array): Uint8Array => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);

export function writeModel(path: string): void {
  const embed = Float32Array.from({ length: 16 * 64 }, (_, i) => Math.sin(i));
  const tensors = [
    { name: 'model.embed_tokens.weight', dtype: 'F32' as const, shape: [16, 64], data: bytes(embed) },
    ...[Q_PROJ, DOWN_PROJ, UP_PROJ].map((m, k) => ({
      name: `${m}.weight`,
      dtype: 'F32' as const,
      shape: [...SHAPES[m]!],
      data: bytes(weight(m, 11 + k)),
    })),
  ];
  writeFileSync(path, serializeSafetensors(tensors, null));
}

/** Batch b: the inputs of q_proj and down_proj, [2, 64, in] and [128, in]. */
export function batchTensors(b: number): { name: string; shape: number[]; x: Float32Array }[] {
  return [
    { name: `${Q_PROJ}.input`, shape: [2, 64, 128], x: activations(128, 128, 5, 100 + b) },
    { name: `${DOWN_PROJ}.input`, shape: [128, 96], x: activations(96, 128, 6, 200 + b) },
  ];
}

export function writeBatch(path: string, b: number): void {
  const tensors = batchTensors(b).map((t) => ({
    name: t.name,
    dtype: 'F32' as const,
    shape: t.shape,
    data: bytes(t.x),
  }));
  writeFileSync(path, serializeSafetensors(tensors, null));
}

export const BATCHES = 3;

export const RECIPE = {
  observers: [
    { match: '*.q_proj.input', observer: { kind: 'min_max' }, statistics: 'linear' },
    { match: '*_proj.input', statistics: 'linear' },
  ],
};

/**
 * A calibrated model's setup: ROOT/model (model.safetensors by `model`, a llama config.json),
 * `batches` batches in ROOT/batches by `batch`, and `quantd calibrate` over them with `recipe`
 * (ROOT/recipe.json), statistics to `stats`. Returns the calibrate run.
 */
export function calibrateModel(
  root: string,
  model: (path: string) => void,
  batch: (path: string, b: number) => void,
  batches: number,
  recipe: object,
  stats: string,
) {
  mkdirSync(join(root, 'model'));
  model(join(root, 'model', 'model.safetensors'));
  writeFileSync(join(root, 'model', 'config.json'), JSON.stringify({ model_type: 'llama' }));
  mkdirSync(join(root, 'batches'));
  for (let b = 0; b < batches; b++) batch(join(root, 'batches', `batch-${b}.safetensors`), b);
  writeFileSync(join(root, 'recipe.json'), JSON.stringify(recipe));
  return quantdAsync([
    'calibrate',
    join(root, 'batches'),
    '--observers',
    join(root, 'recipe.json'),
    '--statistics',
    stats,
    '-o',
    join(root, 'qparams.safetensors'),
  ]);
}
