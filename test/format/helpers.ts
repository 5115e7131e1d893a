/**
 * Shared test helpers for the safetensors reader/writer: raw files built byte by byte (so that
 * malformed cases are spelled out in the test), error assertions and scratch directories.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, expect } from 'vitest';

import type { ErrorCode } from '../../src/errors/index.js';
import { QuantdError } from '../../src/errors/index.js';

/**
 * A safetensors file from a header given as text (or raw bytes) and a data section given as
 * bytes or a byte count (filled with a counting pattern). The 8-byte prefix is the header's
 * true length unless `headerLength` overrides it.
 */
export function rawFile(
  header: string | Uint8Array,
  data: Uint8Array | number = 0,
  headerLength?: bigint,
): Uint8Array {
  const json = typeof header === 'string' ? new TextEncoder().encode(header) : header;
  const body = typeof data === 'number' ? Uint8Array.from({ length: data }, (_, i) => i & 0xff) : data;
  const out = new Uint8Array(8 + json.length + body.length);
  new DataView(out.buffer).setBigUint64(0, headerLength ?? BigInt(json.length), true);
  out.set(json, 8);
  out.set(body, 8 + json.length);
  return out;
}

/** Runs `fn` and returns the QuantdError it throws, failing the test unless the code is `code`. */
export function expectQuantdError(fn: () => unknown, code: ErrorCode): QuantdError {
  let thrown: unknown;
  try {
    fn();
  } catch (err) {
    thrown = err;
  }
  expect(thrown, `expected ${code}`).toBeInstanceOf(QuantdError);
  expect((thrown as QuantdError).code).toBe(code);
  return thrown as QuantdError;
}

/** Async twin of expectQuantdError. */
export async function expectQuantdRejection(
  promise: Promise<unknown>,
  code: ErrorCode,
): Promise<QuantdError> {
  const thrown = await promise.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(thrown, `expected ${code}`).toBeInstanceOf(QuantdError);
  expect((thrown as QuantdError).code).toBe(code);
  return thrown as QuantdError;
}

/** A fresh scratch directory for each test of the calling describe block; returns its getter. */
export function useTempDir(): () => string {
  let dir: string | undefined;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'quantd-format-'));
  });
  afterEach(async () => {
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
    dir = undefined;
  });
  return () => {
    if (dir === undefined) throw new Error('useTempDir() getter called outside a test');
    return dir;
  };
}

/** Deterministic pseudo-random bytes (xorshift32), so large payloads are not all alike. */
export function patternBytes(length: number, seed: number): Uint8Array {
  const out = new Uint8Array(length);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    out[i] = x & 0xff;
  }
  return out;
}
