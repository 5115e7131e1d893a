/**
 * The unary RPCs: an OperationRequest message to the service layer and back. The result is the
 * same container POST /v1/<operation> returns, as one safetensors file or as decoded tensors.
 */
import { SPEC_OPTION_NAMES, ST_DTYPE_SIZE, type SpecOptionRow, type StDType } from '../core/index.js';
import { QuantdError, shapeText } from '../errors/index.js';
import {
  SELECTION_OPTION_ROWS,
  floatStDType,
  operationRequest,
  parseBody,
  planBuffer,
  runBufferPlan,
  planOutputBytes,
  singleTensorFile,
  type PlanCache,
  type Compute,
  type InMemoryFile,
  type Operation,
  type RequestParams,
} from '../service/index.js';

/** A decoded Spec message: a field per spec option (text for enums, numbers otherwise). */
export type SpecMessage = {
  readonly [Row in SpecOptionRow as Row['name']]?: Row['kind'] extends 'enum' ? string : number;
} & {
  readonly include?: string[];
  readonly exclude?: string[];
};

export interface TensorMessage {
  readonly name?: string;
  readonly dtype?: string;
  readonly shape?: number[];
  readonly data?: Uint8Array;
}

export interface UnaryRequest {
  readonly safetensors?: Uint8Array;
  readonly tensor?: TensorMessage;
  readonly input?: 'safetensors' | 'tensor';
  readonly spec?: SpecMessage;
  readonly dtype?: string;
  readonly form?: 'SAFETENSORS' | 'TENSORS';
}

export interface UnaryResponse {
  readonly safetensors?: Uint8Array;
  readonly tensors?: TensorMessage[];
  readonly metadata?: Record<string, string>;
}

/**
 * The Spec fields, in the HTTP query's names. Only these are read from a decoded Spec: with
 * `oneofs: true`, proto-loader adds a synthetic key for each proto3 `optional` field that is set
 * (`_axis: 'axis'`, the name of its synthetic oneof), which is no option.
 */
const SPEC_FIELDS: readonly (keyof SpecMessage)[] = [
  ...SPEC_OPTION_NAMES,
  ...SELECTION_OPTION_ROWS.map((row) => row.name),
];

/**
 * The fields of a Spec that are set (an unset field, an empty string or list counts as unset), in
 * the HTTP query's names; the Jobs service builds a job's options from them too (job-messages.ts).
 */
export function specValues(spec: SpecMessage | undefined): Record<string, string | number | string[]> {
  const values: Record<string, string | number | string[]> = {};
  for (const key of SPEC_FIELDS) {
    const value: unknown = spec?.[key];
    if (value === undefined || value === null || value === '') continue;
    if (Array.isArray(value)) {
      if (value.length > 0) values[key] = value.map(String);
    } else if (typeof value === 'string' || typeof value === 'number') {
      values[key] = value;
    }
  }
  return values;
}

/** The options of a request in the form operationRequest() takes (the HTTP query's). */
export function paramsOf(
  op: Operation,
  spec: SpecMessage | undefined,
  dtype: string | undefined,
): RequestParams {
  const params: Record<string, string | number | string[] | undefined> = {};
  const values = specValues(spec);
  if (op !== 'dequantize') {
    Object.assign(params, values);
  } else if (Object.keys(values).length > 0) {
    throw new QuantdError('OPTION_INVALID', {
      option: 'spec',
      detail: 'does not apply to Dequantize (the container says how each tensor was quantized)',
      value: JSON.stringify(values),
    });
  }
  if (dtype) params['dtype'] = dtype;
  return params;
}

/** The safetensors header key of the metadata: no tensor may take its name. */
const METADATA_KEY = '__metadata__';

/**
 * A Tensor message's header fields checked — float dtype, a name that is not the metadata key,
 * a shape of non-negative safe integers whose size in bytes is `byteLength` — before any data is
 * read (QuantizeStream checks them at its header). Returns the one-tensor file's parts.
 */
export function checkTensor(
  tensor: TensorMessage,
  byteLength: number,
  source: string,
): { name: string; dtype: StDType; shape: number[] } {
  const dtype = floatStDType(tensor.dtype ?? '');
  if (!dtype) {
    throw new QuantdError('OPTION_INVALID', {
      option: 'tensor.dtype',
      detail: 'must be float32, float16 or bfloat16 (or F32, F16, BF16)',
      value: tensor.dtype ?? '(missing)',
    });
  }
  const name = tensor.name || 'tensor';
  if (name === METADATA_KEY) throw new QuantdError('TENSOR_NAME_RESERVED', { source, tensor: name });
  const shape = [...(tensor.shape ?? [])].map(Number);
  if (!shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
    throw new QuantdError('OPTION_INVALID', {
      option: 'tensor.shape',
      detail: 'must list non-negative dimensions, e.g. [4096, 4096] ([] for a scalar)',
      value: shapeText(shape),
    });
  }
  // the byte count, checked against the data (or total_bytes) before any allocation
  const expected = shape.reduce((n, d) => n * d, ST_DTYPE_SIZE[dtype]);
  if (expected !== byteLength) {
    throw new QuantdError('SAFETENSORS_SIZE_MISMATCH', {
      source,
      tensor: name,
      dtype,
      shape: shapeText(shape),
      expected,
      actual: byteLength,
    });
  }
  return { name, dtype, shape };
}

/** One float tensor message as the one-tensor file it stands for. */
export function tensorFile(tensor: TensorMessage, data: Uint8Array, source: string): InMemoryFile {
  const { name, dtype, shape } = checkTensor(tensor, data.byteLength, source);
  return singleTensorFile(name, dtype, shape, data, source);
}

/**
 * What a one-tensor request's plan is made from (PlanCache): the operation, its options, and the
 * tensor's name, dtype and shape. A safetensors input has no key: its header is in its bytes.
 */
function planKey(op: Operation, params: RequestParams, request: UnaryRequest): string | undefined {
  const tensor = request.input === 'tensor' ? request.tensor : undefined;
  if (!tensor) return undefined;
  return `${op}\n${JSON.stringify(params)}\n${JSON.stringify([tensor.name, tensor.dtype, tensor.shape])}`;
}

export async function runUnary(
  op: Operation,
  request: UnaryRequest,
  compute: Compute,
  signal: AbortSignal,
  /** The server's plans of recent requests. */
  plans: PlanCache,
  /** The largest message the server sends (grpc.max_send_message_length). */
  maxMessage: number = Number.MAX_SAFE_INTEGER,
  /** Told the planned result's bytes before it is computed; throws to refuse (the memory budget). */
  charge?: (resultBytes: number) => void,
): Promise<UnaryResponse> {
  const params = paramsOf(op, request.spec, request.dtype);
  const key = planKey(op, params, request);
  const cached = plans.find(key);
  // options are checked before the input (a bad option is reported first), unless known good
  const opRequest = cached ? undefined : operationRequest(op, params);
  const file =
    request.input === 'tensor' && request.tensor
      ? tensorFile(request.tensor, toUint8(request.tensor.data), 'request tensor')
      : request.input === 'safetensors' && request.safetensors
        ? await parseBody(toUint8(request.safetensors), 'request safetensors', signal)
        : null;
  if (!file) {
    throw new QuantdError('USAGE', { detail: 'OperationRequest needs `safetensors` or `tensor`' });
  }
  // tens of thousands of tensors are parsed and planned with the event loop turning meanwhile
  const prepared = cached ?? plans.prepare(key, await planBuffer(file.header, opRequest!, 'request', signal));
  charge?.(planOutputBytes(prepared.plan));
  const result = await runBufferPlan(prepared.plan, file, compute, signal);
  try {
    if (request.form === 'TENSORS') {
      const tensors = result.plan.tensors.map((t, i) => ({
        name: t.name,
        dtype: t.dtype,
        shape: [...t.shape],
        data: result.outputs[i]!,
      }));
      const metadata = { ...result.plan.metadata };
      checkResultSize(tensorsResponseSize(tensors, metadata), maxMessage);
      return { tensors: tensors.map((t) => ({ ...t, data: Buffer.from(t.data) })), metadata };
    }
    const header = await prepared.encodedHeader(signal);
    const length = result.outputs.reduce((n, o) => n + o.byteLength, header.byteLength);
    checkResultSize(bytesFieldSize(length), maxMessage);
    return { safetensors: Buffer.concat([header, ...result.outputs], length) };
  } finally {
    for (const o of result.outputs) compute.release?.(o);
  }
}

/**
 * A result larger than the server's message limit: refused with a catalogued error (grpc-js
 * would refuse to send it with a bare RESOURCE_EXHAUSTED, without quantd-code), before it is
 * copied into a message. QuantizeStream carries results of any size.
 */
function checkResultSize(size: number, limit: number): void {
  if (size > limit) throw new QuantdError('RESULT_TOO_LARGE', { size, limit, setting: 'QUANTD_BODY_LIMIT' });
}

// --- protobuf sizes of an OperationResponse (field numbers < 16: one-byte tags) ------------------

/** Bytes of a varint. */
export function varintSize(value: number): number {
  let n = 1;
  for (let v = value; v >= 128; v = Math.floor(v / 128)) n++;
  return n;
}

/** Bytes of a length-delimited field (bytes, string, message) whose content is `length` bytes. */
export function bytesFieldSize(length: number): number {
  return 1 + varintSize(length) + length;
}

const stringFieldSize = (text: string): number => bytesFieldSize(Buffer.byteLength(text, 'utf8'));

/** The encoded size of an OperationResponse with `tensors` and `metadata` (form TENSORS). */
function tensorsResponseSize(
  tensors: readonly { name: string; dtype: string; shape: readonly number[]; data: Uint8Array }[],
  metadata: Readonly<Record<string, string>>,
): number {
  let size = 0;
  for (const t of tensors) {
    const dims = t.shape.reduce((n, d) => n + varintSize(d), 0);
    const tensor =
      stringFieldSize(t.name) +
      stringFieldSize(t.dtype) +
      (t.shape.length > 0 ? bytesFieldSize(dims) : 0) +
      bytesFieldSize(t.data.byteLength);
    size += bytesFieldSize(tensor);
  }
  for (const [key, value] of Object.entries(metadata)) {
    size += bytesFieldSize(stringFieldSize(key) + stringFieldSize(value));
  }
  return size;
}

/** A message's bytes as a Uint8Array in a SharedArrayBuffer-free copy-less view. */
export function toUint8(data: Uint8Array | undefined): Uint8Array {
  return data ?? new Uint8Array(0);
}
