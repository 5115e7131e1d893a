/*
 * The WebAssembly build's float16 rounding (simd_wasm.h's vf_f16_round: integer work on the bits,
 * as SIMD128 has no conversion) against the scalar reference qd_f16_round. Built with clang and
 * run by test/native/wasm-f16-round.test.ts.
 */
#include "../src/simd_wasm.h"

/* Rounds in[0…4) both ways; the number that differ (any NaN matches any NaN). */
static uint32_t compare4(const uint32_t *in) {
  uint32_t out[4], bad = 0;
  wasm_v128_store(out, vf_f16_round(wasm_v128_load(in)));
  for (int j = 0; j < 4; j++) {
    const float want = qd_f16_round(qd_float(in[j]));
    bad += qd_is_nan(want) ? !qd_is_nan(qd_float(out[j])) : qd_bits(want) != out[j];
  }
  return bad;
}

/* Mismatches over every float32 bit pattern b with b % stride == offset (stride ≥ 1). */
__attribute__((export_name("sampled"))) uint32_t sampled(uint32_t stride, uint32_t offset) {
  uint32_t bad = 0, in[4], n = 0;
  for (uint64_t b = offset; b <= 0xffffffffu; b += stride) {
    in[n++] = (uint32_t)b;
    if (n == 4) bad += compare4(in), n = 0;
  }
  for (; n > 0 && n < 4; n++) in[n] = in[0];
  return n ? bad + compare4(in) : bad;
}

/* Mismatches over the 8 193 patterns around each of float16's edges, both signs: 0, the smallest
 * subnormal's half (2^-25) and itself, the smallest normal (2^-14), the largest finite (65504),
 * the overflow tie (65520), Infinity and the NaNs next to it. */
__attribute__((export_name("edges"))) uint32_t edges(void) {
  static const uint32_t centres[] = {0x00000000u, 0x33000000u, 0x33800000u, 0x38800000u, 0x477fe000u,
                                     0x477ff000u, 0x47800000u, 0x7f800000u, 0x7fc00000u};
  uint32_t bad = 0;
  for (unsigned c = 0; c < sizeof centres / sizeof centres[0]; c++)
    for (uint32_t sign = 0; sign <= 1; sign++)
      for (int64_t d = -4096; d <= 4096; d += 4) {
        uint32_t in[4];
        for (int j = 0; j < 4; j++) {
          const int64_t b = (int64_t)centres[c] + d + j;
          in[j] = (uint32_t)(b < 0 ? 0 : b > 0x7fffffff ? 0x7fffffff : b) | sign << 31;
        }
        bad += compare4(in);
      }
  return bad;
}
