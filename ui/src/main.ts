/**
 * The console's shell: navigation, the API key (asked for when the server answers 401, kept for
 * the tab's session), and a hash router over the views — #/jobs, #/submit, #/inspect,
 * #/report/ID, #/compare/A/B.
 */
import { ApiError, apiKey, getJson, setApiKey, whenUnauthorized } from './api';
import { renderCompare } from './compare';
import { h } from './dom';
import { renderInspect } from './inspect';
import { renderJobs } from './jobs';
import { renderReport, rowsOf } from './report';
import { renderSubmit } from './submit';
import type { RawReport } from './types';
import './style.css';

const main = document.getElementById('main')!;
const keyForm = document.getElementById('key-form') as HTMLFormElement;
const keyInput = document.getElementById('api-key') as HTMLInputElement;
const keyMessage = document.getElementById('key-message')!;
const forget = document.getElementById('forget-key') as HTMLButtonElement;
let view = new AbortController();
let flash: string | undefined;

function askForKey(error?: ApiError): void {
  keyForm.hidden = false;
  keyMessage.textContent = error
    ? apiKey() === null
      ? 'This server needs an API key.'
      : `The key was refused (${error.code}). Enter another.`
    : '';
  keyInput.focus();
}

keyForm.addEventListener('submit', (event) => {
  event.preventDefault();
  setApiKey(keyInput.value.trim());
  keyInput.value = '';
  keyForm.hidden = true;
  forget.hidden = apiKey() === null;
  route();
});
forget.addEventListener('click', () => {
  setApiKey(null);
  forget.hidden = true;
  route();
});
whenUnauthorized(askForKey);

async function showReport(id: string, signal: AbortSignal): Promise<void> {
  main.replaceChildren(h('h2', {}, `Report of job ${id}`), h('p', { role: 'status' }, 'loading…'));
  let report: RawReport;
  try {
    report = await getJson<RawReport>(`/v1/jobs/${encodeURIComponent(id)}/report`);
  } catch (err) {
    // a layout job (GGUF, GPTQ, …) writes no report: say so rather than show an error page
    if (!(err instanceof ApiError) || err.code !== 'NOT_FOUND') throw err;
    main.replaceChildren(h('h2', {}, `Report of job ${id}`), h('p', { role: 'status' }, err.detail));
    return;
  }
  if (signal.aborted) return;
  const body = h('div', { id: 'report' });
  main.replaceChildren(h('h2', {}, `Report of job ${id}`), body);
  renderReport(body, report);
}

async function showCompare(a: string, b: string, signal: AbortSignal): Promise<void> {
  main.replaceChildren(h('h2', {}, 'Compare'), h('p', { role: 'status' }, 'loading…'));
  const [ra, rb] = await Promise.all(
    [a, b].map((id) => getJson<RawReport>(`/v1/jobs/${encodeURIComponent(id)}/report`)),
  );
  if (signal.aborted) return;
  const body = h('div', { id: 'compare' });
  main.replaceChildren(h('h2', {}, `Job ${a} against job ${b}`), body);
  // short names for the columns and the legend: the id's first characters and the run's types
  const title = (id: string, report: RawReport): string =>
    `${id.slice(0, 8)} (${[...new Set(rowsOf(report).map((r) => r.type))].slice(0, 2).join(', ')})`;
  renderCompare(body, { title: title(a, ra!), report: ra! }, { title: title(b, rb!), report: rb! });
}

function route(): void {
  view.abort();
  view = new AbortController();
  const signal = view.signal;
  const [page, ...args] = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  for (const link of document.querySelectorAll('nav a')) {
    if (link.getAttribute('href') === `#/${page || 'jobs'}`) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  const failed = (err: unknown): void => {
    if (signal.aborted) return;
    main.replaceChildren(
      h('h2', {}, 'Error'),
      h('p', { className: 'message', role: 'alert' }, err instanceof ApiError ? err.message : String(err)),
    );
  };
  switch (page) {
    case 'submit':
      renderSubmit(main, (job) => {
        flash = `Job ${job.id} submitted.`;
        location.hash = '#/jobs';
      });
      break;
    case 'inspect':
      renderInspect(main);
      break;
    case 'report':
      showReport(args[0] ?? '', signal).catch(failed);
      break;
    case 'compare':
      showCompare(args[0] ?? '', args[1] ?? '', signal).catch(failed);
      break;
    default:
      renderJobs(main, signal, flash);
      flash = undefined;
  }
  main.focus();
}

window.addEventListener('hashchange', route);
forget.hidden = apiKey() === null;
route();
fetch('/healthz')
  .then((r) => r.json() as Promise<{ version: string; backend: string; isa: string }>)
  .then((health) => {
    document.getElementById('server')!.textContent =
      `quantd ${health.version} · ${health.backend} (${health.isa})`;
  })
  .catch(() => {});
