/**
 * A tokenizer.json's split regex is written for Oniguruma (the Rust `tokenizers` library runs it
 * through the onig crate); this translates it into a JavaScript RegExp (u flag) that matches
 * the same spans, or refuses it. JavaScript differs from Oniguruma in what the patterns of
 * Llama 3, Qwen 2 and GPT-2 use, so each difference is rewritten rather than passed through:
 *
 * - `\s` / `\S`: Unicode White_Space (JavaScript's `\s` adds U+FEFF and lacks U+0085);
 * - `(?i:…)`: Node 20's RegExp has no inline modifiers; each letter becomes a class of its case
 *   variants under Unicode simple case folding, as Oniguruma folds (`s` also matches ſ U+017F,
 *   `k` the Kelvin sign U+212A);
 * - atomic groups `(?>X)` and possessive `X*+ X++ X?+`: JavaScript has neither; a lookahead
 *   that captures, followed by a backreference to it, matches what X matches at its first
 *   choice and never backtracks into it — which is what atomic means;
 * - `.`: any character but a newline.
 * - groups capture nothing (a split only uses whole matches).
 *
 * Refused, because their meaning depends on Oniguruma's syntax options or they have no exact
 * translation here: `\d \w \b \h` and friends, anchors (`^ $ \A \z`), backreferences, POSIX
 * brackets, nested classes and `&&`, inline options other than `(?i:`, a possessive-looking
 * interval (`{n,m}+`, repetition in Ruby syntax, possessive in Perl's), properties other than
 * general categories, and non-ASCII letters under `(?i:`.
 */
import { QuantdError } from '../../errors/index.js';
import { WHITE_SPACE_RANGES, quoted } from './text.js';

/** General category names JavaScript's \p{…} accepts as Oniguruma writes them. */
const CATEGORIES = new Set(
  (
    'L Lu Ll Lt Lm Lo LC M Mn Mc Me N Nd Nl No P Pc Pd Ps Pe Pi Pf Po S Sm Sc Sk So Z Zs Zl Zp ' +
    'C Cc Cf Cs Co Cn'
  ).split(' '),
);

/** Extra members of an ASCII letter's case-folding class (Unicode CaseFolding.txt, simple). */
const FOLD_EXTRA: Record<string, string> = { k: '\\u212a', s: '\\u017f' };

/** Characters that must be escaped to stand for themselves in a u-flag RegExp. */
const SYNTAX = new Set('^$\\.*+?()[]{}|/'.split(''));

class Unsupported extends Error {}

/** Groups nested deeper than this are refused: the translation recurses once per level. */
export const MAX_GROUP_DEPTH = 64;

export class OnigTranslator {
  private i = 0;
  private atomics = 0;
  private depth = 0;

  private constructor(private readonly src: string) {}

  /** The JavaScript source of `pattern`; throws Unsupported with a reason. */
  static translate(pattern: string): string {
    const t = new OnigTranslator(pattern);
    const out = t.alternation(false);
    if (t.i < pattern.length) t.fail(`unbalanced ")" at ${t.i}`);
    return out;
  }

  private fail(reason: string): never {
    throw new Unsupported(reason);
  }

  private peek(k = 0): string | undefined {
    return this.src[this.i + k];
  }

  /** alternatives separated by |, up to a ")" or the end */
  private alternation(fold: boolean): string {
    const alts = [this.sequence(fold)];
    while (this.peek() === '|') {
      this.i++;
      alts.push(this.sequence(fold));
    }
    return alts.join('|');
  }

  private sequence(fold: boolean): string {
    let out = '';
    for (;;) {
      const c = this.peek();
      if (c === undefined || c === '|' || c === ')') return out;
      const atom = this.atom(fold);
      out += this.quantified(atom);
    }
  }

  /** The atom with its quantifier, if any. */
  private quantified(atom: string): string {
    const c = this.peek();
    let q = '';
    if (c === '*' || c === '+' || c === '?') {
      q = c;
      this.i++;
    } else if (c === '{') {
      const m = /^\{(\d*)(,?)(\d*)\}/.exec(this.src.slice(this.i));
      if (m === null || (m[1] === '' && m[3] === '') || (m[1] === '' && m[2] === '')) {
        this.fail(`"{" at ${this.i} is not an interval (escape a literal brace)`);
      }
      const lo = m[1] === '' ? '0' : m[1]!;
      if (m[3] !== '' && Number(m[3]) < Number(lo)) this.fail(`interval ${m[0]} is empty`);
      q = `{${lo}${m[2]}${m[3]}}`;
      this.i += m[0].length;
      if (this.peek() === '+') this.fail(`"${m[0]}+" means repetition in Ruby syntax, possession in Perl's`);
    } else {
      return atom;
    }
    const mod = this.peek();
    if (mod === '?') {
      this.i++;
      return `${atom}${q}?`;
    }
    if (mod === '+') {
      this.i++;
      return this.atomic(`${atom}${q}`);
    }
    if (mod === '*' || mod === '{') this.fail(`nested quantifier at ${this.i}`);
    return `${atom}${q}`;
  }

  /** X matched once, never backtracked into. */
  private atomic(x: string): string {
    const name = `atomic${this.atomics++}`;
    // grouped, so that a quantifier after it repeats the whole construct
    return `(?:(?=(?<${name}>${x}))\\k<${name}>)`;
  }

  private atom(fold: boolean): string {
    const c = this.peek()!;
    const at = this.i;
    if (c === '*' || c === '+' || c === '?' || c === '{')
      this.fail(`quantifier with nothing before it at ${at}`);
    if (c === '(') return this.group(fold);
    if (c === '[') return this.charClass(fold);
    if (c === '\\') return this.escape(false, fold) ?? this.fail(`unsupported escape at ${at}`);
    this.i += c.length;
    if (c === '.') return '[^\\n]';
    if (c === '^' || c === '$')
      this.fail(`anchor "${c}" at ${at} (its meaning depends on Oniguruma's options)`);
    const cp = this.src.codePointAt(at)!;
    const ch = String.fromCodePoint(cp);
    this.i = at + ch.length;
    return this.literal(ch, fold, at);
  }

  private literal(ch: string, fold: boolean, at: number): string {
    if (fold && /^[A-Za-z]$/.test(ch)) {
      const lower = ch.toLowerCase();
      return `[${lower}${lower.toUpperCase()}${FOLD_EXTRA[lower] ?? ''}]`;
    }
    if (fold && ch.toLowerCase() !== ch.toUpperCase()) {
      this.fail(`non-ASCII letter ${quoted(ch)} under (?i: at ${at}`);
    }
    return SYNTAX.has(ch) ? `\\${ch}` : ch;
  }

  private group(fold: boolean): string {
    const at = this.i;
    const rest = this.src.slice(this.i);
    let open: string; // the group's opening as JavaScript writes it
    let taken: number; // characters of the source's opening
    let inner = fold;
    let atomic = false;
    const named = /^\(\?(<[A-Za-z_]\w*>|'[A-Za-z_]\w*')/.exec(rest);
    if (rest.startsWith('(?:')) [open, taken] = ['(?:', 3];
    else if (rest.startsWith('(?i:')) {
      [open, taken] = ['(?:', 4];
      inner = true;
    } else if (rest.startsWith('(?=') || rest.startsWith('(?!')) [open, taken] = [rest.slice(0, 3), 3];
    else if (rest.startsWith('(?<=') || rest.startsWith('(?<!')) [open, taken] = [rest.slice(0, 4), 4];
    else if (rest.startsWith('(?>')) {
      [open, taken] = ['(?:', 3];
      atomic = true;
    } else if (named !== null) [open, taken] = ['(?:', named[0].length];
    else if (rest.startsWith('(?'))
      this.fail(`group "${rest.slice(0, 4)}" at ${at} (inline options or syntax not translated)`);
    else [open, taken] = ['(?:', 1];
    this.i += taken;
    if (++this.depth > MAX_GROUP_DEPTH) this.fail(`groups nested more than ${MAX_GROUP_DEPTH} deep at ${at}`);
    const body = this.alternation(inner);
    this.depth--;
    if (this.peek() !== ')') this.fail(`unclosed group at ${at}`);
    this.i++;
    return atomic ? this.atomic(`(?:${body})`) : `${open}${body})`;
  }

  /**
   * An escape at this.i. In a class (`inClass`) the result is class content; outside, an atom.
   * Returns undefined for an escape not translated.
   */
  private escape(inClass: boolean, fold: boolean): string | undefined {
    const at = this.i;
    const next = this.src[at + 1];
    if (next === undefined) this.fail('pattern ends with "\\"');
    if (fold && 'pPxu'.includes(next)) this.fail(`\\${next} under (?i: at ${at}`);
    this.i += 2;
    switch (next) {
      case 's':
        return inClass ? WHITE_SPACE_RANGES : `[${WHITE_SPACE_RANGES}]`;
      case 'S':
        if (inClass) this.fail(`\\S inside a class at ${at}`);
        return `[^${WHITE_SPACE_RANGES}]`;
      case 'p':
      case 'P': {
        const m = /^\{(\^?)([A-Za-z]+)\}/.exec(this.src.slice(this.i));
        if (m === null || !CATEGORIES.has(m[2]!)) {
          this.fail(`property at ${at} (general categories only: \\p{L}, \\p{N}, …)`);
        }
        this.i += m[0].length;
        const negated = (next === 'P') !== (m[1] === '^');
        return `\\${negated ? 'P' : 'p'}{${m[2]}}`;
      }
      case 'r':
      case 'n':
      case 't':
      case 'f':
      case 'v':
        return `\\${next}`;
      case 'a':
        return '\\x07';
      case 'e':
        return '\\x1b';
      case 'x': {
        const m = /^(?:\{([0-9A-Fa-f]{1,6})\}|([0-9A-Fa-f]{2}))/.exec(this.src.slice(this.i));
        if (m === null) this.fail(`\\x at ${at} without hex digits`);
        this.i += m[0].length;
        const cp = parseInt(m[1] ?? m[2]!, 16);
        if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) this.fail(`\\x at ${at} is not a character`);
        return `\\u{${cp.toString(16)}}`;
      }
      case 'u': {
        const m = /^[0-9A-Fa-f]{4}/.exec(this.src.slice(this.i));
        if (m === null) this.fail(`\\u at ${at} without four hex digits`);
        this.i += 4;
        return `\\u{${m[0]}}`;
      }
      default:
        if (/[0-9A-Za-z]/.test(next)) return undefined; // \d \w \b \A \1 …: refused
        this.i = at + 1 + String.fromCodePoint(this.src.codePointAt(at + 1)!).length;
        if (inClass) return SYNTAX.has(next) || next === '-' ? `\\${next}` : next;
        return SYNTAX.has(next) ? `\\${next}` : next;
    }
  }

  private charClass(fold: boolean): string {
    const at = this.i;
    if (fold) this.fail(`character class under (?i: at ${at}`);
    this.i++;
    let out = '[';
    if (this.peek() === '^') {
      out += '^';
      this.i++;
    }
    if (this.peek() === ']') this.fail(`class at ${at} starts with "]"`);
    let first = true;
    // a range's ends are single characters: a dash beside a set (\s, \p{L}) is refused
    let lastWasSet = false;
    for (;;) {
      const c = this.peek();
      if (c === undefined) this.fail(`unclosed class at ${at}`);
      if (c === ']') {
        this.i++;
        return `${out}]`;
      }
      if (c === '[') this.fail(`nested class or POSIX bracket at ${this.i}`);
      if (c === '&' && this.peek(1) === '&') this.fail(`class intersection at ${this.i}`);
      if (c === '\\') {
        const isSet = 'sSpP'.includes(this.peek(1) ?? '');
        if (isSet && out.endsWith('-') && !out.endsWith('\\-'))
          this.fail(`range ending in a set at ${this.i}`);
        const e = this.escape(true, false);
        if (e === undefined) this.fail(`unsupported escape in class at ${this.i - 2}`);
        out += e;
        lastWasSet = isSet;
      } else if (c === '-') {
        // a range's dash between two members, or a literal dash at the edges
        const edge = first || this.peek(1) === ']';
        if (!edge && lastWasSet) this.fail(`range starting at a set at ${this.i}`);
        out += edge ? '\\-' : '-';
        this.i++;
        lastWasSet = false;
      } else {
        const ch = String.fromCodePoint(this.src.codePointAt(this.i)!);
        this.i += ch.length;
        out += SYNTAX.has(ch) ? `\\${ch}` : ch;
        lastWasSet = false;
      }
      first = false;
    }
  }
}

/**
 * `pattern` as a global, Unicode RegExp; refused with FEATURE_UNSUPPORTED naming what is not
 * translated, or HF_MODEL_INVALID when the result does not compile (a malformed pattern).
 */
export function onigurumaRegExp(pattern: string, source: string): RegExp {
  let js: string;
  try {
    js = OnigTranslator.translate(pattern);
  } catch (err) {
    if (!(err instanceof Unsupported)) throw err;
    throw new QuantdError('FEATURE_UNSUPPORTED', {
      detail: `${source}: the split regex ${quoted(pattern)} uses what quantd does not translate from Oniguruma: ${err.message}`,
    });
  }
  try {
    return new RegExp(js, 'gu');
  } catch (err) {
    throw new QuantdError('HF_MODEL_INVALID', {
      path: source,
      detail: `the split regex ${quoted(pattern)} is not a valid pattern (${(err as Error).message})`,
    });
  }
}
