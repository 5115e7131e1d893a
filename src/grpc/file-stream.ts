/**
 * Server-streaming calls that send files (Jobs.Result, Jobs.Report, Calibrations.Statistics) as
 * quantd.v1.ResultChunk messages: admitted like unary calls — a slot of the download pool
 * (QUANTD_DOWNLOAD_LIMIT, early-admission.ts), held until the stream has ended (its status sent,
 * or the client gone; a client that stops reading is cut, idle.ts) — each file sent whole and in
 * order at the client's pace, in chunks under every gRPC client's default receive limit, at most
 * IN_FLIGHT of them read ahead of what the client has taken.
 */
import type { FileHandle } from 'node:fs/promises';
import type * as grpc from '@grpc/grpc-js';
import { QuantdError } from '../errors/index.js';
import type { Caller } from '../service/auth.js';
import type { AdmissionDeps } from './admitted.js';

/** Data bytes per ResultChunk: under every gRPC client's default 4 MiB receive limit. */
export const RESULT_CHUNK_BYTES = 1024 * 1024;
/**
 * Chunks written and not yet taken by the HTTP/2 stream: one being sent while the next is read.
 * grpc-js's own queue would take 16 before asking to wait, 16 MiB per download held in memory.
 */
const IN_FLIGHT = 2;

/**
 * The check of a file as it is sent (a job's result: src/jobs/verify.ts): every chunk is added
 * before it goes out, and `check` (which throws on a mismatch) runs before the last one does.
 */
export interface SentCheck {
  add(bytes: Uint8Array): void;
  check(): Promise<void>;
}

/** A file to stream: the name it is sent under, its data hash, and how to open it. */
export interface OutgoingFile {
  readonly name: string;
  readonly data_sha256: string | null;
  /** The file opened (its size checked), and the check of its bytes as they are sent, if any. */
  open(): Promise<{ readonly handle: FileHandle; readonly size: number; readonly sent?: SentCheck | null }>;
}

export type Streaming<Req> = (call: grpc.ServerWritableStream<Req, unknown>) => void;

/** `files` as a streaming handler named `rpc`. */
export function admittedStreaming(deps: AdmissionDeps) {
  return <Req>(
      rpc: string,
      files: (request: Req, caller: Caller) => Promise<OutgoingFile[]>,
    ): Streaming<Req> =>
    (call) => {
      let release: (() => void) | undefined;
      const done = (): void => {
        release?.();
        release = undefined;
      };
      const gone = new AbortController();
      call.once('cancelled', () => {
        gone.abort(
          new QuantdError('CANCELLED', { detail: ': the call ended (cancelled, or past its deadline)' }),
        );
        done();
      });
      call.once('close', done);
      return Promise.resolve()
        .then(async () => {
          release = deps.admit(call.metadata);
          await sendFiles(call, await files(call.request, deps.identify(call.metadata)), gone.signal);
        })
        .catch((err: unknown) => {
          // a call that has ended (cancelled, past its deadline) has had its status
          if (!call.cancelled) call.emit('error', deps.report(err, rpc));
        })
        .finally(done);
    };
}

/**
 * Resolves when `written` has, or when `signal` aborts (then true: the client is gone, nothing
 * more is sent), whichever comes first; leaves no listener behind.
 */
function whenWritten(written: Promise<void>, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return Promise.resolve(true);
  return new Promise((resolve) => {
    const onAbort = (): void => resolve(true);
    signal.addEventListener('abort', onAbort, { once: true });
    void written.then(() => {
      signal.removeEventListener('abort', onAbort);
      resolve(signal.aborted);
    });
  });
}

/** Streams each file in chunks (ResultChunk), at the client's pace, then ends the call. */
async function sendFiles(
  call: grpc.ServerWritableStream<unknown, unknown>,
  files: readonly OutgoingFile[],
  signal: AbortSignal,
): Promise<void> {
  /** Chunks handed to grpc-js and not yet written to the stream, oldest first. */
  const pending: Promise<void>[] = [];
  for (const file of files) {
    const { handle, size, sent } = await file.open();
    try {
      let offset = 0;
      do {
        if (signal.aborted) return;
        // a fresh buffer per chunk: grpc-js serializes a message only when it leaves the queue
        const data = Buffer.allocUnsafe(Math.min(RESULT_CHUNK_BYTES, size - offset));
        const { bytesRead } = await handle.read(data, 0, data.byteLength, offset);
        if (bytesRead !== data.byteLength) {
          throw new QuantdError('INTERNAL', { detail: `file ${file.name} changed while being read` });
        }
        sent?.add(data);
        // the last chunk goes out only once the whole file has matched: a mismatch ends the call
        // with its error (DATA_LOSS), the file one chunk short
        if (offset + data.byteLength === size) await sent?.check();
        const first = offset === 0;
        const chunk = {
          file: file.name,
          offset,
          data,
          ...(first && { total_bytes: size }),
          ...(first && file.data_sha256 !== null && { data_sha256: file.data_sha256 }),
        };
        offset += data.byteLength;
        // a write that fails (the call ended) calls back too: the loop then stops on the signal
        pending.push(new Promise<void>((resolve) => call.write(chunk, () => resolve())));
        if (pending.length >= IN_FLIGHT && (await whenWritten(pending.shift()!, signal))) return;
      } while (offset < size);
    } finally {
      await handle.close();
    }
  }
  if (!signal.aborted) call.end();
}
