/**
 * The C-level tests (native/test/kernels_test.c): every SIMD variant this CPU has against the
 * scalar reference, built with the same flags as the addon and once more under AddressSanitizer
 * and UndefinedBehaviorSanitizer. Needs a C compiler (cc), as `npm ci` does.
 *
 * Which variants must pass is read from the CPU (/proc/cpuinfo), not assumed: an x86 machine with
 * AVX2 must report `avx2: ok`, one with AVX-512 also `avx512: ok`, and a CPU with neither (ARM, an
 * old x86) runs the scalar table alone, which still checks the hand-computed reference values.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = new URL('../../', import.meta.url).pathname;
const SOURCES = [
  'native/test/kernels_test.c',
  'native/src/ref.c',
  'native/src/ggml_ref.c',
  'native/src/ggml_kquants.c',
  'native/src/ggml_weighted.c',
  'native/src/ggml_iquants.c',
  'native/src/bnb_ref.c',
  'native/src/nbits_ref.c',
  'native/src/awq_ref.c',
  'native/src/gptq_ref.c',
  'native/src/gptq_solve.c',
  'native/src/linear_stats.c',
  'native/src/quadratic.c',
  'native/src/linear_out.c',
  'native/src/measured.c',
  'native/src/dispatch.c',
  'native/src/x86_avx2.c',
  'native/src/x86_avx512.c',
].map((f) => join(ROOT, f));
const FLAGS = ['-std=c11', '-O2', '-ffp-contract=off', '-fno-fast-math', '-Wall', '-Wextra', '-Werror'];
const dir = mkdtempSync(join(tmpdir(), 'quantd-c-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/**
 * The SIMD ISAs native/src/dispatch.c supports on this CPU, by the same CPU features it asks
 * for (qd_supported); null where the kernel's flags cannot be read (not Linux).
 */
function simdIsasOfThisCpu(): string[] | null {
  if (process.arch !== 'x64' && process.arch !== 'ia32') return [];
  let cpuinfo: string;
  try {
    cpuinfo = readFileSync('/proc/cpuinfo', 'utf8');
  } catch {
    return null;
  }
  const line = cpuinfo.split('\n').find((l) => /^flags\s*:/.test(l)) ?? '';
  const flags = new Set(
    line
      .slice(line.indexOf(':') + 1)
      .trim()
      .split(/\s+/),
  );
  const has = (...features: string[]): boolean => features.every((f) => flags.has(f));
  const isas: string[] = [];
  if (has('avx2', 'f16c')) isas.push('avx2');
  if (has('avx512f', 'avx512bw', 'avx512vl', 'avx512dq')) isas.push('avx512');
  return isas;
}

function build(name: string, extra: string[]): string {
  const out = join(dir, name);
  execFileSync('cc', [...FLAGS, ...extra, '-o', out, ...SOURCES, '-lm'], { stdio: 'pipe' });
  return out;
}

/** Runs the test binary on `isas` (none: every ISA it detects) and asserts a clean pass. */
function expectPass(bin: string, isas: string[]): string {
  const r = spawnSync(bin, isas, { encoding: 'utf8' });
  expect(r.stderr).toBe('');
  expect(r.status).toBe(0);
  expect(r.stdout).toMatch(/ 0 failures, [1-9] ISAs/);
  return r.stdout;
}

const simd = simdIsasOfThisCpu();

describe('C kernels: SIMD variants equal the scalar reference', () => {
  describe.each([
    ['-O2', []],
    ['ASan + UBSan', ['-g', '-fsanitize=address,undefined', '-fno-sanitize-recover=all']],
  ])('%s', (title, extra) => {
    let binary: string | undefined;
    // Compiled on first use, so a filtered run builds only what it runs.
    const bin = (): string => (binary ??= build(`kernels_test_${title === '-O2' ? 'o2' : 'san'}`, extra));

    it(`every SIMD variant this CPU has (${simd === null ? 'as the binary detects' : simd.join(', ') || 'none'})`, () => {
      if (simd === null) {
        expectPass(bin(), []);
        return;
      }
      // Named on the command line, an ISA the binary does not detect is a failure, not a skip.
      const isas = simd.length > 0 ? simd : ['scalar'];
      const out = expectPass(bin(), isas);
      for (const isa of isas) expect(out).toContain(`${isa}: ok\n`);
      expect(out).toMatch(new RegExp(` 0 failures, ${isas.length} ISAs`));
    }, 300_000); // the sanitizer build alone takes minutes on a loaded 2-core machine

    it('the scalar table alone (all a CPU without SIMD runs)', () => {
      const out = expectPass(bin(), ['scalar']);
      expect(out).toContain('scalar: ok\n');
      expect(out).toMatch(/ 0 failures, 1 ISAs/);
    }, 300_000);
  });
});
