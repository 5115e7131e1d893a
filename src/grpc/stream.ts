/**
 * QuantizeStream: inputs and results of any size, in chunks. The client sends a header (the
 * operation, its options, total_bytes, and for a raw tensor its name/dtype/shape), then the input
 * bytes in chunks that must arrive in order without gaps; the server answers with a result header
 * (total_bytes, metadata), then the result container in chunks. The input lands in one
 * preallocated buffer (shared with the kernel workers); the result streams out tensor by tensor.
 */
import { once } from 'node:events';
import type { ServerDuplexStream } from '@grpc/grpc-js';
import { encodeHeader, parseSafetensors } from '../format/index.js';
import { QuantdError } from '../errors/index.js';
import { OPERATIONS, operationRequest, runBufferOperation, type Compute, type Operation } from '../service/index.js';
import { paramsOf, tensorFile, type SpecMessage, type TensorMessage } from './unary.js';

interface StreamHeader {
  readonly operation?: string;
  readonly spec?: SpecMessage;
  readonly dtype?: string;
  readonly total_bytes?: number;
  readonly tensor?: TensorMessage;
  readonly chunk_bytes?: number;
}

interface StreamRequest {
  readonly part?: 'header' | 'chunk';
  readonly header?: StreamHeader;
  readonly chunk?: { readonly offset?: number; readonly data?: Uint8Array };
}

export interface StreamDeps {
  readonly compute: Compute;
  /** Largest total_bytes accepted. */
  readonly limit: number;
}

const DEFAULT_CHUNK = 4 * 1024 * 1024;
const MAX_CHUNK = 64 * 1024 * 1024;

const invalid = (detail: string): QuantdError => new QuantdError('STREAM_INVALID', { detail });

function operationOf(header: StreamHeader): Operation {
  const op = header.operation || 'quantize';
  if (!(OPERATIONS as readonly string[]).includes(op)) {
    throw invalid(`unknown operation ${JSON.stringify(op)} (${OPERATIONS.join(', ')})`);
  }
  return op as Operation;
}

export async function handleStream(call: ServerDuplexStream<StreamRequest, unknown>, deps: StreamDeps): Promise<void> {
  const controller = new AbortController();
  call.on('cancelled', () =>
    controller.abort(new QuantdError('CANCELLED', { detail: ': the client cancelled the call' })),
  );
  let header: StreamHeader | undefined;
  let buffer: Uint8Array | undefined;
  let received = 0;
  // destroyOnReturn: false — the default iterator destroys the stream when the input ends, and
  // with it the half on which the result still has to go out.
  const messages = call.iterator({ destroyOnReturn: false }) as AsyncIterable<StreamRequest>;
  for await (const message of messages) {
    if (message.part === 'header') {
      if (header) throw invalid('a second header arrived; the header comes once, first');
      header = message.header ?? {};
      const total = header.total_bytes ?? 0;
      if (total > deps.limit) throw new QuantdError('PAYLOAD_TOO_LARGE', { size: total, limit: deps.limit });
      buffer = new Uint8Array(new SharedArrayBuffer(total));
      continue;
    }
    if (!header || !buffer) throw invalid('the first message must be a header');
    const chunk = message.chunk ?? {};
    const offset = chunk.offset ?? 0;
    const data = chunk.data ?? new Uint8Array(0);
    if (offset !== received) {
      throw invalid(`a chunk starts at offset ${offset}, but ${received} bytes have arrived (chunks go in order)`);
    }
    if (received + data.byteLength > buffer.byteLength) {
      throw invalid(`the chunks carry more than total_bytes = ${buffer.byteLength}`);
    }
    buffer.set(data, received);
    received += data.byteLength;
  }
  if (!header || !buffer) throw invalid('the stream ended without a header');
  if (received < buffer.byteLength) {
    throw new QuantdError('BODY_INCOMPLETE', { received, expected: buffer.byteLength });
  }

  const op = operationOf(header);
  const request = operationRequest(op, paramsOf(op, header.spec, header.dtype));
  const file = header.tensor ? tensorFile(header.tensor, buffer, 'stream tensor') : parseSafetensors(buffer, 'stream');
  const result = await runBufferOperation(file, 'stream', request, deps.compute, controller.signal);
  try {
    const head = encodeHeader(result.plan.tensors, result.plan.metadata).bytes;
    const parts = [head, ...result.outputs];
    const total = parts.reduce((n, p) => n + p.byteLength, 0);
    const size = Math.min(Math.max(header.chunk_bytes || DEFAULT_CHUNK, 1024), MAX_CHUNK);
    await write(call, { result: { total_bytes: total, metadata: { ...result.plan.metadata } } });
    let offset = 0;
    for (const part of parts) {
      for (let at = 0; at < part.byteLength; at += size) {
        const data = part.subarray(at, Math.min(at + size, part.byteLength));
        await write(call, { chunk: { offset, data: Buffer.from(data.buffer, data.byteOffset, data.byteLength) } });
        offset += data.byteLength;
      }
    }
    call.end();
  } finally {
    for (const o of result.outputs) deps.compute.release?.(o);
  }
}

/** Writes one message, waiting for the transport to drain when it asks to. */
async function write(call: ServerDuplexStream<StreamRequest, unknown>, message: unknown): Promise<void> {
  if (call.cancelled) throw new QuantdError('CANCELLED', { detail: ': the client cancelled the call' });
  if (!call.write(message)) await once(call, 'drain');
}
