/**
 * A unary handler of the services beside Quantizer (Jobs, Calibrations): admitted like a
 * Quantizer call (token, readiness, an admission slot held until the handler has answered), the
 * caller identified for ownership, every error turned into the catalogue's gRPC error.
 */
import type * as grpc from '@grpc/grpc-js';
import type { Caller } from '../service/auth.js';
import type { GrpcError } from './errors.js';

export interface AdmissionDeps {
  /** Auth, readiness and admission for one call; returns the release of its slot. */
  readonly admit: (metadata: grpc.Metadata) => () => void;
  /** Who calls (src/service/auth.ts): their own jobs and sessions, or all for an admin key. */
  readonly identify: (metadata: grpc.Metadata) => Caller;
  /** The gRPC error for a failure (logged). */
  readonly report: (err: unknown, rpc: string) => GrpcError;
}

export type Unary<Req> = (
  call: grpc.ServerUnaryCall<Req, unknown>,
  callback: grpc.sendUnaryData<unknown>,
) => Promise<void>;

/** `run` as a unary handler named `rpc` (`call` for a handler that watches it: deadlines). */
export function admittedUnary(deps: AdmissionDeps) {
  return <Req>(
      rpc: string,
      run: (request: Req, caller: Caller, call: grpc.ServerUnaryCall<Req, unknown>) => unknown,
    ): Unary<Req> =>
    (call, callback) => {
      let release: (() => void) | undefined;
      // returned: whatever escapes reaches the server's guard (guard.ts)
      return Promise.resolve()
        .then(() => {
          release = deps.admit(call.metadata);
          return run(call.request, deps.identify(call.metadata), call);
        })
        .then(
          (response) => callback(null, response),
          (err: unknown) => callback(deps.report(err, rpc)),
        )
        .finally(() => release?.());
    };
}
