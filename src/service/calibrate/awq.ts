/**
 * AWQ calibrated as AutoAWQ calibrates (its quantize(): per layer, _search_best_scale for each
 * group of layers sharing an input, then apply_scale and _search_best_clip), the scales chosen on
 * the output of the block they feed over the calibration tokens — the attention's output for
 * q/k/v, the MLP's output for gate/up, the linear layer's own output for o (after v) and down
 * (after up) — not on each linear layer alone. Layers run in ONNX Runtime: the float layer once
 * to capture every linear input and the next layer's input (AutoAWQ's inputs are the float
 * model's), then the attention or the MLP alone (src/service/decoder/graph.ts buildModule) for
 * each candidate's pseudo-quantized weights; a linear layer's own output error is a quadratic
 * form of its input's Hessian, searched on the worker pool (the `awq-scales` task).
 *
 * Candidates: round-to-nearest (s = 1) first, then α = 0, 1/20, …, 19/20 of
 * s = x̄^α / (w̄^(1−α) + 1e-4); a candidate replaces the best so far only with a strictly smaller
 * loss, so the search never picks worse than round-to-nearest on the loss it optimises.
 *
 * The file written is a layer statistics file (src/format/layer-stats.ts: each linear input's
 * Σ xᵀx, Σ |x| and tokens, for the clipping search and the report's output error) that also holds
 * the scales chosen, which the awq layout applies instead of searching (`--layout
 * awq:calibration=FILE`): `M.awq_scales` (the columns of M multiplied), `P.awq_rows` (the rows of
 * the producer P divided), `T.awq_divide` (a norm's weight or bias, a producer's bias, divided).
 * The clipping search (no clipping its first candidate) is the layout's own, on those Hessians.
 */
import { candidateScales, pseudoQuantizeRows, weightMeans } from '../../core/interop/awq-search.js';
import type { LinearStats } from '../../core/linear-stats.js';
import { QuantdError } from '../../errors/index.js';
import { SafetensorsFileWriter, type TensorPlan } from '../../format/index.js';
import { AWQ_SCALES_KEY, LAYER_STATS_KEY } from '../../format/layer-stats.js';
import type { DecoderSpec } from '../decoder/spec.js';
import { scalingGroups, type ScalingGroup } from '../layouts/awq-plan.js';
import { LINEAR_WEIGHT } from '../layouts/linear-common.js';
import type { CalibrationContext } from './context.js';
import { encodeOnPool } from './encode.js';
import type { LayerRunner, LayerWeights } from './layers.js';

export interface AwqCalibrationOptions {
  /** Input columns per group (-1: one group per row). */
  readonly groupSize: number;
  readonly nGrid: number;
}

export const AWQ_GRID = 20;

/** The architectures whose norms and projections AWQ's folds fit (AutoAWQ's llama family). */
export function checkAwqArchitecture(spec: DecoderSpec): void {
  if (spec.gemma || spec.fused) {
    throw new QuantdError('FEATURE_UNSUPPORTED', {
      detail: `AWQ calibration from text supports Llama, Mistral, Qwen 2 and Qwen 3 (not ${spec.className}: ${spec.gemma ? 'its norms scale by 1 + w' : 'its projections are fused'})`,
    });
  }
}

type StageName = 'attention_input' | 'attention_output' | 'mlp_input' | 'mlp_hidden';

/** Which stage's captured input the linear module `m` reads. */
function stageOf(m: string): StageName {
  if (/\.self_attn\.[qkv]_proj$/.test(m)) return 'attention_input';
  if (/\.self_attn\.o_proj$/.test(m)) return 'attention_output';
  if (/\.mlp\.(?:gate|up)_proj$/.test(m)) return 'mlp_input';
  return 'mlp_hidden';
}

const partOf = (g: ScalingGroup): 'attention' | 'mlp' | null =>
  g.members.length > 1 ? (/\.self_attn\./.test(g.members[0]!) ? 'attention' : 'mlp') : null;

const f64 = (a: Float64Array): Uint8Array => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
const moduleOf = (weight: string): string => weight.replace(/\.weight$/, '');

/** W·diag(s), pseudo-quantized by AWQ's group quantizer, ·diag(1/s), as float32. */
function scaledQuantized(
  w: Float32Array,
  out: number,
  inF: number,
  s: Float64Array,
  groupSize: number,
): Float32Array {
  const q = Float64Array.from(w, (v, e) => v * s[e % inF]!);
  pseudoQuantizeRows(q, out, inF, { bits: 4, groupSize, zeroPoint: true });
  return Float32Array.from(q, (v, e) => v / s[e % inF]!);
}

/** Mean squared error of `y` from `reference`, each a list of per-window outputs. */
function mse(reference: readonly Float32Array[], y: readonly Float32Array[]): number {
  let sum = 0;
  let n = 0;
  reference.forEach((r, k) => {
    const v = y[k]!;
    for (let i = 0; i < r.length; i++) sum += (r[i]! - v[i]!) ** 2;
    n += r.length;
  });
  return sum / n;
}

/** The scales, and which candidate won (-1: round-to-nearest) with its loss and round-to-nearest's. */
interface Choice {
  readonly scales: Float64Array;
  readonly step: number;
  readonly loss: number;
  readonly rtn: number;
  /** The pool search's own account of what it chose (a linear layer's search). */
  readonly note?: string;
}

/** The block search of a group whose members feed the attention or the MLP. */
async function blockSearch(
  runner: LayerRunner,
  i: number,
  part: 'attention' | 'mlp',
  g: ScalingGroup,
  weights: LayerWeights,
  x: readonly Float32Array[],
  input: LinearStats,
  options: AwqCalibrationOptions,
): Promise<Choice> {
  const names = g.members.map((m) => runner.graphName(i, `${m}.weight`));
  const feeds = names.map((n) => weights.get(n)!);
  const [, inF] = feeds[0]!.dims as [number, number];
  const gs = options.groupSize === -1 ? inF : options.groupSize;
  const rows = feeds.map((f) => f.dims[0]!);
  const reference = await runner.module(i, part, weights, x);
  const loss = async (s: Float64Array): Promise<number> => {
    const trial: LayerWeights = new Map(weights);
    names.forEach((n, k) => {
      trial.set(n, { data: scaledQuantized(feeds[k]!.data, rows[k]!, inF, s, gs), dims: feeds[k]!.dims });
    });
    return mse(reference, await runner.module(i, part, trial, x));
  };
  const xMean = Float64Array.from(input.absSum, (v) => v / input.tokens);
  const wMean = weightMeans(
    feeds.map((f) => f.data),
    rows,
    inF,
    gs,
  );
  let best: Choice = { scales: new Float64Array(inF).fill(1), step: -1, loss: 0, rtn: 0 };
  const rtn = await loss(best.scales);
  best = { ...best, loss: rtn, rtn };
  for (let step = 0; step < options.nGrid; step++) {
    const s = candidateScales(xMean, wMean, step / options.nGrid);
    const l = await loss(s);
    if (l < best.loss) best = { scales: s, step, loss: l, rtn };
  }
  return best;
}

/** The search of a group of one linear layer (o after v, down after up): its own output error. */
async function linearSearch(
  runner: LayerRunner,
  i: number,
  g: ScalingGroup,
  weights: LayerWeights,
  input: LinearStats,
  options: AwqCalibrationOptions,
  ctx: CalibrationContext,
): Promise<Choice> {
  const feed = weights.get(runner.graphName(i, `${g.members[0]!}.weight`))!;
  const [out, inF] = feed.dims as [number, number];
  const [bytes, notes] = await encodeOnPool(
    ctx,
    {
      kind: 'awq-scales',
      tensors: [`${g.members[0]!}.weight`],
      dtypes: ['float32'],
      rows: [out],
      inF,
      params: { groupSize: options.groupSize },
      input: { name: `${g.members[0]!}.input`, stats: input },
    },
    [new Uint8Array(feed.data.buffer, feed.data.byteOffset, feed.data.byteLength)],
    [8 * inF],
  );
  const scales = Float64Array.from(new Float64Array(bytes[0]!.buffer, bytes[0]!.byteOffset, inF));
  return { scales, step: NaN, loss: NaN, rtn: NaN, ...(notes[0] !== undefined && { note: notes[0] }) };
}

/**
 * Runs AWQ's searches over `windows` and writes the statistics and decisions to `output`;
 * returns a note per group (which candidate won, and by how much).
 */
export async function calibrateAwq(
  runner: LayerRunner,
  windows: readonly Int32Array[],
  output: string,
  options: AwqCalibrationOptions,
  ctx: CalibrationContext,
): Promise<string[]> {
  checkAwqArchitecture(runner.spec);
  const { h } = runner.spec;
  // the file's plan, known up front: each linear input's statistics, each group's decisions
  const plan: TensorPlan[] = [];
  const layerGroups: ScalingGroup[][] = [];
  for (let i = 0; i < h.layers; i++) {
    const shapes = new Map(runner.layerShapes(i));
    for (const { name, shape } of runner.matrices(i)) {
      if (!LINEAR_WEIGHT.test(name)) continue;
      const a = `${moduleOf(name)}.input`;
      const k = shape[1]!;
      plan.push(
        { name: `${a}.hessian`, dtype: 'F64', shape: [k, k] },
        { name: `${a}.abs_sum`, dtype: 'F64', shape: [k] },
        { name: `${a}.tokens`, dtype: 'F64', shape: [1] },
      );
    }
    const groups = scalingGroups(shapes);
    layerGroups.push(groups);
    for (const g of groups) {
      const k = shapes.get(`${g.members[0]!}.weight`)![1]!;
      for (const m of g.members) plan.push({ name: `${m}.awq_scales`, dtype: 'F64', shape: [k] });
      for (const t of g.norm) plan.push({ name: `${t}.awq_divide`, dtype: 'F64', shape: [k] });
      if (g.producer !== null) {
        plan.push({ name: `${g.producer}.awq_rows`, dtype: 'F64', shape: [k] });
        if (shapes.has(`${g.producer}.bias`))
          plan.push({ name: `${g.producer}.bias.awq_divide`, dtype: 'F64', shape: [k] });
      }
    }
  }
  const writer = await SafetensorsFileWriter.create(output, plan, {
    [LAYER_STATS_KEY]: '1',
    [AWQ_SCALES_KEY]: '1',
    'quantd.calibration': 'awq',
    'quantd.awq': JSON.stringify({
      group_size: options.groupSize,
      n_grid: options.nGrid,
      loss: 'block output',
    }),
  });
  const notes: string[] = [];
  try {
    let hidden = await runner.embeddings(windows);
    for (let i = 0; i < h.layers; i++) {
      ctx.onProgress?.(`AWQ layer ${i + 1}/${h.layers}`, i, h.layers);
      const weights = await runner.layerWeights(i);
      const captured = await runner.capture(i, weights, hidden);
      hidden = captured.hidden;
      const stats = new Map<StageName, LinearStats>();
      for (const [stage, x] of captured.inputs)
        stats.set(stage as StageName, await runner.gram(x, runner.features(stage)));
      // every search on the layer's original weights, as AutoAWQ's; then written in plan order
      const choices = new Map<ScalingGroup, Choice>();
      for (const g of layerGroups[i]!) {
        const stage = stageOf(g.members[0]!);
        const part = partOf(g);
        const choice =
          part === null
            ? await linearSearch(runner, i, g, weights, stats.get(stage)!, options, ctx)
            : await blockSearch(
                runner,
                i,
                part,
                g,
                weights,
                captured.inputs.get(stage)!,
                stats.get(stage)!,
                options,
              );
        choices.set(g, choice);
        const what = `${part} output`;
        notes.push(
          choice.note !== undefined
            ? `${g.members.join(', ')}: ${choice.note}`
            : choice.step < 0
              ? `${g.members.join(', ')}: round-to-nearest kept${Number.isNaN(choice.rtn) ? '' : ` (its ${what} error ${choice.rtn.toExponential(3)} not beaten)`}`
              : `${g.members.join(', ')}: α = ${choice.step / options.nGrid}${Number.isNaN(choice.loss) ? '' : `, ${what} error ${choice.loss.toExponential(3)} (round-to-nearest ${choice.rtn.toExponential(3)})`}`,
        );
      }
      for (const { name } of runner.matrices(i)) {
        if (!LINEAR_WEIGHT.test(name)) continue;
        const s = stats.get(stageOf(moduleOf(name)))!;
        const a = `${moduleOf(name)}.input`;
        await writer.write(`${a}.hessian`, f64(s.hessian));
        await writer.write(`${a}.abs_sum`, f64(s.absSum));
        await writer.write(`${a}.tokens`, f64(Float64Array.of(s.tokens)));
      }
      for (const g of layerGroups[i]!) {
        const { scales } = choices.get(g)!;
        for (const _m of g.members) await writer.write(`${_m}.awq_scales`, f64(scales));
        for (const t of g.norm) await writer.write(`${t}.awq_divide`, f64(scales));
        if (g.producer !== null) {
          await writer.write(`${g.producer}.awq_rows`, f64(scales));
          if (plan.some((p) => p.name === `${g.producer}.bias.awq_divide`)) {
            await writer.write(`${g.producer}.bias.awq_divide`, f64(scales));
          }
        }
      }
    }
    await writer.commit();
  } catch (err) {
    await writer.abort();
    throw err;
  }
  ctx.onProgress?.('AWQ', h.layers, h.layers);
  return notes;
}
