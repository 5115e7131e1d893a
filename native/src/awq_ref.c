/*
 * AutoAWQ's GEMM packing of round-to-nearest group quantization, the scalar reference: byte for
 * byte src/core/interop/awq.ts, whose comment holds the rules. AutoAWQ computes in float16: each
 * operation here is one float32 operation on float16 values, rounded to float16 (float32 holds
 * such a result closely enough that rounding it again to float16 is exact).
 */
#include "common.h"
#include "ref.h"

const uint8_t qd_awq_slot[8] = {0, 4, 1, 5, 2, 6, 3, 7};

void qd_awq_params(float lo, float hi, float *scale, float *zero, float *scale_zero) {
  const float min_range = qd_f16_round(1e-5f), maxq = 15.0f;
  float range = qd_f16_round(hi - lo);
  if (range < min_range) range = min_range;
  *scale = qd_f16_round(range / maxq);
  float z = -qd_rint(qd_f16_round(lo / *scale));
  *zero = z < 0.0f ? 0.0f : z > maxq ? maxq : z;
  *scale_zero = qd_f16_round(*zero * *scale);
}

int32_t qd_awq_code(float x, float scale, float zero, float scale_zero) {
  float q = qd_rint(qd_f16_round(qd_f16_round(x) / scale)) + zero;
  q = q < 0.0f ? 0.0f : q > 15.0f ? 15.0f : q;
  const float fake = qd_f16_round((q - zero) * scale);
  const float code = qd_rint(qd_f16_round(qd_f16_round(fake + scale_zero) / scale));
  return code >= 0.0f && code <= 15.0f ? (int32_t)code : -1;
}

/* One group of one row (n values): its codes OR-ed into qweight[k · stride] and its zero point
 * into *qzero at `shift`, its float16 scale; 0 if the scale is not finite or a code cannot be
 * re-derived. */
static int awq_group_ref(const float *x, uint64_t n, uint64_t stride, uint32_t shift, uint32_t *qweight,
                         uint32_t *qzero, uint16_t *scale_out) {
  float lo = __builtin_inff(), hi = -__builtin_inff(), scale, zero, scale_zero;
  for (uint64_t k = 0; k < n; k++) {
    float v = qd_f16_round(x[k]);
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  qd_awq_params(lo, hi, &scale, &zero, &scale_zero);
  if (!qd_is_finite(scale)) return 0;
  for (uint64_t k = 0; k < n; k++) {
    const int32_t code = qd_awq_code(x[k], scale, zero, scale_zero);
    if (code < 0) return 0;
    qweight[k * stride] |= (uint32_t)code << shift;
  }
  *qzero |= (uint32_t)zero << shift;
  *scale_out = qd_f32_to_f16(scale);
  return 1;
}

qd_status qd_awq_quantize_ref(const float *w, uint64_t out, uint64_t in, uint64_t group_size, uint32_t *qweight,
                              uint32_t *qzeros, uint16_t *scales, uint64_t *bad) {
  if (out == 0 || in == 0 || out % 8 != 0 || group_size == 0 || in % group_size != 0) return QD_BAD_ARGUMENT;
  const uint64_t words = out / 8, groups = in / group_size;
  for (uint64_t i = 0; i < in * words; i++) qweight[i] = 0;
  for (uint64_t i = 0; i < groups * words; i++) qzeros[i] = 0;
  for (uint64_t r = 0; r < out; r++) {
    const float *row = w + r * in;
    const uint32_t shift = 4u * qd_awq_slot[r & 7];
    for (uint64_t g = 0; g < groups; g++) {
      const uint64_t begin = g * group_size;
      for (uint64_t k = begin; k < begin + group_size; k++) { /* group by group, as awq.ts refuses */
        if (!qd_is_finite(row[k])) {
          *bad = r * in + k;
          return QD_NOT_FINITE;
        }
      }
      if (!awq_group_ref(row + begin, group_size, words, shift, qweight + begin * words + (r >> 3),
                         qzeros + g * words + (r >> 3), scales + g * out + r)) {
        *bad = r * groups + g;
        return QD_RANGE_OVERFLOW;
      }
    }
  }
  return QD_OK;
}
