/**
 * Progress on stderr (src/cli/progress.ts): plain lines at most every lineInterval off a
 * terminal, a bar redrawn in place (`\r`) at most every 100 ms on one, ended by a newline on
 * done(). The clock is vitest's fake `performance`.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';

import {
  ProgressReporter,
  describeProgress,
  formatDuration,
  type ProgressSink,
} from '../../src/cli/progress.js';

const MiB = 2 ** 20;

function sink(isTTY: boolean): ProgressSink & { out: string[] } {
  const out: string[] = [];
  return { isTTY, out, write: (text) => void out.push(text) };
}

const at = (tensorsDone: number, bytesDone: number, tensorsTotal = 10, bytesTotal = 10 * MiB) => ({
  tensorsDone,
  tensorsTotal,
  bytesDone,
  bytesTotal,
});

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['performance'] });
});
afterEach(() => {
  vi.useRealTimers();
});

describe('off a terminal: plain lines', () => {
  it('nothing before lineInterval, then one line with tensors, bytes, rate and ETA', () => {
    const s = sink(false);
    const p = new ProgressReporter(s, 'quantize');
    p.update(at(1, MiB));
    vi.advanceTimersByTime(4999);
    p.update(at(4, 4 * MiB));
    expect(s.out).toEqual([]);
    vi.advanceTimersByTime(1);
    p.update(at(5, 5 * MiB));
    expect(s.out).toEqual(['quantize: 5/10 tensors, 5.0 MiB/10.0 MiB, 1.0 MiB/s, ETA 5s\n']);
    vi.advanceTimersByTime(100);
    p.update(at(6, 6 * MiB));
    expect(s.out).toHaveLength(1);
    vi.advanceTimersByTime(4900);
    p.update(at(8, 8 * MiB));
    expect(s.out[1]).toBe('quantize: 8/10 tensors, 8.0 MiB/10.0 MiB, 819.2 KiB/s, ETA 3s\n');
  });

  it('the finished update prints no line and done() adds no newline', () => {
    const s = sink(false);
    const p = new ProgressReporter(s, 'quantize', 1000);
    vi.advanceTimersByTime(1000);
    p.update(at(3, 3 * MiB));
    vi.advanceTimersByTime(2000);
    p.update(at(10, 10 * MiB));
    p.done();
    expect(s.out).toEqual(['quantize: 3/10 tensors, 3.0 MiB/10.0 MiB, 3.0 MiB/s, ETA 2s\n']);
  });

  it('the line interval is configurable', () => {
    const s = sink(false);
    const p = new ProgressReporter(s, 'qparams', 250);
    vi.advanceTimersByTime(249);
    p.update(at(1, MiB));
    vi.advanceTimersByTime(1);
    p.update(at(1, MiB));
    expect(s.out).toHaveLength(1);
    expect(s.out[0]).toMatch(/^qparams: 1\/10 tensors, /);
  });
});

describe('on a terminal: a bar redrawn in place', () => {
  it('at most every 100 ms, always on the last update, and a newline on done()', () => {
    const s = sink(true);
    const p = new ProgressReporter(s, 'quantize');
    vi.advanceTimersByTime(50);
    p.update(at(1, MiB));
    expect(s.out).toEqual([]);
    vi.advanceTimersByTime(50);
    p.update(at(5, 5 * MiB));
    expect(s.out).toHaveLength(1);
    expect(s.out[0]).toBe(
      `\r\x1b[2K[${'#'.repeat(12)}${'.'.repeat(12)}] quantize: 5/10 tensors, 5.0 MiB/10.0 MiB, 50.0 MiB/s, ETA 0s`,
    );
    vi.advanceTimersByTime(99);
    p.update(at(6, 6 * MiB));
    expect(s.out).toHaveLength(1);
    vi.advanceTimersByTime(1);
    p.update(at(7, 7 * MiB));
    expect(s.out).toHaveLength(2);
    vi.advanceTimersByTime(1);
    p.update(at(10, 10 * MiB)); // finished: drawn at once, full bar, ETA 0s
    expect(s.out).toHaveLength(3);
    expect(s.out[2]).toMatch(
      new RegExp(`^\\r\\x1b\\[2K\\[${'#'.repeat(24)}\\] quantize: 10/10 tensors, .* ETA 0s$`),
    );
    expect(s.out.every((line) => line.startsWith('\r') && !line.includes('\n'))).toBe(true);
    p.done();
    expect(s.out.at(-1)).toBe('\n');
    p.done();
    expect(s.out.filter((l) => l === '\n')).toHaveLength(1);
  });

  it('no bar drawn: done() writes nothing', () => {
    const s = sink(true);
    const p = new ProgressReporter(s, 'quantize');
    p.update(at(1, MiB));
    p.done();
    expect(s.out).toEqual([]);
  });

  it('without byte totals the bar follows the tensor count', () => {
    const s = sink(true);
    const p = new ProgressReporter(s, 'quantize');
    vi.advanceTimersByTime(100);
    p.update(at(1, 0, 4, 0));
    expect(s.out[0]).toContain(`[${'#'.repeat(6)}${'.'.repeat(18)}]`);
  });
});

describe('describeProgress and formatDuration', () => {
  it('no rate yet: ETA ?', () => {
    expect(describeProgress(at(0, 0), 0)).toBe('0/10 tensors, 0 B/10.0 MiB, 0 B/s, ETA ?');
    expect(describeProgress(at(2, 0), 3)).toMatch(/ETA \?$/);
  });

  it('done: ETA 0s', () => {
    expect(describeProgress(at(10, 10 * MiB), 2)).toBe('10/10 tensors, 10.0 MiB/10.0 MiB, 5.0 MiB/s, ETA 0s');
  });

  it.each([
    [0, '0s'],
    [0.4, '0s'],
    [12.4, '12s'],
    [59.4, '59s'],
    [59.5, '1:00'],
    [65, '1:05'],
    [600, '10:00'],
    [3599, '59:59'],
    [3600, '1:00:00'],
    [7384, '2:03:04'],
    [36000 + 61, '10:01:01'],
    [NaN, '?'],
    [-1, '?'],
    [Infinity, '?'],
  ])('formatDuration(%s) = %s', (seconds, text) => {
    expect(formatDuration(seconds)).toBe(text);
  });
});
