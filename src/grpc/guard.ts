/**
 * One catch for every gRPC call, put around each method where services are registered
 * (GuardedServer.addService), so that no request can end the process, whichever service, library
 * or error path it reaches:
 * - whatever a handler throws, whatever the promise it returns rejects with, and whatever a
 *   listener of the call's events throws answers the call with its catalogued error (INTERNAL for
 *   anything that is not a QuantdError), logged by `report`;
 * - sending that answer cannot throw: a unary callback that throws answers INTERNAL instead, and
 *   an answer after the first is dropped;
 * - a request message that does not decode answers USAGE (INVALID_ARGUMENT, with quantd-code), as
 *   a malformed HTTP body answers 400; grpc-js itself would answer a bare INTERNAL.
 */
import type { EventEmitter } from 'node:events';
import * as grpc from '@grpc/grpc-js';
import { QuantdError } from '../errors/index.js';
import { errorForGrpc, type GrpcError } from './errors.js';

/** The gRPC error for a failure of call `rpc`, logged. */
export type Report = (err: unknown, rpc: string) => GrpcError;

/** A grpc.Server whose every service (quantd's, health's, reflection's) is guarded. */
export class GuardedServer extends grpc.Server {
  readonly #report: Report;

  constructor(options: grpc.ServerOptions, report: Report) {
    super(options);
    this.#report = report;
  }

  override addService(
    service: grpc.ServiceDefinition,
    implementation: grpc.UntypedServiceImplementation,
  ): void {
    const guarded = guardService(service, implementation, this.#report);
    super.addService(guarded.service, guarded.implementation);
  }
}

/** What the request deserializer gives for bytes that are not a valid message. */
class Undecodable {
  constructor(readonly reason: string) {}
}

type Method = grpc.MethodDefinition<unknown, unknown>;
type Handler = (call: EventEmitter, callback?: grpc.sendUnaryData<unknown>) => unknown;
/** What every kind of server call has in common, as the guard uses it. */
type Call = EventEmitter & { cancelled: boolean; request?: unknown };

export function guardService(
  service: grpc.ServiceDefinition,
  implementation: grpc.UntypedServiceImplementation,
  report: Report,
): { service: grpc.ServiceDefinition; implementation: grpc.UntypedServiceImplementation } {
  const guardedService: Record<string, Method> = {};
  const guardedImplementation: grpc.UntypedServiceImplementation = {};
  for (const [name, method] of Object.entries(service) as [string, Method][]) {
    guardedService[name] = { ...method, requestDeserialize: markUndecodable(method.requestDeserialize) };
    // looked up as grpc-js looks it up; a method without a handler keeps grpc-js's UNIMPLEMENTED
    const handler =
      implementation[name] ??
      (method.originalName === undefined ? undefined : implementation[method.originalName]);
    if (handler === undefined) continue;
    const bound = (handler as Handler).bind(implementation);
    guardedImplementation[name] = guardHandler(bound, method, name, report) as grpc.UntypedHandleCall;
  }
  return { service: guardedService, implementation: guardedImplementation };
}

function markUndecodable(deserialize: grpc.deserialize<unknown>): grpc.deserialize<unknown> {
  return (bytes) => {
    try {
      return deserialize(bytes);
    } catch (err) {
      return new Undecodable(err instanceof Error ? err.message : String(err));
    }
  };
}

function undecodableError(message: Undecodable, method: Method): QuantdError {
  return new QuantdError('USAGE', {
    detail: `a request message of ${method.path} is not a valid protobuf message (${message.reason})`,
  });
}

function guardHandler(handler: Handler, method: Method, rpc: string, report: Report): Handler {
  const answerFor = (err: unknown): GrpcError => {
    try {
      return report(err, rpc);
    } catch {
      return errorForGrpc(err); // the log failed; the answer must not
    }
  };
  return (rawCall, callback) => {
    const call = rawCall as Call;
    // unary and client-streaming calls answer through the callback; streams of responses answer
    // an error by emitting it (grpc-js then ends the call with its status)
    const emit = call.emit.bind(call);
    const answer = callback ? onceCallback(callback, answerFor) : undefined;
    const fail = (err: unknown): void => {
      const error = answerFor(err);
      if (answer) return answer(error);
      if (call.cancelled) return; // the call has ended and had its status
      try {
        emit('error', error);
      } catch {
        // grpc-js's own 'error' listener threw: the call ends when the client goes
      }
    };
    catchListenerThrows(call, emit, fail);
    if (method.requestStream) {
      refuseUndecodableMessages(call, method, fail);
    } else if (call.request instanceof Undecodable) {
      return fail(undecodableError(call.request, method));
    }
    try {
      const result = handler(call, answer);
      if (isThenable(result)) result.then(undefined, fail);
    } catch (err) {
      fail(err);
    }
  };
}

/** The callback, answering once; if sending throws, INTERNAL is sent instead. */
function onceCallback(
  callback: grpc.sendUnaryData<unknown>,
  answerFor: (err: unknown) => GrpcError,
): grpc.sendUnaryData<unknown> {
  let answered = false;
  return (err, value, trailer, flags) => {
    if (answered) return;
    answered = true;
    try {
      callback(err, value, trailer, flags);
    } catch (sendFailure) {
      try {
        callback(answerFor(sendFailure));
      } catch {
        // nothing can be sent: the call ends when the client goes
      }
    }
  };
}

/** Listeners of the call's events (grpc-js's, the handler's, Node's stream machinery) that throw fail the call. */
function catchListenerThrows(
  call: Call,
  emit: (event: string | symbol, ...args: unknown[]) => boolean,
  fail: (err: unknown) => void,
): void {
  call.emit = (event: string | symbol, ...args: unknown[]): boolean => {
    try {
      return emit(event, ...args);
    } catch (err) {
      fail(err);
      return true;
    }
  };
}

/**
 * grpc-js pushes each request message of a request stream into the call: one that did not decode
 * fails the call instead. Nothing more is pushed; grpc-js cancels the call once its status is sent.
 */
function refuseUndecodableMessages(call: Call, method: Method, fail: (err: unknown) => void): void {
  const stream = call as Call & { push(chunk: unknown, encoding?: BufferEncoding): boolean };
  const push = stream.push.bind(stream);
  stream.push = (chunk, encoding) => {
    if (!(chunk instanceof Undecodable)) return push(chunk, encoding);
    fail(undecodableError(chunk, method));
    return false;
  };
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as PromiseLike<unknown> | null)?.then === 'function';
}
