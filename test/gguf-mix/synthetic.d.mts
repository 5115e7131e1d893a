// Types of synthetic.mjs (plain JavaScript so that generate.py can run it with node).
export interface SyntheticModel {
  readonly tokenizer: string;
  readonly files: readonly string[];
  readonly config: {
    readonly architectures: readonly string[];
    readonly model_type: string;
    readonly hidden_size: number;
    readonly intermediate_size: number;
    readonly num_hidden_layers: number;
    readonly num_attention_heads: number;
    readonly num_key_value_heads: number;
    readonly vocab_size: number;
    readonly tie_word_embeddings: boolean;
  };
}
export const MODELS: Readonly<Record<'llama' | 'qwen2' | 'mistral', SyntheticModel>>;
export function tensorShapes(model: keyof typeof MODELS): Array<[string, number[]]>;
export function writeSynthetic(model: keyof typeof MODELS, dir: string): void;
