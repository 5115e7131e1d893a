import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { objectMembers } from '../../src/format/json-members.js';

/** The members as [key, parsed value] pairs, or null. */
function members(text: string): Array<[string, unknown]> | null {
  const spans = objectMembers(text);
  return spans && spans.map((m) => [m.key, JSON.parse(text.slice(m.start, m.end)) as unknown]);
}

/** Whether the scan and each value's JSON.parse accept `text` (what the header reader asks). */
function acceptedByMembers(text: string): boolean {
  try {
    return members(text) !== null;
  } catch {
    return false; // a value that is not JSON
  }
}

function isJsonObject(text: string): boolean {
  try {
    const v = JSON.parse(text) as unknown;
    return typeof v === 'object' && v !== null && !Array.isArray(v);
  } catch {
    return false;
  }
}

describe('objectMembers', () => {
  it('lists members in document order, integer-like keys included where they stand', () => {
    expect(members('{"b": 1, "10": 2, "a": 3, "0": 4}')).toEqual([
      ['b', 1],
      ['10', 2],
      ['a', 3],
      ['0', 4],
    ]);
  });

  it('keeps duplicates that JSON.parse would silently merge', () => {
    const text = '{"w": {"x": 1}, "v": 2, "w": 3}';
    expect(Object.keys(JSON.parse(text) as object)).toEqual(['w', 'v']);
    expect(members(text)).toEqual([
      ['w', { x: 1 }],
      ['v', 2],
      ['w', 3],
    ]);
  });

  it('ignores keys and strings of nested objects and arrays', () => {
    const text = '{"a": {"b": {"c": 1}, "d": ["e", {"f": 2}]}, "g": [[{"h": 3}]], "i": "j"}';
    expect(members(text)?.map(([k]) => k)).toEqual(['a', 'g', 'i']);
  });

  it('is not fooled by structural characters or escaped quotes inside strings', () => {
    const text = String.raw`{"a\"b": "}{,:", "c\\": "\"", "d": "[", "{e}": 1, ",f": 2}`;
    expect(members(text)).toEqual([
      ['a"b', '}{,:'],
      ['c\\', '"'],
      ['d', '['],
      ['{e}', 1],
      [',f', 2],
    ]);
  });

  it('decodes escapes, so that "\\u0041" and "A" are the same key', () => {
    expect(members(String.raw`{"\u0041": 1, "A": 2, "\ud83d\ude00": 3, "\/": 4}`)?.map(([k]) => k)).toEqual([
      'A',
      'A',
      '\u{1F600}',
      '/',
    ]);
  });

  it('treats "__proto__" as an ordinary key', () => {
    expect(members('{"__proto__": 1, "__proto__": 2}')?.map(([k]) => k)).toEqual(['__proto__', '__proto__']);
  });

  it('handles whitespace everywhere and empty objects', () => {
    expect(members(' \n{ \t}\r\n ')).toEqual([]);
    expect(members('{\n  "a"\n  :\n  {}\n  ,\n  "b" : [ ]\n}   ')).toEqual([
      ['a', {}],
      ['b', []],
    ]);
  });

  it('returns null when the text is not an object, or not one alone', () => {
    for (const text of ['[{"a": 1}, "b"]', '"a"', '42', 'null', '', '{', '{"a"}', '{"a":}', '{"a":1,}']) {
      expect(objectMembers(text), text).toBeNull();
    }
    for (const text of [
      '{"a":1]',
      '{"a":1}}',
      '{"a":1} x',
      '{"a":1,,"b":2}',
      "{'a':1}",
      '{a:1}',
      '{"a"\n1}',
    ]) {
      expect(objectMembers(text), text).toBeNull();
    }
  });

  it('scans a span of a larger text (a member that is itself an object)', () => {
    const text = '{"m": {"x": "1", "y": "2"} , "t": 3}';
    const outer = objectMembers(text)!;
    const inner = objectMembers(text, outer[0]!.start, outer[0]!.end)!;
    expect(inner.map((m) => [m.key, JSON.parse(text.slice(m.start, m.end)) as unknown])).toEqual([
      ['x', '1'],
      ['y', '2'],
    ]);
  });

  it('agrees with a hand-built object text for arbitrary keys and values, duplicates included', () => {
    const member = fc.tuple(fc.string({ unit: 'binary' }), fc.jsonValue({ maxDepth: 3 }));
    fc.assert(
      fc.property(fc.array(member, { maxLength: 8 }), fc.boolean(), (pairs, pretty) => {
        const sep = pretty ? ',\n  ' : ',';
        const text = `{${pairs.map(([k, v]) => `${JSON.stringify(k)}:${JSON.stringify(v, null, pretty ? 2 : 0)}`).join(sep)}}`;
        expect(members(text)).toEqual(pairs.map(([k, v]) => [k, JSON.parse(JSON.stringify(v)) as unknown]));
      }),
    );
  });

  it('accepts exactly what JSON.parse accepts as an object, on texts with a character changed', () => {
    const text = fc
      .tuple(fc.array(fc.tuple(fc.string(), fc.jsonValue({ maxDepth: 2 })), { maxLength: 4 }), fc.boolean())
      .map(([pairs, pretty]) => JSON.stringify(Object.fromEntries(pairs), null, pretty ? 1 : 0));
    const mutant = fc
      .tuple(text, fc.nat(), fc.constantFrom(...'{}[]",: \n\\atrue0-.e'.split(''), ''), fc.boolean())
      .map(([t, at, c, insert]) => {
        const i = t.length === 0 ? 0 : at % t.length;
        return t.slice(0, i) + c + t.slice(insert ? i : i + 1);
      });
    fc.assert(
      fc.property(mutant, (t) => {
        expect(acceptedByMembers(t), t).toBe(isJsonObject(t));
      }),
      { numRuns: 5000 },
    );
  });
});
