/**
 * safetensors files on disk, one tensor at a time: the reader holds only the header in memory
 * and the writer streams tensors into place, so a model larger than memory can be processed.
 * The writer is atomic: it fills a temporary file beside the target and renames it over the
 * target only on commit, so `path` never holds a half-written file.
 */
import { createHash, type Hash } from 'node:crypto';
import { open, type FileHandle } from 'node:fs/promises';
import { dirname } from 'node:path';

import { completeYielding } from '../core/time-slice.js';
import { QuantdError } from '../errors/index.js';
import {
  BackgroundFlush,
  errorDetail,
  HASH_SLICE,
  hashInSlices,
  openRegularFile,
  readFully,
  resolveOutput,
  syncDirectory,
  forgetTemp,
  removeTemp,
  renameTemp,
  tempPathFor,
  writeError,
  writeFileAtomic,
  writeFully,
} from './file-io.js';
import {
  DEFAULT_HEADER_LIMIT,
  encodeHeader,
  parseHeaderWork,
  readHeaderLength,
  SNIFF_BYTES,
  type SafetensorsHeader,
  type TensorEntry,
  type TensorPlan,
} from './safetensors.js';

const PREFIX_BYTES = 8;

function internal(detail: string): QuantdError {
  return new QuantdError('INTERNAL', { detail });
}

/** Reads exactly `length` bytes at `position` (a SharedArrayBuffer when `shared`, or from `allocate`). */
function readExactly(
  fh: FileHandle,
  position: number,
  length: number,
  path: string,
  what: string,
  shared = false,
  allocate?: (bytes: number, shared: boolean) => Uint8Array,
): Promise<Uint8Array> {
  const buffer = allocate
    ? allocate(length, shared)
    : new Uint8Array(shared ? new SharedArrayBuffer(length) : new ArrayBuffer(length));
  return readFully(
    fh,
    buffer,
    position,
    path,
    (done) =>
      new QuantdError('SAFETENSORS_TRUNCATED', {
        source: path,
        detail: `the file ended while reading ${what}`,
        expected: position + length,
        actual: position + done,
      }),
  );
}

export class SafetensorsFileReader {
  private handle: FileHandle | null;

  private constructor(
    handle: FileHandle,
    readonly path: string,
    readonly size: number,
    readonly header: SafetensorsHeader,
  ) {
    this.handle = handle;
  }

  /** Opens `path` and reads and validates its header (and nothing else). */
  static async open(path: string, options: { headerLimit?: number } = {}): Promise<SafetensorsFileReader> {
    const fh = await openRegularFile(path);
    try {
      let size: number;
      try {
        const stat = await fh.stat();
        // open() succeeds on a directory on Linux; only the first read would fail, obscurely.
        if (!stat.isFile()) throw new Error(stat.isDirectory() ? 'is a directory' : 'not a regular file');
        size = stat.size;
      } catch (err) {
        throw new QuantdError('FILE_UNREADABLE', { path, detail: errorDetail(err) });
      }
      const limit = options.headerLimit ?? DEFAULT_HEADER_LIMIT;
      // the length and a few bytes more: enough to name the file when it is not safetensors
      const prefix = await readExactly(fh, 0, Math.min(SNIFF_BYTES, size), path, 'the header length');
      const n = readHeaderLength(prefix, size, path, limit);
      const json = await readExactly(fh, PREFIX_BYTES, n, path, 'the header');
      // in units, the event loop turning meanwhile: a server's job opens files of 65,536 tensors
      const header = await completeYielding(parseHeaderWork(json, size - PREFIX_BYTES - n, path));
      return new SafetensorsFileReader(fh, path, size, header);
    } catch (err) {
      await fh.close().catch(() => undefined);
      throw err;
    }
  }

  /**
   * The bytes of one tensor, in a fresh buffer the caller owns (a SharedArrayBuffer when
   * `shared`), or in one from `allocate`.
   */
  async read(
    entry: TensorEntry,
    shared = false,
    allocate?: (bytes: number, shared: boolean) => Uint8Array,
  ): Promise<Uint8Array> {
    if (this.handle === null) throw internal(`read of tensor ${JSON.stringify(entry.name)} after close`);
    if (entry.begin > entry.end || entry.end > this.header.dataLength) {
      throw internal(`tensor ${JSON.stringify(entry.name)} is not an entry of ${this.path}`);
    }
    const what = `tensor ${JSON.stringify(entry.name)}`;
    return readExactly(
      this.handle,
      this.header.dataOffset + entry.begin,
      entry.end - entry.begin,
      this.path,
      what,
      shared,
      allocate,
    );
  }

  /** SHA-256 (hex) of the data section, read in chunks (a whole model never sits in memory). */
  async dataSha256(): Promise<string> {
    if (this.handle === null) throw internal('checksum after close');
    const hash = createHash('sha256');
    const chunk = HASH_SLICE;
    const { dataOffset, dataLength } = this.header;
    for (let at = 0; at < dataLength; at += chunk) {
      const n = Math.min(chunk, dataLength - at);
      hash.update(await readExactly(this.handle, dataOffset + at, n, this.path, 'the data section'));
    }
    return hash.digest('hex');
  }

  /**
   * Whether the data section still has the SHA-256 its metadata records (DATA_SHA256_KEY):
   * null when the file records none.
   */
  async verifyChecksum(): Promise<{ recorded: string; actual: string; ok: boolean } | null> {
    const recorded = this.header.metadata?.[DATA_SHA256_KEY];
    if (recorded === undefined) return null;
    const actual = await this.dataSha256();
    return { recorded, actual, ok: actual === recorded };
  }

  async close(): Promise<void> {
    const fh = this.handle;
    this.handle = null;
    await fh?.close();
  }
}

/** Metadata key of the data section's SHA-256 (WriterOptions.checksum). */
export const DATA_SHA256_KEY = 'quantd.data_sha256';
const PLACEHOLDER = '0'.repeat(64);

function withDigest(
  metadata: Readonly<Record<string, string>> | null,
  digest: string,
): Record<string, string> {
  const out = Object.assign(Object.create(null) as Record<string, string>, metadata ?? {});
  out[DATA_SHA256_KEY] = digest;
  return out;
}

export interface WriterOptions {
  /**
   * Record the SHA-256 of the data section (every tensor's bytes, in file order) in the metadata
   * under DATA_SHA256_KEY. The header is written with a placeholder of the same length and
   * rewritten with the digest on commit.
   */
  readonly checksum?: boolean;
}

export class SafetensorsFileWriter {
  private next = 0;
  /** Bytes of the next tensor written so far in parts (writePart). */
  private partBytes = 0;
  private state: 'open' | 'committed' | 'aborted' = 'open';
  /** The operation in progress; abort() waits for it so it never races a write. */
  private busy: Promise<void> | null = null;
  private readonly hash: Hash | null;
  /** Writes flushed to disk in the background as they go (file-io.ts). */
  private readonly flush: BackgroundFlush;

  private constructor(
    private readonly handle: FileHandle,
    readonly path: string,
    private readonly tempPath: string,
    private readonly entries: readonly TensorEntry[],
    private readonly dataOffset: number,
    /** The file the rename replaces: `path`, or the file a symlink at `path` points to. */
    private readonly target: string,
    /** With a checksum: the header again, given the digest. */
    private readonly headerWith: ((digest: string) => Uint8Array) | null,
  ) {
    this.hash = headerWith ? createHash('sha256') : null;
    this.flush = new BackgroundFlush(handle);
  }

  /** Creates the temporary file and writes the header; tensors follow with write(). */
  static async create(
    path: string,
    plan: readonly TensorPlan[],
    metadata: Readonly<Record<string, string>> | null,
    options: WriterOptions = {},
  ): Promise<SafetensorsFileWriter> {
    const headerWith = options.checksum
      ? (digest: string) => encodeHeader(plan, withDigest(metadata, digest)).bytes
      : null;
    const { bytes, entries } = encodeHeader(plan, headerWith ? withDigest(metadata, PLACEHOLDER) : metadata);
    const target = await resolveOutput(path);
    const tempPath = tempPathFor(target);
    let fh: FileHandle;
    try {
      fh = await open(tempPath, 'wx'); // wx: never clobber anything, even a stale temp file
    } catch (err) {
      forgetTemp(tempPath); // not ours: a signal must not remove it
      throw writeError(path, err);
    }
    const writer = new SafetensorsFileWriter(fh, path, tempPath, entries, bytes.length, target, headerWith);
    await writer.run(() => writer.writeAt(bytes, 0));
    return writer;
  }

  /** The data section's SHA-256 (hex), once every tensor is written; null without checksum. */
  digest: string | null = null;

  /** The file's size once complete: header plus every planned tensor. */
  get fileBytes(): number {
    return this.dataOffset + (this.entries.at(-1)?.end ?? 0);
  }

  /** Writes the next tensor of the plan; its bytes must match the plan exactly. */
  async write(name: string, data: Uint8Array): Promise<void> {
    return this.put(name, data, false);
  }

  /**
   * Writes the next part of the next tensor of the plan (a tensor computed in slices): parts
   * follow each other, and the tensor is complete once they add up to its planned bytes.
   */
  async writePart(name: string, data: Uint8Array): Promise<void> {
    return this.put(name, data, true);
  }

  private async put(name: string, data: Uint8Array, part: boolean): Promise<void> {
    this.assertIdle('write');
    const entry = this.entries[this.next];
    if (entry === undefined) {
      return this.fail(
        `tensor ${JSON.stringify(name)} written after all ${this.entries.length} planned tensors`,
      );
    }
    if (entry.name !== name) {
      return this.fail(
        `tensors must be written in plan order: expected ${JSON.stringify(entry.name)}, got ${JSON.stringify(name)}`,
      );
    }
    const size = entry.end - entry.begin;
    if (part ? this.partBytes + data.length > size : this.partBytes > 0 || data.length !== size) {
      return this.fail(
        `tensor ${JSON.stringify(name)} has ${this.partBytes + data.length} bytes, its plan needs ${size}`,
      );
    }
    const at = this.dataOffset + entry.begin + this.partBytes;
    this.partBytes += data.length;
    if (this.partBytes === size) {
      this.next++;
      this.partBytes = 0;
    }
    // the write runs on libuv's threads while this one hashes the same bytes: neither waits for
    // the other (hashing first cost a model run 0.3 s of its 1.9 s)
    const writing = this.run(() => this.writeAt(data, at));
    writing.catch(() => undefined); // awaited below: a failure meanwhile is not unhandled
    if (this.hash) await hashInSlices(this.hash, data);
    await writing;
    this.flush.wrote(data.length);
  }

  /** Flushes the file to disk and renames it over `path`. */
  async commit(): Promise<void> {
    this.assertIdle('commit');
    const missing = this.entries[this.next];
    if (missing !== undefined) {
      return this.fail(`commit before tensor ${JSON.stringify(missing.name)} (and any after it) was written`);
    }
    await this.run(async () => {
      await this.flush.settle();
      if (this.hash && this.headerWith) {
        this.digest = this.hash.digest('hex');
        const header = this.headerWith(this.digest);
        if (header.length !== this.dataOffset) throw new Error('the checksummed header changed length');
        await this.writeAt(header, 0);
      }
      await this.handle.sync();
      await this.handle.close();
      await renameTemp(this.tempPath, this.target);
      this.state = 'committed';
    });
    await syncDirectory(dirname(this.target));
  }

  /** Discards everything written; `path` is left as it was. Safe to call at any time. */
  async abort(): Promise<void> {
    if (this.state !== 'open') return;
    this.state = 'aborted';
    await this.busy?.catch(() => undefined);
    await this.flush.quiet();
    await this.handle.close().catch(() => undefined);
    await removeTemp(this.tempPath);
  }

  /** A writer that was misused is abandoned whole: nothing it wrote may survive. */
  private async fail(detail: string): Promise<never> {
    await this.abort();
    throw internal(detail);
  }

  private assertIdle(op: string): void {
    if (this.state !== 'open') throw internal(`${op} on a safetensors writer that was ${this.state}`);
    if (this.busy !== null) throw internal(`${op} while a previous write has not finished`);
  }

  /** Runs one I/O step; any failure aborts the writer and becomes OUTPUT_UNWRITABLE. */
  private async run(step: () => Promise<void>): Promise<void> {
    const pending = step();
    this.busy = pending;
    try {
      await pending;
    } catch (err) {
      this.busy = null;
      await this.abort();
      throw writeError(this.path, err);
    }
    this.busy = null;
  }

  private writeAt(data: Uint8Array, position: number): Promise<void> {
    return writeFully(this.handle, data, position);
  }
}

export { writeFileAtomic };
