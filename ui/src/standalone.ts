/**
 * The self-contained HTML report the CLI writes (`--report FILE.html`): the report JSON sits in
 * the page as <script type="application/json" id="quantd-report">, this script draws it.
 */
import { renderReport } from './report';
import type { RawReport } from './types';
import './style.css';

const data = document.getElementById('quantd-report')?.textContent;
const root = document.getElementById('report');
if (data && root) renderReport(root, JSON.parse(data) as RawReport);
