/**
 * A causal language model as an ONNX graph ONNX Runtime runs end to end, in the form ONNX Runtime
 * GenAI's model builder writes for CPU: token embeddings (Gather), RMS norms
 * (SimplifiedLayerNormalization), rotary attention with grouped kv heads and a kv cache
 * (com.microsoft.GroupQueryAttention, which rotates q and k itself from cos/sin tables), the MLP,
 * the final norm and the output projection; linear projections as com.microsoft.MatMulNBits when
 * quantized, MatMul otherwise. Activations are float32 throughout; 16-bit weights are cast once
 * (ONNX Runtime folds those casts when it loads the model).
 *
 * buildDecoder: inputs `input_ids` [batch, sequence] and `attention_mask` [batch, total_sequence]
 * (int64), and per layer `past_key_values.N.key` / `.value` [batch, kv_heads, past_sequence,
 * head_dim]; outputs `logits` [batch, sequence, vocab] and `present.N.key` / `.value`. The past
 * may be empty (a prompt evaluated from scratch). Taps add outputs for calibration.
 *
 * buildBlock: one decoder layer alone, for calibration that runs a model layer by layer (GPTQ's
 * sequential quantization, AWQ's searches): input `hidden` [batch, sequence, hidden] and
 * `attention_mask`, the layer's weights as graph inputs (fed at each run, so that one graph runs
 * every layer, with any weights), and as output either the layer's output `hidden_out` or what a
 * stage of the layer needs (the Gram matrix XᵀX of one linear input).
 */
import { GraphBuilder } from '../../format/onnx-graph.js';
import { ONNX_DTYPE } from '../../format/onnx.js';
import type { DecoderSpec } from './spec.js';

export const MS_DOMAIN = 'com.microsoft';
const F = ONNX_DTYPE.FLOAT;

/** How the graph reaches the model's tensors (initializers of a file, or inputs fed at run time). */
export interface DecoderWeights {
  /** Whether the checkpoint has the tensor (optional ones: biases, lm_head). */
  has(name: string): boolean;
  /** A float32 value holding the tensor. */
  float(g: GraphBuilder, name: string): string;
  /** x · Wᵀ for the [out, in] weight `name`. */
  linear(g: GraphBuilder, x: string, name: string): string;
}

/** Extra outputs of buildDecoder for calibration, named by the linear input they describe. */
export interface DecoderTaps {
  /** Σ over tokens of x² per input feature, [in] (llama.cpp's importance matrix). */
  readonly sumSquares?: boolean;
  /** The input itself, [batch, sequence, in]. */
  readonly inputs?: boolean;
}

export interface DecoderGraphOptions {
  /** Rows of the rotary tables: the longest total sequence the graph can run. */
  readonly maxPositions: number;
  readonly taps?: DecoderTaps;
  /** Also output each layer's residual stream after it, `hidden.N` [batch, sequence, hidden]. */
  readonly hiddenStates?: boolean;
  /** Also output the embeddings (the first layer's input), `embeddings` [batch, sequence, hidden]. */
  readonly embeddings?: boolean;
}

/** A linear input of a layer: the weights it feeds, and the tap outputs made of it. */
export interface TapPoint {
  /** `model.layers.0.self_attn.q_proj`: the first weight's module (q, k and v share one input). */
  readonly name: string;
  readonly weights: readonly string[];
  readonly features: number;
  readonly sumSquares?: string;
  readonly input?: string;
}

/** The linear inputs of a layer, in the order a layer computes them (GPTQ's sequential stages). */
export const STAGES = ['attention_input', 'attention_output', 'mlp_input', 'mlp_hidden'] as const;
export type Stage = (typeof STAGES)[number];

/** What a layer builder records at each linear input. */
type TapSink = (x: string, stage: Stage, weights: readonly string[], features: number, name: string) => void;

const layerPrefix = (i: number): string => `model.layers.${i}.`;

/** The rotary tables GroupQueryAttention takes: cos and sin of position × frequency, [positions, dim/2]. */
function rotaryTables(invFreq: Float64Array, positions: number): { cos: Float32Array; sin: Float32Array } {
  const half = invFreq.length;
  const cos = new Float32Array(positions * half);
  const sin = new Float32Array(positions * half);
  for (let p = 0; p < positions; p++) {
    for (let i = 0; i < half; i++) {
      const angle = p * invFreq[i]!;
      cos[p * half + i] = Math.cos(angle);
      sin[p * half + i] = Math.sin(angle);
    }
  }
  return { cos, sin };
}

/** What every layer's attention shares: sequence bookkeeping and the rotary tables. */
interface AttentionContext {
  readonly seqlensK: string;
  readonly totalLength: string;
  readonly cosCache: string;
  readonly sinCache: string;
}

function attentionContext(
  g: GraphBuilder,
  spec: DecoderSpec,
  mask: string,
  maxPositions: number,
): AttentionContext {
  // GroupQueryAttention's sequence bookkeeping: each row's last position, and the total length
  const summed = g.op('ReduceSum', [mask, g.int64([1])], 'attention_mask/ReduceSum', { keepdims: 0 });
  const lastIndex = g.op('Sub', [summed, g.int64([1], [])], 'attention_mask/Sub');
  const seqlensK = g.op('Cast', [lastIndex], 'seqlens_k/Cast', { to: ONNX_DTYPE.INT32 });
  const maskShape = g.op('Shape', [mask], 'attention_mask/Shape');
  const total = g.op('Gather', [maskShape, g.int64([1], [])], 'total_sequence_length/Gather', { axis: 0 });
  const totalLength = g.op('Cast', [total], 'total_sequence_length/Cast', { to: ONNX_DTYPE.INT32 });
  const { cos, sin } = rotaryTables(spec.invFreq, maxPositions);
  const half = spec.h.headDim / 2;
  return {
    seqlensK,
    totalLength,
    cosCache: g.tensor('cos_cache', cos, [maxPositions, half]),
    sinCache: g.tensor('sin_cache', sin, [maxPositions, half]),
  };
}

function rmsNorm(
  g: GraphBuilder,
  spec: DecoderSpec,
  w: DecoderWeights,
  x: string,
  weight: string,
  name: string,
): string {
  const scale = spec.gemma
    ? g.op('Add', [w.float(g, weight), g.float32([1])], `${name}/plus_one`)
    : w.float(g, weight);
  return g.op('SimplifiedLayerNormalization', [x, scale], name, {
    axis: -1,
    epsilon: { float: spec.h.normEps },
    stash_type: 1,
  });
}

interface LayerResult {
  readonly x: string;
  readonly presentKey: string;
  readonly presentValue: string;
}

interface AttentionResult {
  /** o_proj's output (before Gemma 2's post-attention norm). */
  readonly out: string;
  readonly presentKey: string;
  readonly presentValue: string;
}

/**
 * Layer `i`'s attention on its normed input `hIn`, to o_proj's output. `past`: the kv cache
 * inputs ('' for none). `stop`: return null once that stage's linear input is tapped.
 */
function buildAttention(
  g: GraphBuilder,
  spec: DecoderSpec,
  w: DecoderWeights,
  i: number,
  hIn: string,
  ctx: AttentionContext,
  past: readonly [string, string],
  tap: TapSink,
  stop?: Stage,
): AttentionResult | null {
  const { h } = spec;
  const p = layerPrefix(i);
  const name = `model.layers.${i}`;
  const qWidth = h.heads * h.headDim;
  const kvWidth = h.kvHeads * h.headDim;
  let q: string;
  let k: string;
  let v: string;
  if (spec.fused) {
    tap(hIn, 'attention_input', [`${p}self_attn.qkv_proj.weight`], h.hidden, `${name}.self_attn.qkv_proj`);
    if (stop === 'attention_input') return null;
    const qkv = w.linear(g, hIn, `${p}self_attn.qkv_proj.weight`);
    [q, k, v] = g.node('Split', [qkv, g.int64([qWidth, kvWidth, kvWidth])], {
      name: `${name}/self_attn/qkv/Split`,
      attributes: { axis: -1 },
      outputs: 3,
    }) as [string, string, string];
  } else {
    const weights = ['q', 'k', 'v'].map((n) => `${p}self_attn.${n}_proj.weight`);
    tap(hIn, 'attention_input', weights, h.hidden, `${name}.self_attn.q_proj`);
    if (stop === 'attention_input') return null;
    const proj = (n: string): string => {
      let y = w.linear(g, hIn, `${p}self_attn.${n}_proj.weight`);
      const bias = `${p}self_attn.${n}_proj.bias`;
      if (w.has(bias)) y = g.op('Add', [y, w.float(g, bias)], `${name}/self_attn/${n}_proj/bias`);
      return y;
    };
    [q, k, v] = [proj('q'), proj('k'), proj('v')];
  }
  if (spec.qkNorm) {
    const headNorm = (y: string, n: string): string => {
      const heads = g.op(
        'Reshape',
        [y, g.int64([0, 0, -1, h.headDim])],
        `${name}/self_attn/${n}_norm/Reshape`,
      );
      const normed = rmsNorm(
        g,
        spec,
        w,
        heads,
        `${p}self_attn.${n}_norm.weight`,
        `${name}/self_attn/${n}_norm`,
      );
      return g.op('Reshape', [normed, g.int64([0, 0, -1])], `${name}/self_attn/${n}_norm/Reshape_back`);
    };
    q = headNorm(q, 'q');
    k = headNorm(k, 'k');
  }
  const window = spec.windows[i];
  const [attention, presentKey, presentValue] = g.node(
    'GroupQueryAttention',
    [q, k, v, past[0], past[1], ctx.seqlensK, ctx.totalLength, ctx.cosCache, ctx.sinCache],
    {
      name: `${name}/self_attn/GroupQueryAttention`,
      domain: MS_DOMAIN,
      outputs: 3,
      attributes: {
        num_heads: h.heads,
        kv_num_heads: h.kvHeads,
        scale: { float: spec.attentionScale },
        do_rotary: 1,
        rotary_interleaved: 0,
        // keys attended, the query's own included (as HF's sliding_window; checked against torch)
        ...(window !== null && window !== undefined ? { local_window_size: window } : {}),
        ...(spec.attentionSoftcap > 0 ? { softcap: { float: spec.attentionSoftcap } } : {}),
      },
    },
  ) as [string, string, string];
  tap(attention, 'attention_output', [`${p}self_attn.o_proj.weight`], qWidth, `${name}.self_attn.o_proj`);
  if (stop === 'attention_output') return null;
  return { out: w.linear(g, attention, `${p}self_attn.o_proj.weight`), presentKey, presentValue };
}

/** Layer `i`'s MLP on its normed input `hMlp`, to down_proj's output (before Gemma 2's post norm). */
function buildMlp(
  g: GraphBuilder,
  spec: DecoderSpec,
  w: DecoderWeights,
  i: number,
  hMlp: string,
  tap: TapSink,
  stop?: Stage,
): string | null {
  const { h } = spec;
  const p = layerPrefix(i);
  const name = `model.layers.${i}`;
  let gate: string;
  let up: string;
  if (spec.fused) {
    tap(hMlp, 'mlp_input', [`${p}mlp.gate_up_proj.weight`], h.hidden, `${name}.mlp.gate_up_proj`);
    if (stop === 'mlp_input') return null;
    const gateUp = w.linear(g, hMlp, `${p}mlp.gate_up_proj.weight`);
    [gate, up] = g.node('Split', [gateUp, g.int64([h.ffn, h.ffn])], {
      name: `${name}/mlp/gate_up/Split`,
      attributes: { axis: -1 },
      outputs: 2,
    }) as [string, string];
  } else {
    const weights = [`${p}mlp.gate_proj.weight`, `${p}mlp.up_proj.weight`];
    tap(hMlp, 'mlp_input', weights, h.hidden, `${name}.mlp.gate_proj`);
    if (stop === 'mlp_input') return null;
    gate = w.linear(g, hMlp, `${p}mlp.gate_proj.weight`);
    up = w.linear(g, hMlp, `${p}mlp.up_proj.weight`);
  }
  const act =
    spec.activation === 'silu'
      ? g.op('Mul', [gate, g.op('Sigmoid', [gate], `${name}/mlp/act/Sigmoid`)], `${name}/mlp/act/Mul`)
      : g.op('FastGelu', [gate], `${name}/mlp/act/FastGelu`, {}, MS_DOMAIN);
  const product = g.op('Mul', [act, up], `${name}/mlp/Mul`);
  tap(product, 'mlp_hidden', [`${p}mlp.down_proj.weight`], h.ffn, `${name}.mlp.down_proj`);
  if (stop === 'mlp_hidden') return null;
  return w.linear(g, product, `${p}mlp.down_proj.weight`);
}

/** Layer `i` on the residual stream `x` (see buildAttention for `past` and `stop`). */
function buildLayer(
  g: GraphBuilder,
  spec: DecoderSpec,
  w: DecoderWeights,
  i: number,
  x: string,
  ctx: AttentionContext,
  past: readonly [string, string],
  tap: TapSink,
  stop?: Stage,
): LayerResult | null {
  const p = layerPrefix(i);
  const name = `model.layers.${i}`;
  const norm = (v: string, weight: string, n: string): string => rmsNorm(g, spec, w, v, weight, n);
  const hIn = norm(x, `${p}input_layernorm.weight`, `${name}/input_layernorm`);
  const attention = buildAttention(g, spec, w, i, hIn, ctx, past, tap, stop);
  if (attention === null) return null;
  const o = spec.gemma
    ? norm(attention.out, `${p}post_attention_layernorm.weight`, `${name}/post_attention_layernorm`)
    : attention.out;
  x = g.op('Add', [x, o], `${name}/attention_residual`);
  const hMlp = spec.gemma
    ? norm(x, `${p}pre_feedforward_layernorm.weight`, `${name}/pre_feedforward_layernorm`)
    : norm(x, `${p}post_attention_layernorm.weight`, `${name}/post_attention_layernorm`);
  const mlp = buildMlp(g, spec, w, i, hMlp, tap, stop);
  if (mlp === null) return null;
  const down = spec.gemma
    ? norm(mlp, `${p}post_feedforward_layernorm.weight`, `${name}/post_feedforward_layernorm`)
    : mlp;
  x = g.op('Add', [x, down], `${name}/mlp_residual`);
  return { x, presentKey: attention.presentKey, presentValue: attention.presentValue };
}

/** Builds the decoder into `g`; returns the calibration taps it added. */
export function buildDecoder(
  g: GraphBuilder,
  spec: DecoderSpec,
  w: DecoderWeights,
  options: DecoderGraphOptions,
): TapPoint[] {
  const { h } = spec;
  const taps: TapPoint[] = [];
  const ids = g.input({
    name: 'input_ids',
    elemType: ONNX_DTYPE.INT64,
    dims: ['batch_size', 'sequence_length'],
  });
  const mask = g.input({
    name: 'attention_mask',
    elemType: ONNX_DTYPE.INT64,
    dims: ['batch_size', 'total_sequence_length'],
  });
  const tap: TapSink = (x, _stage, weights, features, name) => {
    if (!options.taps) return;
    const point: { -readonly [K in keyof TapPoint]: TapPoint[K] } = { name, weights, features };
    if (options.taps.sumSquares) {
      point.sumSquares = `${name}.sum_squares`;
      // [batch, sequence, in] → [in]: ReduceSumSquare over the first two axes
      const s = g.op('ReduceSumSquare', [x, g.int64([0, 1])], `${name}/ReduceSumSquare`, { keepdims: 0 });
      g.output(s, { name: point.sumSquares, elemType: F, dims: [features] });
    }
    if (options.taps.inputs) {
      point.input = `${name}.input`;
      g.output(x, { name: point.input, elemType: F, dims: ['batch_size', 'sequence_length', features] });
    }
    taps.push(point);
  };

  let x = g.op('Gather', [w.float(g, 'model.embed_tokens.weight'), ids], 'model.embed_tokens/Gather');
  if (spec.gemma) {
    // Gemma scales embeddings by sqrt(hidden) rounded to the activations' dtype (float32 here)
    x = g.op('Mul', [x, g.float32([Math.fround(Math.sqrt(h.hidden))])], 'model.embed_tokens/scale');
  }
  if (options.embeddings) {
    g.output(x, { name: 'embeddings', elemType: F, dims: ['batch_size', 'sequence_length', h.hidden] });
  }
  const ctx = attentionContext(g, spec, mask, options.maxPositions);
  const kvDims = ['batch_size', h.kvHeads, 'total_sequence_length', h.headDim];
  const pastDims = ['batch_size', h.kvHeads, 'past_sequence_length', h.headDim];
  for (let i = 0; i < h.layers; i++) {
    const past = [
      g.input({ name: `past_key_values.${i}.key`, elemType: F, dims: pastDims }),
      g.input({ name: `past_key_values.${i}.value`, elemType: F, dims: pastDims }),
    ] as const;
    const layer = buildLayer(g, spec, w, i, x, ctx, past, tap)!;
    x = layer.x;
    g.output(layer.presentKey, { name: `present.${i}.key`, elemType: F, dims: kvDims });
    g.output(layer.presentValue, { name: `present.${i}.value`, elemType: F, dims: kvDims });
    if (options.hiddenStates) {
      g.output(x, { name: `hidden.${i}`, elemType: F, dims: ['batch_size', 'sequence_length', h.hidden] });
    }
  }
  const final = rmsNorm(g, spec, w, x, 'model.norm.weight', 'model/norm');
  const head = w.has('lm_head.weight') ? 'lm_head.weight' : 'model.embed_tokens.weight';
  let logits = w.linear(g, final, head);
  if (spec.finalSoftcap > 0) {
    const cap = g.float32([spec.finalSoftcap]);
    const scaled = g.op('Div', [logits, cap], 'logits/softcap/Div');
    logits = g.op('Mul', [g.op('Tanh', [scaled], 'logits/softcap/Tanh'), cap], 'logits/softcap/Mul');
  }
  g.output(logits, { name: 'logits', elemType: F, dims: ['batch_size', 'sequence_length', h.vocab] });
  return taps;
}

export interface BlockOptions {
  /** Which layer's structure (its sliding window); its weights are fed as inputs. */
  readonly layer: number;
  readonly maxPositions: number;
  /** The stage whose linear input's Gram matrix XᵀX is the output; undefined: the layer's output. */
  readonly stage?: Stage;
  /** With the layer's output, every stage's linear input, named by its stage (AWQ's searches). */
  readonly capture?: boolean;
}

/** What a block graph computes, and the names it reads its weights by. */
export interface BlockGraph {
  /**
   * The outputs: for a stage `gram` [in, in] (Σ xᵀx over the tokens) and `abs_sum` [in] (Σ |x|),
   * else `hidden_out` [batch, sequence, hidden].
   */
  readonly outputs: readonly string[];
  /** The tap at the stage (undefined for the layer's output). */
  readonly tap?: TapPoint;
  /** With capture: each stage's linear input, its output named by the stage (`input`). */
  readonly taps?: readonly TapPoint[];
}

/** One decoder layer (see the file's comment); `w` provides its weights as graph inputs. */
export function buildBlock(
  g: GraphBuilder,
  spec: DecoderSpec,
  w: DecoderWeights,
  options: BlockOptions,
): BlockGraph {
  const { h } = spec;
  const x = g.input({ name: 'hidden', elemType: F, dims: ['batch_size', 'sequence_length', h.hidden] });
  const mask = g.input({
    name: 'attention_mask',
    elemType: ONNX_DTYPE.INT64,
    dims: ['batch_size', 'sequence_length'],
  });
  const ctx = attentionContext(g, spec, mask, options.maxPositions);
  let tapped: TapPoint | undefined;
  const taps: TapPoint[] = [];
  const tap: TapSink = (value, stage, weights, features, name) => {
    if (options.capture) {
      g.output(value, { name: stage, elemType: F, dims: ['batch_size', 'sequence_length', features] });
      taps.push({ name, weights, features, input: stage });
    }
    if (stage !== options.stage) return;
    // [batch, sequence, in] → [tokens, in] → XᵀX [in, in], the sum GPTQ's Hessian is made of
    const rows = g.op('Reshape', [value, g.int64([-1, features])], `${name}/gram/Reshape`);
    const t = g.op('Transpose', [rows], `${name}/gram/Transpose`, { perm: [1, 0] });
    const gram = g.op('MatMul', [t, rows], `${name}/gram/MatMul`);
    g.output(gram, { name: 'gram', elemType: F, dims: [features, features] });
    const abs = g.op('Abs', [rows], `${name}/abs`);
    g.output(g.op('ReduceSum', [abs, g.int64([0])], `${name}/abs_sum`, { keepdims: 0 }), {
      name: 'abs_sum',
      elemType: F,
      dims: [features],
    });
    tapped = { name, weights, features };
  };
  const result = buildLayer(g, spec, w, options.layer, x, ctx, ['', ''], tap, options.stage);
  if (options.stage !== undefined) return { outputs: ['gram', 'abs_sum'], tap: tapped! };
  g.output(result!.x, { name: 'hidden_out', elemType: F, dims: ['batch_size', 'sequence_length', h.hidden] });
  return options.capture ? { outputs: ['hidden_out', ...STAGES], taps } : { outputs: ['hidden_out'] };
}

/**
 * A part of layer `layer` alone, from its normed input `hidden` to its output `module_out` (what
 * AutoAWQ's searches compare): 'attention', q/k/v to o_proj; 'mlp', gate/up to down_proj.
 */
export function buildModule(
  g: GraphBuilder,
  spec: DecoderSpec,
  w: DecoderWeights,
  part: 'attention' | 'mlp',
  layer: number,
  maxPositions: number,
): void {
  const { h } = spec;
  const x = g.input({ name: 'hidden', elemType: F, dims: ['batch_size', 'sequence_length', h.hidden] });
  const none: TapSink = () => {};
  let out: string;
  if (part === 'attention') {
    const mask = g.input({
      name: 'attention_mask',
      elemType: ONNX_DTYPE.INT64,
      dims: ['batch_size', 'sequence_length'],
    });
    const ctx = attentionContext(g, spec, mask, maxPositions);
    out = buildAttention(g, spec, w, layer, x, ctx, ['', ''], none)!.out;
  } else {
    out = buildMlp(g, spec, w, layer, x, none)!;
  }
  g.output(out, { name: 'module_out', elemType: F, dims: ['batch_size', 'sequence_length', h.hidden] });
}
