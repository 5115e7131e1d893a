/** Shared by the observer tests: reading observers.json's float32 data and comparing bit patterns. */

/** float32 values from base64 little-endian bytes. */
export const f32 = (b64: string): Float32Array => {
  const raw = Buffer.from(b64, 'base64');
  const out = new Float32Array(raw.length / 4);
  new Uint8Array(out.buffer).set(raw);
  return out;
};

/** Bit patterns, with every NaN alike and -0 equal to +0 (torch's aminmax may pick either zero). */
export const bits = (a: Float32Array): string[] =>
  Array.from(a, (v) =>
    Number.isNaN(v) ? 'NaN' : v === 0 ? '0' : Buffer.from(Float32Array.of(v).buffer).toString('hex'),
  );
