/**
 * llama.cpp's split GGUF: one model as NAME-00001-of-0000N.gguf … NAME-0000N-of-0000N.gguf, for
 * hosts that cap a file's size (Hugging Face's 50 GB, FAT32's 4 GiB). The rules are llama.cpp's
 * (its gguf-split tool and its loader): every shard carries `split.no` (u16, from 0),
 * `split.count` (u16) and `split.tensors.count` (i32, the tensors of the whole set); the first
 * shard alone carries the rest of the metadata; tensors keep their order, each in exactly one
 * shard; llama.cpp opens the first shard and finds the others by that naming. A size limit is
 * soft, as there: a shard takes the next tensor unless that would pass the limit, and a single
 * tensor larger than the limit gets a shard to itself. A model that fits in one file is written
 * as one plain file, without split keys, as llama.cpp's converter does.
 *
 * Each shard is written like a single file (a temporary file renamed on commit); the set commits
 * the other shards first and the first shard last, so llama.cpp never finds a first shard whose
 * siblings are missing, and a failed commit removes the shards it had already renamed.
 */
import { unlink } from 'node:fs/promises';

import { QuantdError } from '../errors/index.js';
import { GgufFileWriter } from './gguf-file.js';
import { planGguf, type GgufKv, type GgufTensorPlan } from './gguf.js';

/** llama.cpp's limit: split.no and split.count are uint16. */
export const GGUF_MAX_SPLITS = 65_535;

/** `dir/model.gguf`, shard 0 of 3 → `dir/model-00001-of-00003.gguf` (llama.cpp's llama_split_path). */
export function splitPath(path: string, index: number, count: number): string {
  const stem = path.endsWith('.gguf') ? path.slice(0, -'.gguf'.length) : path;
  const pad = (n: number): string => String(n).padStart(5, '0');
  return `${stem}-${pad(index + 1)}-of-${pad(count)}.gguf`;
}

/** The tensors of each shard, in order, for a soft limit of `maxBytes` of tensor data per shard. */
export function planSplits(tensorBytes: readonly number[], maxBytes: number): number[][] {
  const shards: number[][] = [];
  let current: number[] = [];
  let used = 0;
  tensorBytes.forEach((bytes, i) => {
    if (current.length > 0 && used + bytes > maxBytes) {
      shards.push(current);
      current = [];
      used = 0;
    }
    current.push(i);
    used += bytes;
  });
  if (current.length > 0 || shards.length === 0) shards.push(current);
  return shards;
}

const splitKvs = (index: number, count: number, tensors: number): GgufKv[] => [
  { key: 'split.no', value: { type: 'uint16', value: index } },
  { key: 'split.count', value: { type: 'uint16', value: count } },
  { key: 'split.tensors.count', value: { type: 'int32', value: tensors } },
];

/** A GGUF output, one file or a split set, written tensor by tensor in plan order. */
export class GgufOutput {
  private next = 0;

  private constructor(
    /** The files this output becomes, the first shard first. */
    readonly files: readonly string[],
    private readonly writers: readonly GgufFileWriter[],
    /** For each tensor in plan order, the index of the writer that holds it. */
    private readonly shardOf: readonly number[],
  ) {}

  /**
   * Plans the output and creates its temporary files. Without `maxBytes` (or when the model fits
   * in it) the output is `path` itself; otherwise llama.cpp's split set named after `path`.
   */
  static async create(
    path: string,
    kvs: readonly GgufKv[],
    tensors: readonly GgufTensorPlan[],
    maxBytes?: number,
  ): Promise<GgufOutput> {
    const bytes = planGguf(kvs, tensors).tensors.map((t) => t.bytes);
    const shards = maxBytes === undefined ? [tensors.map((_, i) => i)] : planSplits(bytes, maxBytes);
    if (shards.length > GGUF_MAX_SPLITS) {
      throw new QuantdError('OPTION_INVALID', {
        option: 'split_max_size',
        detail: `would make ${shards.length} files; llama.cpp reads at most ${GGUF_MAX_SPLITS}`,
        value: String(maxBytes),
      });
    }
    const shardOf: number[] = [];
    shards.forEach((members, s) => members.forEach(() => shardOf.push(s)));
    if (shards.length === 1) {
      return new GgufOutput([path], [await GgufFileWriter.create(path, kvs, tensors)], shardOf);
    }
    const files = shards.map((_, s) => splitPath(path, s, shards.length));
    const writers: GgufFileWriter[] = [];
    try {
      for (const [s, members] of shards.entries()) {
        const meta = [...(s === 0 ? kvs : []), ...splitKvs(s, shards.length, tensors.length)];
        writers.push(
          await GgufFileWriter.create(
            files[s]!,
            meta,
            members.map((i) => tensors[i]!),
          ),
        );
      }
    } catch (err) {
      for (const w of writers) await w.abort();
      throw err;
    }
    return new GgufOutput(files, writers, shardOf);
  }

  /** Writes the next tensor in plan order into its shard. */
  async write(name: string, data: Uint8Array): Promise<void> {
    const writer = this.writers[this.shardOf[this.next] ?? this.writers.length - 1]!;
    this.next++;
    try {
      await writer.write(name, data);
    } catch (err) {
      await this.abort();
      throw err;
    }
  }

  /** Writes the next part of the next tensor into its shard (`last`: the part that completes it). */
  async writePart(name: string, data: Uint8Array, last: boolean): Promise<void> {
    const writer = this.writers[this.shardOf[this.next] ?? this.writers.length - 1]!;
    if (last) this.next++;
    try {
      await writer.writePart(name, data);
    } catch (err) {
      await this.abort();
      throw err;
    }
  }

  /** Commits every shard, the first one last; on failure no shard of the set stays in place. */
  async commit(): Promise<void> {
    const order = [...this.writers.keys()].slice(1).concat(0);
    const done: string[] = [];
    try {
      for (const s of order) {
        await this.writers[s]!.commit();
        done.push(this.files[s]!);
      }
    } catch (err) {
      await this.abort();
      for (const f of done) await unlink(f).catch(() => undefined);
      throw err;
    }
  }

  /** Discards every shard not yet committed. */
  async abort(): Promise<void> {
    for (const w of this.writers) await w.abort();
  }
}
