/**
 * The HTTP/2 stream under a grpc-js server call, and the gRPC framing of what arrives on it.
 *
 * grpc-js gives interceptors and handlers decoded messages only, after they have arrived whole;
 * two things need the wire below that: admission by bytes, which must know a message's size when
 * its 5-byte prefix arrives (before its bytes are received and decoded), and the idle timeout,
 * which watches the stream's own progress and resets it when its client stops reading. Both are
 * reached through grpc-js internals — the base call's `stream`, the intercepting calls'
 * `nextCall` — pinned by package-lock.json, as flow-control.ts's are; test/grpc/idle.test.ts
 * fails if a grpc-js upgrade moves them (the call would then be neither charged nor cut).
 */
import type { ServerHttp2Stream } from 'node:http2';

const isHttp2Stream = (value: unknown): value is ServerHttp2Stream =>
  typeof value === 'object' &&
  value !== null &&
  typeof (value as ServerHttp2Stream).respond === 'function' &&
  typeof (value as ServerHttp2Stream).close === 'function' &&
  typeof (value as ServerHttp2Stream).setTimeout === 'function';

/**
 * The HTTP/2 stream of the call an interceptor was given (grpc-js's BaseServerInterceptingCall
 * holds it; the interceptors' calls wrap that one as `nextCall`), or undefined.
 */
export function http2StreamOf(call: object): ServerHttp2Stream | undefined {
  let at: unknown = call;
  for (let depth = 0; depth < 32 && typeof at === 'object' && at !== null; depth++) {
    const stream = (at as { stream?: unknown }).stream;
    if (isHttp2Stream(stream)) return stream;
    at = (at as { nextCall?: unknown }).nextCall;
  }
  return undefined;
}

/**
 * Calls `onMessage` with each request message's length and compression flag as soon as its
 * 5-byte gRPC prefix has arrived on `stream`, before its bytes do and before grpc-js sees the
 * frame that carries the prefix (the listener goes first). Returns the function that stops it.
 * `onMessage` may stop it (and refuse the call) from inside.
 */
export function watchMessageSizes(
  stream: ServerHttp2Stream,
  onMessage: (length: number, compressed: boolean) => void,
): () => void {
  const prefix = Buffer.alloc(5);
  let have = 0; // prefix bytes of the next message received so far
  let skip = 0; // bytes of the current message still to come
  let stopped = false;
  const onData = (chunk: Buffer): void => {
    let at = 0;
    while (at < chunk.length && !stopped) {
      if (skip > 0) {
        const n = Math.min(skip, chunk.length - at);
        skip -= n;
        at += n;
        continue;
      }
      const n = Math.min(5 - have, chunk.length - at);
      chunk.copy(prefix, have, at, at + n);
      have += n;
      at += n;
      if (have === 5) {
        have = 0;
        skip = prefix.readUInt32BE(1);
        onMessage(skip, prefix[0] !== 0);
      }
    }
  };
  stream.prependListener('data', onData);
  return () => {
    stopped = true;
    stream.off('data', onData);
  };
}
