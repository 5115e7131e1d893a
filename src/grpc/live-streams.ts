/**
 * The open streams of the gRPC server — grpc.health.v1.Health/Watch and server reflection — need
 * no token (grpcurl and load balancers use them unauthenticated), and each costs memory for as
 * long as it is open: without a cap, a client could open them by the thousand. They count against
 * the live streams' cap with the job event streams (src/service/live-streams.ts: in all, and per
 * client address), and one that has been silent both ways for QUANTD_STREAM_IDLE_MS is ended with
 * DEADLINE_EXCEEDED / STREAM_IDLE (a Watch client then watches again, as the health protocol has
 * it do whenever its stream ends).
 */
import * as grpc from '@grpc/grpc-js';

import { QuantdError } from '../errors/index.js';
import { clientOf, type LiveStreams } from '../service/live-streams.js';
import type { GrpcError } from './errors.js';

/** The open streaming methods: health Watch, and reflection (v1 and v1alpha). */
const OPEN_STREAMS =
  /^\/grpc\.(health\.v1\.Health\/Watch|reflection\.v1(alpha)?\.ServerReflection\/ServerReflectionInfo)$/;

export function liveStreamInterceptor(
  liveStreams: LiveStreams,
  idleMs: number,
  report: (err: unknown, rpc: string) => GrpcError,
): grpc.ServerInterceptor {
  return (descriptor, call) => {
    if (!OPEN_STREAMS.test(descriptor.path)) return new grpc.ServerInterceptingCall(call);
    const rpc = descriptor.path.replace(/^\/[^/]*\//, '');
    const what = rpc.startsWith('Health/') ? 'health Watch streams' : 'reflection streams';
    let leave: (() => void) | undefined;
    let timer: NodeJS.Timeout | undefined;
    let ended = false;
    const answer = (err: unknown): void => {
      const e = report(err, rpc);
      call.sendStatus({ code: e.code, details: e.details, metadata: e.metadata });
    };
    /** Restarts the silence clock: a message went one way or the other. */
    const heard = (): void => {
      if (ended) return;
      clearTimeout(timer);
      timer = setTimeout(
        () => answer(new QuantdError('STREAM_IDLE', { ms: idleMs, detail: 'silent both ways' })),
        idleMs,
      );
      timer.unref();
    };
    const end = (): void => {
      ended = true;
      clearTimeout(timer);
      leave?.();
    };
    return new grpc.ServerInterceptingCall(call, {
      start(next) {
        next({
          onReceiveMetadata(metadata, pass) {
            try {
              leave = liveStreams.enter(clientOf(null, call.getConnectionInfo().remoteAddress), what);
            } catch (err) {
              answer(err);
              return;
            }
            heard();
            pass(metadata);
          },
          onReceiveMessage(message, pass) {
            heard();
            pass(message);
          },
          // the call has ended (its status sent, or cancelled): its place is free
          onCancel: end,
        });
      },
      sendMessage(message, next) {
        heard();
        next(message);
      },
    });
  };
}
