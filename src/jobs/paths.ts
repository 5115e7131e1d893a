/**
 * The data directory of jobs (QUANTD_DATA_DIR) and the safety of the paths that reach it.
 *
 * Layout:
 *   <data>/jobs/<id>/job.json            the job (written atomically)
 *   <data>/jobs/<id>/input.safetensors   an uploaded model
 *   <data>/jobs/<id>/result/             the result: one file, or the shards and their index
 *   <data>/jobs/<id>/report.json         the quality report
 *
 * Job ids are random UUIDs and are checked against their pattern before they are used in a
 * path: anything else is JOB_NOT_FOUND, so that an id like `../../etc` never reaches the file
 * system. A model given by path (the JSON form of POST /v1/jobs) is resolved inside the data
 * directory with symlinks followed — the path itself, and every file a job on it may read or copy
 * (the shards an index names, every file of a model folder, the files a layout's options name)
 * — and must stay inside it and outside the jobs area (other jobs' uploads and results are not
 * inputs): anything else is PATH_FORBIDDEN. An uploaded folder is checked likewise against the
 * job's own directory (ReadRoots, the one check).
 */
import { randomUUID } from 'node:crypto';
import type { Dirent } from 'node:fs';
import { lstat, readdir, realpath, stat } from 'node:fs/promises';
import { basename, dirname, isAbsolute, join, relative, resolve, sep } from 'node:path';
import { QuantdError } from '../errors/index.js';
import { resolveModelInput, type ModelInput } from '../service/index.js';

/** A version 4 UUID, lower case, as randomUUID() makes them. */
const JOB_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

export function newJobId(): string {
  return randomUUID();
}

export function isJobId(id: string): boolean {
  return JOB_ID.test(id);
}

/** Whether a name in a job's directory is a run's directory (DataDir.runDir). */
export const isRunDirName = (name: string): boolean => /^run\.\d+$/.test(name);

/** `id` if it is a job id; JOB_NOT_FOUND otherwise (it names no job, whatever it names). */
export function checkJobId(id: string): string {
  if (!isJobId(id)) throw new QuantdError('JOB_NOT_FOUND', { id: printable(id) });
  return id;
}

/** Short and printable: a user's string echoed in a message. */
export function printable(text: string): string {
  const shown = text.replace(/[^\x20-\x7e]/g, '?');
  return shown.length > 200 ? `${shown.slice(0, 200)}…` : shown;
}

/** The input file name of an upload, and the result name of a single-file upload. */
export const UPLOAD_NAME = 'input.safetensors';
export const UPLOAD_RESULT_NAME = 'model.safetensors';
/** The folder an uploaded model folder is unpacked into. */
export const UPLOAD_FOLDER_NAME = 'input';

export class DataDir {
  /** The data directory, absolute. */
  readonly root: string;
  readonly jobs: string;

  constructor(root: string) {
    this.root = resolve(root);
    this.jobs = join(this.root, 'jobs');
  }

  jobDir(id: string): string {
    return join(this.jobs, checkJobId(id));
  }

  jobFile(id: string): string {
    return join(this.jobDir(id), 'job.json');
  }

  uploadFile(id: string): string {
    return join(this.jobDir(id), UPLOAD_NAME);
  }

  /** Where an uploaded model folder (an application/x-tar body) is unpacked. */
  uploadFolder(id: string): string {
    return join(this.jobDir(id), UPLOAD_FOLDER_NAME);
  }

  /** The input of an upload: the file, or the folder. */
  uploadInput(id: string, folder: boolean): string {
    return folder ? this.uploadFolder(id) : this.uploadFile(id);
  }

  resultDir(id: string): string {
    return join(this.jobDir(id), 'result');
  }

  /** Where attempt `attempt` of a job writes its files before they are published as its result. */
  runDir(id: string, attempt: number): string {
    return join(this.jobDir(id), `run.${attempt}`);
  }

  reportFile(id: string): string {
    return join(this.jobDir(id), 'report.json');
  }

  /** How messages name a path under the data directory: relative to it. */
  shown(path: string): string {
    const rel = relative(this.root, path);
    return rel === '' ? '.' : rel;
  }
}

const inside = (root: string, path: string): boolean => path === root || path.startsWith(root + sep);

function forbidden(path: string, detail: string): QuantdError {
  return new QuantdError('PATH_FORBIDDEN', { path: printable(path), detail });
}

export interface ResolvedInput {
  /** The model's path with symlinks resolved (what the job reads). */
  readonly path: string;
  readonly model: ModelInput;
}

/** Whether a directory entry exists at `path` (a symlink counts, wherever it leads). */
async function present(path: string): Promise<boolean> {
  try {
    await lstat(path);
    return true;
  } catch {
    return false;
  }
}

/** A path's real path, with a missing file FILE_NOT_FOUND (named as the user gave it). */
async function real(path: string, shown: string): Promise<string> {
  try {
    return await realpath(path);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR')
      throw new QuantdError('FILE_NOT_FOUND', { path: printable(shown) });
    if (code === 'ELOOP') throw forbidden(shown, 'is a symlink loop');
    throw new QuantdError('FILE_UNREADABLE', { path: printable(shown), detail: (err as Error).message });
  }
}

/**
 * Where a job may read: the one path check every file it reads goes through. A file's real path
 * (symlinks followed, each of them) must lie inside `allow` and outside `deny`; anything else is
 * PATH_FORBIDDEN, named as the client named it.
 */
class ReadRoots {
  constructor(
    /** The directory files must lie in, its real path. */
    readonly allow: string,
    private readonly deny: string | null,
    /** What `allow` is, for messages: "the data directory", "the job's own upload". */
    private readonly what: string,
  ) {}

  /** The roots of a job reading a path it names: the data directory, but not its jobs area. */
  static async forPaths(data: DataDir): Promise<ReadRoots> {
    const root = await real(data.root, '.');
    return new ReadRoots(root, join(root, 'jobs'), 'the data directory');
  }

  /** The roots of a job reading its own upload: its own directory, nothing else. */
  static async forUpload(data: DataDir, id: string): Promise<ReadRoots> {
    return new ReadRoots(await real(data.jobDir(id), 'upload'), null, "the job's own upload");
  }

  /** `path`'s real path, if a job may read it. */
  async check(path: string, shown: string): Promise<string> {
    const resolved = await real(path, shown);
    if (!inside(this.allow, resolved))
      throw forbidden(shown, `leads outside ${this.what} (through a symlink)`);
    if (this.deny !== null && inside(this.deny, resolved)) {
      throw forbidden(shown, "is in the data directory's jobs area, which holds jobs' own files, not inputs");
    }
    return resolved;
  }

  /**
   * For a model folder (`path`, real and allowed), every entry that is not a plain directory: the
   * files a folder output copies (README.md, tokenizer files, anything) and those layouts read
   * (config.json, tokenizer.model, the index) are among them. Checked before any is read: an
   * index that is a link to /etc/passwd would otherwise be parsed, and its first bytes quoted in
   * the parse error.
   */
  async checkFolder(path: string, shown: string): Promise<void> {
    if (!(await isFolder(path))) return;
    let entries: Dirent[];
    try {
      entries = await readdir(path, { withFileTypes: true });
    } catch (err) {
      throw new QuantdError('FILE_UNREADABLE', { path: printable(shown), detail: (err as Error).message });
    }
    for (const entry of entries) {
      if (entry.isDirectory()) continue; // not read (a symlink to one is not a directory entry)
      try {
        await this.check(join(path, entry.name), join(shown, entry.name));
      } catch (err) {
        // a dangling link is read by nothing (a folder output skips it): not a reason to refuse
        if (!(err instanceof QuantdError && err.code === 'FILE_NOT_FOUND')) throw err;
      }
    }
  }

  /**
   * The model's own files (the index and its shards, each of which may be a symlink elsewhere) and
   * the files a layout's options name beside the weights (`named`: calibration=, imatrix=).
   */
  async checkModel(path: string, shown: string, model: ModelInput, named: readonly string[]): Promise<void> {
    const showing = (file: string): string => join(shown, relative(path, file));
    for (const file of [...(model.index === null ? [] : [model.index]), ...model.files]) {
      await this.check(file, showing(file));
    }
    const folder = model.files.length > 0 ? dirname(model.files[0]!) : path;
    for (const name of named) {
      const file = resolve(folder, name);
      if (await present(file)) await this.check(file, showing(file));
    }
  }
}

async function isFolder(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isDirectory();
  } catch {
    return false;
  }
}

/**
 * Resolves `input` (relative to the data directory, or absolute inside it) to the model it names.
 * Refused with PATH_FORBIDDEN: paths that lead outside the data directory — by `..`, by being
 * absolute elsewhere, or through a symlink, of the path or of any file the job may read
 * (ReadRoots.checkFolder and checkModel; `named`: the files its layout options name) — and paths
 * into the jobs area. A missing file is FILE_NOT_FOUND; a malformed index or directory the catalogue error
 * of resolveModelInput.
 */
export async function resolveInputPath(
  data: DataDir,
  input: string,
  named: readonly string[] = [],
): Promise<ResolvedInput> {
  if (input === '' || input.includes('\0')) throw forbidden(input, 'is not a path');
  const candidate = resolve(data.root, input);
  const lexical = relative(data.root, candidate);
  if (lexical === '..' || lexical.startsWith(`..${sep}`) || isAbsolute(lexical)) {
    throw forbidden(input, 'is outside the data directory; give a path relative to it');
  }
  const roots = await ReadRoots.forPaths(data);
  const path = await roots.check(candidate, input);
  await roots.checkFolder(path, input);
  let model: ModelInput;
  try {
    model = await resolveModelInput(path);
  } catch (err) {
    throw relativeTo(err, roots.allow);
  }
  await roots.checkModel(path, input, model, named);
  return { path, model };
}

/**
 * The model folder of a folder upload (`folder`, unpacked from the archive: regular files only),
 * checked as a folder named by path is, against the job's own directory: what the job reads is
 * its upload and nothing else, even if something changed the folder after it was unpacked.
 */
export async function checkUploadedFolder(
  data: DataDir,
  id: string,
  folder: string,
  named: readonly string[] = [],
): Promise<ModelInput> {
  const roots = await ReadRoots.forUpload(data, id);
  const shown = join('upload', basename(folder));
  const path = await roots.check(folder, shown);
  await roots.checkFolder(path, shown);
  const model = await resolveModelInput(path);
  await roots.checkModel(path, shown, model, named);
  return model;
}

/** An error with the paths in its parameters shown relative to the data directory. */
function relativeTo(err: unknown, root: string): unknown {
  if (!(err instanceof QuantdError)) return err;
  const params = Object.fromEntries(
    Object.entries(err.params).map(([k, v]) => [k, typeof v === 'string' ? v.split(root + sep).join('') : v]),
  );
  return new QuantdError(err.code, params);
}

/**
 * An error as a client sees it: the paths in its parameters relative to the data directory, and
 * job `id`'s upload named "upload" (where it is stored is the server's business).
 */
export function clientError(err: unknown, data: DataDir, id: string): unknown {
  if (!(err instanceof QuantdError)) return err;
  const upload = data.uploadFile(id);
  const root = data.root + sep;
  const params = Object.fromEntries(
    Object.entries(err.params).map(([k, v]) => [
      k,
      typeof v === 'string' ? v.split(upload).join('upload').split(root).join('') : v,
    ]),
  );
  return new QuantdError(err.code, params);
}
