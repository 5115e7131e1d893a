import { mkdir, readdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

import { ST_DTYPE_SIZE, numelOf, type StDType } from '../../src/core/dtypes.js';
import {
  SafetensorsFileReader,
  SafetensorsFileWriter,
  entryByName,
  serializeSafetensors,
  type TensorPlan,
} from '../../src/format/index.js';
import { expectQuantdRejection, patternBytes, rawFile, useTempDir } from './helpers.js';

function tensor(
  name: string,
  dtype: StDType,
  shape: number[],
  seed: number,
): TensorPlan & { data: Uint8Array } {
  return { name, dtype, shape, data: patternBytes(numelOf(shape) * ST_DTYPE_SIZE[dtype], seed) };
}

const TENSORS = [
  tensor('w', 'F32', [3, 4], 1),
  tensor('zero', 'F16', [0, 8], 2),
  tensor('scalar', 'I64', [], 3),
  tensor('q', 'I8', [5], 4),
  tensor('s', 'BF16', [2], 5),
];
const METADATA = { format: 'pt', 'quantd.version': '0.1.0' };

async function writeAll(path: string, tensors = TENSORS, metadata: Record<string, string> | null = METADATA) {
  const writer = await SafetensorsFileWriter.create(path, tensors, metadata);
  for (const t of tensors) await writer.write(t.name, t.data);
  await writer.commit();
}

describe('SafetensorsFileWriter and SafetensorsFileReader', () => {
  const dir = useTempDir();

  it('writes exactly the bytes serializeSafetensors produces, and reads each tensor back', async () => {
    const path = join(dir(), 'model.safetensors');
    await writeAll(path);
    expect(new Uint8Array(await readFile(path))).toEqual(serializeSafetensors(TENSORS, METADATA));

    const reader = await SafetensorsFileReader.open(path);
    try {
      expect(reader.path).toBe(path);
      expect(reader.size).toBe((await stat(path)).size);
      expect(reader.header.metadata).toEqual(METADATA);
      expect(reader.header.dataOffset % 8).toBe(0);
      // Read in reverse order: reads are positioned, not sequential.
      for (const t of [...TENSORS].reverse()) {
        const entry = entryByName(reader.header, t.name)!;
        expect(entry.dtype).toBe(t.dtype);
        expect(entry.shape).toEqual(t.shape);
        expect(await reader.read(entry)).toEqual(t.data);
      }
    } finally {
      await reader.close();
    }
    expect(await readdir(dir())).toEqual(['model.safetensors']); // no temp file left behind
  });

  it('returns a fresh buffer from each read', async () => {
    const path = join(dir(), 'm.safetensors');
    await writeAll(path);
    const reader = await SafetensorsFileReader.open(path);
    const entry = entryByName(reader.header, 'w')!;
    const first = await reader.read(entry);
    first.fill(0);
    expect(await reader.read(entry)).toEqual(TENSORS[0]!.data);
    await reader.close();
    await reader.close(); // idempotent
    await expectQuantdRejection(reader.read(entry), 'INTERNAL');
  });

  it('replaces an existing file on commit', async () => {
    const path = join(dir(), 'm.safetensors');
    await writeFile(path, 'old contents');
    await writeAll(path, [TENSORS[0]!], null);
    expect(new Uint8Array(await readFile(path))).toEqual(serializeSafetensors([TENSORS[0]!], null));
  });

  it('streams a large file tensor by tensor (3 × 8 MiB)', async () => {
    const path = join(dir(), 'large.safetensors');
    const big = [0, 1, 2].map((i) => tensor(`layer.${i}`, 'F32', [2048, 1024], 100 + i));
    await writeAll(path, big, null);
    const reader = await SafetensorsFileReader.open(path);
    try {
      expect(reader.size).toBe(reader.header.dataOffset + 3 * 8 * 1024 * 1024);
      for (const t of big) {
        const bytes = await reader.read(entryByName(reader.header, t.name)!);
        expect(bytes.length).toBe(8 * 1024 * 1024);
        expect(Buffer.compare(bytes, t.data)).toBe(0);
      }
    } finally {
      await reader.close();
    }
  });
});

describe('SafetensorsFileReader rejects what it cannot read', () => {
  const dir = useTempDir();

  it('FILE_NOT_FOUND for a missing path, or a path through a file', async () => {
    const err = await expectQuantdRejection(
      SafetensorsFileReader.open(join(dir(), 'nope')),
      'FILE_NOT_FOUND',
    );
    expect(err.params['path']).toBe(join(dir(), 'nope'));
    await writeFile(join(dir(), 'file'), '');
    await expectQuantdRejection(SafetensorsFileReader.open(join(dir(), 'file', 'x')), 'FILE_NOT_FOUND');
  });

  it('FILE_UNREADABLE for a directory', async () => {
    const err = await expectQuantdRejection(SafetensorsFileReader.open(dir()), 'FILE_UNREADABLE');
    expect(err.message).toContain('directory');
  });

  it('validates the header with the path as source', async () => {
    const path = join(dir(), 'bad.safetensors');
    await writeFile(path, rawFile('{"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}', 8));
    const err = await expectQuantdRejection(SafetensorsFileReader.open(path), 'SAFETENSORS_TRUNCATED');
    expect(err.params['source']).toBe(path);
  });

  it('SAFETENSORS_TRUNCATED for a file shorter than the length prefix, or than its header', async () => {
    const path = join(dir(), 'short.safetensors');
    await writeFile(path, new Uint8Array([1, 2, 3]));
    await expectQuantdRejection(SafetensorsFileReader.open(path), 'SAFETENSORS_TRUNCATED');
    await writeFile(path, rawFile('{}', 0, 64n));
    await expectQuantdRejection(SafetensorsFileReader.open(path), 'SAFETENSORS_TRUNCATED');
  });

  it('honours headerLimit', async () => {
    const path = join(dir(), 'm.safetensors');
    await writeAll(path);
    const err = await expectQuantdRejection(
      SafetensorsFileReader.open(path, { headerLimit: 64 }),
      'SAFETENSORS_HEADER_TOO_LARGE',
    );
    expect(err.params['limit']).toBe(64);
  });

  it('refuses an entry of another file', async () => {
    const path = join(dir(), 'm.safetensors');
    await writeAll(path, [TENSORS[3]!], null);
    const reader = await SafetensorsFileReader.open(path);
    await expectQuantdRejection(
      reader.read({ name: 'x', dtype: 'U8', shape: [99], begin: 0, end: 99 }),
      'INTERNAL',
    );
    await reader.close();
  });
});

describe('SafetensorsFileWriter never leaves a partial file at the target', () => {
  const dir = useTempDir();
  const plan = TENSORS.slice(0, 3);

  it('abort leaves neither the file nor a temp file', async () => {
    const path = join(dir(), 'out.safetensors');
    const writer = await SafetensorsFileWriter.create(path, plan, null);
    expect((await readdir(dir())).some((f) => f.startsWith('.out.safetensors.quantd-tmp-'))).toBe(true);
    await writer.write(plan[0]!.name, plan[0]!.data);
    await writer.abort();
    await writer.abort(); // idempotent
    expect(await readdir(dir())).toEqual([]);
    await expectQuantdRejection(writer.write(plan[1]!.name, plan[1]!.data), 'INTERNAL');
    await expectQuantdRejection(writer.commit(), 'INTERNAL');
  });

  it('a writer that throws mid-way leaves an existing target untouched', async () => {
    const path = join(dir(), 'out.safetensors');
    await writeFile(path, 'previous model');
    const writer = await SafetensorsFileWriter.create(path, plan, null);
    await writer.write(plan[0]!.name, plan[0]!.data);
    await expectQuantdRejection(writer.write(plan[2]!.name, plan[2]!.data), 'INTERNAL');
    expect(await readFile(path, 'utf8')).toBe('previous model');
    expect(await readdir(dir())).toEqual(['out.safetensors']);
    await writer.abort(); // still safe after the writer gave up on its own
  });

  it.each([
    [
      'out of plan order',
      (w: SafetensorsFileWriter) => w.write(plan[1]!.name, plan[1]!.data),
      'expected "w"',
    ],
    ['a wrong byte length', (w: SafetensorsFileWriter) => w.write('w', new Uint8Array(47)), '47'],
    ['an unplanned name', (w: SafetensorsFileWriter) => w.write('other', new Uint8Array(48)), '"other"'],
    ['a commit before all tensors', (w: SafetensorsFileWriter) => w.commit(), '"w"'],
    [
      'parts longer than the tensor',
      async (w: SafetensorsFileWriter) => {
        await w.writePart('w', new Uint8Array(40));
        await w.writePart('w', new Uint8Array(16));
      },
      '56 bytes',
    ],
    [
      'a whole write after a part',
      async (w: SafetensorsFileWriter) => {
        await w.writePart('w', new Uint8Array(8));
        await w.write('w', new Uint8Array(48));
      },
      '"w"',
    ],
    [
      'the next tensor before the parts are complete',
      async (w: SafetensorsFileWriter) => {
        await w.writePart('w', new Uint8Array(8));
        await w.writePart(plan[1]!.name, plan[1]!.data);
      },
      'expected "w"',
    ],
    [
      'a commit after an incomplete tensor',
      async (w: SafetensorsFileWriter) => {
        await w.writePart('w', new Uint8Array(8));
        await w.commit();
      },
      'commit before tensor "w"',
    ],
  ])('INTERNAL for %s, and nothing is left behind', async (_, misuse, says) => {
    const path = join(dir(), 'out.safetensors');
    const writer = await SafetensorsFileWriter.create(path, plan, null);
    const err = await expectQuantdRejection(misuse(writer), 'INTERNAL');
    expect(err.message).toContain(says);
    expect(await readdir(dir())).toEqual([]);
  });

  it('writes a tensor in parts (writePart) as the same bytes as whole', async () => {
    const path = join(dir(), 'out.safetensors');
    const writer = await SafetensorsFileWriter.create(path, plan, METADATA, { checksum: true });
    const w = plan[0]!.data;
    for (const [a, b] of [
      [0, 5],
      [5, 5],
      [5, 40],
      [40, 48],
    ])
      await writer.writePart('w', w.subarray(a, b));
    for (const t of plan.slice(1)) await writer.write(t.name, t.data);
    await writer.commit();
    const whole = join(dir(), 'whole.safetensors');
    const reference = await SafetensorsFileWriter.create(whole, plan, METADATA, { checksum: true });
    for (const t of plan) await reference.write(t.name, t.data);
    await reference.commit();
    expect(writer.digest).toBe(reference.digest);
    expect(await readFile(path)).toEqual(await readFile(whole));
  });

  it('INTERNAL for a tensor written after the whole plan', async () => {
    const path = join(dir(), 'out.safetensors');
    const writer = await SafetensorsFileWriter.create(path, [plan[0]!], null);
    await writer.write(plan[0]!.name, plan[0]!.data);
    await expectQuantdRejection(writer.write(plan[0]!.name, plan[0]!.data), 'INTERNAL');
    expect(await readdir(dir())).toEqual([]);
  });

  it('INTERNAL for a write while the previous one is still in flight', async () => {
    const path = join(dir(), 'out.safetensors');
    const writer = await SafetensorsFileWriter.create(path, plan, null);
    const first = writer.write(plan[0]!.name, plan[0]!.data);
    await expectQuantdRejection(writer.write(plan[1]!.name, plan[1]!.data), 'INTERNAL');
    await first;
    await writer.abort();
    expect(await readdir(dir())).toEqual([]);
  });

  it('OUTPUT_UNWRITABLE when the directory does not exist', async () => {
    const path = join(dir(), 'missing', 'out.safetensors');
    const err = await expectQuantdRejection(
      SafetensorsFileWriter.create(path, plan, null),
      'OUTPUT_UNWRITABLE',
    );
    expect(err.params['path']).toBe(path);
  });

  it('OUTPUT_UNWRITABLE when the target is a directory, before any file is created', async () => {
    const path = join(dir(), 'out.safetensors');
    await mkdir(join(path, 'inside'), { recursive: true });
    await expectQuantdRejection(SafetensorsFileWriter.create(path, [plan[0]!], null), 'OUTPUT_UNWRITABLE');
    expect(await readdir(dir())).toEqual(['out.safetensors']);
    expect((await stat(path)).isDirectory()).toBe(true);
  });

  it('OUTPUT_UNWRITABLE when the rename fails at commit, and the temp file is removed', async () => {
    const path = join(dir(), 'out.safetensors');
    const writer = await SafetensorsFileWriter.create(path, [plan[0]!], null);
    await writer.write(plan[0]!.name, plan[0]!.data);
    await mkdir(join(path, 'inside'), { recursive: true }); // the target became a directory meanwhile
    await expectQuantdRejection(writer.commit(), 'OUTPUT_UNWRITABLE');
    expect(await readdir(dir())).toEqual(['out.safetensors']);
    expect((await stat(path)).isDirectory()).toBe(true);
  });

  it('INTERNAL for a bad plan, before any file is created', async () => {
    const path = join(dir(), 'out.safetensors');
    await expectQuantdRejection(SafetensorsFileWriter.create(path, [plan[0]!, plan[0]!], null), 'INTERNAL');
    expect(await readdir(dir())).toEqual([]);
  });
});
