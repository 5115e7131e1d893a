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
import { encodeModel } from '../../format/onnx.js';
import { buildBlock, STAGES, type Stage, type TapPoint } from '../decoder/graph.js';
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

  async close(): Promise<void> {
    for (const s of this.sessions.values()) await s.close().catch(() => undefined);
    this.sessions.clear();
  }

  private tensor(name: string): CheckpointTensor {
    return this.checkpoint.tensors.find((t) => t.entry.name === name)!;
  }

  private key(i: number, stage: Stage | undefined): string {
    return `${this.representative(i)}:${stage ?? 'output'}`;
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

  private async session(i: number, stage: Stage | undefined): Promise<GraphSession> {
    const key = this.key(i, stage);
    const known = this.sessions.get(key);
    if (known) return known;
    const layer = this.representative(i);
    const shapes = new Map<string, readonly number[]>();
    const prefix = layerPrefix(layer);
    for (const t of this.checkpoint.tensors) {
      if (t.ggufName !== null && t.entry.name.startsWith(prefix)) shapes.set(t.entry.name, t.entry.shape);
    }
    const g = new GraphBuilder();
    const block = buildBlock(g, this.spec, inputWeights(shapes), {
      layer,
      maxPositions: this.ctx.seqLen,
      ...(stage !== undefined && { stage }),
    });
    if (block.tap) this.taps.set(key, block.tap);
    const bytes = encodeModel({
      irVersion: 10,
      opsets: DECODER_OPSETS,
      producerName: 'quantd',
      producerVersion: '',
      docString: '',
      metadata: [],
      graphName: `block_${key}`,
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
