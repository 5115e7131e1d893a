/**
 * The C-level tests (native/test/kernels_test.c): every SIMD variant this CPU has against the
 * scalar reference, built with the same flags as the addon and once more under AddressSanitizer
 * and UndefinedBehaviorSanitizer. Needs a C compiler (cc), as `npm ci` does.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = new URL('../../', import.meta.url).pathname;
const SOURCES = [
  'native/test/kernels_test.c',
  'native/src/ref.c',
  'native/src/ggml_ref.c',
  'native/src/ggml_kquants.c',
  'native/src/measured.c',
  'native/src/dispatch.c',
  'native/src/x86_avx2.c',
  'native/src/x86_avx512.c',
].map((f) => join(ROOT, f));
const FLAGS = ['-std=c11', '-O2', '-ffp-contract=off', '-fno-fast-math', '-Wall', '-Wextra', '-Werror'];
const dir = mkdtempSync(join(tmpdir(), 'quantd-c-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function build(name: string, extra: string[]): string {
  const out = join(dir, name);
  execFileSync('cc', [...FLAGS, ...extra, '-o', out, ...SOURCES, '-lm'], { stdio: 'pipe' });
  return out;
}

describe('C kernels: SIMD variants equal the scalar reference', () => {
  it.each([
    ['-O2', []],
    ['ASan + UBSan', ['-g', '-fsanitize=address,undefined', '-fno-sanitize-recover=all']],
  ])(
    '%s',
    (_title, extra) => {
      const bin = build(extra.length ? 'kernels_test_san' : 'kernels_test', extra as string[]);
      const r = spawnSync(bin, [], { encoding: 'utf8' });
      expect(r.stderr).toBe('');
      expect(r.status).toBe(0);
      expect(r.stdout).toMatch(/ 0 failures, [1-9] ISAs/);
      // This machine class has both; a CPU without them would test fewer variants, and say so here.
      expect(r.stdout).toMatch(/avx2: ok/);
    },
    300_000,
  ); // compiling six files under ASan takes minutes on a loaded two-core machine
});
