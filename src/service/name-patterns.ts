/**
 * Name patterns that users send — recipe rules (`glob`, `regex`, `re:PATTERN`), `--include`,
 * `--exclude`, `skip` — compiled for RE2 semantics by re2js, so matching a tensor name takes
 * time linear in the name whatever the pattern. JavaScript's RegExp backtracks: a regex rule
 * `^(a+)+$` against a 33-character name held the event loop for half a minute, and a glob like
 * `*a*a*a*a*a*a*a*b` (picomatch compiled globs to backtracking RegExps) as long on a long name.
 * A server cannot run patterns from its clients that way.
 *
 * RE2 has no backreferences and no lookaround (they are what makes backtracking necessary), so
 * a regex that uses them is refused with an error saying so, rather than run some other way.
 */
import { RE2JS } from 're2js';

/** Why a pattern cannot be used, as words for the error that names its rule or option. */
export class UnusablePattern extends Error {}

/** picomatch's limit, kept so that an absurd pattern is still refused. */
const MAX_PATTERN = 65_536;

/**
 * Patterns one list may hold: recipe rules, `include` globs, `exclude` globs. Each tensor name is
 * tested against the patterns one by one, so a plan costs tensors × patterns tests: 8,000 globs
 * (what a 16 KB query string holds) against 65,536 tensors were 100 s of the server's CPU. At
 * 256 the worst plan is a few seconds (measured: test/service/plan-scale.test.ts); real recipes
 * hold a handful of rules.
 */
export const PATTERN_LIMIT = 256;

/**
 * Characters the patterns of one list may hold together. Compiling is synchronous and costs up
 * to about 7 ms per KiB of pattern here (a 64 KiB `a*a*…` glob took 436 ms): 256 patterns of the
 * 64 KiB each allows would hold the event loop for minutes. 8 Ki characters compile in at most
 * about 100 ms; real recipes take a few hundred.
 */
export const PATTERN_TEXT_LIMIT = 8_192;

/** Why a list of patterns is too much to compile, or null. */
export function patternListProblem(patterns: readonly string[]): string | null {
  if (patterns.length > PATTERN_LIMIT) {
    return `holds ${patterns.length} patterns; a list takes at most ${PATTERN_LIMIT}`;
  }
  const chars = patterns.reduce((n, p) => n + p.length, 0);
  if (chars > PATTERN_TEXT_LIMIT) {
    return `holds ${chars} characters of patterns; a list takes at most ${PATTERN_TEXT_LIMIT}`;
  }
  return null;
}

/** An unanchored test (like grep) of a regex against a name. */
export function linearRegex(pattern: string): (name: string) => boolean {
  let compiled: RE2JS;
  try {
    compiled = RE2JS.compile(pattern);
  } catch (err) {
    const reason = (err as Error).message;
    throw new UnusablePattern(
      isJavaScriptRegex(pattern)
        ? `uses syntax that linear-time matching cannot run (backreferences, lookahead, lookbehind): ${reason}`
        : `does not compile: ${reason}`,
    );
  }
  return (name) => compiled.test(name);
}

/** Whether JavaScript accepts the pattern (compiling never runs it, so this is safe). */
function isJavaScriptRegex(pattern: string): boolean {
  try {
    new RegExp(pattern, 'u');
    return true;
  } catch {
    return false;
  }
}

/**
 * A test of a glob against the whole name: `*` any run of characters but `/` (so it crosses
 * dots), `**` any run at all, `?` one character but `/`, `[abc]` `[a-z]` `[!a]` classes,
 * `{a,b}` alternatives (nested too), `\x` a literal x. Extglobs (`!(…)`, `@(…)`, `+(…)`) are
 * refused rather than read as literals.
 */
export function linearGlob(glob: string): (name: string) => boolean {
  if (glob.length > MAX_PATTERN) throw new UnusablePattern(`is longer than ${MAX_PATTERN} characters`);
  const regex = `^${new GlobTranslator(glob).translate()}$`;
  let compiled: RE2JS;
  try {
    compiled = RE2JS.compile(regex, RE2JS.DOTALL);
  } catch (err) {
    throw new UnusablePattern(`does not compile: ${(err as Error).message}`);
  }
  return (name) => compiled.testExact(name);
}

/** A glob that cannot be used, named, and why (thrown by anyGlob). */
export class UnusableGlob extends UnusablePattern {
  constructor(
    readonly glob: string,
    reason: UnusablePattern,
  ) {
    super(reason.message);
  }
}

/**
 * Whether a name matches any of `globs` (linearGlob's syntax, each against the whole name), in
 * one test: the globs are compiled as one alternation, which RE2 runs in one pass over the name.
 * 256 globs tested one by one against 65,536 names took 4-16 s here; as one alternation, 45-400
 * ms. A glob that cannot be used is thrown as UnusableGlob, naming it.
 */
export function anyGlob(globs: readonly string[]): (name: string) => boolean {
  if (globs.length === 0) return () => false;
  const one = (glob: string): ((name: string) => boolean) => {
    try {
      return linearGlob(glob);
    } catch (err) {
      if (err instanceof UnusablePattern) throw new UnusableGlob(glob, err);
      throw err;
    }
  };
  const bodies = globs.map((glob) => {
    if (glob.length > MAX_PATTERN) one(glob); // throws, naming it
    try {
      return new GlobTranslator(glob).translate();
    } catch (err) {
      if (err instanceof UnusablePattern) throw new UnusableGlob(glob, err);
      throw err;
    }
  });
  try {
    // compiled once, together (compiling is most of the cost of a long glob)
    const compiled = RE2JS.compile(`^(?:${bodies.map((b) => `(?:${b})`).join('|')})$`, RE2JS.DOTALL);
    return (name) => compiled.testExact(name);
  } catch {
    // one glob that does not compile (named by its own error), or an alternation too large for
    // RE2 where each glob is not (then one by one)
    const tests = globs.map(one);
    return (name) => tests.some((t) => t(name));
  }
}

/** A pattern as a recipe rule gives it: a glob (whole name) or a regex (unanchored). */
export interface NamePattern {
  readonly kind: 'glob' | 'regex';
  readonly pattern: string;
  /** The pattern compiled alone (linearGlob / linearRegex), if the caller has it. */
  readonly test?: (name: string) => boolean;
}

/** Patterns tested together as one alternation by firstMatch. */
const BLOCK = 16;

/**
 * The index of the first of `patterns` (each usable: linearGlob / linearRegex) that matches a
 * name, or -1: what a recipe's first-match rule order asks. The patterns go in blocks of 16, each
 * also compiled as one alternation (a glob as its whole-name regex, a regex padded with `.*` on
 * both sides, the unanchored search as a whole-name match), so that a name is tested against
 * one alternation per block and against single patterns only in the block that matches: at most
 * 16 + 16 tests for 256 rules instead of 256 (65,536 names, every one matching the 256th glob
 * rule: 8.6 s one by one). A block whose alternation does not compile (a regex ending inside
 * \Q…) is tested pattern by pattern.
 */
export function firstMatch(patterns: readonly NamePattern[]): (name: string) => number {
  // compiled already where the caller has them (a recipe's rules)
  const single = patterns.map(
    (p) => p.test ?? (p.kind === 'glob' ? linearGlob(p.pattern) : linearRegex(p.pattern)),
  );
  const blocks: Array<{ readonly from: number; readonly any: ((name: string) => boolean) | null }> = [];
  for (let from = 0; from < patterns.length; from += BLOCK) {
    const bodies = patterns
      .slice(from, from + BLOCK)
      .map((p) =>
        p.kind === 'glob'
          ? `(?s:${new GlobTranslator(p.pattern).translate()})`
          : `(?s:.*)(?:${p.pattern})(?s:.*)`,
      );
    let any: ((name: string) => boolean) | null = null;
    // \Q quotes up to \E or the end of the pattern: in an alternation, an unterminated one would
    // quote the patterns after it (and a later \E end it there), so such a block goes one by one
    const quoting = patterns
      .slice(from, from + BLOCK)
      .some((p) => p.kind === 'regex' && p.pattern.includes('\\Q'));
    if (!quoting) {
      try {
        const compiled = RE2JS.compile(`^(?:${bodies.join('|')})$`);
        any = (name) => compiled.testExact(name);
      } catch {
        any = null;
      }
    }
    blocks.push({ from, any });
  }
  return (name) => {
    for (const { from, any } of blocks) {
      if (any !== null && !any(name)) continue;
      for (let i = from; i < Math.min(from + BLOCK, single.length); i++) if (single[i]!(name)) return i;
    }
    return -1;
  };
}

const REGEX_SPECIAL = /[\\^$.|?*+()[\]{}]/g;
const literal = (text: string): string => text.replace(REGEX_SPECIAL, '\\$&');

/** Glob text to RE2 syntax, one character at a time. */
class GlobTranslator {
  private at = 0;

  constructor(private readonly glob: string) {}

  translate(): string {
    const out = this.sequence(false);
    if (this.at < this.glob.length) throw new UnusablePattern(`has an unmatched "${this.glob[this.at]}"`);
    return out;
  }

  /** Up to the end, or (inside braces) up to the `,` or `}` that ends this alternative. */
  private sequence(inBraces: boolean): string {
    let out = '';
    while (this.at < this.glob.length) {
      const c = this.glob[this.at]!;
      if (inBraces && (c === ',' || c === '}')) break;
      if ('!@+*?'.includes(c) && this.glob[this.at + 1] === '(') {
        throw new UnusablePattern(`uses an extglob ("${c}(…)"), which quantd globs do not support`);
      }
      this.at++;
      if (c === '*') {
        if (this.glob[this.at] === '*') {
          while (this.glob[this.at] === '*') this.at++;
          out += '.*';
        } else {
          out += '[^/]*';
        }
      } else if (c === '?') out += '[^/]';
      else if (c === '[') out += this.characterClass();
      else if (c === '{') out += this.alternatives();
      else if (c === '\\' && this.at < this.glob.length) out += literal(this.glob[this.at++]!);
      else out += literal(c);
    }
    return out;
  }

  /** `[...]` after its `[`; an unterminated `[` is a literal. */
  private characterClass(): string {
    const close = this.glob.indexOf(']', this.at + 1);
    if (close < 0) return '\\[';
    let body = this.glob.slice(this.at, close);
    this.at = close + 1;
    const negated = body.startsWith('!') || body.startsWith('^');
    if (negated) body = body.slice(1);
    // inside a class only these mean something to RE2
    return `[${negated ? '^' : ''}${body.replace(/[\\[\]^]/g, '\\$&')}]`;
  }

  /** `{a,b,…}` after its `{`; without a closing `}` (or a comma) it is a literal. */
  private alternatives(): string {
    const start = this.at;
    const options: string[] = [];
    for (;;) {
      options.push(this.sequence(true));
      const c = this.glob[this.at];
      if (c === ',') {
        this.at++;
        continue;
      }
      if (c === '}' && options.length > 1) {
        this.at++;
        return `(?:${options.join('|')})`;
      }
      // not alternatives after all: `{` as a literal, and read on from just after it
      this.at = start;
      return '\\{';
    }
  }
}
