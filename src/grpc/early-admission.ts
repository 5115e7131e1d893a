/**
 * Admission before the message: grpc-js hands a unary handler its request already received and
 * decoded, so a call refused in the handler has cost its whole message in memory and its decoding
 * on the event loop (an outside test: ~37 MiB per refused 16 MiB call). This server interceptor
 * decides on the call's metadata alone — the credentials, then whether the server drains or is
 * full — and either answers at once with the catalogued status, before any message is read, or
 * takes the call's admission slot there and then.
 *
 * The slot is reserved, not only looked at: when the interceptor merely checked for a free slot
 * and the handler took it once the message had arrived, every call in the gap passed the check,
 * and under load most refusals came from the handler after a whole message had been received
 * (gRPC refusals measured p50 0.3 s, p99 0.7 s at 10× capacity, against HTTP's milliseconds).
 * The handler claims the reserved slot (`admit` below) and gives its place back when its work is
 * done, as it always has; the bytes it charged stay held until the call has ended — its status
 * sent after the last message was written, or the call cancelled — so a result still being
 * written counts against the memory budget, and a cancelled call frees everything at once.
 *
 * Memory: a call also charges its messages against the memory budget, as soon as each message's
 * 5-byte length prefix arrives (call-stream.ts) — before its bytes are received — times the
 * copies the server makes of it (budget.ts); a message that does not fit is refused there, with
 * at most one flow-control window of it received. A stream of messages charges its largest. A
 * compressed message is charged at the size it may inflate to (the message limit): grpc-js
 * inflates it whole before anyone can look.
 *
 * Downloads (Jobs.Result, Jobs.Report, Calibrations.Statistics) send finished files from disk:
 * they take a slot of the download pool (QUANTD_DOWNLOAD_LIMIT) instead of a compute slot.
 */
import * as grpc from '@grpc/grpc-js';

import { ReleaseCollector } from '../kernels/gc.js';
import type { Admission, Slot } from '../service/admission.js';
import { admitRequest, type RequestGate } from '../service/envelope.js';
import { MESSAGE_FACTOR } from './budget.js';
import { http2StreamOf, watchMessageSizes } from './call-stream.js';
import type { GrpcError } from './errors.js';

/** Methods that take an admission slot: quantd.v1's, and inference (not the open probes). */
const ADMITTED = /^\/(quantd\.v1\.[A-Za-z]+\/|inference\.GRPCInferenceService\/ModelInfer$)/;
/** Of those, the ones that send a finished file: the download pool's. */
const DOWNLOADS = /^\/quantd\.v1\.(Jobs\/(Result|Report)|Calibrations\/Statistics)$/;

export interface EarlyAdmission {
  readonly interceptor: grpc.ServerInterceptor;
  /**
   * Auth, readiness and admission for a handler: the slot reserved for its call on the
   * metadata (calling it gives the place back; its bytes are released when the call ends), or
   * (a method the interceptor does not gate) a compute slot taken now, which the handler releases.
   */
  readonly admit: (metadata: grpc.Metadata) => Slot;
}

export interface EarlyAdmissionOptions {
  /** Compute slots and the memory budget; readiness. */
  readonly gate: RequestGate;
  /** The download pool (QUANTD_DOWNLOAD_LIMIT). */
  readonly downloads: Admission;
  /** The largest message (grpc.max_receive_message_length): what a compressed one may inflate to. */
  readonly messageLimit: number;
}

export function earlyAdmission(
  options: EarlyAdmissionOptions,
  authenticate: ((metadata: grpc.Metadata) => void) | null,
  report: (err: unknown, rpc: string) => GrpcError,
): EarlyAdmission {
  const { gate, downloads, messageLimit } = options;
  // grpc-js gives the handler the very Metadata object the interceptors passed on
  const reserved = new WeakMap<grpc.Metadata, Slot>();
  // a call's message and result are garbage once it has ended: freed soon, not whenever V8 next
  // needs memory (kernels/gc.ts)
  const collector = new ReleaseCollector();

  const interceptor: grpc.ServerInterceptor = (descriptor, call) => {
    if (!ADMITTED.test(descriptor.path)) return new grpc.ServerInterceptingCall(call);
    const rpc = descriptor.path.replace(/^\/[^/]*\//, '');
    const download = DOWNLOADS.test(descriptor.path);
    let slot: Slot | undefined;
    let unwatch: (() => void) | undefined;
    const end = (): void => {
      unwatch?.();
      if (slot === undefined) return;
      const held = slot.held();
      slot();
      collector.ended(held);
    };
    /** Answers the call with `err` at once: its handler, if it runs, is told it was cancelled. */
    const refuse = (err: unknown): void => {
      end();
      const e = report(err, rpc);
      call.sendStatus({ code: e.code, details: e.details, metadata: e.metadata });
    };
    /** Charges each request message as its prefix arrives; a stream charges its largest. */
    const chargeMessages = (admitted: Slot): void => {
      const stream = http2StreamOf(call);
      if (stream === undefined) return; // see call-stream.ts: a grpc-js upgrade moved its internals
      let largest = 0;
      let messages = 0;
      unwatch = watchMessageSizes(stream, (length, compressed) => {
        // a unary or server-streaming call has one message: anything after it is grpc-js's to refuse
        if (++messages > 1 && !descriptor.requestStream) return;
        const bytes = compressed ? Math.max(length, messageLimit) : length;
        if (bytes <= largest) return;
        try {
          admitted.charge(
            (bytes - largest) * MESSAGE_FACTOR,
            compressed
              ? `a compressed message of ${length} bytes, which may inflate to the message limit of ${messageLimit}`
              : `a message of ${length} bytes`,
          );
          largest = bytes;
        } catch (err) {
          refuse(err);
        }
      });
    };
    return new grpc.ServerInterceptingCall(call, {
      start(next) {
        next({
          onReceiveMetadata(metadata, pass) {
            try {
              authenticate?.(metadata);
              slot = admitRequest(download ? { admission: downloads, isReady: gate.isReady } : gate);
            } catch (err) {
              refuse(err);
              return;
            }
            reserved.set(metadata, slot);
            if (!download) chargeMessages(slot);
            pass(metadata);
          },
          // the call has ended (grpc-js says so once its status is out, or the call is cancelled)
          onCancel: end,
        });
      },
    });
  };

  const admit = (metadata: grpc.Metadata): Slot => {
    const slot = reserved.get(metadata);
    if (slot !== undefined) {
      reserved.delete(metadata);
      // the handler's release gives the place back; the interceptor releases the bytes when the
      // call ends: a result still being written holds them
      return Object.assign(() => slot.leave(), { charge: slot.charge, held: slot.held, leave: slot.leave });
    }
    authenticate?.(metadata);
    return admitRequest(gate);
  };

  return { interceptor, admit };
}
