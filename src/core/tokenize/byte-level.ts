/**
 * GPT-2's byte-level alphabet, which byte-level BPE vocabularies (Llama 3, Qwen 2) are spelled
 * in: each of the 256 bytes is one printable character — printable Latin-1 bytes ('!'…'~',
 * '¡'…'¬', '®'…'ÿ') themselves, the others U+0100 upwards in byte order — so that every text is
 * a string of vocabulary characters and nothing is ever unknown.
 */
function printable(b: number): boolean {
  return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
}

/** BYTE_CHARS[b]: the character that spells byte b. */
export const BYTE_CHARS: readonly string[] = (() => {
  const chars: string[] = [];
  let extra = 0;
  for (let b = 0; b < 256; b++) chars.push(String.fromCharCode(printable(b) ? b : 256 + extra++));
  return chars;
})();

/** The byte a character spells; undefined for a character outside the alphabet. */
export const CHAR_BYTES: ReadonlyMap<string, number> = new Map(BYTE_CHARS.map((c, b) => [c, b]));

/** The UTF-8 bytes of `text` (well-formed) spelled in the alphabet. */
export function byteLevelString(text: string): string {
  const c = BYTE_CHARS;
  let s = '';
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    if (unit < 0x80) {
      s += c[unit]!;
    } else if (unit < 0x800) {
      s += c[0xc0 | (unit >> 6)]! + c[0x80 | (unit & 0x3f)]!;
    } else if (unit < 0xd800 || unit > 0xdbff) {
      s += c[0xe0 | (unit >> 12)]! + c[0x80 | ((unit >> 6) & 0x3f)]! + c[0x80 | (unit & 0x3f)]!;
    } else {
      const cp = 0x10000 + ((unit - 0xd800) << 10) + (text.charCodeAt(++i) - 0xdc00);
      s +=
        c[0xf0 | (cp >> 18)]! +
        c[0x80 | ((cp >> 12) & 0x3f)]! +
        c[0x80 | ((cp >> 6) & 0x3f)]! +
        c[0x80 | (cp & 0x3f)]!;
    }
  }
  return s;
}
