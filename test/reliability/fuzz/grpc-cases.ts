/**
 * Hostile gRPC calls: every method of quantd.v1.Quantizer, quantd.v1.Jobs and
 * inference.GRPCInferenceService, sent by a raw client whose serializers pass bytes through, so
 * that a request can be random bytes, a valid message with a few bytes flipped, or a valid
 * message with hostile fields (non-ASCII and 10k-character names, 201+-character ids, NaN and
 * Inf values, huge shapes).
 */
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

import { REPO } from '../../cli/run-cli.js';
import type { Prng } from './prng.js';
import {
  OP_DTYPES,
  floatBytes,
  hostileDtype,
  hostileName,
  hostileNumber,
  hostileShape,
  hostileWord,
} from './hostile-values.js';
import { safetensorsMutant } from './safetensors-mutants.js';

interface Method {
  readonly path: string;
  readonly requestStream: boolean;
  readonly responseStream: boolean;
  readonly encode: (message: object) => Buffer;
  /** A valid-shaped message with hostile field values. */
  readonly hostile: (r: Prng) => object;
}

export interface GrpcAnswer {
  /** gRPC status code (0: OK). */
  readonly code: number;
  readonly quantdCode: string | undefined;
  readonly details: string;
}

const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: true,
  longs: Number,
  enums: String,
  defaults: false,
  oneofs: true,
  includeDirs: [join(REPO, 'proto')],
};

function spec(r: Prng): object {
  const s: Record<string, unknown> = {};
  for (const key of ['qdtype', 'scheme', 'mode', 'range_search']) if (r.chance(0.5)) s[key] = hostileWord(r);
  for (const key of ['axis', 'group_size', 'quant_min', 'quant_max']) {
    if (r.chance(0.3)) s[key] = Math.trunc(Math.min(Math.max(hostileNumber(r) || 0, -(2 ** 53)), 2 ** 53));
  }
  if (r.chance(0.3)) s['eps'] = hostileNumber(r);
  if (r.chance(0.2)) s['include'] = [hostileName(r), r.pick(['*a*', '*n*n*n*n*n*n*n*!', '!(x)'])];
  return s;
}

function tensor(r: Prng): object {
  const shape = hostileShape(r).map((d) => Math.trunc(Math.min(Math.max(d, -(2 ** 53)), 2 ** 53)));
  return {
    name: hostileName(r),
    dtype: r.chance(0.6) ? 'float32' : r.pick([...OP_DTYPES, hostileDtype(r)]),
    shape,
    data: floatBytes(r, r.int(64), r.chance(0.5)),
  };
}

function operation(r: Prng): object {
  const m: Record<string, unknown> = r.chance(0.5)
    ? { tensor: tensor(r) }
    : { safetensors: safetensorsMutant(r) };
  if (r.chance(0.7)) m['spec'] = spec(r);
  if (r.chance(0.3)) m['dtype'] = r.pick(OP_DTYPES);
  if (r.chance(0.5)) m['form'] = r.pick(['SAFETENSORS', 'TENSORS']);
  return m;
}

function jobId(r: Prng): string {
  return r.chance(0.4) ? 'j'.repeat(201 + r.int(300)) : hostileName(r);
}

function inferRequest(r: Prng): object {
  const shape = hostileShape(r).map((d) => Math.trunc(Math.min(Math.max(d, -(2 ** 53)), 2 ** 53)));
  const input: Record<string, unknown> = {
    name: r.chance(0.7) ? 'input' : hostileName(r),
    datatype: r.pick(['FP32', 'FP16', 'BF16', 'INT8', 'BYTES', 'x', hostileName(r)]),
    shape,
  };
  if (r.chance(0.5))
    input['contents'] = { fp32_contents: Array.from({ length: r.int(12) }, () => hostileNumber(r)) };
  const m: Record<string, unknown> = {
    model_name: r.chance(0.6)
      ? r.pick(['quantize', 'dequantize', 'fake_quantize', 'choose_qparams'])
      : hostileName(r),
    inputs: [input],
  };
  if (r.chance(0.3)) m['raw_input_contents'] = [floatBytes(r, r.int(12), true)];
  if (r.chance(0.3))
    m['parameters'] = { qdtype: { string_param: hostileWord(r) }, axis: { int64_param: 99 } };
  return m;
}

const HOSTILE: Record<string, (r: Prng) => object> = {
  '/quantd.v1.Quantizer/Quantize': operation,
  '/quantd.v1.Quantizer/Dequantize': operation,
  '/quantd.v1.Quantizer/FakeQuantize': operation,
  '/quantd.v1.Quantizer/ChooseQParams': operation,
  '/quantd.v1.Quantizer/QuantizeStream': (r) =>
    r.chance(0.5)
      ? {
          header: {
            operation: r.pick(['quantize', 'dequantize', 'x', hostileName(r)]),
            spec: spec(r),
            total_bytes: r.pick([0, 8, 1 << 20, 2 ** 40]),
            chunk_bytes: r.pick([0, 1, 4096, 2 ** 31]),
            ...(r.chance(0.5) ? { tensor: tensor(r) } : {}),
          },
        }
      : { chunk: { offset: r.pick([0, 7, 2 ** 40]), data: r.bytes(r.int(64)) } },
  '/quantd.v1.Jobs/Submit': (r) => ({
    path: r.pick(['../../etc/passwd', '/etc/passwd', 'models/none.safetensors', hostileName(r)]),
    op: r.pick(['quantize', 'dequantize', 'x', '']),
    ...(r.chance(0.5) ? { spec: spec(r) } : {}),
    recipe_json: r.pick(['', '{"rules":[{"regex":"^(a+)+$","skip":true}]}', '{', hostileName(r)]),
    rule: r.chance(0.3) ? ['re:(a)\\1:skip', hostileName(r)] : [],
    skip: r.chance(0.2) ? ['*a*a*a*a*a*a*a*b'] : [],
    layout: r.pick(['', 'gguf:type=Q4_0', 'x:y', hostileName(r)]),
  }),
  '/quantd.v1.Jobs/Get': (r) => ({ id: jobId(r) }),
  '/quantd.v1.Jobs/List': () => ({}),
  '/quantd.v1.Jobs/Cancel': (r) => ({ id: jobId(r) }),
  '/quantd.v1.Jobs/Result': (r) => ({ id: jobId(r), file: hostileName(r) }),
  '/quantd.v1.Jobs/Report': (r) => ({ id: jobId(r) }),
  '/inference.GRPCInferenceService/ServerLive': () => ({}),
  '/inference.GRPCInferenceService/ServerReady': () => ({}),
  '/inference.GRPCInferenceService/ModelReady': (r) => ({ name: hostileName(r), version: hostileName(r) }),
  '/inference.GRPCInferenceService/ServerMetadata': () => ({}),
  '/inference.GRPCInferenceService/ModelMetadata': (r) => ({ name: hostileName(r), version: hostileWord(r) }),
  '/inference.GRPCInferenceService/ModelInfer': inferRequest,
};

/** Every method the server offers, with the encoder of its request type. */
export function loadMethods(): Method[] {
  const definition = protoLoader.loadSync(
    ['quantd/v1/quantd.proto', 'quantd/v1/jobs.proto', 'inference/grpc_service.proto'],
    LOADER_OPTIONS,
  );
  const methods: Method[] = [];
  for (const service of ['quantd.v1.Quantizer', 'quantd.v1.Jobs', 'inference.GRPCInferenceService']) {
    for (const m of Object.values(definition[service] as protoLoader.ServiceDefinition)) {
      const hostile = HOSTILE[m.path];
      if (!hostile) throw new Error(`no hostile messages for ${m.path}: add them here`);
      methods.push({
        path: m.path,
        requestStream: m.requestStream,
        responseStream: m.responseStream,
        encode: (message) => m.requestSerialize(message) as Buffer,
        hostile,
      });
    }
  }
  return methods;
}

/** The bytes of one request message for `method`: random, damaged, or hostile but valid. */
export function grpcMessage(r: Prng, method: Method): Buffer {
  const kind = r.int(3);
  if (kind === 0) return r.bytes(r.int(r.chance(0.9) ? 300 : 70_000));
  let encoded: Buffer;
  try {
    encoded = method.encode(method.hostile(r));
  } catch {
    // a value protobufjs itself refuses to encode: random bytes instead
    return r.bytes(r.int(300));
  }
  if (kind === 1 && encoded.byteLength > 0) {
    const out = Buffer.from(encoded);
    for (let i = 0; i < 1 + r.int(4); i++) out[r.int(out.byteLength)] = r.int(256);
    return out;
  }
  return encoded;
}

const identity = (b: Buffer): Buffer => b;

/** A client that sends and receives raw bytes on any method path. */
export function rawClient(target: string): grpc.Client {
  const Client = grpc.makeGenericClientConstructor({}, 'Raw');
  return new Client(target, grpc.credentials.createInsecure(), {
    'grpc.max_receive_message_length': 64 << 20,
  });
}

function answerOf(err: grpc.ServiceError | null): GrpcAnswer {
  if (!err) return { code: 0, quantdCode: undefined, details: '' };
  const value = err.metadata?.get('quantd-code')[0];
  return {
    code: err.code,
    quantdCode: value === undefined ? undefined : String(value),
    details: err.details,
  };
}

/** Calls `method` with `messages` (one unless it takes a stream); resolves with the status. */
export function callRaw(
  client: grpc.Client,
  method: Method,
  messages: readonly Buffer[],
  deadlineMs: number,
): Promise<GrpcAnswer> {
  const deadline = Date.now() + deadlineMs;
  return new Promise((resolve) => {
    if (!method.requestStream && !method.responseStream) {
      client.makeUnaryRequest(method.path, identity, identity, messages[0]!, { deadline }, (err) =>
        resolve(answerOf(err)),
      );
      return;
    }
    const call = method.requestStream
      ? client.makeBidiStreamRequest(method.path, identity, identity, new grpc.Metadata(), { deadline })
      : client.makeServerStreamRequest(method.path, identity, identity, messages[0]!, new grpc.Metadata(), {
          deadline,
        });
    call.on('data', () => {});
    call.on('error', (err: grpc.ServiceError) => resolve(answerOf(err)));
    call.on('status', (status: grpc.StatusObject) => {
      if (status.code === grpc.status.OK) resolve(answerOf(null));
    });
    if (method.requestStream) {
      const writable = call as grpc.ClientDuplexStream<Buffer, Buffer>;
      for (const m of messages) writable.write(m);
      writable.end();
    }
  });
}
