/**
 * The onnx layout for a Hugging Face model folder: the whole causal language model as one ONNX
 * graph ONNX Runtime (and ONNX Runtime GenAI) runs end to end (src/service/decoder/graph.ts), its
 * linear projections as 4-bit MatMulNBits weights (the same bytes as the file layout, with float32
 * scales: the graph computes in float32) or kept float (weights=float), everything else as the
 * checkpoint's own tensors. Beside OUT.onnx and OUT.onnx.data it writes genai_config.json and
 * copies the tokenizer files, which ONNX Runtime GenAI reads from the model's directory.
 *
 * Every check that can fail (config.json, the architecture, each tensor's name and shape) runs
 * before any tensor is read; the tensors then stream through the encoders shard after shard.
 */
import { stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';

import { matMulNBitsShapes, MATMULNBITS_BITS, type MatMulNBitsShapes } from '../../core/interop/onnx.js';
import { floatDTypeOfSt, type StDType } from '../../core/dtypes.js';
import { QuantdError } from '../../errors/index.js';
import { copyFileAtomic, writeFileAtomic } from '../../format/file-io.js';
import { GraphBuilder } from '../../format/onnx-graph.js';
import { ONNX_DTYPE, ONNX_OF_ST } from '../../format/onnx.js';
import { OnnxFileWriter, onnxDataPath, type OnnxTensorPlan } from '../../format/onnx-file.js';
import { buildDecoder, type DecoderTaps, type TapPoint } from '../decoder/graph.js';
import { decoderSpec, type DecoderSpec } from '../decoder/spec.js';
import { initializerWeights, type NBitsWeight } from '../decoder/weights.js';
import { genaiConfig } from '../decoder/genai-config.js';
import { architectureOf } from './gguf-hf/architectures.js';
import { openCheckpoint, type CheckpointTensor } from './gguf-hf/checkpoint.js';
import { readHfFolder, type HfFolder } from './gguf-hf/folder.js';
import { inLayout } from './linear-common.js';
import { runEncodeJobs, type EncodeJob, type JobSource, type LayoutHooks } from './run-jobs.js';
import type { LayoutWriteResult } from './types.js';

/** The decoder's opsets: ONNX 21 (ORT ≥ 1.18), ORT's contrib operators. */
export const DECODER_OPSETS = [
  { domain: '', version: 21 },
  { domain: 'com.microsoft', version: 1 },
] as const;
const IR_VERSION = 10;

/** Files of the model folder ONNX Runtime GenAI reads beside the model (copied when present). */
const TOKENIZER_FILES = [
  'tokenizer.json',
  'tokenizer.model',
  'tokenizer_config.json',
  'special_tokens_map.json',
  'generation_config.json',
] as const;

export const GENAI_CONFIG = 'genai_config.json';

/** Side files of a decoder written to `output`: the data file, genai_config.json, the tokenizer. */
export function decoderCompanions(output: string): string[] {
  const dir = dirname(output);
  return [onnxDataPath(output), join(dir, GENAI_CONFIG), ...TOKENIZER_FILES.map((f) => join(dir, f))];
}

/** The linear projections the decoder can quantize (Phi-3's fused ones included). */
const DECODER_LINEAR = /\.(?:self_attn\.(?:q|k|v|o|qkv)_proj|mlp\.(?:gate|up|down|gate_up)_proj)\.weight$/;

export interface DecoderParams {
  readonly weights: 'int4' | 'float';
  readonly blockSize: number;
  readonly sym: boolean;
  readonly accuracyLevel: number | undefined;
}

const FOLDER_ONLY = {
  weights:
    'int4 (default): linear projections as 4-bit MatMulNBits; float: every weight as the checkpoint stores it',
} as const;

export const DECODER_OPTIONS = FOLDER_ONLY;

export function decoderWeightsOption(value: string | undefined): 'int4' | 'float' {
  return inLayout('onnx', () => {
    if (value === undefined || value === 'int4') return 'int4';
    if (value === 'float') return 'float';
    throw new QuantdError('OPTION_INVALID', { option: 'weights', detail: 'must be int4 or float', value });
  });
}

interface Planned {
  readonly source: CheckpointTensor;
  readonly nbits?: MatMulNBitsShapes;
}

function checkTokenizer(folder: HfFolder): void {
  if (folder.sentencePiece === undefined && folder.tokenizerJson === undefined) {
    throw new QuantdError('HF_MODEL_INVALID', {
      path: folder.dir,
      detail: 'has neither tokenizer.model nor tokenizer.json (ONNX Runtime GenAI needs the tokenizer)',
    });
  }
}

/** The decoder of a model folder's checkpoint. */
export async function writeOnnxDecoder(
  dir: string,
  output: string,
  params: DecoderParams,
  hooks: LayoutHooks = {},
  /**
   * For quantd's own runs: each layer's output, the embeddings, calibration taps (whose points
   * `onTaps` is told), and rotary tables for this many positions.
   */
  graph: {
    readonly hiddenStates?: boolean;
    readonly embeddings?: boolean;
    readonly taps?: DecoderTaps;
    readonly onTaps?: (taps: readonly TapPoint[]) => void;
    readonly maxPositions?: number;
  } = {},
): Promise<LayoutWriteResult> {
  const folder = await readHfFolder(dir);
  const configPath = `${dir}/config.json`;
  const arch = architectureOf(folder.config, configPath);
  const spec = decoderSpec(folder.config, configPath);
  checkTokenizer(folder);
  const checkpoint = await openCheckpoint(dir, arch, spec.h, configPath);
  try {
    const planned: Planned[] = [];
    const report: Array<LayoutWriteResult['tensors'][number]> = [];
    for (const t of checkpoint.tensors) {
      if (t.ggufName === null) {
        report.push({ name: t.entry.name, type: 'skipped', note: 'not a weight of the network' });
        continue;
      }
      const quantize = params.weights === 'int4' && DECODER_LINEAR.test(t.entry.name);
      const nbits = quantize ? matMulNBitsShapes(t.entry.name, t.entry.shape, params.blockSize) : undefined;
      planned.push(nbits ? { source: t, nbits } : { source: t });
      report.push({
        name: t.entry.name,
        type: nbits ? `MatMulNBits int4 b${params.blockSize} ${params.sym ? 'sym' : 'asym'}` : t.entry.dtype,
        ...(nbits ? {} : { note: 'plain initializer' }),
      });
    }
    const { tensors, dtypes, nbits } = tensorPlan(planned, params);
    const g = new GraphBuilder();
    g.reserve(tensors.map((t) => t.name));
    const taps = buildDecoder(g, spec, initializerWeights(dtypes, nbits), {
      maxPositions: graph.maxPositions ?? spec.h.context,
      hiddenStates: graph.hiddenStates === true,
      embeddings: graph.embeddings === true,
      ...(graph.taps !== undefined && { taps: graph.taps }),
    });
    graph.onTaps?.(taps);
    const writer = await OnnxFileWriter.create(
      output,
      {
        irVersion: IR_VERSION,
        opsets: DECODER_OPSETS,
        producerName: 'quantd',
        producerVersion: '',
        docString: `${spec.className} decoder written by quantd (${params.weights === 'int4' ? `MatMulNBits 4-bit, block_size ${params.blockSize}` : 'float weights'})`,
        metadata: [
          { key: 'quantd.layout', value: 'onnx' },
          { key: 'quantd.decoder', value: spec.arch },
          { key: 'quantd.weights', value: params.weights },
          ...(params.weights === 'int4'
            ? [
                { key: 'quantd.block_size', value: String(params.blockSize) },
                { key: 'quantd.sym', value: String(params.sym) },
              ]
            : []),
        ],
        graphName: 'quantd_decoder',
        nodes: g.nodes,
        inputs: g.inputs,
        outputs: g.outputs,
      },
      tensors,
      g.inline,
    );
    const jobs = planned.map((p): EncodeJob<CheckpointTensor> => {
      const e = p.source.entry;
      if (p.nbits === undefined) {
        return { inputs: [p.source], outputs: [{ name: e.name, bytes: e.end - e.begin }], label: e.name };
      }
      const s = p.nbits;
      return {
        inputs: [p.source],
        outputs: [
          { name: `${e.name}_Q4`, bytes: s.b[0] * s.b[1] * s.b[2] },
          { name: `${e.name}_scales`, bytes: s.scales * 4 },
          ...(params.sym ? [] : [{ name: `${e.name}_zero_points`, bytes: s.zeroPoints }]),
        ],
        call: {
          kind: 'onnx',
          tensor: e.name,
          shape: e.shape,
          dtype: floatDTypeOfSt(e.dtype)!,
          blockSize: params.blockSize,
          sym: params.sym,
          scaleType: 'float32',
        },
        label: e.name,
      };
    });
    const source: JobSource<CheckpointTensor> = {
      read: (t, shared, allocate) => t.reader.read(t.entry, shared, allocate),
      size: (t) => t.entry.end - t.entry.begin,
    };
    await runEncodeJobs(source, jobs, writer, hooks);
    const files = [...writer.files, ...(await writeSideFiles(folder, spec, output))];
    return { files, tensors: report };
  } finally {
    await checkpoint.close();
  }
}

function tensorPlan(
  planned: readonly Planned[],
  params: DecoderParams,
): {
  tensors: OnnxTensorPlan[];
  dtypes: Map<string, StDType>;
  nbits: Map<string, NBitsWeight>;
} {
  const tensors: OnnxTensorPlan[] = [];
  const dtypes = new Map<string, StDType>();
  const nbits = new Map<string, NBitsWeight>();
  for (const p of planned) {
    const e = p.source.entry;
    if (p.nbits === undefined) {
      tensors.push({ name: e.name, dataType: ONNX_OF_ST[e.dtype], dims: e.shape, bytes: e.end - e.begin });
      dtypes.set(e.name, e.dtype);
      continue;
    }
    const s = p.nbits;
    const q = `${e.name}_Q4`;
    const scales = `${e.name}_scales`;
    const zeroPoints = params.sym ? null : `${e.name}_zero_points`;
    tensors.push({ name: q, dataType: ONNX_DTYPE.UINT8, dims: s.b, bytes: s.b[0] * s.b[1] * s.b[2] });
    tensors.push({ name: scales, dataType: ONNX_DTYPE.FLOAT, dims: [s.scales], bytes: s.scales * 4 });
    if (zeroPoints !== null) {
      tensors.push({
        name: zeroPoints,
        dataType: ONNX_DTYPE.UINT8,
        dims: [s.zeroPoints],
        bytes: s.zeroPoints,
      });
    }
    nbits.set(e.name, {
      q,
      scales,
      zeroPoints,
      K: s.K,
      N: s.N,
      bits: MATMULNBITS_BITS,
      blockSize: s.blockSize,
      ...(params.accuracyLevel === undefined ? {} : { accuracyLevel: params.accuracyLevel }),
    });
  }
  return { tensors, dtypes, nbits };
}

async function isFile(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isFile();
  } catch {
    return false;
  }
}

/** genai_config.json and the tokenizer files, in the model's directory. */
async function writeSideFiles(folder: HfFolder, spec: DecoderSpec, output: string): Promise<string[]> {
  const dir = dirname(output);
  const written: string[] = [];
  const config = join(dir, GENAI_CONFIG);
  await writeFileAtomic(config, `${JSON.stringify(genaiConfig(spec, folder, basename(output)), null, 4)}\n`);
  written.push(config);
  for (const name of TOKENIZER_FILES) {
    const from = join(folder.dir, name);
    const to = join(dir, name);
    if (from === to || !(await isFile(from))) continue;
    await copyFileAtomic(from, to);
    written.push(to);
  }
  return written;
}
