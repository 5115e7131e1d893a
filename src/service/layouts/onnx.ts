/**
 * The "onnx" layout: an ONNX model for ONNX Runtime in which every linear projection weight is a
 * `com.microsoft.MatMulNBits` node (4-bit blockwise weights, the numerics of ORT's own
 * `matmul_4bits_quantizer.py`; src/core/interop/onnx.ts), and every other tensor a plain float (or
 * integer) initializer. Container: src/format/onnx-file.ts (the model file plus its external data
 * file `OUT.onnx.data`); docs/layouts/onnx.md.
 *
 * write: for a weight `X.weight` [N, K] (see LINEAR_WEIGHT), initializers `X.weight_Q4` uint8
 * [N, k_blocks, block_size/2], `X.weight_scales` [N · k_blocks] and, unless sym, `X.weight_zero_points`
 * uint8 [N · ⌈k_blocks/2⌉] (ORT's quantizer's names and shapes), and a node
 * `MatMulNBits(A_X, X.weight_Q4, X.weight_scales[, X.weight_zero_points]) → Y_X` with attributes K,
 * N, bits 4, block_size (and accuracy_level when given); graph input `A_X` [batch, K] and output
 * `Y_X` [batch, N] of the scales' float type (float16 for float16 weights, float32 otherwise).
 * Other tensors (biases included: the node takes none) keep their name, dtype and shape.
 *
 * read: every MatMulNBits node's weight back to `X.weight` F32 [N, K] (nn.Linear's orientation,
 * named after its B initializer without `_Q4`), other initializers passed through; in the file's
 * initializer order.
 */
import { extname } from 'node:path';

import {
  MATMULNBITS_BITS,
  MATMULNBITS_BLOCK_SIZES,
  matMulNBitsShapes,
  type MatMulNBitsScaleType,
  type MatMulNBitsShapes,
} from '../../core/interop/onnx.js';
import { ST_DTYPE_SIZE, floatDTypeOfSt } from '../../core/dtypes.js';
import { QuantdError, shapeText, throwIfAborted } from '../../errors/index.js';
import {
  ATTR_INT,
  looksLikeOnnxModel,
  ONNX_DTYPE,
  ONNX_OF_ST,
  ST_OF_ONNX,
  onnxDTypeName,
  type OnnxAttribute,
  type OnnxInitializer,
  type OnnxModel,
  type OnnxNode,
  type OnnxValueInfo,
} from '../../format/onnx.js';
import {
  OnnxFileReader,
  OnnxFileWriter,
  onnxDataPath,
  onnxInvalid,
  type OnnxTensorPlan,
} from '../../format/onnx-file.js';
import { SafetensorsFileWriter, type TensorEntry, type TensorPlan } from '../../format/index.js';
import {
  boolOption,
  checkOptions,
  floatDType,
  inLayout,
  intOption,
  isLinearWeight,
  moduleOf,
  noLinear,
  ptMetadata,
  safetensorsSource,
  withReader,
} from './linear-common.js';
import { runEncodeJobs, sharedIf, type EncodeJob, type LayoutHooks } from './run-jobs.js';
import type { InteropLayout, LayoutOptions, LayoutWriteResult } from './types.js';
import { isModelFolder } from './gguf-hf/folder.js';
import {
  DECODER_OPTIONS,
  decoderCompanions,
  decoderWeightsOption,
  writeOnnxDecoder,
  type DecoderParams,
} from './onnx-decoder.js';

const FILE_OPTIONS = {
  block_size: `weights per block along in_features: ${MATMULNBITS_BLOCK_SIZES.join(', ')} (default 32, as ORT's matmul_4bits_quantizer)`,
  sym: 'symmetric blocks, zero point 8 and no zero_points input (default false: per-block min/max zero points)',
  accuracy_level: "MatMulNBits' accuracy_level attribute, 0-4 (default: not written, ORT's default)",
} as const;

const OPTIONS = {
  ...FILE_OPTIONS,
  weights: `(model folders) ${DECODER_OPTIONS.weights}`,
} as const;

export interface OnnxLayoutParams {
  readonly blockSize: number;
  readonly sym: boolean;
  readonly accuracyLevel: number | undefined;
}

export const onnxParams = (options: LayoutOptions): OnnxLayoutParams =>
  inLayout('onnx', () => parseParams(options));

function parseParams(options: LayoutOptions): OnnxLayoutParams {
  const o = checkOptions('onnx', FILE_OPTIONS, options);
  const blockSize = intOption(
    'block_size',
    o['block_size'],
    32,
    (n) => MATMULNBITS_BLOCK_SIZES.includes(n),
    `one of ${MATMULNBITS_BLOCK_SIZES.join(', ')}`,
  );
  const sym = boolOption('sym', o['sym'], false);
  const accuracyLevel =
    o['accuracy_level'] === undefined
      ? undefined
      : intOption('accuracy_level', o['accuracy_level'], 0, (n) => n >= 0 && n <= 4, '0, 1, 2, 3 or 4');
  return { blockSize, sym, accuracyLevel };
}

/** ModelProto constants: IR 9 (ONNX 1.14; ORT ≥ 1.15 loads it) with opset 19, and com.microsoft 1. */
export const ONNX_IR_VERSION = 9;
export const ONNX_OPSETS = [
  { domain: '', version: 19 },
  { domain: 'com.microsoft', version: 1 },
] as const;
export const MS_DOMAIN = 'com.microsoft';

/** The initializer names of a quantized weight, as ORT's quantizer names them. */
export const qName = (weight: string): string => `${weight}_Q4`;
export const scalesName = (weight: string): string => `${weight}_scales`;
export const zeroPointsName = (weight: string): string => `${weight}_zero_points`;

const label = (p: OnnxLayoutParams): string => `MatMulNBits int4 b${p.blockSize} ${p.sym ? 'sym' : 'asym'}`;

const int = (name: string, i: number): OnnxAttribute => ({ name, type: ATTR_INT, i });

function scaleTypeOf(dtype: string): MatMulNBitsScaleType {
  return dtype === 'F16' ? 'float16' : 'float32';
}

/** The options of a model folder: the file options and `weights`. */
function decoderParams(options: LayoutOptions): DecoderParams {
  const { weights, ...rest } = options;
  return { ...onnxParams(rest), weights: decoderWeightsOption(weights) };
}

async function write(
  input: string,
  output: string,
  options: LayoutOptions,
  hooks: LayoutHooks = {},
): Promise<LayoutWriteResult> {
  if (await isModelFolder(input)) return writeOnnxDecoder(input, output, decoderParams(options), hooks);
  const params = onnxParams(options);
  return withReader(input, async (reader) => {
    const entries = reader.header.entries;
    const quantized = new Set(entries.filter(isLinearWeight).map((e) => e.name));
    if (quantized.size === 0) throw noLinear();
    const tensors: OnnxTensorPlan[] = [];
    const nodes: OnnxNode[] = [];
    const inputs: OnnxValueInfo[] = [];
    const outputs: OnnxValueInfo[] = [];
    const report: LayoutWriteResult['tensors'][number][] = [];
    const shapes = new Map<string, MatMulNBitsShapes>();
    for (const e of entries) {
      if (!quantized.has(e.name)) {
        tensors.push({ name: e.name, dataType: ONNX_OF_ST[e.dtype], dims: e.shape, bytes: e.end - e.begin });
        report.push({ name: e.name, type: e.dtype, note: 'plain initializer' });
        continue;
      }
      floatDType(e); // INPUT_DTYPE_UNSUPPORTED for an integer "weight"
      const s = matMulNBitsShapes(e.name, e.shape, params.blockSize);
      shapes.set(e.name, s);
      const floatType = scaleTypeOf(e.dtype) === 'float16' ? ONNX_DTYPE.FLOAT16 : ONNX_DTYPE.FLOAT;
      const m = moduleOf(e.name);
      tensors.push({
        name: qName(e.name),
        dataType: ONNX_DTYPE.UINT8,
        dims: s.b,
        bytes: s.b[0] * s.b[1] * s.b[2],
      });
      tensors.push({
        name: scalesName(e.name),
        dataType: floatType,
        dims: [s.scales],
        bytes: s.scales * (floatType === ONNX_DTYPE.FLOAT ? 4 : 2),
      });
      if (!params.sym) {
        tensors.push({
          name: zeroPointsName(e.name),
          dataType: ONNX_DTYPE.UINT8,
          dims: [s.zeroPoints],
          bytes: s.zeroPoints,
        });
      }
      nodes.push({
        name: `${m}/MatMulNBits`,
        opType: 'MatMulNBits',
        domain: MS_DOMAIN,
        inputs: [
          `A_${m}`,
          qName(e.name),
          scalesName(e.name),
          ...(params.sym ? [] : [zeroPointsName(e.name)]),
        ],
        outputs: [`Y_${m}`],
        attributes: [
          int('K', s.K),
          int('N', s.N),
          int('bits', MATMULNBITS_BITS),
          int('block_size', s.blockSize),
          ...(params.accuracyLevel === undefined ? [] : [int('accuracy_level', params.accuracyLevel)]),
        ],
      });
      inputs.push({ name: `A_${m}`, elemType: floatType, dims: ['batch', s.K] });
      outputs.push({ name: `Y_${m}`, elemType: floatType, dims: ['batch', s.N] });
      report.push({ name: e.name, type: label(params) });
    }
    const seen = new Set<string>();
    for (const name of [
      ...tensors.map((t) => t.name),
      ...inputs.map((i) => i.name),
      ...outputs.map((o) => o.name),
    ]) {
      if (seen.has(name)) throw new QuantdError('NAME_COLLISION', { source: reader.path, tensor: name });
      seen.add(name);
    }
    const writer = await OnnxFileWriter.create(
      output,
      {
        irVersion: ONNX_IR_VERSION,
        opsets: ONNX_OPSETS,
        producerName: 'quantd',
        producerVersion: '',
        docString: `MatMulNBits 4-bit weights (block_size ${params.blockSize}, ${params.sym ? 'symmetric' : 'asymmetric'}) written by quantd`,
        metadata: [
          { key: 'quantd.layout', value: 'onnx' },
          { key: 'quantd.block_size', value: String(params.blockSize) },
          { key: 'quantd.sym', value: String(params.sym) },
        ],
        graphName: 'quantd',
        nodes,
        inputs,
        outputs,
      },
      tensors,
    );
    const planned = new Map(tensors.map((t) => [t.name, t.bytes]));
    const out = (name: string) => ({ name, bytes: planned.get(name)! });
    const jobs = entries.map((e): EncodeJob<TensorEntry> => {
      if (!shapes.has(e.name)) return { inputs: [e], outputs: [out(e.name)], label: e.name };
      const scaleType = scaleTypeOf(e.dtype);
      return {
        inputs: [e],
        outputs: [
          out(qName(e.name)),
          out(scalesName(e.name)),
          ...(params.sym ? [] : [out(zeroPointsName(e.name))]),
        ],
        call: {
          kind: 'onnx',
          tensor: e.name,
          shape: e.shape,
          dtype: floatDType(e),
          blockSize: params.blockSize,
          sym: params.sym,
          scaleType,
        },
        label: e.name,
      };
    });
    await runEncodeJobs(safetensorsSource(reader), jobs, writer, hooks);
    return { files: [...writer.files], tensors: report };
  });
}

// --- reading -----------------------------------------------------------------------------------

export interface NBitsGroup {
  readonly weight: string;
  readonly node: OnnxNode;
  readonly b: OnnxInitializer;
  readonly scales: OnnxInitializer;
  readonly zeroPoints: OnnxInitializer | null;
  readonly shapes: MatMulNBitsShapes;
}

function attr(node: OnnxNode, name: string): number | undefined {
  const a = node.attributes.find((x) => x.name === name);
  return a?.type === ATTR_INT ? a.i : undefined;
}

const SCALE_TYPES: ReadonlySet<number> = new Set([ONNX_DTYPE.FLOAT, ONNX_DTYPE.FLOAT16, ONNX_DTYPE.BFLOAT16]);

const numel = (t: OnnxInitializer): number => t.dims.reduce((a, d) => a * d, 1);

/** A MatMulNBits node's tensors, checked against its attributes (what ORT's CheckInputs checks). */
function nbitsGroup(
  source: string,
  node: OnnxNode,
  byName: ReadonlyMap<string, OnnxInitializer>,
  index: number,
): NBitsGroup {
  const where = node.name || `MatMulNBits node ${index}`;
  const K = attr(node, 'K');
  const N = attr(node, 'N');
  const blockSize = attr(node, 'block_size');
  const bits = attr(node, 'bits') ?? 4;
  if (K === undefined || N === undefined || blockSize === undefined) {
    throw onnxInvalid(source, where, 'lacks one of the int attributes K, N, block_size');
  }
  if (bits !== MATMULNBITS_BITS) {
    throw new QuantdError('FEATURE_UNSUPPORTED', {
      detail: `${source}: ${where} has bits ${bits}; quantd reads 4-bit MatMulNBits`,
    });
  }
  if ((node.inputs[4] ?? '') !== '') {
    throw new QuantdError('FEATURE_UNSUPPORTED', {
      detail: `${source}: ${where} has a g_idx input (act-order), which quantd does not read`,
    });
  }
  const init = (i: number, what: string): OnnxInitializer => {
    const name = node.inputs[i] ?? '';
    const t = byName.get(name);
    if (t === undefined)
      throw onnxInvalid(source, where, `input ${what} ${JSON.stringify(name)} is not an initializer`);
    return t;
  };
  const b = init(1, 'B');
  const scales = init(2, 'scales');
  const zeroPoints = (node.inputs[3] ?? '') === '' ? null : init(3, 'zero_points');
  let shapes: MatMulNBitsShapes;
  try {
    shapes = matMulNBitsShapes(b.name, [N, K], blockSize);
  } catch (err) {
    if (err instanceof QuantdError)
      throw onnxInvalid(source, where, `K ${K}, N ${N}, block_size ${blockSize}: ${err.message}`);
    throw err;
  }
  const bad = (t: OnnxInitializer, expected: string): QuantdError =>
    onnxInvalid(source, t.name, `is ${onnxDTypeName(t.dataType)} ${shapeText(t.dims)}, expected ${expected}`);
  if (b.dataType !== ONNX_DTYPE.UINT8 || shapeText(b.dims) !== shapeText(shapes.b)) {
    throw bad(b, `UINT8 ${shapeText(shapes.b)}`);
  }
  if (!SCALE_TYPES.has(scales.dataType) || numel(scales) !== shapes.scales || scales.dims.length > 2) {
    throw bad(scales, `FLOAT or FLOAT16 [${shapes.scales}] or [${N}, ${shapes.kBlocks}]`);
  }
  if (zeroPoints) {
    if (zeroPoints.dataType !== ONNX_DTYPE.UINT8) {
      throw new QuantdError('FEATURE_UNSUPPORTED', {
        detail: `${source}: ${where} has ${onnxDTypeName(zeroPoints.dataType)} zero points; quantd reads packed UINT8 ones`,
      });
    }
    if (numel(zeroPoints) !== shapes.zeroPoints || zeroPoints.dims.length > 2) {
      throw bad(zeroPoints, `UINT8 [${shapes.zeroPoints}] or [${N}, ${shapes.zpPerColumn}]`);
    }
  }
  const weight = b.name.endsWith('_Q4') ? b.name.slice(0, -3) : b.name;
  return { weight, node, b, scales, zeroPoints, shapes };
}

/**
 * The model's com.microsoft MatMulNBits weights in node order, each checked as ORT checks it;
 * an initializer that feeds two of them is LAYOUT_INVALID. read() decodes them, inspect lists
 * them.
 */
export function matMulNBitsGroups(source: string, model: OnnxModel): NBitsGroup[] {
  const byName = new Map(model.initializers.map((t) => [t.name, t]));
  const groups: NBitsGroup[] = [];
  const consumed = new Set<string>();
  model.nodes.forEach((node, i) => {
    if (node.opType !== 'MatMulNBits' || node.domain !== MS_DOMAIN) return;
    const g = nbitsGroup(source, node, byName, i);
    for (const t of [g.b, g.scales, g.zeroPoints]) {
      if (t === null) continue;
      if (consumed.has(t.name)) throw onnxInvalid(source, t.name, 'is an input of two MatMulNBits nodes');
      consumed.add(t.name);
    }
    groups.push(g);
  });
  return groups;
}

async function read(
  input: string,
  output: string,
  hooks: LayoutHooks = {},
): Promise<{ readonly tensors: number }> {
  const reader = await OnnxFileReader.open(input);
  try {
    const { model } = reader;
    const groups = new Map(matMulNBitsGroups(input, model).map((g) => [g.b.name, g]));
    const consumed = new Set(
      [...groups.values()].flatMap((g) =>
        [g.b, g.scales, ...(g.zeroPoints ? [g.zeroPoints] : [])].map((t) => t.name),
      ),
    );
    const plan: TensorPlan[] = [];
    const jobs: EncodeJob<OnnxInitializer>[] = [];
    for (const t of model.initializers) {
      const g = groups.get(t.name);
      if (g !== undefined) {
        const { N, K } = g.shapes;
        plan.push({ name: g.weight, dtype: 'F32', shape: [N, K] });
        const st = ST_OF_ONNX.get(g.scales.dataType)!;
        jobs.push({
          inputs: [g.b, g.scales, ...(g.zeroPoints ? [g.zeroPoints] : [])],
          outputs: [{ name: g.weight, bytes: N * K * 4 }],
          call: { kind: 'onnx-decode', scales: floatDTypeOfSt(st)!, shapes: g.shapes },
          label: g.weight,
        });
        continue;
      }
      if (consumed.has(t.name)) continue;
      const dtype = ST_OF_ONNX.get(t.dataType);
      if (dtype === undefined) {
        throw new QuantdError('FEATURE_UNSUPPORTED', {
          detail: `${input}: initializer ${JSON.stringify(t.name)} is ${onnxDTypeName(t.dataType)}, which has no safetensors dtype`,
        });
      }
      plan.push({ name: t.name, dtype, shape: t.dims });
      jobs.push({
        inputs: [t],
        outputs: [{ name: t.name, bytes: t.dims.reduce((n, d) => n * d, 1) * ST_DTYPE_SIZE[dtype] }],
        label: t.name,
      });
    }
    const seen = new Set<string>();
    for (const p of plan) {
      if (seen.has(p.name)) throw new QuantdError('NAME_COLLISION', { source: input, tensor: p.name });
      seen.add(p.name);
    }
    throwIfAborted(hooks.signal);
    const writer = await SafetensorsFileWriter.create(output, plan, ptMetadata({ 'quantd.source': 'onnx' }));
    const source = {
      read: async (t: OnnxInitializer, shared: boolean) => sharedIf(shared, await reader.read(t)),
      size: (t: OnnxInitializer) => t.dims.reduce((n, d) => n * d, 1) * 4,
    };
    await runEncodeJobs(source, jobs, writer, hooks);
    return { tensors: plan.length };
  } finally {
    await reader.close();
  }
}

/** An `.onnx` file whose first bytes parse as the start of a ModelProto. */
function detect(path: string, head: Uint8Array): boolean {
  return extname(path).toLowerCase() === '.onnx' && looksLikeOnnxModel(head);
}

export const onnxLayout: InteropLayout = {
  name: 'onnx',
  summary:
    'ONNX model (OUT.onnx + OUT.onnx.data) with com.microsoft.MatMulNBits 4-bit linear weights for ONNX Runtime, byte-exact with its matmul_4bits_quantizer',
  options: OPTIONS,
  extension: '.onnx',
  companions: (output, _folderOut, inputFolder) =>
    inputFolder === true ? decoderCompanions(output) : [onnxDataPath(output)],
  checkOptions: (options) => void decoderParams(options),
  readsFolder: isModelFolder,
  write,
  read,
  detect,
};
