/**
 * A byte-level BPE tokenizer.json (the Hugging Face tokenizers format of Llama 3, Qwen 2 and
 * Qwen 3) as a Tokenizer giving the ids the `tokenizers` library gives, with the steps of its
 * pipeline in its order:
 *
 * 1. added tokens are cut out of the raw text (those with normalized: false), then the rest is
 *    normalized (NFC, NFD, NFKC, NFKD or none) and the others cut out of it (./added-tokens.ts);
 * 2. the pre-tokenizer splits each remaining piece: Split steps by their regex (Oniguruma's,
 *    translated by ./onig-regex.ts; matches and the text between them both become pieces), then
 *    ByteLevel (optionally a space first, optionally GPT-2's own regex) spells each piece's
 *    UTF-8 bytes in the byte-level alphabet (./byte-level.ts);
 * 3. the BPE model gives each piece's ids (./hf-bpe.ts);
 * 4. the BOS / EOS the caller asks for (the loader decides the model's default, as the GGUF
 *    conversion does: tokenizer_config.json's add_bos_token, else the post-processor's template).
 *
 * Whatever else a tokenizer.json may say is refused, not skipped: other normalizers,
 * pre-tokenizers and post-processors, Split behaviours other than Isolated, inverted splits,
 * single-word added tokens, BPE dropout, subword prefixes and suffixes, and vocabularies
 * without all 256 byte characters (the reference would silently drop such characters).
 */
import { QuantdError } from '../../errors/index.js';
import { AddedTokenMatcher, type AddedTokenSpec, type Piece } from './added-tokens.js';
import { BYTE_CHARS, CHAR_BYTES, byteLevelString } from './byte-level.js';
import { HfBpe } from './hf-bpe.js';
import { onigurumaRegExp } from './onig-regex.js';
import { IdList, checkText, quoted, utf8Bytes, utf8Lossy } from './text.js';
import { specialsAround, type EncodeOptions, type Tokenizer } from './tokenizer.js';

type Json = Readonly<Record<string, unknown>>;

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/** GPT-2's split regex, which ByteLevel applies when use_regex is on (Oniguruma syntax). */
const GPT2_SPLIT = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

export interface ByteLevelBpeOptions {
  /** Names the tokenizer.json in errors. */
  readonly source: string;
  readonly bosId: number;
  readonly eosId: number;
  readonly addsBos: boolean;
  readonly addsEos: boolean;
}

type Step = { kind: 'split'; regex: RegExp } | { kind: 'bytes'; prefixSpace: boolean; regex: RegExp | null };

function unsupported(source: string, what: string): QuantdError {
  return new QuantdError('FEATURE_UNSUPPORTED', {
    detail: `${source}: ${what}; quantd tokenizes byte-level BPE tokenizers as Llama 3 and Qwen 2 write them`,
  });
}

function invalid(source: string, detail: string): QuantdError {
  return new QuantdError('HF_MODEL_INVALID', { path: source, detail });
}

/** Sequences nested deeper than this are refused (the walks below recurse once per level). */
const MAX_SEQUENCE_DEPTH = 16;

function checkDepth(depth: number, what: string, source: string): void {
  if (depth > MAX_SEQUENCE_DEPTH) {
    throw invalid(source, `has ${what} Sequences nested more than ${MAX_SEQUENCE_DEPTH} deep`);
  }
}

/** The normalizer as a function; refused unless Unicode normal forms only. */
function normalizer(spec: unknown, source: string, depth = 0): ((s: string) => string) | null {
  if (spec === null || spec === undefined) return null;
  if (!isObject(spec)) throw invalid(source, 'has a normalizer that is not an object');
  checkDepth(depth, 'normalizer', source);
  const type = spec['type'];
  if (type === 'NFC' || type === 'NFD' || type === 'NFKC' || type === 'NFKD') return (s) => s.normalize(type);
  if (type === 'Sequence' && Array.isArray(spec['normalizers'])) {
    const steps = spec['normalizers'].map((n) => normalizer(n, source, depth + 1)).filter((f) => f !== null);
    return (s) => steps.reduce((t, f) => f(t), s);
  }
  throw unsupported(
    source,
    `its normalizer ${quoted(type)} is not one quantd implements (NFC, NFD, NFKC, NFKD)`,
  );
}

function escapeRegExp(s: string): string {
  return s.replace(/[\^$\\.*+?()[\]{}|/]/g, '\\$&');
}

/** The pre-tokenizer's steps: Split… then one ByteLevel, last. */
function preTokenizer(spec: unknown, source: string): Step[] {
  const flat: Json[] = [];
  const walk = (p: unknown, depth: number): void => {
    if (!isObject(p)) throw unsupported(source, 'it has no pre-tokenizer');
    checkDepth(depth, 'pre-tokenizer', source);
    if (p['type'] === 'Sequence') {
      if (!Array.isArray(p['pretokenizers']))
        throw invalid(source, 'has a Sequence pre-tokenizer without pretokenizers');
      for (const inner of p['pretokenizers']) walk(inner, depth + 1);
    } else flat.push(p);
  };
  walk(spec, 0);
  const steps: Step[] = flat.map((p, i): Step => {
    const type = p['type'];
    if (type === 'Split') {
      const pattern = p['pattern'];
      if (p['behavior'] !== 'Isolated') {
        throw unsupported(
          source,
          `its Split pre-tokenizer's behavior ${quoted(p['behavior'])} is not Isolated`,
        );
      }
      if (p['invert'] === true) throw unsupported(source, 'its Split pre-tokenizer is inverted');
      if (isObject(pattern) && typeof pattern['Regex'] === 'string') {
        return { kind: 'split', regex: onigurumaRegExp(pattern['Regex'], source) };
      }
      if (isObject(pattern) && typeof pattern['String'] === 'string' && pattern['String'] !== '') {
        return { kind: 'split', regex: new RegExp(escapeRegExp(pattern['String']), 'gu') };
      }
      throw invalid(source, 'has a Split pre-tokenizer without a Regex or String pattern');
    }
    if (type === 'ByteLevel') {
      if (i !== flat.length - 1)
        throw unsupported(source, 'its ByteLevel pre-tokenizer is not the last step');
      return {
        kind: 'bytes',
        prefixSpace: p['add_prefix_space'] === true,
        // the library's default is to split with GPT-2's regex
        regex: p['use_regex'] === false ? null : onigurumaRegExp(GPT2_SPLIT, source),
      };
    }
    throw unsupported(
      source,
      `its pre-tokenizer ${quoted(type)} is not one quantd implements (Split, ByteLevel)`,
    );
  });
  if (steps.at(-1)?.kind !== 'bytes') throw unsupported(source, 'its pre-tokenizer has no ByteLevel step');
  return steps;
}

/** Adds the pieces `regex` cuts `text` into (its matches and the text between them). */
function isolate(text: string, regex: RegExp, out: string[]): void {
  let done = 0;
  regex.lastIndex = 0;
  for (let m = regex.exec(text); m !== null; m = regex.exec(text)) {
    if (m[0].length === 0) {
      // an empty match cuts nothing; step over one character
      regex.lastIndex = m.index + (text.codePointAt(m.index)! > 0xffff ? 2 : 1);
      continue;
    }
    if (done < m.index) out.push(text.slice(done, m.index));
    out.push(m[0]);
    done = m.index + m[0].length;
  }
  if (done < text.length) out.push(text.slice(done));
}

function postProcessor(spec: unknown, source: string, depth = 0): void {
  if (spec === null || spec === undefined) return;
  if (!isObject(spec)) throw invalid(source, 'has a post-processor that is not an object');
  checkDepth(depth, 'post-processor', source);
  const type = spec['type'];
  if (type === 'Sequence' && Array.isArray(spec['processors'])) {
    for (const p of spec['processors']) postProcessor(p, source, depth + 1);
    return;
  }
  if (type === 'ByteLevel') return; // offsets only
  if (type === 'TemplateProcessing') {
    const single = spec['single'];
    if (!Array.isArray(single)) throw invalid(source, 'has a TemplateProcessing without a single template');
    const kinds = single.map((item) => (isObject(item) && 'SpecialToken' in item ? 'S' : 'A')).join('');
    // special tokens around the one sequence: the BOS before it, the EOS after it
    if (!/^S*AS*$/.test(kinds))
      throw unsupported(source, 'its post-processor template is not [specials…] A [specials…]');
    return;
  }
  throw unsupported(source, `its post-processor ${quoted(type)} is not one quantd implements`);
}

function addedTokenSpecs(json: Json, source: string): AddedTokenSpec[] {
  const added = json['added_tokens'] ?? [];
  if (!Array.isArray(added)) throw invalid(source, 'has added_tokens that is not a list');
  return added.map((a, i): AddedTokenSpec => {
    if (
      !isObject(a) ||
      typeof a['content'] !== 'string' ||
      !Number.isSafeInteger(a['id']) ||
      (a['id'] as number) < 0
    ) {
      throw invalid(source, `added token ${i} is malformed`);
    }
    if (a['single_word'] === true) {
      throw unsupported(source, `added token ${quoted(a['content'])} is single_word`);
    }
    const special = a['special'] === true;
    return {
      id: a['id'] as number,
      content: a['content'],
      lstrip: a['lstrip'] === true,
      rstrip: a['rstrip'] === true,
      normalized: typeof a['normalized'] === 'boolean' ? a['normalized'] : !special,
      special,
    };
  });
}

function bpeModel(json: Json, source: string): { vocab: Map<string, number>; bpe: HfBpe } {
  const model = json['model'];
  if (!isObject(model) || model['type'] !== 'BPE' || !isObject(model['vocab'])) {
    throw invalid(source, 'is not a BPE tokenizer (model.type "BPE" with a vocab)');
  }
  const dropout = model['dropout'];
  if (dropout !== null && dropout !== undefined && dropout !== 0)
    throw unsupported(source, 'its BPE model has dropout');
  for (const key of ['continuing_subword_prefix', 'end_of_word_suffix']) {
    const v = model[key];
    if (v !== null && v !== undefined && v !== '') throw unsupported(source, `its BPE model has a ${key}`);
  }
  const vocab = new Map<string, number>();
  for (const [token, id] of Object.entries(model['vocab'])) {
    if (typeof id !== 'number' || !Number.isSafeInteger(id) || id < 0) {
      throw invalid(source, `token ${quoted(token)} has id ${quoted(id)}`);
    }
    vocab.set(token, id);
  }
  const missing = BYTE_CHARS.findIndex((c) => !vocab.has(c));
  if (missing >= 0) {
    throw unsupported(
      source,
      `its vocabulary lacks the byte-level character of byte 0x${missing.toString(16)}`,
    );
  }
  const rawMerges = model['merges'] ?? [];
  if (!Array.isArray(rawMerges)) throw invalid(source, 'has merges that are not a list');
  const merges = rawMerges.map((m, i): readonly [string, string] => {
    if (typeof m === 'string') {
      const parts = m.split(' ');
      if (parts.length === 2) return [parts[0]!, parts[1]!];
    } else if (Array.isArray(m) && m.length === 2 && typeof m[0] === 'string' && typeof m[1] === 'string') {
      return [m[0], m[1]];
    }
    throw invalid(source, `merge ${i} is neither "a b" nor ["a", "b"]: ${quoted(m)}`);
  });
  return { vocab, bpe: new HfBpe(vocab, merges, model['ignore_merges'] === true, source) };
}

/** The Tokenizer of a parsed tokenizer.json (`json`); refuses what it does not implement. */
export function byteLevelBpeTokenizer(json: unknown, options: ByteLevelBpeOptions): Tokenizer {
  const source = options.source;
  if (!isObject(json)) throw invalid(source, 'is not a JSON object');
  const { vocab, bpe } = bpeModel(json, source);
  const normalize = normalizer(json['normalizer'], source);
  const steps = preTokenizer(json['pre_tokenizer'], source);
  postProcessor(json['post_processor'], source);
  const added = addedTokenSpecs(json, source);
  const raw = new AddedTokenMatcher(added.filter((t) => !t.normalized).map((t) => [t.content, t] as const));
  const normalized = new AddedTokenMatcher(
    added
      .filter((t) => t.normalized)
      .map((t) => [normalize === null ? t.content : normalize(t.content), t] as const),
  );

  // id → token, for decode and the id space
  const tokenOf = new Map<number, { text: string; special: boolean; added: boolean }>();
  for (const [text, id] of vocab) tokenOf.set(id, { text, special: false, added: false });
  for (const t of added) tokenOf.set(t.id, { text: t.content, special: t.special, added: true });
  let vocabSize = 0;
  for (const id of tokenOf.keys()) vocabSize = Math.max(vocabSize, id + 1);

  const preTokens = (piece: string, out: IdList): void => {
    let parts = [piece];
    for (const step of steps) {
      const next: string[] = [];
      for (let part of parts) {
        if (step.kind === 'split') {
          isolate(part, step.regex, next);
          continue;
        }
        if (step.prefixSpace && !part.startsWith(' ')) part = ` ${part}`;
        if (step.regex === null) next.push(part);
        else isolate(part, step.regex, next);
      }
      parts = next;
    }
    for (const part of parts) if (part !== '') bpe.encode(byteLevelString(part), out);
  };

  const encode = (text: string, opts?: EncodeOptions): Int32Array => {
    checkText(text);
    const [before, after] = specialsAround(tokenizer, opts);
    const out = new IdList();
    const first: Piece[] = [];
    raw.split(text, first);
    for (const piece of first) {
      if (typeof piece === 'number') {
        out.push(piece);
        continue;
      }
      const second: Piece[] = [];
      normalized.split(normalize === null ? piece : normalize(piece), second);
      for (const p of second) {
        if (typeof p === 'number') out.push(p);
        else preTokens(p, out);
      }
    }
    return out.result(before, after);
  };

  const decode = (ids: ArrayLike<number>): string => {
    const bytes: number[] = [];
    for (let k = 0; k < ids.length; k++) {
      const id = ids[k]!;
      const token = Number.isInteger(id) ? tokenOf.get(id) : undefined;
      if (token === undefined) {
        throw new QuantdError('TOKENIZER_INPUT_INVALID', {
          detail: `token id ${id} (at index ${k}) is not an id of this tokenizer`,
        });
      }
      if (token.special) continue;
      // ByteLevel's decoder: each character's byte, or the token's own UTF-8 when one is outside the alphabet
      const own: number[] = [];
      let outside = false;
      for (const ch of token.text) {
        const b = CHAR_BYTES.get(ch);
        if (b === undefined) {
          outside = true;
          break;
        }
        own.push(b);
      }
      if (outside) bytes.push(...utf8Bytes(token.text));
      else bytes.push(...own);
    }
    return utf8Lossy(Uint8Array.from(bytes));
  };

  const tokenizer: Tokenizer = {
    kind: 'byte-level-bpe',
    vocabSize,
    bosId: options.bosId,
    eosId: options.eosId,
    addsBos: options.addsBos,
    addsEos: options.addsEos,
    encode,
    decode,
  };
  return tokenizer;
}
