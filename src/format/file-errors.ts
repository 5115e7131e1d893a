/**
 * File system failures as catalogued errors, shared by the file readers and atomic writers of
 * every container (safetensors, GGUF, ONNX): one wording for one failure, whichever format.
 */
import { randomBytes } from 'node:crypto';
import { open, realpath, stat, type FileHandle } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';

import { QuantdError } from '../errors/index.js';

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

/** A temporary name beside `path` for an atomic write, under NAME_MAX (255) however long its name. */
export function tempPathFor(path: string): string {
  const base = basename(path).slice(0, 200);
  return join(dirname(path), `.${base}.quantd-tmp-${process.pid}-${randomBytes(6).toString('hex')}`);
}

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
