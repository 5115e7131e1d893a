/**
 * The "compressed-tensors" layout: checkpoints in the format of compressed-tensors (the
 * `quant_method: compressed-tensors` quantization_config llm-compressor writes), which vLLM and
 * transformers load natively. src/core/interop/compressed-tensors.ts has the numerics,
 * ./compressed-tensors-config.ts the schemes and the config; docs/layouts/compressed-tensors.md
 * which vLLM kernels take each scheme.
 *
 * write: each linear projection weight `X.weight` [out, in] (see LINEAR_WEIGHT) of module X
 * becomes, by the scheme's format,
 * - pack-quantized (W4A16, W4A16_ASYM, W8A16): `X.weight_packed` I32 [out, ceil(in·bits/32)],
 *   `X.weight_scale` [out, groups] in the weight's dtype, `X.weight_shape` I64 [2] = [out, in],
 *   and for W4A16_ASYM `X.weight_zero_point` I32 [ceil(out·bits/32), groups] (packed along out);
 * - int-quantized (W8A8): `X.weight` I8 [out, in] and `X.weight_scale` [out, 1];
 * - float-quantized (FP8_DYNAMIC): `X.weight` F8_E4M3 [out, in] and `X.weight_scale` [out, 1].
 * Biases and every other tensor pass through. config.json gets the `quantization_config` (one
 * config group targeting "Linear", every 2-D weight left in float — lm_head — in `ignore`); a
 * single file `OUT.safetensors` gets `OUT.quantization_config.json` ({"quantization_config": …},
 * to merge into the model's config.json).
 *
 * read: every quantized weight of a compressed-tensors file back to `X.weight` F32 — packed 2-,
 * 4- and 8-bit and int8 / float8 weights; per-tensor, per-channel, per-group (g_idx honoured)
 * and block scales; symmetric or with zero points — with the values compressed-tensors'
 * decompress gives (in the scales' dtype). Other tensors pass through.
 */
import { QuantdError, shapeText } from '../../errors/index.js';
import { ctShapes, type CtWeightArgs } from '../../core/interop/compressed-tensors.js';
import { packedWords } from '../../core/interop/ct-pack.js';
import { floatDTypeOfSt } from '../../core/dtypes.js';
import type { CtDecodeCall } from '../../kernels/encoders.js';
import {
  entryByName,
  type SafetensorsHeader,
  type TensorEntry,
  type TensorPlan,
} from '../../format/safetensors.js';
import type { SafetensorsFileReader } from '../../format/safetensors-file.js';
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
  withReader,
  type Job,
} from './linear-common.js';
import {
  CT_ALIASES,
  CT_SCHEMES,
  CT_UNSUPPORTED,
  ctQuantizationConfigText,
  schemeWeights,
  type CtScheme,
} from './compressed-tensors-config.js';
import { sideFileCompanion, withQuantizationConfig, type QuantizationConfig } from './quantization-config.js';
import type { LayoutHooks } from './run-jobs.js';
import { factsOf, layoutFile, singleFileWrite, type ReportRow } from './safetensors-parts.js';
import type {
  InteropLayout,
  LayoutFacts,
  LayoutFile,
  LayoutOptions,
  SafetensorsLayoutParts,
} from './types.js';

const NAME = 'compressed-tensors';
/** The side file it writes with the model (a folder's, or named after a single file). */
const SIDE_FILE = 'quantization_config.json';
const GROUPED = ['W4A16', 'W4A16_ASYM', 'W8A16'];

const OPTIONS = {
  scheme: `compressed-tensors' preset scheme: ${Object.keys(CT_SCHEMES).join(', ')} (default W4A16)`,
  group_size: `input columns per scale for ${GROUPED.join(', ')}: a positive integer (default 128), or -1 for one scale per output channel`,
} as const;

export interface CtParams {
  readonly scheme: CtScheme;
  readonly weights: CtWeightArgs;
}

export const ctParams = (options: LayoutOptions): CtParams => inLayout(NAME, () => parseParams(options));

function parseParams(options: LayoutOptions): CtParams {
  const o = checkOptions(NAME, OPTIONS, options);
  const given = (o['scheme'] ?? 'W4A16').trim().toUpperCase(); // preset_name_to_scheme upper-cases too
  const name = CT_ALIASES[given] ?? given;
  const scheme = CT_SCHEMES[name];
  if (scheme === undefined) {
    const why = CT_UNSUPPORTED[name];
    if (why !== undefined) {
      throw new QuantdError('FEATURE_UNSUPPORTED', { detail: `compressed-tensors scheme ${name} ${why}` });
    }
    throw new QuantdError('OPTION_INVALID', {
      option: 'scheme',
      detail: `must be one of ${Object.keys(CT_SCHEMES).join(', ')}`,
      value: o['scheme'] ?? '',
    });
  }
  if (o['group_size'] === undefined) return { scheme, weights: scheme.weights };
  if (!GROUPED.includes(scheme.name)) {
    throw new QuantdError('OPTION_INVALID', {
      option: 'group_size',
      detail: `applies to ${GROUPED.join(', ')}; ${scheme.name} has one scale per output channel`,
      value: o['group_size'],
    });
  }
  const g = intOption(
    'group_size',
    o['group_size'],
    128,
    (n) => n === -1 || n > 0,
    'a positive integer or -1',
  );
  return { scheme, weights: schemeWeights(scheme, g === -1 ? null : g) };
}

const label = ({ scheme, weights: w }: CtParams): string =>
  `compressed-tensors ${scheme.name} ${w.type}${w.numBits} ` +
  `${w.groupSize === null ? 'per-channel' : `g${w.groupSize}`}${w.symmetric ? '' : ' asym'}`;

/** The modules to leave out of the "Linear" target: every 2-D weight left in float, and lm_head. */
function ignoreList(facts: LayoutFacts): string[] {
  // a tied lm_head has no weight of its own in the file, yet is a Linear module in the model
  return facts.notConverted.includes('lm_head')
    ? [...facts.notConverted]
    : [...facts.notConverted, 'lm_head'];
}

function quantizationConfig(options: LayoutOptions, facts: LayoutFacts): QuantizationConfig {
  const { scheme, weights } = ctParams(options);
  const text = ctQuantizationConfigText(scheme, weights, ignoreList(facts));
  return { sideFile: SIDE_FILE, sideText: withQuantizationConfig('{}', text), configText: text };
}

async function writeTensors(
  input: string,
  output: string,
  options: LayoutOptions,
  hooks: LayoutHooks,
  model: readonly string[] | null,
): Promise<LayoutFile> {
  const params = ctParams(options);
  const { scheme, weights } = params;
  return withReader(input, async (reader) => {
    const entries = reader.header.entries;
    const quantized = new Set(entries.filter(isLinearWeight).map((e) => e.name));
    if (quantized.size === 0 && model === null) throw noLinear();
    const report = new Map<string, ReportRow>();
    const jobs: Job[] = entries.map((entry): Job => {
      if (!quantized.has(entry.name)) {
        report.set(entry.name, { type: entry.dtype, note: 'passed through' });
        return passThrough(entry);
      }
      const dtype = floatDType(entry);
      const s = ctShapes(entry.name, entry.shape, weights);
      const m = moduleOf(entry.name);
      report.set(entry.name, { type: label(params) });
      const scale: TensorPlan = { name: `${m}.weight_scale`, dtype: entry.dtype, shape: [s.out, s.groups] };
      const outputs: TensorPlan[] = [];
      if (scheme.format === 'pack-quantized') {
        const bits = weights.numBits;
        outputs.push(
          { name: `${m}.weight_packed`, dtype: 'I32', shape: [s.out, packedWords(s.inF, bits)] },
          scale,
          { name: `${m}.weight_shape`, dtype: 'I64', shape: [2] },
        );
        if (!weights.symmetric) {
          const shape = [packedWords(s.out, bits), s.groups];
          outputs.push({ name: `${m}.weight_zero_point`, dtype: 'I32', shape });
        }
      } else {
        const codes = weights.type === 'float' ? 'F8_E4M3' : 'I8';
        outputs.push({ name: `${m}.weight`, dtype: codes, shape: [s.out, s.inF] }, scale);
      }
      return {
        inputs: [entry],
        outputs,
        call: { kind: 'ct', tensor: entry.name, shape: entry.shape, dtype, weights, format: scheme.format },
      };
    });
    await runJobs(reader, output, jobs, ptMetadata({ 'quantd.layout': NAME }), hooks);
    const tensors = entries.map((e) => ({ name: e.name, ...report.get(e.name)! }));
    return layoutFile(jobs, tensors, factsOf(entries, quantized));
  });
}

const parts: SafetensorsLayoutParts = { writeTensors, quantizationConfig };

/** The suffixes of a quantized weight's tensors in a module. */
const MEMBERS = [
  'weight',
  'weight_packed',
  'weight_scale',
  'weight_shape',
  'weight_zero_point',
  'weight_g_idx',
];

/** The module whose codes `entry` holds: weight_packed, or an int8 / float8 weight with a scale. */
function codesOf(header: SafetensorsHeader, entry: TensorEntry): string | undefined {
  if (entry.name.endsWith('.weight_packed')) return moduleOf(entry.name, '.weight_packed');
  if (!entry.name.endsWith('.weight') || (entry.dtype !== 'I8' && entry.dtype !== 'F8_E4M3'))
    return undefined;
  const m = moduleOf(entry.name);
  return entryByName(header, `${m}.weight_scale`) ? m : undefined;
}

/** int64 or int32 values of a small tensor. */
async function intValues(reader: SafetensorsFileReader, entry: TensorEntry): Promise<number[]> {
  const bytes = await reader.read(entry);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out: number[] = [];
  for (let i = 0; i < bytes.byteLength; i += entry.dtype === 'I64' ? 8 : 4) {
    out.push(entry.dtype === 'I64' ? Number(view.getBigInt64(i, true)) : view.getInt32(i, true));
  }
  return out;
}

/** The read job of module `m`'s quantized weight, its tensors validated against each other. */
async function decodeJob(reader: SafetensorsFileReader, m: string): Promise<Job> {
  const { header } = reader;
  const source = reader.path;
  const get = (suffix: string): TensorEntry | undefined => entryByName(header, `${m}.${suffix}`);
  const bad = (suffix: string, detail: string): QuantdError =>
    layoutInvalid(source, `${m}.${suffix}`, detail);
  const packed = get('weight_packed');
  let rows: number;
  let cols: number;
  let bits = 8;
  const inputs: TensorEntry[] = [];
  let codes: CtDecodeCall['codes'];
  if (packed !== undefined) {
    if (packed.dtype === 'U8') {
      throw new QuantdError('FEATURE_UNSUPPORTED', {
        detail: `${source}: ${m}.weight_packed is U8 (NVFP4 / MXFP4 packing), which quantd does not read`,
      });
    }
    expectTensor(source, packed, packed.name, ['I32'], 2);
    const shapeEntry = expectTensor(source, get('weight_shape'), `${m}.weight_shape`, ['I64', 'I32'], 1);
    const shape = await intValues(reader, shapeEntry);
    if (shape.length !== 2) {
      throw new QuantdError('FEATURE_UNSUPPORTED', {
        detail: `${source}: ${m}.weight_shape is ${JSON.stringify(shape)}; quantd reads 2-D weights only`,
      });
    }
    [rows, cols] = shape as [number, number];
    if (!(rows > 0 && cols > 0 && Number.isSafeInteger(rows * cols))) {
      throw bad('weight_shape', `is ${JSON.stringify(shape)}, not a non-empty 2-D shape`);
    }
    if (packed.shape[0] !== rows) {
      throw bad(
        'weight_packed',
        `has shape ${shapeText(packed.shape)}, expected ${rows} rows (weight_shape)`,
      );
    }
    // the packing itself does not record its width: it follows from the words per row
    const fits = [2, 4, 8].filter((b) => packedWords(cols, b) === packed.shape[1]);
    if (fits.length !== 1) {
      const other = [1, 3, 5, 6, 7].filter((b) => packedWords(cols, b) === packed.shape[1]);
      if (fits.length === 0 && other.length > 0) {
        throw new QuantdError('FEATURE_UNSUPPORTED', {
          detail: `${source}: ${m} is packed with ${other.join(' or ')} bits per value; quantd reads 2, 4 and 8`,
        });
      }
      throw bad(
        'weight_packed',
        fits.length === 0
          ? `has ${packed.shape[1]} words per row, which no width of 2, 4 or 8 bits gives for ${cols} columns`
          : `has ${packed.shape[1]} words per row, which ${fits.join(' and ')} bits both give for ${cols} columns`,
      );
    }
    bits = fits[0]!;
    codes = 'packed';
    inputs.push(packed);
  } else {
    const weight = expectTensor(source, get('weight'), `${m}.weight`, ['I8', 'F8_E4M3'], 2);
    [rows, cols] = weight.shape as [number, number];
    codes = weight.dtype as 'I8' | 'F8_E4M3';
    inputs.push(weight);
  }
  const scale = expectTensor(source, get('weight_scale'), `${m}.weight_scale`, ['F32', 'F16', 'BF16'], null);
  const count = scale.shape.reduce((a, b) => a * b, 1);
  let scaleRows: number;
  let scaleCols: number;
  if (scale.shape.length <= 1 && count === 1) [scaleRows, scaleCols] = [1, 1];
  else if (scale.shape.length === 2) [scaleRows, scaleCols] = scale.shape as [number, number];
  else
    throw bad(
      'weight_scale',
      `has shape ${shapeText(scale.shape)}, expected [1], [rows, groups] or a block grid`,
    );
  if (!(scaleRows > 0 && scaleCols > 0 && rows % scaleRows === 0 && cols % scaleCols === 0)) {
    // compressed-tensors infers the group or block size from the scale's shape: it must divide
    throw bad(
      'weight_scale',
      `has shape ${shapeText(scale.shape)}, which does not divide the weight [${rows}, ${cols}]`,
    );
  }
  inputs.push(scale);
  let zeroPoints: CtDecodeCall['zeroPoints'] = 'none';
  const zp = get('weight_zero_point');
  if (zp !== undefined) {
    if (codes === 'packed') {
      expectTensor(source, zp, zp.name, ['I32'], 2);
      if (zp.shape[0] !== packedWords(scaleRows, bits) || zp.shape[1] !== scaleCols) {
        throw bad(
          'weight_zero_point',
          `has shape ${shapeText(zp.shape)}, expected [${packedWords(scaleRows, bits)}, ${scaleCols}] (${bits}-bit, packed along the rows)`,
        );
      }
      zeroPoints = 'packed';
    } else {
      expectTensor(source, zp, zp.name, ['I8'], null);
      if (zp.shape.reduce((a, b) => a * b, 1) !== scaleRows * scaleCols) {
        throw bad('weight_zero_point', `has shape ${shapeText(zp.shape)}, expected that of weight_scale`);
      }
      zeroPoints = 'I8';
    }
    inputs.push(zp);
  }
  const gIdx = get('weight_g_idx');
  if (gIdx !== undefined) {
    expectTensor(source, gIdx, gIdx.name, ['I32', 'I64'], 1);
    if (gIdx.dtype !== 'I32' || gIdx.shape[0] !== cols) throw bad('weight_g_idx', `expected I32 [${cols}]`);
    if (scaleRows !== rows && scaleRows !== 1) throw bad('weight_g_idx', 'is given with block scales');
    inputs.push(gIdx);
  }
  return {
    inputs,
    outputs: [{ name: `${m}.weight`, dtype: 'F32', shape: [rows, cols] }],
    call: {
      kind: 'ct-decode',
      source,
      module: m,
      codes,
      bits,
      rows,
      cols,
      scales: floatDTypeOfSt(scale.dtype)!,
      scaleRows,
      scaleCols,
      zeroPoints,
      gIdx: gIdx !== undefined,
    },
  };
}

async function read(
  input: string,
  output: string,
  hooks: LayoutHooks = {},
): Promise<{ readonly tensors: number }> {
  return withReader(input, async (reader) => {
    const { header } = reader;
    const member = new Map<string, string>();
    for (const entry of header.entries) {
      const m = codesOf(header, entry);
      if (m === undefined) continue;
      for (const s of MEMBERS) member.set(`${m}.${s}`, m);
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
      jobs.push(await decodeJob(reader, m));
    }
    const tensors = await runJobs(reader, output, jobs, ptMetadata(), hooks);
    return { tensors };
  });
}

function detect(path: string, head: Uint8Array): boolean {
  const tensors = headerTensors(path, head);
  if (!tensors) return false;
  for (const [name, t] of tensors) {
    if (name.endsWith('.weight_packed') && tensors.has(`${moduleOf(name, '.weight_packed')}.weight_scale`)) {
      return true;
    }
    if (
      name.endsWith('.weight') &&
      (t.dtype === 'I8' || t.dtype === 'F8_E4M3') &&
      tensors.has(`${name}_scale`)
    ) {
      return true;
    }
  }
  return false;
}

export const compressedTensorsLayout: InteropLayout = {
  name: NAME,
  summary:
    "compressed-tensors checkpoint (quant_method compressed-tensors: W4A16 / W8A16 int32-packed, W8A8 int8, FP8_DYNAMIC float8; weight_scale, weight_shape, config.json's quantization_config), as llm-compressor writes it, for vLLM and transformers",
  options: OPTIONS,
  extension: '.safetensors',
  companions: sideFileCompanion(SIDE_FILE),
  checkOptions: (options) => void ctParams(options),
  write: singleFileWrite(parts),
  parts,
  read,
  detect,
};
