/**
 * What config.json says about a llama-like network's dimensions, read and checked once for the
 * architecture tables (./architectures.ts), and the tensors a conversion computes from it.
 */
import { configInt, configNumber, hfInvalid, requireInt, type JsonObject } from './folder.js';

/** What config.json says about the network's dimensions. */
export interface Hyperparameters {
  readonly layers: number;
  readonly hidden: number;
  readonly ffn: number;
  readonly heads: number;
  readonly kvHeads: number;
  readonly headDim: number;
  readonly vocab: number;
  readonly context: number;
  readonly normEps: number;
  readonly ropeTheta: number;
  readonly tiedEmbeddings: boolean;
}

/** A float32 tensor made from config.json, by its GGUF name. */
export interface GeneratedTensor {
  readonly name: string;
  readonly data: Float32Array;
}

export function hyperparameters(config: JsonObject, path: string): Hyperparameters {
  const hidden = requireInt(config, 'hidden_size', path);
  const heads = requireInt(config, 'num_attention_heads', path);
  if (heads === 0 || hidden % heads !== 0) {
    throw hfInvalid(path, `hidden_size ${hidden} is not a multiple of num_attention_heads ${heads}`);
  }
  return {
    layers: requireInt(config, 'num_hidden_layers', path),
    hidden,
    ffn: requireInt(config, 'intermediate_size', path),
    heads,
    kvHeads: configInt(config, 'num_key_value_heads', path, heads)!,
    headDim: configInt(config, 'head_dim', path, hidden / heads)!,
    vocab: requireInt(config, 'vocab_size', path),
    context: requireInt(config, 'max_position_embeddings', path),
    normEps: configNumber(config, 'rms_norm_eps', path) ?? 1e-5,
    ropeTheta: configNumber(config, 'rope_theta', path) ?? 10000,
    tiedEmbeddings: config['tie_word_embeddings'] === true,
  };
}
