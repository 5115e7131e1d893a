/**
 * `quantd inspect` (human and --json output; fields as src/service/inspect.ts documents them,
 * numbers computed here from the shapes and dtypes), `--help` and `--version`.
 */
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { quantdAsync, scratch, succeeds } from './cli-helpers.js';
import { MODEL, REPO, tempDir } from './run-cli.js';

const tmp = tempDir();
afterAll(() => tmp.cleanup());

/** compression ratio as inspect rounds it: three decimals. */
const ratio = (source: number, stored: number): number => Math.round((source / stored) * 1000) / 1000;

interface Row {
  name: string;
  kind: 'quantized' | 'tensor';
  dtype: string;
  shape: number[];
  scheme: string | null;
  mode: string | null;
  axis: number | null;
  group_size: number | null;
  source_dtype: string | null;
  bytes: number;
  source_bytes: number;
  ratio: number;
}

const plain = (name: string, dtype: string, shape: number[], elementSize: number): Row => {
  const bytes = shape.reduce((a, b) => a * b, elementSize);
  return {
    name,
    kind: 'tensor',
    dtype,
    shape,
    scheme: null,
    mode: null,
    axis: null,
    group_size: null,
    source_dtype: null,
    bytes,
    source_bytes: bytes,
    ratio: 1,
  };
};

/**
 * The container inspected below: the model with layers.*.weight as int4 per_group (group 32,
 * affine) and then embed.weight as uint8 per_channel along axis -1 (= 1), quantized in a second
 * pass over the first container.
 */
function expectedRows(): Row[] {
  // int4 [N, K], groups of 32: codes ceil(N·K·4/8) bytes; F32 scale and I32 zero point [N, K/32].
  const int4Group = (name: string, n: number, k: number, source: string, sourceSize: number): Row => {
    const bytes = Math.ceil((n * k * 4) / 8) + n * (k / 32) * 4 * 2;
    const sourceBytes = n * k * sourceSize;
    return {
      name,
      kind: 'quantized',
      dtype: 'int4',
      shape: [n, k],
      scheme: 'per_group',
      mode: 'affine',
      axis: null,
      group_size: 32,
      source_dtype: source,
      bytes,
      source_bytes: sourceBytes,
      ratio: ratio(sourceBytes, bytes),
    };
  };
  // uint8 [20, 16] along axis 1: 320 code bytes, 16 F32 scales and 16 I32 zero points.
  const embedBytes = 20 * 16 + 16 * 4 * 2;
  return [
    int4Group('layers.0.weight', 48, 64, 'float32', 4),
    plain('layers.0.bias', 'F32', [48], 4),
    int4Group('layers.1.weight', 32, 128, 'bfloat16', 2),
    {
      name: 'embed.weight',
      kind: 'quantized',
      dtype: 'uint8',
      shape: [20, 16],
      scheme: 'per_channel',
      mode: 'affine',
      axis: 1,
      group_size: null,
      source_dtype: 'float16',
      bytes: embedBytes,
      source_bytes: 20 * 16 * 2,
      ratio: ratio(20 * 16 * 2, embedBytes),
    },
    plain('activations', 'F32', [2, 5, 64], 4),
    plain('position_ids', 'I64', [10], 8),
  ];
}

describe.concurrent('inspect', () => {
  const FILE = 'c2.safetensors';
  let dir = '';
  beforeAll(async () => {
    dir = scratch(tmp.dir);
    await succeeds(
      dir,
      ['quantize', MODEL, '-o', 'c1.safetensors', '--include', 'layers.*.weight'].concat([
        '--qdtype',
        'int4',
        '--scheme',
        'per_group',
        '--group-size',
        '32',
      ]),
    );
    await succeeds(
      dir,
      ['quantize', 'c1.safetensors', '-o', FILE, '--include', 'embed.weight'].concat([
        '--qdtype',
        'uint8',
        '--scheme',
        'per_channel',
        '--axis',
        '-1',
      ]),
    );
  });

  it('--json gives the documented fields with the right byte counts and ratios', async () => {
    const r = await succeeds(dir, ['inspect', FILE, '--json']);
    expect(r.stderr).toBe('');
    const rows = expectedRows();
    const bytes = rows.reduce((n, t) => n + t.bytes, 0);
    const sourceBytes = rows.reduce((n, t) => n + t.source_bytes, 0);
    expect(JSON.parse(r.stdout)).toEqual({
      file: FILE,
      format: 'quantd.qtensor/1',
      size: statSync(join(dir, FILE)).size,
      checksum: null,
      tensors: rows,
      total: { bytes, source_bytes: sourceBytes, ratio: ratio(sourceBytes, bytes) },
    });
    // Spot values, worked by hand: 48·64·4/8 + 48·2·8 = 2304 bytes for 12288 float32 bytes.
    expect(rows[0]).toMatchObject({ bytes: 2304, source_bytes: 12288, ratio: 5.333 });
    expect(rows[3]).toMatchObject({ bytes: 448, source_bytes: 640, ratio: 1.429 });
  });

  it('the human summary lists each tensor with scheme, dtype, shape, bytes and ratio', async () => {
    const r = await succeeds(dir, ['inspect', FILE]);
    expect(r.stderr).toBe('');
    const lines = r.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^c2\.safetensors: quantd\.qtensor\/1, 6 tensors \(3 quantized\), /);
    expect(lines[1]!.split(/\s{2,}/)).toEqual(['name', 'scheme', 'dtype', 'shape', 'bytes', 'ratio']);
    const rows = expectedRows();
    const scheme = (t: Row): string =>
      t.kind === 'tensor'
        ? 'none'
        : [
            t.scheme,
            t.axis !== null ? `axis ${t.axis}` : null,
            t.group_size !== null ? `g${t.group_size}` : null,
            t.mode,
          ]
            .filter((p) => p !== null)
            .join(' ');
    const dtype = (t: Row): string => (t.kind === 'tensor' ? t.dtype : `${t.dtype} (from ${t.source_dtype})`);
    const cells = lines.slice(2, 2 + rows.length).map((l) => l.split(/\s{2,}/));
    expect(cells).toEqual(
      rows.map((t) => [
        t.name,
        scheme(t),
        dtype(t),
        `[${t.shape.join(', ')}]`,
        String(t.bytes),
        `${t.ratio.toFixed(2)}x`,
      ]),
    );
    // e.g. the second row of that table, spelled out:
    expect(cells[0]).toEqual([
      'layers.0.weight',
      'per_group g32 affine',
      'int4 (from float32)',
      '[48, 64]',
      '2304',
      '5.33x',
    ]);
    expect(cells[3]).toEqual([
      'embed.weight',
      'per_channel axis 1 affine',
      'uint8 (from float16)',
      '[20, 16]',
      '448',
      '1.43x',
    ]);
    const bytes = rows.reduce((n, t) => n + t.bytes, 0);
    const sourceBytes = rows.reduce((n, t) => n + t.source_bytes, 0);
    const kib = (n: number): string => `${(n / 1024).toFixed(1)} KiB`;
    expect(lines.slice(2 + rows.length)).toEqual([
      `total: ${kib(sourceBytes)} of source tensors stored in ${kib(bytes)} (${ratio(sourceBytes, bytes).toFixed(2)}x)`,
    ]);
  });

  it('--json on a plain safetensors file: every tensor stored as is, ratio 1', async () => {
    const r = await succeeds(scratch(tmp.dir), ['inspect', MODEL, '--json']);
    const rows = [
      plain('layers.0.weight', 'F32', [48, 64], 4),
      plain('layers.0.bias', 'F32', [48], 4),
      plain('layers.1.weight', 'BF16', [32, 128], 2),
      plain('embed.weight', 'F16', [20, 16], 2),
      plain('activations', 'F32', [2, 5, 64], 4),
      plain('position_ids', 'I64', [10], 8),
    ];
    const bytes = rows.reduce((n, t) => n + t.bytes, 0);
    expect(JSON.parse(r.stdout)).toEqual({
      file: MODEL,
      format: 'pt',
      size: statSync(MODEL).size,
      checksum: null,
      tensors: rows,
      total: { bytes, source_bytes: bytes, ratio: 1 },
    });
  });
});

describe.concurrent('--help and --version', () => {
  it.each([['--help'], ['-h'], ['help']])(
    'quantd %s prints the usage and exits 0',
    async (...args: string[]) => {
      const r = await quantdAsync(args);
      expect(r.code).toBe(0);
      expect(r.stderr).toBe('');
      expect(r.stdout).toMatch(/^quantd — /);
      for (const command of ['quantize', 'dequantize', 'fake-quantize', 'qparams', 'inspect', 'serve']) {
        expect(r.stdout).toContain(`quantd ${command} `);
      }
    },
  );

  it.each(['--version', '-v'])('quantd %s prints the package version and exits 0', async (flag) => {
    const pkg = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { version: string };
    const r = await quantdAsync([flag]);
    expect(r).toEqual({ code: 0, stdout: `${pkg.version}\n`, stderr: '' });
  });
});
