/**
 * One Open Inference Protocol inference, whichever transport it came by: the request (inputs as
 * bytes, REST `data` or gRPC typed contents; parameters) checked against the model and turned into
 * the OperationRequest and in-memory file the service layer runs (runBufferPlan, the same path
 * as POST /v1/<op>), and the result turned into named, typed outputs.
 *
 * Conventions (docs/oip.md):
 *  - the float input is `input` (FP32 / FP16 / BF16); quantize and fake_quantize also take
 *    optional `scale` / `zero_point` inputs, used instead of choosing (as NAME.scale is);
 *  - codes keep their own datatype (INT8, UINT8, INT16, INT32) and the input's shape, except the
 *    sub-byte qdtypes (packed flat, LSB first, docs/numerics.md) and fp8, which travel as UINT8: packed
 *    codes have shape [ceil(numel·bits/8)], fp8 codes the logical shape; the `codes` output carries
 *    `qdtype`, `bits` and `logical_shape` ("4,6", as X-Tensor-Shape) parameters;
 *  - quantize and choose_qparams answer with response parameters qdtype, scheme, mode, axis,
 *    group_size, quant_min, quant_max: the dequantize request parameters for the same codes;
 *  - dequantize takes `codes`, `scale` (FP32) and `zero_point` (INT32, FP32 for float zero points)
 *    with the spec in request parameters and, for packed codes, `logical_shape` on `codes`.
 */
import {
  CODE_SPEC_OPTION_NAMES,
  QDTYPE_INFO,
  hasFloatZeroPoint,
  numelOf,
  parseSpec,
  planLayout,
  quantizedByteLength,
  type SpecOptions,
} from '../core/index.js';
import { QuantdError, shapeText } from '../errors/index.js';
import {
  QTENSOR_FORMAT,
  SCALE_SUFFIX,
  ZERO_POINT_SUFFIX,
  encodeMeta,
  type SafetensorsHeader,
  type TensorEntry,
} from '../format/index.js';
import {
  MASK_SUFFIX,
  operationRequest,
  planOperation,
  runBufferPlan,
  type Compute,
  type PlanCache,
  type InMemoryFile,
  type OperationRequest,
  type RequestParams,
} from '../service/index.js';
import {
  CONTENTS_FIELD,
  DATATYPE_SIZE,
  ST_OF_DATATYPE,
  bytesFromElements,
  datatypeOfSt,
  flattenData,
  isDatatype,
  type FixedDatatype,
} from './datatypes.js';
import { MODEL_VERSION, PROTOCOL_PARAMETERS, findModel, type ModelDefinition } from './models.js';

export type ParamValue = string | number | boolean;
export type Params = Readonly<Record<string, ParamValue>>;

/** An input tensor's data as it arrived. */
export type TensorData =
  /** binary tensor data (REST) or raw_input_contents (gRPC): little-endian, row-major bytes */
  | { readonly kind: 'raw'; readonly bytes: Uint8Array }
  /** REST `data`: elements, flat or nested */
  | { readonly kind: 'json'; readonly data: unknown }
  /** gRPC InferTensorContents: the field of the datatype is read */
  | { readonly kind: 'contents'; readonly contents: Readonly<Record<string, unknown>> };

export interface InferInputTensor {
  readonly name: string;
  readonly datatype: string;
  readonly shape: readonly number[];
  readonly parameters: Params;
  readonly data: TensorData;
}

export interface InferRequestedOutput {
  readonly name: string;
  readonly parameters: Params;
}

export interface InferRequest {
  readonly model: string;
  readonly version?: string | undefined;
  readonly id?: string | undefined;
  readonly parameters: Params;
  readonly inputs: readonly InferInputTensor[];
  /** The outputs to return, in order; absent or empty: all, in the model's order. */
  readonly outputs?: readonly InferRequestedOutput[] | undefined;
}

export interface PreparedInfer {
  readonly model: ModelDefinition;
  readonly id: string | undefined;
  readonly request: OperationRequest;
  readonly file: InMemoryFile;
  /** The outputs to return, in order, with whether each goes as binary data (REST). */
  readonly outputs: readonly { readonly name: string; readonly binary: boolean }[];
  /** The request's `timeout` parameter (microseconds in the protocol) in milliseconds, if set. */
  readonly timeoutMs: number | undefined;
  /** What the plan is made from, as a PlanCache key (the model, its options, the inputs' headers). */
  readonly planKey: string;
}

export interface InferOutput {
  readonly name: string;
  readonly datatype: FixedDatatype;
  readonly shape: readonly number[];
  readonly parameters: Params;
  readonly data: Uint8Array;
  /** Whether a REST response sends it as binary data (else as JSON `data`). */
  readonly binary: boolean;
}

export interface InferResult {
  readonly modelName: string;
  readonly modelVersion: string;
  readonly id: string | undefined;
  /** Response parameters (quantize, choose_qparams: the spec, for dequantize). */
  readonly parameters: Params | undefined;
  readonly outputs: readonly InferOutput[];
  /** Hands the output buffers back to the compute once they are sent (or copied). */
  release(): void;
}

/** Name of the float input inside the one-tensor file (and in error messages). */
const INPUT = 'input';
/** Name of the codes inside the dequantize container. */
const CODES = 'codes';
/** Input parameters: binary_data_size (REST framing, already applied), logical_shape (codes). */
const INPUT_PARAMETERS = ['binary_data_size', 'logical_shape'];

function requestInvalid(detail: string): QuantdError {
  return new QuantdError('INFER_REQUEST_INVALID', { detail });
}

function inputInvalid(input: string, detail: string): QuantdError {
  return new QuantdError('INFER_INPUT_INVALID', { input, detail });
}

const show = (v: ParamValue): string => (typeof v === 'string' ? v : JSON.stringify(v));

function boolParam(key: string, value: ParamValue): boolean {
  if (typeof value === 'boolean') return value;
  throw new QuantdError('OPTION_INVALID', { option: key, detail: 'must be a boolean', value: show(value) });
}

/** The request parameters split into the operation's options and the protocol's own. */
function requestParameters(
  model: ModelDefinition,
  params: Params,
): { options: Record<string, string | number>; binaryOutput: boolean; timeoutMs: number | undefined } {
  const options: Record<string, string | number> = {};
  let binaryOutput = false;
  let timeoutMs: number | undefined;
  for (const [key, value] of Object.entries(params)) {
    if (key === 'binary_data_output') {
      binaryOutput = boolParam(key, value);
    } else if (key === 'timeout') {
      if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
        throw new QuantdError('OPTION_INVALID', {
          option: key,
          detail: 'must be a whole number of microseconds',
          value: show(value),
        });
      }
      timeoutMs = value === 0 ? undefined : value / 1000;
    } else if (key === 'priority') {
      // accepted and ignored: quantd has one queue
    } else if (model.parameters.includes(key)) {
      options[key] = typeof value === 'boolean' ? String(value) : value;
    } else {
      throw new QuantdError('OPTION_INVALID', {
        option: key,
        detail: `is not a parameter of model ${model.name} (parameters: ${[...model.parameters, ...PROTOCOL_PARAMETERS].join(', ')})`,
        value: show(value),
      });
    }
  }
  return { options, binaryOutput, timeoutMs };
}

function checkShape(input: string, shape: unknown): readonly number[] {
  if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && (d as number) >= 0)) {
    throw inputInvalid(input, `shape must be a list of non-negative integers (got ${JSON.stringify(shape)})`);
  }
  return shape as number[];
}

/** The tensor's bytes, checked against shape × datatype size. */
function tensorBytes(input: InferInputTensor, datatype: FixedDatatype, shape: readonly number[]): Uint8Array {
  const numel = numelOf(shape);
  const size = DATATYPE_SIZE[datatype];
  const data = input.data;
  if (data.kind === 'raw') {
    if (numel * size !== data.bytes.byteLength) {
      throw inputInvalid(
        input.name,
        `shape ${shapeText(shape)} of ${datatype} needs ${numel * size} bytes, but its data has ${data.bytes.byteLength}`,
      );
    }
    return data.bytes;
  }
  let values: ArrayLike<unknown>;
  let where: string;
  if (data.kind === 'json') {
    values = flattenData(data.data, input.name);
    where = 'data';
  } else {
    const field = CONTENTS_FIELD[datatype];
    if (field === null) {
      throw inputInvalid(
        input.name,
        `${datatype} has no typed contents in the protocol; send it in raw_input_contents`,
      );
    }
    const list = data.contents[field];
    values = Array.isArray(list) ? list : [];
    where = `contents.${field}`;
  }
  if (values.length !== numel) {
    throw inputInvalid(
      input.name,
      `shape ${shapeText(shape)} needs ${numel} elements, but ${where} has ${values.length}`,
    );
  }
  return bytesFromElements(datatype, values, input.name, where);
}

interface CheckedInput {
  readonly name: string;
  readonly datatype: FixedDatatype;
  readonly shape: readonly number[];
  readonly parameters: Params;
  readonly bytes: Uint8Array;
}

/** The inputs by name, each checked against the model: name, datatype, shape, data, parameters. */
function checkInputs(model: ModelDefinition, inputs: readonly InferInputTensor[]): Map<string, CheckedInput> {
  const found = new Map<string, CheckedInput>();
  const names = model.inputs.map((i) => i.name + (i.required ? '' : ' (optional)')).join(', ');
  for (const input of inputs) {
    const def = model.inputs.find((i) => i.name === input.name);
    if (!def) throw inputInvalid(input.name, `is not an input of model ${model.name} (inputs: ${names})`);
    if (found.has(input.name)) throw inputInvalid(input.name, 'is given more than once');
    const datatype = input.datatype;
    if (!isDatatype(datatype)) {
      throw inputInvalid(input.name, `datatype ${JSON.stringify(datatype)} is not a protocol datatype`);
    }
    if (!(def.accepts as readonly string[]).includes(datatype)) {
      if (def.name === INPUT)
        throw new QuantdError('INPUT_DTYPE_UNSUPPORTED', { tensor: input.name, dtype: datatype });
      throw inputInvalid(
        input.name,
        `has datatype ${datatype}; model ${model.name} takes ${def.accepts.join(', ')} here`,
      );
    }
    for (const key of Object.keys(input.parameters)) {
      const allowed =
        key === 'binary_data_size' ||
        (key === 'logical_shape' && model.name === 'dequantize' && def.name === CODES);
      if (!allowed) {
        throw inputInvalid(
          input.name,
          `parameter ${key} is not taken here (input parameters: ${INPUT_PARAMETERS.join(', ')}; logical_shape on dequantize codes only)`,
        );
      }
    }
    const shape = checkShape(input.name, input.shape);
    const fixed = datatype as FixedDatatype;
    found.set(input.name, {
      name: input.name,
      datatype: fixed,
      shape,
      parameters: input.parameters,
      bytes: tensorBytes(input, fixed, shape),
    });
  }
  for (const def of model.inputs) {
    if (def.required && !found.has(def.name)) {
      throw inputInvalid(def.name, `is missing; model ${model.name} takes inputs ${names}`);
    }
  }
  return found;
}

interface FileTensor {
  readonly name: string;
  readonly dtype: TensorEntry['dtype'];
  readonly shape: readonly number[];
  readonly data: Uint8Array;
}

/** Tensors held in memory as the file they stand for (one entry each, in order). */
function memoryFile(tensors: readonly FileTensor[], metadata: Record<string, string> | null): InMemoryFile {
  const entries: TensorEntry[] = [];
  // by name, not by entry: a remembered plan holds an earlier request's entries (same names)
  const bytes = new Map<string, Uint8Array>();
  let offset = 0;
  for (const t of tensors) {
    const entry: TensorEntry = {
      name: t.name,
      dtype: t.dtype,
      shape: t.shape,
      begin: offset,
      end: offset + t.data.byteLength,
    };
    offset = entry.end;
    entries.push(entry);
    bytes.set(t.name, t.data);
  }
  const header: SafetensorsHeader = { entries, metadata, dataOffset: 0, dataLength: offset };
  return {
    header,
    tensorBytes: (entry) => {
      const data = bytes.get(entry.name);
      if (!data) throw new QuantdError('INTERNAL', { detail: `no tensor ${entry.name} in the request` });
      return data;
    },
  };
}

/** "4,6" (as X-Tensor-Shape; "" for a scalar) → [4, 6]. */
function parseLogicalShape(value: ParamValue): number[] {
  const text = typeof value === 'string' ? value.trim() : '';
  const dims =
    text === ''
      ? []
      : text
          .replace(/^\[|\]$/g, '')
          .split(',')
          .map((d) => d.trim());
  const shape = dims.map((d) => (/^\d+$/.test(d) ? Number(d) : NaN));
  if (typeof value !== 'string' || shape.some((d) => !Number.isSafeInteger(d))) {
    throw inputInvalid(
      CODES,
      `parameter logical_shape must be comma-separated dimensions such as "4,6" (got ${show(value)})`,
    );
  }
  return shape;
}

/** The dequantize container: codes, scale and zero point checked against the spec, with its metadata. */
function dequantizeFile(inputs: Map<string, CheckedInput>, options: SpecOptions): InMemoryFile {
  const spec = parseSpec(options);
  const info = QDTYPE_INFO[spec.qdtype];
  const codes = inputs.get(CODES)!;
  const scale = inputs.get('scale')!;
  const zeroPoint = inputs.get('zero_point')!;
  const expected = datatypeOfSt(info.st);
  const packed = info.bits < 8;
  if (codes.datatype !== expected) {
    throw inputInvalid(
      CODES,
      `has datatype ${codes.datatype}; ${spec.qdtype} codes are ${expected}${packed ? ` (packed, ${8 / info.bits} per byte)` : ''}`,
    );
  }
  const given = codes.parameters['logical_shape'];
  let logical: readonly number[] = codes.shape;
  if (given !== undefined) logical = parseLogicalShape(given);
  else if (packed) {
    throw inputInvalid(
      CODES,
      `${spec.qdtype} codes are packed: give their shape as parameter logical_shape (e.g. "4,6")`,
    );
  }
  const storedShape = packed ? [quantizedByteLength(spec.qdtype, numelOf(logical))] : logical;
  if (shapeText(storedShape) !== shapeText(codes.shape)) {
    throw inputInvalid(
      CODES,
      `has shape ${shapeText(codes.shape)}; ${spec.qdtype} codes of logical shape ${shapeText(logical)} have shape ${shapeText(storedShape)}`,
    );
  }
  const layout = planLayout(CODES, logical, spec);
  const zpType: FixedDatatype = hasFloatZeroPoint(spec) ? 'FP32' : 'INT32';
  if (zeroPoint.datatype !== zpType) {
    throw inputInvalid(
      'zero_point',
      `has datatype ${zeroPoint.datatype}; ${spec.scheme} ${spec.mode} zero points are ${zpType}`,
    );
  }
  for (const qp of [scale, zeroPoint]) {
    if (shapeText(qp.shape) !== shapeText(layout.qparamShape)) {
      throw inputInvalid(
        qp.name,
        `has shape ${shapeText(qp.shape)}; ${spec.scheme} qparams of codes of logical shape ${shapeText(logical)} have shape ${shapeText(layout.qparamShape)}`,
      );
    }
  }
  return memoryFile(
    [
      { name: CODES, dtype: info.st, shape: codes.shape, data: codes.bytes },
      { name: CODES + SCALE_SUFFIX, dtype: 'F32', shape: scale.shape, data: scale.bytes },
      {
        name: CODES + ZERO_POINT_SUFFIX,
        dtype: ST_OF_DATATYPE[zpType],
        shape: zeroPoint.shape,
        data: zeroPoint.bytes,
      },
    ],
    { format: QTENSOR_FORMAT, [CODES]: encodeMeta(spec, layout, 'float32') },
  );
}

/** The float input, with the given qparams beside it when there are any. */
function transformFile(inputs: Map<string, CheckedInput>): InMemoryFile {
  const tensors: FileTensor[] = [];
  const add = (name: string, as: string): void => {
    const t = inputs.get(name);
    if (t) tensors.push({ name: as, dtype: ST_OF_DATATYPE[t.datatype], shape: t.shape, data: t.bytes });
  };
  add(INPUT, INPUT);
  add('scale', INPUT + SCALE_SUFFIX);
  add('zero_point', INPUT + ZERO_POINT_SUFFIX);
  return memoryFile(tensors, null);
}

function selectOutputs(
  model: ModelDefinition,
  requested: readonly InferRequestedOutput[] | undefined,
  binaryOutput: boolean,
): { name: string; binary: boolean }[] {
  const names = model.outputs.map((o) => o.name);
  if (!requested || requested.length === 0) return names.map((name) => ({ name, binary: binaryOutput }));
  const seen = new Set<string>();
  return requested.map((r) => {
    if (!names.includes(r.name)) {
      throw requestInvalid(
        `output ${JSON.stringify(r.name)} is not an output of model ${model.name} (outputs: ${names.join(', ')})`,
      );
    }
    if (seen.has(r.name)) throw requestInvalid(`output ${r.name} is requested more than once`);
    seen.add(r.name);
    let binary = binaryOutput;
    for (const [key, value] of Object.entries(r.parameters)) {
      if (key !== 'binary_data') {
        throw requestInvalid(
          `output ${r.name}: parameter ${key} is not taken (output parameters: binary_data)`,
        );
      }
      binary = boolParam(`${r.name}.binary_data`, value);
    }
    return { name: r.name, binary };
  });
}

/** Checks a request against its model and turns it into what the service layer runs. */
export function prepareInfer(infer: InferRequest): PreparedInfer {
  const model = findModel(infer.model, infer.version);
  const { options, binaryOutput, timeoutMs } = requestParameters(model, infer.parameters);
  const outputs = selectOutputs(model, infer.outputs, binaryOutput);
  let request: OperationRequest;
  let file: InMemoryFile;
  if (model.name === 'dequantize') {
    const { dtype, ...spec } = options;
    request = operationRequest('dequantize', { dtype } as RequestParams);
    const inputs = checkInputs(model, infer.inputs);
    file = dequantizeFile(inputs, spec as SpecOptions);
  } else {
    request = operationRequest(model.op, options);
    file = transformFile(checkInputs(model, infer.inputs));
  }
  return { model, id: infer.id, request, file, outputs, timeoutMs, planKey: planKey(model, options, infer) };
}

/**
 * Everything a request's plan is made from: the model, its options, and each input's name,
 * datatype, shape and logical_shape (the in-memory file's header and, for dequantize, its metadata
 * follow from these). Never the data.
 */
function planKey(
  model: ModelDefinition,
  options: Record<string, string | number>,
  infer: InferRequest,
): string {
  const inputs = infer.inputs.map((i) => [
    i.name,
    i.datatype,
    i.shape,
    i.parameters['logical_shape'] ?? null,
  ]);
  return `${model.name}\n${JSON.stringify(options)}\n${JSON.stringify(inputs)}`;
}

/** The output of the model that a planned tensor stands for. */
function outputName(model: ModelDefinition, tensor: string): string | undefined {
  if (model.name === 'dequantize') return tensor === CODES ? 'output' : undefined;
  if (tensor === INPUT) return model.name === 'quantize' ? 'codes' : 'output';
  if (tensor === INPUT + SCALE_SUFFIX) return 'scale';
  if (tensor === INPUT + ZERO_POINT_SUFFIX) return 'zero_point';
  if (tensor === INPUT + MASK_SUFFIX) return 'mask';
  return undefined;
}

/** The spec keys of a qtensor metadata entry, as response parameters. */
const SPEC_PARAMETERS = CODE_SPEC_OPTION_NAMES;

/**
 * Runs a prepared request on the service layer; outputs in the requested order. With `plans`, the
 * plan of an earlier request with the same key is used instead of planning again.
 */
export async function runInfer(
  prepared: PreparedInfer,
  compute: Compute,
  signal?: AbortSignal,
  plans?: PlanCache,
): Promise<InferResult> {
  const { model, planKey } = prepared;
  const cached = plans?.find(planKey);
  const plan = cached?.plan ?? planOperation(prepared.file.header, prepared.request, 'request');
  if (!cached) plans?.prepare(planKey, plan);
  const result = await runBufferPlan(plan, prepared.file, compute, signal);
  const release = (): void => result.outputs.forEach((o) => compute.release?.(o));
  try {
    const meta = result.plan.metadata[INPUT];
    const spec = meta === undefined ? undefined : (JSON.parse(meta) as Record<string, unknown>);
    const byName = new Map<string, InferOutput>();
    result.plan.tensors.forEach((t, i) => {
      const name = outputName(model, t.name);
      if (name === undefined) return;
      let parameters: Params = {};
      if (name === 'codes' && spec) {
        const qdtype = String(spec['qdtype']);
        const bits = QDTYPE_INFO[qdtype as keyof typeof QDTYPE_INFO].bits;
        parameters = { qdtype, bits, logical_shape: (spec['shape'] as number[]).join(',') };
      }
      byName.set(name, {
        name,
        datatype: datatypeOfSt(t.dtype),
        shape: t.shape,
        parameters,
        data: result.outputs[i]!,
        binary: false,
      });
    });
    const outputs = prepared.outputs.map(({ name, binary }) => {
      const out = byName.get(name);
      if (!out)
        throw new QuantdError('INTERNAL', { detail: `model ${model.name} produced no output ${name}` });
      return { ...out, binary };
    });
    let parameters: Params | undefined;
    if (spec) {
      const entries = SPEC_PARAMETERS.filter((k) => spec[k] !== null && spec[k] !== undefined).map(
        (k) => [k, spec[k] as ParamValue] as const,
      );
      parameters = Object.fromEntries(entries);
    }
    return {
      modelName: model.name,
      modelVersion: MODEL_VERSION,
      id: prepared.id,
      parameters,
      outputs,
      release,
    };
  } catch (err) {
    release();
    throw err;
  }
}

export interface InferSignal {
  /** Aborts the work (none: the work is too small to leave this thread, nothing could stop it). */
  readonly signal: AbortSignal | undefined;
  /** Aborts the work with `reason` (the client went away). */
  cancel(reason: unknown): void;
  /** Stops the timer (call once the request is answered). */
  dispose(): void;
  /** Throws the timeout if it has passed, even where the work finished first (a small tensor). */
  check(): void;
}

/** Elements a byte of input can hold at most (2-bit codes). */
const MAX_ELEMENTS_PER_BYTE = 4;

/**
 * Aborts at the earlier of the request's `timeout` parameter and the server's own limit
 * (REQUEST_TIMEOUT), or on `cancel` (client gone). Inputs too small to hold a tensor of
 * `inlineLimit` elements are computed in this thread at once, where no timer or cancellation
 * can interrupt them: they get no signal (an AbortController, a timer and AbortSignal.any were
 * 5 % of a small request's CPU), and `check` still answers a deadline that passed.
 */
export function inferSignal(
  prepared: PreparedInfer,
  serverTimeoutMs: number,
  inlineLimit: number,
): InferSignal {
  const ms = Math.min(prepared.timeoutMs ?? Infinity, serverTimeoutMs);
  const deadline = performance.now() + ms;
  const timeout = (): QuantdError => new QuantdError('REQUEST_TIMEOUT', { ms });
  const check = (): void => {
    if (performance.now() > deadline) throw timeout();
  };
  if (prepared.file.header.dataLength * MAX_ELEMENTS_PER_BYTE < inlineLimit) {
    return { signal: undefined, cancel: () => {}, dispose: () => {}, check };
  }
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(timeout()), ms);
  timer.unref();
  return {
    signal: controller.signal,
    cancel: (reason) => controller.abort(reason),
    dispose: () => clearTimeout(timer),
    check,
  };
}
