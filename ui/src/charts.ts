/**
 * Chart.js with only the parts the console draws (bar charts), registered once. Animation is off:
 * numbers, not motion, and screenshots that do not depend on timing.
 */
import { BarController, BarElement, CategoryScale, Chart, Legend, LinearScale, Tooltip } from 'chart.js';

Chart.register(BarController, BarElement, CategoryScale, LinearScale, Tooltip, Legend);
Chart.defaults.animation = false;
Chart.defaults.font.family = 'system-ui, sans-serif';

export interface BarSeries {
  readonly label: string;
  readonly values: ReadonlyArray<number | null>;
  readonly color: string;
}

/**
 * A bar chart on `canvas`; horizontal bars (one per label, top to bottom) when `horizontal`.
 * Returns the chart, to be destroyed before its canvas is reused.
 */
export function barChart(
  canvas: HTMLCanvasElement,
  labels: readonly string[],
  series: readonly BarSeries[],
  options: { horizontal?: boolean; valueTitle: string; categoryTitle?: string },
): Chart<'bar'> {
  const valueAxis = { title: { display: true, text: options.valueTitle } };
  const categoryAxis = {
    title: { display: options.categoryTitle !== undefined, text: options.categoryTitle ?? '' },
    ticks: { autoSkip: !options.horizontal },
  };
  return new Chart(canvas, {
    type: 'bar',
    data: {
      labels: [...labels],
      datasets: series.map((s) => ({ label: s.label, data: [...s.values], backgroundColor: s.color })),
    },
    options: {
      indexAxis: options.horizontal ? 'y' : 'x',
      responsive: true,
      maintainAspectRatio: false,
      plugins: { legend: { display: series.length > 1 } },
      scales: options.horizontal ? { x: valueAxis, y: categoryAxis } : { x: categoryAxis, y: valueAxis },
    },
  });
}
