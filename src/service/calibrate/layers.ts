/**
 * A model run layer by layer, as GPTQ and AWQ calibrate: the calibration windows' hidden states
 * are held in memory, each layer runs on them in ONNX Runtime (a block graph whose weights are
 * inputs, src/service/decoder/graph.ts buildBlock, so that one session runs every layer with the
 * weights the caller gives: float, or already quantized), and its output becomes the next
 * layer's input. A stage's run gives the statistics of one linear input (Σ xᵀx, Σ |x|, tokens).
 *
 * Memory: the hidden states of every window twice (input and output of a layer: windows × seqLen
 * × hidden × 4 bytes each), one layer's weights in float32, and one stage's statistics.
 */
import { toFloat32 } from '../../core/tensor.js';
import { floatDTypeOfSt } from '../../core/dtypes.js';
import type { LinearStats } from '../../core/linear-stats.js';
import { throwIfAborted } from '../../errors/index.js';
import { GraphBuilder } from '../../format/onnx-graph.js';
import { encodeModel, ONNX_DTYPE } from '../../format/onnx.js';
import { buildBlock, buildModule, STAGES, type Stage, type TapPoint } from '../decoder/graph.js';
import type { DecoderSpec } from '../decoder/spec.js';
import { inputWeights } from '../decoder/weights.js';
import { GraphSession, type FloatFeed } from '../engines/onnxruntime.js';
import type { Checkpoint, CheckpointTensor } from '../layouts/gguf-hf/checkpoint.js';
import { DECODER_OPSETS } from '../layouts/onnx-decoder.js';
import type { CalibrationContext } from './context.js';

export { STAGES, type Stage };

const layerPrefix = (i: number): string => `model.layers.${i}.`;

/** A layer's tensors in float32, by their names in the representative layer's block graph. */
export type LayerWeights = Map<string, FloatFeed>;

/** A stage's statistics and the linear input they describe. */
export interface StageStats {
  readonly tap: TapPoint;
  readonly stats: LinearStats;
}

export class LayerRunner {
  private readonly sessions = new Map<string, GraphSession>();
  private readonly taps = new Map<string, TapPoint>();

  constructor(
    readonly spec: DecoderSpec,
    private readonly checkpoint: Checkpoint,
    private readonly ctx: CalibrationContext,
  ) {}

  /** The layer whose block graphs run layer `i`: the first with the same attention window. */
  representative(i: number): number {
    return this.spec.windows.indexOf(this.spec.windows[i]!);
  }

  /** Layer 0's input for each window: the token embeddings (scaled as Gemma scales them). */
  async embeddings(windows: readonly Int32Array[]): Promise<Float32Array[]> {
    const { hidden } = this.spec.h;
    const t = this.tensor('model.embed_tokens.weight');
    const table = toFloat32(await t.reader.read(t.entry), floatDTypeOfSt(t.entry.dtype)!);
    const scale = Math.fround(Math.sqrt(hidden));
    return windows.map((ids) => {
      const x = new Float32Array(ids.length * hidden);
      ids.forEach((id, p) => {
        const row = table.subarray(id * hidden, (id + 1) * hidden);
        if (this.spec.gemma)
          for (let c = 0; c < hidden; c++) x[p * hidden + c] = Math.fround(row[c]! * scale);
        else x.set(row, p * hidden);
      });
      return x;
    });
  }

  /** Layer `i`'s tensors in float32, named as the representative layer's block graph reads them. */
  async layerWeights(i: number): Promise<LayerWeights> {
    const from = layerPrefix(i);
    const to = layerPrefix(this.representative(i));
    const weights: LayerWeights = new Map();
    for (const t of this.checkpoint.tensors) {
      if (t.ggufName === null || !t.entry.name.startsWith(from)) continue;
      const data = toFloat32(await t.reader.read(t.entry), floatDTypeOfSt(t.entry.dtype)!);
      // a view of a float32 file's bytes may be unaligned or shared: ONNX Runtime gets its own copy
      weights.set(to + t.entry.name.slice(from.length), {
        data: Float32Array.from(data),
        dims: t.entry.shape,
      });
    }
    return weights;
  }

  /** Layer `i`'s 2-D tensors (its linear weights) in checkpoint order: names and shapes. */
  matrices(i: number): Array<{ readonly name: string; readonly shape: readonly number[] }> {
    const prefix = layerPrefix(i);
    return this.checkpoint.tensors
      .filter((t) => t.ggufName !== null && t.entry.name.startsWith(prefix) && t.entry.shape.length === 2)
      .map((t) => ({ name: t.entry.name, shape: t.entry.shape }));
  }

  /** Layer `i`'s tensors (those of the network) by name, with their shapes. */
  layerShapes(i: number): Array<[string, readonly number[]]> {
    const prefix = layerPrefix(i);
    return this.checkpoint.tensors
      .filter((t) => t.ggufName !== null && t.entry.name.startsWith(prefix))
      .map((t) => [t.entry.name, t.entry.shape]);
  }

  /** The name in its representative's block graph of layer `i`'s tensor `name`. */
  graphName(i: number, name: string): string {
    const from = layerPrefix(i);
    return name.startsWith(from) ? layerPrefix(this.representative(i)) + name.slice(from.length) : name;
  }

  /** The name in layer `i` of a tensor named in its representative's block graph. */
  nameIn(i: number, graphName: string): string {
    const to = layerPrefix(this.representative(i));
    return graphName.startsWith(to) ? layerPrefix(i) + graphName.slice(to.length) : graphName;
  }

  /** Σ xᵀx, Σ |x| and tokens of stage `stage`'s linear input of layer `i`, over every window. */
  async stageStats(
    i: number,
    stage: Stage,
    weights: LayerWeights,
    hidden: readonly Float32Array[],
  ): Promise<StageStats> {
    const session = await this.session(i, stage);
    const tap = this.taps.get(this.key(i, stage))!;
    const k = tap.features;
    const hessian = new Float64Array(k * k);
    const absSum = new Float64Array(k);
    let tokens = 0;
    for (const x of hidden) {
      throwIfAborted(this.ctx.signal);
      const out = await this.run(session, weights, x, ['gram', 'abs_sum']);
      const gram = out['gram']!;
      for (let j = 0; j < gram.length; j++) hessian[j]! += gram[j]!;
      const abs = out['abs_sum']!;
      for (let j = 0; j < k; j++) absSum[j]! += abs[j]!;
      tokens += x.length / this.spec.h.hidden;
    }
    return { tap, stats: { inFeatures: k, tokens, hessian, absSum } };
  }

  /** Layer `i`'s output for each window's input. */
  async forward(i: number, weights: LayerWeights, hidden: readonly Float32Array[]): Promise<Float32Array[]> {
    const session = await this.session(i, undefined);
    const out: Float32Array[] = [];
    for (const x of hidden) {
      throwIfAborted(this.ctx.signal);
      out.push((await this.run(session, weights, x, ['hidden_out']))['hidden_out']!);
    }
    return out;
  }

  /**
   * Layer `i` on each window: its output, and each stage's linear input (by stage name), the
   * float layer's (what AWQ's searches take).
   */
  async capture(
    i: number,
    weights: LayerWeights,
    hidden: readonly Float32Array[],
  ): Promise<{ hidden: Float32Array[]; inputs: Map<Stage, Float32Array[]> }> {
    const session = await this.session(i, undefined, true);
    const out: Float32Array[] = [];
    const inputs = new Map<Stage, Float32Array[]>(STAGES.map((s) => [s, []]));
    for (const x of hidden) {
      throwIfAborted(this.ctx.signal);
      const r = await this.run(session, weights, x, ['hidden_out', ...STAGES]);
      out.push(r['hidden_out']!);
      for (const s of STAGES) inputs.get(s)!.push(r[s]!);
    }
    return { hidden: out, inputs };
  }

  /** The attention or the MLP of layer `i` alone on each window's normed input `x`. */
  async module(
    i: number,
    part: 'attention' | 'mlp',
    weights: LayerWeights,
    x: readonly Float32Array[],
  ): Promise<Float32Array[]> {
    const session = await this.moduleSession(i, part);
    const out: Float32Array[] = [];
    for (const v of x) {
      throwIfAborted(this.ctx.signal);
      out.push((await this.run(session, weights, v, ['module_out']))['module_out']!);
    }
    return out;
  }

  /** The features of a stage's linear input. */
  features(stage: Stage): number {
    const { h } = this.spec;
    return stage === 'attention_output' ? h.heads * h.headDim : stage === 'mlp_hidden' ? h.ffn : h.hidden;
  }

  /** Σ xᵀx, Σ |x| and tokens of rows `xs` (each [tokens, k] flattened) of `k` features. */
  async gram(xs: readonly Float32Array[], k: number): Promise<LinearStats> {
    const session = await this.gramSession(k);
    const hessian = new Float64Array(k * k);
    const absSum = new Float64Array(k);
    let tokens = 0;
    for (const x of xs) {
      throwIfAborted(this.ctx.signal);
      const r = await session.run(
        new Map([['x', { data: x, dims: [x.length / k, k] }]]),
        { batch: 1, sequence: 1 },
        ['gram', 'abs_sum'],
      );
      const gram = r['gram']!;
      for (let j = 0; j < gram.length; j++) hessian[j]! += gram[j]!;
      const abs = r['abs_sum']!;
      for (let j = 0; j < k; j++) absSum[j]! += abs[j]!;
      tokens += x.length / k;
    }
    return { inFeatures: k, tokens, hessian, absSum };
  }

  async close(): Promise<void> {
    for (const s of this.sessions.values()) await s.close().catch(() => undefined);
    this.sessions.clear();
  }

  private tensor(name: string): CheckpointTensor {
    return this.checkpoint.tensors.find((t) => t.entry.name === name)!;
  }

  private key(i: number, stage: Stage | undefined, capture = false): string {
    return `${this.representative(i)}:${capture ? 'capture' : (stage ?? 'output')}`;
  }

  private run(
    session: GraphSession,
    weights: LayerWeights,
    x: Float32Array,
    outputs: readonly string[],
  ): Promise<Record<string, Float32Array>> {
    const sequence = x.length / this.spec.h.hidden;
    const feeds = new Map(weights);
    feeds.set('hidden', { data: x, dims: [1, sequence, this.spec.h.hidden] });
    return session.run(feeds, { batch: 1, sequence }, outputs);
  }

  private async session(i: number, stage: Stage | undefined, capture = false): Promise<GraphSession> {
    const key = this.key(i, stage, capture);
    const layer = this.representative(i);
    return this.cached(key, (g) => {
      const block = buildBlock(g, this.spec, inputWeights(this.shapesOf(layer)), {
        layer,
        maxPositions: this.ctx.seqLen,
        ...(stage !== undefined && { stage }),
        capture,
      });
      if (block.tap) this.taps.set(key, block.tap);
    });
  }

  private moduleSession(i: number, part: 'attention' | 'mlp'): Promise<GraphSession> {
    const layer = this.representative(i);
    return this.cached(`${layer}:${part}`, (g) =>
      buildModule(g, this.spec, inputWeights(this.shapesOf(layer)), part, layer, this.ctx.seqLen),
    );
  }

  /** x [tokens, k] → `gram` XᵀX [k, k] and `abs_sum` Σ |x| [k]. */
  private gramSession(k: number): Promise<GraphSession> {
    return this.cached(`gram:${k}`, (g) => {
      const x = g.input({ name: 'x', elemType: ONNX_DTYPE.FLOAT, dims: ['tokens', k] });
      const t = g.op('Transpose', [x], 'gram/Transpose', { perm: [1, 0] });
      g.output(g.op('MatMul', [t, x], 'gram/MatMul'), {
        name: 'gram',
        elemType: ONNX_DTYPE.FLOAT,
        dims: [k, k],
      });
      const abs = g.op('Abs', [x], 'abs');
      g.output(g.op('ReduceSum', [abs, g.int64([0])], 'abs_sum', { keepdims: 0 }), {
        name: 'abs_sum',
        elemType: ONNX_DTYPE.FLOAT,
        dims: [k],
      });
    });
  }

  private shapesOf(layer: number): Map<string, readonly number[]> {
    const shapes = new Map<string, readonly number[]>();
    const prefix = layerPrefix(layer);
    for (const t of this.checkpoint.tensors) {
      if (t.ggufName !== null && t.entry.name.startsWith(prefix)) shapes.set(t.entry.name, t.entry.shape);
    }
    return shapes;
  }

  /** The session of `key`, built by `build` into a new graph the first time. */
  private async cached(key: string, build: (g: GraphBuilder) => void): Promise<GraphSession> {
    const known = this.sessions.get(key);
    if (known) return known;
    const g = new GraphBuilder();
    build(g);
    const bytes = encodeModel({
      irVersion: 10,
      opsets: DECODER_OPSETS,
      producerName: 'quantd',
      producerVersion: '',
      docString: '',
      metadata: [],
      graphName: `calibration_${key.replace(/\W/g, '_')}`,
      nodes: g.nodes,
      inputs: g.inputs,
      outputs: g.outputs,
      initializers: g.inline,
    });
    const session = await GraphSession.open(bytes, this.ctx.purpose, this.ctx.ort);
    this.sessions.set(key, session);
    return session;
  }
}
