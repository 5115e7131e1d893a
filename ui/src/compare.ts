/**
 * Two reports side by side (int8 per_channel against int4 g128, Q4_K_M against Q5_K_M): their
 * summaries, the SQNR of each tensor in both with the difference, and the worst tensors of the
 * first as grouped bars.
 */
import { barChart } from './charts';
import { formatDb, h, scrollTable } from './dom';
import { bySqnr, rowsOf, type TensorRow } from './report';
import type { RawReport } from './types';

export interface Side {
  readonly title: string;
  readonly report: RawReport;
}

const db = (row: TensorRow | undefined): string => (row === undefined ? '—' : formatDb(row.sqnr_db));

export function renderCompare(container: HTMLElement, a: Side, b: Side): void {
  const rowsA = rowsOf(a.report);
  const rowsB = new Map(rowsOf(b.report).map((r) => [r.name, r]));
  const names = [...new Set([...rowsA.map((r) => r.name), ...rowsB.keys()])];
  const byName = new Map(rowsA.map((r) => [r.name, r]));
  const worst = rowsA
    .filter((r) => r.sqnr_db !== null)
    .sort(bySqnr)
    .slice(0, 20);
  const canvas = h('canvas', { role: 'img', 'aria-label': `SQNR of ${a.title} and ${b.title}` });
  const summaryRow = (side: Side): HTMLElement => {
    const s = side.report.summary;
    return h(
      'tr',
      {},
      h('th', { scope: 'row' }, side.title),
      h('td', {}, s ? formatDb(s.sqnr_db) : '—'),
      h('td', {}, s ? `${s.compression_ratio.toFixed(2)}×` : '—'),
      h('td', {}, String(side.report.tensors.length)),
    );
  };
  const perTensor = names.map((name) => {
    const x = byName.get(name);
    const y = rowsB.get(name);
    const before = x?.sqnr_db ?? null;
    const after = y?.sqnr_db ?? null;
    const delta = before !== null && after !== null ? after - before : null;
    return h(
      'tr',
      { 'data-name': name },
      h('th', { scope: 'row' }, name),
      h('td', {}, `${db(x)} ${x ? `(${x.type})` : ''}`),
      h('td', {}, `${db(y)} ${y ? `(${y.type})` : ''}`),
      h('td', { 'data-value': delta ?? '' }, delta === null ? '—' : delta.toFixed(2)),
    );
  });
  container.replaceChildren(
    scrollTable(
      { className: 'data', id: 'compare-summary' },
      'The two runs',
      ['Job', 'SQNR (model)', 'Compression', 'Tensors'],
      h('tbody', {}, summaryRow(a), summaryRow(b)),
    ),
    h(
      'figure',
      {},
      h('div', { className: 'chart', style: `height:${80 + worst.length * 26}px` }, canvas),
      h('figcaption', {}, `SQNR (dB) of ${a.title}'s worst tensors in both runs`),
    ),
    scrollTable(
      { className: 'data', id: 'compare-table' },
      'SQNR per tensor; Δ is the second run minus the first',
      ['Tensor', a.title, b.title, 'Δ (dB)'],
      h('tbody', {}, ...perTensor),
    ),
  );
  if (worst.length > 0) {
    barChart(
      canvas,
      worst.map((r) => r.name),
      [
        { label: a.title, values: worst.map((r) => r.sqnr_db), color: '#c0504d' },
        { label: b.title, values: worst.map((r) => rowsB.get(r.name)?.sqnr_db ?? null), color: '#4a6fa5' },
      ],
      { horizontal: true, valueTitle: 'SQNR (dB)' },
    );
  }
}
