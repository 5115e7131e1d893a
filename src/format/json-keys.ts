/**
 * Keys of a JSON document's top-level object, in document order and including duplicates.
 *
 * JSON.parse keeps the last of duplicate keys without a word, so a safetensors header naming a
 * tensor twice would silently lose one entry (and the other reader in a pipeline might keep the
 * first). We find duplicates by scanning the text ourselves.
 */

const QUOTE = 0x22; // "
const BACKSLASH = 0x5c; // \
const COMMA = 0x2c; // ,
const OPEN_BRACE = 0x7b; // {
const CLOSE_BRACE = 0x7d; // }
const OPEN_BRACKET = 0x5b; // [
const CLOSE_BRACKET = 0x5d; // ]

/**
 * Returns the keys of the top-level object of `json`, decoded, in order, duplicates kept.
 * Returns [] when the top level is not an object. The text must already have passed
 * JSON.parse: the scanner only tracks nesting depth and string literals, it does not validate.
 */
export function topLevelKeys(json: string): string[] {
  const keys: string[] = [];
  let depth = 0;
  // True at depth 1 between `{` or `,` and the next string: that string is a key, not a value.
  let expectKey = false;
  let i = 0;
  while (i < json.length) {
    const c = json.charCodeAt(i);
    if (c === QUOTE) {
      const start = i;
      i++;
      // Skip to the closing quote; a backslash always escapes exactly the next code unit
      // (\uXXXX's hex digits need no special care: none of them is a quote or a backslash).
      while (i < json.length) {
        const d = json.charCodeAt(i);
        if (d === BACKSLASH) i += 2;
        else if (d === QUOTE) break;
        else i++;
      }
      if (depth === 1 && expectKey) {
        // JSON.parse of the quoted slice decodes escapes exactly as the full parse did.
        keys.push(JSON.parse(json.slice(start, i + 1)) as string);
        expectKey = false;
      }
    } else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
      depth++;
      if (depth === 1) {
        // A top-level array has no keys.
        if (c === OPEN_BRACKET) return [];
        expectKey = true;
      }
    } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) {
      depth--;
      if (depth === 0) return keys;
    } else if (c === COMMA && depth === 1) {
      expectKey = true;
    }
    i++;
  }
  return keys;
}
