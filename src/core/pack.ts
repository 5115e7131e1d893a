/**
 * Sub-byte packing, torch quint4x2 / quint2x4 layout: values in row-major order, k = 8 / bits
 * per byte, element i at bit (i % k) · bits of byte floor(i / k), least significant first, the
 * last byte zero-padded. Signed values are stored as two's-complement fields.
 *
 *   five 4-bit 3s → [0x33, 0x33, 0x03] = [51, 51, 3]      (torch test_qtensor_sub_byte)
 *   five 2-bit 3s → [0xFF, 0x03]       = [255, 3]
 */

export function packSubByte(values: ArrayLike<number>, bits: number): Uint8Array {
  const perByte = 8 / bits;
  const mask = (1 << bits) - 1;
  const out = new Uint8Array(Math.ceil(values.length / perByte));
  for (let i = 0; i < values.length; i++) {
    const byte = (i / perByte) | 0;
    out[byte] = out[byte]! | ((values[i]! & mask) << ((i % perByte) * bits));
  }
  return out;
}

/** Value `i` of packed sub-byte codes (`bits` each, lowest bits first), sign-extended when `signed`. */
export function subByteValue(packed: Uint8Array, i: number, bits: number, signed: boolean): number {
  const perByte = 8 / bits;
  const field = (packed[(i / perByte) | 0]! >>> ((i % perByte) * bits)) & ((1 << bits) - 1);
  return signed && field & (1 << (bits - 1)) ? field - (1 << bits) : field;
}

/** Inverse of packSubByte: `numel` values, sign-extended when `signed`. */
export function unpackSubByte(packed: Uint8Array, numel: number, bits: number, signed: boolean): Int8Array {
  const out = new Int8Array(numel);
  for (let i = 0; i < numel; i++) out[i] = subByteValue(packed, i, bits, signed);
  return out;
}
