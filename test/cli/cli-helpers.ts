/**
 * Helpers for the CLI tests: scratch directories per test, safetensors inputs written with the
 * library's own serializer, outputs read back tensor by tensor, and the one assertion every
 * failure must pass (README, The CLI: catalogue exit code, nothing on stdout, exactly one line
 * `error CODE: message` on stderr, and no output or temp file left behind).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'vitest';

import type { StDType } from '../../src/core/index.js';
import { exitCodeFor, type ErrorCode } from '../../src/errors/index.js';
import { entryByName, parseSafetensors, serializeSafetensors } from '../../src/format/index.js';
import { BIN, type CliResult } from './run-cli.js';

/**
 * run-cli.ts's quantd(), asynchronous: the tests of a file run concurrently (describe.concurrent),
 * so that both cores are busy with quantd processes on a small machine.
 */
export function quantdAsync(args: readonly string[], cwd?: string): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

export const f32 = (values: readonly number[]): Uint8Array =>
  new Uint8Array(Float32Array.from(values).buffer);
export const f64 = (values: readonly number[]): Uint8Array =>
  new Uint8Array(Float64Array.from(values).buffer);
export const i32 = (values: readonly number[]): Uint8Array => new Uint8Array(Int32Array.from(values).buffer);
export const i8 = (values: readonly number[]): Uint8Array => new Uint8Array(Int8Array.from(values).buffer);

export interface InputTensor {
  readonly name: string;
  readonly dtype: StDType;
  readonly shape: readonly number[];
  readonly data: Uint8Array;
}

/** Writes a valid safetensors file (the library's serializer) and returns its path. */
export function writeTensors(
  path: string,
  tensors: readonly InputTensor[],
  metadata: Record<string, string> | null = null,
): string {
  writeFileSync(path, serializeSafetensors(tensors, metadata));
  return path;
}

export interface StoredTensor {
  readonly dtype: string;
  readonly shape: readonly number[];
  /** A fresh copy, so typed views over it are aligned. */
  readonly data: Uint8Array;
}

export interface StoredFile {
  /** Tensor names in data order. */
  readonly names: readonly string[];
  readonly metadata: Readonly<Record<string, string>> | null;
  tensor(name: string): StoredTensor;
}

/** Reads a safetensors file back (strictly: the reader validates the whole header). */
export function readStored(path: string): StoredFile {
  const file = parseSafetensors(new Uint8Array(readFileSync(path)), path);
  return {
    names: file.header.entries.map((e) => e.name),
    metadata: file.header.metadata,
    tensor(name) {
      const entry = entryByName(file.header, name);
      if (!entry) throw new Error(`${path} has no tensor ${name}`);
      return { dtype: entry.dtype, shape: entry.shape, data: file.tensorBytes(entry).slice() };
    },
  };
}

/** A fresh, empty directory under `root` for one test. */
export function scratch(root: string): string {
  return mkdtempSync(join(root, 'case-'));
}

/** Every file and directory under `dir`, hidden ones included, sorted. */
export function listing(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' }).sort();
}

/**
 * Asserts that `r` is the failure `code`: exit code from the catalogue, empty stdout, exactly one
 * stderr line `error CODE: message`, and the message contains each fragment. Returns the message.
 */
export function expectCliError(r: CliResult, code: ErrorCode, fragments: readonly string[] = []): string {
  expect(r.stderr, 'stderr must be exactly one line "error CODE: message"').toMatch(
    new RegExp(`^error ${code}: [^\\n]+\\n$`),
  );
  expect(r.code, `exit code of ${code}`).toBe(exitCodeFor(code));
  expect(r.stdout, 'stdout of a failed run').toBe('');
  const message = r.stderr.slice(`error ${code}: `.length, -1);
  for (const fragment of fragments) expect(message).toContain(fragment);
  return message;
}

/**
 * Runs quantd in `dir` expecting failure `code`, and checks that the run left `dir` exactly as it
 * found it: no output file, no temporary file.
 */
export async function failsWith(
  dir: string,
  args: readonly string[],
  code: ErrorCode,
  fragments: readonly string[] = [],
): Promise<string> {
  const before = listing(dir);
  const message = expectCliError(await quantdAsync(args, dir), code, fragments);
  expect(listing(dir), 'files in the output directory after a failed run').toEqual(before);
  return message;
}

/** Runs quantd in `dir` expecting success; returns the result (stdout holds inspect's output). */
export async function succeeds(dir: string, args: readonly string[]): Promise<CliResult> {
  const r = await quantdAsync(args, dir);
  expect(r.stderr, `quantd ${args.join(' ')}`).not.toMatch(/^error /m);
  expect(r.code, `exit code of quantd ${args.join(' ')}; stderr: ${r.stderr}`).toBe(0);
  return r;
}
