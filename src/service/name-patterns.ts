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
