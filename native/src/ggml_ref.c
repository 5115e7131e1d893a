/*
 * ggml's 32-element block quantizers Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1, scalar: the byte-exact
 * twins of quantize_row_*_ref in ggml-quants.c, and of src/core/interop/ggml-legacy.ts (the
 * oracle). ggml's rounding, not torch's: Q8_0 rounds half away from zero (roundf), the others
 * truncate x·id + ½ (plus their offset). The scale d is stored as fp16 (nearest even) but the
 * codes use the float32 reciprocal of the unrounded d. The SIMD twins live in simd_ggml.h; the
 * K-quants (256-element super-blocks) in ggml_kquants.c, IQ4_NL / IQ4_XS in ggml_iquants.c. The
 * type table at the end covers them all.
 */
#include "common.h"
#include "ref.h"

/* C's float → int conversion as x86-64 does it (cvttss2si): truncation, and INT32_MIN for NaN or
 * a value outside int32 — reached only by degenerate blocks whose reciprocal overflows. */
static int32_t c_int(float v) { return (v >= -2147483648.0f && v < 2147483648.0f) ? (int32_t)v : INT32_MIN; }

static void put_f16(uint8_t *out, float d) {
  uint16_t h = qd_f32_to_f16(d);
  out[0] = (uint8_t)h;
  out[1] = (uint8_t)(h >> 8);
}

static void put_u32(uint8_t *out, uint32_t v) {
  for (int i = 0; i < 4; i++) out[i] = (uint8_t)(v >> (8 * i));
}

/* The block's minimum and maximum as the reference finds them: from ±FLT_MAX, strict
 * comparisons (NaN is skipped, the first of equal values — ±0 — is kept, and a block of +Inf
 * keeps min = FLT_MAX). */
static void block_min_max(const float *x, float *min, float *max) {
  float lo = 3.40282347e38f, hi = -3.40282347e38f;
  for (int j = 0; j < 32; j++) {
    if (x[j] < lo) lo = x[j];
    if (x[j] > hi) hi = x[j];
  }
  *min = lo, *max = hi;
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
  for (int j = 0; j < 32; j++) out[2 + j] = (uint8_t)(c_int(qd_roundf(x[j] * id)) & 0xff);
}

void qd_ggml_q4_0_block_ref(const float *x, uint8_t *out) {
  const float d = qd_ggml_signed_abs_max(x, 32) / -8.0f;
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

void qd_ggml_q4_1_block_ref(const float *x, uint8_t *out) {
  float min, max;
  block_min_max(x, &min, &max);
  const float d = (max - min) / 15.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(out, d);
  put_f16(out + 2, min);
  for (int j = 0; j < 16; j++) {
    const float x0 = (x[j] - min) * id, x1 = (x[16 + j] - min) * id;
    int32_t i0 = (int8_t)c_int(x0 + 0.5f), i1 = (int8_t)c_int(x1 + 0.5f);
    i0 = i0 < 15 ? i0 : 15;
    i1 = i1 < 15 ? i1 : 15;
    out[4 + j] = (uint8_t)((i0 & 0xff) | ((i1 & 0x0f) << 4));
  }
}

void qd_ggml_q5_0_block_ref(const float *x, uint8_t *out) {
  const float d = qd_ggml_signed_abs_max(x, 32) / -16.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(out, d);
  uint32_t qh = 0;
  for (int j = 0; j < 16; j++) {
    const float x0 = x[j] * id, x1 = x[16 + j] * id;
    int32_t i0 = (int8_t)c_int(x0 + 16.5f), i1 = (int8_t)c_int(x1 + 16.5f);
    i0 = (i0 < 31 ? i0 : 31) & 0xff;
    i1 = (i1 < 31 ? i1 : 31) & 0xff;
    out[6 + j] = (uint8_t)((i0 & 0x0f) | ((i1 & 0x0f) << 4));
    qh |= (uint32_t)((i0 & 0x10) >> 4) << j;
    qh |= (uint32_t)((i1 & 0x10) >> 4) << (j + 16);
  }
  put_u32(out + 2, qh);
}

void qd_ggml_q5_1_block_ref(const float *x, uint8_t *out) {
  float min, max;
  block_min_max(x, &min, &max);
  const float d = (max - min) / 31.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(out, d);
  put_f16(out + 2, min);
  uint32_t qh = 0;
  for (int j = 0; j < 16; j++) {
    const float x0 = (x[j] - min) * id, x1 = (x[16 + j] - min) * id;
    /* (uint8_t)(x0 + 0.5f): no clamp in the reference */
    const int32_t i0 = c_int(x0 + 0.5f) & 0xff, i1 = c_int(x1 + 0.5f) & 0xff;
    out[8 + j] = (uint8_t)((i0 & 0x0f) | ((i1 & 0x0f) << 4));
    qh |= (uint32_t)((i0 & 0x10) >> 4) << j;
    qh |= (uint32_t)((i1 & 0x10) >> 4) << (j + 16);
  }
  put_u32(out + 4, qh);
}

/* Per qd_ggml_type id: values and bytes of a block, and its scalar quantizer (ids without a row: all
 * zero, no such type). */
static const struct {
  uint32_t values, bytes;
  qd_ggml_block_fn block;
} TYPES[] = {
    [QD_GGML_Q8_0] = {32, 34, qd_ggml_q8_0_block_ref},
    [QD_GGML_Q4_0] = {32, 18, qd_ggml_q4_0_block_ref},
    [QD_GGML_Q4_1] = {32, 20, qd_ggml_q4_1_block_ref},
    [QD_GGML_Q5_0] = {32, 22, qd_ggml_q5_0_block_ref},
    [QD_GGML_Q5_1] = {32, 24, qd_ggml_q5_1_block_ref},
    [QD_GGML_Q4_K] = {256, 144, qd_ggml_q4_k_block_ref},
    [QD_GGML_Q5_K] = {256, 176, qd_ggml_q5_k_block_ref},
    [QD_GGML_Q2_K] = {256, 84, qd_ggml_q2_k_block_ref},
    [QD_GGML_Q3_K] = {256, 110, qd_ggml_q3_k_block_ref},
    [QD_GGML_Q6_K] = {256, 210, qd_ggml_q6_k_block_ref},
    [QD_GGML_IQ4_NL] = {32, 18, qd_ggml_iq4_nl_block_ref},
    [QD_GGML_IQ4_XS] = {256, 136, qd_ggml_iq4_xs_block_ref},
};
#define KNOWN(type) ((type) >= 0 && (type) < (int32_t)(sizeof TYPES / sizeof TYPES[0]))

uint32_t qd_ggml_block_values(int32_t type) { return KNOWN(type) ? TYPES[type].values : 0; }

uint32_t qd_ggml_block_bytes(int32_t type) { return KNOWN(type) ? TYPES[type].bytes : 0; }

qd_ggml_block_fn qd_ggml_block_ref(int32_t type) { return KNOWN(type) ? TYPES[type].block : 0; }

qd_status qd_ggml_quantize_ref(int32_t type, const float *x, uint64_t blocks, uint8_t *out) {
  const qd_ggml_block_fn block = qd_ggml_block_ref(type);
  if (!block) return QD_BAD_ARGUMENT;
  const uint64_t values = qd_ggml_block_values(type), bytes = qd_ggml_block_bytes(type);
  for (uint64_t b = 0; b < blocks; b++) block(x + values * b, out + bytes * b);
  return QD_OK;
}
