/**
 * Name patterns from users (globs of recipes, --include/--exclude and skip; regex rules) match
 * in time linear in the name: patterns that make a backtracking matcher take minutes answer in
 * milliseconds here, with the same meaning the docs give them.
 */
import { describe, expect, it } from 'vitest';

import { UnusablePattern, linearGlob, linearRegex } from '../../src/service/name-patterns.js';

function timed<T>(fn: () => T): { value: T; ms: number } {
  const started = performance.now();
  const value = fn();
  return { value, ms: performance.now() - started };
}

describe('globs', () => {
  it.each([
    ['*.mlp.*', 'model.layers.0.mlp.up_proj.weight', true],
    ['*.mlp.*', 'mlp.weight', false],
    ['*norm*', 'model.norm.weight', true],
    ['layers.*', 'layers.0.weight', true],
    ['layers.*', 'xlayers.0.weight', false],
    ['*.{q,k,v}_proj.*', 'attn.k_proj.weight', true],
    ['*.{q,k,v}_proj.*', 'attn.o_proj.weight', false],
    ['*.{q,{k,v}}_proj.*', 'attn.v_proj.weight', true],
    ['layers.[0-3].*', 'layers.2.w', true],
    ['layers.[!0-3].*', 'layers.2.w', false],
    ['layers.[!0-3].*', 'layers.7.w', true],
    ['a?c', 'abc', true],
    ['a?c', 'a/c', false],
    ['*', 'a/b', false],
    ['**', 'a/b', true],
    ['a/**/z', 'a/b/c/z', true],
    ['lm_head.weight', 'lm_head.weight', true],
    ['lm_head.weight', 'lm_headxweight', false],
    ['w\\*', 'w*', true],
    ['w\\*', 'wx', false],
    ['{a}', '{a}', true],
    ['x[', 'x[', true],
    ['(a|b)+', '(a|b)+', true],
    ['*', '', true],
  ])('%s against %s: %s', (glob, name, expected) => {
    expect(linearGlob(glob)(name)).toBe(expected);
  });

  it('*a*a*a*a*a*a*a*b against 10 000 a answers at once (picomatch took minutes)', () => {
    const test = linearGlob('*a*a*a*a*a*a*a*b');
    const { value, ms } = timed(() => test('a'.repeat(10_000)));
    expect(value).toBe(false);
    expect(ms).toBeLessThan(1000); // backtracking takes seconds to minutes; a loaded CI machine can pause 100 ms
  });

  it('refuses extglobs and absurd lengths, saying why', () => {
    for (const glob of ['!(foo)*', '*.@(q|k)_proj', '+(a)']) {
      expect(() => linearGlob(glob)).toThrow(UnusablePattern);
      expect(() => linearGlob(glob)).toThrow(/extglob/);
    }
    expect(() => linearGlob('a'.repeat(70_000))).toThrow(/longer than 65536/);
  });
});

describe('regexes', () => {
  it('^(a+)+$ against 32 a and a ! answers at once (JavaScript RegExp: about 30 s)', () => {
    const test = linearRegex('^(a+)+$');
    const { value, ms } = timed(() => test(`${'a'.repeat(32)}!`));
    expect(value).toBe(false);
    expect(ms).toBeLessThan(1000); // backtracking takes seconds to minutes; a loaded CI machine can pause 100 ms
  });

  it('are unanchored, and take RE2 syntax', () => {
    expect(linearRegex('self_attn\\.(q|k)_proj')('model.self_attn.q_proj.weight')).toBe(true);
    expect(linearRegex('^q_proj$')('model.q_proj')).toBe(false);
    expect(linearRegex('\\p{L}+\\d')('wé1')).toBe(true);
  });

  it('refuses what RE2 cannot run, and tells that from a typo', () => {
    expect(() => linearRegex('(a)\\1')).toThrow(/linear-time matching cannot run/);
    expect(() => linearRegex('a(?=b)')).toThrow(/linear-time matching cannot run/);
    expect(() => linearRegex('a(')).toThrow(/does not compile/);
  });
});
