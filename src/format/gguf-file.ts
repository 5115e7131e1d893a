/**
 * GGUF files on disk, one tensor at a time. The reader holds the header (metadata and tensor
 * infos) and reads tensors on demand; the writer writes the header first — every size is known
 * up front from shapes and types — and then streams tensors in plan order, each padded to the
 * alignment. The writer is atomic like the safetensors one: a hidden temporary file beside the
 * target, fsynced and renamed over it on commit, so the target never holds a partial file.
 */
import { open, type FileHandle } from 'node:fs/promises';
import { dirname } from 'node:path';

import { QuantdError } from '../errors/index.js';
import {
  BackgroundFlush,
  openRegularFile,
  forgetTemp,
  readFully,
  removeTemp,
  renameTemp,
  resolveOutput,
  tempPathFor,
  writeError,
  writeFully,
} from './file-io.js';
import {
  GgufNeedMore,
  parseGgufHeader,
  planGguf,
  type GgufHeader,
  type GgufKv,
  type GgufTensorInfo,
  type GgufTensorPlan,
} from './gguf.js';

/** Largest header (metadata + tensor infos) the reader accepts: tokenizer vocabularies are big. */
export const GGUF_HEADER_LIMIT = 512 * 1024 * 1024;
const FIRST_READ = 1024 * 1024;

function readAt(fh: FileHandle, position: number, length: number, path: string): Promise<Uint8Array> {
  return readFully(
    fh,
    new Uint8Array(length),
    position,
    path,
    (done) =>
      new QuantdError('GGUF_INVALID', {
        source: path,
        detail: `the file ended at byte ${position + done} while reading ${length} bytes at ${position}`,
      }),
  );
}

export class GgufFileReader {
  private handle: FileHandle | null;

  private constructor(
    handle: FileHandle,
    readonly path: string,
    readonly size: number,
    readonly header: GgufHeader,
  ) {
    this.handle = handle;
  }

  /** Opens `path` and reads and validates its header (metadata and tensor infos). */
  static async open(path: string, options: { headerLimit?: number } = {}): Promise<GgufFileReader> {
    const fh = await openRegularFile(path);
    try {
      const size = (await fh.stat()).size;
      const limit = options.headerLimit ?? GGUF_HEADER_LIMIT;
      let length = Math.min(size, FIRST_READ);
      for (;;) {
        const bytes = await readAt(fh, 0, length, path);
        try {
          return new GgufFileReader(fh, path, size, parseGgufHeader(bytes, size, path));
        } catch (err) {
          if (!(err instanceof GgufNeedMore)) throw err;
          if (err.bytes > limit) {
            throw new QuantdError('GGUF_INVALID', {
              source: path,
              detail: `the metadata and tensor infos exceed ${limit} bytes`,
            });
          }
          length = Math.min(size, limit, Math.max(2 * length, err.bytes));
        }
      }
    } catch (err) {
      await fh.close().catch(() => undefined);
      throw err;
    }
  }

  /** The bytes of one tensor (without padding), in a fresh buffer. */
  async read(tensor: GgufTensorInfo): Promise<Uint8Array> {
    if (this.handle === null) {
      throw new QuantdError('INTERNAL', {
        detail: `read of GGUF tensor ${JSON.stringify(tensor.name)} after close`,
      });
    }
    return readAt(this.handle, this.header.dataOffset + tensor.offset, tensor.bytes, this.path);
  }

  async close(): Promise<void> {
    const fh = this.handle;
    this.handle = null;
    await fh?.close();
  }
}

// --- writing ---------------------------------------------------------------------------------

export class GgufFileWriter {
  private next = 0;
  /** Bytes of the next tensor written so far in parts (writePart). */
  private partBytes = 0;
  private state: 'open' | 'committed' | 'aborted' = 'open';
  private readonly zeros: Uint8Array;
  /** Writes flushed to disk in the background as they go (file-io.ts). */
  private readonly flush: BackgroundFlush;

  private constructor(
    private readonly handle: FileHandle,
    readonly path: string,
    private readonly tempPath: string,
    private readonly target: string,
    /** The planned tensors, with their offsets in the data section. */
    readonly tensors: readonly GgufTensorInfo[],
    readonly dataOffset: number,
    readonly alignment: number,
  ) {
    this.zeros = new Uint8Array(alignment);
    this.flush = new BackgroundFlush(handle);
  }

  /** Lays the file out, creates the temporary file and writes the header. */
  static async create(
    path: string,
    kvs: readonly GgufKv[],
    tensors: readonly GgufTensorPlan[],
  ): Promise<GgufFileWriter> {
    const plan = planGguf(kvs, tensors);
    const target = await resolveOutput(path);
    const tempPath = tempPathFor(target);
    let fh: FileHandle;
    try {
      fh = await open(tempPath, 'wx');
    } catch (err) {
      forgetTemp(tempPath); // not ours: a signal must not remove it
      throw writeError(path, err);
    }
    const writer = new GgufFileWriter(
      fh,
      path,
      tempPath,
      target,
      plan.tensors,
      plan.header.length,
      plan.alignment,
    );
    await writer.step(() => writer.writeAt(plan.header, 0));
    return writer;
  }

  /** The complete file's size: header plus every tensor with its padding. */
  get fileBytes(): number {
    const last = this.tensors.at(-1);
    return this.dataOffset + (last ? this.padded(last.offset + last.bytes) : 0);
  }

  private padded(n: number): number {
    return Math.ceil(n / this.alignment) * this.alignment;
  }

  /** Writes the next planned tensor (exactly its planned bytes) and its padding. */
  async write(name: string, data: Uint8Array): Promise<void> {
    return this.put(name, data, false);
  }

  /**
   * Writes the next part of the next planned tensor (a weight encoded in slices); its padding
   * follows the part that completes it.
   */
  async writePart(name: string, data: Uint8Array): Promise<void> {
    return this.put(name, data, true);
  }

  private async put(name: string, data: Uint8Array, part: boolean): Promise<void> {
    if (this.state !== 'open')
      throw new QuantdError('INTERNAL', { detail: `write on a GGUF writer that was ${this.state}` });
    const t = this.tensors[this.next];
    const fail = async (detail: string): Promise<never> => {
      await this.abort();
      throw new QuantdError('INTERNAL', { detail });
    };
    if (t === undefined) return fail(`GGUF tensor ${JSON.stringify(name)} written after all planned tensors`);
    if (t.name !== name) {
      return fail(
        `GGUF tensors must be written in plan order: expected ${JSON.stringify(t.name)}, got ${JSON.stringify(name)}`,
      );
    }
    const done = this.partBytes + data.length;
    if (part ? done > t.bytes : this.partBytes > 0 || data.length !== t.bytes) {
      return fail(`GGUF tensor ${JSON.stringify(name)} has ${done} bytes, its plan needs ${t.bytes}`);
    }
    const at = this.dataOffset + t.offset + this.partBytes;
    const complete = done === t.bytes;
    this.partBytes = complete ? 0 : done;
    if (complete) this.next++;
    const pad = complete ? this.padded(t.bytes) - t.bytes : 0;
    await this.step(async () => {
      await this.writeAt(data, at);
      if (pad > 0) await this.writeAt(this.zeros.subarray(0, pad), at + data.length);
    });
    this.flush.wrote(data.length + pad);
  }

  /** Flushes to disk and renames the file into place. */
  async commit(): Promise<void> {
    if (this.state !== 'open')
      throw new QuantdError('INTERNAL', { detail: `commit on a GGUF writer that was ${this.state}` });
    const missing = this.tensors[this.next];
    if (missing !== undefined) {
      await this.abort();
      throw new QuantdError('INTERNAL', {
        detail: `commit before GGUF tensor ${JSON.stringify(missing.name)} was written`,
      });
    }
    await this.step(async () => {
      await this.flush.settle();
      await this.handle.sync();
      await this.handle.close();
      await renameTemp(this.tempPath, this.target);
      this.state = 'committed';
    });
    try {
      const dir = await open(dirname(this.target), 'r');
      await dir.sync().finally(() => dir.close());
    } catch {
      // best effort: some file systems refuse to fsync a directory
    }
  }

  /** Discards the temporary file; the target is left as it was. */
  async abort(): Promise<void> {
    if (this.state !== 'open') return;
    this.state = 'aborted';
    await this.flush.quiet();
    await this.handle.close().catch(() => undefined);
    await removeTemp(this.tempPath);
  }

  private async step(run: () => Promise<void>): Promise<void> {
    try {
      await run();
    } catch (err) {
      await this.abort();
      throw writeError(this.path, err);
    }
  }

  private writeAt(data: Uint8Array, position: number): Promise<void> {
    return writeFully(this.handle, data, position);
  }
}
