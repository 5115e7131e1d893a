/**
 * A real browser for the console's tests: Debian's Chromium (apt-get install chromium, as .ci/run
 * does) driven by playwright-core, headless, with the flags a container needs. Without Chromium
 * the browser tests skip — except under CI, where they fail: a console test that silently does
 * not run is no test.
 */
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { chromium, type Browser, type Page } from 'playwright-core';

export const CHROMIUM = process.env['QUANTD_CHROMIUM'] ?? '/usr/bin/chromium';

/** Whether the browser tests run: Chromium is there, or CI insists (and the launch then fails loudly). */
export const HAVE_BROWSER = existsSync(CHROMIUM) || Boolean(process.env['CI']);

export function launchBrowser(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
}

const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

export interface Violation {
  readonly id: string;
  readonly impact: string | null;
  readonly help: string;
  readonly nodes: number;
}

/** axe-core's WCAG 2 A/AA audit of the page as it is now: the serious and critical violations. */
export async function seriousViolations(page: Page): Promise<Violation[]> {
  // evaluated through the DevTools protocol, which the page's Content-Security-Policy (no inline
  // script) does not govern: the page under test keeps its real policy
  if (!(await page.evaluate('"axe" in window'))) await page.evaluate(AXE_SOURCE);
  // run in the page (a string: this file is compiled without the DOM's types)
  const violations = await page.evaluate<
    Array<{ id: string; impact: string | null; help: string; nodes: unknown[] }>
  >("axe.run(document, { runOnly: ['wcag2a', 'wcag2aa', 'best-practice'] }).then((r) => r.violations)");
  return violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.length }));
}
