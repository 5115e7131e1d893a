/**
 * llama.cpp's tensor names for llama-like Hugging Face checkpoints (the tensor map of
 * convert_hf_to_gguf.py / gguf-py, as public facts): used by the gguf layout's names=gguf and
 * by the model-folder conversion (./gguf-hf/).
 */
const LLAMA_GLOBAL: Readonly<Record<string, string>> = {
  'model.embed_tokens.weight': 'token_embd.weight',
  'model.norm.weight': 'output_norm.weight',
  'lm_head.weight': 'output.weight',
};

const LLAMA_LAYER: Readonly<Record<string, string>> = {
  'input_layernorm.weight': 'attn_norm.weight',
  'post_attention_layernorm.weight': 'ffn_norm.weight',
  'self_attn.q_proj.weight': 'attn_q.weight',
  'self_attn.k_proj.weight': 'attn_k.weight',
  'self_attn.v_proj.weight': 'attn_v.weight',
  'self_attn.o_proj.weight': 'attn_output.weight',
  'self_attn.q_proj.bias': 'attn_q.bias',
  'self_attn.k_proj.bias': 'attn_k.bias',
  'self_attn.v_proj.bias': 'attn_v.bias',
  'self_attn.o_proj.bias': 'attn_output.bias',
  'mlp.gate_proj.weight': 'ffn_gate.weight',
  'mlp.up_proj.weight': 'ffn_up.weight',
  'mlp.down_proj.weight': 'ffn_down.weight',
};

const LAYER_NAME = /^model\.layers\.(\d+)\.(.+)$/;

/**
 * llama.cpp's name of a llama checkpoint tensor (convert_hf_to_gguf.py's tensor map), null for
 * buffers the converter drops (rotary_emb.inv_freq), undefined when it has none.
 */
export function llamaGgufName(name: string): string | null | undefined {
  if (name.endsWith('rotary_emb.inv_freq')) return null;
  const global = LLAMA_GLOBAL[name];
  if (global !== undefined) return global;
  const m = LAYER_NAME.exec(name);
  const mapped = m ? LLAMA_LAYER[m[2]!] : undefined;
  return m && mapped !== undefined ? `blk.${m[1]}.${mapped}` : undefined;
}
