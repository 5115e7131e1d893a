/**
 * `--report FILE`: the quality report as JSON, or — when FILE ends in .html — as one
 * self-contained page that draws it (the console's report view and Chart.js, inlined from
 * dist/report, built with the console by `npm run build:ui`). The page needs no server and no
 * network: it can be mailed, attached to a ticket or opened from a CI artifact.
 */
import { readFile } from 'node:fs/promises';
import { basename, extname, join } from 'node:path';
import { QuantdError } from '../errors/index.js';
import { packageRoot } from '../package-info.js';

export type ReportFormatter = (report: unknown) => string;

/** Whether `--report` names a page (FILE.html, FILE.htm) rather than JSON. */
export const isHtmlReport = (path: string): boolean => /\.html?$/i.test(path);

/** Text safe inside <script> or <style>: no "</" can close the element early. */
const inert = (text: string): string => text.replace(/<\//g, '<\\/');

const escapeHtml = (text: string): string =>
  text.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]!);

/**
 * How to write the report to `path`; for HTML the page's assets are read now, so that a missing
 * build is reported before a long run, not after it.
 */
export async function reportFormatter(path: string): Promise<ReportFormatter> {
  if (!isHtmlReport(path)) return (report) => `${JSON.stringify(report, null, 2)}\n`;
  const dir = join(packageRoot(), 'dist', 'report');
  let script: string;
  let style: string;
  try {
    [script, style] = await Promise.all([
      readFile(join(dir, 'report.js'), 'utf8'),
      readFile(join(dir, 'report.css'), 'utf8'),
    ]);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    throw new QuantdError('USAGE', {
      detail: `an HTML report needs the console's build (${dir} is missing): run npm run build:ui, or write the report as JSON`,
    });
  }
  const title = `quantd report: ${basename(path, extname(path))}`;
  return (report) =>
    [
      '<!doctype html>',
      '<html lang="en">',
      '<head>',
      '<meta charset="utf-8" />',
      '<meta name="viewport" content="width=device-width, initial-scale=1" />',
      `<title>${escapeHtml(title)}</title>`,
      `<style>${inert(style)}</style>`,
      '</head>',
      '<body>',
      `<main><h1>${escapeHtml(title)}</h1><div id="report"></div></main>`,
      // JSON never has "<" outside strings; inside them \u003c reads back as "<"
      `<script type="application/json" id="quantd-report">${JSON.stringify(report).replace(/</g, '\\u003c')}</script>`,
      `<script>${inert(script)}</script>`,
      '</body>',
      '</html>',
      '',
    ].join('\n');
}
