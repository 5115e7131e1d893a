/**
 * Where a model's tensors live: one safetensors file, or shards named by a Hugging Face index
 * (`model.safetensors.index.json`: {"metadata": {"total_size": N}, "weight_map": {tensor:
 * shard file}}). A model given as a directory is its index, or its only .safetensors file.
 *
 * An index is checked against its shards before any tensor is processed: shard names are plain
 * file names in the index's directory (never a path elsewhere), every mapped tensor is in its
 * shard and every tensor of a shard is mapped to it.
 */
import { readdir, readFile, stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { QuantdError } from '../errors/index.js';
import { SafetensorsFileReader } from '../format/index.js';

export const INDEX_SUFFIX = '.safetensors.index.json';

export interface ModelInput {
  /** The index file, or null for a single file. */
  readonly index: string | null;
  /** Shard paths in index order (first appearance in weight_map), or the one file. */
  readonly files: readonly string[];
  /** The index's own metadata (passed on to the output index, total_size recomputed). */
  readonly indexMetadata: Readonly<Record<string, unknown>>;
}

function indexError(path: string, detail: string): QuantdError {
  return new QuantdError('SHARD_INDEX_INVALID', { path, detail });
}

async function kindOf(path: string): Promise<'file' | 'dir'> {
  try {
    const info = await stat(path);
    if (info.isDirectory()) return 'dir';
    if (info.isFile()) return 'file';
    throw new QuantdError('FILE_UNREADABLE', { path, detail: 'not a regular file or directory' });
  } catch (err) {
    if (err instanceof QuantdError) throw err;
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') throw new QuantdError('FILE_NOT_FOUND', { path });
    throw new QuantdError('FILE_UNREADABLE', { path, detail: (err as Error).message });
  }
}

/** The model at `path`: a .safetensors file, an index file, or a directory holding either. */
export async function resolveModelInput(path: string): Promise<ModelInput> {
  if ((await kindOf(path)) === 'file') {
    return path.endsWith('.json') ? readIndex(path) : { index: null, files: [path], indexMetadata: {} };
  }
  let names: string[];
  try {
    names = (await readdir(path)).sort();
  } catch (err) {
    throw new QuantdError('FILE_UNREADABLE', { path, detail: (err as Error).message });
  }
  const indexes = names.filter((n) => n.endsWith(INDEX_SUFFIX));
  if (indexes.length === 1) return readIndex(join(path, indexes[0]!));
  if (indexes.length > 1) {
    throw new QuantdError('FILE_UNREADABLE', {
      path,
      detail: `holds ${indexes.length} shard indexes (${indexes.join(', ')}); name the one to use`,
    });
  }
  const files = names.filter((n) => n.endsWith('.safetensors'));
  if (files.length !== 1) {
    throw new QuantdError('FILE_UNREADABLE', {
      path,
      detail:
        files.length === 0
          ? 'holds no .safetensors file and no *.safetensors.index.json'
          : `holds ${files.length} .safetensors files and no index naming them`,
    });
  }
  return { index: null, files: [join(path, files[0]!)], indexMetadata: {} };
}

/** Reads an index and checks it against its shards' headers. */
export async function readIndex(path: string): Promise<ModelInput> {
  let json: unknown;
  try {
    json = JSON.parse(await readFile(path, 'utf8'));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new QuantdError('FILE_NOT_FOUND', { path });
    throw indexError(path, `is not readable JSON: ${(err as Error).message}`);
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json))
    throw indexError(path, 'is not a JSON object');
  const { weight_map: map, metadata } = json as Record<string, unknown>;
  if (typeof map !== 'object' || map === null || Array.isArray(map)) {
    throw indexError(path, 'has no "weight_map" object');
  }
  const byShard = new Map<string, Set<string>>();
  for (const [tensor, shard] of Object.entries(map as Record<string, unknown>)) {
    if (
      typeof shard !== 'string' ||
      shard === '' ||
      shard !== basename(shard) ||
      shard === '..' ||
      shard === '.'
    ) {
      throw indexError(
        path,
        `maps ${JSON.stringify(tensor)} to ${JSON.stringify(shard)}, not a file name in its directory`,
      );
    }
    if (!byShard.has(shard)) byShard.set(shard, new Set());
    byShard.get(shard)!.add(tensor);
  }
  if (byShard.size === 0) throw indexError(path, 'maps no tensor to a shard');
  const dir = dirname(path);
  for (const [shard, tensors] of byShard) {
    const reader = await SafetensorsFileReader.open(join(dir, shard));
    try {
      for (const entry of reader.header.entries) {
        if (!tensors.delete(entry.name)) {
          throw indexError(
            path,
            `shard ${shard} holds ${JSON.stringify(entry.name)}, which the index maps elsewhere or not at all`,
          );
        }
      }
      const missing = [...tensors];
      if (missing.length > 0) {
        throw indexError(path, `maps ${JSON.stringify(missing[0])} to ${shard}, which does not hold it`);
      }
    } finally {
      await reader.close();
    }
  }
  const indexMetadata =
    typeof metadata === 'object' && metadata !== null ? (metadata as Record<string, unknown>) : {};
  return { index: path, files: [...byShard.keys()].map((s) => join(dir, s)), indexMetadata };
}

/** The index text of a sharded output: its own tensors' shards and total data size. */
export function encodeIndex(
  shards: ReadonlyArray<{
    readonly file: string;
    readonly tensors: readonly string[];
    readonly dataBytes: number;
  }>,
  inputMetadata: Readonly<Record<string, unknown>>,
): string {
  const weightMap: Record<string, string> = Object.create(null) as Record<string, string>;
  for (const shard of shards) for (const t of shard.tensors) weightMap[t] = basename(shard.file);
  const totalSize = shards.reduce((n, s) => n + s.dataBytes, 0);
  return `${JSON.stringify({ metadata: { ...inputMetadata, total_size: totalSize }, weight_map: weightMap }, null, 2)}\n`;
}
