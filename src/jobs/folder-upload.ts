/**
 * A model folder uploaded as one application/x-tar body (what `quantd … --remote URL` sends for a
 * folder): an UploadSink for receiveUpload (store.ts) that unpacks the archive as it arrives into
 * the job's input folder — `input/FOLDER/NAME`, so the model keeps its folder's name — member by
 * member, each file created new (never over another) and fsynced before the upload is accepted.
 * An archive that is not the plain kind ../format/tar.ts reads is ARCHIVE_INVALID, and
 * receiveUpload removes the folder.
 */
import { mkdir, open, readdir, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';

import { QuantdError } from '../errors/index.js';
import { TarReader } from '../format/tar.js';
import type { UploadSink } from './store.js';

/** The model folder an upload unpacked into `dir` (its one subfolder). */
export async function unpackedFolder(dir: string): Promise<string> {
  const entries = await readdir(dir, { withFileTypes: true });
  const folders = entries.filter((e) => e.isDirectory());
  if (folders.length !== 1 || entries.length !== 1) {
    throw new QuantdError('ARCHIVE_INVALID', { detail: 'the archive does not hold exactly one folder' });
  }
  return join(dir, folders[0]!.name);
}

export async function openFolderSink(dir: string): Promise<UploadSink> {
  await mkdir(dir);
  let file: FileHandle | null = null;
  const reader = new TarReader({
    start: async (folder, name) => {
      await mkdir(join(dir, folder), { recursive: true });
      file = await open(join(dir, folder, name), 'wx');
    },
    data: async (bytes) => {
      await file!.write(bytes);
    },
    end: async () => {
      const done = file!;
      file = null;
      await done.sync().finally(() => done.close());
    },
  });
  return {
    writev: async (buffers) => {
      for (const b of buffers) await reader.push(b);
    },
    sync: async () => {
      reader.finish();
      const handle = await open(dir, 'r');
      await handle.sync().finally(() => handle.close());
    },
    close: async () => {
      const open = file as FileHandle | null;
      file = null;
      await open?.close();
    },
  };
}
