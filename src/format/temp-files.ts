/**
 * Temporary files of atomic writes: their names, and a process-wide registry of the ones that
 * may exist right now, so that a process ended by a signal can remove them before it exits
 * (the CLI does, src/cli/signals.ts) and a later run can remove those a killed process left.
 *
 * A name is `.NAME.quantd-tmp-PID-RANDOM` beside its target: hidden, recognisably ours, and
 * carrying the PID of the process writing it, so that a leftover is known to be stale once that
 * process is gone.
 */
import { randomBytes } from 'node:crypto';
import { lstatSync, rmSync, unlinkSync } from 'node:fs';
import { lstat, readdir, rename, unlink } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';

/** `.NAME.quantd-tmp-PID-RANDOM`; group 1 is the PID. */
const TEMP_NAME = /^\..*\.quantd-tmp-(\d+)-[0-9a-f]{12}$/;

/** Paths that may exist now: a temporary file, or a staging directory (removed whole). */
const live = new Map<string, 'file' | 'dir'>();

/**
 * A temporary name beside `path` for an atomic write, under NAME_MAX (255) however long its
 * name. It is registered as live from here on: the caller creates it next, and ends it with
 * renameTemp or removeTemp.
 */
export function tempPathFor(path: string): string {
  const base = basename(path).slice(0, 200);
  const temp = join(dirname(path), `.${base}.quantd-tmp-${process.pid}-${randomBytes(6).toString('hex')}`);
  live.set(temp, 'file');
  return temp;
}

/** Registers a staging directory (of a sharded output) as live until forgetTemp. */
export function trackTempDirectory(path: string): void {
  live.set(path, 'dir');
}

/** The path no longer exists under that name (renamed or removed). */
export function forgetTemp(path: string): void {
  live.delete(path);
}

/** Renames a finished temporary file into place. */
export async function renameTemp(temp: string, target: string): Promise<void> {
  await rename(temp, target);
  live.delete(temp);
}

/** Removes a temporary file that will not be used, if it exists. */
export async function removeTemp(temp: string): Promise<void> {
  await unlink(temp).catch(() => undefined);
  live.delete(temp);
}

/**
 * Removes every live temporary path, synchronously: this runs in a signal handler right before
 * the process exits, when no asynchronous work gets another turn. Failures are ignored (a path
 * already renamed or removed is the common case).
 */
export function removeLiveTempsSync(): void {
  for (const [path, kind] of live) {
    try {
      if (kind === 'dir') rmSync(path, { recursive: true, force: true });
      else if (lstatSync(path).isFile()) unlinkSync(path);
    } catch {
      // gone already, or not ours to remove
    }
  }
  live.clear();
}

/** Whether a process with this id exists (EPERM: it does, as another user's). */
function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Removes the temporary files in `dir` that a process no longer running left behind (killed
 * with SIGKILL, or by a power cut). Those of running processes, this one included, are kept.
 * Returns the names removed. Best effort: an unreadable directory removes nothing.
 */
export async function removeStaleTemps(dir: string): Promise<string[]> {
  const names = await readdir(dir).catch(() => [] as string[]);
  const removed: string[] = [];
  for (const name of names) {
    const pid = Number(TEMP_NAME.exec(name)?.[1] ?? NaN);
    if (!Number.isSafeInteger(pid) || pid <= 0 || pid === process.pid || processAlive(pid)) continue;
    const path = join(dir, name);
    const info = await lstat(path).catch(() => undefined);
    if (!info?.isFile()) continue;
    if (
      await unlink(path).then(
        () => true,
        () => false,
      )
    )
      removed.push(name);
  }
  return removed;
}
