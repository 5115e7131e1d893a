/**
 * File I/O shared by every reader and writer (safetensors, GGUF, ONNX, the job store, reports,
 * the CLI): exact reads, complete writes, atomic replacement (a temporary file beside the target,
 * fsynced, renamed, the directory synced), and file-system failures as catalogued errors — one
 * wording for one failure, whichever format.
 */
import type { Hash } from 'node:crypto';
import { copyFile, open, readFile, realpath, stat, type FileHandle } from 'node:fs/promises';
import { dirname } from 'node:path';

import { QuantdError } from '../errors/index.js';
import { removeTemp, renameTemp, tempPathFor } from './temp-files.js';

export function errorCode(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException | null)?.code;
}

export function errorDetail(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

const WRITE_ERRORS: Readonly<Record<string, string>> = {
  ENOENT: 'its directory does not exist',
  ENOTDIR: 'a component of the path is not a directory',
  EACCES: 'permission denied',
  EPERM: 'permission denied',
  EROFS: 'read-only file system',
  ENOSPC: 'no space left on device',
  EDQUOT: 'disk quota exceeded',
  EISDIR: 'it is a directory',
};

/** A failed write as a catalogued error: STORAGE_FULL when the disk or quota is full. */
export function writeError(path: string, err: unknown): QuantdError {
  if (err instanceof QuantdError) return err;
  const code = errorCode(err);
  if (code === 'ENOSPC' || code === 'EDQUOT') return new QuantdError('STORAGE_FULL', { path });
  return new QuantdError('OUTPUT_UNWRITABLE', { path, detail: writeErrorDetail(err) });
}

/** Why a write failed, without the temporary file's name (which differs on every run). */
function writeErrorDetail(err: unknown): string {
  const code = errorCode(err);
  return code !== undefined && WRITE_ERRORS[code] !== undefined
    ? `${WRITE_ERRORS[code]} (${code})`
    : errorDetail(err);
}

/**
 * The file a rename must replace: an output path that is a symlink is resolved, so that the
 * rename replaces the file and not the link; an existing non-regular file (a directory, a
 * device) is refused rather than replaced.
 */
export async function resolveOutput(path: string): Promise<string> {
  let target: string;
  try {
    target = await realpath(path);
  } catch (err) {
    if (errorCode(err) === 'ENOENT') return path; // a new file
    throw new QuantdError('OUTPUT_UNWRITABLE', { path, detail: writeErrorDetail(err) });
  }
  const info = await stat(target);
  if (!info.isFile()) {
    throw new QuantdError('OUTPUT_UNWRITABLE', {
      path,
      detail: info.isDirectory() ? 'it is a directory' : 'it exists and is not a regular file',
    });
  }
  return target;
}

export { forgetTemp, tempPathFor, renameTemp, removeTemp } from './temp-files.js';

/**
 * Opens a regular file for reading: FILE_NOT_FOUND, or FILE_UNREADABLE for a directory, a
 * device or an open that fails. stat comes first: opening a FIFO would block until a writer
 * appears.
 */
export async function openRegularFile(path: string): Promise<FileHandle> {
  try {
    const info = await stat(path);
    if (!info.isFile()) {
      throw new QuantdError('FILE_UNREADABLE', {
        path,
        detail: info.isDirectory() ? 'is a directory' : 'not a regular file',
      });
    }
    return await open(path, 'r');
  } catch (err) {
    if (err instanceof QuantdError) throw err;
    const code = errorCode(err);
    if (code === 'ENOENT' || code === 'ENOTDIR') throw new QuantdError('FILE_NOT_FOUND', { path });
    throw new QuantdError('FILE_UNREADABLE', { path, detail: errorDetail(err) });
  }
}

/**
 * Reads exactly `into.length` bytes at `position`, looping over short reads. A read error is
 * FILE_UNREADABLE naming `path`; the end of the file before the last byte is `short(done)`, the
 * format's own error (the size came from fstat: the file shrank, or its header lies).
 */
export async function readFully(
  fh: FileHandle,
  into: Uint8Array,
  position: number,
  path: string,
  short: (done: number) => QuantdError,
): Promise<Uint8Array> {
  let done = 0;
  while (done < into.length) {
    let bytesRead: number;
    try {
      ({ bytesRead } = await fh.read(into, done, into.length - done, position + done));
    } catch (err) {
      throw new QuantdError('FILE_UNREADABLE', { path, detail: errorDetail(err) });
    }
    if (bytesRead === 0) throw short(done);
    done += bytesRead;
  }
  return into;
}

/** Writes all of `data` at `position`, looping over short writes. */
export async function writeFully(fh: FileHandle, data: Uint8Array, position: number): Promise<void> {
  let done = 0;
  while (done < data.length) {
    const { bytesWritten } = await fh.write(data, done, data.length - done, position + done);
    done += bytesWritten;
  }
}

/**
 * Makes a rename in `dir` durable. Best effort: some platforms and file systems refuse to fsync
 * a directory, and the data is already safely in the renamed file by then.
 */
export async function syncDirectory(dir: string): Promise<void> {
  try {
    const fh = await open(dir, 'r');
    await fh.sync().finally(() => fh.close());
  } catch {
    // ignored, see above
  }
}

/** A small file's text, or null when there is none; FILE_UNREADABLE when it cannot be read. */
export async function readTextIfAny(path: string): Promise<string | null> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    if (errorCode(err) === 'ENOENT') return null;
    throw new QuantdError('FILE_UNREADABLE', { path, detail: (err as Error).message });
  }
}

/**
 * Writes a small file (a report, an index, a config, a job record) atomically: a temporary file
 * beside it, fsynced, renamed over `path`, the directory synced. Errors name `path`, never the
 * temporary file; no temporary file is left behind. `content` may come in pieces (an iterable of
 * strings): each is written before the next is asked for, so a large text is never whole in
 * memory, nor made on the event loop in one go.
 */
export async function writeFileAtomic(
  path: string,
  content: string | Uint8Array | Iterable<string>,
): Promise<void> {
  const temp = tempPathFor(path);
  try {
    const fh = await open(temp, 'wx');
    try {
      if (typeof content === 'string' || content instanceof Uint8Array) await fh.writeFile(content);
      else {
        let position = 0;
        for (const piece of content) {
          const bytes = Buffer.from(piece, 'utf8');
          await writeFully(fh, bytes, position);
          position += bytes.length;
        }
      }
      await fh.sync();
    } finally {
      await fh.close();
    }
    await renameTemp(temp, path);
  } catch (err) {
    await removeTemp(temp);
    throw writeError(path, err);
  }
  await syncDirectory(dirname(path));
}

/**
 * Copies `source` to `path` atomically, as writeFileAtomic writes: the copy goes to a temporary
 * file beside `path`, is fsynced and renamed over it, so a crash never leaves a partial copy
 * under the final name. An unreadable source is FILE_NOT_FOUND / FILE_UNREADABLE naming it
 * (opened first: copyFile's own errors name both paths, whichever side failed); a failed write
 * names `path`.
 */
export async function copyFileAtomic(source: string, path: string): Promise<void> {
  await (await openRegularFile(source)).close();
  const temp = tempPathFor(path);
  try {
    await copyFile(source, temp, 0);
    const fh = await open(temp, 'r+');
    await fh.sync().finally(() => fh.close());
    await renameTemp(temp, path);
  } catch (err) {
    await removeTemp(temp);
    throw writeError(path, err);
  }
  await syncDirectory(dirname(path));
}

/**
 * Hashing is synchronous: a slice at a time, yielding to the event loop between slices, keeps a
 * large tensor's or file's checksum from holding it (a 1 MiB slice hashes in about 2 ms).
 */
export const HASH_SLICE = 1024 * 1024;

export async function hashInSlices(hash: Hash, data: Uint8Array): Promise<void> {
  for (let at = 0; at < data.length; at += HASH_SLICE) {
    if (at > 0) await new Promise((resolve) => setImmediate(resolve));
    hash.update(data.subarray(at, at + HASH_SLICE));
  }
}

/**
 * Flushes of a file being written, started in the background every `every` bytes, so the disk
 * writes while the next tensors are computed and the fsync before the rename is short (measured:
 * 0.5 s of a 2 s model run went to one fsync at the end). One flush runs at a time.
 */
export class BackgroundFlush {
  private flushing: Promise<void> | null = null;
  private error: unknown = null;
  private unsynced = 0;

  constructor(
    private readonly handle: FileHandle,
    private readonly every = 64 * 1024 * 1024,
  ) {}

  /** Counts `bytes` just written; starts a flush when enough is unsynced and none is running. */
  wrote(bytes: number): void {
    this.unsynced += bytes;
    if (this.unsynced < this.every || this.flushing !== null) return;
    this.unsynced = 0;
    this.flushing = this.handle.datasync().then(
      () => void (this.flushing = null),
      (err: unknown) => {
        this.error = err;
        this.flushing = null;
      },
    );
  }

  /** Waits for the flush in progress; throws what any flush failed with. */
  async settle(): Promise<void> {
    await this.flushing;
    if (this.error !== null) throw this.error;
  }

  /** Waits for the flush in progress, whatever its outcome (before closing an abandoned file). */
  async quiet(): Promise<void> {
    await this.flushing;
  }
}
