/**
 * From an input header and a request to the exact output: which tensors the output file holds
 * (names, dtypes, shapes, in write order), its metadata, and the step that produces each. Sizes
 * are known before any data is read, so outputs stream to disk or to a response in one pass.
 */
import {
  checkFakeQuantizable,
  completeNow,
  floatDTypeOfSt,
  planLayout,
  type FloatDType,
  type Layout,
  type QuantSpec,
  type Resumable,
} from '../core/index.js';
import { QuantdError, isQuantdError } from '../errors/index.js';
import {
  DATA_SHA256_KEY,
  QPARAMS_FORMAT,
  QTENSOR_FORMAT,
  SCALE_SUFFIX,
  ZERO_POINT_SUFFIX,
  codesPlan,
  encodeMeta,
  entryByName,
  findQuantizedGroupsWork,
  qparamPlans,
  type QuantizedGroup,
  type SafetensorsHeader,
  type TensorEntry,
  type TensorPlan,
} from '../format/index.js';
import type { GivenEntries } from './given-qparams.js';
import { decide, type Decision, type Recipe } from './recipe.js';
import { companionOf, lowRankNamed, selectTensorsWork, type Selection } from './selection.js';

export const OPERATIONS = ['quantize', 'dequantize', 'fake-quantize', 'qparams'] as const;
export type Operation = (typeof OPERATIONS)[number];

export interface OperationRequest extends Selection {
  readonly op: Operation;
  /** The quantization spec (ignored by dequantize, which reads it from the container). */
  readonly spec: QuantSpec;
  /** Per-tensor specs instead of `spec` (quantize, qparams, fake-quantize of model files). */
  readonly recipe?: Recipe | undefined;
  /** Float output dtype of dequantize and fake-quantize. */
  readonly outDType: FloatDType;
}

/** Metadata of float outputs: "pt" so that transformers' safetensors loader accepts them. */
const FLOAT_OUTPUT_METADATA = { format: 'pt' } as const;
export const MASK_SUFFIX = '.mask';

export type Step =
  | {
      readonly kind: 'copy';
      readonly entry: TensorEntry;
      readonly outputs: readonly TensorPlan[];
      /** Why a float tensor passes through unchanged (a recipe's decision), if it is one. */
      readonly reason?: string;
    }
  | {
      readonly kind: 'quantize' | 'qparams' | 'fake-quantize';
      readonly entry: TensorEntry;
      readonly dtype: FloatDType;
      readonly spec: QuantSpec;
      /** What chose the spec: "request", or a recipe's rule label or "default". */
      readonly by: string;
      readonly layout: Layout;
      readonly given: GivenEntries | undefined;
      readonly outputs: readonly TensorPlan[];
    }
  | { readonly kind: 'dequantize'; readonly group: QuantizedGroup; readonly outputs: readonly TensorPlan[] };

export interface Plan {
  readonly request: OperationRequest;
  readonly steps: readonly Step[];
  readonly tensors: readonly TensorPlan[];
  readonly metadata: Readonly<Record<string, string>>;
}

function givenEntries(header: SafetensorsHeader, name: string): GivenEntries | undefined {
  const scale = entryByName(header, name + SCALE_SUFFIX);
  const zeroPoint = entryByName(header, name + ZERO_POINT_SUFFIX);
  return scale || zeroPoint ? { scale, zeroPoint } : undefined;
}

const copyStep = (entry: TensorEntry, reason?: string): Step => ({
  kind: 'copy',
  entry,
  outputs: [{ name: entry.name, dtype: entry.dtype, shape: entry.shape }],
  ...(reason !== undefined && { reason }),
});

/** Container metadata keys that are not tensor names: no tensor of a container may take one. */
const RESERVED_METADATA = ['format', DATA_SHA256_KEY];

/** A metadata object with no prototype: a tensor named "__proto__" is a key like any other. */
function metadataObject(entries: Record<string, string>): Record<string, string> {
  return Object.assign(Object.create(null) as Record<string, string>, entries);
}

/** The tensor's layout under `spec`; under a recipe, a misfit names the rule that chose it. */
function layoutFor(entry: TensorEntry, spec: QuantSpec, by: string, recipe: boolean): Layout {
  try {
    return planLayout(entry.name, entry.shape, spec);
  } catch (err) {
    if (!recipe || !isQuantdError(err)) throw err;
    throw new QuantdError('RECIPE_RULE_FAILED', { rule: by, detail: `${err.message} (${err.code})` });
  }
}

function* finish(
  request: OperationRequest,
  steps: Step[],
  metadata: Record<string, string>,
  source: string,
): Resumable<Plan> {
  const container = metadata['format'] === QTENSOR_FORMAT || metadata['format'] === QPARAMS_FORMAT;
  const tensors: TensorPlan[] = [];
  const seen = new Set<string>();
  for (const step of steps) {
    for (const t of step.outputs) {
      if (seen.has(t.name)) throw new QuantdError('NAME_COLLISION', { source, tensor: t.name });
      seen.add(t.name);
      if (container && RESERVED_METADATA.includes(t.name)) {
        throw new QuantdError('TENSOR_NAME_RESERVED', { source, tensor: t.name });
      }
      tensors.push(t);
    }
    yield;
  }
  return { request, steps, tensors, metadata };
}

function* planTransform(
  header: SafetensorsHeader,
  request: OperationRequest,
  source: string,
  allowEmpty: boolean,
): Resumable<Plan> {
  if (request.op === 'fake-quantize' && !request.recipe) checkFakeQuantizable(request.spec);
  const selected = new Set((yield* selectTensorsWork(header, request, allowEmpty)).map((e) => e.name));
  // A qtensor container passes through: keep the metadata of its quantized tensors.
  const carried = yield* findQuantizedGroupsWork(header, source);
  const metadata = metadataObject(
    request.op === 'quantize'
      ? { format: QTENSOR_FORMAT }
      : request.op === 'qparams'
        ? { format: QPARAMS_FORMAT }
        : { ...FLOAT_OUTPUT_METADATA },
  );
  // Quantized tensors of an input container pass through with their metadata (not into a
  // qparams file, which holds qparams only); the output is then a container too.
  const kept = request.op === 'qparams' ? [] : carried.filter((g) => !selected.has(g.name));
  if (kept.length > 0) metadata['format'] = QTENSOR_FORMAT;
  for (const g of kept) metadata[g.name] = g.meta;
  const steps: Step[] = [];
  // Asked once here, not per tensor: the answer is the header's, and one scan per tensor made
  // planning quadratic in the tensor count (16,000 rank-1 tensors held the event loop 30 s).
  let lowRank: boolean | undefined;
  const quantizeLowRank = (): boolean => (lowRank ??= lowRankNamed(header, request, allowEmpty));
  for (const entry of header.entries) {
    yield;
    const base = companionOf(header, entry.name);
    const consumed = base !== undefined && selected.has(base);
    if (!selected.has(entry.name)) {
      // qparams files hold qparams only; the other operations keep what they do not transform.
      if (!consumed && request.op !== 'qparams') steps.push(copyStep(entry, unselectedReason(entry)));
      continue;
    }
    const decision: Decision = request.recipe
      ? decide(request.recipe, entry.name, entry.shape)
      : entry.shape.length < 2 && !quantizeLowRank()
        ? { action: 'pass', reason: `${entry.shape.length}-D tensor`, by: 'default' }
        : { action: 'quantize', spec: request.spec, by: 'request' };
    if (decision.action === 'pass') {
      // as for unselected tensors: a qparams file holds qparams only
      if (!consumed && request.op !== 'qparams')
        steps.push(copyStep(entry, `${decision.reason} (${decision.by})`));
      continue;
    }
    const spec = decision.spec;
    if (request.op === 'fake-quantize') checkFakeQuantizable(spec);
    const dtype = floatDTypeOfSt(entry.dtype)!;
    const layout = layoutFor(entry, spec, decision.by, request.recipe !== undefined);
    const given = givenEntries(header, entry.name);
    const outputs =
      request.op === 'quantize'
        ? [codesPlan(entry.name, spec, layout), ...qparamPlans(entry.name, spec, layout)]
        : request.op === 'qparams'
          ? qparamPlans(entry.name, spec, layout)
          : [
              { name: entry.name, dtype: outputStDType(request.outDType), shape: entry.shape },
              { name: entry.name + MASK_SUFFIX, dtype: 'BOOL' as const, shape: entry.shape },
            ];
    if (request.op === 'quantize' || request.op === 'qparams') {
      // its entry would overwrite the container's own key (finish() refuses passed-through ones)
      if (RESERVED_METADATA.includes(entry.name)) {
        throw new QuantdError('TENSOR_NAME_RESERVED', { source, tensor: entry.name });
      }
      metadata[entry.name] = encodeMeta(spec, layout, dtype);
    }
    steps.push({
      kind: request.op as 'quantize' | 'qparams' | 'fake-quantize',
      entry,
      dtype,
      spec,
      by: decision.by,
      layout,
      given,
      outputs,
    });
  }
  return yield* finish(request, steps, metadata, source);
}

function unselectedReason(entry: TensorEntry): string {
  return floatDTypeOfSt(entry.dtype)
    ? 'not selected (include/exclude)'
    : `${entry.dtype}, not a float tensor`;
}

function outputStDType(dtype: FloatDType): 'F32' | 'F16' | 'BF16' {
  return dtype === 'float32' ? 'F32' : dtype === 'float16' ? 'F16' : 'BF16';
}

function* planDequantize(
  header: SafetensorsHeader,
  request: OperationRequest,
  source: string,
  shard: boolean,
): Resumable<Plan> {
  const groups = yield* findQuantizedGroupsWork(header, source);
  if (groups.length === 0 && !shard) throw new QuantdError('NOT_A_QTENSOR', { source });
  const byCodes = new Map(groups.map((g) => [g.codes.name, g]));
  const consumed = new Set(groups.flatMap((g) => [g.scale.name, g.zeroPoint.name]));
  const steps: Step[] = [];
  for (const entry of header.entries) {
    yield;
    const group = byCodes.get(entry.name);
    if (group) {
      steps.push({
        kind: 'dequantize',
        group,
        outputs: [{ name: group.name, dtype: outputStDType(request.outDType), shape: group.layout.shape }],
      });
    } else if (!consumed.has(entry.name)) {
      steps.push(copyStep(entry));
    }
  }
  return yield* finish(request, steps, metadataObject({ ...FLOAT_OUTPUT_METADATA }), source);
}

/**
 * The complete output of `request` applied to a file with this header. `shard`: the file is one
 * shard of a model, where a selection that matches none of its tensors is not an error.
 */
export function planOperation(
  header: SafetensorsHeader,
  request: OperationRequest,
  source: string,
  shard = false,
): Plan {
  return completeNow(planOperationWork(header, request, source, shard));
}

/**
 * planOperation in units of one tensor (../core/time-slice.ts): servers plan a body of tens of
 * thousands of tensors with completeYielding, so that the event loop turns meanwhile.
 */
export function planOperationWork(
  header: SafetensorsHeader,
  request: OperationRequest,
  source: string,
  shard = false,
): Resumable<Plan> {
  return request.op === 'dequantize'
    ? planDequantize(header, request, source, shard)
    : planTransform(header, request, source, shard);
}
