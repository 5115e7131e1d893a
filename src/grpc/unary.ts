/**
 * The unary RPCs: an OperationRequest message to the service layer and back. The result is the
 * same container POST /v1/<operation> returns, as one safetensors file or as decoded tensors.
 */
import { encodeHeader, parseSafetensors } from '../format/index.js';
import { QuantdError } from '../errors/index.js';
import {
  floatStDType,
  operationRequest,
  runBufferOperation,
  singleTensorFile,
  type Compute,
  type InMemoryFile,
  type Operation,
  type RequestParams,
} from '../service/index.js';

export interface SpecMessage {
  readonly qdtype?: string;
  readonly scheme?: string;
  readonly mode?: string;
  readonly axis?: number;
  readonly group_size?: number;
  readonly quant_min?: number;
  readonly quant_max?: number;
  readonly eps?: number;
  readonly range_search?: string;
  readonly include?: string[];
  readonly exclude?: string[];
}

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

/** The options of a request in the form operationRequest() takes (the HTTP query's). */
export function paramsOf(op: Operation, spec: SpecMessage | undefined, dtype: string | undefined): RequestParams {
  const params: Record<string, string | number | string[] | undefined> = {};
  if (op !== 'dequantize') {
    for (const [key, value] of Object.entries(spec ?? {})) {
      if (value === undefined || value === '' || (Array.isArray(value) && value.length === 0)) continue;
      params[key] = value as string | number | string[];
    }
  } else if (spec && Object.values(spec).some((v) => v !== undefined && v !== '' && !(Array.isArray(v) && !v.length))) {
    throw new QuantdError('OPTION_INVALID', {
      option: 'spec',
      detail: 'does not apply to Dequantize (the container says how each tensor was quantized)',
      value: JSON.stringify(spec),
    });
  }
  if (dtype) params['dtype'] = dtype;
  return params;
}

/** One float tensor message as the one-tensor file it stands for. */
export function tensorFile(tensor: TensorMessage, data: Uint8Array, source: string): InMemoryFile {
  const dtype = floatStDType(tensor.dtype ?? '');
  if (!dtype) {
    throw new QuantdError('OPTION_INVALID', {
      option: 'tensor.dtype',
      detail: 'must be float32, float16 or bfloat16 (or F32, F16, BF16)',
      value: tensor.dtype ?? '(missing)',
    });
  }
  return singleTensorFile(tensor.name || 'tensor', dtype, tensor.shape ?? [], data, source);
}

export async function runUnary(
  op: Operation,
  request: UnaryRequest,
  compute: Compute,
  signal: AbortSignal,
): Promise<UnaryResponse> {
  const opRequest = operationRequest(op, paramsOf(op, request.spec, request.dtype));
  const file =
    request.input === 'tensor' && request.tensor
      ? tensorFile(request.tensor, toUint8(request.tensor.data), 'request tensor')
      : request.input === 'safetensors' && request.safetensors
        ? parseSafetensors(toUint8(request.safetensors), 'request safetensors')
        : null;
  if (!file) {
    throw new QuantdError('USAGE', { detail: 'OperationRequest needs `safetensors` or `tensor`' });
  }
  const result = await runBufferOperation(file, 'request', opRequest, compute, signal);
  try {
    if (request.form === 'TENSORS') {
      return {
        tensors: result.plan.tensors.map((t, i) => ({
          name: t.name,
          dtype: t.dtype,
          shape: [...t.shape],
          data: Buffer.from(result.outputs[i]!),
        })),
        metadata: { ...result.plan.metadata },
      };
    }
    const header = encodeHeader(result.plan.tensors, result.plan.metadata).bytes;
    return { safetensors: Buffer.concat([header, ...result.outputs]) };
  } finally {
    for (const o of result.outputs) compute.release?.(o);
  }
}

/** A message's bytes as a Uint8Array in a SharedArrayBuffer-free copy-less view. */
export function toUint8(data: Uint8Array | undefined): Uint8Array {
  return data ?? new Uint8Array(0);
}
