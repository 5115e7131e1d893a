/**
 * GPTQ's statistics computed the way GPTQ computes them (AutoGPTQ's quantize()): layer by layer,
 * each layer's inputs produced by the layers before it already quantized, and with
 * true_sequential (the default) within a layer too: q/k/v from the layer's input, then o_proj's
 * input with q/k/v quantized, then gate/up with the attention quantized, then down_proj's with
 * gate/up quantized. Each stage's Hessian (Σ xᵀx over the calibration tokens) is written to a
 * layer statistics file (src/format/layer-stats.ts) as the stage is done, and the stage's weights
 * are quantized with it by the gptq layout's own encoder (the worker pool's `gptq` task, then
 * `gptq-decode`), so the weights the later layers see are exactly those the gptq layout then
 * writes from the same file and options.
 */
import { gptqShapes, type GptqParams } from '../../core/interop/gptq.js';
import type { LinearStats } from '../../core/linear-stats.js';
import { QuantdError } from '../../errors/index.js';
import { SafetensorsFileWriter, type TensorPlan } from '../../format/index.js';
import { LAYER_STATS_KEY } from '../../format/layer-stats.js';
import { LINEAR_WEIGHT } from '../layouts/linear-common.js';
import type { CalibrationContext } from './context.js';
import { encodeOnPool } from './encode.js';
import { LayerRunner, STAGES, type StageStats } from './layers.js';

export interface GptqCalibrationOptions {
  readonly params: GptqParams;
  readonly damp: number;
  readonly actOrder: boolean;
  /** Quantize a layer's stages one after another (AutoGPTQ's true_sequential, default true). */
  readonly trueSequential: boolean;
}

const bytesOf = (a: ArrayBufferView): Uint8Array => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);

/** W [out, in] quantized with GPTQ on `stats` and dequantized: what the gptq layout stores. */
async function quantizeWeight(
  name: string,
  w: Float32Array,
  shape: readonly number[],
  stats: LinearStats,
  options: GptqCalibrationOptions,
  ctx: CalibrationContext,
): Promise<Float32Array> {
  const s = gptqShapes(name, shape, options.params);
  const size = (d: readonly number[]): number => d.reduce((a, b) => a * b, 4);
  const [[qweight, qzeros, scales, gIdx]] = await encodeOnPool(
    ctx,
    {
      kind: 'gptq',
      tensor: name,
      shape,
      dtype: 'float32',
      params: options.params,
      calibration: { name: `${name} input`, stats, damp: options.damp, actOrder: options.actOrder },
    },
    [bytesOf(w)],
    [size(s.qweight), size(s.qzeros), s.scales[0] * s.scales[1] * 2, size(s.gIdx)],
  );
  const [out, inF] = shape as [number, number];
  const [[decoded]] = await encodeOnPool(
    ctx,
    {
      kind: 'gptq-decode',
      source: 'calibration',
      module: name,
      scales: 'F16',
      out,
      inF,
      groups: s.groups,
      bits: options.params.bits,
    },
    [qweight!, qzeros!, scales!, gIdx!],
    [out * inF * 4],
  );
  // a copy in ordinary memory: ONNX Runtime does not take SharedArrayBuffer views
  return Float32Array.from(new Float32Array(decoded!.buffer, decoded!.byteOffset, out * inF));
}

/** The activation name a weight's statistics are written under (`M.weight` → `M.input`). */
const activationOf = (weight: string): string => `${weight.replace(/\.weight$/, '')}.input`;

/**
 * Runs GPTQ's calibration over `windows` and writes the statistics file to `output`. Returns the
 * weights quantized (those of the gptq layout's selection), by name.
 */
export async function calibrateGptq(
  runner: LayerRunner,
  windows: readonly Int32Array[],
  output: string,
  options: GptqCalibrationOptions,
  ctx: CalibrationContext,
): Promise<string[]> {
  const { h } = runner.spec;
  // the file's plan, known up front: every quantizable weight of every layer, in layer order
  const plan: TensorPlan[] = [];
  const planned: string[] = [];
  for (let i = 0; i < h.layers; i++) {
    for (const { name, shape } of runner.matrices(i)) {
      if (!LINEAR_WEIGHT.test(name)) continue;
      const k = shape[1]!;
      const a = activationOf(name);
      planned.push(name);
      plan.push(
        { name: `${a}.hessian`, dtype: 'F64', shape: [k, k] },
        { name: `${a}.abs_sum`, dtype: 'F64', shape: [k] },
        { name: `${a}.tokens`, dtype: 'F64', shape: [1] },
      );
    }
  }
  if (planned.length === 0) {
    throw new QuantdError('NO_TENSOR_SELECTED', {
      detail: 'the model has no linear projection GPTQ quantizes (q/k/v/o_proj, gate/up/down_proj)',
    });
  }
  const writer = await SafetensorsFileWriter.create(output, plan, {
    [LAYER_STATS_KEY]: '1',
    'quantd.calibration': 'gptq',
    'quantd.gptq': JSON.stringify({
      bits: options.params.bits,
      group_size: options.params.groupSize,
      sym: options.params.sym,
      damp_percent: options.damp,
      desc_act: options.actOrder,
      true_sequential: options.trueSequential,
    }),
  });
  const written = new Map<string, StageStats>();
  try {
    let hidden = await runner.embeddings(windows);
    for (let i = 0; i < h.layers; i++) {
      const weights = await runner.layerWeights(i);
      const quantizeStage = async (s: StageStats): Promise<void> => {
        for (const graphName of s.tap.weights) {
          const name = runner.nameIn(i, graphName);
          if (!LINEAR_WEIGHT.test(name)) continue;
          written.set(name, s);
          const feed = weights.get(graphName)!;
          const q = await quantizeWeight(name, feed.data, feed.dims, s.stats, options, ctx);
          weights.set(graphName, { data: q, dims: feed.dims });
        }
      };
      const stages: StageStats[] = [];
      for (const stage of STAGES) {
        ctx.onProgress?.(`GPTQ layer ${i + 1}/${h.layers}`, i * 5 + stages.length, h.layers * 5);
        const s = await runner.stageStats(i, stage, weights, hidden);
        stages.push(s);
        if (options.trueSequential) await quantizeStage(s);
      }
      if (!options.trueSequential) for (const s of stages) await quantizeStage(s);
      hidden = await runner.forward(i, weights, hidden);
      // this layer's statistics, in the plan's order
      for (const name of planned.filter((n) => n.startsWith(`model.layers.${i}.`))) {
        const s = written.get(name)!;
        const a = activationOf(name);
        await writer.write(`${a}.hessian`, bytesOf(s.stats.hessian));
        await writer.write(`${a}.abs_sum`, bytesOf(s.stats.absSum));
        await writer.write(`${a}.tokens`, bytesOf(Float64Array.of(s.stats.tokens)));
        written.delete(name);
      }
    }
    await writer.commit();
  } catch (err) {
    await writer.abort();
    throw err;
  }
  ctx.onProgress?.('GPTQ', h.layers * 5, h.layers * 5);
  return planned;
}
