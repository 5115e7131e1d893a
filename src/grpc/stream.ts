/**
 * QuantizeStream: inputs and results of any size, in chunks. The client sends a header (the
 * operation, its options, total_bytes, and for a raw tensor its name/dtype/shape), then the input
 * bytes in chunks that must arrive in order without gaps; the server answers with a result header
 * (total_bytes, metadata), then the result container in chunks.
 *
 * The header is checked as soon as it arrives (operation, options, chunk_bytes, total_bytes
 * against QUANTD_STREAM_LIMIT; for a raw tensor its dtype, name, shape and byte count, and the
 * operation planned on it): what it alone shows to be wrong fails the call before a chunk is
 * read. The input lands in one buffer shared with the kernel workers, grown in place as chunks
 * arrive (up to total_bytes), so a header alone commits no memory for the bytes it announces.
 * The result goes out tensor by tensor as views of the outputs, which are handed back to the
 * compute only once the call has ended: until grpc-js has serialized the last queued chunk they
 * are still read.
 */
import { once } from 'node:events';
import type { ServerDuplexStream } from '@grpc/grpc-js';
import type { TensorEntry } from '../format/index.js';
import { QuantdError } from '../errors/index.js';
import {
  OPERATIONS,
  encodeResultHeader,
  operationRequest,
  parseBody,
  planBuffer,
  planOperation,
  planOutputBytes,
  runBufferPlan,
  singleTensorFile,
  type Compute,
  type InMemoryFile,
  type Operation,
  type OperationRequest,
} from '../service/index.js';
import {
  bytesFieldSize,
  checkTensor,
  paramsOf,
  varintSize,
  type SpecMessage,
  type TensorMessage,
} from './unary.js';

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

type Call = ServerDuplexStream<StreamRequest, unknown>;

export interface StreamDeps {
  readonly compute: Compute;
  /** Largest total_bytes accepted (QUANTD_STREAM_LIMIT). */
  readonly limit: number;
  /** Largest message the server sends (grpc.max_send_message_length): bounds the result chunks. */
  readonly maxMessage: number;
  /** Aborts on cancellation, the client's deadline and QUANTD_REQUEST_TIMEOUT_MS. */
  readonly signal: AbortSignal;
  /** Called once the result is ready to go out (the request timeout stops there). */
  readonly onResult?: () => void;
  /** Registers what to do once the call has ended (status sent, or the stream closed). */
  readonly onEnd: (fn: () => void) => void;
  /**
   * Charges bytes the call will hold against the memory budget (`what` names them): the input
   * buffer once the header announces its size, the result once planned. Throws to refuse.
   */
  readonly charge?: (bytes: number, what: string) => void;
}

const KiB = 1024;
const MiB = 1024 * KiB;
/** Result chunk size when chunk_bytes is 0: under every client's default 4 MiB receive limit. */
export const DEFAULT_CHUNK = 1 * MiB;
/** Smallest chunk_bytes accepted: smaller chunks cost a message each for nothing. */
export const MIN_CHUNK = 1 * KiB;
/** Largest result chunk, whatever the message limit: each chunk is copied once when serialized. */
export const MAX_CHUNK = 64 * MiB;
/**
 * Bytes a result chunk's message adds to its data: StreamResponse.chunk's tag and length (≤ 6),
 * Chunk.offset's tag and varint (≤ 11), Chunk.data's tag and length (≤ 6), rounded up.
 */
export const CHUNK_OVERHEAD = 32;
/** Memory first committed for an input larger than this (then doubled as chunks arrive). */
const INITIAL_BUFFER = 1 * MiB;

const invalid = (detail: string): QuantdError => new QuantdError('STREAM_INVALID', { detail });

function operationOf(header: StreamHeader): Operation {
  const op = header.operation || 'quantize';
  if (!(OPERATIONS as readonly string[]).includes(op)) {
    throw invalid(`unknown operation ${JSON.stringify(op)} (${OPERATIONS.join(', ')})`);
  }
  return op as Operation;
}

/**
 * The size of the result chunks: chunk_bytes, or DEFAULT_CHUNK when 0; lowered to what one
 * message of at most `maxMessage` bytes can carry (and MAX_CHUNK); below MIN_CHUNK refused.
 */
export function resultChunkSize(requested: number | undefined, maxMessage: number): number {
  const cap = Math.max(1, Math.min(MAX_CHUNK, maxMessage - CHUNK_OVERHEAD));
  if (!requested) return Math.min(DEFAULT_CHUNK, cap);
  if (requested < MIN_CHUNK) {
    throw new QuantdError('OPTION_INVALID', {
      option: 'chunk_bytes',
      detail: `must be 0 (the default, ${DEFAULT_CHUNK}) or at least ${MIN_CHUNK}`,
      value: String(requested),
    });
  }
  return Math.min(requested, cap);
}

/** What the header says, checked: the call fails here, before any chunk is read. */
interface Plan {
  readonly request: OperationRequest;
  readonly total: number;
  readonly chunkSize: number;
  /** The input as a file, once its bytes have arrived. */
  /** The input as a file (a safetensors input parsed with the event loop turning meanwhile). */
  readonly file: (bytes: Uint8Array, signal: AbortSignal) => Promise<InMemoryFile>;
}

function planOf(header: StreamHeader, deps: StreamDeps): Plan {
  const op = operationOf(header);
  const request = operationRequest(op, paramsOf(op, header.spec, header.dtype));
  const chunkSize = resultChunkSize(header.chunk_bytes, deps.maxMessage);
  const total = Number(header.total_bytes ?? 0);
  if (!(total <= deps.limit)) {
    throw new QuantdError('PAYLOAD_TOO_LARGE', {
      size: total,
      limit: deps.limit,
      setting: 'QUANTD_STREAM_LIMIT',
    });
  }
  if (header.tensor) {
    const { name, dtype, shape } = checkTensor(header.tensor, total, 'stream tensor');
    // A raw tensor's header is the whole safetensors header: the operation is planned on it now,
    // so that options that do not fit the tensor (axis, group_size, include, ...) fail here too.
    const entry: TensorEntry = { name, dtype, shape, begin: 0, end: total };
    planOperation(
      { entries: [entry], metadata: null, dataOffset: 0, dataLength: total },
      request,
      'stream tensor',
    );
    return {
      request,
      total,
      chunkSize,
      file: async (bytes) => singleTensorFile(name, dtype, shape, bytes, 'stream tensor'),
    };
  }
  return { request, total, chunkSize, file: (bytes, signal) => parseBody(bytes, 'stream', signal) };
}

/** A growable SharedArrayBuffer (ES2024, Node 20): its address space reserved, memory committed on grow(). */
interface GrowableSharedArrayBuffer extends SharedArrayBuffer {
  grow(bytes: number): void;
}
const Growable = SharedArrayBuffer as unknown as new (
  bytes: number,
  options: { maxByteLength: number },
) => GrowableSharedArrayBuffer;
const GROWABLE =
  typeof (SharedArrayBuffer.prototype as Partial<GrowableSharedArrayBuffer>).grow === 'function';

/**
 * Where the input's `total` bytes land: one SharedArrayBuffer (the kernel workers read tensors
 * from it in place), grown by doubling as chunks arrive — in place, never copied — so memory
 * follows the bytes that actually came, not what the header announced.
 */
class InputBuffer {
  private readonly sab: SharedArrayBuffer | GrowableSharedArrayBuffer;

  constructor(private readonly total: number) {
    this.sab = InputBuffer.reserve(total) ?? new SharedArrayBuffer(total);
  }

  /** A growable buffer for up to `total` bytes, or null where none can be had (then all at once). */
  private static reserve(total: number): GrowableSharedArrayBuffer | null {
    if (!GROWABLE || total <= INITIAL_BUFFER) return null;
    try {
      return new Growable(INITIAL_BUFFER, { maxByteLength: total });
    } catch {
      return null; // no address space to reserve (ulimit -v): allocate the whole input
    }
  }

  set(data: Uint8Array, offset: number): void {
    const end = offset + data.byteLength;
    if (end > this.sab.byteLength) {
      (this.sab as GrowableSharedArrayBuffer).grow(
        Math.min(this.total, Math.max(end, this.sab.byteLength * 2)),
      );
    }
    new Uint8Array(this.sab, offset, data.byteLength).set(data);
  }

  /** The whole input (a fixed-length view), once its bytes have arrived. */
  bytes(): Uint8Array {
    return new Uint8Array(this.sab, 0, this.total);
  }
}

/**
 * Reads the header and the input's chunks. Messages are taken as they arrive ('data'), each
 * checked and copied at once; the call fails at the first wrong one, when the signal aborts
 * (cancelled, deadline, QUANTD_REQUEST_TIMEOUT_MS), or when the client half-closes early.
 */
function readInput(call: Call, deps: StreamDeps): Promise<{ plan: Plan; bytes: Uint8Array }> {
  let plan: Plan | undefined;
  let buffer: InputBuffer | undefined;
  let received = 0;

  const onMessage = (message: StreamRequest): void => {
    if (message.part === 'header') {
      if (plan) throw invalid('a second header arrived; the header comes once, first');
      plan = planOf(message.header ?? {}, deps);
      // the whole input will be held: charged now, before a byte of it is committed
      deps.charge?.(plan.total, `an input of ${plan.total} bytes`);
      buffer = new InputBuffer(plan.total);
      return;
    }
    if (!plan || !buffer) throw invalid('the first message must be a header');
    const chunk = message.chunk ?? {};
    const offset = Number(chunk.offset ?? 0);
    const data = chunk.data ?? new Uint8Array(0);
    if (offset !== received) {
      throw invalid(
        `a chunk starts at offset ${offset}, but ${received} bytes have arrived (chunks go in order)`,
      );
    }
    const end = received + data.byteLength;
    if (end > plan.total) throw invalid(`the chunks carry more than total_bytes = ${plan.total}`);
    buffer.set(data, received);
    received = end;
  };

  return new Promise((resolve, reject) => {
    const settle = (error?: unknown): void => {
      call.off('data', onData);
      call.off('end', onEnd);
      call.off('close', onClose);
      deps.signal.removeEventListener('abort', onAbort);
      if (error !== undefined) {
        // the rest of the input is not wanted; grpc-js drops it once the status is sent
        call.pause();
        reject(error);
      } else if (!plan) {
        reject(invalid('the stream ended without a header'));
      } else if (received < plan.total) {
        reject(new QuantdError('BODY_INCOMPLETE', { received, expected: plan.total }));
      } else {
        resolve({ plan, bytes: buffer!.bytes() });
      }
    };
    const onData = (message: StreamRequest): void => {
      try {
        onMessage(message);
      } catch (err) {
        settle(err);
      }
    };
    const onEnd = (): void => settle();
    const onAbort = (): void => settle(deps.signal.reason);
    const onClose = (): void =>
      settle(new QuantdError('CANCELLED', { detail: ': the call ended during the upload' }));
    if (deps.signal.aborted) {
      reject(deps.signal.reason);
      return;
    }
    deps.signal.addEventListener('abort', onAbort, { once: true });
    call.on('data', onData);
    call.once('end', onEnd);
    call.once('close', onClose);
  });
}

export async function handleStream(call: Call, deps: StreamDeps): Promise<void> {
  const { plan, bytes } = await readInput(call, deps);
  const file = await plan.file(bytes, deps.signal);
  // tens of thousands of tensors are planned with the event loop turning meanwhile
  const planned = await planBuffer(file.header, plan.request, 'stream', deps.signal);
  const resultBytes = planOutputBytes(planned);
  deps.charge?.(resultBytes, `a result of ${resultBytes} bytes`);
  const result = await runBufferPlan(planned, file, deps.compute, deps.signal);
  // The outputs are read until grpc-js has serialized the last queued chunk: hand them back to
  // the compute (which reuses their memory for later requests) only once the call has ended.
  deps.onEnd(() => {
    for (const o of result.outputs) deps.compute.release?.(o);
  });
  deps.onResult?.();
  const head = await encodeResultHeader(result.plan, deps.signal);
  const parts = [head, ...result.outputs];
  const total = parts.reduce((n, p) => n + p.byteLength, 0);
  const metadata = { ...result.plan.metadata };
  const resultSize = bytesFieldSize(
    1 + varintSize(total) + Object.entries(metadata).reduce((n, [k, v]) => n + mapEntrySize(k, v), 0),
  );
  if (resultSize > deps.maxMessage) {
    throw new QuantdError('RESULT_TOO_LARGE', {
      size: resultSize,
      limit: deps.maxMessage,
      setting: 'QUANTD_BODY_LIMIT',
    });
  }
  await write(call, deps.signal, { result: { total_bytes: total, metadata } });
  let offset = 0;
  for (const part of parts) {
    for (let at = 0; at < part.byteLength; at += plan.chunkSize) {
      const data = part.subarray(at, Math.min(at + plan.chunkSize, part.byteLength));
      await write(call, deps.signal, {
        chunk: { offset, data: Buffer.from(data.buffer, data.byteOffset, data.byteLength) },
      });
      offset += data.byteLength;
    }
  }
  call.end();
}

/** Bytes of one map<string, string> entry of StreamResult.metadata. */
function mapEntrySize(key: string, value: string): number {
  return bytesFieldSize(bytesFieldSize(Buffer.byteLength(key)) + bytesFieldSize(Buffer.byteLength(value)));
}

/** Writes one message, waiting for the transport to drain when it asks to. */
async function write(call: Call, signal: AbortSignal, message: unknown): Promise<void> {
  if (signal.aborted) throw signal.reason;
  if (call.write(message)) return;
  try {
    await once(call, 'drain', { signal });
  } catch (err) {
    throw signal.aborted ? signal.reason : err;
  }
}
