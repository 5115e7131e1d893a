/**
 * The gRPC server (quantd.v1.Quantizer, proto/quantd/v1/quantd.proto) beside HTTP, on the same
 * compute, admission and error catalogue — and quantd.v1.Jobs (jobs.proto, jobs.ts) on HTTP's job
 * manager. Unary RPCs carry a whole input and result per message;
 * QuantizeStream carries inputs and results of any size in chunks. grpc.health.v1 and server
 * reflection are served too, so grpcurl works without the proto file: reflection serves protoc's
 * descriptors of proto/ under their own names (descriptors.ts), which strict clients accept.
 *
 * Every call passes the same interceptors: metrics (observe.ts), admission on its metadata and
 * its messages' sizes (early-admission.ts), the live streams' cap for the open Watch and
 * reflection streams (live-streams.ts), and the idle timeout that cuts a call whose client
 * stalls (idle.ts).
 */
import type { EventEmitter } from 'node:events';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { ReflectionService } from '@grpc/reflection';
import { HealthImplementation } from 'grpc-health-check';
import type { Config } from '../config.js';
import {
  catalogue,
  isQuantdError,
  isServerFault,
  toQuantdError,
  type ErrorCode,
  type QuantdError,
} from '../errors/index.js';
import type { JobManager } from '../jobs/manager.js';
import type { ComputeHandle } from '../pool/index.js';
import { Admission, LiveStreams, PlanCache, errorsForClients } from '../service/index.js';
import { errorForGrpc, type GrpcError } from './errors.js';
import { GuardedServer } from './guard.js';
import { earlyAdmission } from './early-admission.js';
import { idleInterceptor } from './idle.js';
import { liveStreamInterceptor } from './live-streams.js';
import { RESULT_FACTOR, STREAMED_FACTOR } from './budget.js';
import { widenWindows } from './flow-control.js';
import { observingInterceptor, type CallObserver } from './observe.js';
import { makeMetadataAuthenticator } from './auth.js';
import { EVERYONE } from '../service/auth.js';
import { handleStream } from './stream.js';
import { JOBS_PROTO_FILE, JOBS_SERVICE_NAME, addJobsService } from './jobs.js';
import { CALIBRATION_PROTO_FILE, CALIBRATIONS_SERVICE_NAME, addCalibrationsService } from './calibrations.js';
import type { CalibrationStore } from '../service/calibration/store.js';
import { OIP_PROTO_FILE, OIP_SERVICE_NAME, addOipService } from './oip.js';
import { loadProtoset, reflectionDefinition } from './descriptors.js';
import { runUnary, type UnaryRequest, type UnaryResponse } from './unary.js';
import { packageRoot } from '../package-info.js';
import { requestDeadline } from '../service/envelope.js';

export const PROTO_ROOT = join(packageRoot(), 'proto');
export const PROTO_FILE = 'quantd/v1/quantd.proto';
export const SERVICE_NAME = 'quantd.v1.Quantizer';

/** grpc-js caps messages at 2^31 - 1 bytes. */
const MAX_MESSAGE = 2 ** 31 - 1;

export const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: true,
  longs: Number,
  enums: String,
  defaults: false,
  oneofs: true,
  includeDirs: [PROTO_ROOT],
};

export interface GrpcServerOptions {
  readonly config: Config;
  readonly handle: ComputeHandle;
  readonly admission: Admission;
  /** Result downloads' pool, shared with HTTP (default: QUANTD_DOWNLOAD_LIMIT of its own). */
  readonly downloads?: Admission;
  /** Live streams' cap, shared with HTTP (default: QUANTD_LIVE_STREAMS of its own). */
  readonly liveStreams?: LiveStreams;
  readonly isReady: () => boolean;
  /** The job manager HTTP's /v1/jobs uses: quantd.v1.Jobs is served on it when given. */
  readonly jobs?: JobManager;
  /** The calibration sessions of /v1/calibrations: quantd.v1.Calibrations is served when given. */
  readonly calibrations?: CalibrationStore;
  readonly log: { info(obj: object, msg: string): void; error(obj: object, msg: string): void };
  /** Told every call's method, status and duration (the HTTP app's /metrics). */
  readonly observe?: CallObserver;
}

export interface RunningGrpc {
  readonly server: grpc.Server;
  readonly port: number;
  /** Stops accepting calls, lets running ones finish (up to `timeoutMs`), then stops. */
  shutdown(timeoutMs: number): Promise<void>;
}

const UNARY = {
  Quantize: 'quantize',
  Dequantize: 'dequantize',
  FakeQuantize: 'fake-quantize',
  ChooseQParams: 'qparams',
} as const;

export async function startGrpc(options: GrpcServerOptions): Promise<RunningGrpc> {
  const { config, handle, admission } = options;
  // quantd.v1 (Quantizer, Jobs, Calibrations) and the Open Inference Protocol's
  // inference.GRPCInferenceService, for the wire codec
  const definition = protoLoader.loadSync(
    [PROTO_FILE, JOBS_PROTO_FILE, CALIBRATION_PROTO_FILE, OIP_PROTO_FILE],
    LOADER_OPTIONS,
  );
  const proto = grpc.loadPackageDefinition(definition) as unknown as {
    quantd: {
      v1: {
        Quantizer: grpc.ServiceClientConstructor;
        Jobs: grpc.ServiceClientConstructor;
        Calibrations: grpc.ServiceClientConstructor;
      };
    };
  };
  const limit = Math.min(config.bodyLimit, MAX_MESSAGE);
  // every error this server sends names the server's files relative to its data directory
  const forClients = errorsForClients(config.dataDir);
  const report = (err: unknown, rpc: string): GrpcError => reportError(err, options, rpc, forClients);
  const authenticate = makeMetadataAuthenticator(config.apiKeys, config.adminKeys);
  // every method of every service under one catch (guard.ts): no request can end the process;
  // a call the server cannot take is refused on its metadata (early-admission.ts)
  const early = earlyAdmission(
    {
      gate: { admission, isReady: options.isReady },
      downloads: options.downloads ?? new Admission(config.downloadLimit),
      messageLimit: limit,
    },
    authenticate,
    report,
  );
  const liveStreams = options.liveStreams ?? new LiveStreams(config.liveStreams, config.liveStreamsPerClient);
  const server = new GuardedServer(
    {
      'grpc.max_receive_message_length': limit,
      'grpc.max_send_message_length': limit,
      // the first wraps grpc-js's own call, the last is the handlers': the idle timeout sees
      // every read and write the handler asks for
      interceptors: [
        ...(options.observe ? [observingInterceptor(options.observe)] : []),
        early.interceptor,
        liveStreamInterceptor(liveStreams, config.streamIdleMs, report),
        idleInterceptor(config.streamIdleMs, report),
      ],
    },
    (err, rpc) => report(err, rpc),
  );
  // admitted calls' messages arrive in one flight, not 64 KiB per round trip (flow-control.ts)
  widenWindows(server);

  /**
   * Admission, auth and readiness for one call (draining: SHUTTING_DOWN, as HTTP answers 503):
   * the slot the interceptor reserved on its metadata; returns the release of that slot.
   */
  const admit = early.admit;

  const implementation: grpc.UntypedServiceImplementation = {};
  const plans = new PlanCache();
  for (const [rpc, op] of Object.entries(UNARY)) {
    implementation[rpc] = (
      call: grpc.ServerUnaryCall<UnaryRequest, UnaryResponse>,
      callback: grpc.sendUnaryData<UnaryResponse>,
    ) => {
      const { signal, stopTimer } = callSignal(call, config.requestTimeoutMs);
      let release: (() => void) | undefined;
      return Promise.resolve()
        .then(() => {
          const slot = admit(call.metadata);
          release = slot;
          // the result's memory, charged once planned and before it is computed
          const charge = (bytes: number): void =>
            slot.charge(bytes * RESULT_FACTOR, `a result of ${bytes} bytes`);
          return runUnary(op, call.request, handle.compute, signal, plans, limit, charge);
        })
        .then(
          (response) => callback(null, response),
          (err: unknown) => callback(report(err, rpc)),
        )
        .finally(() => {
          stopTimer();
          release?.();
        });
    };
  }
  implementation['QuantizeStream'] = (call: grpc.ServerDuplexStream<unknown, unknown>) => {
    const onEnd = callEnd(call);
    const { signal, stopTimer } = callSignal(call, config.requestTimeoutMs);
    onEnd(stopTimer);
    const fail = (err: unknown): void => {
      const error = report(err, 'QuantizeStream');
      // a call that has ended (cancelled, past its deadline) has had its status
      if (!call.cancelled) call.emit('error', error);
    };
    let slot: ReturnType<typeof admit>;
    try {
      // the admission slot is held until the call has ended: the result's chunks still queued
      // in grpc-js hold its memory
      slot = admit(call.metadata);
      onEnd(slot);
    } catch (err) {
      stopTimer();
      return fail(err);
    }
    return handleStream(call, {
      compute: handle.compute,
      limit: config.streamLimit,
      maxMessage: limit,
      signal,
      onResult: stopTimer,
      onEnd,
      // the input buffer once its size is announced, the result once planned
      charge: (bytes, what) => slot.charge(bytes * STREAMED_FACTOR, what),
    }).catch(fail);
  };
  server.addService(proto.quantd.v1.Quantizer.service, implementation);
  addOipService(server, definition, {
    compute: handle.compute,
    admit,
    authenticate,
    isReady: options.isReady,
    isWarm: () => handle.pool === null || handle.pool.started,
    requestTimeoutMs: config.requestTimeoutMs,
    inlineLimit: config.inlineLimit,
    report: (err, rpc) => report(err, rpc),
  });

  // Without a job manager Jobs is not served (UNIMPLEMENTED), as HTTP has no /v1/jobs routes then.
  if (options.jobs) {
    addJobsService(server, proto.quantd.v1.Jobs.service, {
      jobs: options.jobs,
      admit,
      identify: (metadata) => authenticate?.(metadata) ?? EVERYONE,
      report: (err, rpc) => report(err, rpc),
    });
  }

  if (options.calibrations) {
    addCalibrationsService(server, proto.quantd.v1.Calibrations.service, {
      calibrations: options.calibrations,
      compute: handle.compute,
      requestTimeoutMs: config.requestTimeoutMs,
      importLimit: config.calibrationImportLimit,
      admit,
      identify: (metadata) => authenticate?.(metadata) ?? EVERYONE,
      report: (err, rpc) => report(err, rpc),
    });
  }

  // health has an entry, and reflection lists, every service served (not Jobs or Calibrations
  // where they are not)
  const served = [
    SERVICE_NAME,
    ...(options.jobs ? [JOBS_SERVICE_NAME] : []),
    ...(options.calibrations ? [CALIBRATIONS_SERVICE_NAME] : []),
    OIP_SERVICE_NAME,
  ];
  const health = new HealthImplementation({
    '': 'SERVING',
    ...Object.fromEntries(served.map((name) => [name, 'SERVING' as const])),
  });
  health.addToServer(server);
  new ReflectionService(reflectionDefinition(loadProtoset(PROTO_ROOT), served), {
    services: served,
  }).addToServer(server);

  const credentials =
    config.tlsCert && config.tlsKey
      ? grpc.ServerCredentials.createSsl(null, [
          { cert_chain: readFileSync(config.tlsCert), private_key: readFileSync(config.tlsKey) },
        ])
      : grpc.ServerCredentials.createInsecure();
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(`${config.host}:${config.grpcPort}`, credentials, (err, bound) =>
      err ? reject(err) : resolve(bound),
    ),
  );

  return {
    server,
    port,
    shutdown: (timeoutMs) =>
      new Promise<void>((resolve) => {
        for (const name of ['', ...served]) health.setStatus(name, 'NOT_SERVING');
        const timer = setTimeout(() => {
          server.forceShutdown();
          resolve();
        }, timeoutMs);
        timer.unref();
        server.tryShutdown(() => {
          clearTimeout(timer);
          resolve();
        });
      }),
  };
}

/**
 * One call's AbortSignal: aborted when the call ends early — the client cancels, or its deadline
 * passes (grpc-js then answers DEADLINE_EXCEEDED itself and reports the call cancelled) — and
 * after QUANTD_REQUEST_TIMEOUT_MS (REQUEST_TIMEOUT → DEADLINE_EXCEEDED), as HTTP requests are.
 * stopTimer() ends the timeout (the call's work is done).
 */
function callSignal(call: EventEmitter, timeoutMs: number): { signal: AbortSignal; stopTimer: () => void } {
  const deadline = requestDeadline(timeoutMs);
  call.once('cancelled', () => deadline.gone('the call ended (cancelled, or past its deadline)'));
  return { signal: deadline.signal, stopTimer: deadline.stop };
}

/**
 * Registers functions to run once a streaming call has ended: its status sent or its stream
 * closed. grpc-js serializes each message when it takes it from the call's write queue, so
 * buffers that queued messages view are free only from then on.
 */
function callEnd(call: grpc.ServerDuplexStream<unknown, unknown>): (fn: () => void) => void {
  const pending: (() => void)[] = [];
  let ended = false;
  const end = (): void => {
    if (ended) return;
    ended = true;
    for (const fn of pending.splice(0)) fn();
  };
  call.once('cancelled', end);
  call.once('close', end);
  return (fn) => (ended ? fn() : void pending.push(fn));
}

/** The gRPC error of `err`, logged; never throws (the answer matters more than the log line). */
function reportError(
  err: unknown,
  options: GrpcServerOptions,
  rpc: string,
  forClients: (error: QuantdError) => QuantdError,
): GrpcError {
  let shown: unknown = err;
  try {
    shown = forClients(toQuantdError(err));
  } catch {
    // an error that cannot even be read: errorForGrpc answers INTERNAL for it
  }
  const out = errorForGrpc(shown);
  const known = Object.hasOwn(catalogue, out.quantdCode);
  const log = !known || isServerFault(out.quantdCode as ErrorCode) ? options.log.error : options.log.info;
  try {
    // an unexpected failure is logged with its stack
    const cause = isQuantdError(err) ? {} : { err };
    log.call(options.log, { rpc, code: out.quantdCode, ...cause }, out.details);
  } catch {
    // a failing logger must not keep the client from its answer
  }
  return out;
}
