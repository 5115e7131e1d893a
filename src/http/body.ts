/**
 * Request bodies read straight into one buffer: sized by Content-Length up front (refused with
 * 413 before a byte is read when too large), or grown by doubling for chunked uploads up to the
 * limit. No chunk list and no Buffer.concat, so a body costs its own size once. The buffer is a
 * SharedArrayBuffer, so the kernel workers read tensors from it in place.
 *
 * A body that is refused part-way (over the limit, longer than declared, cut short) is left
 * undestroyed: the connection must live on to carry the problem response, which then closes it
 * (problem.ts sends `Connection: close` for a request whose body was not read to its end).
 */
import type { IncomingMessage } from 'node:http';
import type { FastifyRequest } from 'fastify';
import type { Readable } from 'node:stream';
import { QuantdError } from '../errors/index.js';
import { collectGarbage } from '../kernels/gc.js';
import { BODY_FACTOR, slotOf } from './budget.js';

/** The declared length, or null for a chunked body; throws for a malformed or too large one. */
export function declaredLength(
  header: string | undefined,
  limit: number,
  setting = 'QUANTD_BODY_LIMIT',
): number | null {
  if (header === undefined) return null;
  const size = /^\d+$/.test(header) ? Number(header) : NaN;
  if (!Number.isSafeInteger(size)) {
    throw new QuantdError('HEADER_INVALID', {
      header: 'Content-Length',
      detail: 'must be a byte count',
      value: header,
    });
  }
  if (size > limit) throw new QuantdError('PAYLOAD_TOO_LARGE', { size, limit, setting });
  return size;
}

/** Body bytes received per request, as readBody counts them (for quantd_http_request_bytes_total). */
const receivedBytes = new WeakMap<IncomingMessage | Readable, number>();

/**
 * The body bytes received on `request`: counted by readBody where it read the body (a chunked
 * upload, one refused part-way), else the declared length once the body has arrived whole (a body
 * some other parser read, or one Node discarded). A declared length that never arrived counts 0.
 */
export function bodyBytesReceived(request: IncomingMessage): number {
  const counted = receivedBytes.get(request);
  if (counted !== undefined) return counted;
  if (!request.complete) return 0;
  return Number(request.headers['content-length'] ?? 0) || 0;
}

/**
 * Bodies are SharedArrayBuffers that live as long as their request, long enough to reach V8's
 * old generation, which only a full collection clears; their bytes do not count as heap
 * pressure, so a stream of large uploads may never trigger one. Measured under 10× load with
 * 2 MiB bodies: peak RSS 0.35 GB in most runs, 1.0 GB in one of five, the dead bodies piling up.
 * Every 64 MiB of large bodies the server looks at its array-buffer memory and collects when it
 * is past a watermark (above the ~250 MiB that load peaks at when V8 collects by itself). Not on
 * a fixed quota: after explicit collections V8 went on collecting by itself every 50 ms, which
 * halved the throughput of that load.
 */
const BODY_CHECK_BYTES = 64 * 1024 * 1024;
const ARRAY_BUFFER_WATERMARK = 384 * 1024 * 1024;
const LARGE_BODY = 1024 * 1024;
let bodyBytesSinceCheck = 0;

function allocate(bytes: number): Uint8Array {
  if (bytes >= LARGE_BODY && (bodyBytesSinceCheck += bytes) >= BODY_CHECK_BYTES) {
    bodyBytesSinceCheck = 0;
    if (process.memoryUsage().arrayBuffers > ARRAY_BUFFER_WATERMARK) collectGarbage();
  }
  return new Uint8Array(new SharedArrayBuffer(bytes));
}

/** The binary body types, read by readBody (the op routes accept nothing else). */
export const SAFETENSORS_TYPE = 'application/x-safetensors';
export const OCTET_TYPE = 'application/octet-stream';

/** Requests whose client half-closed the connection mid-body (client-error.ts). */
const cutShort = new WeakSet<IncomingMessage | Readable>();
/** The body reader's callback for its request, while it reads (readBody, or see onBodyCutShort). */
const cutListeners = new WeakMap<IncomingMessage | Readable, () => void>();

/**
 * Calls `listener` if the client half-closes its connection before the body's end (once), until
 * the returned function is called. A body reader that registers here is told instead of seeing
 * its stream end: an ended, incomplete request destroys its socket, and with it the problem
 * response the reader would send (BODY_INCOMPLETE).
 */
export function onBodyCutShort(request: IncomingMessage | Readable, listener: () => void): () => void {
  if (cutShort.has(request)) {
    listener();
    return () => {};
  }
  cutListeners.set(request, listener);
  return () => {
    if (cutListeners.get(request) === listener) cutListeners.delete(request);
  };
}

/** Why the server stopped reading a request's body (BODY_TOO_SLOW), for its reader's error. */
const stopReasons = new WeakMap<IncomingMessage | Readable, QuantdError>();

/** The error a body reader reports when the server stopped the body (stopBody), if it did. */
export function bodyStopReason(request: IncomingMessage | Readable): QuantdError | undefined {
  return stopReasons.get(request);
}

/**
 * The server gives up on a request's body (it came too slowly, pace.ts): its reader is told as
 * of a body cut short, and reports `error`; the connection carries that answer, then closes.
 */
export function stopBody(request: IncomingMessage, error: QuantdError): void {
  if (request.complete || cutShort.has(request)) return;
  stopReasons.set(request, error);
  endBodyEarly(request);
}

/**
 * The client ended its side of the connection before the body's end (client-error.ts): its
 * reader is told (onBodyCutShort), or, with none registered, the stream is ended where it
 * stopped, so that no reader is left waiting (a reader that starts later, readBody, sees the mark
 * and does not read).
 */
export function endBodyEarly(request: IncomingMessage): void {
  cutShort.add(request);
  const listener = cutListeners.get(request);
  cutListeners.delete(request);
  if (listener) listener();
  else request.push(null);
}

/**
 * `setting`: the configuration that sets `limit`, named in the 413. `charge`, for a chunked body
 * (whose size admission could not know): told each buffer's growth in bytes before it is
 * allocated; it throws to refuse the body (OVERLOADED: the memory budget is spent).
 */
export async function readBody(
  stream: Readable,
  length: number | null,
  limit: number,
  setting = 'QUANTD_BODY_LIMIT',
  charge?: (bytes: number) => void,
): Promise<Uint8Array> {
  const first = length ?? Math.min(limit, 1 << 20);
  if (length === null) charge?.(first);
  let buffer = allocate(first);
  let received = 0;
  receivedBytes.set(stream, 0);
  const incomplete = (): QuantdError =>
    new QuantdError('BODY_INCOMPLETE', {
      received: received + stream.readableLength,
      expected: length ?? `${received + stream.readableLength}+`,
    });
  if (cutShort.has(stream)) throw stopReasons.get(stream) ?? incomplete();
  // Read with 'data' events, never destroying the stream: a refused body (an error below) leaves
  // the request, and the socket its problem response goes out on, alive; the stream is paused.
  await new Promise<void>((resolve, reject) => {
    const settle = (error?: QuantdError): void => {
      stream.off('data', onData);
      stream.off('end', onEnd);
      stream.off('error', onBroken);
      stream.off('close', onBroken);
      stopListening();
      if (error) {
        stream.pause();
        reject(error);
      } else {
        resolve();
      }
    };
    const onData = (chunk: Uint8Array): void => {
      const end = received + chunk.byteLength;
      if (end > limit || (length !== null && end > length)) {
        receivedBytes.set(stream, end);
        settle(
          length !== null && end <= limit
            ? new QuantdError('HEADER_INVALID', {
                header: 'Content-Length',
                detail: 'is smaller than the body sent',
                value: String(length),
              })
            : new QuantdError('PAYLOAD_TOO_LARGE', { size: `more than ${limit}`, limit, setting }),
        );
        return;
      }
      if (end > buffer.byteLength) {
        const size = Math.min(limit, Math.max(end, buffer.byteLength * 2));
        try {
          charge?.(size);
        } catch (err) {
          receivedBytes.set(stream, end);
          settle(err as QuantdError);
          return;
        }
        const grown = allocate(size);
        grown.set(buffer.subarray(0, received));
        buffer = grown;
      }
      buffer.set(chunk, received);
      received = end;
      receivedBytes.set(stream, received);
    };
    const onEnd = (): void => settle(length !== null && received < length ? incomplete() : undefined);
    // the connection broke off mid-body (reset, aborted), or the client half-closed it
    const onBroken = (): void => settle(stopReasons.get(stream) ?? incomplete());
    stream.on('data', onData);
    stream.once('end', onEnd);
    stream.once('error', onBroken);
    stream.once('close', onBroken);
    const stopListening = onBodyCutShort(stream, onBroken);
  });
  return received === buffer.byteLength ? buffer : buffer.subarray(0, received);
}

/**
 * The content-type parser of the binary body types: the whole body, as one shared buffer. A
 * request that matched no route is not read (its 404 needs no body; problem.ts closes the
 * connection when much of it is left). A chunked body is charged to its request's admission slot
 * as it grows (a declared one was charged when admitted, app.ts): the new buffer, while the old
 * one is still held.
 */
export function binaryBodyParser(
  limit: number,
): (request: FastifyRequest, payload: IncomingMessage) => Promise<Uint8Array | undefined> {
  return async (request, payload) => {
    if (request.is404) return undefined;
    const slot = slotOf(request.raw);
    const charge = slot && ((bytes: number) => slot.charge(bytes * BODY_FACTOR, `a body of ${bytes} bytes`));
    return readBody(
      payload,
      declaredLength(request.headers['content-length'], limit),
      limit,
      undefined,
      charge,
    );
  };
}
