/**
 * A job's result files are served only as they were written: before a file goes out (HTTP or
 * gRPC), its SHA-256 is checked against the one recorded when the job finished, so a file
 * damaged on disk (or changed by hand) is refused with RESULT_CORRUPT instead of served with its
 * old ETag. A check is remembered for the file as it is (inode, size, modification time): the
 * next download of an unchanged file costs nothing.
 */
import { createHash } from 'node:crypto';
import type { FileHandle } from 'node:fs/promises';
import { QuantdError } from '../errors/index.js';
import { hashInSlices } from '../format/file-io.js';
import { SafetensorsFileReader } from '../format/safetensors-file.js';
import type { ResultFile } from './store.js';

const READ_BYTES = 8 * 1024 * 1024;
const REMEMBERED = 4096;

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

/** The checks done, by path: the file's identity when it last matched. */
const verified = new Map<string, string>();

/**
 * Resolves when the file at `path` (open as `handle`) holds what the job recorded: its whole-file
 * SHA-256 (`sha256`), or, for results recorded before that field existed, its data section's
 * (`data_sha256`, safetensors). Throws RESULT_CORRUPT otherwise.
 */
export async function verifyResultFile(path: string, handle: FileHandle, file: ResultFile): Promise<void> {
  if (file.sha256 === undefined && file.data_sha256 === null) return; // nothing was recorded
  const stat = await handle.stat();
  const identity = `${stat.ino}:${stat.size}:${stat.mtimeMs}`;
  if (verified.get(path) === identity) return;
  let actual: string;
  let expected: string;
  if (file.sha256 !== undefined) {
    expected = file.sha256;
    actual = await fileSha256(handle, stat.size);
  } else {
    expected = file.data_sha256!;
    const reader = await SafetensorsFileReader.open(path);
    try {
      actual = await reader.dataSha256();
    } finally {
      await reader.close();
    }
  }
  if (actual !== expected) {
    verified.delete(path);
    throw new QuantdError('RESULT_CORRUPT', { file: file.name, expected, actual });
  }
  if (verified.size >= REMEMBERED) verified.delete(verified.keys().next().value!);
  verified.set(path, identity);
}
