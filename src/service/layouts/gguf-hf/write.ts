/**
 * A Hugging Face model folder → one GGUF file llama.cpp runs (what convert_hf_to_gguf.py and
 * llama-quantize do together): every check that can fail — config.json, the architecture, the
 * tokenizer, each tensor's name and shape against config.json — runs before any tensor is read;
 * then the header (general.*, the architecture's hyperparameters, the tokenizer) is written and
 * the tensors stream through the gguf layout's encoders, shard after shard.
 */
import { basename, resolve } from 'node:path';

import { floatDTypeOfSt, numelOf } from '../../../core/dtypes.js';
import { summarizeQuality } from '../../../core/quality.js';
import type { QualityStats } from '../../../core/quality-stats.js';
import type { ErrorHistogram } from '../../../core/error-histogram.js';
import { toFloat32 } from '../../../core/tensor.js';
import { ggmlTensorBytes, ggmlTypeByName, isQuantType, QUANT_TYPES } from '../../../core/interop/ggml.js';
import type { GgmlWriteType } from '../../../core/interop/ggml.js';
import { QuantdError } from '../../../errors/index.js';
import { sizeLabel } from '../../../core/interop/size-label.js';
import { GgufOutput } from '../../../format/gguf-split.js';
import type { GgufKv } from '../../../format/gguf.js';
import { readImportanceMatrix } from '../../../format/imatrix.js';
import { SafetensorsFileReader } from '../../../format/safetensors-file.js';
import type { TensorEntry } from '../../../format/safetensors.js';
import { fitImportanceMatrix, singleTypeImatrix } from '../gguf-imatrix.js';
import { MIXTURE_OPTIONS, mixtureOptions, planMixture, type GgufMixture } from '../gguf-mixture.js';
import { ALIGNMENT, LLAMA_FTYPE, QUANTIZATION_VERSION, ggufTensorType, splitMaxSize } from '../gguf-types.js';
import { inLayout } from '../linear-common.js';
import { runEncodeJobs, type EncodeJob, type JobSource, type LayoutHooks } from '../run-jobs.js';
import type { LayoutOptions, LayoutWriteResult } from '../types.js';
import { architectureOf, type Architecture } from './architectures.js';
import { hyperparameters, type GeneratedTensor, type Hyperparameters } from './hyperparameters.js';
import { openCheckpoint } from './checkpoint.js';
import { readHfFolder } from './folder.js';
import { str, u32 } from './gguf-kv.js';
import { tokenizerMetadata } from './tokenizer.js';

/** llama_ftype of all-F32 and mostly-F16 files (LLAMA_FTYPE_ALL_F32, LLAMA_FTYPE_MOSTLY_F16). */
const FLOAT_FTYPE = { F32: 0, F16: 1 } as const;
type FolderType = keyof typeof LLAMA_FTYPE | keyof typeof FLOAT_FTYPE;

/** Options that config.json decides for a model folder (given anyway: refused, not ignored). */
const FROM_CONFIG = ['arch', 'names', 'heads', 'kv_heads'];
const FOLDER_OPTIONS = ['type', 'name', 'split_max_size', ...Object.keys(MIXTURE_OPTIONS)];

interface FolderOptions {
  readonly type: FolderType;
  /** ftype=…: llama-quantize's mixture, which decides each tensor's type instead of `type`. */
  readonly mixture: GgufMixture | undefined;
  /** imatrix=… with `type` (no mixture): llama-quantize --pure --imatrix. */
  readonly imatrixPath: string | undefined;
  readonly name: string | undefined;
  readonly splitMaxSize: number | undefined;
}

/** The gguf layout's options for a model folder (checked before anything is read). */
export const ggufFolderOptions = (options: LayoutOptions): FolderOptions =>
  inLayout('gguf', () => folderOptions(options));

function folderOptions(options: LayoutOptions): FolderOptions {
  for (const [key, value] of Object.entries(options)) {
    if (value === undefined || FOLDER_OPTIONS.includes(key)) continue;
    throw new QuantdError('OPTION_INVALID', {
      option: key,
      detail: FROM_CONFIG.includes(key)
        ? 'does not apply to a model folder: config.json gives the architecture, names and heads'
        : `is not an option of the gguf layout for a model folder (its options: ${FOLDER_OPTIONS.join(', ')})`,
      value,
    });
  }
  const mixture = mixtureOptions(options);
  const text = options['type'] ?? 'Q8_0';
  const type = text.toUpperCase();
  if (type !== 'F32' && type !== 'F16' && !isQuantType(type)) {
    throw new QuantdError('OPTION_INVALID', {
      option: 'type',
      detail: `must be one of F32, F16, ${QUANT_TYPES.join(', ')}`,
      value: text,
    });
  }
  return {
    type,
    mixture,
    imatrixPath: mixture === undefined ? singleTypeImatrix(options['imatrix'], type) : undefined,
    name: options['name'],
    splitMaxSize: splitMaxSize(options['split_max_size']),
  };
}

function tensorType(name: string, shape: readonly number[], type: FolderType) {
  if (isQuantType(type)) return ggufTensorType(name, shape, type);
  return shape.length <= 1 ? { type: 'F32' as const } : { type };
}

interface ShardTensor {
  readonly reader: SafetensorsFileReader;
  readonly entry: TensorEntry;
}

/** What a job reads: a checkpoint tensor, or one computed from config.json. */
type JobInput = ShardTensor | GeneratedTensor;

interface Planned {
  readonly source: ShardTensor;
  /** The tensor plus one, computed up front (small: Gemma's norms), written as F32. */
  readonly plusOne?: GeneratedTensor;
  readonly name: string;
  readonly dims: number[];
  readonly type: GgmlWriteType;
  readonly permute: number | undefined;
  /** The importance matrix's column weights for this tensor (ftype=…,imatrix=…). */
  readonly imatrix?: Float32Array;
}

/**
 * Gives each planned tensor its type in llama-quantize's mixture (and its importance weights),
 * says why in the report, and returns the metadata recording the importance matrix.
 */
async function applyMixture(
  planned: Planned[],
  report: Array<LayoutWriteResult['tensors'][number]>,
  arch: Architecture,
  h: Hyperparameters,
  mixture: GgufMixture,
  dir: string,
): Promise<GgufKv[]> {
  const model = { arch: arch.gguf, layers: h.layers, heads: h.heads, kvHeads: h.kvHeads, experts: 0 };
  const tensors = planned.map((p) => ({ name: p.name, ne: p.dims }));
  const plan = await planMixture(tensors, model, mixture, dir);
  const rows = new Map(report.map((r, i) => [r.name, i]));
  for (const [i, p] of planned.entries()) {
    const t = plan.types.get(p.name)!;
    planned[i] = { ...p, type: t.type };
    report[rows.get(p.name)!] = { name: p.name, type: t.type, ...(t.note !== undefined && { note: t.note }) };
  }
  withWeights(planned, report, plan.weights);
  return [...plan.kvs];
}

/**
 * One type for every weight with an importance matrix (`type=Q4_K,imatrix=…`): the types stay
 * the ones `type` gave, each tensor with an entry takes its weights — what llama-quantize --pure
 * does with --imatrix, and what ftype=Q4_K_S,pure=true,imatrix=… writes byte for byte.
 */
async function applySingleTypeMatrix(
  planned: Planned[],
  report: Array<LayoutWriteResult['tensors'][number]>,
  imatrixPath: string,
  dir: string,
): Promise<GgufKv[]> {
  const path = resolve(dir, imatrixPath);
  const types = new Map(planned.map((p) => [p.name, p.type]));
  const tensors = planned.map((p) => ({ name: p.name, ne: p.dims }));
  const fitted = fitImportanceMatrix(await readImportanceMatrix(path), path, tensors, (n) => types.get(n)!);
  withWeights(planned, report, fitted.weights);
  return [...fitted.kvs];
}

/** Gives each planned tensor with weights its `imatrix`, and says so in its report line. */
function withWeights(
  planned: Planned[],
  report: Array<LayoutWriteResult['tensors'][number]>,
  weights: ReadonlyMap<string, Float32Array>,
): void {
  const rows = new Map(report.map((r, i) => [r.name, i]));
  for (const [i, p] of planned.entries()) {
    const imatrix = weights.get(p.name);
    if (imatrix === undefined) continue;
    planned[i] = { ...p, imatrix };
    const row = rows.get(p.name)!;
    const r = report[row]!;
    report[row] = { ...r, note: r.note !== undefined ? `${r.note}; importance matrix` : 'importance matrix' };
  }
}

/** A (small) checkpoint tensor read now, as float32 plus one. */
async function plusOne(name: string, t: ShardTensor): Promise<GeneratedTensor> {
  const data = toFloat32(await t.reader.read(t.entry, false), floatDTypeOfSt(t.entry.dtype)!);
  for (let i = 0; i < data.length; i++) data[i]! += 1;
  return { name, data };
}

export async function writeGgufFromFolder(
  dir: string,
  output: string,
  options: LayoutOptions,
  hooks: LayoutHooks = {},
): Promise<LayoutWriteResult> {
  const o = ggufFolderOptions(options);
  const folder = await readHfFolder(dir);
  const configPath = `${dir}/config.json`;
  const arch = architectureOf(folder.config, configPath);
  const h = hyperparameters(folder.config, configPath);
  const tokenizer = await tokenizerMetadata(folder, h.vocab);
  const checkpoint = await openCheckpoint(dir, arch, h, configPath);
  try {
    const planned: Planned[] = [];
    const report: Array<LayoutWriteResult['tensors'][number]> = [];
    const names = new Set<string>();
    for (const { reader, entry, ggufName: name } of checkpoint.tensors) {
      if (name === null) {
        report.push({ name: entry.name, type: 'skipped', note: 'not a weight llama.cpp reads' });
        continue;
      }
      names.add(name);
      const choice = tensorType(name, entry.shape, o.type);
      planned.push({
        source: { reader, entry },
        name,
        dims: [...entry.shape].reverse(),
        type: choice.type,
        permute: arch.permuteHeads(entry.name, h),
      });
      report.push({
        name,
        type: choice.type,
        ...('note' in choice && choice.note ? { note: choice.note } : {}),
      });
    }
    const mixtureKvs =
      o.mixture !== undefined
        ? await applyMixture(planned, report, arch, h, o.mixture, dir)
        : o.imatrixPath !== undefined
          ? await applySingleTypeMatrix(planned, report, o.imatrixPath, dir)
          : [];
    for (const [i, p] of planned.entries()) {
      if (arch.plusOne?.(p.source.entry.name) !== true) continue;
      planned[i] = { ...p, type: 'F32', plusOne: await plusOne(p.name, p.source) };
    }
    const generated = arch.generated(h, folder.config, configPath);
    for (const g of generated) {
      if (names.has(g.name)) throw new QuantdError('NAME_COLLISION', { source: dir, tensor: g.name });
      report.push({ name: g.name, type: 'F32', note: 'computed from config.json' });
    }
    const modelName = o.name ?? basename(dir);
    const parameters =
      planned.reduce((n, p) => n + numelOf(p.dims), 0) + generated.reduce((n, g) => n + g.data.length, 0);
    const kvs: GgufKv[] = [
      str('general.architecture', arch.gguf),
      str('general.type', 'model'),
      str('general.name', modelName),
      str('general.basename', modelName),
      str('general.size_label', sizeLabel(parameters)),
      u32(
        'general.file_type',
        o.mixture?.fileType.ftype ?? (isQuantType(o.type) ? LLAMA_FTYPE[o.type] : FLOAT_FTYPE[o.type]),
      ),
      u32('general.quantization_version', QUANTIZATION_VERSION),
      u32('general.alignment', ALIGNMENT),
      ...mixtureKvs,
      ...arch.metadata(h, folder.config, configPath),
      ...tokenizer,
    ];
    const writer = await GgufOutput.create(
      output,
      kvs,
      [
        ...planned.map((p) => ({ name: p.name, dims: p.dims, type: p.type })),
        ...generated.map((g) => ({ name: g.name, dims: [g.data.length], type: 'F32' })),
      ],
      o.splitMaxSize,
    );
    const copies = generated.map((g): EncodeJob<JobInput> => ({
      inputs: [g],
      outputs: [{ name: g.name, bytes: g.data.byteLength }],
      label: g.name,
    }));
    // a mixture's report measures each quantized tensor, as llama-quantize users compare files
    const measured = new Map<string, { quality: QualityStats; histogram?: ErrorHistogram | undefined }>();
    const measure = (p: Planned): boolean => o.mixture !== undefined && isQuantType(p.type);
    const encodeJob = (p: Planned): EncodeJob<JobInput> => ({
      inputs: [p.source],
      outputs: [
        { name: p.name, bytes: ggmlTensorBytes(ggmlTypeByName(p.type)!, p.dims[0]!, numelOf(p.dims)) },
      ],
      call: {
        kind: 'ggml',
        tensor: p.source.entry.name,
        dtype: floatDTypeOfSt(p.source.entry.dtype)!,
        type: p.type,
        ne0: p.dims[0]!,
        ...(p.permute !== undefined && { permute: { rows: p.source.entry.shape[0]!, heads: p.permute } }),
        ...(p.imatrix !== undefined && { imatrix: p.imatrix }),
        ...(measure(p) && { quality: true }),
      },
      ...(measure(p) && {
        onQuality: (quality: QualityStats, histogram?: ErrorHistogram) =>
          measured.set(p.name, { quality, histogram }),
      }),
      label: p.name,
    });
    const jobs = planned.map((p): EncodeJob<JobInput> =>
      p.plusOne !== undefined
        ? {
            inputs: [p.plusOne],
            outputs: [{ name: p.name, bytes: p.plusOne.data.byteLength }],
            label: p.name,
          }
        : encodeJob(p),
    );
    const source: JobSource<JobInput> = {
      read: async (t, shared, allocate) =>
        'data' in t
          ? new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength)
          : t.reader.read(t.entry, shared, allocate),
      readRange: async (t, begin, end, shared, allocate) =>
        'data' in t
          ? new Uint8Array(t.data.buffer, t.data.byteOffset + begin, end - begin)
          : t.reader.read(
              { ...t.entry, begin: t.entry.begin + begin, end: t.entry.begin + end },
              shared,
              allocate,
            ),
      size: (t) => ('data' in t ? t.data.byteLength : t.entry.end - t.entry.begin),
    };
    await runEncodeJobs(source, [...jobs, ...copies], writer, hooks);
    const computed = generated.reduce((n, g) => n + g.data.length, 0); // F32, from config.json
    const size = { weights: computed, bits: 32 * computed };
    for (const p of planned) {
      size.weights += numelOf(p.dims);
      size.bits += 8 * ggmlTensorBytes(ggmlTypeByName(p.type)!, p.dims[0]!, numelOf(p.dims));
    }
    const tensors = report.map((r) => {
      const m = measured.get(r.name);
      if (m === undefined) return r;
      const t = ggmlTypeByName(r.type)!;
      return {
        ...r,
        bits_per_weight: (8 * t.typeSize) / t.blockSize,
        quality: summarizeQuality(m.quality),
        ...(m.histogram !== undefined && { error_histogram: m.histogram }),
      };
    });
    return { files: writer.files, tensors, size };
  } finally {
    await checkpoint.close();
  }
}
