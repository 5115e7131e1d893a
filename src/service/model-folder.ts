/**
 * Model folders: a Hugging Face-style folder in (config.json, tokenizer files, README.md, … beside
 * the safetensors weights) gives a folder out that loads the way the input did. The writers of
 * the weights (./model.ts for qtensor outputs, ./layouts/write-folder.ts for the interop layouts)
 * use this module for what every folder output shares: where it may go, and the input's other
 * files copied across byte for byte.
 *
 * What is copied: every regular file at the top of the input folder (symlinks followed, as in a
 * Hugging Face cache snapshot) except the weights themselves — `*.safetensors` and their
 * `*.safetensors.index.json`, which the quantized ones replace, and the same weights in other
 * formats (`.bin`, `.pt`, `.pth`, `.ckpt`, `.h5`, `.msgpack`, `.gguf` and their `.index.json`),
 * which would be the float model again. Subfolders are not copied: in published models they hold
 * other copies of the weights (`original/`) or tool state (`.cache/`), not what a loader reads.
 */
import { access, constants, mkdir, readdir, rmdir, stat } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { QuantdError } from '../errors/index.js';
import { copyFileAtomic } from '../format/file-io.js';

/** Weight files a folder output does not take from its input (see the file comment). */
const WEIGHT_FILE =
  /(?:\.safetensors|\.safetensors\.index\.json|\.(?:bin|pt|pth|ckpt|h5|msgpack|gguf)(?:\.index\.json)?)$/i;

/** quantd's own temporary files and staging directories, never part of a model. */
const QUANTD_TEMPORARY = /\.quantd-(?:tmp|staging)-/;

export async function isDirectory(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isDirectory();
  } catch {
    return false; // not there (yet): the reader or the writer reports it
  }
}

/** Whether a file of a model folder is copied into its folder output. */
export function isCopiedFile(name: string): boolean {
  return !WEIGHT_FILE.test(name) && !QUANTD_TEMPORARY.test(name);
}

/**
 * The names of the files of `dir` a folder output copies, sorted. Each must be readable: a run
 * is refused before it writes anything rather than failing halfway through the copies.
 */
export async function companionFiles(dir: string): Promise<string[]> {
  let names: string[];
  try {
    names = (await readdir(dir)).sort();
  } catch (err) {
    throw new QuantdError('FILE_UNREADABLE', { path: dir, detail: (err as Error).message });
  }
  const files: string[] = [];
  for (const name of names) {
    if (!isCopiedFile(name)) continue;
    // stat follows symlinks: a cache snapshot's files are links to its blobs
    const info = await stat(join(dir, name)).catch(() => null);
    if (!info?.isFile()) continue;
    await access(join(dir, name), constants.R_OK).catch((err: Error) => {
      throw new QuantdError('FILE_UNREADABLE', { path: join(dir, name), detail: err.message });
    });
    files.push(name);
  }
  return files;
}

/** Copies `names` (companionFiles) from `inputDir` into `outputDir`, each atomically; returns their paths. */
export async function copyCompanions(
  inputDir: string,
  outputDir: string,
  names: readonly string[],
): Promise<string[]> {
  const written: string[] = [];
  for (const name of names) {
    const path = join(outputDir, name);
    await copyFileAtomic(join(inputDir, name), path);
    written.push(path);
  }
  return written;
}

/**
 * Makes the output folder of a model read from `inputDir` (created if missing). Refuses the
 * input's own folder, whose files the output would replace while they are read, and a path that
 * is a file (`what` the output is, for that message). Returns the first directory it created, if any, for removeCreated after a failure.
 */
export async function openOutputFolder(
  output: string,
  inputDir: string,
  what: 'a sharded model' | 'a model folder',
): Promise<string | undefined> {
  if (await sameDirectory(output, inputDir)) {
    throw new QuantdError('OUTPUT_UNWRITABLE', {
      path: output,
      detail: "it is the input model's own directory; write the quantized model elsewhere",
    });
  }
  try {
    return await mkdir(output, { recursive: true });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const detail =
      code === 'EEXIST' || code === 'ENOTDIR'
        ? `it is a file; ${what} needs a directory`
        : (err as Error).message;
    throw new QuantdError('OUTPUT_UNWRITABLE', { path: output, detail });
  }
}

/** Removes, after a failed run, the directories it created: from `output` up to `created` (empty ones only). */
export async function removeCreated(output: string, created: string): Promise<void> {
  const top = resolve(created);
  for (let dir = resolve(output); ; dir = dirname(dir)) {
    if (
      !(await rmdir(dir).then(
        () => true,
        () => false,
      ))
    )
      return;
    if (dir === top || dirname(dir) === dir) return;
  }
}

/** Whether two paths name one directory (through symlinks too); false when `a` does not exist yet. */
export async function sameDirectory(a: string, b: string): Promise<boolean> {
  if (resolve(a) === resolve(b)) return true;
  try {
    const [sa, sb] = await Promise.all([stat(a), stat(b)]);
    return sa.dev === sb.dev && sa.ino === sb.ino;
  } catch {
    return false;
  }
}
