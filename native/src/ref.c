/*
 * The portable scalar reference of every op family (the *_ref kernels). Each loop follows the
 * matching src/core function element for element; the SIMD variants are tested against these.
 */
#include "common.h"
#include "ref.h"

static int layout_ok(const qd_layout *l) { return l->channels > 0 && l->inner > 0; }

qd_status qd_minmax_ref(const float *x, uint64_t start, uint64_t count, const qd_layout *l, float *mins,
                        float *maxs, uint64_t *bad) {
  if (!layout_ok(l)) return count ? QD_BAD_ARGUMENT : QD_OK;
  uint64_t unit = (start / l->inner) % l->channels, left = l->inner - start % l->inner;
  int32_t lo = qd_key(mins[unit]), hi = qd_key(maxs[unit]);
  for (uint64_t i = 0; i < count; i++) {
    float v = x[i];
    if (!qd_is_finite(v)) {
      *bad = start + i;
      return QD_NOT_FINITE;
    }
    int32_t k = qd_key(v);
    lo = k < lo ? k : lo;
    hi = k > hi ? k : hi;
    if (--left == 0) {
      mins[unit] = qd_unkey(lo);
      maxs[unit] = qd_unkey(hi);
      unit = unit + 1 == l->channels ? 0 : unit + 1;
      left = l->inner;
      lo = qd_key(mins[unit]);
      hi = qd_key(maxs[unit]);
    }
  }
  mins[unit] = qd_unkey(lo);
  maxs[unit] = qd_unkey(hi);
  return QD_OK;
}

qd_status qd_quantize_ref(const float *x, uint64_t start, uint64_t count, const qd_layout *l, const float *scale,
                          const float *zero_point, const qd_quant *q, void *out, uint64_t *bad) {
  if (!layout_ok(l) || !qd_codes_valid(q->codes)) return count ? QD_BAD_ARGUMENT : QD_OK;
  if (start % (uint64_t)qd_codes_per_byte(q->codes)) return QD_BAD_ARGUMENT;
  uint64_t unit = (start / l->inner) % l->channels, left = l->inner - start % l->inner;
  float inv = 1.0f / scale[unit], zp = zero_point[unit];
  for (uint64_t i = 0; i < count; i++) {
    int rejected = 0;
    int32_t code = qd_quantize_one(x[i], inv, zp, q, &rejected);
    if (rejected) {
      *bad = start + i;
      return QD_NOT_FINITE;
    }
    qd_store_code(out, q->codes, i, code);
    if (--left == 0) {
      unit = unit + 1 == l->channels ? 0 : unit + 1;
      left = l->inner;
      inv = 1.0f / scale[unit];
      zp = zero_point[unit];
    }
  }
  return QD_OK;
}

qd_status qd_dequantize_ref(const void *codes, int32_t kind, uint64_t start, uint64_t count, const qd_layout *l,
                            const float *scale, const float *zero_point, float *out) {
  if (!layout_ok(l) || !qd_codes_valid(kind)) return count ? QD_BAD_ARGUMENT : QD_OK;
  if (start % (uint64_t)qd_codes_per_byte(kind)) return QD_BAD_ARGUMENT;
  uint64_t unit = (start / l->inner) % l->channels, left = l->inner - start % l->inner;
  float s = scale[unit], zp = zero_point[unit];
  for (uint64_t i = 0; i < count; i++) {
    out[i] = (qd_load_code(codes, kind, i) - zp) * s;
    if (--left == 0) {
      unit = unit + 1 == l->channels ? 0 : unit + 1;
      left = l->inner;
      s = scale[unit];
      zp = zero_point[unit];
    }
  }
  return QD_OK;
}

qd_status qd_fake_quantize_ref(const float *x, uint64_t start, uint64_t count, const qd_layout *l,
                               const float *scale, const float *zero_point, int32_t qmin, int32_t qmax,
                               int32_t float_zero_point, float *out, uint8_t *mask, uint64_t *bad) {
  if (!layout_ok(l)) return count ? QD_BAD_ARGUMENT : QD_OK;
  uint64_t unit = (start / l->inner) % l->channels, left = l->inner - start % l->inner;
  float s = scale[unit], inv = 1.0f / s, zp = zero_point[unit];
  for (uint64_t i = 0; i < count; i++) {
    float v = x[i];
    if (qd_is_nan(v)) {
      *bad = start + i;
      return QD_NOT_FINITE;
    }
    /* fake-quantize.ts: t in float32; (clamp(t) - zp) · scale in float64, rounded once */
    float t = float_zero_point ? qd_rint(v * inv + zp) : qd_rint(v * inv) + zp;
    double td = (double)t;
    int inside = td >= (double)qmin && td <= (double)qmax;
    double clamped = inside ? td : (td < (double)qmin ? (double)qmin : (double)qmax);
    out[i] = (float)((clamped - (double)zp) * (double)s);
    mask[i] = (uint8_t)inside;
    if (--left == 0) {
      unit = unit + 1 == l->channels ? 0 : unit + 1;
      left = l->inner;
      s = scale[unit];
      inv = 1.0f / s;
      zp = zero_point[unit];
    }
  }
  return QD_OK;
}

/* ---- qparams (qparams.ts determineQParams / perTokenQParams) ---- */

qd_status qd_determine_unit(float lo, float hi, const qd_choose *c, float *scale_out, double *zp_out) {
  const double qmin = c->qmin, qmax = c->qmax;
  const float eps = c->eps;
  float s;
  double zp;
  if (c->mode == QD_TOKEN_SYMMETRIC) {
    float a = qd_fabs(lo), b = qd_fabs(hi);
    float amax = a > b ? a : b;
    float floor_ = 1e-5f;
    s = (amax > floor_ ? amax : floor_) / (float)c->qmax;
    zp = 0;
  } else {
    const float min_neg = lo <= 0 ? lo : 0.0f; /* Math.min(lo, 0) */
    const float max_pos = hi > 0 ? hi : 0.0f;  /* Math.max(hi, 0) */
    const float levels = (float)(qmax - qmin);
    if (c->mode == QD_FLOAT_QPARAMS) {
      s = (hi - lo) / levels;
      s = s > eps ? s : 1.0f;
      zp = (double)((-lo) / s);
    } else if (c->mode == QD_SYMMETRIC) {
      const float half_levels = (float)((qmax - qmin) / 2);
      float a = -min_neg;
      s = (a > max_pos ? a : max_pos) / half_levels;
      s = s < eps ? eps : s;
      zp = c->symmetric_zero_point;
    } else if (c->mode == QD_TOKEN_AFFINE) {
      s = (max_pos - min_neg) / levels;
      s = s < eps ? eps : s;
      if (!qd_is_finite(s)) return QD_RANGE_OVERFLOW;
      float descaled_min = min_neg / s, descaled_max = max_pos / s;
      /* int + float32 in float64, rounded once: exact for every int32 bound (2^31 - 1 is not a
       * float32) */
      float from_min_error = (float)(qmin + (double)descaled_min);
      float from_max_error = (float)(qmax + (double)descaled_max);
      float z = (from_min_error + from_max_error) > 0 ? (float)(qmin - (double)descaled_min)
                                                      : (float)(qmax - (double)descaled_max);
      z = (double)z < qmin ? (float)qmin : ((double)z > qmax ? (float)qmax : z);
      zp = (double)qd_rint(z);
    } else {
      s = (max_pos - min_neg) / levels;
      s = s < eps ? eps : s;
      zp = qmin - (double)qd_rint(min_neg / s);
      zp = zp < qmin ? qmin : (zp > qmax ? qmax : zp);
    }
  }
  if (!qd_is_finite(s) || zp != zp || zp - zp != 0) return QD_RANGE_OVERFLOW;
  *scale_out = s;
  *zp_out = zp;
  return QD_OK;
}

qd_status qd_histc(const float *x, uint64_t count, float left, float right, uint32_t bins, float *hist) {
  if (bins == 0) return QD_BAD_ARGUMENT;
  const float width = right - left;
  const float nb = (float)bins;
  for (uint64_t i = 0; i < count; i++) {
    const float v = x[i];
    if (!(v >= left && v <= right)) continue;
    const float scaled = (v - left) * nb; /* rounded to float32 before the division, as torch */
    const float t = scaled / width;
    if (!(t < nb + 1.0f)) continue; /* an overflowed (infinite) bin: not counted */
    uint64_t pos = (uint64_t)t;
    if (pos == bins) pos -= 1;
    hist[pos] += 1.0f;
  }
  return QD_OK;
}

qd_status qd_determine(const float *mins, const float *maxs, uint64_t n, const qd_choose *c, float *scale,
                       double *zero_point, uint64_t *bad) {
  if (c->mode < QD_AFFINE || c->mode > QD_TOKEN_AFFINE) return QD_BAD_ARGUMENT;
  for (uint64_t u = 0; u < n; u++) {
    if (qd_determine_unit(mins[u], maxs[u], c, &scale[u], &zero_point[u]) != QD_OK) {
      *bad = u;
      return QD_RANGE_OVERFLOW;
    }
  }
  return QD_OK;
}

qd_status qd_choose_quantize_ref(const float *x, uint64_t first, uint64_t units, uint64_t unit_size,
                                 const qd_choose *c, const qd_quant *q, float *scale, double *zero_point,
                                 void *out, uint64_t *bad) {
  if (!qd_codes_valid(q->codes) || unit_size == 0) return units ? QD_BAD_ARGUMENT : QD_OK;
  if ((first * unit_size) % (uint64_t)qd_codes_per_byte(q->codes)) return QD_BAD_ARGUMENT;
  for (uint64_t u = 0; u < units; u++) {
    const float *ux = x + u * unit_size;
    int32_t lo = qd_key(__builtin_inff()), hi = qd_key(-__builtin_inff());
    for (uint64_t i = 0; i < unit_size; i++) {
      if (!qd_is_finite(ux[i])) {
        *bad = (first + u) * unit_size + i;
        return QD_NOT_FINITE;
      }
      int32_t k = qd_key(ux[i]);
      lo = k < lo ? k : lo;
      hi = k > hi ? k : hi;
    }
    if (qd_determine_unit(qd_unkey(lo), qd_unkey(hi), c, &scale[u], &zero_point[u]) != QD_OK) {
      *bad = first + u;
      return QD_RANGE_OVERFLOW;
    }
    const float inv = 1.0f / scale[u], zp = (float)zero_point[u];
    for (uint64_t i = 0; i < unit_size; i++) {
      int rejected = 0;
      int32_t code = qd_quantize_one(ux[i], inv, zp, q, &rejected); /* finite: never rejected */
      qd_store_code(out, q->codes, u * unit_size + i, code);
    }
  }
  return QD_OK;
}

/* ---- conversions ---- */
void qd_f16_to_f32_ref(const void *in, uint64_t n, void *out) {
  const uint16_t *h = (const uint16_t *)in;
  float *f = (float *)out;
  for (uint64_t i = 0; i < n; i++) f[i] = qd_f16_to_f32(h[i]);
}
void qd_bf16_to_f32_ref(const void *in, uint64_t n, void *out) {
  const uint16_t *h = (const uint16_t *)in;
  float *f = (float *)out;
  for (uint64_t i = 0; i < n; i++) f[i] = qd_bf16_to_f32(h[i]);
}
void qd_f32_to_f16_ref(const void *in, uint64_t n, void *out) {
  const float *f = (const float *)in;
  uint16_t *h = (uint16_t *)out;
  for (uint64_t i = 0; i < n; i++) h[i] = qd_f32_to_f16(f[i]);
}
void qd_f32_to_bf16_ref(const void *in, uint64_t n, void *out) {
  const float *f = (const float *)in;
  uint16_t *h = (uint16_t *)out;
  for (uint64_t i = 0; i < n; i++) h[i] = qd_f32_to_bf16(f[i]);
}

/* ---- quality ---- */

qd_status qd_quality_ref(const float *x, const void *codes, uint64_t start, uint64_t count, const qd_layout *l,
                         const float *scale, const float *zero_point, const qd_quant *q, qd_quality *stats) {
  if (!layout_ok(l) || !qd_codes_valid(q->codes)) return count ? QD_BAD_ARGUMENT : QD_OK;
  if (start % (uint64_t)qd_codes_per_byte(q->codes)) return QD_BAD_ARGUMENT;
  uint64_t unit = (start / l->inner) % l->channels, left = l->inner - start % l->inner;
  float s = scale[unit], inv = 1.0f / s, zp = zero_point[unit];
  for (uint64_t i = 0; i < count; i++) {
    qd_quality_one(x[i], qd_load_code(codes, q->codes, i), s, inv, zp, q, stats);
    if (--left == 0) {
      unit = unit + 1 == l->channels ? 0 : unit + 1;
      left = l->inner;
      s = scale[unit];
      inv = 1.0f / s;
      zp = zero_point[unit];
    }
  }
  stats->count += count;
  return QD_OK;
}

const qd_kernels qd_kernels_ref = {
    "scalar",
    qd_minmax_ref,
    qd_quantize_ref,
    qd_dequantize_ref,
    qd_fake_quantize_ref,
    qd_choose_quantize_ref,
    qd_f16_to_f32_ref,
    qd_bf16_to_f32_ref,
    qd_f32_to_f16_ref,
    qd_f32_to_bf16_ref,
    qd_quality_ref,
    qd_choose_quantize_from_ref,
    qd_ggml_quantize_ref,
    qd_ggml_quantize_weighted_ref,
    qd_bnb_quantize_ref,
    qd_nbits_quantize_ref,
    qd_awq_quantize_ref,
    qd_gptq_quantize_ref,
};
