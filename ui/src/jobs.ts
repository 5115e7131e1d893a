/**
 * The jobs list, live: a snapshot and then every change from GET /v1/jobs/events, no polling.
 * Each job shows its state and progress; finished ones link to their report and download their
 * result; queued and running ones can be cancelled. Two succeeded jobs can be compared.
 */
import { ApiError, call, download, followJobs, getJson } from './api';
import { h, humanBytes, scrollTable } from './dom';
import type { Job } from './types';

/** Percent done: bytes when known, else tensors; 100 once succeeded. */
export function percentOf(job: Job): number {
  if (job.state === 'succeeded') return 100;
  const p = job.progress;
  if (!p) return 0;
  if (p.bytes_total) return Math.floor((100 * p.bytes_done) / p.bytes_total);
  if (p.tensors_total) return Math.floor((100 * p.tensors_done) / p.tensors_total);
  return 0;
}

const inputOf = (job: Job): string =>
  job.input.kind === 'path'
    ? `${job.input.path} (${humanBytes(job.input.bytes)})`
    : `upload, ${humanBytes(job.input.bytes)}`;

async function downloadResult(job: Job): Promise<void> {
  const first = job.result?.files[0];
  if (job.result && !job.result.sharded && job.result.files.length === 1 && first) {
    return download(`/v1/jobs/${job.id}/result`, first.name);
  }
  const listing = await getJson<{ files: Array<{ name: string; href: string }> }>(
    `/v1/jobs/${job.id}/result`,
  );
  for (const file of listing.files) await download(file.href, file.name);
}

export function renderJobs(container: HTMLElement, signal: AbortSignal, flash?: string): void {
  const jobs = new Map<string, Job>();
  const chosen = new Set<string>();
  const status = h('p', { className: 'status', id: 'live-status', role: 'status' }, 'connecting…');
  const message = h('p', { className: 'message', role: 'alert' });
  const notice = h('p', { className: 'note', role: 'status' }, flash ?? '');
  const body = h('tbody');
  const compare = h(
    'button',
    { type: 'button', disabled: true, id: 'compare-button' },
    'Compare the two chosen',
  );
  compare.addEventListener('click', () => {
    const [a, b] = [...chosen];
    location.hash = `#/compare/${a}/${b}`;
  });
  const act = (label: string, run: () => Promise<unknown>): void => {
    message.textContent = '';
    run().catch((err: unknown) => {
      message.textContent = `${label}: ${err instanceof ApiError ? err.message : String(err)}`;
    });
  };
  const rowOf = (job: Job): HTMLElement => {
    const percent = percentOf(job);
    const finished = job.state === 'succeeded' || job.state === 'failed' || job.state === 'cancelled';
    const pick = h('input', {
      type: 'checkbox',
      'aria-label': `choose job ${job.id} to compare`,
      disabled: job.state !== 'succeeded',
      checked: chosen.has(job.id),
    });
    pick.addEventListener('change', () => {
      if (pick.checked) chosen.add(job.id);
      else chosen.delete(job.id);
      compare.disabled = chosen.size !== 2;
    });
    return h(
      'tr',
      { 'data-id': job.id, 'data-state': job.state },
      h('td', {}, pick),
      h('th', { scope: 'row' }, h('code', {}, job.id)),
      h('td', {}, job.op),
      h('td', {}, inputOf(job)),
      h(
        'td',
        { className: `state ${job.state}` },
        job.state,
        job.error && h('div', { className: 'error' }, `${job.error.code}: ${job.error.message}`),
      ),
      h(
        'td',
        {},
        h('progress', { max: 100, value: percent, 'aria-label': `progress of job ${job.id}` }),
        h('span', { className: 'percent', 'data-progress': percent }, ` ${percent} %`),
      ),
      h('td', {}, new Date(job.created_at).toLocaleString()),
      h(
        'td',
        { className: 'actions' },
        job.state === 'succeeded' && h('a', { href: `#/report/${job.id}` }, 'Report'),
        job.state === 'succeeded' &&
          h(
            'button',
            { type: 'button', onclick: () => act('download', () => downloadResult(job)) },
            'Download',
          ),
        !finished &&
          h(
            'button',
            {
              type: 'button',
              onclick: () => act('cancel', () => call(`/v1/jobs/${job.id}`, { method: 'DELETE' })),
            },
            'Cancel',
          ),
        finished &&
          h(
            'button',
            {
              type: 'button',
              onclick: () => act('delete', () => call(`/v1/jobs/${job.id}`, { method: 'DELETE' })),
            },
            'Delete',
          ),
      ),
    );
  };
  const render = (): void => {
    const sorted = [...jobs.values()].sort((a, b) =>
      a.created_at < b.created_at ? 1 : a.created_at > b.created_at ? -1 : 0,
    );
    for (const id of chosen) if (jobs.get(id)?.state !== 'succeeded') chosen.delete(id);
    compare.disabled = chosen.size !== 2;
    // rows are rebuilt on each change: keep a keyboard user's focus on the same control
    const focused = document.activeElement;
    const focusRow = focused instanceof HTMLElement ? focused.closest('tr')?.dataset['id'] : undefined;
    const focusLabel = focused?.getAttribute('aria-label') ?? focused?.textContent;
    body.replaceChildren(
      ...(sorted.length > 0
        ? sorted.map(rowOf)
        : [
            h('tr', {}, h('td', { colspan: 8 }, 'No jobs yet: ', h('a', { href: '#/submit' }, 'submit one'))),
          ]),
    );
    if (focusRow === undefined) return;
    const row = body.querySelector(`tr[data-id="${focusRow}"]`);
    const again = [...(row?.querySelectorAll<HTMLElement>('button, input, a') ?? [])].find(
      (e) => (e.getAttribute('aria-label') ?? e.textContent) === focusLabel,
    );
    again?.focus();
  };
  container.replaceChildren(
    h('h2', {}, 'Jobs'),
    status,
    notice,
    message,
    scrollTable(
      { className: 'data', id: 'jobs-table' },
      'Your jobs, newest first, updated live',
      ['Compare', 'Job', 'Operation', 'Input', 'State', 'Progress', 'Created', 'Actions'],
      body,
    ),
    compare,
  );
  render();
  void followJobs(
    (all) => {
      jobs.clear();
      for (const job of all) jobs.set(job.id, job);
      render();
    },
    (event) => {
      if ('job' in event) jobs.set(event.job.id, event.job);
      else jobs.delete(event.removed);
      render();
    },
    (live, error) => {
      status.textContent = live ? 'live' : error ? `not connected: ${error.message}` : 'reconnecting…';
      status.dataset['live'] = String(live);
    },
    signal,
  );
}
