/** Human-readable output: byte sizes and the inspect tables (a file, a model folder). */
import type { FileSummary, FolderSummary } from '../service/index.js';

export function humanBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0 ? `${Math.round(n)} B` : `${value.toFixed(1)} ${units[unit]}`;
}

function shapeText(shape: readonly number[]): string {
  return `[${shape.join(', ')}]`;
}

export function renderSummary(summary: FileSummary): string {
  const header = ['name', 'scheme', 'dtype', 'shape', 'bytes', 'ratio'];
  const rows = summary.tensors.map((t) => [
    t.name,
    t.kind === 'quantized'
      ? `${t.scheme}${t.axis !== null ? ` axis ${t.axis}` : ''}${t.group_size !== null ? ` g${t.group_size}` : ''} ${t.mode}`
      : 'none',
    t.kind === 'quantized' ? `${t.dtype} (from ${t.source_dtype})` : t.dtype,
    shapeText(t.shape),
    String(t.bytes),
    `${t.ratio.toFixed(2)}x`,
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]): string =>
    cells
      .map((c, i) => (i >= 4 ? c.padStart(widths[i]!) : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  const quantized = summary.tensors.filter((t) => t.kind === 'quantized').length;
  return [
    `${summary.file}: ${summary.format ?? 'safetensors'}, ${summary.tensors.length} tensors (${quantized} quantized), ${humanBytes(summary.size)}`,
    line(header),
    ...rows.map(line),
    `total: ${humanBytes(summary.total.source_bytes)} of source tensors stored in ${humanBytes(summary.total.bytes)} (${summary.total.ratio.toFixed(2)}x)`,
    ...(summary.checksum
      ? [
          `data sha256: ${summary.checksum.sha256} (${summary.checksum.verified ? 'verified' : 'not verified; --verify checks it'})`,
        ]
      : []),
  ].join('\n');
}

/** `quantd inspect FOLDER`: its weight files, tensors, dtypes, bytes and quantization config. */
export function renderFolderSummary(summary: FolderSummary): string {
  const dtypes = Object.entries(summary.dtypes)
    .map(([dtype, n]) => `${n} ${dtype}`)
    .join(', ');
  const width = Math.max(...summary.shards.map((s) => s.file.length));
  const config = summary.quantization_config;
  return [
    `${summary.folder}: model folder, ${summary.shards.length} ${summary.shards.length === 1 ? 'file' : 'shards'}` +
      `${summary.index ? ` (index ${summary.index})` : ''}, ${summary.tensors} tensors, ${humanBytes(summary.bytes)}`,
    ...summary.shards.map(
      (s) =>
        `  ${s.file.padEnd(width)}  ${String(s.tensors).padStart(5)} tensors  ${humanBytes(s.bytes).padStart(10)}` +
        (s.checksum ? `  sha256 ${s.checksum.verified ? 'verified' : 'recorded'}` : ''),
    ),
    `dtypes: ${dtypes || 'none'}`,
    config
      ? `quantization_config (${config.file}): ${JSON.stringify(config.config)}`
      : 'quantization_config: none',
    ...(summary.layout
      ? [
          `layout ${summary.layout.format}: ${summary.layout.quantized.length} quantized weights, ` +
            `${summary.layout.total.bits_per_weight.toFixed(2)} bits per weight (--json lists them)`,
        ]
      : []),
  ].join('\n');
}
