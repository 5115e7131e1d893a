/**
 * Progress of a long CLI run on stderr: a bar redrawn in place on a terminal (at most 10 times a
 * second), plain lines every few seconds otherwise (logs, CI). Tensors, bytes, throughput, ETA.
 */
import { humanBytes } from './output.js';

export interface ProgressState {
  readonly tensorsDone: number;
  readonly tensorsTotal: number;
  readonly bytesDone: number;
  readonly bytesTotal: number;
  /** What is counted when it is not tensors and bytes ("windows"): counts and ETA only. */
  readonly unit?: string;
  /** What the counts count beside the bytes, when not tensors ("batches"). */
  readonly counted?: string;
}

export interface ProgressSink {
  readonly isTTY: boolean;
  write(text: string): void;
}

/** "1:05", "12s", "2:03:04" */
export function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return '?';
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const rest = String(s % 60).padStart(2, '0');
  return h > 0 ? `${h}:${String(m).padStart(2, '0')}:${rest}` : `${m}:${rest}`;
}

/** The numbers of one progress line: "12/245 tensors, 1.2 GiB/4.0 GiB, 850 MiB/s, ETA 3s" (or batches …). */
export function describeProgress(p: ProgressState, elapsedSeconds: number): string {
  if (p.unit !== undefined) {
    const perSecond = elapsedSeconds > 0 ? p.tensorsDone / elapsedSeconds : 0;
    const left = perSecond > 0 ? (p.tensorsTotal - p.tensorsDone) / perSecond : NaN;
    return `${p.tensorsDone}/${p.tensorsTotal} ${p.unit}, ETA ${p.tensorsDone === p.tensorsTotal ? '0s' : formatDuration(left)}`;
  }
  const rate = elapsedSeconds > 0 ? p.bytesDone / elapsedSeconds : 0;
  const eta = rate > 0 ? (p.bytesTotal - p.bytesDone) / rate : NaN;
  return (
    `${p.tensorsDone}/${p.tensorsTotal} ${p.counted ?? 'tensors'}, ${humanBytes(p.bytesDone)}/${humanBytes(p.bytesTotal)}, ` +
    `${humanBytes(rate)}/s, ETA ${p.tensorsDone === p.tensorsTotal ? '0s' : formatDuration(eta)}`
  );
}

const BAR = 24;

export class ProgressReporter {
  private readonly started = performance.now();
  private last = this.started;
  private drawn = false;

  constructor(
    private readonly sink: ProgressSink,
    private readonly label: string,
    /** Plain lines at most this often (ms); a terminal bar redraws at most every 100 ms. */
    private readonly lineInterval = 5000,
  ) {}

  update(p: ProgressState): void {
    const now = performance.now();
    const interval = this.sink.isTTY ? 100 : this.lineInterval;
    const finished = p.tensorsDone === p.tensorsTotal;
    if (!finished && now - this.last < interval) return;
    this.last = now;
    const text = `${this.label}: ${describeProgress(p, (now - this.started) / 1000)}`;
    if (this.sink.isTTY) {
      const fraction =
        p.bytesTotal > 0 ? p.bytesDone / p.bytesTotal : p.tensorsDone / Math.max(1, p.tensorsTotal);
      const filled = Math.round(Math.min(1, fraction) * BAR);
      this.sink.write(`\r\x1b[2K[${'#'.repeat(filled)}${'.'.repeat(BAR - filled)}] ${text}`);
      this.drawn = true;
    } else if (!finished) {
      this.sink.write(`${text}\n`);
    }
  }

  /** Ends the bar's line, so that what follows starts on a fresh one. */
  done(): void {
    if (this.drawn) this.sink.write('\n');
    this.drawn = false;
  }
}
