/**
 * Interop: an independent reader, @huggingface/hub's parseSafetensorsMetadata, accepts files we
 * write and sees the same tensors. It reads over HTTP with Range requests; a fake fetch serves
 * our file from disk, so the test runs offline and any other request fails it.
 */
import { parseSafetensorsMetadata } from '@huggingface/hub';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

import { ST_DTYPE_SIZE, numelOf, type StDType } from '../../src/core/dtypes.js';
import { parseSafetensors, SafetensorsFileWriter, type TensorPlan } from '../../src/format/index.js';
import { patternBytes, rawFile, useTempDir } from './helpers.js';

const REPO = 'quantd/interop-test';
const FILE = 'model.safetensors';

/** Serves `file` at the Hub's resolve/raw URLs for REPO, honouring `Range: bytes=a-b`. */
function fakeHub(file: Uint8Array, requests: string[]): typeof fetch {
  return async (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    const method = init?.method ?? 'GET';
    const range = new Headers(init?.headers).get('Range');
    requests.push(`${method} ${url.pathname} ${range ?? ''}`.trim());
    if (!url.pathname.startsWith(`/${REPO}/`)) throw new Error(`unexpected request ${url.href}`);
    if (!url.pathname.endsWith(`/${FILE}`)) {
      // config.json and anything else: absent, as the Hub says it.
      return new Response('not found', { status: 404, headers: { 'X-Error-Code': 'EntryNotFound' } });
    }
    const headers = {
      ETag: '"quantd-test"',
      'Content-Type': 'application/octet-stream',
      'Accept-Ranges': 'bytes',
    };
    if (method === 'HEAD') return new Response(null, { status: 200, headers });
    if (range === null) return new Response(file, { status: 200, headers });
    const m = /^bytes=(\d+)-(\d+)$/.exec(range);
    if (m === null) throw new Error(`unexpected range ${range}`);
    const start = Number(m[1]);
    const end = Math.min(Number(m[2]), file.length - 1);
    return new Response(file.slice(start, end + 1), {
      status: 206,
      headers: { ...headers, 'Content-Range': `bytes ${start}-${end}/${file.length}` },
    });
  };
}

function tensor(
  name: string,
  dtype: StDType,
  shape: number[],
  seed: number,
): TensorPlan & { data: Uint8Array } {
  return { name, dtype, shape, data: patternBytes(numelOf(shape) * ST_DTYPE_SIZE[dtype], seed) };
}

describe('interop with @huggingface/hub', () => {
  const dir = useTempDir();

  it('parseSafetensorsMetadata reads our file and sees the same tensors, dtypes, shapes and offsets', async () => {
    const tensors = [
      tensor('model.embed.weight', 'BF16', [16, 8], 1),
      tensor('model.layers.0.weight', 'I8', [8, 8], 2),
      tensor('model.layers.0.weight_scale', 'F32', [8], 3),
      tensor('model.layers.0.empty', 'F16', [0, 4], 4),
      tensor('model.step', 'I64', [], 5),
      tensor('model.layers.1.weight', 'F8_E4M3', [4, 4], 6),
      tensor('model.norm', 'F64', [3], 7),
    ];
    const metadata = { format: 'pt', 'quantd.qtensor': '1' };
    const path = join(dir(), FILE);
    const writer = await SafetensorsFileWriter.create(path, tensors, metadata);
    for (const t of tensors) await writer.write(t.name, t.data);
    await writer.commit();

    const bytes = new Uint8Array(await readFile(path));
    const ours = parseSafetensors(bytes, path).header;
    const requests: string[] = [];
    const parsed = await parseSafetensorsMetadata({
      repo: REPO,
      path: FILE,
      fetch: fakeHub(bytes, requests),
    });

    expect(parsed.sharded).toBe(false);
    if (parsed.sharded) return;
    const { __metadata__: theirMetadata, ...theirTensors } = parsed.header;
    expect(theirMetadata).toEqual(metadata);
    expect(theirTensors).toEqual(
      Object.fromEntries(
        ours.entries.map((e) => [e.name, { dtype: e.dtype, shape: e.shape, data_offsets: [e.begin, e.end] }]),
      ),
    );
    expect(Object.keys(theirTensors).sort()).toEqual(tensors.map((t) => t.name).sort());
    // It really read the header through ranges: the length prefix, then the JSON.
    expect(requests).toContain(`GET /${REPO}/resolve/main/${FILE} bytes=0-7`);
    expect(requests).toContain(`GET /${REPO}/resolve/main/${FILE} bytes=8-${ours.dataOffset - 1}`);
  });

  it('control: the same fake Hub makes parseSafetensorsMetadata reject a file with data past its end', async () => {
    // Its check compares data-relative offsets with the whole file's size, so overshoot by a lot.
    const file = rawFile('{"w": {"dtype": "F32", "shape": [1024], "data_offsets": [0, 4096]}}', 8);
    await expect(
      parseSafetensorsMetadata({ repo: REPO, path: FILE, fetch: fakeHub(file, []) }),
    ).rejects.toThrow(/exceeds the file size/);
  });
});
