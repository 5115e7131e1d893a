/**
 * The models an evaluation or a calibration runs, each on a real engine: a GGUF file in llama.cpp;
 * an ONNX decoder in ONNX Runtime; a Hugging Face folder — float, or quantized in any layout quantd
 * reads back (GPTQ, AWQ, bitsandbytes, compressed-tensors, qtensor int4/int8) — as a float decoder
 * graph in ONNX Runtime, its weights dequantized first where ONNX Runtime has no kernel for them.
 * Work files go to a temporary directory the caller removes.
 */
import { mkdir, stat, symlink } from 'node:fs/promises';
import { basename, extname, join, resolve } from 'node:path';

import type { Compute } from '../../core/compute.js';
import { parseSpec } from '../../core/spec.js';
import { QuantdError } from '../../errors/index.js';
import { GgufFileReader } from '../../format/gguf-file.js';
import { copyFileAtomic } from '../../format/file-io.js';
import { SafetensorsFileReader } from '../../format/safetensors-file.js';
import { QTENSOR_FORMAT } from '../../format/qtensor.js';
import { DecoderSession, type OrtSessionOptions } from '../engines/onnxruntime.js';
import { GgufSession } from '../engines/llama-cpp.js';
import { detectLayout } from '../layouts/detect.js';
import { MODEL_FOLDER_FILES, isDirectory } from '../layouts/gguf-hf/folder.js';
import { writeOnnxDecoder } from '../layouts/onnx-decoder.js';
import type { Encoding } from '../../kernels/encoders.js';
import { runModel } from '../model.js';
import { resolveModelInput } from '../shards.js';
import { writeShardIndex } from './shard-index.js';

/** A model that gives logits for a window of token ids. */
export interface LogitSource {
  /** What it is and what runs it, for reports: "GGUF in llama.cpp". */
  readonly describe: string;
  readonly vocab: number;
  /** Logits [ids.length, vocab]; rows before `from` may be left zero (unscored). */
  logits(ids: Int32Array, from: number): Promise<Float32Array>;
  /** Each layer's output [seq, hidden] for the window (ONNX Runtime decoders built here). */
  hidden?(ids: Int32Array, layers: number): Promise<Float32Array[]>;
  close(): Promise<void>;
}

export interface SourceContext {
  /** The float model folder the quantized one came from: its config.json and tokenizer. */
  readonly reference: string;
  /** A directory for work files (dequantized weights, decoder graphs), removed by the caller. */
  readonly work: string;
  readonly compute: Compute;
  readonly encoding: Encoding;
  readonly window: number;
  readonly threads?: number;
  readonly signal?: AbortSignal;
  /** What the engine is loaded for, in an ENGINE_UNAVAILABLE message. */
  readonly purpose: string;
}

let workCount = 0;
const workName = (ctx: SourceContext, base: string): string => join(ctx.work, `${base}-${workCount++}`);

async function ggufVocab(path: string): Promise<number> {
  const reader = await GgufFileReader.open(path);
  try {
    const tokens = reader.header.kvs.get('tokenizer.ggml.tokens');
    if (tokens?.type !== 'array') {
      throw new QuantdError('FEATURE_UNSUPPORTED', {
        detail: `${path}: has no tokenizer.ggml.tokens; evaluation needs a GGUF with its vocabulary`,
      });
    }
    return tokens.value.length;
  } finally {
    await reader.close();
  }
}

/** Whether a weight file holds quantized tensors (a layout's, or quantd's qtensor container). */
async function isQuantizedFile(file: string): Promise<boolean> {
  if ((await detectLayout(file)) !== undefined) return true;
  const reader = await SafetensorsFileReader.open(file);
  try {
    return reader.header.metadata?.['format'] === QTENSOR_FORMAT;
  } finally {
    await reader.close();
  }
}

/**
 * A float copy of a model folder: config.json and the tokenizer from `reference`, each weight
 * file dequantized (or linked, when already float), and an index naming the new files' tensors.
 */
async function floatFolder(model: string, ctx: SourceContext): Promise<string> {
  const input = await resolveModelInput(model);
  const quantized = await Promise.all(input.files.map(isQuantizedFile));
  // a float folder with its own config.json runs as it is
  if (!quantized.some((q) => q) && (await isFile(join(model, 'config.json')))) return model;
  const dir = workName(ctx, 'float');
  await mkdir(dir, { recursive: true });
  for (const name of MODEL_FOLDER_FILES) {
    if (name.endsWith('.safetensors')) continue;
    const from = join(ctx.reference, name);
    if (await isFile(from)) await copyFileAtomic(from, join(dir, name));
  }
  const outputs: string[] = [];
  for (const [i, file] of input.files.entries()) {
    const out = join(dir, basename(file));
    outputs.push(out);
    if (!quantized[i]) {
      await symlink(resolve(file), out);
      continue;
    }
    const layout = await detectLayout(file);
    if (layout !== undefined) {
      await layout.read(file, out, { encoding: ctx.encoding, signal: ctx.signal });
    } else {
      await runModel(
        file,
        out,
        { op: 'dequantize', spec: parseSpec({}), outDType: 'float32', include: [], exclude: [] },
        { compute: ctx.compute, signal: ctx.signal },
      );
    }
  }
  if (outputs.length > 1) await writeShardIndex(dir, outputs);
  return dir;
}

async function isFile(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isFile();
  } catch {
    return false;
  }
}

/** A model folder (float or quantized) as a float decoder in ONNX Runtime. */
async function folderSource(model: string, ctx: SourceContext, label: string): Promise<LogitSource> {
  const folder = await floatFolder(model, ctx);
  const graph = `${workName(ctx, 'decoder')}.onnx`;
  await writeOnnxDecoder(
    folder,
    graph,
    { weights: 'float', blockSize: 32, sym: false, accuracyLevel: undefined },
    { encoding: ctx.encoding, signal: ctx.signal },
    { hiddenStates: true, maxPositions: ctx.window },
  );
  return decoderSource(graph, ctx, `${label} (float decoder in ONNX Runtime)`, true);
}

async function decoderSource(
  path: string,
  ctx: SourceContext,
  describe: string,
  hidden: boolean,
): Promise<LogitSource> {
  const options: OrtSessionOptions = ctx.threads === undefined ? {} : { threads: ctx.threads };
  const session = await DecoderSession.open(path, ctx.purpose, options);
  return {
    describe,
    vocab: session.vocab,
    logits: async (ids) => (await session.run(ids))['logits']!,
    ...(hidden && {
      hidden: async (ids: Int32Array, layers: number) => {
        const names = Array.from({ length: layers }, (_, i) => `hidden.${i}`);
        const out = await session.run(ids, names);
        return names.map((n) => out[n]!);
      },
    }),
    close: () => session.close(),
  };
}

/** The model at `path` (a .gguf, an .onnx decoder, or a model folder) as a LogitSource. */
export async function openLogitSource(path: string, ctx: SourceContext): Promise<LogitSource> {
  if (await isDirectory(path)) return folderSource(path, ctx, basename(path));
  const ext = extname(path).toLowerCase();
  if (ext === '.gguf') {
    const session = await GgufSession.open(path, ctx.purpose, ctx.window, await ggufVocab(path), ctx.threads);
    return {
      describe: `${basename(path)} (GGUF in llama.cpp)`,
      vocab: session.vocab,
      logits: (ids, from) => session.logits(ids, from),
      close: () => session.close(),
    };
  }
  if (ext === '.onnx') return decoderSource(path, ctx, `${basename(path)} (ONNX Runtime)`, false);
  throw new QuantdError('USAGE', {
    detail: `${path}: evaluation takes a model folder, a .gguf file or an .onnx decoder`,
  });
}
