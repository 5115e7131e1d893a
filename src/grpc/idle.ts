/**
 * Every gRPC call is cut when it has waited QUANTD_STREAM_IDLE_MS on its client without
 * progress: for the message the handler asked for (a unary call's message that stops half-way,
 * an Observe stream that sends nothing), or for the client to read what was sent (a Jobs.Result
 * download whose HTTP/2 window never opens, a status stuck behind unread data).
 *
 * Why: such calls held their admission slots for as long as the client kept the connection —
 * 66 of them made every compute request UNAVAILABLE for a whole 330 s run — and the request
 * timeout covers the server's work, not a client that stalls. The server's own work (a long
 * computation, a quiet health Watch) waits on nobody and is not cut here.
 *
 * The clock is the HTTP/2 stream's own timeout, armed only while the call waits on its client:
 * Node restarts it on every frame the stream receives, and while a write is pending it fires only
 * if no data of the stream went out since its last check, so a slow client that keeps reading or
 * sending is not cut, one that stopped is. Node's check of a pending write's progress is the
 * connection's, not the stream's: a stalled stream beside one that flows would be spared, so a
 * call whose writes have not got a message through for BACKSTOP idle periods is cut all the same
 * (a client must take each message within that time: results of any size stream in chunks,
 * QuantizeStream). A call cut while waiting for a message is answered
 * DEADLINE_EXCEEDED with quantd-code STREAM_IDLE; one whose client does not read cannot read an
 * answer either, so its stream is reset (RST_STREAM CANCEL) once the status is queued.
 *
 * And a call answered while its client is still sending — refused on its metadata or its size,
 * failed on a bad header, cut — is reset with NO_ERROR once its status is out (RFC 9113 §8.1:
 * the response is complete; the client is to stop sending). grpc-js does not, and goes on
 * reading what the client sends, only to drop it: a refused 64 MiB call was received whole, and
 * under a burst of them that reading, not the admitted calls, took the memory and the event loop.
 */
import { constants as http2 } from 'node:http2';
import type { ServerHttp2Stream } from 'node:http2';
import * as grpc from '@grpc/grpc-js';

import { QuantdError } from '../errors/index.js';
import { http2StreamOf } from './call-stream.js';
import type { GrpcError } from './errors.js';

/** Idle periods without a whole message written, after which a call waiting to write is cut. */
export const BACKSTOP = 4;

/** What a call waits on its client for, if anything. */
class Waits {
  /** The handler asked for a message and none has come. */
  reading = false;
  /** The client said it sends nothing more: no read can be pending. */
  halfClosed = false;
  /** Messages handed to grpc-js and not yet written out. */
  writes = 0;
  /** The status is queued: the stream ends once the client has read what is before it. */
  statusQueued = false;
  ended = false;

  /** Whether the call waits for its client to read (its writes, its status). */
  writing(): boolean {
    return !this.ended && (this.writes > 0 || this.statusQueued);
  }

  /** What the call waits for, or null: it waits on nobody (the server works, or all is sent). */
  what(): string | null {
    if (this.ended) return null;
    if (this.writes > 0) return 'to read the messages sent to it';
    if (this.statusQueued) return 'to read the end of the stream';
    if (this.reading && !this.halfClosed) return 'to send the message the server waits for';
    return null;
  }
}

/** A call whose progress is watched: grpc-js's intercepting call, told of reads and writes. */
class WatchedCall extends grpc.ServerInterceptingCall {
  constructor(
    next: grpc.ServerInterceptingCallInterface,
    responder: grpc.Responder,
    private readonly waits: Waits,
    private readonly changed: () => void,
    private readonly progressed: () => void,
  ) {
    super(next, responder);
  }

  override startRead(): void {
    if (!this.waits.halfClosed) {
      this.waits.reading = true;
      this.changed();
    }
    super.startRead();
  }

  override sendMessage(message: unknown, callback: () => void): void {
    this.waits.writes++;
    this.changed();
    super.sendMessage(message, () => {
      this.waits.writes--;
      this.progressed();
      this.changed();
      callback();
    });
  }

  override sendStatus(status: Parameters<grpc.ServerInterceptingCall['sendStatus']>[0]): void {
    this.waits.statusQueued = true;
    this.changed();
    super.sendStatus(status);
  }
}

export function idleInterceptor(
  idleMs: number,
  report: (err: unknown, rpc: string) => GrpcError,
): grpc.ServerInterceptor {
  return (descriptor, call) => {
    const stream: ServerHttp2Stream | undefined = http2StreamOf(call);
    const waits = new Waits();
    /** The stream's timeout is on: the call waits on its client. */
    let armed = false;
    /** The backstop is on: the call waits for its client to read. */
    let writing = false;
    let backstop: NodeJS.Timeout | undefined;
    /** A message was written, or the call started or stopped waiting to write: the backstop starts over. */
    const progressed = (): void => {
      clearTimeout(backstop);
      backstop = writing ? setTimeout(cut, BACKSTOP * idleMs).unref() : undefined;
    };
    const changed = (): void => {
      if (stream === undefined || stream.destroyed) return;
      const waiting = waits.what() !== null;
      if (waiting !== armed) {
        armed = waiting;
        stream.setTimeout(waiting ? idleMs : 0);
      }
      if (waits.writing() !== writing) {
        writing = !writing;
        progressed();
      }
    };
    const cut = (): void => {
      const what = waits.what();
      if (!armed || what === null || stream === undefined) return;
      const rpc = descriptor.path.replace(/^\/[^/]*\//, '');
      const e = report(
        new QuantdError('STREAM_IDLE', { ms: idleMs, detail: `waiting for the client ${what}` }),
        rpc,
      );
      const unread = waits.writes > 0 || waits.statusQueued;
      // the answer, where one can still reach the client (the handler is told the call ended)
      if (!waits.statusQueued) watched.sendStatus({ code: e.code, details: e.details, metadata: e.metadata });
      if (unread && !stream.destroyed) stream.close(http2.NGHTTP2_CANCEL);
    };
    stream?.on('timeout', cut);
    const watched: WatchedCall = new WatchedCall(
      call,
      {
        start(next) {
          next({
            onReceiveMessage(message, pass) {
              waits.reading = false;
              changed();
              pass(message);
            },
            onReceiveHalfClose(pass) {
              waits.halfClosed = true;
              waits.reading = false;
              changed();
              pass();
            },
            onCancel() {
              waits.ended = true;
              changed();
              clearTimeout(backstop);
              stream?.off('timeout', cut);
              // the call is over (its status out, or cancelled): a client still sending is told to
              // stop (one that has sent all is not reset: it may still be reading the answer)
              if (
                stream !== undefined &&
                !stream.closed &&
                !stream.destroyed &&
                stream.state.remoteClose !== 1
              ) {
                stream.close(http2.NGHTTP2_NO_ERROR);
              }
            },
          });
        },
      },
      waits,
      changed,
      progressed,
    );
    return watched;
  };
}
