/**
 * The command line never destroys data: before any work, every file a command will write is
 * checked against every file it reads. An output that is an input — by name, through a symlink
 * or as a hard link (same device and inode) — is OUTPUT_IS_INPUT, whatever the flags; an output
 * that already exists is OUTPUT_EXISTS unless --force. Every command that writes files calls
 * guardOutputs with what it reads and what it will write.
 */
import type { Stats } from 'node:fs';
import { readdir, stat } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { QuantdError } from '../errors/index.js';
import { resolveModelInput } from '../service/shards.js';
import type { ParsedCommand } from './args.js';
import { defaultReportPath, usesRecipe } from './model-options.js';

/** What a command writes, as it will write it. */
export interface PlannedOutputs {
  /** Output files (the model file, a report). */
  readonly files: readonly string[];
  /**
   * A sharded model's output directory and the file names it will hold (shards, index,
   * report); the directory itself may exist, the files in it may not (without --force).
   */
  readonly directory?: { readonly path: string; readonly names: readonly string[] };
}

/** stat, or undefined when nothing is there (a new output, a path under a file). */
async function statOrNone(path: string): Promise<Stats | undefined> {
  try {
    return await stat(path);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return undefined;
    throw err;
  }
}

const identity = (info: Stats): string => `${info.dev}:${info.ino}`;

/** What a command reads for its input, and whether its output is a directory of shards. */
interface InputFiles {
  /** Every file read: the model's files and index, a model folder's files, a recipe. */
  readonly files: readonly string[];
  /** For a sharded model: its index and the file names its output directory will hold. */
  readonly sharded?: { readonly index: string; readonly names: readonly string[] };
  /** For a model folder: the names of its entries (a folder output holds them by those names). */
  readonly folder?: readonly string[];
}

/**
 * Every file the command reads for `input`: the model's files and its index, every file of a
 * model folder (config, tokenizer: a layout reads them), and `extra` (a recipe file). Paths the
 * model layer cannot make sense of are still guarded as themselves; it reports them later.
 */
async function inputFilesOf(input: string, extra: readonly string[]): Promise<InputFiles> {
  const files = [input, ...extra];
  let sharded: InputFiles['sharded'];
  try {
    const model = await resolveModelInput(input);
    files.push(...model.files);
    if (model.index !== null) {
      files.push(model.index);
      sharded = { index: model.index, names: [...model.files, model.index].map((f) => basename(f)) };
    }
  } catch {
    // not a model (a GGUF file to dequantize, a folder a layout reads): guarded as itself
  }
  let folder: string[] | undefined;
  if ((await statOrNone(input))?.isDirectory()) {
    folder = await readdir(input).catch(() => []);
    files.push(...folder.map((name) => join(input, name)));
  }
  return { files, sharded, folder };
}

/** Identities (device:inode) of the input files that exist, each with the path that names it. */
async function inputIdentities(inputs: readonly string[]): Promise<Map<string, string>> {
  const ids = new Map<string, string>();
  for (const path of inputs) {
    const info = await statOrNone(path);
    if (info?.isFile() && !ids.has(identity(info))) ids.set(identity(info), path);
  }
  return ids;
}

/** Refuses the run when an output is an input, or exists and `force` is false. */
export async function guardOutputs(
  inputs: readonly string[],
  outputs: PlannedOutputs,
  force: boolean,
): Promise<void> {
  const ids = await inputIdentities(inputs);
  const dir = outputs.directory;
  const paths = [...outputs.files, ...(dir ? dir.names.map((name) => join(dir.path, name)) : [])];
  for (const path of paths) {
    const info = await statOrNone(path);
    if (info === undefined) continue;
    const input = ids.get(identity(info));
    if (input !== undefined) throw new QuantdError('OUTPUT_IS_INPUT', { path, input });
    // a directory or a device in the way is the writer's to report (OUTPUT_UNWRITABLE)
    if (info.isFile() && !force) throw new QuantdError('OUTPUT_EXISTS', { path });
  }
}

/** Whether two paths name one existing directory (through symlinks too). */
async function sameExistingDirectory(a: string, b: string): Promise<boolean> {
  const [x, y] = await Promise.all([statOrNone(a), statOrNone(b)]);
  return x !== undefined && y !== undefined && x.isDirectory() && identity(x) === identity(y);
}

/**
 * Guards a transform command (quantize, dequantize, fake-quantize, qparams; local, --layout or
 * --remote): its input model, its recipe file, its output file or shard directory, its report.
 */
export async function guardCommand(parsed: ParsedCommand, input: string, output: string): Promise<void> {
  const values = parsed.values;
  const recipe = values['recipe'] as string | undefined;
  const reads = await inputFilesOf(input, recipe === undefined ? [] : [recipe]);
  // only a plain local run writes a sharded model as a directory of shards
  const single = values['layout'] !== undefined || values['remote'] !== undefined;
  const sharded = single ? undefined : reads.sharded;
  if (sharded && (await sameExistingDirectory(output, dirname(sharded.index)))) {
    return; // the model layer refuses the input's own directory with a message of its own
  }
  const layoutText = values['layout'] as string | undefined;
  // loaded for a layout run only: it loads every layout's modules
  const layout =
    layoutText === undefined
      ? undefined
      : (await import('../service/layouts/parse.js')).layoutNamed(layoutText);
  // a model folder in gives a folder out (but for the single-file formats: GGUF, ONNX) holding
  // the input folder's files by their names (weights and copies), its side file and report
  const folderOut =
    !sharded && reads.folder !== undefined && (layout === undefined || layout.extension === '.safetensors');
  if (folderOut && (await sameExistingDirectory(output, input))) {
    return; // the model layer refuses the input's own folder with a message of its own
  }
  const explicitReport = values['report'] as string | undefined;
  const report =
    explicitReport ??
    (values['layout'] === undefined && (usesRecipe(values) || sharded)
      ? defaultReportPath(output, sharded !== undefined || folderOut)
      : undefined);
  if (explicitReport !== undefined && resolve(explicitReport) === resolve(output)) {
    // the report would be renamed over the model just written
    throw new QuantdError('USAGE', {
      detail: `--report ${explicitReport} is the output itself; give it a name of its own`,
    });
  }
  const files = sharded ? [] : [output];
  if (report !== undefined) files.push(report);
  files.push(...(layout?.companions?.(output, folderOut, reads.folder !== undefined) ?? []));
  const names = sharded ? sharded.names : folderOut ? reads.folder : undefined;
  const directory = names && { path: output, names };
  await guardOutputs(reads.files, { files, directory }, values['force'] === true);
}
