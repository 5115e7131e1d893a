/**
 * Admission's bookkeeping (src/service/admission.ts, src/service/live-streams.ts): requests and
 * the bytes they hold against the memory budget, and the live streams' cap per client and in all;
 * and their settings (src/config.ts).
 */
import { totalmem } from 'node:os';
import { describe, expect, it } from 'vitest';

import { defaultMemoryBudget, hostMemoryBytes, loadConfig } from '../../src/config.js';
import { isQuantdError } from '../../src/errors/index.js';
import { Admission } from '../../src/service/admission.js';
import { LiveStreams, clientOf } from '../../src/service/live-streams.js';

/** The catalogue code `run` throws (undefined: it does not). */
function codeOf(run: () => unknown): string | undefined {
  try {
    run();
  } catch (err) {
    if (isQuantdError(err)) return err.code;
    throw err;
  }
  return undefined;
}

describe('Admission by bytes', () => {
  it('admits charges up to the budget, refuses beyond it OVERLOADED, and frees them on release', () => {
    const admission = new Admission(10, 100);
    const a = admission.acquire();
    a.charge(60, 'a');
    expect(admission.bytesInFlight).toBe(60);
    const b = admission.acquire();
    expect(
      codeOf(() => b.charge(50, 'b')),
      'does not fit now: retry later',
    ).toBe('OVERLOADED');
    expect(admission.bytesInFlight, 'a refused charge holds nothing').toBe(60);
    expect(admission.admits(40)).toBe(true);
    expect(admission.admits(41)).toBe(false);
    a();
    expect(admission.bytesInFlight, 'released at once').toBe(0);
    b.charge(50, 'b');
    expect(b.held()).toBe(50);
    b();
    b(); // idempotent
    expect(admission.bytesInFlight).toBe(0);
    expect(admission.inFlight).toBe(0);
  });

  it('refuses a request that alone exceeds the budget MEMORY_BUDGET_EXCEEDED, however empty the server', () => {
    const admission = new Admission(10, 100);
    const a = admission.acquire();
    a.charge(80, 'an input');
    expect(codeOf(() => a.charge(30, 'a result'))).toBe('MEMORY_BUDGET_EXCEEDED');
    const b = admission.acquire();
    expect(codeOf(() => b.charge(101, 'a message of 101 bytes'))).toBe('MEMORY_BUDGET_EXCEEDED');
  });

  it('charges nothing to a released slot (its work is stopping) and counts whole bytes', () => {
    const admission = new Admission(10, 100);
    const a = admission.acquire();
    a();
    a.charge(1000, 'late');
    expect(admission.bytesInFlight).toBe(0);
    const b = admission.acquire();
    b.charge(1.5, 'a fraction');
    expect(b.held()).toBe(2);
    b.charge(0, 'nothing');
    b.charge(NaN, 'nothing');
    expect(b.held()).toBe(2);
  });

  it('leave() gives the place back and keeps the bytes until the slot is released', () => {
    const admission = new Admission(1, 100);
    const a = admission.acquire();
    a.charge(70, 'a result being written');
    a.leave();
    a.leave(); // idempotent
    expect(admission.inFlight, 'the next request may compute').toBe(0);
    expect(admission.bytesInFlight, 'the result still counts').toBe(70);
    const b = admission.acquire();
    expect(codeOf(() => b.charge(40, 'b'))).toBe('OVERLOADED');
    a();
    expect(admission.inFlight).toBe(1);
    expect(admission.bytesInFlight).toBe(0);
    b.charge(40, 'b');
  });

  it('still counts requests: a full server refuses OVERLOADED before any byte', () => {
    const admission = new Admission(1);
    admission.acquire();
    expect(admission.admits()).toBe(false);
    expect(codeOf(() => admission.acquire())).toBe('OVERLOADED');
  });
});

describe('LiveStreams', () => {
  it('caps one client, not the others: 429 QUOTA_EXCEEDED for its next, a place for another', () => {
    const streams = new LiveStreams(10, 2);
    const one = [streams.enter('address 127.0.0.1', 'job event streams')];
    one.push(streams.enter('address 127.0.0.1', 'job event streams'));
    expect(codeOf(() => streams.enter('address 127.0.0.1', 'job event streams'))).toBe('QUOTA_EXCEEDED');
    const other = streams.enter('address 127.0.0.2', 'job event streams');
    expect(streams.open).toBe(3);
    one[0]!();
    one[0]!(); // idempotent
    expect(streams.open).toBe(2);
    one.push(streams.enter('address 127.0.0.1', 'health Watch streams'));
    other();
    expect(streams.open).toBe(2);
  });

  it('caps the server: OVERLOADED past its total, whoever asks', () => {
    const streams = new LiveStreams(3, 2);
    streams.enter('a', 'x');
    streams.enter('b', 'x');
    const c = streams.enter('c', 'x');
    expect(codeOf(() => streams.enter('d', 'x'))).toBe('OVERLOADED');
    c();
    expect(codeOf(() => streams.enter('d', 'x'))).toBeUndefined();
  });

  it('names a client by its key, else by its address (an IPv4 address in IPv6 form as itself)', () => {
    expect(clientOf('0123456789abcdef', '127.0.0.1')).toBe('key 0123456789abcdef');
    expect(clientOf(null, '::ffff:10.0.0.7')).toBe('address 10.0.0.7');
    expect(clientOf(null, '::1')).toBe('address ::1');
    expect(clientOf(null, undefined)).toBe('address unknown');
  });
});

describe('settings', () => {
  const MiB = 2 ** 20;

  it('QUANTD_MEMORY_BUDGET: a quarter of the memory the process may have by default, at least 256 MiB', () => {
    const memory = hostMemoryBytes();
    expect(memory).toBeGreaterThan(0);
    expect(memory).toBeLessThanOrEqual(totalmem());
    expect(defaultMemoryBudget(16 * 1024 * MiB)).toBe(4 * 1024 * MiB);
    expect(defaultMemoryBudget(512 * MiB)).toBe(256 * MiB);
    expect(loadConfig({}).memoryBudget).toBe(defaultMemoryBudget());
    expect(loadConfig({ QUANTD_MEMORY_BUDGET: '1g' }).memoryBudget).toBe(1024 * MiB);
  });

  it('the pools, streams and idle timeout: defaults, and a bad value is CONFIG_INVALID naming it', () => {
    const config = loadConfig({});
    expect(config.downloadLimit).toBe(64);
    expect(config.streamIdleMs).toBe(30_000);
    expect(config.liveStreams).toBe(256);
    expect(config.liveStreamsPerClient).toBe(32);
    for (const [key, value] of [
      ['QUANTD_MEMORY_BUDGET', '12'],
      ['QUANTD_DOWNLOAD_LIMIT', '0'],
      ['QUANTD_STREAM_IDLE_MS', '50'],
      ['QUANTD_LIVE_STREAMS', 'many'],
      ['QUANTD_LIVE_STREAMS_PER_CLIENT', '-1'],
    ] as const) {
      let caught: unknown;
      try {
        loadConfig({ [key]: value });
      } catch (err) {
        caught = err;
      }
      expect(isQuantdError(caught) && caught.code, key).toBe('CONFIG_INVALID');
      expect((caught as Error).message).toContain(key);
    }
  });
});
