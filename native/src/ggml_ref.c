/*
 * ggml's Q8_0 and Q4_0 block quantizers, scalar: the byte-exact twins of quantize_row_q8_0_ref and
 * quantize_row_q4_0_ref in ggml-quants.c, and of src/core/interop/ggml-legacy.ts (the oracle).
 * ggml's rounding, not torch's: Q8_0 rounds half away from zero (roundf), Q4_0 truncates
 * x·id + 8.5. The scale d is stored as fp16 (nearest even) but the codes use the float32
 * reciprocal of the unrounded d. The SIMD twins live in simd_ggml.h.
 */
#include "common.h"
#include "ref.h"

/* C's float → int conversion as x86-64 does it (cvttss2si): truncation, and INT32_MIN for NaN or
 * a value outside int32 — reached only by degenerate blocks whose reciprocal overflows. */
static int32_t c_int(float v) { return (v >= -2147483648.0f && v < 2147483648.0f) ? (int32_t)v : INT32_MIN; }

/* roundf, half away from zero; exact because v - trunc(v) is exact in float32. */
static float c_roundf(float v) {
  float t = __builtin_truncf(v);
  if (__builtin_fabsf(v - t) >= 0.5f) t += v < 0.0f ? -1.0f : 1.0f;
  return t;
}

static void put_f16(uint8_t *out, float d) {
  uint16_t h = qd_f32_to_f16(d);
  out[0] = (uint8_t)h;
  out[1] = (uint8_t)(h >> 8);
}

void qd_ggml_q8_0_block_ref(const float *x, uint8_t *out) {
  float amax = 0.0f;
  for (int j = 0; j < 32; j++) {
    float a = __builtin_fabsf(x[j]);
    amax = amax > a ? amax : a; /* MAX(amax, fabsf(v)): the order decides what NaN does */
  }
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(out, d);
  for (int j = 0; j < 32; j++) out[2 + j] = (uint8_t)(c_int(c_roundf(x[j] * id)) & 0xff);
}

void qd_ggml_q4_0_block_ref(const float *x, uint8_t *out) {
  float amax = 0.0f, max = 0.0f; /* the signed value of largest magnitude; the first one wins */
  for (int j = 0; j < 32; j++) {
    if (amax < __builtin_fabsf(x[j])) {
      amax = __builtin_fabsf(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(out, d);
  for (int j = 0; j < 16; j++) {
    const float x0 = x[j] * id, x1 = x[16 + j] * id;
    int32_t i0 = (int8_t)c_int(x0 + 8.5f), i1 = (int8_t)c_int(x1 + 8.5f);
    i0 = i0 < 15 ? i0 : 15;
    i1 = i1 < 15 ? i1 : 15;
    out[2 + j] = (uint8_t)((i0 & 0xff) | ((i1 & 0x0f) << 4));
  }
}

qd_status qd_ggml_quantize_ref(int32_t type, const float *x, uint64_t blocks, uint8_t *out) {
  if (type == QD_GGML_Q8_0) {
    for (uint64_t b = 0; b < blocks; b++) qd_ggml_q8_0_block_ref(x + 32 * b, out + 34 * b);
    return QD_OK;
  }
  if (type == QD_GGML_Q4_0) {
    for (uint64_t b = 0; b < blocks; b++) qd_ggml_q4_0_block_ref(x + 32 * b, out + 18 * b);
    return QD_OK;
  }
  return QD_BAD_ARGUMENT;
}
