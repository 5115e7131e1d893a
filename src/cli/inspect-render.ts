/**
 * `quantd inspect` for people: each kind of summary (src/service/inspect-path.ts) as a few lines
 * and a table. --json prints the summary objects themselves; this is their reading aid.
 */
import type {
  GgufSummary,
  Inspection,
  LayoutFileSummary,
  OnnxSummary,
  QuantizedWeight,
} from '../service/index.js';
import { humanBytes, renderFolderSummary, renderSummary } from './output.js';

const shapeText = (shape: readonly (number | string)[]): string => `[${shape.join(', ')}]`;

/** Columns padded to their widest cell; those from `right` on aligned right (numbers). */
function table(header: readonly string[], rows: readonly (readonly string[])[], right: number): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: readonly string[]): string =>
    cells
      .map((c, i) => (i >= right ? c.padStart(widths[i]!) : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(header), ...rows.map(line)];
}

/** A list of names, the first `max` of them and how many more. */
function names(list: readonly string[], max = 8): string {
  if (list.length === 0) return 'none';
  const shown = list.slice(0, max).join(', ');
  return list.length > max ? `${shown}, … (${list.length - max} more)` : shown;
}

const bpw = (n: number): string => n.toFixed(2);

function weightTable(weights: readonly QuantizedWeight[]): string[] {
  return table(
    ['name', 'bits', 'group', 'scales', 'shape', 'bytes', 'bits/weight'],
    weights.map((w) => [
      w.name,
      String(w.bits),
      String(w.group_size),
      w.scale_dtype,
      shapeText(w.shape),
      String(w.bytes),
      bpw((w.bytes * 8) / w.shape.reduce((a, b) => a * b, 1)),
    ]),
    5,
  );
}

function renderGguf(s: GgufSummary): string {
  const fileType = s.file_type ? `, file type ${s.file_type.name ?? 'unknown'} (${s.file_type.id})` : '';
  const t = s.tokenizer;
  const special = t ? Object.entries(t.special).map(([k, v]) => `${k} ${v}`) : [];
  return [
    `${s.file}: GGUF v${s.version}, ${s.architecture ?? 'no architecture'}${s.name ? ` "${s.name}"` : ''}` +
      `${fileType}, ${s.tensors.length} tensors, ${humanBytes(s.size)}`,
    t
      ? `tokenizer: ${t.model ?? 'unknown'}${t.pre ? ` (${t.pre})` : ''}, ${t.vocab_size} tokens, ${t.merges} merges` +
        `; ${special.length > 0 ? special.join(', ') : 'no special ids'}` +
        `${t.add_bos !== null ? `; add_bos ${t.add_bos}` : ''}${t.add_eos !== null ? `, add_eos ${t.add_eos}` : ''}` +
        `${t.chat_template ? '; chat template' : ''}`
      : 'tokenizer: none',
    `types: ${
      Object.entries(s.types)
        .map(([type, r]) => `${r.tensors} ${type}`)
        .join(', ') || 'none'
    }`,
    ...table(
      ['name', 'type', 'shape', 'bytes', 'bits/weight'],
      s.tensors.map((x) => [x.name, x.type, shapeText(x.shape), String(x.bytes), bpw(x.bits_per_weight)]),
      3,
    ),
    `total: ${s.total.weights} weights in ${humanBytes(s.total.bytes)}, ${bpw(s.total.bits_per_weight)} bits per weight`,
    `metadata: ${Object.keys(s.metadata).length} keys (--json lists them)`,
  ].join('\n');
}

function renderOnnx(s: OnnxSummary): string {
  const opsets = s.opsets.map((o) => `${o.domain || 'ai.onnx'} ${o.version}`).join(', ');
  const values = (list: OnnxSummary['graph']['inputs']): string =>
    names(list.map((v) => `${v.name} ${v.dtype} ${shapeText(v.shape)}`));
  const nodeCount = Object.values(s.nodes).reduce((a, b) => a + b, 0);
  const genai = s.genai_config?.['model'] as Record<string, unknown> | undefined;
  return [
    `${s.file}: ONNX (IR ${s.ir_version}; ${opsets})${s.producer ? `, by ${s.producer}` : ''}, ` +
      `${s.decoder ? 'a whole decoder (input_ids in, logits out)' : 'not a whole decoder'}, ${humanBytes(s.size)}`,
    `inputs: ${values(s.graph.inputs)}`,
    `outputs: ${values(s.graph.outputs)}`,
    `nodes: ${nodeCount} (${Object.entries(s.nodes)
      .map(([op, n]) => `${n} ${op}`)
      .join(', ')})`,
    `initializers: ${s.initializers.count}, ${humanBytes(s.initializers.bytes)}` +
      (s.external_data.length > 0
        ? `; external data ${s.external_data
            .map((d) => `${d.file} (${d.bytes === null ? 'missing' : humanBytes(d.bytes)})`)
            .join(', ')}`
        : ''),
    `quantized: ${s.quantized.length} MatMulNBits weights`,
    ...(s.quantized.length > 0 ? weightTable(s.quantized) : []),
    `stored as they are: ${names(s.tensors.map((t) => `${t.name} ${t.dtype} ${shapeText(t.shape)}`))}`,
    `total: ${s.total.weights} quantized weights in ${humanBytes(s.total.bytes)}, ${bpw(s.total.bits_per_weight)} bits per weight`,
    s.genai_config
      ? `genai_config.json: model ${String(genai?.['type'] ?? '?')}, vocab ${String(genai?.['vocab_size'] ?? '?')}, context ${String(genai?.['context_length'] ?? '?')}`
      : 'genai_config.json: none',
  ].join('\n');
}

/** The scheme in a few words: int4 g128 sym no desc_act; nf4 blocksize 64. */
function schemeText(format: string, s: LayoutFileSummary['scheme']): string {
  if (format === 'nf4' || format === 'fp4') {
    return `${format} blocksize ${s.group_size ?? 'mixed'}`;
  }
  return [
    s.bits !== null ? `int${s.bits}` : 'mixed bits',
    s.group_size !== null ? `g${s.group_size}` : 'mixed groups',
    ...(s.sym !== null ? [s.sym ? 'sym' : 'asym'] : []),
    ...(s.desc_act !== null ? [s.desc_act ? 'desc_act' : 'no desc_act'] : []),
  ].join(' ');
}

function renderLayoutFile(s: LayoutFileSummary): string {
  return [
    `${s.file}: ${s.format}, ${s.quantized.length} quantized weights (${schemeText(s.format, s.scheme)}), ` +
      `${s.tensors.length} tensors as stored, ${humanBytes(s.size)}`,
    s.quantization_config
      ? `quantization config (${s.quantization_config.file}): ${JSON.stringify(s.quantization_config.config)}`
      : 'quantization config: none found',
    ...weightTable(s.quantized),
    `stored as they are: ${names(s.tensors.map((t) => `${t.name} ${t.dtype} ${shapeText(t.shape)}`))}`,
    `total: ${s.total.weights} quantized weights in ${humanBytes(s.total.bytes)}, ${bpw(s.total.bits_per_weight)} bits per weight`,
    ...(s.checksum
      ? [
          `data sha256: ${s.checksum.sha256} (${s.checksum.verified ? 'verified' : 'not verified; --verify checks it'})`,
        ]
      : []),
  ].join('\n');
}

export function renderInspection(inspection: Inspection): string {
  switch (inspection.kind) {
    case 'safetensors':
      return renderSummary(inspection.summary);
    case 'folder':
      return renderFolderSummary(inspection.summary);
    case 'gguf':
      return renderGguf(inspection.summary);
    case 'onnx':
      return renderOnnx(inspection.summary);
    case 'layout':
      return renderLayoutFile(inspection.summary);
  }
}
