/**
 * Request bodies read straight into one buffer: sized by Content-Length up front (refused with
 * 413 before a byte is read when too large), or grown by doubling for chunked uploads up to the
 * limit. No chunk list and no Buffer.concat, so a body costs its own size once. The buffer is a
 * SharedArrayBuffer, so the kernel workers read tensors from it in place.
 */
import type { Readable } from 'node:stream';
import { QuantdError } from '../errors/index.js';

/** The declared length, or null for a chunked body; throws for a malformed or too large one. */
export function declaredLength(header: string | undefined, limit: number): number | null {
  if (header === undefined) return null;
  const size = /^\d+$/.test(header) ? Number(header) : NaN;
  if (!Number.isSafeInteger(size)) {
    throw new QuantdError('HEADER_INVALID', {
      header: 'Content-Length',
      detail: 'must be a byte count',
      value: header,
    });
  }
  if (size > limit) throw new QuantdError('PAYLOAD_TOO_LARGE', { size, limit });
  return size;
}

function allocate(bytes: number): Uint8Array {
  return new Uint8Array(new SharedArrayBuffer(bytes));
}

export async function readBody(stream: Readable, length: number | null, limit: number): Promise<Uint8Array> {
  let buffer = allocate(length ?? Math.min(limit, 1 << 20));
  let received = 0;
  for await (const chunk of stream as AsyncIterable<Uint8Array>) {
    const end = received + chunk.byteLength;
    if (end > limit || (length !== null && end > length)) {
      stream.destroy();
      throw length !== null && end <= limit
        ? new QuantdError('HEADER_INVALID', {
            header: 'Content-Length',
            detail: 'is smaller than the body sent',
            value: String(length),
          })
        : new QuantdError('PAYLOAD_TOO_LARGE', { size: `more than ${limit}`, limit });
    }
    if (end > buffer.byteLength) {
      const grown = allocate(Math.min(limit, Math.max(end, buffer.byteLength * 2)));
      grown.set(buffer.subarray(0, received));
      buffer = grown;
    }
    buffer.set(chunk, received);
    received = end;
  }
  if (length !== null && received < length) {
    throw new QuantdError('BODY_INCOMPLETE', { received, expected: length });
  }
  return received === buffer.byteLength ? buffer : buffer.subarray(0, received);
}
