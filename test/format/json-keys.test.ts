import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { topLevelKeys } from '../../src/format/json-keys.js';

describe('topLevelKeys', () => {
  it('lists keys in document order, integer-like keys included where they stand', () => {
    expect(topLevelKeys('{"b": 1, "10": 2, "a": 3, "0": 4}')).toEqual(['b', '10', 'a', '0']);
  });

  it('keeps duplicates that JSON.parse would silently merge', () => {
    const text = '{"w": {"x": 1}, "v": 2, "w": 3}';
    expect(Object.keys(JSON.parse(text) as object)).toEqual(['w', 'v']);
    expect(topLevelKeys(text)).toEqual(['w', 'v', 'w']);
  });

  it('ignores keys and strings of nested objects and arrays', () => {
    const text = '{"a": {"b": {"c": 1}, "d": ["e", {"f": 2}]}, "g": [[{"h": 3}]], "i": "j"}';
    expect(topLevelKeys(text)).toEqual(['a', 'g', 'i']);
  });

  it('is not fooled by structural characters or escaped quotes inside strings', () => {
    const text = String.raw`{"a\"b": "}{,:", "c\\": "\"", "d": "[", "{e}": 1, ",f": 2}`;
    expect(topLevelKeys(text)).toEqual(['a"b', 'c\\', 'd', '{e}', ',f']);
  });

  it('decodes escapes, so that "\\u0041" and "A" are the same key', () => {
    expect(topLevelKeys(String.raw`{"\u0041": 1, "A": 2, "\ud83d\ude00": 3, "\/": 4}`)).toEqual([
      'A',
      'A',
      '\u{1F600}',
      '/',
    ]);
  });

  it('treats "__proto__" as an ordinary key', () => {
    expect(topLevelKeys('{"__proto__": 1, "__proto__": 2}')).toEqual(['__proto__', '__proto__']);
  });

  it('handles whitespace everywhere and empty objects', () => {
    expect(topLevelKeys(' \n{ \t}\r\n ')).toEqual([]);
    expect(topLevelKeys('{\n  "a"\n  :\n  {}\n  ,\n  "b" : [ ]\n}   ')).toEqual(['a', 'b']);
  });

  it('returns [] when the top level is not an object', () => {
    expect(topLevelKeys('[{"a": 1}, "b"]')).toEqual([]);
    expect(topLevelKeys('"a"')).toEqual([]);
    expect(topLevelKeys('42')).toEqual([]);
    expect(topLevelKeys('null')).toEqual([]);
  });

  it('agrees with a hand-built object text for arbitrary keys and values, duplicates included', () => {
    const member = fc.tuple(fc.string({ unit: 'binary' }), fc.jsonValue({ maxDepth: 3 }));
    fc.assert(
      fc.property(fc.array(member, { maxLength: 8 }), fc.boolean(), (members, pretty) => {
        const sep = pretty ? ',\n  ' : ',';
        const text = `{${members.map(([k, v]) => `${JSON.stringify(k)}:${JSON.stringify(v, null, pretty ? 2 : 0)}`).join(sep)}}`;
        JSON.parse(text); // precondition of topLevelKeys
        expect(topLevelKeys(text)).toEqual(members.map(([k]) => k));
      }),
    );
  });
});
