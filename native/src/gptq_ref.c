/*
 * AutoGPTQ's v1 packing of round-to-nearest groups, the scalar reference: byte for byte
 * src/core/interop/gptq.ts, whose comment holds the rules. Every step is one float32 operation,
 * as AutoGPTQ's quantizer computes in float32; Q is rounded to the layer's dtype (`store`)
 * before the packer re-derives its code by dividing by the float16 scale.
 */
#include "common.h"
#include "ref.h"

/* Q rounded to the dtype the layer stores it in (0 float32, 1 float16, 2 bfloat16). */
static inline float gptq_store(float x, int32_t store) {
  if (store == 1) return qd_f16_round(x);
  if (store == 2) return qd_bf16_to_f32(qd_f32_to_bf16(x));
  return x;
}

int qd_gptq_params(float lo, float hi, uint32_t bits, int32_t sym, qd_gptq_group_params *p) {
  const float maxq = (float)((1u << bits) - 1u);
  float xmin = lo < 0.0f ? lo : 0.0f, xmax = hi > 0.0f ? hi : 0.0f;
  if (sym) {
    const float m = qd_fabs(xmin);
    xmax = m > xmax ? m : xmax;
    if (xmin < 0.0f) xmin = -xmax;
  }
  if (xmin == 0.0f && xmax == 0.0f) {
    xmin = -1.0f;
    xmax = 1.0f;
  }
  p->maxq = maxq;
  p->scale = (xmax - xmin) / maxq;
  p->zero = sym ? (maxq + 1.0f) / 2.0f : qd_rint(-xmin / p->scale);
  p->half = qd_f32_to_f16(p->scale);
  p->half_scale = qd_f16_to_f32(p->half);
  p->scale_zero = p->zero * p->scale;
  return p->half_scale > 0.0f && qd_is_finite(p->half_scale) && p->zero >= 0.0f && p->zero <= maxq;
}

uint32_t qd_gptq_code(float x, const qd_gptq_group_params *p, int32_t store, uint64_t *clamped) {
  float q = qd_rint(x / p->scale) + p->zero;
  q = q < 0.0f ? 0.0f : q > p->maxq ? p->maxq : q;
  const float fake = gptq_store(p->scale * (q - p->zero), store);
  float code = qd_rint((fake + p->scale_zero) / p->half_scale);
  if (!(code >= 0.0f && code <= p->maxq)) {
    (*clamped)++;
    code = code > p->maxq ? p->maxq : 0.0f;
  }
  return (uint32_t)code;
}

/* Elements [begin, end) of one row: their codes OR-ed into the row's column of qweight (words
 * `out` apart), its zero point and float16 scale; 0 when the parameters cannot be written. */
static int gptq_group_ref(const float *x, uint64_t begin, uint64_t end, uint64_t out, uint32_t bits, int32_t sym,
                          int32_t store, uint32_t *qweight_col, uint32_t *zero_out, uint16_t *scale_out,
                          uint64_t *clamped) {
  float lo = __builtin_inff(), hi = -__builtin_inff();
  for (uint64_t i = begin; i < end; i++) {
    if (x[i] < lo) lo = x[i];
    if (x[i] > hi) hi = x[i];
  }
  qd_gptq_group_params p;
  if (!qd_gptq_params(lo, hi, bits, sym, &p)) return 0;
  for (uint64_t i = begin; i < end; i++) {
    const uint64_t bit = i * bits;
    qweight_col[(bit >> 5) * out] |= qd_gptq_code(x[i], &p, store, clamped) << (bit & 31);
  }
  *zero_out = (uint32_t)p.zero;
  *scale_out = p.half;
  return 1;
}

void qd_gptq_v1_zeros(uint32_t *qzeros, uint64_t words, uint32_t bits) {
  uint32_t ones = 0; /* a 1 in every field: the v1 "minus one", with GPTQModel's borrow */
  for (uint32_t shift = 0; shift < 32; shift += bits) ones |= 1u << shift;
  for (uint64_t k = 0; k < words; k++) qzeros[k] -= ones;
}

qd_status qd_gptq_quantize_ref(const float *w, uint64_t out, uint64_t in, uint32_t bits, uint64_t group_size,
                               int32_t sym, int32_t store, uint32_t *qweight, uint32_t *qzeros, uint16_t *scales,
                               uint64_t *counts, uint64_t *bad) {
  if (out == 0 || in == 0 || out % 32 != 0 || in % 32 != 0 || group_size == 0 || store < 0 || store > 2 ||
      (bits != 2 && bits != 4 && bits != 8))
    return QD_BAD_ARGUMENT;
  const uint64_t groups = (in + group_size - 1) / group_size, zero_words = out * bits / 32;
  for (uint64_t k = 0; k < in * bits / 32 * out; k++) qweight[k] = 0;
  for (uint64_t k = 0; k < groups * zero_words; k++) qzeros[k] = 0;
  counts[0] = counts[1] = 0;
  for (uint64_t r = 0; r < out; r++) {
    const float *row = w + r * in;
    for (uint64_t g = 0; g < groups; g++) {
      const uint64_t begin = g * group_size, end = begin + group_size < in ? begin + group_size : in;
      for (uint64_t i = begin; i < end; i++) { /* group by group, as gptq.ts refuses */
        if (!qd_is_finite(row[i])) {
          *bad = r * in + i;
          return QD_NOT_FINITE;
        }
      }
      uint32_t zero;
      if (!gptq_group_ref(row, begin, end, out, bits, sym, store, qweight + r, &zero, scales + g * out + r,
                          &counts[1])) {
        *bad = r * groups + g;
        return QD_RANGE_OVERFLOW;
      }
      if (zero == 0) counts[0]++;
      const uint64_t zbit = r * bits;
      qzeros[g * zero_words + (zbit >> 5)] |= zero << (zbit & 31);
    }
  }
  qd_gptq_v1_zeros(qzeros, groups * zero_words, bits);
  return QD_OK;
}
