/**
 * The "awq" layout: an AutoAWQ GEMM checkpoint (transformers with autoawq, AutoAWQ, vLLM) of 4-bit
 * zero-point codes (src/core/interop/awq.ts has the numerics). Without calibration the codes are
 * AutoAWQ's `pseudo_quantize_tensor` of the unscaled weights (round-to-nearest). With
 * `calibration=FILE` (a layer statistics file) they are the AWQ algorithm's: per-input-channel
 * scales searched on each group of layers sharing an input and folded into the norm or
 * projection before them (./awq-plan.ts), then a clipping search per group of weights
 * (src/core/interop/awq-stats.ts); a weight the file has no statistics for is rounded to
 * nearest, and the report says so.
 *
 * write: each linear projection weight `X.weight` [out, in] becomes `X.qweight` I32 [in, out/8],
 * `X.qzeros` I32 [in/group_size, out/8] and `X.scales` F16 [in/group_size, out]
 * (WQLinear_GEMM's buffers); `X.bias` of such a layer is cast to F16 (`linear.bias.clone().half()`);
 * with calibration a norm's weight (and bias) divided by its group's scales keeps its dtype, and a
 * projection divided by the next layer's scales has its bias divided too; everything else passes
 * through. The config (AutoAWQ's `to_transformers_dict()` fields) goes into
 * config.json's `quantization_config` in a model folder, and as `{"quantization_config": {...}}`
 * into `quantization_config.json` (folder) or `OUT.quantization_config.json` (beside a single file
 * `OUT.safetensors`), to merge into the model's config.json.
 *
 * read: every `X.qweight` group (without `X.g_idx`) back to `X.weight` F32 [out, in].
 */
import { awqShapes, type AwqParams } from '../../core/interop/awq.js';
import { QuantdError, shapeText } from '../../errors/index.js';
import { readLayerStats } from '../../format/layer-stats.js';
import { planAwqScales } from './awq-plan.js';
import { noLayerMatched, openCalibration, statsFor } from './calibration-stats.js';
import { entryByName, type SafetensorsHeader } from '../../format/safetensors.js';
import {
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
import {
  jsonText,
  sideFileCompanion,
  withQuantizationConfig,
  type QuantizationConfig,
} from './quantization-config.js';
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
const SIDE_FILE = 'quantization_config.json';

const OPTIONS = {
  bits: 'bits per weight: 4 (AWQ GEMM packs 4-bit only)',
  group_size:
    'input rows per group, dividing in_features: a positive integer, or -1 for one group (default 128)',
  calibration:
    "the AWQ algorithm (activation-aware scales folded into the norms and projections before them, then clipping) from a layer statistics file (quantd calibrate --statistics, or GET /v1/calibrations/ID/statistics), a path relative to the model's folder; without it: round-to-nearest",
} as const;

export const awqParams = (options: LayoutOptions): AwqParams => inLayout('awq', () => parseParams(options));

/** The layer statistics file of calibration=FILE, or null (round-to-nearest). */
export const awqCalibrationFile = (options: LayoutOptions): string | null =>
  inLayout('awq', () => {
    const file = checkOptions('awq', OPTIONS, options)['calibration'];
    if (file !== undefined && file.trim() === '') {
      throw new QuantdError('OPTION_INVALID', {
        option: 'calibration',
        detail: 'must name a layer statistics file',
        value: file,
      });
    }
    return file ?? null;
  });

/** AutoAWQ does not clip the query and key projections (their errors pass through softmax). */
const NOT_CLIPPED = /\.(?:q|k)_proj$/;

function parseParams(options: LayoutOptions): AwqParams {
  const o = checkOptions('awq', OPTIONS, options);
  intOption('bits', o['bits'], 4, (n) => n === 4, '4');
  const groupSize = intOption(
    'group_size',
    o['group_size'],
    128,
    (n) => n === -1 || n > 0,
    'a positive integer or -1',
  );
  return { groupSize };
}

/** config.json's quantization_config for an AWQ GEMM checkpoint (AwqConfig.to_transformers_dict). */
export function awqQuantizationConfig(
  params: AwqParams,
  notConverted: readonly string[],
): Record<string, unknown> {
  return {
    quant_method: 'awq',
    zero_point: true,
    group_size: params.groupSize,
    bits: 4,
    version: 'gemm',
    modules_to_not_convert: notConverted.length > 0 ? notConverted : null,
  };
}

function quantizationConfig(options: LayoutOptions, facts: LayoutFacts): QuantizationConfig {
  const text = jsonText(awqQuantizationConfig(awqParams(options), facts.notConverted));
  return {
    sideFile: SIDE_FILE,
    sideText: withQuantizationConfig('{}', text),
    configText: text,
  };
}

async function writeTensors(
  input: string,
  output: string,
  options: LayoutOptions,
  hooks: LayoutHooks,
  model: readonly string[] | null,
): Promise<LayoutFile> {
  const params = awqParams(options);
  const file = awqCalibrationFile(options);
  const calibration = file === null ? null : await openCalibration(input, file);
  const folds = calibration && (await planAwqScales(input, model ?? [input], calibration, params, hooks));
  const label = `awq int4 ${params.groupSize === -1 ? 'per-row' : `g${params.groupSize}`} zero-point`;
  return withReader(input, async (reader) => {
    const entries = reader.header.entries;
    const quantized = new Set(entries.filter(isLinearWeight).map((e) => e.name));
    if (quantized.size === 0 && model === null) throw noLinear();
    const report = new Map<string, ReportRow>();
    let calibrated = 0;
    const jobs: Job[] = entries.map((entry): Job => {
      const divide = folds?.divide.get(entry.name);
      if (quantized.has(entry.name)) {
        const dtype = floatDType(entry);
        const s = awqShapes(entry.name, entry.shape, params);
        const m = moduleOf(entry.name);
        const call = { kind: 'awq', tensor: entry.name, shape: entry.shape, dtype, params } as const;
        const outputs = [
          { name: `${m}.qweight`, dtype: 'I32', shape: s.qweight },
          { name: `${m}.qzeros`, dtype: 'I32', shape: s.qzeros },
          { name: `${m}.scales`, dtype: 'F16', shape: s.scales },
        ] as const;
        const columns = folds?.columns.get(m);
        const rowDivide = folds?.rows.get(m) ?? null;
        const stats = calibration ? (statsFor(calibration, m) ?? columns?.input) : undefined;
        if (!columns && !rowDivide && !stats) {
          report.set(entry.name, {
            type: label,
            ...(calibration && { note: `no statistics of ${m}.input: round-to-nearest` }),
          });
          return { inputs: [entry], outputs, call };
        }
        calibrated++;
        const row: ReportRow = { type: `${label}, AWQ` };
        report.set(entry.name, row);
        const plan = { scales: columns?.scales ?? null, rowDivide, clip: !NOT_CLIPPED.test(m) };
        return {
          inputs: [entry],
          outputs,
          ...(stats
            ? {
                prepare: async () => ({
                  ...call,
                  calibration: {
                    ...plan,
                    input: { name: stats.name, stats: await readLayerStats(stats.ref, stats.name) },
                  },
                }),
                prepareBytes: 8 * stats.ref.inFeatures ** 2,
              }
            : { call: { ...call, calibration: { ...plan, input: null } } }),
          onNotes: (notes) => (row.note = [columns?.note ?? [], ...notes].flat().join('; ')),
          onOutputError: (e) => (row.output_error = e),
        };
      }
      const isBias = entry.name.endsWith('.bias') && quantized.has(`${moduleOf(entry.name, '.bias')}.weight`);
      if (isBias || divide) {
        const from = floatDType(entry);
        const to = isBias ? 'float16' : from;
        const dtype = isBias ? 'F16' : entry.dtype;
        report.set(entry.name, {
          type: dtype,
          note: [
            ...(isBias ? ['bias of a quantized layer, cast to float16 as AutoAWQ does'] : []),
            ...(divide ? ['divided by the AWQ scales of the layers after it'] : []),
          ].join('; '),
        });
        return {
          inputs: [entry],
          outputs: [{ name: entry.name, dtype, shape: entry.shape }],
          call: divide
            ? { kind: 'awq-fold', tensor: entry.name, from, to, divide }
            : { kind: 'cast', from, to },
        };
      }
      report.set(entry.name, { type: entry.dtype, note: 'passed through' });
      return passThrough(entry);
    });
    if (calibration && calibrated === 0 && quantized.size > 0 && model === null) {
      throw noLayerMatched(calibration, [...quantized][0]!);
    }
    await runJobs(reader, output, jobs, ptMetadata({ 'quantd.layout': 'awq' }), hooks);
    const tensors = entries.map((e) => ({ name: e.name, ...report.get(e.name)! }));
    return layoutFile(jobs, tensors, factsOf(entries, quantized));
  });
}

const parts: SafetensorsLayoutParts = { writeTensors, quantizationConfig };

function awqGroup(source: string, header: SafetensorsHeader, m: string) {
  const qweight = expectTensor(source, entryByName(header, `${m}.qweight`), `${m}.qweight`, ['I32'], 2);
  const qzeros = expectTensor(source, entryByName(header, `${m}.qzeros`), `${m}.qzeros`, ['I32'], 2);
  const scales = expectTensor(
    source,
    entryByName(header, `${m}.scales`),
    `${m}.scales`,
    ['F16', 'BF16', 'F32'],
    2,
  );
  const [groups, out] = scales.shape as [number, number];
  const [inF, words] = qweight.shape as [number, number];
  if (words * 8 !== out || out === 0) {
    throw layoutInvalid(
      source,
      `${m}.qweight`,
      `has shape ${shapeText(qweight.shape)}, expected [in, ${out} / 8]`,
    );
  }
  if (qzeros.shape[0] !== groups || qzeros.shape[1] !== words) {
    throw layoutInvalid(
      source,
      `${m}.qzeros`,
      `has shape ${shapeText(qzeros.shape)}, expected [${groups}, ${words}]`,
    );
  }
  if (groups === 0 || inF % groups !== 0) {
    throw layoutInvalid(
      source,
      `${m}.scales`,
      `has ${groups} groups, which do not divide in_features ${inF}`,
    );
  }
  return { qweight, qzeros, scales, out, inF, groups };
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
    for (const m of modules) for (const s of ['qweight', 'qzeros', 'scales']) member.set(`${m}.${s}`, m);
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
      const g = awqGroup(source, header, m);
      jobs.push({
        inputs: [g.qweight, g.qzeros, g.scales],
        outputs: [{ name: `${m}.weight`, dtype: 'F32', shape: [g.out, g.inF] }],
        call: { kind: 'awq-decode', scales: g.scales.dtype, out: g.out, inF: g.inF, groups: g.groups },
      });
    }
    const tensors = await runJobs(reader, output, jobs, ptMetadata(), hooks);
    return { tensors };
  });
}

/** The file's AWQ weights (inspect): each module with a .qweight, checked as read() checks it. */
async function quantizedWeights(reader: SafetensorsFileReader): Promise<QuantizedWeight[]> {
  const { header } = reader;
  return header.entries
    .filter((e) => e.name.endsWith('.qweight'))
    .map((e) => {
      const m = moduleOf(e.name, '.qweight');
      const g = awqGroup(reader.path, header, m);
      const stored = [g.qweight, g.qzeros, g.scales];
      return {
        name: `${m}.weight`,
        stored: stored.map((t) => t.name),
        shape: [g.out, g.inF],
        // AutoAWQ's GEMM words: eight 4-bit codes in each int32 of qweight [in, out / 8]
        bits: 4,
        group_size: g.inF / g.groups,
        scale_dtype: g.scales.dtype,
        bytes: storedBytes(stored),
        details: { zero_point: true, version: 'gemm' },
      };
    });
}

function detect(path: string, head: Uint8Array): boolean {
  const tensors = headerTensors(path, head);
  if (!tensors) return false;
  for (const [name, t] of tensors) {
    if (!name.endsWith('.qweight')) continue;
    const m = moduleOf(name, '.qweight');
    const scales = tensors.get(`${m}.scales`);
    if (tensors.has(`${m}.g_idx`) || !tensors.has(`${m}.qzeros`) || !scales) continue;
    if (t.shape.length === 2 && scales.shape.length === 2 && t.shape[1]! * 8 === scales.shape[1]) return true;
  }
  return false;
}

export const awqLayout: InteropLayout = {
  name: 'awq',
  summary:
    'AutoAWQ GEMM checkpoint (qweight/qzeros/scales + quantization_config.json) of 4-bit zero-point codes, by the AWQ algorithm from layer statistics (calibration=FILE) or round-to-nearest, for transformers, AutoAWQ and vLLM',
  options: OPTIONS,
  extension: '.safetensors',
  companions: sideFileCompanion(SIDE_FILE),
  checkOptions: (options) => {
    awqParams(options);
    awqCalibrationFile(options);
  },
  write: singleFileWrite(parts),
  parts,
  read,
  quantizedWeights,
  detect,
};
