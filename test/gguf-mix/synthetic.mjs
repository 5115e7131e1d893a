// Synthetic Hugging Face checkpoints shaped like Llama, Qwen2 and Mistral models, big enough for
// llama-quantize's rules to matter (rows of 256, 8–16 layers, grouped-query attention) and small
// enough to quantize in a test. Their weights are float16 bit patterns drawn from a 32-bit LCG, so
// the test (TypeScript) and the generator (generate.py, through this file) write the same bytes.
//
// Plain JavaScript so that generate.py can run it with node:
//     node test/gguf-mix/synthetic.mjs MODEL DIR
import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const FIXTURES = fileURLToPath(new URL('../gguf-hf/fixtures/', import.meta.url));

/** The models: the fixture whose tokenizer they borrow and the config.json fields that differ. */
export const MODELS = {
  // Llama: GQA 4 (attn_v promotions of Q2_K / IQ4_*), untied output, 8 layers
  llama: {
    tokenizer: 'llama-spm',
    files: ['tokenizer.model', 'tokenizer_config.json'],
    config: {
      architectures: ['LlamaForCausalLM'],
      model_type: 'llama',
      hidden_size: 256,
      intermediate_size: 512,
      num_hidden_layers: 8,
      num_attention_heads: 8,
      num_key_value_heads: 2,
      vocab_size: 416,
      max_position_embeddings: 256,
      rms_norm_eps: 1e-5,
      rope_theta: 10000.0,
      bos_token_id: 1,
      eos_token_id: 2,
      tie_word_embeddings: false,
      torch_dtype: 'float16',
    },
  },
  // Qwen2: GQA 2, q/k/v biases, tied embeddings (token_embd takes the output's rules), 12 layers
  qwen2: {
    tokenizer: 'qwen2-bpe',
    files: ['tokenizer.json', 'tokenizer_config.json'],
    config: {
      architectures: ['Qwen2ForCausalLM'],
      model_type: 'qwen2',
      hidden_size: 256,
      intermediate_size: 512,
      num_hidden_layers: 12,
      num_attention_heads: 8,
      num_key_value_heads: 4,
      vocab_size: 442,
      max_position_embeddings: 512,
      rms_norm_eps: 1e-6,
      rope_theta: 1000000.0,
      bos_token_id: 436,
      eos_token_id: 438,
      tie_word_embeddings: true,
      torch_dtype: 'float16',
    },
  },
  // Mistral (llama.cpp runs it as llama): 16 layers (the n/16 rules), GQA 4, and an FFN width of
  // 320 — a multiple of 32 but not of 256 — so that every K type's fallback shows on ffn_down
  mistral: {
    tokenizer: 'llama-spm',
    files: ['tokenizer.model', 'tokenizer_config.json'],
    config: {
      architectures: ['MistralForCausalLM'],
      model_type: 'mistral',
      hidden_size: 256,
      intermediate_size: 320,
      num_hidden_layers: 16,
      num_attention_heads: 8,
      num_key_value_heads: 2,
      vocab_size: 416,
      max_position_embeddings: 256,
      rms_norm_eps: 1e-5,
      rope_theta: 10000.0,
      bos_token_id: 1,
      eos_token_id: 2,
      tie_word_embeddings: false,
      torch_dtype: 'float16',
    },
  },
};

/** The checkpoint's tensors: [name, shape] in the order they are written. */
export function tensorShapes(model) {
  const c = MODELS[model].config;
  const h = c.hidden_size;
  const kv = (h / c.num_attention_heads) * c.num_key_value_heads;
  const bias = c.model_type === 'qwen2';
  const shapes = [['model.embed_tokens.weight', [c.vocab_size, h]]];
  for (let i = 0; i < c.num_hidden_layers; i++) {
    const p = `model.layers.${i}`;
    shapes.push(
      [`${p}.input_layernorm.weight`, [h]],
      [`${p}.self_attn.q_proj.weight`, [h, h]],
      [`${p}.self_attn.k_proj.weight`, [kv, h]],
      [`${p}.self_attn.v_proj.weight`, [kv, h]],
      ...(bias
        ? [
            [`${p}.self_attn.q_proj.bias`, [h]],
            [`${p}.self_attn.k_proj.bias`, [kv]],
            [`${p}.self_attn.v_proj.bias`, [kv]],
          ]
        : []),
      [`${p}.self_attn.o_proj.weight`, [h, h]],
      [`${p}.post_attention_layernorm.weight`, [h]],
      [`${p}.mlp.gate_proj.weight`, [c.intermediate_size, h]],
      [`${p}.mlp.up_proj.weight`, [c.intermediate_size, h]],
      [`${p}.mlp.down_proj.weight`, [h, c.intermediate_size]],
    );
  }
  shapes.push(['model.norm.weight', [h]]);
  if (!c.tie_word_embeddings) shapes.push(['lm_head.weight', [c.vocab_size, h]]);
  return shapes;
}

/**
 * float16 bits from a 32-bit LCG: random sign and mantissa, exponent 2^-10 … 2^-3 (mean |w| ≈ 0.05,
 * the scale of trained weights, so that the network is not chaotic; norms: 1 ± a
 * little, as trained norms are). Integer arithmetic only, so Python can reproduce it exactly.
 */
function fill(bytes, seed, norm) {
  let s = seed >>> 0;
  for (let i = 0; i < bytes.length; i += 2) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    const sign = norm ? 0 : (s >>> 31) << 15;
    const exponent = norm ? 15 : 5 + ((s >>> 12) & 7);
    const bits = sign | (exponent << 10) | ((s >>> 16) & 0x3ff);
    bytes[i] = bits & 0xff;
    bytes[i + 1] = bits >>> 8;
  }
}

/** Writes the model's folder (config.json, the tokenizer, model.safetensors) into `dir`. */
export function writeSynthetic(model, dir) {
  const m = MODELS[model];
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'config.json'), JSON.stringify(m.config, null, 2));
  for (const f of m.files) copyFileSync(join(FIXTURES, m.tokenizer, f), join(dir, f));
  const header = {};
  const blobs = [];
  let offset = 0;
  for (const [k, [name, shape]] of tensorShapes(model).entries()) {
    const bytes = new Uint8Array(2 * shape.reduce((a, b) => a * b, 1));
    fill(bytes, k + 1, shape.length === 1 && name.endsWith('norm.weight'));
    header[name] = { dtype: 'F16', shape, data_offsets: [offset, offset + bytes.length] };
    blobs.push(bytes);
    offset += bytes.length;
  }
  let text = JSON.stringify(header);
  text += ' '.repeat((8 - (text.length % 8)) % 8);
  const length = Buffer.alloc(8);
  length.writeBigUInt64LE(BigInt(text.length));
  writeFileSync(join(dir, 'model.safetensors'), Buffer.concat([length, Buffer.from(text), ...blobs]));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [model, dir] = process.argv.slice(2);
  if (!(model in MODELS) || !dir) {
    console.error(`usage: node synthetic.mjs ${Object.keys(MODELS).join('|')} DIR`);
    process.exit(2);
  }
  writeSynthetic(model, dir);
}
