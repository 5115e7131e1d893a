/**
 * `quantd inspect` of a file on this computer: only its header is sent (POST /v1/inspect with the
 * file's size), so a multi-gigabyte model is inspected in one small request.
 */
import { ApiError, call } from './api';
import { h, humanBytes, scrollTable } from './dom';
import type { FileSummary } from './types';

async function inspectFile(file: File): Promise<FileSummary> {
  const prefix = new DataView(await file.slice(0, 8).arrayBuffer());
  if (prefix.byteLength < 8)
    throw new ApiError(400, 'SAFETENSORS_TRUNCATED', `${file.name} is shorter than 8 bytes`);
  const headerBytes = Number(prefix.getBigUint64(0, true));
  // a length past the file or absurd is for the server to name (it sniffs other formats)
  const end =
    Number.isSafeInteger(headerBytes) && headerBytes < file.size ? 8 + headerBytes : Math.min(file.size, 64);
  const response = await call(`/v1/inspect?size=${file.size}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/x-safetensors' },
    body: file.slice(0, end),
  });
  return (await response.json()) as FileSummary;
}

export function renderInspect(container: HTMLElement): void {
  const input = h('input', { type: 'file', id: 'inspect-file', accept: '.safetensors' });
  const result = h('div', { id: 'inspect-result' });
  const problem = h('p', { className: 'message', role: 'alert' });
  input.addEventListener('change', () => {
    const file = input.files?.[0];
    problem.textContent = '';
    result.replaceChildren();
    if (!file) return;
    inspectFile(file).then(
      (summary) => result.replaceChildren(summaryTable(file.name, summary)),
      (err: unknown) => {
        problem.textContent = err instanceof ApiError ? err.message : String(err);
      },
    );
  });
  container.replaceChildren(
    h('h2', {}, 'Inspect a file'),
    h('p', {}, 'Only the file’s header leaves this computer.'),
    h('label', { for: 'inspect-file' }, 'Safetensors file '),
    input,
    problem,
    result,
  );
}

function summaryTable(name: string, s: FileSummary): HTMLElement {
  const scheme = (t: FileSummary['tensors'][number]): string =>
    t.scheme === null ? '—' : `${t.scheme}${t.group_size !== null ? ` g${t.group_size}` : ''}`;
  return scrollTable(
    { className: 'data', id: 'inspect-table' },
    `${name}: ${s.format ?? 'plain safetensors'}, ${humanBytes(s.size)}, ${s.tensors.length} tensors, ` +
      `${s.total.ratio}× smaller than its source dtypes`,
    ['Tensor', 'Kind', 'Dtype', 'Shape', 'Scheme', 'Source dtype', 'Bytes', 'Ratio'],
    h(
      'tbody',
      {},
      ...s.tensors.map((t) =>
        h(
          'tr',
          { 'data-name': t.name },
          h('th', { scope: 'row' }, t.name),
          h('td', {}, t.kind),
          h('td', {}, t.dtype),
          h('td', {}, `[${t.shape.join(', ')}]`),
          h('td', {}, scheme(t)),
          h('td', {}, t.source_dtype ?? '—'),
          h('td', { 'data-value': t.bytes }, humanBytes(t.bytes)),
          h('td', {}, `${t.ratio}×`),
        ),
      ),
    ),
  );
}
