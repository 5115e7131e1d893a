/**
 * The quantd.qtensor/1 container (docs/container.md): a plain safetensors file in which each quantized
 * tensor NAME is stored as three tensors — NAME (codes), NAME.scale (F32) and NAME.zero_point
 * (I32, or F32 for float zero points) — and `__metadata__` carries "format" plus, per NAME, a
 * JSON string describing how it was quantized. Anything else in the file is passed through.
 */
import {
  QDTYPE_INFO,
  completeNow,
  hasFloatZeroPoint,
  isFloatDType,
  parseSpec,
  planLayout,
  quantizedByteLength,
  type FloatDType,
  type Layout,
  type QuantSpec,
  type Resumable,
  type StDType,
} from '../core/index.js';
import { QuantdError, isQuantdError, shapeText } from '../errors/index.js';
import { entryByName, type SafetensorsHeader, type TensorEntry, type TensorPlan } from './safetensors.js';

export const QTENSOR_FORMAT = 'quantd.qtensor/1';
export const QPARAMS_FORMAT = 'quantd.qparams/1';
/** Metadata keys beginning so describe the container, not a tensor (quantd.data_sha256). */
export const CONTAINER_KEY_PREFIX = 'quantd.';
export const SCALE_SUFFIX = '.scale';
export const ZERO_POINT_SUFFIX = '.zero_point';

/** The per-tensor metadata entry, keys in the order docs/container.md gives. */
export interface QTensorMeta {
  readonly qdtype: string;
  readonly scheme: string;
  readonly mode: string;
  readonly shape: readonly number[];
  readonly axis: number | null;
  readonly group_size: number | null;
  readonly quant_min: number;
  readonly quant_max: number;
  readonly source_dtype: FloatDType;
}

export function encodeMeta(spec: QuantSpec, layout: Layout, sourceDtype: FloatDType): string {
  const meta: QTensorMeta = {
    qdtype: spec.qdtype,
    scheme: spec.scheme,
    mode: spec.mode,
    shape: layout.shape,
    axis: layout.axis,
    group_size: layout.groupSize,
    quant_min: spec.quantMin,
    quant_max: spec.quantMax,
    source_dtype: sourceDtype,
  };
  return JSON.stringify(meta);
}

/** The stored tensors of one quantized NAME: codes, scale, zero point. */
export function quantizedTensorPlans(name: string, spec: QuantSpec, layout: Layout): TensorPlan[] {
  return [codesPlan(name, spec, layout), ...qparamPlans(name, spec, layout)];
}

export function codesPlan(name: string, spec: QuantSpec, layout: Layout): TensorPlan {
  const info = QDTYPE_INFO[spec.qdtype];
  const shape = info.bits < 8 ? [quantizedByteLength(spec.qdtype, layout.numel)] : layout.shape;
  return { name, dtype: info.st, shape };
}

export function qparamPlans(name: string, spec: QuantSpec, layout: Layout): TensorPlan[] {
  const zpDtype: StDType = hasFloatZeroPoint(spec) ? 'F32' : 'I32';
  return [
    { name: name + SCALE_SUFFIX, dtype: 'F32', shape: layout.qparamShape },
    { name: name + ZERO_POINT_SUFFIX, dtype: zpDtype, shape: layout.qparamShape },
  ];
}

/** One quantized tensor found in a container, with everything needed to dequantize it. */
export interface QuantizedGroup {
  readonly name: string;
  readonly meta: string;
  readonly spec: QuantSpec;
  readonly layout: Layout;
  readonly sourceDtype: FloatDType;
  readonly codes: TensorEntry;
  readonly scale: TensorEntry;
  readonly zeroPoint: TensorEntry;
}

function invalid(source: string, tensor: string, detail: string): QuantdError {
  return new QuantdError('QTENSOR_INVALID', { source, tensor, detail });
}

function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}

function parseMeta(
  source: string,
  name: string,
  text: string,
): Omit<QuantizedGroup, 'codes' | 'scale' | 'zeroPoint'> {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    throw invalid(source, name, `its metadata is not JSON: ${text.slice(0, 80)}`);
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw invalid(source, name, 'its metadata is not a JSON object');
  }
  const m = raw as Record<string, unknown>;
  const shape = m['shape'];
  if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && (d as number) >= 0)) {
    throw invalid(source, name, `metadata "shape" must be an array of non-negative integers`);
  }
  const sourceDtype = m['source_dtype'];
  if (typeof sourceDtype !== 'string' || !isFloatDType(sourceDtype)) {
    throw invalid(source, name, `metadata "source_dtype" must be float32, float16 or bfloat16`);
  }
  const optional = (key: string): string | number | undefined => {
    const v = m[key];
    if (v === null || v === undefined) return undefined;
    if (typeof v !== 'string' && typeof v !== 'number') {
      throw invalid(source, name, `metadata "${key}" must be a string or a number`);
    }
    return v;
  };
  for (const key of ['qdtype', 'scheme', 'mode', 'quant_min', 'quant_max']) {
    if (m[key] === undefined || m[key] === null) throw invalid(source, name, `metadata lacks "${key}"`);
  }
  try {
    const spec = parseSpec({
      qdtype: optional('qdtype') as string | undefined,
      scheme: optional('scheme') as string | undefined,
      mode: optional('mode') as string | undefined,
      axis: optional('axis'),
      group_size: optional('group_size'),
      quant_min: optional('quant_min'),
      quant_max: optional('quant_max'),
    });
    const layout = planLayout(name, shape as number[], spec);
    if (spec.scheme === 'per_group' && layout.groupSize !== spec.groupSize) {
      throw invalid(
        source,
        name,
        `group_size ${spec.groupSize} does not divide shape ${shapeText(layout.shape)}`,
      );
    }
    return { name, meta: text, spec, layout, sourceDtype };
  } catch (err) {
    if (isQuantdError(err) && err.code !== 'QTENSOR_INVALID') throw invalid(source, name, err.message);
    throw err;
  }
}

function companion(source: string, header: SafetensorsHeader, name: string, plan: TensorPlan): TensorEntry {
  const entry = entryByName(header, plan.name);
  if (!entry) throw invalid(source, name, `the container lacks ${plan.name}`);
  if (entry.dtype !== plan.dtype || !sameShape(entry.shape, plan.shape)) {
    throw invalid(
      source,
      name,
      `${plan.name} is ${entry.dtype} ${shapeText(entry.shape)}, expected ${plan.dtype} ${shapeText(plan.shape)}`,
    );
  }
  return entry;
}

/** The container's format tag, or null when the file carries none. */
export function formatOf(header: SafetensorsHeader): string | null {
  return header.metadata?.['format'] ?? null;
}

/**
 * The quantized tensors of a quantd.qtensor/1 container, validated: each metadata entry names
 * a tensor whose codes, scale and zero point exist with the dtypes and shapes it implies.
 * Returns [] for a file of another format.
 */
export function findQuantizedGroups(header: SafetensorsHeader, source: string): QuantizedGroup[] {
  return completeNow(findQuantizedGroupsWork(header, source));
}

/** findQuantizedGroups in units of one metadata entry (../core/time-slice.ts). */
export function* findQuantizedGroupsWork(
  header: SafetensorsHeader,
  source: string,
): Resumable<QuantizedGroup[]> {
  if (formatOf(header) !== QTENSOR_FORMAT || header.metadata === null) return [];
  const groups: QuantizedGroup[] = [];
  for (const [name, text] of Object.entries(header.metadata)) {
    if (name === 'format') continue;
    // quantd's own container-level keys (quantd.data_sha256), unless a tensor has such a name
    if (name.startsWith(CONTAINER_KEY_PREFIX) && !entryByName(header, name)) continue;
    if (!entryByName(header, name)) {
      throw invalid(source, name, 'the metadata describes it but the container has no such tensor');
    }
    const parsed = parseMeta(source, name, text);
    const [codes, scale, zeroPoint] = quantizedTensorPlans(name, parsed.spec, parsed.layout).map((p) =>
      companion(source, header, name, p),
    ) as [TensorEntry, TensorEntry, TensorEntry];
    groups.push({ ...parsed, codes, scale, zeroPoint });
    yield;
  }
  return groups;
}
