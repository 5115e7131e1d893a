/**
 * The WebAssembly kernels round to float16 without a conversion instruction (simd_wasm.h's
 * vf_f16_round, used by AWQ and by GPTQ's float16 layers). native/test/f16_round_wasm.c compares
 * it in wasm with the scalar reference qd_f16_round: one float32 bit pattern in 17 (all exponents,
 * every tie position), and every pattern near float16's edges, both signs.
 *
 * Needs clang with the wasm32 target and wasm-ld (Debian: clang lld), as rebuilding
 * native/wasm/quantd.wasm does; skipped without them, except under CI, which installs them.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = new URL('../../', import.meta.url).pathname;
const SOURCE = join(ROOT, 'native/test/f16_round_wasm.c');
const FLAGS = [
  '--target=wasm32',
  '-msimd128',
  '-O2',
  '-std=c11',
  '-ffp-contract=off',
  '-fno-fast-math',
  '-nostdlib',
];
const haveClang =
  spawnSync('clang', ['--version']).status === 0 && spawnSync('wasm-ld', ['--version']).status === 0;
const dir = mkdtempSync(join(tmpdir(), 'quantd-f16-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface F16Check {
  sampled(stride: number, offset: number): number;
  edges(): number;
}

describe.skipIf(!haveClang && !process.env['CI'])('wasm float16 rounding', () => {
  it('equals qd_f16_round on one bit pattern in 17 and around every edge', () => {
    expect(haveClang, 'CI must have clang and wasm-ld').toBe(true);
    const out = join(dir, 'f16.wasm');
    const built = spawnSync(
      'clang',
      [...FLAGS, '-Wall', '-Wextra', '-Werror', '-Wl,--no-entry', '-o', out, SOURCE],
      {
        encoding: 'utf8',
      },
    );
    expect(built.stderr).toBe('');
    expect(built.status).toBe(0);
    const check = new WebAssembly.Instance(new WebAssembly.Module(readFileSync(out)), {})
      .exports as unknown as F16Check;
    expect(check.edges()).toBe(0);
    expect(check.sampled(17, 0)).toBe(0);
  }, 60_000);
});
