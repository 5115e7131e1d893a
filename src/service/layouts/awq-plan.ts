/**
 * The model-wide half of the awq layout with calibration: which layers share a scale vector and
 * where its inverse folds, and the scale searches themselves, run before any tensor is written
 * (a norm comes before its projections in a file, and its new values depend on them).
 *
 * The groups of a llama-like decoder layer P (AutoAWQ's for llama, mistral and qwen2), each
 * scaling the inputs of its members and dividing whatever produces those inputs:
 *
 *   P.input_layernorm            → q_proj, k_proj, v_proj     (norm weight, and bias, ÷ s)
 *   P.self_attn.v_proj           → o_proj                     (v's rows and bias ÷ s; only when
 *                                                              v.out = o.in: no grouped-query heads)
 *   P.post_attention_layernorm   → gate_proj, up_proj
 *   P.mlp.up_proj                → down_proj                  (up's rows and bias ÷ s)
 *
 * AutoAWQ searches every scale of a layer on the original weights, applies them all, then
 * clips: so the searches here read the unscaled weights, and a weight that is both scaled and
 * divided (up_proj) has both applied before its clipping. A group runs only where the statistics
 * file has its input; a sharded model's group may span two files, and each writes what it needs.
 */
import type { FloatDType } from '../../core/dtypes.js';
import type { AwqParams } from '../../core/interop/awq.js';
import { AWQ_SCALES_KEY, readLayerStats } from '../../format/layer-stats.js';
import { QuantdError } from '../../errors/index.js';
import { SafetensorsFileReader } from '../../format/safetensors-file.js';
import type { TensorEntry } from '../../format/safetensors.js';
import { typedView } from '../../core/tensor.js';
import { statsFor, type CalibrationIndex } from './calibration-stats.js';
import { floatDType } from './linear-common.js';
import type { Progress } from '../model.js';
import { runEncodeJobs, type EncodeJob, type JobSource, type LayoutHooks } from './run-jobs.js';

/** Layers that read one input, and what produces it. */
export interface ScalingGroup {
  /** the members' modules */
  readonly members: readonly string[];
  /** 1-D tensors divided elementwise by the scales: a norm's weight and bias */
  readonly norm: readonly string[];
  /** a projection whose output rows (weight rows and bias) are divided, or null */
  readonly producer: string | null;
}

/** What the searches decided, as each tensor of the file takes it. */
export interface AwqFolds {
  /**
   * module → its group's scales (its weight's columns are multiplied), the search's note, and the
   * statistics the group's input has (a member without its own clips on them)
   */
  readonly columns: ReadonlyMap<string, GroupScales>;
  /** module → the scales its output rows are divided by (a producer's) */
  readonly rows: ReadonlyMap<string, Float64Array>;
  /** tensor → the scales a 1-D tensor is divided by (a norm's weight or bias, a producer's bias) */
  readonly divide: ReadonlyMap<string, Float64Array>;
}

export interface GroupScales {
  readonly scales: Float64Array;
  readonly note: string;
  readonly input: StatsEntry;
}

type StatsEntry = NonNullable<ReturnType<typeof statsFor>>;

type Shapes = ReadonlyMap<string, readonly number[]>;

const inOf = (shapes: Shapes, m: string): number | undefined => {
  const s = shapes.get(`${m}.weight`);
  return s?.length === 2 ? s[1] : undefined;
};
const outOf = (shapes: Shapes, m: string): number | undefined => {
  const s = shapes.get(`${m}.weight`);
  return s?.length === 2 ? s[0] : undefined;
};

/** The groups of the model whose tensors have these shapes (see the file comment). */
export function scalingGroups(shapes: Shapes): ScalingGroup[] {
  const layers = new Set<string>();
  for (const name of shapes.keys()) {
    const m = /^(.*)\.(?:self_attn|mlp)\.[a-z]+_proj\.weight$/.exec(name);
    if (m) layers.add(m[1]!);
  }
  const groups: ScalingGroup[] = [];
  for (const p of layers) {
    const attn = ['q_proj', 'k_proj', 'v_proj'].map((x) => `${p}.self_attn.${x}`);
    const mlp = ['gate_proj', 'up_proj'].map((x) => `${p}.mlp.${x}`);
    const v = `${p}.self_attn.v_proj`;
    const o = `${p}.self_attn.o_proj`;
    const up = `${p}.mlp.up_proj`;
    const down = `${p}.mlp.down_proj`;
    const afterNorm = (norm: string, members: string[]): void => {
      const inF = inOf(shapes, members[0]!);
      if (inF === undefined || members.some((m) => inOf(shapes, m) !== inF)) return;
      const tensors = [`${norm}.weight`, `${norm}.bias`].filter((t) => shapes.has(t));
      if (tensors.length === 0 || tensors.some((t) => shapes.get(t)!.join() !== `${inF}`)) return;
      groups.push({ members, norm: tensors, producer: null });
    };
    afterNorm(`${p}.input_layernorm`, attn);
    if (outOf(shapes, v) !== undefined && outOf(shapes, v) === inOf(shapes, o)) {
      groups.push({ members: [o], norm: [], producer: v });
    }
    afterNorm(`${p}.post_attention_layernorm`, mlp);
    if (outOf(shapes, up) !== undefined && outOf(shapes, up) === inOf(shapes, down)) {
      groups.push({ members: [down], norm: [], producer: up });
    }
  }
  return groups;
}

/** Every tensor a group reads or changes. */
export function groupTensors(g: ScalingGroup): string[] {
  return [
    ...g.members.map((m) => `${m}.weight`),
    ...g.norm,
    ...(g.producer ? [`${g.producer}.weight`, `${g.producer}.bias`] : []),
  ];
}

interface ModelEntry {
  readonly reader: SafetensorsFileReader;
  readonly entry: TensorEntry;
}

/**
 * The scales of every group that touches the file `input` (of the model `files`) and whose input
 * the statistics have, searched on the pool (hooks.encoding) before anything is written.
 */
export async function planAwqScales(
  input: string,
  files: readonly string[],
  calibration: CalibrationIndex,
  params: AwqParams,
  hooks: LayoutHooks,
): Promise<AwqFolds> {
  const chosen = await chosenScales(calibration.path);
  const readers = await Promise.all(files.map((f) => SafetensorsFileReader.open(f)));
  try {
    const byName = new Map<string, ModelEntry>();
    for (const reader of readers) {
      for (const entry of reader.header.entries) byName.set(entry.name, { reader, entry });
    }
    const shapes = new Map([...byName].map(([name, e]) => [name, e.entry.shape]));
    const here = new Set(readers[files.indexOf(input)]?.header.entries.map((e) => e.name));
    const groups = scalingGroups(shapes).filter(
      (g) => groupTensors(g).some((t) => here.has(t)) && g.members.some((m) => statsFor(calibration, m)),
    );
    const notes = new Map<string, string>();
    const inputs = new Map<string, StatsEntry>();
    if (chosen !== null) {
      // the scales were chosen when the file was made (on the block's output): applied as they are
      const scales = new Map<string, Float64Array>();
      for (const g of groups) {
        const s = chosen.get(g.members[0]!);
        if (s === undefined) continue;
        scales.set(g.members[0]!, s);
        inputs.set(
          g.members[0]!,
          g.members.map((m) => statsFor(calibration, m)).find((e) => e !== undefined)!,
        );
        notes.set(
          g.members[0]!,
          s.every((v) => v === 1)
            ? 'AWQ: round-to-nearest kept (no scale beat it on the block output)'
            : 'AWQ scales chosen on the block output (quantd calibrate --awq)',
        );
      }
      return foldsOf(
        groups.filter((g) => scales.has(g.members[0]!)),
        scales,
        notes,
        inputs,
      );
    }
    const jobs = groups.map((g): EncodeJob<ModelEntry> => {
      const weights = g.members.map((m) => byName.get(`${m}.weight`)!);
      const inF = inOf(shapes, g.members[0]!)!;
      const stats = g.members.map((m) => statsFor(calibration, m)).find((s) => s !== undefined)!;
      inputs.set(g.members[0]!, stats);
      return {
        inputs: weights,
        outputs: [{ name: g.members[0]!, bytes: 8 * inF }],
        prepare: async () => ({
          kind: 'awq-scales',
          tensors: weights.map((w) => w.entry.name),
          dtypes: weights.map((w): FloatDType => floatDType(w.entry)),
          rows: weights.map((w) => w.entry.shape[0]!),
          inF,
          params,
          input: { name: stats.name, stats: await readLayerStats(stats.ref, stats.name) },
        }),
        prepareBytes: 8 * inF * inF,
        onNotes: (n) => notes.set(g.members[0]!, n.join('; ')),
        label: `AWQ scales of ${g.members.join(', ')}`,
      };
    });
    const scales = new Map<string, Float64Array>();
    const source: JobSource<ModelEntry> = {
      read: (e, shared, allocate) => e.reader.read(e.entry, shared, allocate),
      size: (e) => e.entry.end - e.entry.begin,
    };
    const sink = {
      write: async (name: string, data: Uint8Array) => {
        scales.set(name, typedView(Float64Array, data).slice());
      },
      commit: async () => {},
      abort: async () => {},
    };
    // the searches come before the file's first tensor: progress names them, at none done yet
    const file = readers[files.indexOf(input)]?.header;
    const onProgress =
      hooks.onProgress &&
      file &&
      ((p: Progress) =>
        hooks.onProgress!({
          tensorsDone: 0,
          tensorsTotal: file.entries.length,
          bytesDone: 0,
          bytesTotal: file.dataLength,
          tensor: p.tensor,
        }));
    await runEncodeJobs(source, jobs, sink, { ...hooks, onProgress });
    return foldsOf(groups, scales, notes, inputs);
  } finally {
    await Promise.all(readers.map((r) => r.close()));
  }
}

/** The scales a statistics file holds (quantd calibrate --awq), by module; null when it holds none. */
async function chosenScales(path: string): Promise<Map<string, Float64Array> | null> {
  const reader = await SafetensorsFileReader.open(path);
  try {
    if (reader.header.metadata?.[AWQ_SCALES_KEY] === undefined) return null;
    const chosen = new Map<string, Float64Array>();
    for (const e of reader.header.entries) {
      if (!e.name.endsWith('.awq_scales')) continue;
      if (e.dtype !== 'F64' || e.shape.length !== 1) {
        throw new QuantdError('CALIBRATION_INVALID', {
          source: path.split('/').pop() ?? path,
          detail: `${e.name} is ${e.dtype} [${e.shape.join(', ')}]; F64 [in] expected`,
        });
      }
      const s = typedView(Float64Array, await reader.read(e)).slice();
      if (s.some((v) => !(v > 0 && Number.isFinite(v)))) {
        throw new QuantdError('CALIBRATION_INVALID', {
          source: path.split('/').pop() ?? path,
          detail: `${e.name} holds a scale that is not a positive number`,
        });
      }
      chosen.set(e.name.slice(0, -'.awq_scales'.length), s);
    }
    return chosen;
  } finally {
    await reader.close();
  }
}

function foldsOf(
  groups: readonly ScalingGroup[],
  scales: ReadonlyMap<string, Float64Array>,
  notes: ReadonlyMap<string, string>,
  inputs: ReadonlyMap<string, StatsEntry>,
): AwqFolds {
  const folds = {
    columns: new Map<string, GroupScales>(),
    rows: new Map<string, Float64Array>(),
    divide: new Map<string, Float64Array>(),
  };
  for (const g of groups) {
    const s = scales.get(g.members[0]!)!;
    const shared = g.members.length > 1 ? ` (one search for ${g.members.map(lastPart).join(', ')})` : '';
    const note = `${notes.get(g.members[0]!)}${shared}`;
    for (const m of g.members) folds.columns.set(m, { scales: s, note, input: inputs.get(g.members[0]!)! });
    for (const t of g.norm) folds.divide.set(t, s);
    if (g.producer) {
      folds.rows.set(g.producer, s);
      folds.divide.set(`${g.producer}.bias`, s);
    }
  }
  return folds;
}

const lastPart = (m: string): string => m.slice(m.lastIndexOf('.') + 1);
