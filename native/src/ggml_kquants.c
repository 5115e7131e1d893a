/*
 * ggml's K-quants Q2_K, Q3_K, Q4_K, Q5_K and Q6_K (super-blocks of 256 values), scalar: the byte-exact twins of
 * src/core/interop/ggml-kquants.ts and ggml-kquants-low.ts (the oracles, themselves byte-exact with quantize_row_q4_K_ref /
 * quantize_row_q6_K_ref of ggml-quants.c compiled without contraction). Every statement below is
 * one of the oracle's, in its order: each float operation is one float32 operation (this file
 * is compiled with -ffp-contract=off), and every sum runs in the oracle's order, since the
 * searches compare errors that differ in their last bits.
 */
#include "common.h"
#include "ref.h"

#define QK_K 256
#define RDELTA 0.1f


static int32_t clamp_i32(int32_t v, int32_t lo, int32_t hi) { return v < lo ? lo : v > hi ? hi : v; }

static void put_f16(uint8_t *out, uint16_t h) {
  out[0] = (uint8_t)h;
  out[1] = (uint8_t)(h >> 8);
}

/* ---- Q4_K ---- */

float qd_ggml_make_qkx2_quants(const float *x, const float *weights, uint8_t *L, float *neg_min, const int32_t NMAX,
                               const float rmin, const float rdelta, const int NSTEP, const int N, const int use_mad) {
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
    const int32_t l = clamp_i32(qd_nearest_int(iscale * (x[i] - min)), 0, NMAX);
    L[i] = (uint8_t)l;
    float diff = scale * (float)l + min - x[i];
    diff = use_mad ? __builtin_fabsf(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  uint8_t laux[32];
  for (int is = 0; is <= NSTEP; is++) {
    /* `min` is the best fit so far: later trials measure from it, as the reference does */
    iscale = (rmin + rdelta * (float)is + (float)NMAX) / (max - min);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (int i = 0; i < N; i++) {
      const int32_t l = clamp_i32(qd_nearest_int(iscale * (x[i] - min)), 0, NMAX);
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
        diff = use_mad ? __builtin_fabsf(diff) : diff * diff;
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

/* The eight sub-block fits of a Q4_K / Q5_K super-block (weights av_x + |x|). */
static void fit_sub_blocks(const float *x, uint8_t *L, float *scales, float *mins, int32_t nmax, float rmin, int nstep) {
  float weights[32];
  for (int j = 0; j < QK_K / 32; j++) {
    const float *xb = x + 32 * j;
    float sum_x2 = 0.0f;
    for (int l = 0; l < 32; l++) sum_x2 += xb[l] * xb[l];
    const float av_x = __builtin_sqrtf(sum_x2 / 32.0f);
    for (int l = 0; l < 32; l++) weights[l] = av_x + __builtin_fabsf(xb[l]);
    scales[j] = qd_ggml_make_qkx2_quants(xb, weights, L + 32 * j, &mins[j], nmax, rmin, RDELTA, nstep, 32, 0);
  }
}

void qd_ggml_q4_k_block_ref(const float *x, uint8_t *out) {
  uint8_t L[QK_K];
  float scales[QK_K / 32], mins[QK_K / 32];
  fit_sub_blocks(x, L, scales, mins, 15, -1.0f, 20);
  qd_ggml_q4_k_finish(x, scales, mins, L, out);
}

/* Q4_K's and Q5_K's second half: d, dmin and the 6-bit scales and mins written, then the tail. */
static void k4_finish(const float *x, const float *scales, const float *mins, uint8_t *L, uint8_t *out, int32_t nmax) {
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < QK_K / 32; j++) {
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t *sc = out + 4; /* the 12 scale bytes */
  for (int j = 0; j < QK_K / 32; j++) {
    uint8_t ls = (uint8_t)qd_nearest_int(inv_scale * scales[j]);
    uint8_t lm = (uint8_t)qd_nearest_int(inv_min * mins[j]);
    qd_ggml_put_scale_min_k4(j, ls < 63 ? ls : 63, lm < 63 ? lm : 63, sc);
  }
  put_f16(out, qd_f32_to_f16(max_scale / 63.0f));
  put_f16(out + 2, qd_f32_to_f16(max_min / 63.0f));
  qd_ggml_k4_tail(x, L, out, nmax);
}

void qd_ggml_put_scale_min_k4(int j, uint8_t ls, uint8_t lm, uint8_t *sc) {
  if (j < 4) {
    sc[j] = ls;
    sc[j + 4] = lm;
  } else {
    sc[j + 4] = (uint8_t)((ls & 0xf) | ((lm & 0xf) << 4));
    sc[j - 4] |= (uint8_t)((ls >> 4) << 6);
    sc[j] |= (uint8_t)((lm >> 4) << 6);
  }
}

void qd_ggml_k4_tail(const float *x, uint8_t *L, uint8_t *out, int32_t nmax) {
  const uint8_t *sc = out + 4;
  const float d_all = qd_f16_to_f32((uint16_t)(out[0] | out[1] << 8));
  const float dmin_all = qd_f16_to_f32((uint16_t)(out[2] | out[3] << 8));
  for (int j = 0; j < QK_K / 32; j++) {
    uint8_t s, m;
    scale_min_k4(j, sc, &s, &m);
    const float d = d_all * (float)s;
    if (d == 0) continue;
    const float dm = dmin_all * (float)m;
    for (int ii = 0; ii < 32; ii++)
      L[32 * j + ii] = (uint8_t)clamp_i32(qd_nearest_int((x[32 * j + ii] + dm) / d), 0, nmax);
  }
  if (nmax == 15) {
    uint8_t *q = out + 4 + 12;
    for (int j = 0; j < QK_K; j += 64, q += 32) {
      for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
    return;
  }
  uint8_t *qh = out + 4 + 12, *ql = qh + 32; /* Q5_K: the fifth bits in qh (bit 2c / 2c+1 of chunk c) */
  for (int j = 0; j < 32; j++) qh[j] = 0;
  for (int n = 0, bit = 0; n < QK_K; n += 64, bit += 2, ql += 32) {
    for (int j = 0; j < 32; j++) {
      const uint8_t l1 = L[n + j], l2 = L[n + j + 32];
      if (l1 > 15) qh[j] |= (uint8_t)(1 << bit);
      if (l2 > 15) qh[j] |= (uint8_t)(2 << bit);
      ql[j] = (uint8_t)((l1 & 0xf) | ((l2 & 0xf) << 4));
    }
  }
}

void qd_ggml_q4_k_finish(const float *x, const float *scales, const float *mins, uint8_t *L, uint8_t *out) {
  k4_finish(x, scales, mins, L, out, 15);
}

/* ---- Q5_K: Q4_K's fit with codes 0..31; the fifth bits in qh[32] (bit 2c / 2c+1 of chunk c) ---- */

void qd_ggml_q5_k_block_ref(const float *x, uint8_t *out) {
  uint8_t L[QK_K];
  float scales[QK_K / 32], mins[QK_K / 32];
  fit_sub_blocks(x, L, scales, mins, 31, -0.5f, 15);
  qd_ggml_q5_k_finish(x, scales, mins, L, out);
}

void qd_ggml_q5_k_finish(const float *x, const float *scales, const float *mins, uint8_t *L, uint8_t *out) {
  k4_finish(x, scales, mins, L, out, 31);
}

/* ---- Q6_K ---- */

/* make_qx_quants for one sub-block of 16 (nmax 32, rmse_type 1, weights x²): nmax + code
 * (0..63) to L, and the returned scale. */
static float make_qx_quants(const float *x, int8_t *L) {
  enum { N = 16, NMAX = 32 };
  const float max = qd_ggml_signed_abs_max(x, N);
  if (__builtin_fabsf(max) < QD_GROUP_MAX_EPS) {
    for (int i = 0; i < N; i++) L[i] = 0;
    return 0.0f;
  }
  float iscale = -(float)NMAX / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < N; i++) {
    const int32_t l = clamp_i32(qd_nearest_int(iscale * x[i]), -NMAX, NMAX - 1);
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
      const int32_t l = clamp_i32(qd_nearest_int(iscale * x[i]), -NMAX, NMAX - 1);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * (float)l;
      suml2 += w * (float)l * (float)l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < N; i++) L[i] = (int8_t)(NMAX + clamp_i32(qd_nearest_int(iscale * x[i]), -NMAX, NMAX - 1));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

/* ---- Q2_K, Q3_K and Q6_K: 16 sub-blocks of 16. After the sub-block searches, each type's head
 * writes the scale bytes and gives each sub-block's rounded d (and Q2_K's dm); then the codes
 * against them (sixteen_codes, which the SIMD variants run in vectors) and the packing. ---- */

static void q6_k_steps(const uint8_t *out, float *d);
static void q2_k_steps(const uint8_t *out, float *d, float *dm);
static void q3_k_steps(const uint8_t *out, float *d);

/* Q6_K: ql:u8[128], qh:u8[64], scales:i8[16] at 192, d:f16 at 208. 0 when the block is all zero
 * (its 210 bytes written). */
static int q6_k_head(const float *scales, uint8_t *out, float *d) {
  float max_scale = 0.0f, max_abs_scale = 0.0f;
  for (int ib = 0; ib < QK_K / 16; ib++) {
    const float abs = __builtin_fabsf(scales[ib]);
    if (abs > max_abs_scale) {
      max_abs_scale = abs;
      max_scale = scales[ib];
    }
  }
  if (max_abs_scale < QD_GROUP_MAX_EPS) {
    for (int i = 0; i < 210; i++) out[i] = 0; /* d = fp16(0) = 0 */
    return 0;
  }
  const float iscale = -128.0f / max_scale;
  const uint16_t d_bits = qd_f32_to_f16(1.0f / iscale);
  int8_t *sc = (int8_t *)(out + 192);
  for (int ib = 0; ib < QK_K / 16; ib++) {
    const int32_t s = qd_nearest_int(iscale * scales[ib]);
    sc[ib] = (int8_t)(uint8_t)(s < 127 ? s : 127);
  }
  put_f16(out + 208, d_bits);
  q6_k_steps(out, d);
  return 1;
}

/* Each sub-block's d from a Q6_K block's d and scale bytes. */
static void q6_k_steps(const uint8_t *out, float *d) {
  const int8_t *sc = (const int8_t *)(out + 192);
  const float d_all = qd_f16_to_f32((uint16_t)(out[208] | out[209] << 8));
  for (int j = 0; j < QK_K / 16; j++) d[j] = d_all * (float)sc[j];
}

static void q6_k_pack(const uint8_t *L, uint8_t *out) {
  for (int half = 0; half < 2; half++) {
    const uint8_t *Lh = L + 128 * half;
    uint8_t *ql = out + 64 * half, *qh = out + 128 + 32 * half;
    for (int l = 0; l < 32; l++) {
      const int a = Lh[l], b = Lh[l + 32], c = Lh[l + 64], e = Lh[l + 96];
      ql[l] = (uint8_t)((a & 0xf) | ((c & 0xf) << 4));
      ql[l + 32] = (uint8_t)((b & 0xf) | ((e & 0xf) << 4));
      qh[l] = (uint8_t)((a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6));
    }
  }
}

/* 2-bit codes packed four to a byte, 32 apart (Q2_K's and Q3_K's qs). */
static void pack_two_bits(const uint8_t *L, uint8_t *qs) {
  for (int j = 0; j < QK_K; j += 128) {
    for (int l = 0; l < 32; l++) {
      qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
    }
  }
}

/* Q2_K: scales:u8[16] (scale | min << 4), qs:u8[64], d:f16 at 80, dmin:f16 at 82. */
static void q2_k_head(const float *scales, const float *mins, uint8_t *out, float *d, float *dm) {
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 16; j++) {
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  uint8_t *sc = out;
  if (max_scale > 0) {
    const float iscale = 15.0f / max_scale;
    for (int j = 0; j < 16; j++) sc[j] = (uint8_t)qd_nearest_int(iscale * scales[j]);
    put_f16(out + 80, qd_f32_to_f16(max_scale / 15.0f));
  } else {
    for (int j = 0; j < 16; j++) sc[j] = 0;
    put_f16(out + 80, qd_f32_to_f16(0.0f));
  }
  if (max_min > 0) {
    const float iscale = 15.0f / max_min;
    for (int j = 0; j < 16; j++) sc[j] |= (uint8_t)((uint32_t)qd_nearest_int(iscale * mins[j]) << 4); /* unsigned: NaN gives -2^22 */
    put_f16(out + 82, qd_f32_to_f16(max_min / 15.0f));
  } else {
    put_f16(out + 82, qd_f32_to_f16(0.0f));
  }
  q2_k_steps(out, d, dm);
}

/* Each sub-block's d and dm from a Q2_K block's d, dmin and scale bytes. */
static void q2_k_steps(const uint8_t *out, float *d, float *dm) {
  const float d_all = qd_f16_to_f32((uint16_t)(out[80] | out[81] << 8));
  const float dmin_all = qd_f16_to_f32((uint16_t)(out[82] | out[83] << 8));
  for (int j = 0; j < 16; j++) {
    d[j] = d_all * (float)(out[j] & 0xf);
    dm[j] = dmin_all * (float)(out[j] >> 4);
  }
}

/* make_q3_quants (do_rmse): codes -nmax..nmax-1 stored as code + nmax (0 for an all-zero group). */
static float make_q3_quants(const float *x, int8_t *L, const int32_t nmax) {
  enum { N = 16 };
  const float max = qd_ggml_signed_abs_max(x, N);
  if (__builtin_fabsf(max) < QD_GROUP_MAX_EPS) {
    for (int i = 0; i < N; i++) L[i] = 0;
    return 0.0f;
  }
  const float iscale = (float)-nmax / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < N; i++) {
    const int32_t l = clamp_i32(qd_nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = (int8_t)l;
    const float w = x[i] * x[i];
    sumlx += w * x[i] * (float)l;
    suml2 += w * (float)l * (float)l;
  }
  for (int itry = 0; itry < 5; itry++) {
    int changed = 0;
    for (int i = 0; i < N; i++) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * (float)L[i];
      if (slx > 0) {
        float sl2 = suml2 - w * (float)L[i] * (float)L[i];
        const int32_t new_l = clamp_i32(qd_nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
        if (new_l != L[i]) {
          slx += w * x[i] * (float)new_l;
          sl2 += w * (float)new_l * (float)new_l;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = (int8_t)new_l;
            sumlx = slx;
            suml2 = sl2;
            changed++;
          }
        }
      }
    }
    if (!changed) break;
  }
  for (int i = 0; i < N; i++) L[i] = (int8_t)(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Q3_K: hmask:u8[32], qs:u8[64], scales:u8[12] (6-bit signed, offset 32), d:f16 at 108. */
static void q3_k_head(const float *scales, uint8_t *out, float *d) {
  float max_scale = 0.0f, amax = 0.0f;
  for (int j = 0; j < 16; j++) {
    const float scale = __builtin_fabsf(scales[j]);
    if (scale > amax) {
      amax = scale;
      max_scale = scales[j];
    }
  }
  uint8_t *sc = out + 96;
  for (int j = 0; j < 12; j++) sc[j] = 0;
  if (max_scale != 0) {
    const float iscale = -32.0f / max_scale;
    for (int j = 0; j < 16; j++) {
      int8_t l = (int8_t)qd_nearest_int(iscale * scales[j]);
      l = (int8_t)(clamp_i32(l, -32, 31) + 32);
      if (j < 8) sc[j] = (uint8_t)(l & 0xf);
      else sc[j - 8] |= (uint8_t)((l & 0xf) << 4);
      l >>= 4;
      sc[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
    }
    put_f16(out + 108, qd_f32_to_f16(1 / iscale));
  } else {
    put_f16(out + 108, qd_f32_to_f16(0.0f));
  }
  q3_k_steps(out, d);
}

/* Each sub-block's d from a Q3_K block's d and 6-bit scales. */
static void q3_k_steps(const uint8_t *out, float *d) {
  const uint8_t *sc = out + 96;
  const float d_all = qd_f16_to_f32((uint16_t)(out[108] | out[109] << 8));
  for (int j = 0; j < 16; j++) {
    int8_t s = (int8_t)(j < 8 ? sc[j] & 0xf : sc[j - 8] >> 4);
    s = (int8_t)((s | (((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32);
    d[j] = d_all * (float)s;
  }
}

static void q3_k_pack(const uint8_t *L, uint8_t *out) {
  uint8_t codes[QK_K];
  uint8_t *hmask = out;
  for (int j = 0; j < 32; j++) hmask[j] = 0;
  for (int j = 0; j < QK_K; j++) { /* codes are 0..7: bit 2 is the high bit, without a branch */
    hmask[j % 32] |= (uint8_t)(((L[j] >> 2) & 1) << (j / 32));
    codes[j] = (uint8_t)(L[j] & 3);
  }
  pack_two_bits(codes, out + 32);
}

int qd_ggml_sixteen_head(int32_t type, const float *scales, const float *neg_mins, uint8_t *out, float *d, float *dm) {
  if (type == QD_GGML_Q6_K) return q6_k_head(scales, out, d);
  if (type == QD_GGML_Q3_K)
    q3_k_head(scales, out, d);
  else
    q2_k_head(scales, neg_mins, out, d, dm);
  return 1;
}

void qd_ggml_sixteen_pack(int32_t type, const uint8_t *L, uint8_t *out) {
  if (type == QD_GGML_Q6_K)
    q6_k_pack(L, out);
  else if (type == QD_GGML_Q3_K)
    q3_k_pack(L, out);
  else
    pack_two_bits(L, out + 16);
}

/* Each sub-block's codes against its rounded d (and dm): those with d 0 keep the search's. */
static void sixteen_codes(int32_t type, const float *x, const float *d, const float *dm, uint8_t *L) {
  const int32_t lo = qd_ggml_sixteen_low(type), hi = type == QD_GGML_Q2_K ? 3 : -lo - 1;
  for (int j = 0; j < 16; j++) {
    if (d[j] == 0) continue;
    for (int ii = 0; ii < 16; ii++) {
      const float v = type == QD_GGML_Q2_K ? x[16 * j + ii] + dm[j] : x[16 * j + ii];
      L[16 * j + ii] = (uint8_t)(clamp_i32(qd_nearest_int(v / d[j]), lo, hi) - lo);
    }
  }
}

void qd_ggml_sixteen_finish(int32_t type, const float *x, const float *scales, const float *neg_mins, uint8_t *L,
                            uint8_t *out) {
  float d[16], dm[16] = {0}; /* dm: Q2_K only */
  if (!qd_ggml_sixteen_head(type, scales, neg_mins, out, d, dm)) return;
  sixteen_codes(type, x, d, dm, L);
  qd_ggml_sixteen_pack(type, L, out);
}

void qd_ggml_sixteen_tail(int32_t type, const float *x, uint8_t *L, uint8_t *out) {
  float d[16], dm[16] = {0}; /* dm: Q2_K only */
  if (type == QD_GGML_Q6_K)
    q6_k_steps(out, d);
  else if (type == QD_GGML_Q3_K)
    q3_k_steps(out, d);
  else
    q2_k_steps(out, d, dm);
  sixteen_codes(type, x, d, dm, L);
  qd_ggml_sixteen_pack(type, L, out);
}

void qd_ggml_q6_k_block_ref(const float *x, uint8_t *out) {
  uint8_t L[QK_K];
  float scales[QK_K / 16];
  for (int ib = 0; ib < QK_K / 16; ib++) scales[ib] = make_qx_quants(x + 16 * ib, (int8_t *)L + 16 * ib);
  qd_ggml_sixteen_finish(QD_GGML_Q6_K, x, scales, NULL, L, out);
}

void qd_ggml_q3_k_block_ref(const float *x, uint8_t *out) {
  uint8_t L[QK_K];
  float scales[16];
  for (int j = 0; j < 16; j++) scales[j] = make_q3_quants(x + 16 * j, (int8_t *)L + 16 * j, 4);
  qd_ggml_sixteen_finish(QD_GGML_Q3_K, x, scales, NULL, L, out);
}

void qd_ggml_q2_k_block_ref(const float *x, uint8_t *out) {
  uint8_t L[QK_K];
  float weights[16], scales[16], neg_mins[16];
  for (int j = 0; j < 16; j++) {
    for (int l = 0; l < 16; l++) weights[l] = __builtin_fabsf(x[16 * j + l]);
    scales[j] = qd_ggml_make_qkx2_quants(x + 16 * j, weights, L + 16 * j, &neg_mins[j], 3, -0.5f, RDELTA, 15, 16, 1);
  }
  qd_ggml_sixteen_finish(QD_GGML_Q2_K, x, scales, neg_mins, L, out);
}
