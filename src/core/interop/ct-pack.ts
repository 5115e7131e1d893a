/**
 * compressed-tensors' int32 packing (`pack_to_int32` / `unpack_from_int32` in
 * compressed_tensors/compressors/pack_quantized/helpers.py), the storage of its "pack-quantized"
 * format: signed codes of `bits` bits (1..8) become unsigned by adding 2^(bits-1), and each row's
 * codes are laid end to end as one little-endian bit string — code c at bits c·bits … c·bits +
 * bits − 1 — cut into int32 words, ceil(cols·bits / 32) per row, the last padded with zero bits.
 * `packed_dim=0` (zero points) packs each column the same way: a [rows, cols] array becomes
 * [ceil(rows·bits / 32), cols].
 *
 * For 2, 4 and 8 bits (which divide 32) no code straddles two words and the layout is the one
 * every release has written; compressed-tensors 0.13 changed the other widths (before it, a word
 * held ⌊32 / bits⌋ codes and the rest of its bits were padding), so quantd reads only these.
 */

/** Words per row of `cols` codes of `bits` bits. */
export const packedWords = (cols: number, bits: number): number => Math.ceil((cols * bits) / 32);

/** `codes` [rows, cols], signed within [-2^(bits-1), 2^(bits-1)) → int32 words [rows, packedWords(cols)]. */
export function packToInt32(codes: Int8Array, rows: number, cols: number, bits: number): Int32Array {
  const per = packedWords(cols, bits);
  const out = new Int32Array(rows * per);
  const offset = 1 << (bits - 1);
  for (let r = 0; r < rows; r++) {
    const base = r * per;
    for (let c = 0; c < cols; c++) {
      const v = (codes[r * cols + c]! + offset) & ((1 << bits) - 1);
      const bit = c * bits;
      const w = base + (bit >>> 5);
      const shift = bit & 31;
      out[w] = out[w]! | (v << shift);
      // a code that crosses into the next word (widths that do not divide 32)
      if (shift + bits > 32) out[w + 1] = out[w + 1]! | (v >>> (32 - shift));
    }
  }
  return out;
}

/** `codes` [rows, cols] packed along the rows (packed_dim=0) → int32 words [packedWords(rows), cols]. */
export function packColumnsToInt32(codes: Int8Array, rows: number, cols: number, bits: number): Int32Array {
  const transposed = new Int8Array(rows * cols);
  for (let r = 0; r < rows; r++)
    for (let c = 0; c < cols; c++) transposed[c * rows + r] = codes[r * cols + c]!;
  const per = packedWords(rows, bits);
  const packed = packToInt32(transposed, cols, rows, bits); // [cols, per]
  const out = new Int32Array(per * cols);
  for (let c = 0; c < cols; c++) for (let k = 0; k < per; k++) out[k * cols + c] = packed[c * per + k]!;
  return out;
}

/** int32 words [rows, packedWords(cols)] → the signed codes [rows, cols]. */
export function unpackFromInt32(words: Int32Array, rows: number, cols: number, bits: number): Int8Array {
  const per = packedWords(cols, bits);
  const out = new Int8Array(rows * cols);
  const offset = 1 << (bits - 1);
  const mask = (1 << bits) - 1;
  for (let r = 0; r < rows; r++) {
    const base = r * per;
    for (let c = 0; c < cols; c++) {
      const bit = c * bits;
      const w = base + (bit >>> 5);
      const shift = bit & 31;
      let v = words[w]! >>> shift;
      if (shift + bits > 32) v |= words[w + 1]! << (32 - shift);
      out[r * cols + c] = (v & mask) - offset;
    }
  }
  return out;
}

/** int32 words [packedWords(rows), cols] (packed_dim=0) → the signed codes [rows, cols]. */
export function unpackColumnsFromInt32(
  words: Int32Array,
  rows: number,
  cols: number,
  bits: number,
): Int8Array {
  const per = packedWords(rows, bits);
  const transposed = new Int32Array(cols * per);
  for (let k = 0; k < per; k++) for (let c = 0; c < cols; c++) transposed[c * per + k] = words[k * cols + c]!;
  const codes = unpackFromInt32(transposed, cols, rows, bits); // [cols, rows]
  const out = new Int8Array(rows * cols);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[r * cols + c] = codes[c * rows + r]!;
  return out;
}
