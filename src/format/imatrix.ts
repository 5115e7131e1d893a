/**
 * llama.cpp's importance matrix files, as `llama-imatrix` writes them and `llama-quantize
 * --imatrix` reads them, in either format:
 *
 * - GGUF (current): for each tensor NAME, `NAME.in_sum2` (F32, the sum over calibration tokens of
 *   each column's squared activation, one row per expert) and `NAME.counts` (F32, tokens seen per
 *   expert); metadata `imatrix.datasets`, `imatrix.chunk_count`, `imatrix.chunk_size`.
 * - legacy `.dat`: int32 entry count; per entry int32 name length, the name, int32 ncall, int32
 *   nval and nval float32 (already divided by the token count, then multiplied by ncall); then,
 *   optionally, int32 chunk count, int32 length and the dataset's name.
 *
 * Both become what the quantizers use, one float32 weight per column, as llama-quantize computes
 * it: in_sum2 / round(count) per expert (1 where an expert saw no token), or sums / ncall.
 */
import { open } from 'node:fs/promises';

import { QuantdError } from '../errors/index.js';
import { GgufFileReader, GgufFileWriter } from './gguf-file.js';
import { isGguf, type GgufKv } from './gguf.js';

export interface ImportanceMatrix {
  /** Per tensor (GGUF name): the column weights, experts one after another. */
  readonly entries: ReadonlyMap<string, Float32Array>;
  readonly datasets: readonly string[];
  readonly chunks: number;
  readonly format: 'gguf' | 'legacy';
}

const f = Math.fround;

const invalid = (source: string, detail: string): QuantdError =>
  new QuantdError('IMATRIX_INVALID', { source, detail });

/** Reads an importance matrix file in either format (decided by the GGUF magic). */
export async function readImportanceMatrix(path: string): Promise<ImportanceMatrix> {
  const file = await open(path, 'r').catch((err: NodeJS.ErrnoException) => {
    throw err.code === 'ENOENT' ? new QuantdError('FILE_NOT_FOUND', { path }) : err;
  });
  let legacy: Buffer | undefined;
  try {
    const head = Buffer.alloc(8);
    const { bytesRead } = await file.read(head, 0, 8, 0);
    if (!isGguf(head.subarray(0, bytesRead))) legacy = await file.readFile({});
  } finally {
    await file.close();
  }
  const matrix = legacy === undefined ? await fromGguf(path) : fromLegacy(path, legacy);
  for (const [name, values] of matrix.entries) {
    const bad = values.findIndex((v) => !Number.isFinite(v));
    if (bad >= 0)
      throw invalid(
        path,
        `${name}: value ${bad} is ${values[bad]} (llama-quantize refuses non-finite weights)`,
      );
  }
  return matrix;
}

async function fromGguf(path: string): Promise<ImportanceMatrix> {
  const reader = await GgufFileReader.open(path).catch((err: unknown) => {
    throw err instanceof QuantdError ? invalid(path, err.message) : err;
  });
  try {
    const { kvs, tensors } = reader.header;
    const datasets = kvs.get('imatrix.datasets');
    const chunks = kvs.get('imatrix.chunk_count');
    if (datasets === undefined || chunks === undefined || kvs.get('imatrix.chunk_size') === undefined) {
      throw invalid(
        path,
        'a GGUF imatrix needs imatrix.datasets, imatrix.chunk_count and imatrix.chunk_size',
      );
    }
    const byName = new Map(tensors.map((t) => [t.name, t]));
    const entries = new Map<string, Float32Array>();
    for (const t of tensors) {
      if (!t.name.endsWith('.in_sum2')) continue;
      const name = t.name.slice(0, -'.in_sum2'.length);
      const counts = byName.get(`${name}.counts`);
      if (counts === undefined) throw invalid(path, `${t.name} has no ${name}.counts`);
      if (t.type.name !== 'F32' || counts.type.name !== 'F32') {
        throw invalid(path, `${name}: in_sum2 and counts must be F32`);
      }
      const sums = floats(await reader.read(t));
      const n = floats(await reader.read(counts)).map((c) => Math.round(c));
      if (n.length === 0 || sums.length % n.length !== 0) {
        throw invalid(path, `${name}: ${sums.length} sums do not split into ${n.length} experts`);
      }
      const ne0 = sums.length / n.length;
      const values = new Float32Array(sums.length);
      for (let j = 0; j < n.length; j++) {
        const count = f(n[j]!);
        for (let i = 0; i < ne0; i++) values[j * ne0 + i] = count > 0 ? f(sums[j * ne0 + i]! / count) : 1;
      }
      entries.set(name, values);
    }
    for (const t of tensors) {
      if (t.name.endsWith('.counts') && !entries.has(t.name.slice(0, -'.counts'.length))) {
        throw invalid(path, `${t.name} has no matching .in_sum2`);
      }
    }
    if (entries.size === 0) throw invalid(path, 'holds no NAME.in_sum2 tensor');
    const list = datasets.type === 'array' ? datasets.value.map((v) => String(v.value)) : [];
    return { entries, datasets: list, chunks: Number(chunks.value), format: 'gguf' };
  } finally {
    await reader.close();
  }
}

function floats(bytes: Uint8Array): Float32Array {
  const copy = new Uint8Array(bytes); // aligned
  return new Float32Array(copy.buffer, 0, copy.length / 4);
}

function fromLegacy(path: string, bytes: Buffer): ImportanceMatrix {
  let pos = 0;
  const need = (n: number, what: string): void => {
    if (pos + n > bytes.length)
      throw invalid(path, `ends inside ${what} (neither GGUF nor a legacy .dat imatrix)`);
  };
  const int32 = (what: string): number => {
    need(4, what);
    pos += 4;
    return bytes.readInt32LE(pos - 4);
  };
  const count = int32('the entry count');
  if (count < 1)
    throw invalid(path, `is neither a GGUF imatrix nor llama.cpp's legacy .dat (entry count ${count})`);
  const entries = new Map<string, Float32Array>();
  for (let e = 0; e < count; e++) {
    const length = int32(`entry ${e + 1}'s name length`);
    if (length < 0 || length > 4096) throw invalid(path, `entry ${e + 1} has a name of ${length} bytes`);
    need(length, `entry ${e + 1}'s name`);
    const name = bytes.toString('utf8', pos, pos + length).split('\0')[0]!;
    pos += length;
    const ncall = int32(`${name}'s call count`);
    const nval = int32(`${name}'s value count`);
    if (nval < 1) throw invalid(path, `${name} has ${nval} values`);
    need(4 * nval, `${name}'s values`);
    const values = new Float32Array(nval);
    for (let i = 0; i < nval; i++) {
      const v = bytes.readFloatLE(pos + 4 * i);
      values[i] = ncall > 0 ? f(v / f(ncall)) : v;
    }
    pos += 4 * nval;
    entries.set(name, values);
  }
  let chunks = 0;
  const datasets: string[] = [];
  if (pos + 4 <= bytes.length) {
    chunks = bytes.readInt32LE(pos);
    pos += 4;
    if (pos + 4 <= bytes.length) {
      const length = bytes.readInt32LE(pos);
      pos += 4;
      if (length > 0 && pos + length <= bytes.length)
        datasets.push(bytes.toString('utf8', pos, pos + length));
    }
  }
  return { entries, datasets, chunks, format: 'legacy' };
}

/** One tensor's sums, as llama-imatrix accumulates them (a dense weight: one expert). */
export interface ImatrixSums {
  /** GGUF name of the weight (blk.0.attn_q.weight). */
  readonly name: string;
  /** Σ over tokens of each input column's squared activation. */
  readonly sumSquares: Float32Array;
  /** Tokens accumulated. */
  readonly count: number;
}

/**
 * Writes an importance matrix in llama-imatrix's GGUF format: general.type "imatrix",
 * imatrix.datasets / chunk_count / chunk_size, and per tensor NAME.in_sum2 F32 [columns, 1] and
 * NAME.counts F32 [1, 1], atomically.
 */
export async function writeImportanceMatrix(
  path: string,
  sums: readonly ImatrixSums[],
  dataset: { readonly names: readonly string[]; readonly chunks: number; readonly chunkSize: number },
): Promise<void> {
  const kvs: GgufKv[] = [
    { key: 'general.type', value: { type: 'string', value: 'imatrix' } },
    {
      key: 'imatrix.datasets',
      value: {
        type: 'array',
        itemType: 'string',
        value: dataset.names.map((value) => ({ type: 'string', value })),
      },
    },
    { key: 'imatrix.chunk_count', value: { type: 'uint32', value: dataset.chunks } },
    { key: 'imatrix.chunk_size', value: { type: 'uint32', value: dataset.chunkSize } },
  ];
  const sorted = [...sums].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const tensors = sorted.flatMap((s) => [
    { name: `${s.name}.in_sum2`, dims: [s.sumSquares.length, 1], type: 'F32' },
    { name: `${s.name}.counts`, dims: [1, 1], type: 'F32' },
  ]);
  const writer = await GgufFileWriter.create(path, kvs, tensors);
  try {
    for (const s of sorted) {
      await writer.write(
        `${s.name}.in_sum2`,
        new Uint8Array(s.sumSquares.buffer, s.sumSquares.byteOffset, s.sumSquares.byteLength),
      );
      await writer.write(`${s.name}.counts`, new Uint8Array(new Float32Array([s.count]).buffer));
    }
    await writer.commit();
  } catch (err) {
    await writer.abort();
    throw err;
  }
}
