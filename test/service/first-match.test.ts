/**
 * The compiled forms of many patterns (src/service/name-patterns.ts) mean what the patterns mean
 * one by one: anyGlob is "some glob matches the whole name", firstMatch is "the index of the first
 * matching rule" (a recipe's order), for globs and unanchored regexes alike — on random patterns
 * and names, including newlines, slashes and the \Q… quoting that cannot be put in an alternation.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import {
  UnusablePattern,
  anyGlob,
  firstMatch,
  linearGlob,
  linearRegex,
  type NamePattern,
} from '../../src/service/name-patterns.js';

const usable = (p: NamePattern): boolean => {
  try {
    if (p.kind === 'glob') linearGlob(p.pattern);
    else linearRegex(p.pattern);
    return true;
  } catch (err) {
    if (err instanceof UnusablePattern) return false;
    throw err;
  }
};

const name = fc.string({ unit: fc.constantFrom(...'ab.\n/_0'.split('')), maxLength: 12 });
const glob = fc.string({ unit: fc.constantFrom(...'ab.*?/[]!{},\\_0'.split('')), maxLength: 8 });
const regex = fc.oneof(
  fc.string({ unit: fc.constantFrom(...'ab.*+?|()^$[]\\_0'.split('')), maxLength: 8 }),
  fc.constantFrom('\\Qa.b', '(?i)A', 'a$', '^b', '\\Qa)\\E|b'),
);
const pattern: fc.Arbitrary<NamePattern> = fc
  .oneof(
    glob.map((p) => ({ kind: 'glob' as const, pattern: p })),
    regex.map((p) => ({ kind: 'regex' as const, pattern: p })),
  )
  .filter(usable);

describe('many patterns compiled together', () => {
  it('firstMatch gives the index of the first pattern that matches, as testing them in order does', () => {
    fc.assert(
      fc.property(
        fc.array(pattern, { maxLength: 40 }),
        fc.array(name, { minLength: 1, maxLength: 8 }),
        (ps, names) => {
          const one = ps.map((p) => (p.kind === 'glob' ? linearGlob(p.pattern) : linearRegex(p.pattern)));
          const first = firstMatch(ps);
          for (const n of names)
            expect(first(n), `${JSON.stringify(n)} in ${JSON.stringify(ps)}`).toBe(
              one.findIndex((t) => t(n)),
            );
        },
      ),
      { numRuns: 400 },
    );
  });

  it('anyGlob is true exactly when one of the globs matches', () => {
    const globs = fc
      .array(glob, { minLength: 1, maxLength: 40 })
      .filter((gs) => gs.every((g) => usable({ kind: 'glob', pattern: g })));
    fc.assert(
      fc.property(globs, fc.array(name, { minLength: 1, maxLength: 8 }), (gs, names) => {
        const any = anyGlob(gs);
        const one = gs.map(linearGlob);
        for (const n of names)
          expect(any(n), `${JSON.stringify(n)} in ${JSON.stringify(gs)}`).toBe(one.some((t) => t(n)));
      }),
      { numRuns: 400 },
    );
  });
});
