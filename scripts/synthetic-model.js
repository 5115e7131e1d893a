#!/usr/bin/env node
/**
 * A synthetic llama-like model in safetensors: the names, shapes and dtype mix of a real
 * checkpoint (bf16 / f16 weights, f32 norms, an I64 buffer), deterministic pseudo-random
 * weights (~N(0, 0.02) with rare outliers), written tensor by tensor so the file may be far
 * larger than memory. Used by the model tests and `npm run bench:model`; try it:
 *
 *   node scripts/synthetic-model.js out.safetensors [--layers 22] [--hidden 128] [--shards 3]
 *
 * With --shards N > 1, OUT is a directory: model-0000k-of-0000N.safetensors plus
 * model.safetensors.index.json, layers split evenly.
 */
import { closeSync, mkdirSync, openSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const SIZE = { F32: 4, F16: 2, BF16: 2, I64: 8 };

/** The tensors of the model, in checkpoint order: [name, dtype, shape]. */
export function llamaTensors({
  layers = 22,
  hidden = 128,
  intermediate = 2 * hidden,
  vocab = 256,
  kvHeads = 2,
  heads = 4,
} = {}) {
  const kv = (hidden / heads) * kvHeads;
  const out = [['model.embed_tokens.weight', 'BF16', [vocab, hidden]]];
  for (let i = 0; i < layers; i++) {
    const p = `model.layers.${i}`;
    const w = i % 4 === 3 ? 'F16' : 'BF16'; // a dtype mix, as merged checkpoints have
    out.push(
      [`${p}.input_layernorm.weight`, 'F32', [hidden]],
      [`${p}.self_attn.q_proj.weight`, w, [hidden, hidden]],
      [`${p}.self_attn.k_proj.weight`, w, [kv, hidden]],
      [`${p}.self_attn.v_proj.weight`, w, [kv, hidden]],
      [`${p}.self_attn.o_proj.weight`, w, [hidden, hidden]],
      [`${p}.mlp.gate_proj.weight`, w, [intermediate, hidden]],
      [`${p}.mlp.up_proj.weight`, w, [intermediate, hidden]],
      [`${p}.mlp.down_proj.weight`, w, [hidden, intermediate]],
      [`${p}.post_attention_layernorm.weight`, 'F32', [hidden]],
    );
  }
  out.push(
    ['model.norm.weight', 'F32', [hidden]],
    ['model.rotary_emb.position_ids', 'I64', [1, 64]],
    ['lm_head.weight', 'BF16', [vocab, hidden]],
  );
  return out;
}

const numel = (shape) => shape.reduce((a, b) => a * b, 1);

/** mulberry32: a small deterministic PRNG, seeded per tensor name. */
function rng(seedText) {
  let seed = 2166136261;
  for (const c of seedText) seed = Math.imul(seed ^ c.charCodeAt(0), 16777619);
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

function toBf16(x) {
  f32[0] = x;
  const b = u32[0];
  return (b + 0x7fff + ((b >>> 16) & 1)) >>> 16;
}

function toF16(x) {
  // finite, |x| < 65504: round to nearest even through the float32 bits
  f32[0] = x;
  const b = u32[0];
  const sign = (b >>> 16) & 0x8000;
  const exp = ((b >>> 23) & 0xff) - 127 + 15;
  let mant = b & 0x7fffff;
  if (exp <= 0) {
    if (exp < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - exp;
    const half = 1 << (shift - 1);
    let r = mant >>> shift;
    const rest = mant & ((1 << shift) - 1);
    if (rest > half || (rest === half && r & 1)) r++;
    return sign | r;
  }
  let r = (exp << 10) | (mant >>> 13);
  const rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && r & 1)) r++;
  return sign | r;
}

/** The bytes of one tensor. */
export function tensorBytes(name, dtype, shape) {
  const n = numel(shape);
  const out = new Uint8Array(n * SIZE[dtype]);
  const view = new DataView(out.buffer);
  const next = rng(name);
  const norm = name.endsWith('layernorm.weight') || name === 'model.norm.weight';
  for (let i = 0; i < n; i++) {
    // Irwin–Hall approximation of a normal; 1 in 4096 values an outlier 8x wider
    const z = next() + next() + next() + next() - 2;
    const x = norm ? 1 + 0.1 * z : 0.02 * z * (next() < 1 / 4096 ? 8 : 1) * Math.SQRT2 * 1.22;
    if (dtype === 'F32') view.setFloat32(i * 4, x, true);
    else if (dtype === 'BF16') view.setUint16(i * 2, toBf16(x), true);
    else if (dtype === 'F16') view.setUint16(i * 2, toF16(x), true);
    else view.setBigInt64(i * 8, BigInt(i % 64), true);
  }
  return out;
}

function header(tensors) {
  const entries = {};
  let offset = 0;
  for (const [name, dtype, shape] of tensors) {
    const bytes = numel(shape) * SIZE[dtype];
    entries[name] = { dtype, shape, data_offsets: [offset, offset + bytes] };
    offset += bytes;
  }
  let json = JSON.stringify({ __metadata__: { format: 'pt' }, ...entries });
  json += ' '.repeat((8 - (json.length % 8)) % 8);
  const prefix = Buffer.alloc(8);
  prefix.writeBigUInt64LE(BigInt(json.length));
  return { bytes: Buffer.concat([prefix, Buffer.from(json)]), dataBytes: offset };
}

/** Writes `tensors` to `path`, one tensor in memory at a time. Returns the data bytes. */
export function writeModelFile(path, tensors) {
  const { bytes, dataBytes } = header(tensors);
  const fd = openSync(path, 'w');
  try {
    writeSync(fd, bytes);
    for (const [name, dtype, shape] of tensors) writeSync(fd, tensorBytes(name, dtype, shape));
  } finally {
    closeSync(fd);
  }
  return dataBytes;
}

/** Writes a sharded model into `dir`: shards splitting the tensor list evenly, and the index. */
export function writeShardedModel(dir, tensors, shards) {
  mkdirSync(dir, { recursive: true });
  const weightMap = {};
  let total = 0;
  const per = Math.ceil(tensors.length / shards);
  for (let s = 0; s < shards; s++) {
    const file = `model-${String(s + 1).padStart(5, '0')}-of-${String(shards).padStart(5, '0')}.safetensors`;
    const part = tensors.slice(s * per, (s + 1) * per);
    total += writeModelFile(join(dir, file), part);
    for (const [name] of part) weightMap[name] = file;
  }
  const index = { metadata: { total_size: total }, weight_map: weightMap };
  writeFileSync(join(dir, 'model.safetensors.index.json'), JSON.stringify(index, null, 2));
  return total;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const [out, ...rest] = process.argv.slice(2);
  if (!out) {
    console.error('usage: node scripts/synthetic-model.js OUT [--layers N] [--hidden N] [--shards N]');
    process.exit(2);
  }
  const opt = (flag, fallback) => {
    const i = rest.indexOf(flag);
    return i >= 0 ? Number(rest[i + 1]) : fallback;
  };
  const tensors = llamaTensors({ layers: opt('--layers', 22), hidden: opt('--hidden', 128) });
  const shards = opt('--shards', 1);
  const bytes = shards > 1 ? writeShardedModel(out, tensors, shards) : writeModelFile(out, tensors);
  console.log(`${out}: ${tensors.length} tensors, ${bytes} bytes of data`);
}
