/**
 * The GGUF layout: a safetensors model in, a GGUF v3 file out whose tensor data is byte-exact
 * with what llama.cpp's reference quantizers produce for the same float32 rows
 * (src/core/interop/ggml*.ts), and GGUF files back to float32 safetensors. docs/layouts/gguf.md
 * describes the choices; in short:
 *
 * - Which type each tensor gets follows llama.cpp: tensors of rank ≥ 2 whose name ends in
 *   "weight" get the chosen `type` when their row length (ne[0], the LAST safetensors dim) is a
 *   whole number of blocks (32, or 256 for the K-quants); otherwise llama-quantize's fallback:
 *   Q4_K → Q5_0 and Q6_K → Q8_0 when the row is a multiple of 32, else F16 (for the 32-blocks
 *   llama-quantize refuses and convert_hf_to_gguf.py falls back to F16, as here). Rank ≤ 1
 *   tensors (norms, biases) are F32, other rank ≥ 2 tensors F16. Integer buffers are skipped.
 * - Dimensions are written in ggml order (reversed); names are kept, or (names=gguf, llama
 *   checkpoints) renamed to llama.cpp's (blk.N.attn_q.weight ...) with q/k rows permuted as
 *   convert_hf_to_gguf.py does.
 * - Streaming: tensor infos need only shapes and types, so the header is written first and the
 *   tensors follow one at a time: memory is bounded by the largest tensor.
 * - A Hugging Face model folder in (config.json, tokenizer, shards) gives a file llama.cpp runs:
 *   hyperparameters, tokenizer and llama.cpp names from the folder (./gguf-hf/write.ts).
 */
import { basename, extname } from 'node:path';

import { floatDTypeOfSt, type StDType } from '../../core/dtypes.js';
import {
  QUANT_TYPES,
  canDecode,
  ggmlTensorBytes,
  ggmlTypeByName,
  isQuantType,
  type GgmlQuantType,
  type GgmlWriteType,
} from '../../core/interop/ggml.js';
import { permuteHeads } from '../../core/interop/ggml-tensor.js';
import { numelOf } from '../../core/dtypes.js';
import { QuantdError, shapeText, throwIfAborted } from '../../errors/index.js';
import { sizeLabel } from '../../core/interop/size-label.js';
import { GgufFileReader } from '../../format/gguf-file.js';
import { GgufOutput } from '../../format/gguf-split.js';
import {
  GGUF_MAX_DIMS,
  GGUF_MAX_TENSOR_NAME,
  isGguf,
  type GgufKv,
  type GgufTensorInfo,
} from '../../format/gguf.js';
import { SafetensorsFileReader, SafetensorsFileWriter } from '../../format/safetensors-file.js';
import type { TensorEntry, TensorPlan } from '../../format/safetensors.js';
import { isDirectory, isModelFolder } from './gguf-hf/folder.js';
import { ggufFolderOptions, writeGgufFromFolder } from './gguf-hf/write.js';
import { MIXTURE_OPTIONS } from './gguf-mixture.js';
import { llamaGgufName } from './gguf-names.js';
import { ALIGNMENT, LLAMA_FTYPE, QUANTIZATION_VERSION, ggufTensorType, splitMaxSize } from './gguf-types.js';
import { inLayout, safetensorsSource } from './linear-common.js';
import { runEncodeJobs, sharedIf, type EncodeJob, type LayoutHooks } from './run-jobs.js';
import type { InteropLayout, LayoutOptions, LayoutWriteResult } from './types.js';

const OPTIONS: Readonly<Record<string, string>> = {
  type: `ggml type of the weights: ${QUANT_TYPES.join(', ')} (default Q8_0); F32 or F16 too for a model folder`,
  arch: 'general.architecture (default "llama" for a llama-like checkpoint; required otherwise)',
  name: 'general.name (default: the input file name without its extension)',
  names:
    'keep (default): the safetensors tensor names; gguf: llama.cpp names (blk.N.attn_q.weight ...), llama checkpoints only',
  heads:
    'with names=gguf: attention heads (num_attention_heads), to permute q_proj rows as convert_hf_to_gguf.py does',
  kv_heads: 'with names=gguf: key/value heads (num_key_value_heads, default: heads), to permute k_proj rows',
  split_max_size:
    "llama.cpp's split format above this much tensor data per file (500M, 2G: decimal units): NAME-00001-of-0000N.gguf …",
  ...Object.fromEntries(Object.entries(MIXTURE_OPTIONS).map(([k, v]) => [k, `(model folders) ${v}`])),
};

interface GgufOptions {
  readonly type: GgmlQuantType;
  readonly arch: string | undefined;
  readonly name: string | undefined;
  readonly names: 'keep' | 'gguf';
  readonly heads: number | undefined;
  readonly kvHeads: number | undefined;
  readonly splitMaxSize: number | undefined;
}

function bad(option: string, detail: string, value: string): QuantdError {
  return new QuantdError('OPTION_INVALID', { option, detail, value });
}

function positiveInt(option: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(n) || n < 1)
    throw bad(option, 'must be a positive integer', value);
  return n;
}

export const ggufOptions = (options: LayoutOptions): GgufOptions =>
  inLayout('gguf', () => parseOptions(options));

function parseOptions(options: LayoutOptions): GgufOptions {
  for (const [key, value] of Object.entries(options)) {
    if (value !== undefined && !Object.hasOwn(OPTIONS, key)) {
      throw bad(
        key,
        `is not an option of the gguf layout (its options: ${Object.keys(OPTIONS).join(', ')})`,
        value,
      );
    }
  }
  const mixtureKey = Object.keys(MIXTURE_OPTIONS).find((k) => options[k] !== undefined);
  if (mixtureKey !== undefined) {
    throw bad(
      mixtureKey,
      mixtureKey === 'imatrix'
        ? "needs a Hugging Face model folder: an importance matrix names llama.cpp's tensors (blk.N.attn_q.weight …), which a folder's conversion gives"
        : "needs a Hugging Face model folder: llama.cpp's per-tensor rules read the layers and attention heads from its config.json",
      options[mixtureKey]!,
    );
  }
  const typeText = options['type'] ?? 'Q8_0';
  const type = typeText.toUpperCase();
  if (!isQuantType(type)) throw bad('type', `must be one of ${QUANT_TYPES.join(', ')}`, typeText);
  const arch = options['arch'];
  if (arch !== undefined && !/^[a-z0-9][a-z0-9_-]*$/.test(arch)) {
    throw bad('arch', 'must be a lowercase architecture name such as llama ([a-z0-9_-])', arch);
  }
  const names = options['names'] ?? 'keep';
  if (names !== 'keep' && names !== 'gguf') throw bad('names', 'must be keep or gguf', names);
  const heads = positiveInt('heads', options['heads']);
  const kvHeads = positiveInt('kv_heads', options['kv_heads']);
  if (names === 'gguf' && heads === undefined) {
    throw bad(
      'heads',
      'is required with names=gguf: llama.cpp expects q_proj/k_proj rows permuted per head (num_attention_heads in config.json)',
      '(none)',
    );
  }
  if (names === 'keep' && (heads !== undefined || kvHeads !== undefined)) {
    throw bad(
      heads !== undefined ? 'heads' : 'kv_heads',
      'only applies with names=gguf',
      String(heads ?? kvHeads),
    );
  }
  return {
    type,
    arch,
    name: options['name'],
    names,
    heads,
    kvHeads,
    splitMaxSize: splitMaxSize(options['split_max_size']),
  };
}

// --- which type each tensor gets ---------------------------------------------------------------

// --- llama.cpp names (./gguf-names.ts) --------------------------------------------------------

export { llamaGgufName };

/** Whether the checkpoint looks like a llama one (all float tensors have a llama.cpp name). */
function isLlamaLike(entries: readonly TensorEntry[]): boolean {
  const floats = entries.filter((e) => floatDTypeOfSt(e.dtype) !== undefined);
  return (
    floats.some((e) => /^model\.layers\.\d+\.self_attn\.q_proj\.weight$/.test(e.name)) &&
    floats.every((e) => llamaGgufName(e.name) !== undefined)
  );
}

export { permuteHeads };
export {
  ALIGNMENT,
  LLAMA_FTYPE,
  QUANTIZATION_VERSION,
  ggufTensorType,
  type TensorChoice,
} from './gguf-types.js';

// --- writing -----------------------------------------------------------------------------------

interface PlannedTensor {
  readonly entry: TensorEntry;
  readonly name: string;
  readonly dims: number[];
  readonly type: GgmlWriteType;
  readonly permute: number | undefined;
}

function planTensors(
  entries: readonly TensorEntry[],
  o: GgufOptions,
  source: string,
): { planned: PlannedTensor[]; report: LayoutWriteResult['tensors'][number][] } {
  const planned: PlannedTensor[] = [];
  const report: Array<LayoutWriteResult['tensors'][number]> = [];
  const names = new Map<string, string>();
  for (const entry of entries) {
    if (floatDTypeOfSt(entry.dtype) === undefined) {
      report.push({ name: entry.name, type: 'skipped', note: `${entry.dtype} is not a float tensor` });
      continue;
    }
    let name = entry.name;
    let permute: number | undefined;
    if (o.names === 'gguf') {
      const mapped = llamaGgufName(entry.name);
      if (mapped === null) {
        report.push({ name: entry.name, type: 'skipped', note: 'a buffer convert_hf_to_gguf.py drops' });
        continue;
      }
      if (mapped === undefined) {
        throw new QuantdError('FEATURE_UNSUPPORTED', {
          detail: `${source}: tensor ${JSON.stringify(entry.name)} has no llama.cpp name; use names=keep`,
        });
      }
      name = mapped;
      if (/\.self_attn\.q_proj\.(weight|bias)$/.test(entry.name)) permute = o.heads;
      if (/\.self_attn\.k_proj\.(weight|bias)$/.test(entry.name)) permute = o.kvHeads ?? o.heads;
    }
    if (entry.shape.length > GGUF_MAX_DIMS) {
      throw new QuantdError('SHAPE_UNSUPPORTED', {
        tensor: entry.name,
        shape: shapeText(entry.shape),
        detail: `GGUF (ggml) tensors have at most ${GGUF_MAX_DIMS} dimensions`,
      });
    }
    if (Buffer.byteLength(name) > GGUF_MAX_TENSOR_NAME) {
      throw new QuantdError('FEATURE_UNSUPPORTED', {
        detail: `${source}: tensor name ${JSON.stringify(name)} is longer than the ${GGUF_MAX_TENSOR_NAME} bytes ggml allows`,
      });
    }
    const clash = names.get(name);
    if (clash !== undefined) throw new QuantdError('NAME_COLLISION', { source, tensor: name });
    names.set(name, entry.name);
    const choice = ggufTensorType(name, entry.shape, o.type);
    const dims = entry.shape.length === 0 ? [1] : [...entry.shape].reverse();
    planned.push({ entry, name, dims, type: choice.type, permute });
    report.push({ name, type: choice.type, ...(choice.note !== undefined ? { note: choice.note } : {}) });
  }
  return { planned, report };
}

async function writeGguf(
  input: string,
  output: string,
  options: LayoutOptions,
  hooks: LayoutHooks = {},
): Promise<LayoutWriteResult> {
  if (await isDirectory(input)) return writeGgufFromFolder(input, output, options, hooks);
  const o = ggufOptions(options);
  const reader = await SafetensorsFileReader.open(input);
  try {
    const { entries } = reader.header;
    const llama = isLlamaLike(entries);
    if (o.names === 'gguf' && !llama) {
      throw new QuantdError('FEATURE_UNSUPPORTED', {
        detail: `${input}: names=gguf renames llama checkpoints only (model.layers.N.self_attn.q_proj.weight ...)`,
      });
    }
    const arch = o.arch ?? (llama ? 'llama' : undefined);
    if (arch === undefined) {
      throw bad(
        'arch',
        'is required: the checkpoint is not a llama-like one, so general.architecture is unknown',
        '(none)',
      );
    }
    const { planned, report } = planTensors(entries, o, input);
    const kvs: GgufKv[] = [
      { key: 'general.architecture', value: { type: 'string', value: arch } },
      { key: 'general.type', value: { type: 'string', value: 'model' } },
      { key: 'general.name', value: { type: 'string', value: o.name ?? basename(input, extname(input)) } },
      {
        key: 'general.size_label',
        value: { type: 'string', value: sizeLabel(planned.reduce((n, p) => n + numelOf(p.dims), 0)) },
      },
      { key: 'general.file_type', value: { type: 'uint32', value: LLAMA_FTYPE[o.type] } },
      { key: 'general.quantization_version', value: { type: 'uint32', value: QUANTIZATION_VERSION } },
      { key: 'general.alignment', value: { type: 'uint32', value: ALIGNMENT } },
    ];
    const writer = await GgufOutput.create(
      output,
      kvs,
      planned.map((p) => ({ name: p.name, dims: p.dims, type: p.type })),
      o.splitMaxSize,
    );
    const jobs = planned.map((p): EncodeJob<TensorEntry> => ({
      inputs: [p.entry],
      outputs: [
        { name: p.name, bytes: ggmlTensorBytes(ggmlTypeByName(p.type)!, p.dims[0]!, numelOf(p.dims)) },
      ],
      call: {
        kind: 'ggml',
        tensor: p.entry.name,
        dtype: floatDTypeOfSt(p.entry.dtype)!,
        type: p.type,
        ne0: p.dims[0]!,
        ...(p.permute !== undefined && { permute: { rows: p.entry.shape[0] ?? 1, heads: p.permute } }),
      },
      label: p.name,
    }));
    await runEncodeJobs(safetensorsSource(reader), jobs, writer, hooks);
    return { files: writer.files, tensors: report };
  } finally {
    await reader.close();
  }
}

/**
 * A job's options are checked before its input is known to be a file or a folder. The
 * llama-quantize options apply to folders only, so they are checked as a folder's; otherwise
 * what either accepts passes (the writer checks again), and else the file's reason is given.
 */
function checkGgufOptions(options: LayoutOptions): void {
  if (Object.keys(MIXTURE_OPTIONS).some((k) => options[k] !== undefined)) {
    ggufFolderOptions(options);
    return;
  }
  try {
    ggufOptions(options);
  } catch (fileError) {
    try {
      ggufFolderOptions(options);
    } catch {
      throw fileError;
    }
  }
}

// --- reading -----------------------------------------------------------------------------------

/** ggml integer types (and F64) copy through to the safetensors dtype of the same layout. */
const PASSTHROUGH: Readonly<Record<string, StDType>> = {
  I8: 'I8',
  I16: 'I16',
  I32: 'I32',
  I64: 'I64',
  F64: 'F64',
};

async function readGguf(
  input: string,
  output: string,
  hooks: LayoutHooks = {},
): Promise<{ readonly tensors: number }> {
  const reader = await GgufFileReader.open(input);
  try {
    const { header } = reader;
    const tensors = [...header.tensors].sort((a, b) => a.offset - b.offset);
    const plan: TensorPlan[] = tensors.map((t: GgufTensorInfo) => {
      if (!canDecode(t.type.name) && PASSTHROUGH[t.type.name] === undefined) {
        throw new QuantdError('FEATURE_UNSUPPORTED', {
          detail: `${input}: tensor ${JSON.stringify(t.name)} is ${t.type.name}; quantd decodes F32, F16, BF16, ${QUANT_TYPES.join(', ')}`,
        });
      }
      const shape = [...t.dims].reverse();
      return { name: t.name, dtype: PASSTHROUGH[t.type.name] ?? 'F32', shape };
    });
    const metadata: Record<string, string> = { format: 'pt', 'quantd.source': 'gguf' };
    for (const key of ['general.architecture', 'general.name']) {
      const v = header.kvs.get(key);
      if (v?.type === 'string') metadata[`gguf.${key}`] = v.value;
    }
    throwIfAborted(hooks.signal);
    const writer = await SafetensorsFileWriter.create(output, plan, metadata);
    const jobs = tensors.map((t): EncodeJob<GgufTensorInfo> => ({
      inputs: [t],
      outputs: [{ name: t.name, bytes: PASSTHROUGH[t.type.name] !== undefined ? t.bytes : t.numel * 4 }],
      ...(PASSTHROUGH[t.type.name] === undefined && {
        call: { kind: 'ggml-decode', type: t.type.name, numel: t.numel },
      }),
      label: t.name,
    }));
    const source = {
      read: async (t: GgufTensorInfo, shared: boolean) => sharedIf(shared, await reader.read(t)),
      size: (t: GgufTensorInfo) => t.bytes,
    };
    await runEncodeJobs(source, jobs, writer, hooks);
    return { tensors: tensors.length };
  } finally {
    await reader.close();
  }
}

export const ggufLayout: InteropLayout = {
  name: 'gguf',
  summary:
    "GGUF v3 for llama.cpp / ggml: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS and llama-quantize's file types (ftype=Q4_K_M …), byte-exact with llama.cpp",
  options: OPTIONS,
  extension: '.gguf',
  checkOptions: checkGgufOptions,
  write: writeGguf,
  read: readGguf,
  detect: (_path: string, head: Uint8Array) => isGguf(head),
  readsFolder: isModelFolder,
};
