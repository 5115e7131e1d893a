/**
 * A Hugging Face model folder → one GGUF file llama.cpp runs (what convert_hf_to_gguf.py and
 * llama-quantize do together): every check that can fail — config.json, the architecture, the
 * tokenizer, each tensor's name and shape against config.json — runs before any tensor is read;
 * then the header (general.*, the architecture's hyperparameters, the tokenizer) is written and
 * the tensors stream through the gguf layout's encoders, shard after shard.
 */
import { basename } from 'node:path';

import { floatDTypeOfSt, numelOf } from '../../../core/dtypes.js';
import { toFloat32 } from '../../../core/tensor.js';
import { ggmlTensorBytes, ggmlTypeByName, isQuantType, QUANT_TYPES } from '../../../core/interop/ggml.js';
import type { GgmlWriteType } from '../../../core/interop/ggml.js';
import { QuantdError, shapeText } from '../../../errors/index.js';
import { GgufFileWriter } from '../../../format/gguf-file.js';
import type { GgufKv } from '../../../format/gguf.js';
import { SafetensorsFileReader } from '../../../format/safetensors-file.js';
import type { TensorEntry } from '../../../format/safetensors.js';
import { ALIGNMENT, LLAMA_FTYPE, QUANTIZATION_VERSION, ggufTensorType } from '../gguf-types.js';
import { runEncodeJobs, type EncodeJob, type JobSource, type LayoutHooks } from '../run-jobs.js';
import type { LayoutOptions, LayoutWriteResult } from '../types.js';
import { architectureOf, type Architecture } from './architectures.js';
import { hyperparameters, type GeneratedTensor, type Hyperparameters } from './hyperparameters.js';
import { hfInvalid, readHfFolder, weightFiles } from './folder.js';
import { str, u32 } from './gguf-kv.js';
import { tokenizerMetadata } from './tokenizer.js';

/** llama_ftype of all-F32 and mostly-F16 files (LLAMA_FTYPE_ALL_F32, LLAMA_FTYPE_MOSTLY_F16). */
const FLOAT_FTYPE = { F32: 0, F16: 1 } as const;
type FolderType = keyof typeof LLAMA_FTYPE | keyof typeof FLOAT_FTYPE;

/** Options that config.json decides for a model folder (given anyway: refused, not ignored). */
const FROM_CONFIG = ['arch', 'names', 'heads', 'kv_heads'];

function folderOptions(options: LayoutOptions): { type: FolderType; name: string | undefined } {
  for (const key of FROM_CONFIG) {
    const value = options[key];
    if (value !== undefined) {
      throw new QuantdError('OPTION_INVALID', {
        option: key,
        detail: 'does not apply to a model folder: config.json gives the architecture, names and heads',
        value,
      });
    }
  }
  const text = options['type'] ?? 'Q8_0';
  const type = text.toUpperCase();
  if (type !== 'F32' && type !== 'F16' && !isQuantType(type)) {
    throw new QuantdError('OPTION_INVALID', {
      option: 'type',
      detail: `must be one of F32, F16, ${QUANT_TYPES.join(', ')}`,
      value: text,
    });
  }
  return { type, name: options['name'] };
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
}

const LAYER = /^blk\.(\d+)\./;

function checkComplete(
  names: ReadonlySet<string>,
  arch: Architecture,
  h: Hyperparameters,
  dir: string,
): void {
  const required = ['token_embd.weight', 'output_norm.weight'];
  if (!h.tiedEmbeddings) required.push('output.weight');
  for (let i = 0; i < h.layers; i++) required.push(...arch.blockTensors.map((t) => `blk.${i}.${t}`));
  const missing = required.filter((n) => !names.has(n));
  if (missing.length > 0) {
    throw hfInvalid(
      dir,
      `config.json describes ${h.layers} layers but the weights lack ${missing.slice(0, 3).join(', ')}${missing.length > 3 ? ` and ${missing.length - 3} more` : ''}`,
    );
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
  const o = folderOptions(options);
  const folder = await readHfFolder(dir);
  const configPath = `${dir}/config.json`;
  const arch = architectureOf(folder.config, configPath);
  const h = hyperparameters(folder.config, configPath);
  const tokenizer = await tokenizerMetadata(folder, h.vocab);
  const readers: SafetensorsFileReader[] = [];
  try {
    for (const file of await weightFiles(dir)) readers.push(await SafetensorsFileReader.open(file));
    const planned: Planned[] = [];
    const report: Array<LayoutWriteResult['tensors'][number]> = [];
    const names = new Set<string>();
    for (const reader of readers) {
      for (const entry of reader.header.entries) {
        const name = arch.tensorName(entry.name);
        if (name === null || floatDTypeOfSt(entry.dtype) === undefined) {
          report.push({ name: entry.name, type: 'skipped', note: 'not a weight llama.cpp reads' });
          continue;
        }
        if (name === undefined) {
          throw new QuantdError('FEATURE_UNSUPPORTED', {
            detail: `${reader.path}: tensor ${JSON.stringify(entry.name)} has no llama.cpp name in the ${arch.gguf} architecture`,
          });
        }
        const layer = LAYER.exec(name);
        const expected = arch.shapeOf(name, h);
        if (
          (layer && Number(layer[1]) >= h.layers) ||
          (expected !== undefined && shapeText(expected) !== shapeText(entry.shape))
        ) {
          throw hfInvalid(
            configPath,
            layer && Number(layer[1]) >= h.layers
              ? `num_hidden_layers is ${h.layers} but the weights hold ${entry.name}`
              : `contradicts the weights: ${entry.name} has shape ${shapeText(entry.shape)}, config.json implies ${shapeText(expected!)}`,
          );
        }
        if (names.has(name)) throw new QuantdError('NAME_COLLISION', { source: dir, tensor: name });
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
    }
    checkComplete(names, arch, h, dir);
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
    const kvs: GgufKv[] = [
      str('general.architecture', arch.gguf),
      str('general.name', modelName),
      str('general.basename', modelName),
      u32('general.file_type', isQuantType(o.type) ? LLAMA_FTYPE[o.type] : FLOAT_FTYPE[o.type]),
      u32('general.quantization_version', QUANTIZATION_VERSION),
      u32('general.alignment', ALIGNMENT),
      ...arch.metadata(h, folder.config, configPath),
      ...tokenizer,
    ];
    const writer = await GgufFileWriter.create(output, kvs, [
      ...planned.map((p) => ({ name: p.name, dims: p.dims, type: p.type })),
      ...generated.map((g) => ({ name: g.name, dims: [g.data.length], type: 'F32' })),
    ]);
    const copies = generated.map((g): EncodeJob<JobInput> => ({
      inputs: [g],
      outputs: [{ name: g.name, bytes: g.data.byteLength }],
      label: g.name,
    }));
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
      },
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
      read: async (t, shared) =>
        'data' in t
          ? new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength)
          : t.reader.read(t.entry, shared),
      size: (t) => ('data' in t ? t.data.byteLength : t.entry.end - t.entry.begin),
    };
    await runEncodeJobs(source, [...jobs, ...copies], writer, hooks);
    return { files: [output], tensors: report };
  } finally {
    for (const r of readers) await r.close();
  }
}
