/**
 * A small Open Inference Protocol client written from the specification (KServe
 * open-inference-protocol REST and gRPC, Triton's binary tensor data extension), not from quantd's
 * server code: its own tensor encoding (little-endian bytes, JSON `data` lists, typed contents),
 * its own request framing (Inference-Header-Content-Length, binary_data_size, gzip / deflate),
 * its own HTTP requests (node:http, every header under control, none added) and its own gRPC
 * proto (kserve_grpc.proto beside this file, loaded with camelCase fields and int64 as strings).
 * Also the native /v1 calls whose bytes the protocol's results are compared with.
 */
import http from 'node:http';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import zlib from 'node:zlib';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

// --- tensors ---------------------------------------------------------------------------------------

export const SIZE: Record<string, number> = {
  BOOL: 1,
  UINT8: 1,
  INT8: 1,
  UINT16: 2,
  INT16: 2,
  UINT32: 4,
  INT32: 4,
  UINT64: 8,
  INT64: 8,
  FP16: 2,
  BF16: 2,
  FP32: 4,
  FP64: 8,
};

/** safetensors dtype names of the datatypes (for /v1 and the comparison). */
export const ST: Record<string, string> = {
  BOOL: 'BOOL',
  UINT8: 'U8',
  INT8: 'I8',
  INT16: 'I16',
  INT32: 'I32',
  INT64: 'I64',
  FP16: 'F16',
  BF16: 'BF16',
  FP32: 'F32',
};

function halfValue(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 0x1f) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

/** The elements of little-endian tensor bytes: numbers (FP16/BF16 exact), booleans for BOOL. */
export function elements(datatype: string, bytes: Uint8Array): (number | boolean)[] {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const n = bytes.byteLength / SIZE[datatype]!;
  const out: (number | boolean)[] = [];
  for (let i = 0; i < n; i++) {
    switch (datatype) {
      case 'BOOL':
        out.push(view.getUint8(i) !== 0);
        break;
      case 'UINT8':
        out.push(view.getUint8(i));
        break;
      case 'INT8':
        out.push(view.getInt8(i));
        break;
      case 'UINT16':
        out.push(view.getUint16(2 * i, true));
        break;
      case 'INT16':
        out.push(view.getInt16(2 * i, true));
        break;
      case 'UINT32':
        out.push(view.getUint32(4 * i, true));
        break;
      case 'INT32':
        out.push(view.getInt32(4 * i, true));
        break;
      case 'INT64':
        out.push(Number(view.getBigInt64(8 * i, true)));
        break;
      case 'FP16':
        out.push(halfValue(view.getUint16(2 * i, true)));
        break;
      case 'BF16': {
        const f = new DataView(new ArrayBuffer(4));
        f.setUint32(0, view.getUint16(2 * i, true) << 16);
        out.push(f.getFloat32(0));
        break;
      }
      case 'FP32':
        out.push(view.getFloat32(4 * i, true));
        break;
      case 'FP64':
        out.push(view.getFloat64(8 * i, true));
        break;
      default:
        throw new Error(`client: no elements for ${datatype}`);
    }
  }
  return out;
}

/** Little-endian bytes of elements (not FP16 / BF16: those travel as bytes or exact numbers). */
export function bytesOf(datatype: string, values: readonly (number | boolean | string)[]): Uint8Array {
  const out = new Uint8Array(values.length * SIZE[datatype]!);
  const view = new DataView(out.buffer);
  values.forEach((v, i) => {
    const x = Number(v);
    switch (datatype) {
      case 'BOOL':
        view.setUint8(i, v === true ? 1 : 0);
        break;
      case 'UINT8':
        view.setUint8(i, x);
        break;
      case 'INT8':
        view.setInt8(i, x);
        break;
      case 'INT16':
        view.setInt16(2 * i, x, true);
        break;
      case 'INT32':
        view.setInt32(4 * i, x, true);
        break;
      case 'UINT32':
        view.setUint32(4 * i, x, true);
        break;
      case 'INT64':
        view.setBigInt64(8 * i, BigInt(v as number | string), true);
        break;
      case 'FP32':
        view.setFloat32(4 * i, x, true);
        break;
      case 'FP64':
        view.setFloat64(8 * i, x, true);
        break;
      default:
        throw new Error(`client: no encoding of ${datatype} elements`);
    }
  });
  return out;
}

/** Deterministic float32 values in about [-4, 4] with some zeros. */
export function floats(n: number, seed: number): Float32Array {
  const out = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = i % 13 === 0 ? 0 : (s / 2 ** 32) * 8 - 4;
  }
  return out;
}

/** float32 values → the datatype's bytes: FP32 as is, FP16 / BF16 rounded to nearest, ties to even. */
export function floatBytes(values: Float32Array, datatype: 'FP32' | 'FP16' | 'BF16'): Uint8Array {
  if (datatype === 'FP32') return new Uint8Array(values.buffer.slice(0));
  const out = new Uint8Array(values.length * 2);
  const view = new DataView(out.buffer);
  const f = new DataView(new ArrayBuffer(4));
  values.forEach((x, i) => {
    f.setFloat32(0, x);
    const bits = f.getUint32(0);
    let h: number;
    if (datatype === 'BF16') {
      const lower = bits & 0xffff;
      h = bits >>> 16;
      if (lower > 0x8000 || (lower === 0x8000 && (h & 1) === 1)) h += 1;
    } else {
      // values here are normal and well inside the half range
      const sign = (bits >>> 16) & 0x8000;
      const exp = ((bits >>> 23) & 0xff) - 127 + 15;
      const mant = bits & 0x7fffff;
      if (x === 0) {
        h = sign;
      } else {
        h = sign | (exp << 10) | (mant >>> 13);
        const rest = mant & 0x1fff;
        if (rest > 0x1000 || (rest === 0x1000 && (h & 1) === 1)) h += 1;
      }
    }
    view.setUint16(2 * i, h, true);
  });
  return out;
}

// --- safetensors (for /v1) -------------------------------------------------------------------------

export interface NamedTensor {
  readonly name: string;
  readonly dtype: string;
  readonly shape: readonly number[];
  readonly data: Uint8Array;
}

export function safetensors(tensors: readonly NamedTensor[]): Buffer {
  const header: Record<string, unknown> = {};
  let offset = 0;
  for (const t of tensors) {
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + t.data.byteLength] };
    offset += t.data.byteLength;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (json.length % 8)) % 8);
  const length = Buffer.alloc(8);
  length.writeBigUInt64LE(BigInt(json.length));
  return Buffer.concat([length, Buffer.from(json), ...tensors.map((t) => Buffer.from(t.data))]);
}

// --- HTTP ------------------------------------------------------------------------------------------

export interface HttpReply {
  readonly status: number;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: Buffer;
}

/** One request with exactly these headers (plus Host and Content-Length for a body). */
export function request(
  base: string,
  path: string,
  options: { method?: string; headers?: Record<string, string>; body?: Uint8Array } = {},
): Promise<HttpReply> {
  const url = new URL(path, base);
  const headers: Record<string, string> = { ...options.headers };
  if (options.body) headers['content-length'] ??= String(options.body.byteLength);
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: url.hostname,
        port: url.port,
        path: url.pathname + url.search,
        method: options.method ?? (options.body ? 'POST' : 'GET'),
        headers,
        agent: false,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }),
        );
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(options.body);
  });
}

export function json(reply: HttpReply): Record<string, unknown> {
  return JSON.parse(reply.body.toString('utf8')) as Record<string, unknown>;
}

export type ParamValue = string | number | boolean;

export interface InputTensor {
  readonly name: string;
  readonly datatype: string;
  readonly shape: readonly number[];
  readonly bytes: Uint8Array;
  readonly parameters?: Record<string, ParamValue>;
}

export interface OutputTensor {
  readonly datatype: string;
  readonly shape: number[];
  readonly parameters: Record<string, ParamValue>;
  /** The bytes (binary data or raw contents; JSON data re-encoded, except FP16 / BF16). */
  readonly bytes?: Uint8Array;
  /** The elements, when they came as JSON data or typed contents. */
  readonly data?: (number | boolean)[];
}

export interface RestOptions {
  readonly id?: string;
  readonly parameters?: Record<string, ParamValue>;
  /** JSON `data` (default) or binary data for the inputs. */
  readonly binaryInputs?: boolean;
  /** Sends FP16 / BF16 inputs as JSON numbers too (their exact values). */
  readonly outputs?: readonly { name: string; binary_data?: boolean }[];
  /** Content-Type sent; null: none (as some stock clients do). Default application/json. */
  readonly contentType?: string | null;
  readonly encoding?: 'gzip' | 'deflate' | 'deflate-raw';
  readonly headers?: Record<string, string>;
}

/** The request body of the binary tensor data extension, and its Inference-Header-Content-Length. */
export function restBody(
  inputs: readonly InputTensor[],
  options: RestOptions,
): { body: Buffer; headerLength?: number } {
  const blobs: Uint8Array[] = [];
  const request: Record<string, unknown> = {
    ...(options.id !== undefined && { id: options.id }),
    ...(options.parameters && { parameters: options.parameters }),
    inputs: inputs.map((t) => {
      const base = { name: t.name, shape: t.shape, datatype: t.datatype };
      if (options.binaryInputs) {
        blobs.push(t.bytes);
        return { ...base, parameters: { ...t.parameters, binary_data_size: t.bytes.byteLength } };
      }
      return {
        ...base,
        ...(t.parameters && { parameters: t.parameters }),
        data: elements(t.datatype, t.bytes),
      };
    }),
    ...(options.outputs && {
      outputs: options.outputs.map((o) => ({
        name: o.name,
        ...(o.binary_data !== undefined && { parameters: { binary_data: o.binary_data } }),
      })),
    }),
  };
  const head = Buffer.from(JSON.stringify(request));
  if (blobs.length === 0) return { body: head };
  return { body: Buffer.concat([head, ...blobs]), headerLength: head.byteLength };
}

/** The outputs of a response: JSON, then the binary outputs in output order. */
export function restOutputs(reply: HttpReply): {
  response: Record<string, unknown>;
  outputs: Map<string, OutputTensor>;
} {
  const header = reply.headers['inference-header-content-length'];
  const length = header === undefined ? reply.body.byteLength : Number(header);
  const response = JSON.parse(reply.body.subarray(0, length).toString('utf8')) as Record<string, unknown>;
  const outputs = new Map<string, OutputTensor>();
  let cursor = length;
  for (const o of response['outputs'] as Record<string, unknown>[]) {
    const parameters = (o['parameters'] ?? {}) as Record<string, ParamValue>;
    const datatype = o['datatype'] as string;
    const shape = o['shape'] as number[];
    const size = parameters['binary_data_size'];
    if (size !== undefined) {
      const bytes = reply.body.subarray(cursor, cursor + Number(size));
      cursor += Number(size);
      const { binary_data_size: _, ...rest } = parameters;
      outputs.set(o['name'] as string, { datatype, shape, parameters: rest, bytes });
    } else {
      const data = o['data'] as (number | boolean)[];
      const bytes = datatype === 'FP16' || datatype === 'BF16' ? undefined : bytesOf(datatype, data);
      outputs.set(o['name'] as string, { datatype, shape, parameters, data, ...(bytes && { bytes }) });
    }
  }
  if (cursor !== reply.body.byteLength)
    throw new Error(`client: ${reply.body.byteLength - cursor} bytes left over`);
  return { response, outputs };
}

/** POST /v2/models/MODEL/infer. */
export async function restInfer(
  base: string,
  model: string,
  inputs: readonly InputTensor[],
  options: RestOptions = {},
): Promise<HttpReply> {
  const { body, headerLength } = restBody(inputs, options);
  const headers: Record<string, string> = { ...options.headers };
  if (options.contentType !== null) headers['content-type'] = options.contentType ?? 'application/json';
  if (headerLength !== undefined) headers['inference-header-content-length'] = String(headerLength);
  let sent: Uint8Array = body;
  if (options.encoding === 'gzip') sent = zlib.gzipSync(body);
  else if (options.encoding === 'deflate') sent = zlib.deflateSync(body);
  else if (options.encoding === 'deflate-raw') sent = zlib.deflateRawSync(body);
  if (options.encoding)
    headers['content-encoding'] = options.encoding === 'deflate-raw' ? 'deflate' : options.encoding;
  return request(base, `/v2/models/${model}/infer`, { headers, body: sent });
}

/** POST /v1/OP with one raw tensor or a safetensors body; the result's tensors by name. */
export async function v1(
  base: string,
  op: string,
  query: Record<string, string | number>,
  body: { tensor: InputTensor } | { safetensors: Buffer },
): Promise<Map<string, { dtype: string; shape: number[]; bytes: Uint8Array }>> {
  const q = new URLSearchParams(
    Object.entries(query).map(([k, v]): [string, string] => [k, String(v)]),
  ).toString();
  const headers: Record<string, string> = { accept: 'application/json' };
  let data: Uint8Array;
  if ('tensor' in body) {
    headers['content-type'] = 'application/octet-stream';
    headers['x-tensor-dtype'] = ST[body.tensor.datatype]!;
    headers['x-tensor-shape'] = body.tensor.shape.join(',');
    data = body.tensor.bytes;
  } else {
    headers['content-type'] = 'application/x-safetensors';
    data = body.safetensors;
  }
  const reply = await request(base, `/v1/${op}${q ? `?${q}` : ''}`, { headers, body: data });
  if (reply.status !== 200) throw new Error(`/v1/${op}: ${reply.status} ${reply.body.toString()}`);
  const result = json(reply) as { tensors: Record<string, { dtype: string; shape: number[]; data: string }> };
  return new Map(
    Object.entries(result.tensors).map(([name, t]) => [
      name,
      { dtype: t.dtype, shape: t.shape, bytes: new Uint8Array(Buffer.from(t.data, 'base64')) },
    ]),
  );
}

// --- gRPC ------------------------------------------------------------------------------------------

const PROTO = join(dirname(fileURLToPath(import.meta.url)), 'kserve_grpc.proto');

type Callback = (err: grpc.ServiceError | null, response?: Record<string, unknown>) => void;
export type InferenceClient = grpc.Client &
  Record<
    string,
    (
      request: Record<string, unknown>,
      metadata: grpc.Metadata,
      options: grpc.CallOptions,
      cb: Callback,
    ) => void
  >;

export function inferenceClient(target: string): InferenceClient {
  const definition = protoLoader.loadSync(PROTO, {
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  const pkg = grpc.loadPackageDefinition(definition) as unknown as {
    inference: { GRPCInferenceService: grpc.ServiceClientConstructor };
  };
  return new pkg.inference.GRPCInferenceService(
    target,
    grpc.credentials.createInsecure(),
  ) as unknown as InferenceClient;
}

export function call(
  client: InferenceClient,
  rpc: string,
  message: Record<string, unknown>,
  metadata: grpc.Metadata = new grpc.Metadata(),
): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) =>
    client[rpc]!(message, metadata, { deadline: Date.now() + 10_000 }, (err, res) =>
      err ? reject(err) : resolve(res ?? {}),
    ),
  );
}

export async function grpcError(promise: Promise<unknown>): Promise<grpc.ServiceError> {
  try {
    await promise;
  } catch (err) {
    return err as grpc.ServiceError;
  }
  throw new Error('the call succeeded; an error was expected');
}

function parameter(value: ParamValue): Record<string, unknown> {
  if (typeof value === 'boolean') return { boolParam: value };
  if (typeof value === 'string') return { stringParam: value };
  return Number.isInteger(value) ? { int64Param: String(value) } : { doubleParam: value };
}

export function parameterMap(params: Record<string, ParamValue> = {}): Record<string, unknown> {
  return Object.fromEntries(Object.entries(params).map(([k, v]) => [k, parameter(v)]));
}

function parameterValue(p: Record<string, unknown>): ParamValue {
  const choice = p['parameterChoice'] as string;
  const v = p[choice];
  if (choice === 'int64Param' || choice === 'uint64Param') return Number(v);
  return v as ParamValue;
}

const CONTENTS: Record<string, string> = {
  BOOL: 'boolContents',
  UINT8: 'uintContents',
  UINT16: 'uintContents',
  UINT32: 'uintContents',
  INT8: 'intContents',
  INT16: 'intContents',
  INT32: 'intContents',
  INT64: 'int64Contents',
  FP32: 'fp32Contents',
  FP64: 'fp64Contents',
};

export interface GrpcOptions {
  readonly parameters?: Record<string, ParamValue>;
  readonly outputs?: readonly string[];
  /** Inputs as typed contents (default: raw_input_contents). */
  readonly typed?: boolean;
  readonly id?: string;
  readonly version?: string;
  readonly metadata?: grpc.Metadata;
}

export function inferMessage(
  model: string,
  inputs: readonly InputTensor[],
  options: GrpcOptions = {},
): Record<string, unknown> {
  return {
    modelName: model,
    ...(options.version !== undefined && { modelVersion: options.version }),
    ...(options.id !== undefined && { id: options.id }),
    parameters: parameterMap(options.parameters),
    inputs: inputs.map((t) => ({
      name: t.name,
      datatype: t.datatype,
      shape: t.shape,
      parameters: parameterMap(t.parameters),
      ...(options.typed && { contents: { [CONTENTS[t.datatype]!]: elements(t.datatype, t.bytes) } }),
    })),
    outputs: (options.outputs ?? []).map((name) => ({ name })),
    rawInputContents: options.typed ? [] : inputs.map((t) => Buffer.from(t.bytes)),
  };
}

/** ModelInfer; the outputs by name, from raw_output_contents or typed contents. */
export async function grpcInfer(
  client: InferenceClient,
  model: string,
  inputs: readonly InputTensor[],
  options: GrpcOptions = {},
): Promise<{ response: Record<string, unknown>; outputs: Map<string, OutputTensor> }> {
  const response = await call(client, 'ModelInfer', inferMessage(model, inputs, options), options.metadata);
  const raw = response['rawOutputContents'] as Buffer[];
  const outputs = new Map<string, OutputTensor>();
  (response['outputs'] as Record<string, unknown>[]).forEach((o, i) => {
    const datatype = o['datatype'] as string;
    const shape = (o['shape'] as string[]).map(Number);
    const parameters = Object.fromEntries(
      Object.entries(o['parameters'] as Record<string, Record<string, unknown>>).map(([k, p]) => [
        k,
        parameterValue(p),
      ]),
    );
    if (raw.length > 0) {
      outputs.set(o['name'] as string, { datatype, shape, parameters, bytes: new Uint8Array(raw[i]!) });
    } else {
      const data = (o['contents'] as Record<string, (number | boolean | string)[]>)[CONTENTS[datatype]!]!;
      outputs.set(o['name'] as string, {
        datatype,
        shape,
        parameters,
        data: data.map((v) => (typeof v === 'string' ? Number(v) : v)),
        bytes: bytesOf(datatype, data),
      });
    }
  });
  return { response, outputs };
}

export function responseParameters(response: Record<string, unknown>): Record<string, ParamValue> {
  return Object.fromEntries(
    Object.entries(response['parameters'] as Record<string, Record<string, unknown>>).map(([k, p]) => [
      k,
      parameterValue(p),
    ]),
  );
}
