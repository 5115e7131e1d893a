/**
 * The architectures the Hugging Face → GGUF conversion supports: which `architectures` class of
 * config.json maps to which llama.cpp architecture, the hyperparameters written as
 * `{arch}.*` metadata, the tensor names of llama.cpp's tensor map, which rows are permuted, and
 * the shape each tensor must have under config.json (a contradiction is an error before any
 * tensor is read). Anything else is refused by name, listing the supported ones.
 */
import { QuantdError } from '../../../errors/index.js';
import type { GgufKv } from '../../../format/gguf.js';
import { llamaGgufName } from '../gguf-names.js';
import { configNumber, configInt, hfInvalid, type JsonObject } from './folder.js';
import { f32, u32 } from './gguf-kv.js';
import type { GeneratedTensor, Hyperparameters } from './hyperparameters.js';
import { llama3RopeFreqs, ropeScalingMetadata } from './rope-scaling.js';

export interface Architecture {
  /** general.architecture. */
  readonly gguf: string;
  /** llama.cpp's name of a checkpoint tensor; null: dropped (buffers); undefined: unknown. */
  tensorName(hfName: string): string | null | undefined;
  /** The head count whose rows a tensor is permuted by (llama's rotary layout), if any. */
  permuteHeads(hfName: string, h: Hyperparameters): number | undefined;
  /** The `{arch}.*` metadata. */
  metadata(h: Hyperparameters, config: JsonObject, path: string): GgufKv[];
  /** Tensors the converter computes rather than copies (llama3's rope_freqs). */
  generated(h: Hyperparameters, config: JsonObject, path: string): GeneratedTensor[];
  /** The tensors every block must have (GGUF names without the blk.N. prefix). */
  readonly blockTensors: readonly string[];
  /** The shape (safetensors order) config.json implies for a tensor, by its GGUF name. */
  shapeOf(ggufName: string, h: Hyperparameters): readonly number[] | undefined;
  /** Whether a checkpoint tensor is stored plus one (Gemma's norms scale by 1 + w; llama.cpp by w). */
  plusOne?(hfName: string): boolean;
}

/** What a llama-like block holds (biases and q/k norms are optional). */
const LLAMA_BLOCK = [
  'attn_norm.weight',
  'attn_q.weight',
  'attn_k.weight',
  'attn_v.weight',
  'attn_output.weight',
  'ffn_norm.weight',
  'ffn_gate.weight',
  'ffn_up.weight',
  'ffn_down.weight',
];

/** The hyperparameters every llama-like architecture writes (the converter's common set). */
function commonMetadata(arch: string, h: Hyperparameters): GgufKv[] {
  return [
    u32(`${arch}.vocab_size`, h.vocab),
    u32(`${arch}.context_length`, h.context),
    u32(`${arch}.embedding_length`, h.hidden),
    u32(`${arch}.block_count`, h.layers),
    u32(`${arch}.feed_forward_length`, h.ffn),
    u32(`${arch}.attention.head_count`, h.heads),
    u32(`${arch}.attention.head_count_kv`, h.kvHeads),
    f32(`${arch}.rope.freq_base`, h.ropeTheta),
    f32(`${arch}.attention.layer_norm_rms_epsilon`, h.normEps),
    u32(`${arch}.rope.dimension_count`, h.headDim),
  ];
}

const LLAMA: Architecture = {
  gguf: 'llama',
  tensorName: llamaGgufName,
  permuteHeads: (name, h) =>
    /\.self_attn\.q_proj\.(weight|bias)$/.test(name)
      ? h.heads
      : /\.self_attn\.k_proj\.(weight|bias)$/.test(name)
        ? h.kvHeads
        : undefined,
  metadata: (h, config, path) => [
    ...commonMetadata('llama', h),
    ...headSizeMetadata('llama', h, config),
    ...ropeScalingMetadata('llama', config, path),
  ],
  generated: llama3RopeFreqs,
  blockTensors: LLAMA_BLOCK,
  shapeOf: llamaShape,
};

/** Key and value head size, written when config.json gives head_dim (it may differ from hidden / heads). */
function headSizeMetadata(arch: string, h: Hyperparameters, config: JsonObject): GgufKv[] {
  if (config['head_dim'] === undefined) return [];
  return [u32(`${arch}.attention.key_length`, h.headDim), u32(`${arch}.attention.value_length`, h.headDim)];
}

/** Qwen 3's per-head RMS norms of q and k. */
const QK_NORM: Readonly<Record<string, string>> = {
  'self_attn.q_norm.weight': 'attn_q_norm.weight',
  'self_attn.k_norm.weight': 'attn_k_norm.weight',
};

function qkNormName(name: string): string | undefined {
  const m = /^model\.layers\.(\d+)\.(.+)$/.exec(name);
  const mapped = m ? QK_NORM[m[2]!] : undefined;
  return mapped !== undefined ? `blk.${m![1]}.${mapped}` : undefined;
}

/**
 * Qwen 2 (q/k/v biases) and Qwen 3 (q/k norms): llama's tensors and hyperparameters, but
 * llama.cpp applies their rotary embedding in the "neox" layout, which is Hugging Face's
 * own, so no rows are permuted.
 */
function qwen(arch: string): Architecture {
  return {
    gguf: arch,
    tensorName: (name) => qkNormName(name) ?? llamaGgufName(name),
    permuteHeads: () => undefined,
    metadata: (h, config, path) => [
      ...commonMetadata(arch, h),
      ...headSizeMetadata(arch, h, config),
      ...ropeScalingMetadata(arch, config, path),
    ],
    generated: () => [],
    blockTensors: LLAMA_BLOCK,
    shapeOf: llamaShape,
  };
}

const PHI3_LAYER: Readonly<Record<string, string>> = {
  'self_attn.qkv_proj.weight': 'attn_qkv.weight',
  'mlp.gate_up_proj.weight': 'ffn_up.weight',
};

/**
 * Phi-3: llama's network with q/k/v fused into one projection and gate/up into another (kept
 * fused: llama.cpp splits them), rotary embedding in the neox layout (no permutation), and
 * its own context keys. Its long-context variants (rope_scaling longrope) are refused.
 */
const PHI3: Architecture = {
  gguf: 'phi3',
  tensorName: (name) => {
    const m = /^model\.layers\.(\d+)\.(.+)$/.exec(name);
    const fused = m ? PHI3_LAYER[m[2]!] : undefined;
    return fused !== undefined ? `blk.${m![1]}.${fused}` : llamaGgufName(name);
  },
  permuteHeads: () => undefined,
  metadata: (h, config, path) => {
    const kvs = [
      ...commonMetadata('phi3', h),
      u32(
        'phi3.rope.scaling.original_context_length',
        configInt(config, 'original_max_position_embeddings', path, h.context)!,
      ),
      ...ropeScalingMetadata('phi3', config, path),
    ];
    const window = configInt(config, 'sliding_window', path);
    if (window !== undefined) kvs.push(u32('phi3.attention.sliding_window', window));
    return kvs;
  },
  generated: () => [],
  blockTensors: [
    'attn_norm.weight',
    'attn_qkv.weight',
    'attn_output.weight',
    'ffn_norm.weight',
    'ffn_up.weight',
    'ffn_down.weight',
  ],
  shapeOf: (name, h) => {
    const base = name.replace(/^blk\.\d+\./, '');
    if (base === 'attn_qkv.weight') return [(h.heads + 2 * h.kvHeads) * h.headDim, h.hidden];
    if (base === 'ffn_up.weight') return [2 * h.ffn, h.hidden];
    return llamaShape(name, h);
  },
};

const GEMMA2_LAYER: Readonly<Record<string, string>> = {
  'input_layernorm.weight': 'attn_norm.weight',
  'post_attention_layernorm.weight': 'post_attention_norm.weight',
  'pre_feedforward_layernorm.weight': 'ffn_norm.weight',
  'post_feedforward_layernorm.weight': 'post_ffw_norm.weight',
};

function numberOr(config: JsonObject, key: string, path: string, fallback: number): number {
  return configNumber(config, key, path) ?? fallback;
}

/**
 * Gemma 2: norms around both attention and MLP, soft-capped attention and output logits,
 * sliding-window attention on alternate layers, tied embeddings, neox rotary layout. Its
 * RMS norms scale by (1 + w), llama.cpp's by w: the converter stores w + 1. llama.cpp scales
 * queries by 1/sqrt(head_dim) (1/sqrt(hidden/heads) for the 27B), so a config whose
 * query_pre_attn_scalar says otherwise is refused.
 */
const GEMMA2: Architecture = {
  gguf: 'gemma2',
  tensorName: (name) => {
    const m = /^model\.layers\.(\d+)\.(.+)$/.exec(name);
    const mapped = m ? GEMMA2_LAYER[m[2]!] : undefined;
    return mapped !== undefined ? `blk.${m![1]}.${mapped}` : llamaGgufName(name);
  },
  permuteHeads: () => undefined,
  metadata: (h, config, path) => {
    const scalar = configNumber(config, 'query_pre_attn_scalar', path);
    const llamaCppScalar = h.layers === 46 ? h.hidden / h.heads : h.headDim;
    if (scalar !== undefined && scalar !== llamaCppScalar) {
      throw new QuantdError('FEATURE_UNSUPPORTED', {
        detail: `${path}: query_pre_attn_scalar ${scalar}: llama.cpp scales Gemma 2 queries by 1/sqrt(${llamaCppScalar})`,
      });
    }
    return [
      ...commonMetadata('gemma2', h),
      u32('gemma2.attention.key_length', h.headDim),
      u32('gemma2.attention.value_length', h.headDim),
      f32('gemma2.attn_logit_softcapping', numberOr(config, 'attn_logit_softcapping', path, 50)),
      f32('gemma2.final_logit_softcapping', numberOr(config, 'final_logit_softcapping', path, 30)),
      u32('gemma2.attention.sliding_window', configInt(config, 'sliding_window', path, 4096)!),
      ...ropeScalingMetadata('gemma2', config, path),
    ];
  },
  generated: () => [],
  blockTensors: [
    'attn_norm.weight',
    'attn_q.weight',
    'attn_k.weight',
    'attn_v.weight',
    'attn_output.weight',
    'post_attention_norm.weight',
    'ffn_norm.weight',
    'ffn_gate.weight',
    'ffn_up.weight',
    'ffn_down.weight',
    'post_ffw_norm.weight',
  ],
  shapeOf: (name, h) =>
    /\.(post_attention_norm|post_ffw_norm)\.weight$/.test(name) ? [h.hidden] : llamaShape(name, h),
  plusOne: (name) => name.endsWith('norm.weight'),
};

/** config.json `architectures` class → the converter's architecture. */
const BY_CLASS: Readonly<Record<string, Architecture>> = {
  LlamaForCausalLM: LLAMA,
  MistralForCausalLM: LLAMA, // llama.cpp runs Mistral as llama (convert_hf_to_gguf.py does too)
  Qwen2ForCausalLM: qwen('qwen2'),
  Qwen3ForCausalLM: qwen('qwen3'),
  Phi3ForCausalLM: PHI3,
  Gemma2ForCausalLM: GEMMA2,
};

export const SUPPORTED_CLASSES = Object.keys(BY_CLASS);

/** The architecture of config.json, or FEATURE_UNSUPPORTED naming it and the supported ones. */
export function architectureOf(config: JsonObject, path: string): Architecture {
  const classes = config['architectures'];
  const name = Array.isArray(classes) && typeof classes[0] === 'string' ? classes[0] : undefined;
  if (name === undefined) {
    throw hfInvalid(path, 'has no "architectures" list naming the model class (e.g. LlamaForCausalLM)');
  }
  const arch = BY_CLASS[name];
  if (arch === undefined) {
    throw new QuantdError('FEATURE_UNSUPPORTED', {
      detail: `${path}: architecture ${name} cannot be converted to GGUF; supported: ${SUPPORTED_CLASSES.join(', ')}`,
    });
  }
  return arch;
}

/** The shape (safetensors order) llama.cpp expects for a llama-like tensor, by its GGUF name. */
function llamaShape(ggufName: string, h: Hyperparameters): readonly number[] | undefined {
  const q = h.heads * h.headDim;
  const kv = h.kvHeads * h.headDim;
  const base = ggufName.replace(/^blk\.\d+\./, '');
  const shapes: Readonly<Record<string, readonly number[]>> = {
    'token_embd.weight': [h.vocab, h.hidden],
    'output.weight': [h.vocab, h.hidden],
    'output_norm.weight': [h.hidden],
    'attn_norm.weight': [h.hidden],
    'ffn_norm.weight': [h.hidden],
    'attn_q.weight': [q, h.hidden],
    'attn_k.weight': [kv, h.hidden],
    'attn_v.weight': [kv, h.hidden],
    'attn_output.weight': [h.hidden, q],
    'attn_q_norm.weight': [h.headDim],
    'attn_k_norm.weight': [h.headDim],
    'attn_q.bias': [q],
    'attn_k.bias': [kv],
    'attn_v.bias': [kv],
    'ffn_gate.weight': [h.ffn, h.hidden],
    'ffn_up.weight': [h.ffn, h.hidden],
    'ffn_down.weight': [h.hidden, h.ffn],
  };
  return shapes[base];
}
