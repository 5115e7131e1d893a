/**
 * The "awq" layout: an AutoAWQ GEMM checkpoint (transformers with autoawq, AutoAWQ, vLLM) of
 * round-to-nearest 4-bit codes, zero point (asymmetric) — src/core/interop/awq.ts has the
 * numerics. No activation-aware scaling: quantd has no calibration data, so the weights are
 * AutoAWQ's `pseudo_quantize_tensor` of the unscaled weights.
 *
 * write: each linear projection weight `X.weight` [out, in] becomes `X.qweight` I32 [in, out/8],
 * `X.qzeros` I32 [in/group_size, out/8] and `X.scales` F16 [in/group_size, out]
 * (WQLinear_GEMM's buffers); `X.bias` of such a layer is cast to F16 (`linear.bias.clone().half()`);
 * everything else passes through. The config (AutoAWQ's `to_transformers_dict()` fields) goes into
 * config.json's `quantization_config` in a model folder, and as `{"quantization_config": {...}}`
 * into `quantization_config.json` (folder) or `OUT.quantization_config.json` (beside a single file
 * `OUT.safetensors`), to merge into the model's config.json.
 *
 * read: every `X.qweight` group (without `X.g_idx`) back to `X.weight` F32 [out, in].
 */
import { awqShapes, type AwqParams } from '../../core/interop/awq.js';
import { shapeText } from '../../errors/index.js';
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
import { factsOf, layoutFile, singleFileWrite } from './safetensors-parts.js';
import type {
  InteropLayout,
  LayoutFacts,
  LayoutFile,
  LayoutOptions,
  SafetensorsLayoutParts,
} from './types.js';

/** The side file it writes with the model (a folder's, or named after a single file). */
const SIDE_FILE = 'quantization_config.json';

const OPTIONS = {
  bits: 'bits per weight: 4 (AWQ GEMM packs 4-bit only)',
  group_size:
    'input rows per group, dividing in_features: a positive integer, or -1 for one group (default 128)',
} as const;

export const awqParams = (options: LayoutOptions): AwqParams => inLayout('awq', () => parseParams(options));

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
  shard: boolean,
): Promise<LayoutFile> {
  const params = awqParams(options);
  const label = `awq int4 ${params.groupSize === -1 ? 'per-row' : `g${params.groupSize}`} zero-point`;
  return withReader(input, async (reader) => {
    const entries = reader.header.entries;
    const quantized = new Set(entries.filter(isLinearWeight).map((e) => e.name));
    if (quantized.size === 0 && !shard) throw noLinear();
    const tensors: Array<{ name: string; type: string; note?: string }> = [];
    const jobs: Job[] = entries.map((entry): Job => {
      if (quantized.has(entry.name)) {
        const dtype = floatDType(entry);
        const s = awqShapes(entry.name, entry.shape, params);
        const m = moduleOf(entry.name);
        tensors.push({ name: entry.name, type: label });
        return {
          inputs: [entry],
          outputs: [
            { name: `${m}.qweight`, dtype: 'I32', shape: s.qweight },
            { name: `${m}.qzeros`, dtype: 'I32', shape: s.qzeros },
            { name: `${m}.scales`, dtype: 'F16', shape: s.scales },
          ],
          call: { kind: 'awq', tensor: entry.name, shape: entry.shape, dtype, params },
        };
      }
      if (entry.name.endsWith('.bias') && quantized.has(`${moduleOf(entry.name, '.bias')}.weight`)) {
        const dtype = floatDType(entry);
        tensors.push({
          name: entry.name,
          type: 'F16',
          note: 'bias of a quantized layer, cast to float16 as AutoAWQ does',
        });
        return {
          inputs: [entry],
          outputs: [{ name: entry.name, dtype: 'F16', shape: entry.shape }],
          call: { kind: 'cast', from: dtype, to: 'float16' },
        };
      }
      tensors.push({ name: entry.name, type: entry.dtype, note: 'passed through' });
      return passThrough(entry);
    });
    await runJobs(reader, output, jobs, ptMetadata({ 'quantd.layout': 'awq' }), hooks);
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
    'AutoAWQ GEMM checkpoint (qweight/qzeros/scales + quantization_config.json) of round-to-nearest 4-bit zero-point codes, for transformers, AutoAWQ and vLLM',
  options: OPTIONS,
  extension: '.safetensors',
  companions: sideFileCompanion(SIDE_FILE),
  checkOptions: (options) => void awqParams(options),
  write: singleFileWrite(parts),
  parts,
  read,
  detect,
};
