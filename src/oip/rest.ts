/**
 * The REST form of the Open Inference Protocol, as bytes: the inference request JSON object with
 * the binary tensor data extension (Inference-Header-Content-Length gives the JSON's length; the
 * inputs with a `binary_data_size` parameter take their bytes, in input order, from what follows
 * it) parsed into an InferRequest, and an InferResult written as the response JSON object
 * followed by the binary outputs. Errors are `{"error": "CODE: message"}`, which stock clients read.
 * No HTTP here: src/http/oip-routes.ts carries these bytes.
 */
import { QuantdError } from '../errors/index.js';
import { elementsOf } from './datatypes.js';
import type {
  InferInputTensor,
  InferRequest,
  InferRequestedOutput,
  InferResult,
  ParamValue,
  Params,
  TensorData,
} from './infer.js';

export const HEADER_LENGTH_HEADER = 'inference-header-content-length';
/**
 * Largest JSON part of a request unless the caller sets a smaller one (QUANTD_OIP_JSON_LIMIT, which
 * src/http checks before the body is read): bigger tensors go as binary data.
 */
export const JSON_REQUEST_LIMIT = 256 * 1024 * 1024;
/** Most elements a response carries as JSON `data` (all outputs together). */
export const JSON_OUTPUT_ELEMENTS = 1 << 24;

function invalid(detail: string): QuantdError {
  return new QuantdError('INFER_REQUEST_INVALID', { detail });
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A `parameters` object: string, number or boolean values only (as the protocol defines them). */
function paramsOf(value: unknown, where: string): Params {
  if (value === undefined) return {};
  if (!isObject(value)) throw invalid(`${where} parameters must be a JSON object`);
  const out: Record<string, ParamValue> = {};
  for (const [key, v] of Object.entries(value)) {
    if (typeof v !== 'string' && typeof v !== 'number' && typeof v !== 'boolean') {
      throw invalid(
        `${where} parameter ${key} must be a string, a number or a boolean (got ${JSON.stringify(v)})`,
      );
    }
    Object.defineProperty(out, key, { value: v, enumerable: true, writable: true, configurable: true });
  }
  return out;
}

function stringField(obj: Record<string, unknown>, key: string, where: string): string {
  const v = obj[key];
  if (typeof v !== 'string') throw invalid(`${where} needs "${key}" as a string`);
  return v;
}

/** The value of Inference-Header-Content-Length: the JSON's length, within the body. */
function jsonLength(header: string | string[] | undefined, bodyLength: number): number {
  if (header === undefined) return bodyLength;
  const text = Array.isArray(header) ? header.join(', ') : header.trim();
  const n = /^\d+$/.test(text) ? Number(text) : NaN;
  if (!Number.isSafeInteger(n)) {
    throw new QuantdError('HEADER_INVALID', {
      header: 'Inference-Header-Content-Length',
      detail: 'must be a byte count',
      value: text.slice(0, 80),
    });
  }
  if (n > bodyLength) {
    throw new QuantdError('HEADER_INVALID', {
      header: 'Inference-Header-Content-Length',
      detail: `is past the end of the body (${bodyLength} bytes)`,
      value: text,
    });
  }
  return n;
}

function asText(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8');
}

/** The largest JSON part of a request, and the setting that sets it (named in the 413). */
export interface JsonPartLimit {
  readonly limit: number;
  readonly setting: string;
}

/**
 * The inference request in `body` for model `model` (version `version`, from the path):
 * `headerLength` is the Inference-Header-Content-Length header, if sent; `jsonPart` bounds the JSON
 * part (never past JSON_REQUEST_LIMIT).
 */
export function parseRestInfer(
  body: Uint8Array | undefined,
  headerLength: string | string[] | undefined,
  model: string,
  version: string | undefined,
  jsonPart: JsonPartLimit,
): InferRequest {
  const bytes = body ?? new Uint8Array(0);
  const length = jsonLength(headerLength, bytes.byteLength);
  if (length === 0) throw invalid('the body is empty; send the inference request JSON object');
  const limit = Math.min(jsonPart.limit, JSON_REQUEST_LIMIT);
  if (length > limit) {
    throw new QuantdError('PAYLOAD_TOO_LARGE', {
      size: length,
      limit,
      setting: `${jsonPart.setting}, for the JSON part: send larger tensors as binary data`,
    });
  }
  let json: unknown;
  try {
    json = JSON.parse(asText(bytes.subarray(0, length)));
  } catch (err) {
    const message = (err as Error).message;
    const hint =
      headerLength === undefined && /after JSON/i.test(message)
        ? ' (binary data after the JSON needs the Inference-Header-Content-Length header)'
        : '';
    throw invalid(`the body is not a JSON object: ${message}${hint}`);
  }
  if (!isObject(json)) throw invalid('the body must be a JSON object with "inputs"');
  const id = json['id'];
  if (id !== undefined && typeof id !== 'string') throw invalid('"id" must be a string');
  if (!Array.isArray(json['inputs'])) throw invalid('"inputs" must be a list of input tensors');
  const binary = bytes.subarray(length);
  let cursor = 0;
  const inputs: InferInputTensor[] = json['inputs'].map((raw: unknown, i: number) => {
    if (!isObject(raw)) throw invalid(`inputs[${i}] must be a JSON object`);
    const name = stringField(raw, 'name', `inputs[${i}]`);
    const where = `input ${name}`;
    const datatype = stringField(raw, 'datatype', where);
    const parameters = paramsOf(raw['parameters'], where);
    const size = parameters['binary_data_size'];
    let data: TensorData;
    if (size !== undefined) {
      if (typeof size !== 'number' || !Number.isSafeInteger(size) || size < 0) {
        throw invalid(`${where}: binary_data_size must be a byte count (got ${JSON.stringify(size)})`);
      }
      if (raw['data'] !== undefined) throw invalid(`${where} has both "data" and binary_data_size`);
      if (cursor + size > binary.byteLength) {
        throw invalid(
          `${where}: binary_data_size ${size} runs past the binary data (${binary.byteLength} bytes after the JSON, ${cursor} taken by earlier inputs)`,
        );
      }
      data = { kind: 'raw', bytes: binary.subarray(cursor, cursor + size) };
      cursor += size;
    } else if (raw['data'] !== undefined) {
      data = { kind: 'json', data: raw['data'] };
    } else {
      throw invalid(`${where} has neither "data" nor a binary_data_size parameter`);
    }
    return { name, datatype, shape: raw['shape'] as number[], parameters, data };
  });
  if (cursor !== binary.byteLength) {
    throw invalid(
      `${binary.byteLength} bytes of binary data follow the JSON, but the inputs' binary_data_size add up to ${cursor}`,
    );
  }
  let outputs: InferRequestedOutput[] | undefined;
  if (json['outputs'] !== undefined) {
    if (!Array.isArray(json['outputs'])) throw invalid('"outputs" must be a list');
    outputs = json['outputs'].map((raw: unknown, i: number) => {
      if (!isObject(raw)) throw invalid(`outputs[${i}] must be a JSON object`);
      const name = stringField(raw, 'name', `outputs[${i}]`);
      return { name, parameters: paramsOf(raw['parameters'], `output ${name}`) };
    });
  }
  return {
    model,
    version,
    id: id as string | undefined,
    parameters: paramsOf(json['parameters'], 'the request'),
    inputs,
    outputs,
  };
}

export interface RestResponse {
  /** The response JSON object. */
  readonly json: string;
  /** The binary outputs, in output order (empty: a plain JSON response). */
  readonly binary: readonly Uint8Array[];
}

/** The response for `result`: JSON `data` for the outputs not sent as binary data. */
export function encodeRestResponse(result: InferResult): RestResponse {
  const jsonElements = result.outputs
    .filter((o) => !o.binary)
    .reduce((n, o) => n + o.shape.reduce((a, d) => a * d, 1), 0);
  if (jsonElements > JSON_OUTPUT_ELEMENTS) {
    throw invalid(
      `the outputs asked for as JSON hold ${jsonElements} elements; JSON data is for up to ${JSON_OUTPUT_ELEMENTS}: ask for binary data (binary_data_output, or binary_data on each output)`,
    );
  }
  const binary: Uint8Array[] = [];
  const outputs = result.outputs.map((o) => {
    const parameters: Record<string, ParamValue> = { ...o.parameters };
    if (o.binary) {
      parameters['binary_data_size'] = o.data.byteLength;
      binary.push(o.data);
      return { name: o.name, datatype: o.datatype, shape: o.shape, parameters };
    }
    const data = elementsOf(o.datatype, o.data);
    const bad = data.findIndex((v) => typeof v === 'number' && !Number.isFinite(v));
    if (bad >= 0) {
      throw invalid(
        `output ${o.name} holds ${String(data[bad])} at flat index ${bad}, which JSON cannot carry; ask for it as binary data (binary_data: true)`,
      );
    }
    const base = { name: o.name, datatype: o.datatype, shape: o.shape };
    return Object.keys(parameters).length > 0 ? { ...base, parameters, data } : { ...base, data };
  });
  const response = {
    model_name: result.modelName,
    model_version: result.modelVersion,
    ...(result.id !== undefined && { id: result.id }),
    ...(result.parameters !== undefined && { parameters: result.parameters }),
    outputs,
  };
  return { json: JSON.stringify(response), binary };
}

/** The protocol's error object: `{"error": "CODE: message"}`. */
export function errorJson(error: QuantdError): string {
  return JSON.stringify({ error: `${error.code}: ${error.message}` });
}
