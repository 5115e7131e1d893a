/**
 * The console (/ui) in a real browser (Debian's Chromium through playwright-core): a job submitted
 * through the page, its progress followed live to 100 %, its report opened, sorted and read back
 * against the API's JSON, two reports compared, a file inspected, validation errors shown beside
 * their field, an axe-core audit of every page; then the same with API keys on (the key entered
 * once, kept for the tab's session), and the CLI's self-contained HTML report opened from disk.
 */
import { cpSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, Page } from 'playwright-core';
import { REPO, quantd } from '../cli/run-cli.js';
import { quantdAsync } from '../cli/cli-helpers.js';
import { send } from '../http/helpers.js';
import {
  f32Tensor,
  finished,
  json,
  manyTensors,
  startJobServer,
  tempDir,
  waitJob,
  writeModel,
  type Job,
  type Tensor,
} from '../jobs/helpers.js';
import { fixtureDir } from '../gguf-hf/llama-cpp.js';
import { HAVE_BROWSER, launchBrowser, seriousViolations } from './browser.js';

interface ReportTensor {
  readonly name: string;
  readonly sqnr_db: number | null;
  readonly rmse: number;
  readonly max_abs_error: number;
  readonly error_histogram?: { readonly samples: number; readonly counts: readonly number[] };
}
interface Report {
  readonly tensors: readonly ReportTensor[];
}
interface LayoutReportJson {
  readonly tensors: ReadonlyArray<{
    readonly name: string;
    readonly type: string;
    readonly quality?: { readonly sqnr_db: number | null };
  }>;
}

/** A llama-shaped model small enough for a browser test: 3 blocks × 3 projections. */
function llamaLike(seed: number): Tensor[] {
  const tensors: Tensor[] = [];
  for (let layer = 0; layer < 3; layer++) {
    for (const [k, kind] of ['self_attn.q_proj', 'self_attn.v_proj', 'mlp.down_proj'].entries()) {
      tensors.push(f32Tensor(`model.layers.${layer}.${kind}.weight`, [32, 64], seed + 10 * layer + k));
    }
  }
  return tensors;
}

const rowNames = (page: Page, table: string): Promise<string[]> =>
  page.$$eval(`${table} tbody tr`, (rows) => rows.map((r) => r.getAttribute('data-name') ?? ''));

async function expectAccessible(page: Page, what: string): Promise<void> {
  expect(await seriousViolations(page), `axe-core on ${what}`).toEqual([]);
}

/** Waits for the job row to reach `state`; returns its id. */
async function waitRow(page: Page, id: string, state: string): Promise<void> {
  await page.waitForSelector(`#jobs-table tr[data-id="${id}"][data-state="${state}"]`, { timeout: 30_000 });
}

describe.skipIf(!HAVE_BROWSER)('the console in Chromium', () => {
  let browser: Browser;
  const dir = tempDir('ui');
  const model = writeModel(join(dir, 'model.safetensors'), llamaLike(3));
  // 40 tensors, each task held 100 ms: a job that runs for seconds, to be cancelled
  writeModel(join(dir, 'many.safetensors'), manyTensors(40));

  beforeAll(async () => {
    browser = await launchBrowser();
  });
  afterAll(async () => {
    await browser?.close();
  });

  it('submits, follows, reports, sorts, compares and inspects, with auth off', async () => {
    // every tensor goes to the pool, whose tasks are each held 100 ms: the job runs long enough
    // for its progress to be seen moving
    const { server, port, base } = await startJobServer(dir, { QUANTD_INLINE_LIMIT: '0' }, 100);
    const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    const requests: string[] = [];
    page.on('request', (r) => requests.push(`${r.method()} ${new URL(r.url()).pathname}`));
    try {
      await page.goto(`${base}/ui/#/submit`);
      await expectAccessible(page, 'the submit page');

      // a bad option: the API's problem, beside its field
      await page.check('#source-path');
      await page.fill('#input', 'model.safetensors');
      await page.selectOption('#preset', { label: 'Custom options (below)' });
      await page.click('details summary');
      await page.fill('#qdtype', 'int3');
      await page.click('#submit-form button[type=submit]');
      await page.waitForSelector('#error-qdtype:not(:empty)');
      const direct = await send(port, '/v1/jobs', {
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ input: 'model.safetensors', op: 'quantize', params: { qdtype: 'int3' } }),
      });
      const problem = json<{ code: string; detail: string }>(direct);
      expect(await page.textContent('#error-qdtype')).toBe(`${problem.code}: ${problem.detail}`);
      expect(await page.getAttribute('#qdtype', 'aria-invalid')).toBe('true');
      await expectAccessible(page, 'the submit page with an error');

      // an upload through the page: int4 per_group g32
      await page.fill('#qdtype', '');
      await page.check('#source-file');
      await page.setInputFiles('#file', model);
      await page.selectOption('#preset', { label: 'int4 per_group g32' });
      requests.length = 0;
      await page.click('#submit-form button[type=submit]');
      await page.waitForSelector('#jobs-table tbody tr[data-id]');
      const first = (await page.getAttribute('#jobs-table tbody tr[data-id]', 'data-id'))!;
      // progress moves while it runs, and reaches 100 % when it succeeds
      const seen = new Set<string>();
      for (let i = 0; i < 600; i++) {
        const value = await page.getAttribute(`tr[data-id="${first}"] .percent`, 'data-progress');
        if (value !== null) seen.add(value);
        if ((await page.getAttribute(`tr[data-id="${first}"]`, 'data-state')) === 'succeeded') break;
        await page.waitForTimeout(25);
      }
      await waitRow(page, first, 'succeeded');
      expect(await page.getAttribute(`tr[data-id="${first}"] .percent`, 'data-progress')).toBe('100');
      expect(
        [...seen].some((v) => v !== '0' && v !== '100'),
        `progress seen: ${[...seen]}`,
      ).toBe(true);
      // live: one event stream, no polling of the job list or the job
      expect(requests.filter((r) => r === 'GET /v1/jobs/events')).toHaveLength(1);
      expect(requests.filter((r) => /^GET \/v1\/jobs(\/[^/]+)?$/.test(r) && !r.endsWith('/events'))).toEqual(
        [],
      );
      await expectAccessible(page, 'the jobs page');

      // a second job, from the data directory: int8 per_channel
      await page.click('nav a[href="#/submit"]');
      await page.check('#source-path');
      await page.fill('#input', 'model.safetensors');
      await page.selectOption('#preset', { label: 'int8 per_channel (symmetric)' });
      await page.click('#submit-form button[type=submit]');
      await page.waitForSelector('#jobs-table tbody tr[data-id]:nth-child(2)');
      const second = (await page.getAttribute('#jobs-table tbody tr[data-id]', 'data-id'))!;
      expect(second).not.toBe(first);
      await waitRow(page, second, 'succeeded');

      // the report: every value is the API's
      await page.click(`tr[data-id="${first}"] a:text("Report")`);
      await page.waitForSelector('#tensor-table');
      const report = json<Report>(await send(port, `/v1/jobs/${first}/report`));
      const worstFirst = [...report.tensors].map((t) => t.name);
      expect(await rowNames(page, '#tensor-table')).toEqual(worstFirst);
      for (const t of report.tensors) {
        const cell = (key: string): Promise<string | null> =>
          page.getAttribute(`#tensor-table tr[data-name="${t.name}"] td[data-key="${key}"]`, 'data-value');
        expect(Number(await cell('sqnr_db'))).toBe(t.sqnr_db);
        expect(Number(await cell('rmse'))).toBe(t.rmse);
        expect(Number(await cell('max_abs_error'))).toBe(t.max_abs_error);
      }
      // sorted by a column header, by keyboard as a user without a mouse would
      await page.focus('#tensor-table th[data-key="rmse"] button');
      await page.keyboard.press('Enter');
      expect(await page.getAttribute('#tensor-table th[data-key="rmse"]', 'aria-sort')).toBe('ascending');
      const byRmse = [...report.tensors].sort((a, b) => a.rmse - b.rmse).map((t) => t.name);
      expect(await rowNames(page, '#tensor-table')).toEqual(byRmse);
      await page.keyboard.press('Enter');
      expect(await page.getAttribute('#tensor-table th[data-key="rmse"]', 'aria-sort')).toBe('descending');
      expect(await rowNames(page, '#tensor-table')).toEqual([...byRmse].reverse());
      // the heat map: three layer kinds across three blocks
      expect(await page.$$eval('#heat-map tbody tr', (rows) => rows.length)).toBe(3);
      expect(await page.$$eval('#heat-map thead th', (cells) => cells.length)).toBe(4);
      // a tensor's histogram, chosen in the table
      const chosen = report.tensors[2]!;
      await page.click(`#tensor-table tr[data-name="${chosen.name}"] th button`);
      expect(await page.inputValue('#histogram-tensor')).toBe(chosen.name);
      expect(await page.textContent('#histogram-note')).toContain(
        `${chosen.error_histogram!.samples} elements`,
      );
      expect(await page.$$eval('canvas', (c) => c.length)).toBe(2);
      await expectAccessible(page, 'the report page');
      const shot = await page.screenshot({ fullPage: true });
      mkdirSync(join(REPO, 'build'), { recursive: true });
      writeFileSync(join(REPO, 'build', 'ui-report.png'), shot);
      expect(shot.readUInt32BE(16), 'screenshot width').toBe(1200);

      // compare the two jobs
      await page.click('nav a[href="#/jobs"]');
      await page.check(`input[aria-label="choose job ${first} to compare"]`);
      await page.check(`input[aria-label="choose job ${second} to compare"]`);
      await page.click('#compare-button');
      await page.waitForSelector('#compare-table');
      const other = json<Report>(await send(port, `/v1/jobs/${second}/report`));
      const sqnrOf = new Map(other.tensors.map((t) => [t.name, t.sqnr_db!]));
      const [a, b] = new URL(page.url()).hash.split('/').slice(2);
      const [ra, rb] = a === first ? [report, other] : [other, report];
      const sqnrB = b === first ? new Map(report.tensors.map((t) => [t.name, t.sqnr_db!])) : sqnrOf;
      for (const t of ra.tensors) {
        const delta = await page.getAttribute(
          `#compare-table tr[data-name="${t.name}"] td[data-value]`,
          'data-value',
        );
        expect(Number(delta)).toBeCloseTo(sqnrB.get(t.name)! - t.sqnr_db!, 10);
      }
      expect(rb.tensors).toHaveLength(ra.tensors.length);
      await expectAccessible(page, 'the compare page');

      // a running job is cancelled from the list; a finished one's result downloads as the API serves it
      await page.click('nav a[href="#/jobs"]');
      const long = json<Job>(
        await send(port, '/v1/jobs', {
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ input: 'many.safetensors', params: { qdtype: 'int8' } }),
        }),
      );
      await page.click(`tr[data-id="${long.id}"] button:text("Cancel")`);
      await waitRow(page, long.id, 'cancelled');
      expect(json<Job>(await send(port, `/v1/jobs/${long.id}`)).state).toBe('cancelled');
      const [download] = await Promise.all([
        page.waitForEvent('download'),
        page.click(`tr[data-id="${first}"] button:text("Download")`),
      ]);
      expect(download.suggestedFilename()).toBe('model.safetensors');
      const served = (await send(port, `/v1/jobs/${first}/result`)).body;
      expect(readFileSync(await download.path()).equals(served)).toBe(true);

      // inspect the int4 result: the page sends only the header
      const result = join(dir, 'result.safetensors');
      writeFileSync(result, (await send(port, `/v1/jobs/${first}/result`)).body);
      await page.click('nav a[href="#/inspect"]');
      await page.setInputFiles('#inspect-file', result);
      await page.waitForSelector('#inspect-table');
      const summary = json<{ tensors: Array<{ name: string; scheme: string; group_size: number }> }>(
        await send(port, '/v1/inspect', {
          headers: { 'content-type': 'application/x-safetensors' },
          body: new Uint8Array(readFileSync(result)),
        }),
      );
      expect(await rowNames(page, '#inspect-table')).toEqual(summary.tensors.map((t) => t.name));
      expect(summary.tensors.every((t) => t.scheme === 'per_group' && t.group_size === 32)).toBe(true);
      await expectAccessible(page, 'the inspect page');
      expect(errors).toEqual([]);
    } finally {
      await page.close();
      await server.shutdown('test');
    }
  });

  it('compares two llama-quantize file types (Q4_K_M against Q5_K_M) from their layout reports', async () => {
    const data = tempDir('ui-gguf');
    cpSync(fixtureDir('llama-spm'), join(data, 'llama'), { recursive: true });
    const { server, port, base } = await startJobServer(data);
    const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
    try {
      const run = async (ftype: string): Promise<{ id: string; report: LayoutReportJson }> => {
        const submitted = json<Job>(
          await send(port, '/v1/jobs', {
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ input: 'llama', params: { layout: `gguf:ftype=${ftype}` } }),
          }),
        );
        const job = await waitJob(port, submitted.id, finished);
        expect(job.state, JSON.stringify(job.error)).toBe('succeeded');
        return { id: job.id, report: json<LayoutReportJson>(await send(port, `/v1/jobs/${job.id}/report`)) };
      };
      const q4 = await run('Q4_K_M');
      const q5 = await run('Q5_K_M');
      const measured = q4.report.tensors.filter((t) => t.quality !== undefined);
      expect(measured.length).toBeGreaterThan(0);

      await page.goto(`${base}/ui/#/report/${q4.id}`);
      await page.waitForSelector('#tensor-table');
      expect((await rowNames(page, '#tensor-table')).sort()).toEqual(
        q4.report.tensors.map((t) => t.name).sort(),
      );
      for (const t of q4.report.tensors) {
        const row = `#tensor-table tr[data-name="${t.name}"]`;
        expect(await page.textContent(`${row} td[data-key="type"]`)).toBe(t.type);
        const sqnr = await page.getAttribute(`${row} td[data-key="sqnr_db"]`, 'data-value');
        expect(sqnr === '' ? null : Number(sqnr)).toBe(t.quality?.sqnr_db ?? null);
      }
      // a measured tensor's histogram is there to choose
      expect(await page.$$eval('#histogram-tensor option', (o) => o.length)).toBe(measured.length);
      await expectAccessible(page, 'a layout report');

      await page.goto(`${base}/ui/#/compare/${q4.id}/${q5.id}`);
      await page.waitForSelector('#compare-table');
      const q5Sqnr = new Map(q5.report.tensors.map((t) => [t.name, t.quality?.sqnr_db ?? null]));
      for (const t of measured) {
        const delta = await page.getAttribute(
          `#compare-table tr[data-name="${t.name}"] td[data-value]`,
          'data-value',
        );
        expect(Number(delta), t.name).toBeCloseTo(q5Sqnr.get(t.name)! - t.quality!.sqnr_db!, 10);
      }
      await expectAccessible(page, 'the compare page of two file types');
    } finally {
      await page.close();
      await server.shutdown('test');
    }
  });

  it('asks for the API key once and keeps it for the session, with auth on', async () => {
    const data = tempDir('ui-auth');
    writeModel(join(data, 'model.safetensors'), llamaLike(5));
    const { server, port, base } = await startJobServer(data, {
      QUANTD_API_KEYS: 'key-one-0123456789,key-two-0123456789',
    });
    const context = await browser.newContext();
    const page = await context.newPage();
    try {
      await page.goto(`${base}/ui/`);
      await page.waitForSelector('#key-form:not([hidden])');
      expect(await page.textContent('#key-message')).toBe('This server needs an API key.');
      await expectAccessible(page, 'the key prompt');
      await page.fill('#api-key', 'wrong');
      await page.click('#key-form button[type=submit]');
      await page.waitForSelector('#key-form:not([hidden])');
      expect(await page.textContent('#key-message')).toContain('UNAUTHORIZED');
      await page.fill('#api-key', 'key-one-0123456789');
      await page.click('#key-form button[type=submit]');
      await page.waitForSelector('#live-status[data-live="true"]');
      // a job of the other key is not this key's to see
      const theirs = await send(port, '/v1/jobs', {
        headers: { 'content-type': 'application/json', authorization: 'Bearer key-two-0123456789' },
        body: JSON.stringify({ input: 'nothing.safetensors' }),
      });
      expect(theirs.status).toBe(404);
      const mine = await send(port, '/v1/jobs', {
        headers: { 'content-type': 'application/json', authorization: 'Bearer key-one-0123456789' },
        body: JSON.stringify({ input: 'model.safetensors' }),
      });
      const id = json<{ id: string }>(mine).id;
      await waitRow(page, id, 'succeeded');
      // a reload in the same tab: no prompt, the key is still there
      await page.reload();
      await page.waitForSelector('#live-status[data-live="true"]');
      expect(await page.isHidden('#key-form')).toBe(true);
      await waitRow(page, id, 'succeeded');
      await page.click(`tr[data-id="${id}"] a:text("Report")`);
      await page.waitForSelector('#tensor-table');
      // forgetting it asks again
      await page.click('#forget-key');
      await page.waitForSelector('#key-form:not([hidden])');
    } finally {
      await context.close();
      await server.shutdown('test');
    }
  });

  it('shows the API docs (/docs) under their Content-Security-Policy: Swagger UI renders, nothing refused', async () => {
    const { server, base } = await startJobServer(tempDir('ui-docs'));
    const page = await browser.newPage();
    const refused: string[] = [];
    page.on('console', (m) => {
      if (/Content.Security.Policy|Refused to/i.test(m.text())) refused.push(m.text());
    });
    page.on('pageerror', (e) => refused.push(e.message));
    try {
      const response = await page.goto(`${base}/docs/`);
      expect(response?.headers()['content-security-policy']).toMatch(
        /^default-src 'none'; script-src 'self'/,
      );
      await page.waitForSelector('.swagger-ui .info .title', { timeout: 20_000 });
      expect(await page.textContent('.swagger-ui .info .title')).toContain('quantd');
      // the operations are listed, and one opens (rendered by the page's own scripts)
      await page.waitForSelector('.opblock-summary');
      await page.click('.opblock-summary >> nth=0');
      await page.waitForSelector('.opblock-body');
      expect(refused).toEqual([]);
    } finally {
      await page.close();
      await server.shutdown('test');
    }
  });

  it("opens the CLI's self-contained HTML report (local and --remote) from disk, with the JSON report's values", async () => {
    const html = join(dir, 'report.html');
    const int4 = ['--qdtype', 'int4', '--scheme', 'per_group', '--group-size', '32'];
    // the page, then the JSON of the same run to compare it with
    for (const [report, out] of [
      [html, 'cli-out.safetensors'],
      [join(dir, 'report.json'), 'cli-out-json.safetensors'],
    ] as const) {
      const run = quantd(['quantize', model, '-o', join(dir, out), ...int4, '--report', report]);
      expect(run.code, run.stderr).toBe(0);
    }
    const report = JSON.parse(readFileSync(join(dir, 'report.json'), 'utf8')) as Report;
    // the same through a server: --remote fetches the job's report and writes the page
    const { server, base } = await startJobServer(tempDir('ui-remote'));
    const remoteHtml = join(dir, 'remote-report.html');
    try {
      const remote = await quantdAsync([
        'quantize',
        model,
        '-o',
        join(dir, 'remote-out.safetensors'),
        ...int4,
        ...['--remote', base, '--report', remoteHtml],
      ]);
      expect(remote.code, remote.stderr).toBe(0);
    } finally {
      await server.shutdown('test');
    }
    const page = await browser.newPage();
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    page.on('request', (r) => {
      if (!r.url().startsWith('file:')) errors.push(`fetched ${r.url()}`);
    });
    try {
      for (const file of [html, remoteHtml]) {
        await page.goto(pathToFileURL(file).href);
        await page.waitForSelector('#tensor-table');
        expect(await rowNames(page, '#tensor-table')).toEqual(report.tensors.map((t) => t.name));
        for (const t of report.tensors) {
          const sqnr = await page.getAttribute(
            `#tensor-table tr[data-name="${t.name}"] td[data-key="sqnr_db"]`,
            'data-value',
          );
          expect(Number(sqnr), file).toBe(t.sqnr_db);
        }
      }
      await expectAccessible(page, 'the HTML report');
      expect(errors).toEqual([]);
    } finally {
      await page.close();
    }
  });
});
