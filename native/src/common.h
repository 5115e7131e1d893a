/*
 * Scalar building blocks shared by every kernel file: float32 bit access, round-half-to-even,
 * the -0 < +0 ordering keys of the min/max reductions, fp8 / float16 / bfloat16 encodings and
 * code storage. Each mirrors a function of src/core (named in its comment) operation for
 * operation; build with -ffp-contract=off so that no multiply-add is fused.
 */
#ifndef QUANTD_COMMON_H
#define QUANTD_COMMON_H

#include <stdint.h>

#include "../include/quantd.h"

#define QD_INLINE static inline __attribute__((always_inline))

/* |x · inv| beyond 2^50 saturates every qdtype whatever the zero point (quantize.ts SATURATED). */
#define QD_SATURATED 1125899906842624.0f

QD_INLINE uint32_t qd_bits(float v) {
  uint32_t b;
  __builtin_memcpy(&b, &v, 4);
  return b;
}

QD_INLINE float qd_float(uint32_t b) {
  float v;
  __builtin_memcpy(&v, &b, 4);
  return v;
}

QD_INLINE int qd_is_nan(float v) { return v != v; }
QD_INLINE int qd_is_finite(float v) { return (qd_bits(v) & 0x7f800000u) != 0x7f800000u; }
QD_INLINE float qd_fabs(float v) { return qd_float(qd_bits(v) & 0x7fffffffu); }

/* Σx² of n values, added in order (ggml-common.ts sumSquares). */
QD_INLINE float qd_sum_squares(const float *x, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; i++) s += x[i] * x[i];
  return s;
}

/* An importance matrix's weights w[j] = qw[j]·sqrt(σ² + x²) of n values, as llama.cpp's
 * quant_weights paths compute them; returns their sum, added in order (ggml-common.ts
 * matrixWeights). */
QD_INLINE float qd_matrix_weights(const float *x, const float *qw, float sigma2, int n, float *w) {
  for (int j = 0; j < n; j++) w[j] = qw[j] * __builtin_sqrtf(sigma2 + x[j] * x[j]);
  float sum = 0.0f;
  for (int j = 0; j < n; j++) sum += w[j];
  return sum;
}

/* ggml's nearest_int: add 1.5·2^23 (the float32 addition rounds half to even) and read the low
 * mantissa bits back. Exact rounding for |x| < 2^22; outside it the same bit arithmetic. */
QD_INLINE int32_t qd_nearest_int(float x) {
  const float v = x + 12582912.0f;
  int32_t i;
  __builtin_memcpy(&i, &v, 4);
  return (i & 0x007fffff) - 0x00400000;
}

/* Round half to even, sign kept (rounding.ts rint). |x| < 2^23: adding 2^23 leaves an ulp of 1. */
QD_INLINE float qd_rint(float x) {
  float a = qd_fabs(x);
  if (!(a < 8388608.0f)) return x; /* already an integer, or ±Infinity / NaN */
  float r = (a + 8388608.0f) - 8388608.0f;
  return qd_float(qd_bits(r) | (qd_bits(x) & 0x80000000u));
}

/* C's roundf, half away from zero; exact because v - trunc(v) is exact in float32. */
QD_INLINE float qd_roundf(float v) {
  float t = __builtin_truncf(v);
  if (__builtin_fabsf(v - t) >= 0.5f) t += v < 0.0f ? -1.0f : 1.0f;
  return t;
}

/* Order key: an int32 that sorts like the float, with -0 < +0 (qparams.ts reduceMinMax). Its own
 * inverse. */
QD_INLINE int32_t qd_key(float v) {
  uint32_t b = qd_bits(v);
  return (int32_t)(b ^ ((uint32_t)((int32_t)b >> 31) >> 1));
}
QD_INLINE float qd_unkey(int32_t k) {
  uint32_t b = (uint32_t)k;
  return qd_float(b ^ ((uint32_t)((int32_t)b >> 31) >> 1));
}

/* ---- fp8 (fp8.ts encodeFp8 / decode) ---- */
QD_INLINE uint32_t qd_round_shift_even(uint32_t value, uint32_t shift) {
  if (shift > 31) return 0;
  uint32_t kept = value >> shift;
  uint32_t rest = value - (kept << shift);
  uint32_t half = 1u << (shift - 1);
  return (rest > half || (rest == half && (kept & 1u))) ? kept + 1 : kept;
}

QD_INLINE uint8_t qd_encode_fp8(float x, int e5m2) {
  const uint32_t mant_bits = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
  const uint32_t max_finite = e5m2 ? 0x7b : 0x7e, overflow = e5m2 ? 0x7c : 0x7f, nan = 0x7f;
  uint32_t bits = qd_bits(x);
  uint32_t sign = (bits >> 24) & 0x80u;
  uint32_t exp = (bits >> 23) & 0xffu;
  uint32_t mant = bits & 0x7fffffu;
  if (exp == 0xff) return (uint8_t)(sign | (mant ? nan : overflow));
  if (exp == 0) return (uint8_t)sign;
  int32_t e = (int32_t)exp - 127 + (int32_t)bias;
  uint32_t drop = 23 - mant_bits;
  uint32_t code = e <= 0 ? qd_round_shift_even(mant | 0x800000u, drop + 1 - (uint32_t)e)
                         : qd_round_shift_even(((uint32_t)e << 23) | mant, drop);
  if (code > max_finite) return (uint8_t)(sign | overflow);
  return (uint8_t)(sign | code);
}

QD_INLINE float qd_decode_fp8(uint8_t code, int e5m2) {
  const int mant_bits = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
  uint32_t sign = (code & 0x80u) << 24;
  uint32_t mag = code & 0x7fu;
  uint32_t e = mag >> mant_bits, m = mag & ((1u << mant_bits) - 1);
  /* NaN codes decode to the canonical quiet NaN 0x7fc00000, whatever their sign, as a JavaScript
   * Float32Array stores NaN; so do all backends, and NaN outputs compare bit for bit. */
  if (e5m2 && e == 31) return qd_float(m ? 0x7fc00000u : (sign | 0x7f800000u));
  if (!e5m2 && mag == 0x7f) return qd_float(0x7fc00000u);
  if (e == 0) {
    /* subnormal: m · 2^(1 - bias - mant_bits), exact in float32 */
    float v = (float)m;
    float unit = qd_float((uint32_t)(127 + 1 - bias - mant_bits) << 23);
    return qd_float(qd_bits(v * unit) | sign);
  }
  return qd_float(sign | ((e - bias + 127) << 23) | (m << (23 - mant_bits)));
}

/* ---- float16 / bfloat16 (float16.ts) ---- */
QD_INLINE uint16_t qd_f32_to_f16(float x) {
  uint32_t bits = qd_bits(x);
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t exp = (bits >> 23) & 0xffu;
  uint32_t mant = bits & 0x7fffffu;
  if (exp == 0xff) return (uint16_t)(mant ? (sign | 0x7e00u) : (sign | 0x7c00u));
  int32_t e = (int32_t)exp - 127 + 15;
  if (e >= 0x1f) return (uint16_t)(sign | 0x7c00u);
  if (e <= 0) {
    if (exp == 0) return (uint16_t)sign;
    return (uint16_t)(sign | qd_round_shift_even(mant | 0x800000u, (uint32_t)(14 - e)));
  }
  return (uint16_t)(sign | qd_round_shift_even(((uint32_t)e << 23) | mant, 13));
}

QD_INLINE float qd_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {
    float v = (float)mant * 5.9604644775390625e-8f; /* 2^-24, exact */
    return qd_float(qd_bits(v) | sign);
  }
  if (exp == 0x1f) return qd_float(mant ? 0x7fc00000u : (sign | 0x7f800000u)); /* canonical NaN */
  return qd_float(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

/* x rounded to the nearest float16 (ties to even) and read back: one float16 operation's result. */
QD_INLINE float qd_f16_round(float x) { return qd_f16_to_f32(qd_f32_to_f16(x)); }

QD_INLINE uint16_t qd_f32_to_bf16(float x) {
  uint32_t bits = qd_bits(x);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x7fffffu)) return (uint16_t)((bits >> 16) | 0x40u);
  return (uint16_t)qd_round_shift_even(bits, 16);
}

QD_INLINE float qd_bf16_to_f32(uint16_t b) { return qd_float((uint32_t)b << 16); }

/* ---- codes ---- */
QD_INLINE int qd_codes_per_byte(int32_t kind) {
  switch (kind) {
  case QD_CODES_I4:
  case QD_CODES_U4:
    return 2;
  case QD_CODES_I2:
  case QD_CODES_U2:
    return 4;
  default:
    return 1;
  }
}

/* Bytes of the codes of n elements (a partial last byte counts; for n a multiple of the codes
 * per byte, where the next element's code starts). */
QD_INLINE uint64_t qd_code_bytes(int32_t kind, uint64_t n) {
  switch (kind) {
  case QD_CODES_I16:
    return n * 2;
  case QD_CODES_I32:
    return n * 4;
  default: {
    const uint64_t per = (uint64_t)qd_codes_per_byte(kind);
    return (n + per - 1) / per;
  }
  }
}

QD_INLINE int qd_codes_valid(int32_t kind) { return kind >= QD_CODES_I8 && kind <= QD_CODES_E5M2; }

/* Stores `code` as element `rel` of `out` (rel = 0 is the first element of the range). Packed
 * codes: the first code of a byte sets the byte, the others are ORed in (torch's order). */
QD_INLINE void qd_store_code(void *out, int32_t kind, uint64_t rel, int32_t code) {
  switch (kind) {
  case QD_CODES_I8:
  case QD_CODES_U8:
  case QD_CODES_E4M3:
  case QD_CODES_E5M2:
    ((uint8_t *)out)[rel] = (uint8_t)code;
    return;
  case QD_CODES_I16: {
    int16_t v = (int16_t)code;
    __builtin_memcpy((uint8_t *)out + rel * 2, &v, 2);
    return;
  }
  case QD_CODES_I32:
    __builtin_memcpy((uint8_t *)out + rel * 4, &code, 4);
    return;
  default: {
    const int bits = (kind == QD_CODES_I4 || kind == QD_CODES_U4) ? 4 : 2;
    const int per = 8 / bits;
    uint8_t field = (uint8_t)((uint32_t)code & ((1u << bits) - 1));
    uint8_t *byte = (uint8_t *)out + rel / (uint64_t)per;
    int slot = (int)(rel % (uint64_t)per);
    *byte = slot == 0 ? field : (uint8_t)(*byte | (field << (slot * bits)));
    return;
  }
  }
}

/* The value a stored code stands for (dequantize.ts decodeValues), as float32. */
QD_INLINE float qd_load_code(const void *codes, int32_t kind, uint64_t rel) {
  const uint8_t *p = (const uint8_t *)codes;
  switch (kind) {
  case QD_CODES_I8:
    return (float)(int8_t)p[rel];
  case QD_CODES_U8:
    return (float)p[rel];
  case QD_CODES_I16: {
    int16_t v;
    __builtin_memcpy(&v, p + rel * 2, 2);
    return (float)v;
  }
  case QD_CODES_I32: {
    int32_t v;
    __builtin_memcpy(&v, p + rel * 4, 4);
    return (float)v;
  }
  case QD_CODES_E4M3:
    return qd_decode_fp8(p[rel], 0);
  case QD_CODES_E5M2:
    return qd_decode_fp8(p[rel], 1);
  default: {
    const int bits = (kind == QD_CODES_I4 || kind == QD_CODES_U4) ? 4 : 2;
    const int per = 8 / bits;
    uint32_t field = ((uint32_t)p[rel / (uint64_t)per] >> ((rel % (uint64_t)per) * (uint64_t)bits)) & ((1u << bits) - 1);
    int is_signed = kind == QD_CODES_I4 || kind == QD_CODES_I2;
    int32_t v = (int32_t)field;
    if (is_signed && (field & (1u << (bits - 1)))) v -= 1 << bits;
    return (float)v;
  }
  }
}

/* One quantized code (quantize.ts quantizeValues), or -1 in *bad_flag for a rejected input. */
QD_INLINE int32_t qd_quantize_one(float v, float inv, float zp, const qd_quant *q, int *rejected) {
  float t = v * inv;
  if (q->codes == QD_CODES_E4M3 || q->codes == QD_CODES_E5M2) {
    if (qd_is_nan(v) || (q->reject_infinity && !qd_is_finite(v))) {
      *rejected = 1;
      return 0;
    }
    float lo = (float)q->qmin, hi = (float)q->qmax;
    float c = t < lo ? lo : (t > hi ? hi : t);
    return qd_encode_fp8(c, q->codes == QD_CODES_E5M2);
  }
  if (!(t >= -QD_SATURATED && t <= QD_SATURATED)) {
    if (qd_is_nan(t) || (q->reject_infinity && !qd_is_finite(v))) {
      *rejected = 1;
      return 0;
    }
    t = t > 0 ? QD_SATURATED : -QD_SATURATED;
  }
  float u = q->add_zero_point_first ? qd_rint(t + zp) : qd_rint(t) + zp;
  double d = (double)u;
  return d < (double)q->qmin ? q->qmin : (d > (double)q->qmax ? q->qmax : (int32_t)d);
}

/* Whether a value's code was clamped: its unclamped code (quantize.ts, before the clamp) lies
 * outside [qmin, qmax]; for fp8, |x · inv| beyond the range. */
QD_INLINE int qd_was_clipped(float v, float inv, float zp, const qd_quant *q) {
  float t = v * inv;
  if (q->codes == QD_CODES_E4M3 || q->codes == QD_CODES_E5M2) return t < (float)q->qmin || t > (float)q->qmax;
  float u = q->add_zero_point_first ? qd_rint(t + zp) : qd_rint(t) + zp;
  return (double)u < (double)q->qmin || (double)u > (double)q->qmax;
}

/* One element's contribution to the quality statistics (code_value: what its code stands for). */
QD_INLINE void qd_quality_one(float v, float code_value, float s, float inv, float zp, const qd_quant *q,
                              qd_quality *stats) {
  const float back = (code_value - zp) * s;
  const double err = (double)v - (double)back;
  stats->sum_sq_error += err * err;
  stats->sum_sq_value += (double)v * (double)v;
  const double a = err < 0 ? -err : err;
  if (a > stats->max_abs_error) stats->max_abs_error = a;
  stats->clipped += (uint64_t)qd_was_clipped(v, inv, zp, q);
}

#endif
