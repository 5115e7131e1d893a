/**
 * The quality report as pictures: a summary, the worst tensors as a bar chart, every tensor in a
 * sortable table, a heat map of SQNR per layer kind across the model's blocks, and the error
 * histogram of a chosen tensor. Used by the console (a job's report) and by the self-contained
 * HTML file the CLI writes (standalone.ts). Reads both report formats: a whole-model run's
 * quantd.report/1 and a layout's quantd.layout-report/1.
 */
import { barChart } from './charts';
import { formatDb, formatNumber, h, humanBytes, scrollTable } from './dom';
import type { ErrorHistogram, QualityFields, RawReport } from './types';

export interface TensorRow {
  readonly name: string;
  readonly type: string;
  readonly sqnr_db: number | null;
  readonly rmse: number | null;
  readonly max_abs_error: number | null;
  readonly clipped_fraction: number | null;
  readonly elements: number | null;
  readonly bits_per_weight: number | null;
  readonly histogram: ErrorHistogram | null;
}

const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);

/** The report's tensors as rows of one shape, whatever the format. */
export function rowsOf(report: RawReport): TensorRow[] {
  return report.tensors.map((t) => {
    const q = (t['quality'] as QualityFields | undefined) ?? (t as unknown as Partial<QualityFields>);
    const group = num(t['group_size']);
    const type =
      typeof t['type'] === 'string'
        ? t['type']
        : `${String(t['qdtype'])} ${String(t['scheme'])}${group !== null ? ` g${group}` : ''}`;
    const elements = num(q.elements);
    const bytesOut = num(t['bytes_out']);
    return {
      name: String(t['name']),
      type,
      sqnr_db: num(q.sqnr_db),
      rmse: num(q.rmse),
      max_abs_error: num(q.max_abs_error),
      clipped_fraction: num(q.clipped_fraction),
      elements,
      bits_per_weight:
        num(t['bits_per_weight']) ??
        (bytesOut !== null && elements !== null && elements > 0 ? (bytesOut * 8) / elements : null),
      histogram: (t['error_histogram'] as ErrorHistogram | undefined) ?? null,
    };
  });
}

/** Lower SQNR first; a lossless tensor (null SQNR) after every lossy one. */
export const bySqnr = (a: TensorRow, b: TensorRow): number =>
  (a.sqnr_db ?? Infinity) - (b.sqnr_db ?? Infinity) || a.name.localeCompare(b.name);

interface Column {
  readonly key: keyof TensorRow;
  readonly title: string;
  readonly text: (row: TensorRow) => string;
}

const COLUMNS: readonly Column[] = [
  { key: 'name', title: 'Tensor', text: (r) => r.name },
  { key: 'type', title: 'Type', text: (r) => r.type },
  { key: 'sqnr_db', title: 'SQNR (dB)', text: (r) => (r.rmse === null ? '—' : formatDb(r.sqnr_db)) },
  { key: 'rmse', title: 'RMSE', text: (r) => (r.rmse === null ? '—' : formatNumber(r.rmse)) },
  {
    key: 'max_abs_error',
    title: 'Max |error|',
    text: (r) => (r.max_abs_error === null ? '—' : formatNumber(r.max_abs_error)),
  },
  {
    key: 'clipped_fraction',
    title: 'Clipped',
    text: (r) => (r.clipped_fraction === null ? '—' : `${(r.clipped_fraction * 100).toFixed(3)} %`),
  },
  {
    key: 'bits_per_weight',
    title: 'Bits/weight',
    text: (r) => (r.bits_per_weight === null ? '—' : r.bits_per_weight.toFixed(2)),
  },
];

function compareBy(key: keyof TensorRow): (a: TensorRow, b: TensorRow) => number {
  if (key === 'sqnr_db') return bySqnr;
  return (a, b) => {
    const x = a[key];
    const y = b[key];
    if (typeof x === 'string' && typeof y === 'string') return x.localeCompare(y);
    return ((x as number | null) ?? -Infinity) - ((y as number | null) ?? -Infinity);
  };
}

/**
 * A table whose column headers are buttons that sort it (aria-sort says how); each row's cells
 * carry their raw value in data-value. `onPick` is called with a row's tensor when it is chosen.
 */
export function tensorTable(rows: readonly TensorRow[], onPick: (name: string) => void): HTMLElement {
  let sortKey: keyof TensorRow = 'sqnr_db';
  let ascending = true;
  const body = h('tbody');
  const headers = COLUMNS.map((c) =>
    h(
      'th',
      { scope: 'col', 'data-key': c.key },
      h('button', { type: 'button', className: 'sort', onclick: () => sortBy(c.key) }, c.title),
    ),
  );
  const render = (): void => {
    const compare = compareBy(sortKey);
    const sorted = [...rows].sort((a, b) => (ascending ? compare(a, b) : compare(b, a)));
    body.replaceChildren(
      ...sorted.map((row) =>
        h(
          'tr',
          { 'data-name': row.name },
          ...COLUMNS.map((c, i) =>
            i === 0
              ? h(
                  'th',
                  { scope: 'row' },
                  h(
                    'button',
                    { type: 'button', className: 'link', onclick: () => onPick(row.name) },
                    row.name,
                  ),
                )
              : h('td', { 'data-key': c.key, 'data-value': String(row[c.key] ?? '') }, c.text(row)),
          ),
        ),
      ),
    );
    headers.forEach((th, i) => {
      const key = COLUMNS[i]!.key;
      th.setAttribute('aria-sort', key === sortKey ? (ascending ? 'ascending' : 'descending') : 'none');
    });
  };
  const sortBy = (key: keyof TensorRow): void => {
    ascending = key === sortKey ? !ascending : true;
    sortKey = key;
    render();
  };
  render();
  return scrollTable(
    { id: 'tensor-table', className: 'data' },
    'Every quantized tensor; choose a column to sort, a tensor to see its error histogram',
    headers,
    body,
  );
}

/** `model.layers.12.mlp.down_proj.weight` → block 12, kind `mlp.down_proj.weight` (also blk.N, h.N). */
export function blockOf(name: string): { block: number; kind: string } | null {
  const match = /(?:^|\.)(?:layers|layer|blocks|blk|h)\.(\d+)\.(.+)$/.exec(name);
  return match ? { block: Number(match[1]), kind: match[2]! } : null;
}

/** Red (low SQNR) to green (high) over the report's own range. */
function heat(value: number, low: number, high: number): string {
  const t = high > low ? (value - low) / (high - low) : 1;
  return `hsl(${Math.round(t * 120)} 70% ${80 - Math.round(t * 10)}%)`;
}

/** SQNR per layer kind (rows) across blocks (columns), as a table of coloured cells. */
export function heatMap(rows: readonly TensorRow[]): HTMLElement | null {
  const cells = new Map<string, Map<number, TensorRow>>();
  let blocks = 0;
  for (const row of rows) {
    const at = blockOf(row.name);
    if (!at || row.sqnr_db === null) continue;
    if (!cells.has(at.kind)) cells.set(at.kind, new Map());
    cells.get(at.kind)!.set(at.block, row);
    blocks = Math.max(blocks, at.block + 1);
  }
  if (cells.size === 0 || blocks < 2) return null;
  const values = rows.map((r) => r.sqnr_db).filter((v): v is number => v !== null);
  const low = Math.min(...values);
  const high = Math.max(...values);
  const columns = Array.from({ length: blocks }, (_, b) => b);
  const body = h(
    'tbody',
    {},
    ...[...cells.entries()]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([kind, byBlock]) =>
        h(
          'tr',
          {},
          h('th', { scope: 'row' }, kind),
          ...columns.map((b) => {
            const row = byBlock.get(b);
            if (!row || row.sqnr_db === null) return h('td', { className: 'empty' }, '');
            return h(
              'td',
              {
                style: `background:${heat(row.sqnr_db, low, high)}`,
                title: `${row.name}: ${formatDb(row.sqnr_db)}`,
              },
              row.sqnr_db.toFixed(1),
            );
          }),
        ),
      ),
  );
  return scrollTable(
    { id: 'heat-map', className: 'heat' },
    `SQNR (dB) per layer across blocks, red ${low.toFixed(1)} to green ${high.toFixed(1)}`,
    ['Layer', ...columns],
    body,
  );
}

function figure(caption: string, height: number): { element: HTMLElement; canvas: HTMLCanvasElement } {
  const canvas = h('canvas', { role: 'img', 'aria-label': caption });
  const element = h(
    'figure',
    {},
    h('div', { className: 'chart', style: `height:${height}px` }, canvas),
    h('figcaption', {}, caption),
  );
  return { element, canvas };
}

/** The summary of the whole run, as a definition list. */
function summaryOf(report: RawReport, rows: readonly TensorRow[]): HTMLElement {
  const s = report.summary;
  const items: Array<[string, string]> = [];
  if (s) {
    items.push(
      ['Tensors quantized', String(s.tensors_quantized)],
      ['Passed through', String(s.tensors_passed_through)],
      ['SQNR (whole model)', formatDb(s.sqnr_db)],
      ['RMSE', formatNumber(s.rmse)],
      ['Max |error|', formatNumber(s.max_abs_error)],
      ['Size', `${humanBytes(s.bytes_in)} → ${humanBytes(s.bytes_out)} (${s.compression_ratio.toFixed(2)}×)`],
      ['Time', `${s.seconds.toFixed(2)} s`],
    );
  } else {
    items.push(['Layout', String(report.layout)], ['Tensors', String(rows.length)]);
    const bits = report.bits_per_weight ?? null;
    if (bits !== null) items.push(['Bits per weight', bits.toFixed(3)]);
  }
  return h(
    'dl',
    { className: 'summary', id: 'report-summary' },
    ...items.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]),
  );
}

/** The error histogram of one tensor (chosen in a select, or by a table row). */
function histogramPanel(rows: readonly TensorRow[]): { element: HTMLElement; show: (name: string) => void } {
  const measured = rows.filter((r) => r.histogram !== null);
  const select = h(
    'select',
    { id: 'histogram-tensor' },
    ...measured.map((r) => h('option', { value: r.name }, r.name)),
  );
  const { element: fig, canvas } = figure('Error (dequantized − original) on a sample of the tensor', 260);
  const note = h('p', { className: 'note', id: 'histogram-note' });
  let chart: ReturnType<typeof barChart> | null = null;
  const show = (name: string): void => {
    const row = rows.find((r) => r.name === name);
    chart?.destroy();
    chart = null;
    if (!row?.histogram) {
      note.textContent = `${name}: no histogram (this path measures totals only)`;
      return;
    }
    select.value = name;
    const { limit, counts, samples } = row.histogram;
    const width = (2 * limit) / counts.length;
    const labels = counts.map((_, k) => formatNumber(-limit + (k + 0.5) * width));
    chart = barChart(canvas, labels, [{ label: 'elements', values: counts, color: '#4a6fa5' }], {
      valueTitle: 'elements',
      categoryTitle: 'error',
    });
    note.textContent = `${name}: ${samples} elements sampled evenly, errors within ±${formatNumber(limit)}`;
  };
  select.addEventListener('change', () => show(select.value));
  const element = h(
    'section',
    { 'aria-labelledby': 'histogram-title' },
    h('h3', { id: 'histogram-title' }, 'Error histogram'),
    measured.length === 0
      ? h('p', { className: 'note' }, 'This report has no histograms.')
      : h('label', {}, 'Tensor ', select),
    fig,
    note,
  );
  if (measured[0]) queueMicrotask(() => show(measured[0]!.name));
  return { element, show };
}

/** Renders `report` into `container`. */
export function renderReport(container: HTMLElement, report: RawReport): void {
  const rows = rowsOf(report);
  const worst = rows
    .filter((r) => r.sqnr_db !== null)
    .sort(bySqnr)
    .slice(0, 16);
  const bars = figure(
    `SQNR of the ${worst.length} worst tensors (dB, higher is better)`,
    60 + worst.length * 22,
  );
  const histogram = histogramPanel(rows);
  const map = heatMap(rows);
  container.replaceChildren(
    h(
      'section',
      { 'aria-labelledby': 'summary-title' },
      h('h3', { id: 'summary-title' }, 'Summary'),
      summaryOf(report, rows),
    ),
    h(
      'section',
      { 'aria-labelledby': 'worst-title' },
      h('h3', { id: 'worst-title' }, 'Worst tensors'),
      bars.element,
    ),
    ...(map
      ? [
          h(
            'section',
            { 'aria-labelledby': 'heat-title' },
            h('h3', { id: 'heat-title' }, 'Per-layer heat map'),
            map,
          ),
        ]
      : []),
    histogram.element,
    h(
      'section',
      { 'aria-labelledby': 'tensors-title' },
      h('h3', { id: 'tensors-title' }, 'Tensors'),
      tensorTable(rows, histogram.show),
    ),
  );
  if (worst.length > 0) {
    barChart(
      bars.canvas,
      worst.map((r) => r.name),
      [{ label: 'SQNR (dB)', values: worst.map((r) => r.sqnr_db), color: '#c0504d' }],
      { horizontal: true, valueTitle: 'SQNR (dB)' },
    );
  }
}
