/**
 * Admission before the message: grpc-js hands a unary handler its request already received and
 * decoded, so a call refused in the handler has cost its whole message in memory and its decoding
 * on the event loop (an outside test: ~37 MiB per refused 16 MiB call). This server interceptor
 * decides on the call's metadata alone — the credentials, then whether the server drains or is
 * full — and answers at once with the catalogued status, before any message is read. The handler
 * still takes its slot through the same admission (a call let through when one slot was left may
 * meet a full server there, and is refused then, as before).
 */
import * as grpc from '@grpc/grpc-js';

import { QuantdError } from '../errors/index.js';
import type { RequestGate } from '../service/envelope.js';
import type { GrpcError } from './errors.js';

/** Methods that take an admission slot: quantd.v1's, and inference (not the open probes). */
const ADMITTED = /^\/(quantd\.v1\.[A-Za-z]+\/|inference\.GRPCInferenceService\/ModelInfer$)/;

export function earlyAdmission(
  gate: RequestGate,
  authenticate: ((metadata: grpc.Metadata) => void) | null,
  report: (err: unknown, rpc: string) => GrpcError,
): grpc.ServerInterceptor {
  return (descriptor, call) => {
    if (!ADMITTED.test(descriptor.path)) return new grpc.ServerInterceptingCall(call);
    return new grpc.ServerInterceptingCall(call, {
      start(next) {
        next({
          onReceiveMetadata(metadata, pass) {
            try {
              authenticate?.(metadata);
              if (!gate.isReady()) throw new QuantdError('SHUTTING_DOWN', {});
              const { admission } = gate;
              if (admission.inFlight >= admission.capacity) {
                throw new QuantdError('OVERLOADED', {
                  queued: admission.inFlight,
                  limit: admission.capacity,
                });
              }
            } catch (err) {
              const e = report(err, descriptor.path.replace(/^\/[^/]*\//, ''));
              call.sendStatus({ code: e.code, details: e.details, metadata: e.metadata });
              return;
            }
            pass(metadata);
          },
        });
      },
    });
  };
}
