/**
 * JobBook.take, the rule by which a replica's book follows Redis in cluster mode: records read
 * afresh and the change stream arrive in no set order with each other, and with this replica's
 * own run. A stale record must never stop a run going on here (it once did: a GET read the
 * record from before the run's claim, the run took it for a takeover and stopped, and the job
 * stayed `running` for ever); a cancel, another replica's finish or a takeover must stop it; a
 * finished job never goes back.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { DataDir, newJobId } from '../../src/jobs/paths.js';
import { JobBook, type Entry } from '../../src/jobs/records.js';
import { JobStore, type Job, type JobRecord } from '../../src/jobs/store.js';

const root = mkdtempSync(join(tmpdir(), 'quantd-book-take-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function book(): JobBook {
  return new JobBook(new JobStore(new DataDir(root)));
}

function record(id: string, change: Partial<Job>): JobRecord {
  const entry = book().newEntry(
    id,
    { op: 'quantize', params: {} },
    { kind: 'path', path: 'm.safetensors', bytes: 1 },
    null,
  );
  return { ...entry.record, job: { ...entry.record.job, ...change } };
}

/** An entry of `b` whose attempt `attempts` runs here (a run in flight, its controller live). */
function runningHere(b: JobBook, attempts: number): Entry {
  const id = newJobId();
  const entry: Entry = { record: record(id, { state: 'running', attempts }), dirty: false, deleted: false };
  entry.controller = new AbortController();
  entry.running = new Promise(() => {});
  b.entries.set(id, entry);
  return entry;
}

describe('JobBook.take (cluster mode)', () => {
  it('a stale record of a job running here changes nothing: the one from before its claim, an echo of its attempt', () => {
    const b = book();
    const entry = runningHere(b, 2);
    const id = entry.record.job.id;
    b.take(id, record(id, { state: 'queued', attempts: 1 }));
    b.take(id, record(id, { state: 'running', attempts: 1 }));
    b.take(id, record(id, { state: 'running', attempts: 2, progress: null }));
    expect(entry.controller!.signal.aborted).toBe(false);
    expect(entry.stopReason).toBeUndefined();
    expect([entry.record.job.state, entry.record.job.attempts]).toEqual(['running', 2]);
  });

  it('a cancel, a finish elsewhere, a takeover or a removal stops the run here', () => {
    const cases: [Partial<Job> | null, string][] = [
      [{ state: 'cancelled', attempts: 2 }, 'cancel'],
      [{ state: 'failed', attempts: 2 }, 'superseded'],
      [{ state: 'running', attempts: 3 }, 'superseded'],
      [null, 'cancel'],
    ];
    for (const [change, reason] of cases) {
      const b = book();
      const entry = runningHere(b, 2);
      const id = entry.record.job.id;
      b.take(id, change === null ? null : record(id, change));
      expect(entry.controller!.signal.aborted, JSON.stringify(change)).toBe(true);
      expect(entry.stopReason).toBe(reason);
    }
  });

  it('a finished job never goes back; one not running here follows the later record', () => {
    const b = book();
    const id = newJobId();
    const entry: Entry = {
      record: record(id, { state: 'succeeded', attempts: 1 }),
      dirty: false,
      deleted: false,
    };
    b.entries.set(id, entry);
    b.take(id, record(id, { state: 'running', attempts: 1 }));
    expect(entry.record.job.state).toBe('succeeded');

    const other = newJobId();
    b.take(other, record(other, { state: 'queued', attempts: 0 }));
    b.take(other, record(other, { state: 'running', attempts: 1 }));
    expect(b.entries.get(other)!.record.job.state).toBe('running');
    b.take(other, record(other, { state: 'queued', attempts: 0 })); // a late message from before
    expect(b.entries.get(other)!.record.job.state).toBe('running');
  });
});
