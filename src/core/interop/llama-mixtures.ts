/**
 * llama-quantize's file types ("Q4_K_M", "Q5_K_S", ...) and the per-tensor rules that turn one
 * into a type for each tensor: which tensors may be quantized at all, the promotions of attn_v,
 * ffn_down, attn_output and the output/token embeddings by layer position, grouped-query
 * attention and expert count, the user's overrides (--pure, --output-tensor-type,
 * --token-embedding-type, --tensor-type), and the fallbacks for rows that are not whole blocks.
 *
 * The rules are llama.cpp's `llama_tensor_get_type` (src/llama-quant.cpp) at the revision
 * node-llama-cpp 3.22.1 bundles (ggml 0.25.1); test/gguf-mix/ checks the tables they give against
 * that llama.cpp's own llama_model_quantize. Only the file types whose tensor types quantd
 * writes are listed; the rules of the others (IQ1–IQ3, TQ, MXFP4) are left out with them.
 *
 * Pure: names and shapes in, type names out. Counters are per call, as llama.cpp's are per file.
 */

import { QuantdError } from '../../errors/index.js';

/** A llama-quantize file type: its `llama_ftype` value (general.file_type) and default tensor type. */
export interface LlamaFileType {
  readonly name: string;
  readonly ftype: number;
  readonly defaultType: string;
}

const FILE_TYPE_ROWS: ReadonlyArray<readonly [string, number, string]> = [
  ['Q4_0', 2, 'Q4_0'],
  ['Q4_1', 3, 'Q4_1'],
  ['Q8_0', 7, 'Q8_0'],
  ['Q5_0', 8, 'Q5_0'],
  ['Q5_1', 9, 'Q5_1'],
  ['Q2_K', 10, 'Q2_K'],
  ['Q3_K_S', 11, 'Q3_K'],
  ['Q3_K_M', 12, 'Q3_K'],
  ['Q3_K_L', 13, 'Q3_K'],
  ['Q4_K_S', 14, 'Q4_K'],
  ['Q4_K_M', 15, 'Q4_K'],
  ['Q5_K_S', 16, 'Q5_K'],
  ['Q5_K_M', 17, 'Q5_K'],
  ['Q6_K', 18, 'Q6_K'],
  ['IQ4_NL', 25, 'IQ4_NL'],
  ['IQ4_XS', 30, 'IQ4_XS'],
];

/** The file types quantd writes, by name. */
export const LLAMA_FILE_TYPES: ReadonlyMap<string, LlamaFileType> = new Map(
  FILE_TYPE_ROWS.map(([name, ftype, defaultType]) => [name, { name, ftype, defaultType }]),
);

/** llama-quantize's aliases: a bare K type names its _M mixture. */
const ALIASES: Readonly<Record<string, string>> = { Q3_K: 'Q3_K_M', Q4_K: 'Q4_K_M', Q5_K: 'Q5_K_M' };

/** The file type of a name as llama-quantize takes it (case-insensitive, with its aliases). */
export function llamaFileType(name: string): LlamaFileType | undefined {
  const upper = name.toUpperCase();
  return LLAMA_FILE_TYPES.get(ALIASES[upper] ?? upper);
}

/** What the rules need to know about the model (GGUF hyperparameters). */
export interface MixtureModel {
  /** general.architecture */
  readonly arch: string;
  /** block_count */
  readonly layers: number;
  /** attention.head_count */
  readonly heads: number;
  /** attention.head_count_kv */
  readonly kvHeads: number;
  /** expert_count (0 for a dense model) */
  readonly experts: number;
}

/** A tensor by its GGUF name and ggml dimensions (ne[0] is the row). */
export interface MixtureTensor {
  readonly name: string;
  readonly ne: readonly number[];
}

export interface MixtureOptions {
  readonly fileType: LlamaFileType;
  /** --pure: every quantized tensor gets the default type (the fallbacks still apply). */
  readonly pure?: boolean;
  /** --output-tensor-type */
  readonly outputTensorType?: string;
  /** --token-embedding-type */
  readonly tokenEmbeddingType?: string;
  /** --tensor-type PATTERN=TYPE, in order; the first pattern that matches a name decides. */
  readonly tensorTypes?: ReadonlyArray<{
    readonly matches: (name: string) => boolean;
    readonly type: string;
  }>;
  /** Whether an importance matrix is given (some rules depend on it). */
  readonly hasImatrix?: boolean;
}

export interface MixtureChoice {
  /** The ggml type; undefined: llama.cpp does not quantize this tensor (it keeps its type). */
  readonly type: string | undefined;
  /** Why, when it is not the file type's default. */
  readonly note?: string;
}

/** Elements per block of the ggml types the rules name. */
const BLOCK: Readonly<Record<string, number>> = {
  Q4_0: 32,
  Q4_1: 32,
  Q5_0: 32,
  Q5_1: 32,
  Q8_0: 32,
  IQ4_NL: 32,
  Q2_K: 256,
  Q3_K: 256,
  Q4_K: 256,
  Q5_K: 256,
  Q6_K: 256,
  IQ4_XS: 256,
  F16: 1,
  F32: 1,
  BF16: 1,
};

/** The block size of a type the rules may choose. */
export function mixtureBlockSize(type: string): number | undefined {
  return BLOCK[type];
}

type Category =
  | 'token_embd'
  | 'attn_q'
  | 'attn_v'
  | 'attn_k'
  | 'attn_qkv'
  | 'attn_kv_b'
  | 'attn_output'
  | 'ffn_up'
  | 'ffn_gate'
  | 'ffn_down'
  | 'output'
  | 'other';

const isTokenEmbd = (name: string): boolean =>
  name === 'token_embd.weight' || name === 'per_layer_token_embd.weight';

/** llama.cpp's broad tensor categories, by the first substring that matches (in this order). */
function categoryOf(name: string): Category {
  if (name === 'output.weight') return 'output';
  if (isTokenEmbd(name)) return 'token_embd';
  const bySubstring: ReadonlyArray<readonly [string, Category]> = [
    ['attn_qkv.weight', 'attn_qkv'],
    ['attn_kv_b.weight', 'attn_kv_b'],
    ['attn_v.weight', 'attn_v'],
    ['attn_k.weight', 'attn_k'],
    ['attn_q.weight', 'attn_q'],
    ['attn_output.weight', 'attn_output'],
    ['ffn_up', 'ffn_up'],
    ['ffn_gate', 'ffn_gate'],
    ['ffn_down', 'ffn_down'],
  ];
  return bySubstring.find(([s]) => name.includes(s))?.[1] ?? 'other';
}

const isAttnVLike = (c: Category): boolean => c === 'attn_v' || c === 'attn_qkv' || c === 'attn_kv_b';

/** Substrings of tensors llama.cpp never quantizes (small, or read at full precision). */
const NEVER_QUANTIZED = [
  '_norm.weight',
  'ffn_gate_inp.weight',
  'ffn_gate_tid2eid.weight',
  'altup',
  'laurel',
  'per_layer_model_proj',
  'ssm_conv1d',
  'shortconv.conv.weight',
  'indexer.k_proj.weight',
  'indexer.q_proj.weight',
  'time_mix_first.weight',
  'time_mix_w0.weight',
  'time_mix_w1.weight',
  'time_mix_w2.weight',
  'time_mix_v0.weight',
  'time_mix_v1.weight',
  'time_mix_v2.weight',
  'time_mix_a0.weight',
  'time_mix_a1.weight',
  'time_mix_a2.weight',
  'time_mix_g1.weight',
  'time_mix_g2.weight',
  'time_mix_decay_w1.weight',
  'time_mix_decay_w2.weight',
  'time_mix_lerp_fused.weight',
  'attn_rel_b.weight',
  '.position_embd',
  'sam.pos_embd',
  'sam.neck.',
  'sam.net_',
  '.rel_pos',
  '.patch_embd',
  '.patch_merger',
  'a.rvq.codebook',
  'mm.a.code_embd',
];

/** Whether llama-quantize quantizes this tensor at all (rank ≥ 2, a weight, not on its list). */
export function allowsQuantization(t: MixtureTensor): boolean {
  if (ggmlNDims(t.ne) < 2 || !t.name.endsWith('weight')) return false;
  if (t.name === 'position_embd.weight' || t.name === 'token_types.weight') return false;
  return !NEVER_QUANTIZED.some((s) => t.name.includes(s));
}

/** ggml_n_dims: trailing dimensions of 1 do not count. */
function ggmlNDims(ne: readonly number[]): number {
  let n = ne.length;
  while (n > 1 && ne[n - 1] === 1) n--;
  return n;
}

/** llama.cpp's "use more bits" layers: the first and last eighth, and every third in between. */
const useMoreBits = (i: number, n: number): boolean =>
  i < Math.trunc(n / 8) || i >= Math.trunc((7 * n) / 8) || (i - Math.trunc(n / 8)) % 3 === 2;

/** The type a tensor's row cannot hold falls back to (llama.cpp's tensor_type_fallback). */
const FALLBACK: Readonly<Record<string, string>> = {
  IQ4_XS: 'IQ4_NL',
  Q2_K: 'Q4_0',
  Q3_K: 'Q4_0',
  Q4_K: 'Q5_0',
  Q5_K: 'Q5_1',
  Q6_K: 'Q8_0',
};

function withFallback(type: string, ne0: number): MixtureChoice {
  const block = BLOCK[type] ?? 1;
  if (ne0 % block === 0) return { type };
  const fallback = FALLBACK[type] ?? type;
  if (ne0 % (BLOCK[fallback] ?? 1) !== 0) {
    return { type: 'F16', note: `row of ${ne0} is not a multiple of ${block} (${type}): F16` };
  }
  return { type: fallback, note: `row of ${ne0} is not a multiple of ${block} (${type}): ${fallback}` };
}

/** llama.cpp's per-file counters: how many attn_v / ffn_* tensors the rules have seen so far. */
interface Counters {
  nAttnV: number;
  iAttnV: number;
  iFfnDown: number;
  iFfnGate: number;
  iFfnUp: number;
}

/** The layer of an expert tensor, from its name (experts are not in layer order in every file). */
function layerOf(name: string, fallback: number, layers: number, experts: number): number {
  if (experts <= 1) return fallback;
  const m = /^blk\.(\d+)\./.exec(name);
  const layer = m ? Number(m[1]) : NaN;
  if (!(layer >= 0 && layer < layers)) {
    throw new QuantdError('FEATURE_UNSUPPORTED', {
      detail: `tensor ${name}: the mixture rules need its layer (blk.N., N below ${layers})`,
    });
  }
  return layer;
}

/** The mixture's rule for one tensor (llama_tensor_get_type_impl), for the file types listed above. */
function ruleType(
  t: MixtureTensor,
  category: Category,
  start: string,
  model: MixtureModel,
  o: MixtureOptions,
  tied: boolean,
  c: Counters,
): string {
  const ft = o.fileType.name;
  const gqa = model.kvHeads > 0 ? Math.trunc(model.heads / model.kvHeads) : 0;
  const falcon = model.arch === 'falcon';
  const is70B =
    model.layers === 80 &&
    ((model.arch === 'llama' && model.heads !== model.kvHeads) || model.arch === 'qwen2');
  const n = model.layers;
  let type = start;
  if (category === 'output' || (tied && category === 'token_embd')) {
    if (o.outputTensorType !== undefined) return o.outputTensorType;
    if (falcon || t.ne[0]! % (BLOCK[start] ?? 1) !== 0) return 'Q8_0';
    return start !== 'Q8_0' ? 'Q6_K' : start;
  }
  if (category === 'token_embd') return o.tokenEmbeddingType ?? type;
  if (isAttnVLike(category)) {
    if (ft === 'Q2_K') type = gqa >= 4 ? 'Q4_K' : 'Q3_K';
    else if (ft === 'Q3_K_M') type = c.iAttnV < 2 ? 'Q5_K' : 'Q4_K';
    else if (ft === 'Q3_K_L') type = 'Q5_K';
    else if ((ft === 'IQ4_NL' || ft === 'IQ4_XS') && gqa >= 4) type = 'Q5_K';
    else if ((ft === 'Q4_K_M' || ft === 'Q5_K_M') && useMoreBits(c.iAttnV, c.nAttnV)) type = 'Q6_K';
    else if (ft === 'Q4_K_S' && c.iAttnV < 4) type = 'Q5_K';
    // 70B: eight heads share attn_v, which is 8× smaller than attn_q: more bits cost little
    if (is70B && (type === 'Q3_K' || type === 'Q4_K')) type = 'Q5_K';
    if (model.experts === 8) type = 'Q8_0';
    c.iAttnV++;
    return type;
  }
  if (category === 'attn_k') return model.experts === 8 ? 'Q8_0' : type;
  if (category === 'ffn_down') {
    const i = layerOf(t.name, c.iFfnDown, n, model.experts);
    c.iFfnDown++;
    const eighth = Math.trunc(n / 8);
    if (ft === 'Q2_K') return 'Q3_K';
    if (ft === 'Q3_K_M') {
      if (i < Math.trunc(n / 16)) return 'Q5_K';
      return !falcon || useMoreBits(i, n) ? 'Q4_K' : 'Q3_K';
    }
    if (ft === 'Q3_K_L') return falcon ? 'Q4_K' : 'Q5_K';
    if (ft === 'Q4_K_M') {
      if (falcon) return i < Math.trunc(n / 16) ? 'Q6_K' : useMoreBits(i, n) ? 'Q5_K' : 'Q4_K';
      return useMoreBits(i, n) ? 'Q6_K' : type;
    }
    if (i < eighth && (ft === 'IQ4_NL' || ft === 'IQ4_XS') && o.hasImatrix !== true) return 'Q5_K';
    if (ft === 'Q5_K_M' && useMoreBits(i, n)) return 'Q6_K';
    if (ft === 'Q4_K_S' && !falcon && i < eighth) return 'Q5_K';
    // with an imatrix, Q4_0/Q5_0 still misbehave on the first ffn_down layers
    if ((ft === 'Q4_0' || ft === 'Q5_0') && o.hasImatrix === true && i < eighth) {
      return ft === 'Q4_0' ? 'Q4_1' : 'Q5_1';
    }
    return type;
  }
  if (category === 'attn_output') {
    if (falcon) return ft === 'Q3_K_L' ? 'Q4_K' : type;
    if (model.experts === 8) {
      const promoted = ['Q2_K', 'Q3_K_S', 'Q3_K_M', 'IQ4_NL', 'Q4_K_S', 'Q4_K_M', 'IQ4_XS'];
      return promoted.includes(ft) ? 'Q5_K' : type;
    }
    if (ft === 'Q2_K') return 'Q3_K';
    if (ft === 'Q3_K_M') return 'Q4_K';
    if (ft === 'Q3_K_L') return 'Q5_K';
    return type;
  }
  if (category === 'ffn_gate') {
    layerOf(t.name, c.iFfnGate, n, model.experts);
    c.iFfnGate++;
  } else if (category === 'ffn_up') {
    layerOf(t.name, c.iFfnUp, n, model.experts);
    c.iFfnUp++;
  }
  return type;
}

/** llama.cpp's order of tensors in a file it quantizes: by layer (non-layer tensors first), then name. */
function llamaOrder(a: string, b: string): number {
  const layer = (s: string): number => {
    const m = /^blk\.(\d+)\./.exec(s);
    return m ? Number(m[1]) : -1;
  };
  const la = layer(a);
  const lb = layer(b);
  if (la !== lb) return la - lb;
  return a < b ? -1 : a > b ? 1 : 0; // byte order, as std::string compares
}

/**
 * The type of each tensor of a model quantized as `o.fileType`, as llama-quantize chooses it
 * (llama_tensor_get_type): a map from tensor name to choice, in the input's order.
 */
export function chooseMixture(
  tensors: readonly MixtureTensor[],
  model: MixtureModel,
  o: MixtureOptions,
): Map<string, MixtureChoice> {
  const ordered = [...tensors].sort((a, b) => llamaOrder(a.name, b.name));
  const counters: Counters = {
    nAttnV: tensors.filter((t) => isAttnVLike(categoryOf(t.name))).length,
    iAttnV: 0,
    iFfnDown: 0,
    iFfnGate: 0,
    iFfnUp: 0,
  };
  const tied = !tensors.some((t) => t.name === 'output.weight');
  const start = o.fileType.defaultType;
  const chosen = new Map<string, MixtureChoice>();
  for (const t of ordered) chosen.set(t.name, choose(t, model, o, tied, counters, start));
  return new Map(tensors.map((t) => [t.name, chosen.get(t.name)!]));
}

function choose(
  t: MixtureTensor,
  model: MixtureModel,
  o: MixtureOptions,
  tied: boolean,
  c: Counters,
  start: string,
): MixtureChoice {
  if (!allowsQuantization(t)) return { type: undefined };
  const category = categoryOf(t.name);
  if (o.tokenEmbeddingType !== undefined && category === 'token_embd') {
    // per_layer_token_embd is a large table of its own: a --tensor-type naming it wins
    const named = t.name === 'per_layer_token_embd.weight' && o.tensorTypes?.some((p) => p.matches(t.name));
    if (named !== true) return { type: o.tokenEmbeddingType, note: 'token_embedding_type' };
  }
  if (o.outputTensorType !== undefined && category === 'output') {
    return { type: o.outputTensorType, note: 'output_tensor_type' };
  }
  const manual = o.tensorTypes?.find((p) => p.matches(t.name));
  let type = manual?.type ?? start;
  if (manual === undefined && o.pure !== true) type = ruleType(t, category, start, model, o, tied, c);
  const fallback = withFallback(type, t.ne[0]!);
  const why =
    manual !== undefined ? 'tensor_type override' : type !== start ? `${o.fileType.name} rule` : undefined;
  const note = [why, fallback.note].filter((s) => s !== undefined).join('; ');
  return note === '' ? { type: fallback.type } : { type: fallback.type, note };
}
