/**
 * genai_config.json, the file ONNX Runtime GenAI reads beside a decoder model: the model's type,
 * dimensions and special tokens, the graph's input and output names (./graph.ts), and greedy
 * search defaults — the fields its model builder writes for a CPU model.
 */
import type { HfFolder, JsonObject } from '../layouts/gguf-hf/folder.js';
import type { DecoderSpec } from './spec.js';

const idOr = (value: unknown, fallback: number | number[]): number | number[] =>
  typeof value === 'number' || (Array.isArray(value) && value.every((v) => typeof v === 'number'))
    ? (value as number | number[])
    : fallback;

export function genaiConfig(spec: DecoderSpec, folder: HfFolder, filename: string): JsonObject {
  const { h } = spec;
  const c = folder.config;
  const generation = folder.generationConfig;
  const eos = idOr(generation['eos_token_id'] ?? c['eos_token_id'], 2);
  const firstEos = Array.isArray(eos) ? (eos[0] ?? 2) : eos;
  return {
    model: {
      bos_token_id: idOr(generation['bos_token_id'] ?? c['bos_token_id'], 1),
      context_length: h.context,
      decoder: {
        session_options: { log_id: 'onnxruntime-genai', provider_options: [] },
        filename,
        head_size: h.headDim,
        hidden_size: h.hidden,
        inputs: {
          input_ids: 'input_ids',
          attention_mask: 'attention_mask',
          past_key_names: 'past_key_values.%d.key',
          past_value_names: 'past_key_values.%d.value',
        },
        outputs: {
          logits: 'logits',
          present_key_names: 'present.%d.key',
          present_value_names: 'present.%d.value',
        },
        num_attention_heads: h.heads,
        num_hidden_layers: h.layers,
        num_key_value_heads: h.kvHeads,
      },
      eos_token_id: eos,
      pad_token_id: idOr(generation['pad_token_id'] ?? c['pad_token_id'], firstEos),
      type: spec.arch,
      vocab_size: h.vocab,
    },
    search: {
      diversity_penalty: 0.0,
      do_sample: false,
      early_stopping: true,
      length_penalty: 1.0,
      max_length: h.context,
      min_length: 0,
      no_repeat_ngram_size: 0,
      num_beams: 1,
      num_return_sequences: 1,
      past_present_share_buffer: false,
      repetition_penalty: 1.0,
      temperature: 1.0,
      top_k: 1,
      top_p: 1.0,
    },
  };
}
