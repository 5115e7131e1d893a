/**
 * Every gRPC call's outcome for /metrics: a server interceptor (grpc-js ServerOptions
 * `interceptors`) sees the status each call ends with, whichever service answered it.
 */
import * as grpc from '@grpc/grpc-js';

/** Told once per call: its method path without the leading slash, its status name, its duration. */
export type CallObserver = (method: string, code: string, seconds: number) => void;

export function observingInterceptor(observe: CallObserver): grpc.ServerInterceptor {
  return (descriptor, call) => {
    const started = process.hrtime.bigint();
    return new grpc.ServerInterceptingCall(call, {
      sendStatus(status, next) {
        const seconds = Number(process.hrtime.bigint() - started) / 1e9;
        observe(descriptor.path.replace(/^\//, ''), grpc.status[status.code] ?? String(status.code), seconds);
        next(status);
      },
    });
  };
}
