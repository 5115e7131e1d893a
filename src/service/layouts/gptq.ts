/**
 * The "gptq" layout: a GPTQ v1 checkpoint (AutoGPTQ / GPTQModel / vLLM / transformers+optimum).
 * Its codes are round-to-nearest (src/core/interop/gptq.ts has the numerics and the exact
 * conventions), or, with `calibration=FILE`, the GPTQ algorithm's (src/core/interop/gptq-solve.ts)
 * from each layer's input Hessian in a layer statistics file; a weight the file has no statistics
 * for is rounded to nearest, and the report says so.
 *
 * write: each linear projection weight `X.weight` [out, in] (see LINEAR_WEIGHT) becomes
 * `X.qweight` I32 [in·bits/32, out], `X.qzeros` I32 [groups, out·bits/32], `X.scales` F16
 * [groups, out] and `X.g_idx` I32 [in] (the buffers of AutoGPTQ's QuantLinear); `X.bias` of such a
 * layer is cast to F16 (AutoGPTQ's `linear.bias.clone().half()`); every other tensor passes through.
 * Its config (AutoGPTQ's BaseQuantizeConfig.to_dict, plus checkpoint_format "gptq") goes into
 * `quantize_config.json` and config.json's `quantization_config` in a model folder, and into
 * `OUT.quantize_config.json` beside a single-file output `OUT.safetensors`.
 *
 * read: every `X.qweight` group back to `X.weight` F32 [out, in] (bits from the shapes, g_idx
 * honoured, so act-order checkpoints read too); other tensors pass through.
 */
import { GPTQ_BITS, gptqShapes, type GptqBits, type GptqParams } from '../../core/interop/gptq.js';
import { QuantdError, shapeText } from '../../errors/index.js';
import { entryByName, type TensorEntry } from '../../format/safetensors.js';
import {
  boolOption,
  checkOptions,
  expectTensor,
  floatDType,
  headerTensors,
  inLayout,
  intOption,
  isLinearWeight,
  layoutInvalid,
  moduleOf,
  noLinear,
  passThrough,
  ptMetadata,
  runJobs,
  storedBytes,
  withReader,
  type Job,
} from './linear-common.js';
import { GPTQ_SOLVE_DEFAULTS } from '../../core/interop/gptq-solve.js';
import { readLayerStats } from '../../format/layer-stats.js';
import { noLayerMatched, openCalibration, statsFor } from './calibration-stats.js';
import { jsonText, sideFileCompanion, type QuantizationConfig } from './quantization-config.js';
import type { LayoutHooks } from './run-jobs.js';
import { factsOf, layoutFile, singleFileWrite, type ReportRow } from './safetensors-parts.js';
import type { SafetensorsFileReader } from '../../format/safetensors-file.js';
import type {
  InteropLayout,
  LayoutFacts,
  LayoutFile,
  LayoutOptions,
  QuantizedWeight,
  SafetensorsLayoutParts,
} from './types.js';

/** The side file it writes with the model (a folder's, or named after a single file). */
const SIDE_FILE = 'quantize_config.json';

const OPTIONS = {
  bits: 'bits per weight: 2, 4 or 8 (default 4)',
  group_size: 'input columns per group: a positive integer, or -1 for one group per row (default 128)',
  sym: 'symmetric quantization, zero point 2^(bits-1) (default true); false: per-group min/max zero points',
  calibration:
    "the GPTQ algorithm from a layer statistics file (quantd calibrate --statistics, or GET /v1/calibrations/ID/statistics), a path relative to the model's folder; without it: round-to-nearest",
  damp_percent:
    "with calibration: the fraction of mean(diag H) added to the Hessian's diagonal (default 0.01, AutoGPTQ's)",
  desc_act:
    'with calibration: quantize columns in order of decreasing Hessian diagonal, writing the permuted g_idx (act-order; default false)',
} as const;

/** What the GPTQ algorithm takes beside the format's parameters (calibration=FILE). */
export interface GptqAlgorithm {
  readonly file: string;
  readonly damp: number;
  readonly actOrder: boolean;
}

export const gptqParams = (options: LayoutOptions): GptqParams =>
  inLayout('gptq', () => parseParams(options));

/** The calibration options (null without calibration=), checked. */
export const gptqAlgorithm = (options: LayoutOptions): GptqAlgorithm | null =>
  inLayout('gptq', () => parseAlgorithm(options));

function parseAlgorithm(options: LayoutOptions): GptqAlgorithm | null {
  const o = checkOptions('gptq', OPTIONS, options);
  const file = o['calibration'];
  if (file === undefined) {
    for (const key of ['damp_percent', 'desc_act']) {
      if (o[key] !== undefined) {
        throw new QuantdError('OPTION_INVALID', {
          option: key,
          detail: 'applies to the GPTQ algorithm: give calibration=FILE (layer statistics) with it',
          value: o[key],
        });
      }
    }
    return null;
  }
  if (file.trim() === '') {
    throw new QuantdError('OPTION_INVALID', {
      option: 'calibration',
      detail: 'must name a layer statistics file',
      value: file,
    });
  }
  const dampText = o['damp_percent']?.trim();
  const damp = dampText === undefined ? GPTQ_SOLVE_DEFAULTS.damp : Number(dampText);
  if (!(damp > 0 && damp <= 1) || dampText === '') {
    throw new QuantdError('OPTION_INVALID', {
      option: 'damp_percent',
      detail: 'must be a number in (0, 1]',
      value: o['damp_percent'] ?? '',
    });
  }
  return { file, damp, actOrder: boolOption('desc_act', o['desc_act'], false) };
}

function parseParams(options: LayoutOptions): GptqParams {
  const o = checkOptions('gptq', OPTIONS, options);
  const bits = intOption('bits', o['bits'], 4, (n) => GPTQ_BITS.includes(n as GptqBits), '2, 4 or 8');
  const groupSize = intOption(
    'group_size',
    o['group_size'],
    128,
    (n) => n === -1 || n > 0,
    'a positive integer or -1',
  );
  const sym = boolOption('sym', o['sym'], true);
  return { bits: bits as GptqBits, groupSize, sym };
}

/** quantize_config.json as AutoGPTQ writes it (BaseQuantizeConfig.to_dict) for `params`. */
export function gptqQuantizeConfig(
  params: GptqParams,
  modelFileBaseName: string,
  algorithm: GptqAlgorithm | null = null,
): Record<string, unknown> {
  return {
    bits: params.bits,
    group_size: params.groupSize,
    damp_percent: algorithm?.damp ?? 0.01,
    desc_act: algorithm?.actOrder ?? false,
    static_groups: false,
    sym: params.sym,
    true_sequential: true,
    model_name_or_path: null,
    model_file_base_name: modelFileBaseName,
    quant_method: 'gptq',
    checkpoint_format: 'gptq',
  };
}

const bitsLabel = (p: GptqParams): string =>
  `gptq int${p.bits} ${p.groupSize === -1 ? 'per-row' : `g${p.groupSize}`} ${p.sym ? 'sym' : 'asym'}`;

/** The same object in both places: transformers' GPTQConfig takes AutoGPTQ's keys. */
function quantizationConfig(options: LayoutOptions, _facts: LayoutFacts, base: string): QuantizationConfig {
  const text = jsonText(gptqQuantizeConfig(gptqParams(options), base, gptqAlgorithm(options)));
  return { sideFile: SIDE_FILE, sideText: `${text}\n`, configText: text };
}

async function writeTensors(
  input: string,
  output: string,
  options: LayoutOptions,
  hooks: LayoutHooks,
  model: readonly string[] | null,
): Promise<LayoutFile> {
  const params = gptqParams(options);
  const algorithm = gptqAlgorithm(options);
  const calibration = algorithm && (await openCalibration(input, algorithm.file));
  return withReader(input, async (reader) => {
    const entries = reader.header.entries;
    const quantized = new Set(entries.filter(isLinearWeight).map((e) => e.name));
    if (quantized.size === 0 && model === null) throw noLinear();
    const report = new Map<string, ReportRow>();
    let calibrated = 0;
    const jobs: Job[] = entries.map((entry): Job => {
      if (quantized.has(entry.name)) {
        const dtype = floatDType(entry);
        const s = gptqShapes(entry.name, entry.shape, params);
        const m = moduleOf(entry.name);
        const stats = calibration && statsFor(calibration, m);
        const row: ReportRow = {
          type: `${bitsLabel(params)}${stats ? ', GPTQ' : ''}`,
          ...(calibration && !stats && { note: `no statistics of ${m}.input: round-to-nearest` }),
        };
        report.set(entry.name, row);
        const call = { kind: 'gptq', tensor: entry.name, shape: entry.shape, dtype, params } as const;
        if (stats) calibrated++;
        return {
          inputs: [entry],
          outputs: [
            { name: `${m}.qweight`, dtype: 'I32', shape: s.qweight },
            { name: `${m}.qzeros`, dtype: 'I32', shape: s.qzeros },
            { name: `${m}.scales`, dtype: 'F16', shape: s.scales },
            { name: `${m}.g_idx`, dtype: 'I32', shape: s.gIdx },
          ],
          ...(stats && algorithm
            ? {
                prepare: async () => ({
                  ...call,
                  calibration: {
                    name: stats.name,
                    stats: await readLayerStats(stats.ref, stats.name),
                    damp: algorithm.damp,
                    actOrder: algorithm.actOrder,
                  },
                }),
                prepareBytes: 8 * stats.ref.inFeatures ** 2,
              }
            : { call }),
          onNotes: (notes) => (row.note = notes.join('; ')),
          onOutputError: (e) => (row.output_error = e),
        };
      }
      if (entry.name.endsWith('.bias') && quantized.has(`${moduleOf(entry.name, '.bias')}.weight`)) {
        const dtype = floatDType(entry);
        report.set(entry.name, {
          type: 'F16',
          note: 'bias of a quantized layer, cast to float16 as AutoGPTQ does',
        });
        return {
          inputs: [entry],
          outputs: [{ name: entry.name, dtype: 'F16', shape: entry.shape }],
          call: { kind: 'cast', from: dtype, to: 'float16' },
        };
      }
      report.set(entry.name, { type: entry.dtype, note: 'passed through' });
      return passThrough(entry);
    });
    if (calibration && calibrated === 0 && quantized.size > 0 && model === null) {
      throw noLayerMatched(calibration, [...quantized][0]!);
    }
    await runJobs(reader, output, jobs, ptMetadata({ 'quantd.layout': 'gptq' }), hooks);
    const tensors = entries.map((e) => ({ name: e.name, ...report.get(e.name)! }));
    return layoutFile(jobs, tensors, factsOf(entries, quantized));
  });
}

const parts: SafetensorsLayoutParts = { writeTensors, quantizationConfig };

/** The GPTQ tensors of module `m` in a file, validated; bits and sizes from their shapes. */
function gptqGroup(source: string, header: Parameters<typeof entryByName>[0], m: string) {
  const qweight = expectTensor(source, entryByName(header, `${m}.qweight`), `${m}.qweight`, ['I32'], 2);
  const qzeros = expectTensor(source, entryByName(header, `${m}.qzeros`), `${m}.qzeros`, ['I32'], 2);
  const scales = expectTensor(
    source,
    entryByName(header, `${m}.scales`),
    `${m}.scales`,
    ['F16', 'BF16', 'F32'],
    2,
  );
  const gEntry = entryByName(header, `${m}.g_idx`);
  const gIdx = gEntry && expectTensor(source, gEntry, `${m}.g_idx`, ['I32'], 1);
  const [groups, out] = scales.shape as [number, number];
  const bad = (name: string, e: TensorEntry, expected: string): QuantdError =>
    layoutInvalid(source, name, `has shape ${shapeText(e.shape)}, expected ${expected}`);
  if (qzeros.shape[0] !== groups || out === 0 || (qzeros.shape[1]! * 32) % out !== 0) {
    throw bad(`${m}.qzeros`, qzeros, `[${groups}, ${out} * bits / 32]`);
  }
  const bits = (qzeros.shape[1]! * 32) / out;
  if (bits === 3) {
    throw new QuantdError('FEATURE_UNSUPPORTED', {
      detail: `${source}: ${m} is 3-bit GPTQ, which quantd does not read`,
    });
  }
  if (!GPTQ_BITS.includes(bits as GptqBits))
    throw bad(`${m}.qzeros`, qzeros, `[${groups}, ${out} * bits / 32]`);
  if (qweight.shape[1] !== out || (qweight.shape[0]! * 32) % bits !== 0) {
    throw bad(`${m}.qweight`, qweight, `[in * ${bits} / 32, ${out}]`);
  }
  const inF = (qweight.shape[0]! * 32) / bits;
  if (gIdx && gIdx.shape[0] !== inF) throw bad(`${m}.g_idx`, gIdx, `[${inF}]`);
  if (groups === 0 || groups > inF) throw bad(`${m}.scales`, scales, `[groups <= ${inF}, ${out}]`);
  if (!gIdx && inF % groups !== 0) {
    throw layoutInvalid(
      source,
      `${m}.g_idx`,
      `is missing, and ${groups} groups do not divide in_features ${inF}`,
    );
  }
  return { qweight, qzeros, scales, gIdx, out, inF, groups, bits: bits as GptqBits };
}

async function read(
  input: string,
  output: string,
  hooks: LayoutHooks = {},
): Promise<{ readonly tensors: number }> {
  return withReader(input, async (reader) => {
    const { header } = reader;
    const source = reader.path;
    const modules = header.entries
      .filter((e) => e.name.endsWith('.qweight'))
      .map((e) => moduleOf(e.name, '.qweight'));
    const member = new Map<string, string>();
    for (const m of modules) {
      for (const s of ['qweight', 'qzeros', 'scales', 'g_idx']) member.set(`${m}.${s}`, m);
    }
    const done = new Set<string>();
    const jobs: Job[] = [];
    for (const entry of header.entries) {
      const m = member.get(entry.name);
      if (m === undefined) {
        jobs.push(passThrough(entry));
        continue;
      }
      if (done.has(m)) continue;
      done.add(m);
      const g = gptqGroup(source, header, m);
      const inputs = [g.qweight, g.qzeros, g.scales, ...(g.gIdx ? [g.gIdx] : [])];
      jobs.push({
        inputs,
        outputs: [{ name: `${m}.weight`, dtype: 'F32', shape: [g.out, g.inF] }],
        call: {
          kind: 'gptq-decode',
          source,
          module: m,
          scales: g.scales.dtype,
          out: g.out,
          inF: g.inF,
          groups: g.groups,
          bits: g.bits,
        },
      });
    }
    const tensors = await runJobs(reader, output, jobs, ptMetadata(), hooks);
    return { tensors };
  });
}

/** The file's GPTQ weights (inspect): each module with a .qweight, checked as read() checks it. */
async function quantizedWeights(reader: SafetensorsFileReader): Promise<QuantizedWeight[]> {
  const { header } = reader;
  return header.entries
    .filter((e) => e.name.endsWith('.qweight'))
    .map((e) => {
      const m = moduleOf(e.name, '.qweight');
      const g = gptqGroup(reader.path, header, m);
      const stored = [g.qweight, g.qzeros, g.scales, ...(g.gIdx ? [g.gIdx] : [])];
      return {
        name: `${m}.weight`,
        stored: stored.map((t) => t.name),
        shape: [g.out, g.inF],
        bits: g.bits,
        group_size: Math.ceil(g.inF / g.groups),
        scale_dtype: g.scales.dtype,
        bytes: storedBytes(stored),
        details: { g_idx: g.gIdx !== undefined },
      };
    });
}

function detect(path: string, head: Uint8Array): boolean {
  const tensors = headerTensors(path, head);
  if (!tensors) return false;
  for (const name of tensors.keys()) {
    if (!name.endsWith('.qweight')) continue;
    const m = moduleOf(name, '.qweight');
    if (tensors.has(`${m}.g_idx`) && tensors.has(`${m}.qzeros`) && tensors.has(`${m}.scales`)) return true;
  }
  return false;
}

export const gptqLayout: InteropLayout = {
  name: 'gptq',
  summary:
    'GPTQ v1 checkpoint (qweight/qzeros/scales/g_idx + quantize_config.json), by the GPTQ algorithm from layer statistics (calibration=FILE) or round-to-nearest, for AutoGPTQ, GPTQModel, vLLM and transformers',
  options: OPTIONS,
  extension: '.safetensors',
  companions: sideFileCompanion(SIDE_FILE),
  checkOptions: (options) => {
    gptqParams(options);
    gptqAlgorithm(options);
  },
  write: singleFileWrite(parts),
  parts,
  read,
  quantizedWeights,
  detect,
};
