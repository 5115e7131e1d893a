/**
 * A job's result files are served only as they were written: every byte that goes out (HTTP or
 * gRPC) is hashed as it is sent, and the file's last bytes are held back until the whole has
 * matched the SHA-256 recorded when the job finished. A file damaged on disk (or changed by
 * hand) ends its transfer with an error the client sees — a clean RESULT_CORRUPT when nothing
 * was sent yet; over HTTP/1.1 a connection closed before the declared Content-Length; over gRPC a
 * DATA_LOSS status — and the job is marked failed with RESULT_CORRUPT, so that no later download
 * serves it either.
 *
 * Every download is checked, not only the first: a check remembered by the file's inode, size
 * and modification time let a byte flipped with its mtime put back be served as 200. Hashing
 * while sending costs no extra read (the first download used to read the file twice).
 */
import { createHash } from 'node:crypto';
import type { FileHandle } from 'node:fs/promises';
import { Readable, Transform, pipeline, type TransformCallback } from 'node:stream';
import { QuantdError } from '../errors/index.js';
import { hashInSlices } from '../format/file-io.js';
import { SafetensorsFileReader } from '../format/safetensors-file.js';
import type { ResultFile } from './store.js';

const READ_BYTES = 8 * 1024 * 1024;
/** Bytes per read of a served file: a chunk is hashed in about a millisecond on the event loop. */
const SEND_CHUNK = 1024 * 1024;

/** SHA-256 (hex) of a whole open file of `size` bytes. */
export async function fileSha256(handle: FileHandle, size: number): Promise<string> {
  const hash = createHash('sha256');
  const buffer = new Uint8Array(Math.min(READ_BYTES, Math.max(size, 1)));
  for (let at = 0; at < size;) {
    const { bytesRead } = await handle.read(buffer, 0, Math.min(buffer.length, size - at), at);
    if (bytesRead === 0) break;
    await hashInSlices(hash, buffer.subarray(0, bytesRead));
    at += bytesRead;
  }
  return hash.digest('hex');
}

/**
 * The bytes of one result file as they are sent, in file order from its start: `add` each part
 * before it goes out, and `check` before the last part does.
 */
export class SentBytes {
  private readonly hash = createHash('sha256');
  private at = 0;

  constructor(
    private readonly file: ResultFile,
    private readonly expected: string,
    /** The hash covers the file from this offset (a data section's, for older records). */
    private readonly from: number,
    /** Told of a mismatch, and awaited: the job is marked corrupt before the client hears of it. */
    private readonly onCorrupt: (problem: QuantdError) => Promise<void>,
  ) {}

  add(bytes: Uint8Array): void {
    const skip = Math.max(0, this.from - this.at);
    if (skip < bytes.byteLength) this.hash.update(bytes.subarray(skip));
    this.at += bytes.byteLength;
  }

  /**
   * Throws RESULT_CORRUPT unless the bytes added are those recorded, once onCorrupt has marked
   * the job: a client that retries at once must not find it still served.
   */
  async check(): Promise<void> {
    const actual = this.hash.digest('hex');
    if (actual === this.expected) return;
    const problem = new QuantdError('RESULT_CORRUPT', {
      file: this.file.name,
      expected: this.expected,
      actual,
    });
    await this.onCorrupt(problem);
    throw problem;
  }
}

/**
 * The check of result file `file` (at `path`) as it is sent; null when its job recorded no
 * checksum. A record of an older version has only its data section's SHA-256 (`data_sha256`,
 * safetensors): that is checked from the end of the file's header.
 */
export async function sendCheck(
  path: string,
  file: ResultFile,
  onCorrupt: (problem: QuantdError) => Promise<void>,
): Promise<SentBytes | null> {
  if (file.sha256 !== undefined) return new SentBytes(file, file.sha256, 0, onCorrupt);
  if (file.data_sha256 === null) return null;
  const reader = await SafetensorsFileReader.open(path);
  try {
    return new SentBytes(file, file.data_sha256, reader.header.dataOffset, onCorrupt);
  } finally {
    await reader.close();
  }
}

/**
 * Passes chunks on one behind: each is hashed as it arrives and sent when the next one comes,
 * the last only once the whole file has matched. On a mismatch the stream fails instead, with at
 * least that last chunk unsent, so no client ever receives a complete corrupt file.
 */
class HeldLast extends Transform {
  private held: Buffer | undefined;

  constructor(private readonly sent: SentBytes) {
    super();
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    this.sent.add(chunk);
    const previous = this.held;
    this.held = chunk;
    done(null, previous);
  }

  override _flush(done: TransformCallback): void {
    this.sent.check().then(
      () => done(null, this.held),
      (err: unknown) => done(err as Error),
    );
  }
}

/**
 * The first `size` bytes of the open file, as a stream checked by `sent` (none: unchecked). The
 * stream closes the handle when it ends or fails.
 */
export function checkedReadStream(handle: FileHandle, size: number, sent: SentBytes | null): Readable {
  let source: Readable;
  if (size === 0) {
    // createReadStream's `end` cannot say "no byte"
    void handle.close();
    source = Readable.from([]);
  } else {
    source = handle.createReadStream({ start: 0, end: size - 1, highWaterMark: SEND_CHUNK });
  }
  if (sent === null) return source;
  const checked = new HeldLast(sent);
  pipeline(source, checked, () => undefined); // an error destroys both; the response sees it
  return checked;
}
