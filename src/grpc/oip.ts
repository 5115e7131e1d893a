/**
 * inference.GRPCInferenceService (proto/inference/grpc_service.proto): the Open Inference Protocol
 * over gRPC, beside quantd.v1.Quantizer on the same server, compute, admission and error
 * catalogue. Messages are mapped to and from src/oip's InferRequest / InferResult; inputs come in
 * raw_input_contents or typed `contents`. Outputs go in raw_output_contents (as Triton does),
 * except that a request whose inputs all came as typed contents gets its outputs as typed contents
 * too, where every output has a typed field (FP16 and BF16 have none).
 *
 * ServerLive, ServerReady and ModelReady are open; ServerMetadata and ModelMetadata need the
 * bearer token when QUANTD_API_KEYS is set; ModelInfer is admitted like the Quantizer RPCs.
 */
import { packageVersion } from '../package-info.js';
import * as grpc from '@grpc/grpc-js';
import type { PackageDefinition } from '@grpc/proto-loader';
import { QuantdError } from '../errors/index.js';
import {
  CONTENTS_FIELD,
  elementsOf,
  findModel,
  inferSignal,
  modelMetadata,
  prepareInfer,
  runInfer,
  serverMetadata,
  type InferRequest,
  type InferResult,
  type ParamValue,
  type Params,
  type TensorData,
} from '../oip/index.js';
import { PlanCache, type Compute } from '../service/index.js';
import type { GrpcError } from './errors.js';

export const OIP_PROTO_FILE = 'inference/grpc_service.proto';
export const OIP_SERVICE_NAME = 'inference.GRPCInferenceService';

export interface OipServiceDeps {
  readonly compute: Compute;
  /** Auth, readiness and admission for one inference; returns the release of its slot. */
  readonly admit: (metadata: grpc.Metadata) => () => void;
  /** The bearer-token check of the metadata RPCs (null: authentication off). */
  readonly authenticate: ((metadata: grpc.Metadata) => void) | null;
  /** False while draining for shutdown. */
  readonly isReady: () => boolean;
  /** Whether the compute can take work now (the pool is up). */
  readonly isWarm: () => boolean;
  readonly requestTimeoutMs: number;
  /** Tensors under this many elements are computed in the call's thread (QUANTD_INLINE_LIMIT). */
  readonly inlineLimit: number;
  /** The gRPC error for a failure (logged). */
  readonly report: (err: unknown, rpc: string) => GrpcError;
}

// --- messages, as @grpc/proto-loader gives them (keepCase, longs as numbers, oneofs named) -------

interface ParameterMessage {
  parameter_choice?: string;
  bool_param?: boolean;
  int64_param?: number | string;
  string_param?: string;
  double_param?: number;
  uint64_param?: number | string;
}

type ParameterMap = Record<string, ParameterMessage>;
type Contents = Record<string, unknown[] | undefined>;

interface InferInputMessage {
  name?: string;
  datatype?: string;
  shape?: (number | string)[];
  parameters?: ParameterMap;
  contents?: Contents;
}

interface ModelInferRequestMessage {
  model_name?: string;
  model_version?: string;
  id?: string;
  parameters?: ParameterMap;
  inputs?: InferInputMessage[];
  outputs?: { name?: string; parameters?: ParameterMap }[];
  raw_input_contents?: Uint8Array[];
}

interface ModelInferResponseMessage {
  model_name: string;
  model_version: string;
  id: string;
  parameters: ParameterMap;
  outputs: {
    name: string;
    datatype: string;
    shape: number[];
    parameters: ParameterMap;
    contents?: Record<string, unknown[]>;
  }[];
  raw_output_contents: Buffer[];
}

function invalid(detail: string): QuantdError {
  return new QuantdError('INFER_REQUEST_INVALID', { detail });
}

function paramsOf(map: ParameterMap | undefined, where: string): Params {
  const out: Record<string, ParamValue> = {};
  for (const [key, p] of Object.entries(map ?? {})) {
    const choice = p.parameter_choice;
    let value: ParamValue;
    switch (choice) {
      case 'bool_param':
        value = Boolean(p.bool_param);
        break;
      case 'string_param':
        value = p.string_param ?? '';
        break;
      case 'double_param':
        value = Number(p.double_param ?? 0);
        break;
      case 'int64_param':
      case 'uint64_param': {
        const v = Number(p[choice] ?? 0);
        if (!Number.isSafeInteger(v))
          throw invalid(`${where} parameter ${key}: ${String(p[choice])} is too large`);
        value = v;
        break;
      }
      default:
        throw invalid(`${where} parameter ${key} has no value`);
    }
    Object.defineProperty(out, key, { value, enumerable: true, writable: true, configurable: true });
  }
  return out;
}

function parameterMessage(value: ParamValue): ParameterMessage {
  if (typeof value === 'boolean') return { bool_param: value };
  if (typeof value === 'string') return { string_param: value };
  return Number.isSafeInteger(value) ? { int64_param: value } : { double_param: value };
}

function parameterMap(params: Params | undefined): ParameterMap {
  const out: ParameterMap = {};
  for (const [key, value] of Object.entries(params ?? {})) out[key] = parameterMessage(value);
  return out;
}

const hasContents = (contents: Contents | undefined): boolean =>
  Object.values(contents ?? {}).some((v) => Array.isArray(v) && v.length > 0);

/** The request message as an InferRequest; `typed` tells whether its inputs came as contents. */
export function inferRequestOf(message: ModelInferRequestMessage): { request: InferRequest; typed: boolean } {
  const inputs = message.inputs ?? [];
  const raw = message.raw_input_contents ?? [];
  const typed = raw.length === 0;
  if (!typed && raw.length !== inputs.length) {
    throw invalid(
      `raw_input_contents has ${raw.length} entries for ${inputs.length} inputs; it needs one per input, in input order`,
    );
  }
  return {
    typed,
    request: {
      model: message.model_name ?? '',
      version: message.model_version || undefined,
      id: message.id || undefined,
      parameters: paramsOf(message.parameters, 'the request'),
      inputs: inputs.map((input, i) => {
        const name = input.name ?? '';
        if (!typed && hasContents(input.contents)) {
          throw invalid(
            `input ${name} has contents, but raw_input_contents is used; send each input one way`,
          );
        }
        const data: TensorData = typed
          ? { kind: 'contents', contents: input.contents ?? {} }
          : { kind: 'raw', bytes: raw[i]! };
        return {
          name,
          datatype: input.datatype ?? '',
          shape: (input.shape ?? []).map(Number),
          parameters: paramsOf(input.parameters, `input ${name}`),
          data,
        };
      }),
      outputs: (message.outputs ?? []).map((o) => ({
        name: o.name ?? '',
        parameters: paramsOf(o.parameters, `output ${o.name ?? ''}`),
      })),
    },
  };
}

/** The response message of `result`: raw contents, or typed ones where asked for and possible. */
export function inferResponseOf(result: InferResult, typed: boolean): ModelInferResponseMessage {
  const asTyped = typed && result.outputs.every((o) => CONTENTS_FIELD[o.datatype] !== null);
  return {
    model_name: result.modelName,
    model_version: result.modelVersion,
    id: result.id ?? '',
    parameters: parameterMap(result.parameters),
    outputs: result.outputs.map((o) => ({
      name: o.name,
      datatype: o.datatype,
      shape: [...o.shape],
      parameters: parameterMap(o.parameters),
      ...(asTyped && { contents: { [CONTENTS_FIELD[o.datatype]!]: elementsOf(o.datatype, o.data) } }),
    })),
    // copies: the outputs' buffers go back to the compute once the message is built
    raw_output_contents: asTyped ? [] : result.outputs.map((o) => Buffer.from(o.data)),
  };
}

let version: string | undefined;
/** quantd's version (package.json), read once. */
async function serverVersion(): Promise<string> {
  version ??= packageVersion();
  return version;
}

type Handler<Req, Res> = (call: grpc.ServerUnaryCall<Req, Res>) => Res | Promise<Res>;

/** A unary handler from a function: its value answers, anything it throws is the gRPC error. */
function unary<Req, Res>(
  rpc: string,
  deps: OipServiceDeps,
  handler: Handler<Req, Res>,
): grpc.handleUnaryCall<Req, Res> {
  return (call, callback) => {
    Promise.resolve()
      .then(() => handler(call))
      .then(
        (response) => callback(null, response),
        (err: unknown) => callback(deps.report(err, rpc)),
      );
  };
}

interface ModelRequestMessage {
  name?: string;
  version?: string;
}

async function modelInfer(
  deps: OipServiceDeps,
  call: grpc.ServerUnaryCall<ModelInferRequestMessage, ModelInferResponseMessage>,
  plans: PlanCache,
): Promise<ModelInferResponseMessage> {
  const release = deps.admit(call.metadata);
  try {
    const { request, typed } = inferRequestOf(call.request);
    const prepared = prepareInfer(request);
    const timing = inferSignal(prepared, deps.requestTimeoutMs, deps.inlineLimit);
    call.on('cancelled', () =>
      timing.cancel(new QuantdError('CANCELLED', { detail: ': the client cancelled the call' })),
    );
    let result: InferResult;
    try {
      result = await runInfer(prepared, deps.compute, timing.signal, plans);
    } finally {
      timing.dispose();
    }
    try {
      timing.check();
      return inferResponseOf(result, typed);
    } finally {
      result.release();
    }
  } finally {
    release();
  }
}

/** Adds the service, defined in `definition` (loaded with OIP_PROTO_FILE), to `server`. */
export function addOipService(
  server: grpc.Server,
  definition: PackageDefinition,
  deps: OipServiceDeps,
): void {
  const service = definition[OIP_SERVICE_NAME] as grpc.ServiceDefinition | undefined;
  if (!service)
    throw new QuantdError('INTERNAL', { detail: `${OIP_PROTO_FILE} does not define ${OIP_SERVICE_NAME}` });
  const ready = (): boolean => deps.isReady() && deps.isWarm();
  const plans = new PlanCache();
  const implementation: grpc.UntypedServiceImplementation = {
    ServerLive: unary('ServerLive', deps, () => ({ live: true })),
    ServerReady: unary('ServerReady', deps, () => ({ ready: ready() })),
    ModelReady: unary<ModelRequestMessage, { ready: boolean }>('ModelReady', deps, (call) => {
      findModel(call.request.name ?? '', call.request.version);
      return { ready: ready() };
    }),
    ServerMetadata: unary('ServerMetadata', deps, async (call) => {
      deps.authenticate?.(call.metadata);
      return serverMetadata(await serverVersion());
    }),
    ModelMetadata: unary<ModelRequestMessage, unknown>('ModelMetadata', deps, (call) => {
      deps.authenticate?.(call.metadata);
      return modelMetadata(findModel(call.request.name ?? '', call.request.version));
    }),
    ModelInfer: unary(
      'ModelInfer',
      deps,
      (call: grpc.ServerUnaryCall<ModelInferRequestMessage, ModelInferResponseMessage>) =>
        modelInfer(deps, call, plans),
    ),
  };
  server.addService(service, implementation);
}
