/**
 * What a causal language model's forward pass is, read from its Hugging Face config.json: the
 * dimensions and, for each architecture quantd runs, the few ways it departs from Llama (biases,
 * per-head q/k norms, fused projections, Gemma 2's norms, soft-capping and sliding windows).
 * The ONNX graph builder (./graph.ts) turns this into nodes; nothing here reads tensors.
 */
import { QuantdError } from '../../errors/index.js';
import { architectureOf } from '../layouts/gguf-hf/architectures.js';
import { configInt, configNumber, type JsonObject } from '../layouts/gguf-hf/folder.js';
import { hyperparameters, type Hyperparameters } from '../layouts/gguf-hf/hyperparameters.js';
import { llama3RopeFreqs } from '../layouts/gguf-hf/rope-scaling.js';

export type DecoderArch = 'llama' | 'mistral' | 'qwen2' | 'qwen3' | 'phi3' | 'gemma2';

const ARCH_OF_CLASS: Readonly<Record<string, DecoderArch>> = {
  LlamaForCausalLM: 'llama',
  MistralForCausalLM: 'mistral',
  Qwen2ForCausalLM: 'qwen2',
  Qwen3ForCausalLM: 'qwen3',
  Phi3ForCausalLM: 'phi3',
  Gemma2ForCausalLM: 'gemma2',
};

export interface DecoderSpec {
  readonly arch: DecoderArch;
  /** The config.json `architectures` class. */
  readonly className: string;
  readonly h: Hyperparameters;
  /** Rotary inverse frequencies (headDim / 2 of them), rope scaling applied, in float64. */
  readonly invFreq: Float64Array;
  /** Phi-3: q/k/v in one qkv_proj, gate/up in one gate_up_proj. */
  readonly fused: boolean;
  /** Qwen 3: RMS norms of each head's q and k before the rotation. */
  readonly qkNorm: boolean;
  /** Gemma 2: embeddings scaled by sqrt(hidden), (1 + w) norms, norms after attention and MLP. */
  readonly gemma: boolean;
  readonly activation: 'silu' | 'gelu_tanh';
  /** Attention scores' scale (1/sqrt(head_dim), Gemma 2: query_pre_attn_scalar^-0.5). */
  readonly attentionScale: number;
  /** Gemma 2's tanh soft-capping of attention scores and of the final logits (0: none). */
  readonly attentionSoftcap: number;
  readonly finalSoftcap: number;
  /** The sliding window of each layer (tokens attended, the current one included), or null. */
  readonly windows: readonly (number | null)[];
}

function unsupported(detail: string): QuantdError {
  return new QuantdError('FEATURE_UNSUPPORTED', { detail });
}

/** The rotary frequencies with config.json's rope_scaling applied (llama3, linear; others refused). */
function inverseFrequencies(h: Hyperparameters, config: JsonObject, path: string): Float64Array {
  const inv = new Float64Array(h.headDim / 2);
  for (let i = 0; i < inv.length; i++) inv[i] = 1 / h.ropeTheta ** ((2 * i) / h.headDim);
  const scaling = config['rope_scaling'] as JsonObject | null | undefined;
  const type = scaling ? (scaling['rope_type'] ?? scaling['type']) : undefined;
  if (type === undefined || type === 'default') return inv;
  if (type === 'llama3') {
    const divisors = llama3RopeFreqs(h, config, path)[0]!.data;
    return inv.map((f, i) => f / divisors[i]!);
  }
  if (type === 'linear') {
    const factor = configNumber(scaling!, 'factor', path);
    if (factor === undefined || factor <= 0) throw unsupported(`${path}: rope_scaling linear needs a factor`);
    return inv.map((f) => f / factor);
  }
  throw unsupported(
    `${path}: rope_scaling type ${JSON.stringify(type)} is not supported for running the model (supported: llama3, linear)`,
  );
}

/** The decoder config.json describes; FEATURE_UNSUPPORTED names what quantd cannot run. */
export function decoderSpec(config: JsonObject, path: string): DecoderSpec {
  architectureOf(config, path); // refuses unknown classes, naming the supported ones
  const className = (config['architectures'] as string[])[0]!;
  const arch = ARCH_OF_CLASS[className]!;
  const h = hyperparameters(config, path);
  if (h.headDim % 2 !== 0) throw unsupported(`${path}: head_dim ${h.headDim} is odd`);
  if (h.kvHeads === 0 || h.heads % h.kvHeads !== 0) {
    throw unsupported(
      `${path}: num_attention_heads ${h.heads} is not a multiple of num_key_value_heads ${h.kvHeads}`,
    );
  }
  const gemma = arch === 'gemma2';
  const window = configInt(config, 'sliding_window', path);
  const partial = configNumber(config, 'partial_rotary_factor', path);
  if (partial !== undefined && partial !== 1) {
    throw unsupported(`${path}: partial_rotary_factor ${partial} (quantd rotates whole heads)`);
  }
  // Qwen 2/3 configs carry sliding_window but apply it only with use_sliding_window; Llama has none.
  const windowed = arch === 'mistral' || arch === 'phi3' || gemma || config['use_sliding_window'] === true;
  const windows = Array.from({ length: h.layers }, (_, i) =>
    !windowed || window === undefined || (gemma && i % 2 === 1) ? null : window,
  );
  const scalar = configNumber(config, 'query_pre_attn_scalar', path);
  return {
    arch,
    className,
    h,
    invFreq: inverseFrequencies(h, config, path),
    fused: arch === 'phi3',
    qkNorm: arch === 'qwen3',
    gemma,
    activation: gemma ? 'gelu_tanh' : 'silu',
    attentionScale: gemma && scalar !== undefined ? scalar ** -0.5 : h.headDim ** -0.5,
    attentionSoftcap: gemma ? (configNumber(config, 'attn_logit_softcapping', path) ?? 0) : 0,
    finalSoftcap: gemma ? (configNumber(config, 'final_logit_softcapping', path) ?? 0) : 0,
    windows,
  };
}
