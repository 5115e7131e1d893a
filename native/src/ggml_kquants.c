/*
 * ggml's K-quants Q4_K and Q6_K (super-blocks of 256 values), scalar: the byte-exact twins of
 * src/core/interop/ggml-kquants.ts (the oracle, itself byte-exact with quantize_row_q4_K_ref /
 * quantize_row_q6_K_ref of ggml-quants.c compiled without contraction). Every statement below is
 * one of the oracle's, in its order: each float operation is one float32 operation (this file
 * is compiled with -ffp-contract=off), and every sum runs in the oracle's order, since the
 * searches compare errors that differ in their last bits.
 */
#include "common.h"
#include "ref.h"

#define QK_K 256
#define GROUP_MAX_EPS 1e-15f
#define RDELTA 0.1f

/* ggml's nearest_int: add 1.5·2^23 (the float32 addition rounds half to even) and read the low
 * mantissa bits back. Exact rounding for |x| < 2^22; outside it the same bit arithmetic. */
static int32_t nearest_int(float x) {
  const float v = x + 12582912.0f;
  int32_t i;
  __builtin_memcpy(&i, &v, 4);
  return (i & 0x007fffff) - 0x00400000;
}

static int32_t clamp_i32(int32_t v, int32_t lo, int32_t hi) { return v < lo ? lo : v > hi ? hi : v; }

static void put_f16(uint8_t *out, uint16_t h) {
  out[0] = (uint8_t)h;
  out[1] = (uint8_t)(h >> 8);
}

/* ---- Q4_K ---- */

/* make_qkx2_quants for one sub-block of 32 (nmax 15, rmin -1, rdelta 0.1, nstep 20, squared
 * error): the codes go to L, the returned scale and *neg_min (= -min, so ≥ 0) fit
 * x ≈ scale·L - neg_min. */
static float make_qkx2_quants(const float *x, const float *weights, uint8_t *L, float *neg_min) {
  enum { N = 32, NMAX = 15, NSTEP = 20 };
  const float rmin = -1.0f;
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < N; i++) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < N; i++) L[i] = 0;
    *neg_min = -min;
    return 0.0f;
  }
  float iscale = (float)NMAX / (max - min);
  float scale = 1.0f / iscale;
  float best_error = 0.0f;
  for (int i = 0; i < N; i++) {
    const int32_t l = clamp_i32(nearest_int(iscale * (x[i] - min)), 0, NMAX);
    L[i] = (uint8_t)l;
    float diff = scale * (float)l + min - x[i];
    diff = diff * diff;
    best_error += weights[i] * diff;
  }
  uint8_t laux[N];
  for (int is = 0; is <= NSTEP; is++) {
    /* `min` is the best fit so far: later trials measure from it, as the reference does */
    iscale = (rmin + RDELTA * (float)is + (float)NMAX) / (max - min);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (int i = 0; i < N; i++) {
      const int32_t l = clamp_i32(nearest_int(iscale * (x[i] - min)), 0, NMAX);
      laux[i] = (uint8_t)l;
      const float wl = weights[i] * (float)l;
      sum_l += wl;
      sum_l2 += wl * (float)l;
      sum_xl += wl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0.0f;
      for (int i = 0; i < N; i++) {
        float diff = this_scale * (float)laux[i] + this_min - x[i];
        diff = diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < N; i++) L[i] = laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *neg_min = -min;
  return scale;
}

/* get_scale_min_k4: the j-th 6-bit scale and min of the 12 scale bytes q. */
static void scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (uint8_t)((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
    *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void qd_ggml_q4_k_block_ref(const float *x, uint8_t *out) {
  uint8_t L[QK_K];
  float weights[32], scales[QK_K / 32], mins[QK_K / 32];
  for (int j = 0; j < QK_K / 32; j++) {
    const float *xb = x + 32 * j;
    float sum_x2 = 0.0f;
    for (int l = 0; l < 32; l++) sum_x2 += xb[l] * xb[l];
    const float av_x = __builtin_sqrtf(sum_x2 / 32.0f);
    for (int l = 0; l < 32; l++) weights[l] = av_x + __builtin_fabsf(xb[l]);
    scales[j] = make_qkx2_quants(xb, weights, L + 32 * j, &mins[j]);
  }
  qd_ggml_q4_k_finish(x, scales, mins, L, out);
}

void qd_ggml_q4_k_finish(const float *x, const float *scales, const float *mins, uint8_t *L, uint8_t *out) {
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < QK_K / 32; j++) {
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t *sc = out + 4; /* the 12 scale bytes */
  for (int j = 0; j < QK_K / 32; j++) {
    uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]);
    uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
    ls = ls < 63 ? ls : 63;
    lm = lm < 63 ? lm : 63;
    if (j < 4) {
      sc[j] = ls;
      sc[j + 4] = lm;
    } else {
      sc[j + 4] = (uint8_t)((ls & 0xf) | ((lm & 0xf) << 4));
      sc[j - 4] |= (uint8_t)((ls >> 4) << 6);
      sc[j] |= (uint8_t)((lm >> 4) << 6);
    }
  }
  const uint16_t d_bits = qd_f32_to_f16(max_scale / 63.0f), dmin_bits = qd_f32_to_f16(max_min / 63.0f);
  put_f16(out, d_bits);
  put_f16(out + 2, dmin_bits);
  const float d_all = qd_f16_to_f32(d_bits), dmin_all = qd_f16_to_f32(dmin_bits);
  for (int j = 0; j < QK_K / 32; j++) {
    uint8_t s, m;
    scale_min_k4(j, sc, &s, &m);
    const float d = d_all * (float)s;
    if (d == 0) continue;
    const float dm = dmin_all * (float)m;
    for (int ii = 0; ii < 32; ii++) L[32 * j + ii] = (uint8_t)clamp_i32(nearest_int((x[32 * j + ii] + dm) / d), 0, 15);
  }
  uint8_t *q = out + 4 + 12;
  for (int j = 0; j < QK_K; j += 64, q += 32) {
    for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
  }
}

/* ---- Q6_K ---- */

/* make_qx_quants for one sub-block of 16 (nmax 32, rmse_type 1, weights x²): nmax + code
 * (0..63) to L, and the returned scale. */
static float make_qx_quants(const float *x, int8_t *L) {
  enum { N = 16, NMAX = 32 };
  float max = 0.0f, amax = 0.0f;
  for (int i = 0; i < N; i++) {
    const float ax = __builtin_fabsf(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < GROUP_MAX_EPS) {
    for (int i = 0; i < N; i++) L[i] = 0;
    return 0.0f;
  }
  float iscale = -(float)NMAX / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < N; i++) {
    const int32_t l = clamp_i32(nearest_int(iscale * x[i]), -NMAX, NMAX - 1);
    L[i] = (int8_t)(l + NMAX);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * (float)l;
    suml2 += w * (float)l * (float)l;
  }
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; is++) {
    if (is == 0) continue;
    iscale = -((float)NMAX + RDELTA * (float)is) / max;
    sumlx = suml2 = 0.0f;
    for (int i = 0; i < N; i++) {
      const int32_t l = clamp_i32(nearest_int(iscale * x[i]), -NMAX, NMAX - 1);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * (float)l;
      suml2 += w * (float)l * (float)l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < N; i++) L[i] = (int8_t)(NMAX + clamp_i32(nearest_int(iscale * x[i]), -NMAX, NMAX - 1));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

void qd_ggml_q6_k_block_ref(const float *x, uint8_t *out) {
  int8_t L[QK_K];
  float scales[QK_K / 16];
  for (int ib = 0; ib < QK_K / 16; ib++) scales[ib] = make_qx_quants(x + 16 * ib, L + 16 * ib);
  qd_ggml_q6_k_finish(x, scales, L, out);
}

void qd_ggml_q6_k_finish(const float *x, const float *scales, int8_t *L, uint8_t *out) {
  float max_scale = 0.0f, max_abs_scale = 0.0f;
  for (int ib = 0; ib < QK_K / 16; ib++) {
    const float abs = __builtin_fabsf(scales[ib]);
    if (abs > max_abs_scale) {
      max_abs_scale = abs;
      max_scale = scales[ib];
    }
  }
  if (max_abs_scale < GROUP_MAX_EPS) {
    for (int i = 0; i < 210; i++) out[i] = 0; /* d = fp16(0) = 0 */
    return;
  }
  const float iscale = -128.0f / max_scale;
  const uint16_t d_bits = qd_f32_to_f16(1.0f / iscale);
  int8_t *sc = (int8_t *)(out + 192); /* int8 scales[16], then d */
  for (int ib = 0; ib < QK_K / 16; ib++) {
    const int32_t s = nearest_int(iscale * scales[ib]);
    sc[ib] = (int8_t)(uint8_t)(s < 127 ? s : 127);
  }
  put_f16(out + 208, d_bits);
  const float d_all = qd_f16_to_f32(d_bits);
  for (int j = 0; j < QK_K / 16; j++) {
    const float d = d_all * (float)sc[j];
    if (d == 0) continue;
    for (int ii = 0; ii < 16; ii++)
      L[16 * j + ii] = (int8_t)(clamp_i32(nearest_int(x[16 * j + ii] / d), -32, 31) + 32);
  }
  for (int half = 0; half < 2; half++) {
    const int8_t *Lh = L + 128 * half;
    uint8_t *ql = out + 64 * half, *qh = out + 128 + 32 * half;
    for (int l = 0; l < 32; l++) {
      const int a = Lh[l], b = Lh[l + 32], c = Lh[l + 64], e = Lh[l + 96];
      ql[l] = (uint8_t)((a & 0xf) | ((c & 0xf) << 4));
      ql[l + 32] = (uint8_t)((b & 0xf) | ((e & 0xf) << 4));
      qh[l] = (uint8_t)((a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6));
    }
  }
}
