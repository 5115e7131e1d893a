/*
 * ggml's quantizers with an importance matrix: the quant_weights paths of ggml-quants.c
 * (quantize_row_q4_0_impl … quantize_row_q6_K_impl, quantize_iq4_nl / _xs with weights), what
 * llama-quantize runs with --imatrix. Scalar twins of src/core/interop/ggml-imatrix.ts (the
 * oracle, byte-exact with libllama: test/gguf-mix; and with libggml: test/interop/golden):
 * every statement is one of the oracle's, in its order, each float operation one float32
 * operation (compiled with -ffp-contract=off). Every row of a tensor is quantized against the
 * same column weights qw, one per value of the row. The K types' parts are exported for the SIMD
 * twins (simd_kquants.h), which search sub-blocks across lanes and finish here; IQ4_NL and IQ4_XS's
 * weighted search is ggml_iquants.c's; Q8_0 ignores the matrix.
 */
#include "common.h"
#include "ref.h"

#define QK_K 256

static int32_t clamp_i32(int32_t v, int32_t lo, int32_t hi) { return v < lo ? lo : v > hi ? hi : v; }

static void put_f16(uint8_t *out, float v) {
  const uint16_t h = qd_f32_to_f16(v);
  out[0] = (uint8_t)h;
  out[1] = (uint8_t)(h >> 8);
}

/* make_qx_quants with rmse_type 1 and weights qw: nmax + code (0..2·nmax-1) to L, the scale returned. */
static float make_qx_weighted(int n, int32_t nmax, const float *x, int8_t *L, const float *qw) {
  const float max = qd_ggml_signed_abs_max(x, n);
  if (__builtin_fabsf(max) < QD_GROUP_MAX_EPS) {
    for (int i = 0; i < n; i++) L[i] = 0;
    return 0.0f;
  }
  float iscale = (float)-nmax / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; i++) {
    const int32_t l = clamp_i32(qd_nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = (int8_t)(l + nmax);
    sumlx += qw[i] * x[i] * (float)l;
    suml2 += qw[i] * (float)l * (float)l;
  }
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; is++) {
    if (is == 0) continue;
    iscale = -((float)nmax + 0.1f * (float)is) / max;
    sumlx = suml2 = 0.0f;
    for (int i = 0; i < n; i++) {
      const int32_t l = clamp_i32(qd_nearest_int(iscale * x[i]), -nmax, nmax - 1);
      sumlx += qw[i] * x[i] * (float)l;
      suml2 += qw[i] * (float)l * (float)l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; i++) L[i] = (int8_t)(nmax + clamp_i32(qd_nearest_int(iscale * x[i]), -nmax, nmax - 1));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

/* make_qp_quants: n non-negative values (a super-block's sub-block scales or mins) fitted to codes
 * 0..nmax against one scale, weighted by qw; the codes to L (as uint8_t: a negative code wraps),
 * the scale returned. */
static float make_qp_quants(int n, int32_t nmax, const float *x, uint8_t *L, const float *qw) {
  float max = 0.0f;
  for (int i = 0; i < n; i++) max = max > x[i] ? max : x[i];
  if (max < QD_GROUP_MAX_EPS) {
    for (int i = 0; i < n; i++) L[i] = 0;
    return 0.0f;
  }
  float iscale = (float)nmax / max;
  for (int i = 0; i < n; i++) L[i] = (uint8_t)qd_nearest_int(iscale * x[i]);
  const float scale = 1.0f / iscale;
  float best_mse = 0.0f;
  for (int i = 0; i < n; i++) {
    const float diff = x[i] - scale * (float)L[i];
    best_mse += qw[i] * diff * diff;
  }
  for (int is = -4; is <= 4; is++) {
    if (is == 0) continue;
    const float iscale_is = (0.1f * (float)is + (float)nmax) / max;
    const float scale_is = 1.0f / iscale_is;
    float mse = 0.0f;
    for (int i = 0; i < n; i++) {
      const int32_t l = qd_nearest_int(iscale_is * x[i]);
      const float diff = x[i] - scale_is * (float)(l < nmax ? l : nmax);
      mse += qw[i] * diff * diff;
    }
    if (mse < best_mse) {
      best_mse = mse;
      iscale = iscale_is;
    }
  }
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; i++) {
    int32_t l = qd_nearest_int(iscale * x[i]);
    l = l < nmax ? l : nmax;
    L[i] = (uint8_t)l;
    sumlx += qw[i] * x[i] * (float)l;
    suml2 += qw[i] * (float)l * (float)l;
  }
  for (int itry = 0; itry < 5; itry++) {
    int changed = 0;
    for (int i = 0; i < n; i++) {
      const float w = qw[i], li = (float)L[i];
      float slx = sumlx - w * x[i] * li;
      float sl2 = suml2 - w * li * li;
      if (slx > 0 && sl2 > 0) {
        int32_t new_l = qd_nearest_int(x[i] * sl2 / slx);
        new_l = new_l < nmax ? new_l : nmax;
        if (new_l != L[i]) {
          slx += w * x[i] * (float)new_l;
          sl2 += w * (float)new_l * (float)new_l;
          if (slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = (uint8_t)new_l;
            sumlx = slx;
            suml2 = sl2;
            changed++;
          }
        }
      }
    }
    if (!changed) break;
  }
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* ---- Q4_0, Q5_0, Q4_1, Q5_1 (quantize_row_q4_0_impl …): σ² = Σx²/ne0 over the whole row, each
 * block of 32 weighted by qw·sqrt(σ² + x²); Q4_0 / Q5_0 fitted by make_qx_quants (nmax 8 / 16),
 * Q4_1 / Q5_1 by make_qkx3_quants (nmax 15 / 31). Q8_0 ignores the matrix. ---- */

float qd_ggml_row_sigma2(const float *x, uint64_t ne0) { return qd_sum_squares(x, (int)ne0) / (float)ne0; }

/* A block's codes as Q4_x / Q5_x store them: element j in the low nibble of qs[j], element j+16
 * in its high nibble; for 5 bits the fifth bits in the little-endian u32 at qh, bit j per element. */
static void pack_legacy(const uint8_t *L, uint8_t *qs, uint8_t *qh) {
  uint32_t high = 0;
  for (int j = 0; j < 16; j++) {
    qs[j] = (uint8_t)((L[j] & 0xf) | ((L[j + 16] & 0xf) << 4));
    high |= (uint32_t)((L[j] >> 4) & 1) << j;
    high |= (uint32_t)((L[j + 16] >> 4) & 1) << (j + 16);
  }
  if (qh != NULL) {
    for (int b = 0; b < 4; b++) qh[b] = (uint8_t)(high >> (8 * b));
  }
}

void qd_ggml_legacy_weighted_finish(int32_t type, float scale, float neg_min, const uint8_t *L, uint8_t *out) {
  put_f16(out, scale);
  switch (type) {
  case QD_GGML_Q4_0: pack_legacy(L, out + 2, NULL); break;
  case QD_GGML_Q5_0: pack_legacy(L, out + 6, out + 2); break;
  case QD_GGML_Q4_1:
    put_f16(out + 2, -neg_min);
    pack_legacy(L, out + 4, NULL);
    break;
  default: /* Q5_1 */
    put_f16(out + 2, -neg_min);
    pack_legacy(L, out + 8, out + 4);
    break;
  }
}

int32_t qd_ggml_legacy_nmax(int32_t type) {
  return type == QD_GGML_Q4_0 ? 8 : type == QD_GGML_Q5_0 ? 16 : type == QD_GGML_Q4_1 ? 15 : 31;
}

void qd_ggml_legacy_weighted_block_ref(int32_t type, const float *x, const float *w, uint8_t *out) {
  uint8_t L[32];
  float neg_min = 0.0f, scale;
  if (type == QD_GGML_Q4_0 || type == QD_GGML_Q5_0)
    scale = make_qx_weighted(32, qd_ggml_legacy_nmax(type), x, (int8_t *)L, w);
  else
    scale = qd_ggml_make_qkx2_quants(x, w, L, &neg_min, qd_ggml_legacy_nmax(type), -0.9f, 0.05f, 36, 32, 0);
  qd_ggml_legacy_weighted_finish(type, scale, neg_min, L, out);
}

int qd_ggml_legacy_weighted(int32_t type) {
  return type == QD_GGML_Q4_0 || type == QD_GGML_Q5_0 || type == QD_GGML_Q4_1 || type == QD_GGML_Q5_1;
}

/* The values' weights, and their sums per sub-block:
 * - Q2_K: σ² = Σx²/256, qw·sqrt(σ² + x²), sub-blocks of 16;
 * - Q3_K: σ² = 2Σx²/256, the same, sub-blocks of 16;
 * - Q4_K, Q5_K: σ² = 2Σx²/256, the same, sub-blocks of 32;
 * - Q6_K: qw itself (no sums). */
void qd_ggml_matrix_weights(int32_t type, const float *x, const float *qw, float *w, float *sw) {
  if (type == QD_GGML_Q6_K) {
    for (int i = 0; i < QK_K; i++) w[i] = qw[i];
    return;
  }
  const float sigma2 = type == QD_GGML_Q2_K ? qd_sum_squares(x, QK_K) / QK_K : 2 * qd_sum_squares(x, QK_K) / QK_K;
  const int sub = type == QD_GGML_Q2_K || type == QD_GGML_Q3_K ? 16 : 32;
  for (int j = 0; j < QK_K / sub; j++) sw[j] = qd_matrix_weights(x + sub * j, qw + sub * j, sigma2, sub, w + sub * j);
}

/* Q4_K / Q5_K: the sub-blocks' scales and mins to 6 bits by make_qp_quants, weighted by the
 * sub-blocks' weight sums. */
static void affine_k_finish(const float *x, const float *scales, const float *mins, const float *sw, uint8_t *L,
                            uint8_t *out, int32_t nmax) {
  uint8_t ls[8], lm[8];
  const float d_block = make_qp_quants(8, 63, scales, ls, sw);
  const float m_block = make_qp_quants(8, 63, mins, lm, sw);
  for (int j = 0; j < 8; j++) qd_ggml_put_scale_min_k4(j, ls[j] < 63 ? ls[j] : 63, lm[j] < 63 ? lm[j] : 63, out + 4);
  put_f16(out, d_block);
  put_f16(out + 2, m_block);
  qd_ggml_k4_tail(x, L, out, nmax);
}

/* Q2_K: the 16 scales and 16 mins to 4 bits by make_qp_quants. */
static void q2_k_finish(const float *x, const float *scales, const float *mins, const float *sw, uint8_t *L,
                        uint8_t *out) {
  uint8_t ls[16], lm[16];
  const float d_block = make_qp_quants(16, 15, scales, ls, sw);
  const float m_block = make_qp_quants(16, 15, mins, lm, sw);
  put_f16(out + 80, d_block);
  put_f16(out + 82, m_block);
  for (int j = 0; j < 16; j++) out[j] = (uint8_t)(ls[j] | (lm[j] << 4));
  qd_ggml_sixteen_tail(QD_GGML_Q2_K, x, L, out);
}

/* Q3_K: the 16 scales by make_qx_quants (nmax 32) weighted by the sums, stored as its codes. */
static void q3_k_finish(const float *x, const float *scales, const float *sw, uint8_t *L, uint8_t *out) {
  int8_t ls[16];
  const float d_block = make_qx_weighted(16, 32, scales, ls, sw);
  uint8_t *sc = out + 96;
  for (int j = 0; j < 12; j++) sc[j] = 0;
  for (int j = 0; j < 16; j++) {
    const int l = ls[j]; /* 0..63: the scale's code + 32 */
    if (j < 8) sc[j] = (uint8_t)(l & 0xf);
    else sc[j - 8] |= (uint8_t)((l & 0xf) << 4);
    sc[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
  }
  put_f16(out + 108, d_block);
  qd_ggml_sixteen_tail(QD_GGML_Q3_K, x, L, out);
}

void qd_ggml_weighted_finish(int32_t type, const float *x, const float *scales, const float *mins, const float *sw,
                             uint8_t *L, uint8_t *out) {
  switch (type) {
  case QD_GGML_Q2_K: q2_k_finish(x, scales, mins, sw, L, out); break;
  case QD_GGML_Q3_K: q3_k_finish(x, scales, sw, L, out); break;
  case QD_GGML_Q4_K: affine_k_finish(x, scales, mins, sw, L, out, 15); break;
  case QD_GGML_Q5_K: affine_k_finish(x, scales, mins, sw, L, out, 31); break;
  default: qd_ggml_sixteen_finish(QD_GGML_Q6_K, x, scales, NULL, L, out); break;
  }
}

/* The sub-block fits, then qd_ggml_weighted_finish:
 * - Q4_K / Q5_K (quantize_row_q4_K_impl, q5_K_impl): sub-blocks of 32 by make_qkx3_quants (rmin
 *   -0.9, rdelta 0.05, 36 steps, squared error);
 * - Q2_K (q2_K_impl): sub-blocks of 16 the same way, nmax 3;
 * - Q3_K (q3_K_impl): sub-blocks of 16 by make_qx_quants (nmax 4);
 * - Q6_K (q6_K_impl): the reference's make_qx_quants (nmax 32) weighted by qw itself. */
void qd_ggml_weighted_block_ref(int32_t type, const float *x, const float *qw, uint8_t *out) {
  if (type == QD_GGML_IQ4_NL || type == QD_GGML_IQ4_XS) {
    (type == QD_GGML_IQ4_NL ? qd_ggml_iq4_nl_weighted_ref : qd_ggml_iq4_xs_weighted_ref)(x, qw, out);
    return;
  }
  uint8_t L[QK_K];
  float w[QK_K], sw[16], scales[16], mins[16];
  qd_ggml_matrix_weights(type, x, qw, w, sw);
  if (type == QD_GGML_Q4_K || type == QD_GGML_Q5_K) {
    const int32_t nmax = type == QD_GGML_Q4_K ? 15 : 31;
    for (int j = 0; j < 8; j++)
      scales[j] =
          qd_ggml_make_qkx2_quants(x + 32 * j, w + 32 * j, L + 32 * j, &mins[j], nmax, -0.9f, 0.05f, 36, 32, 0);
  } else if (type == QD_GGML_Q2_K) {
    for (int j = 0; j < 16; j++)
      scales[j] = qd_ggml_make_qkx2_quants(x + 16 * j, w + 16 * j, L + 16 * j, &mins[j], 3, -0.9f, 0.05f, 36, 16, 0);
  } else {
    const int32_t nmax = type == QD_GGML_Q3_K ? 4 : 32;
    for (int j = 0; j < 16; j++) scales[j] = make_qx_weighted(16, nmax, x + 16 * j, (int8_t *)L + 16 * j, w + 16 * j);
  }
  qd_ggml_weighted_finish(type, x, scales, mins, sw, L, out);
}

qd_status qd_ggml_quantize_weighted_ref(int32_t type, const float *x, uint64_t rows, uint64_t ne0, const float *qw,
                                        uint8_t *out) {
  if (qd_ggml_block_values(type) == 0 || ne0 == 0 || ne0 % qd_ggml_block_values(type) != 0) return QD_BAD_ARGUMENT;
  if (type == QD_GGML_Q8_0) return qd_ggml_quantize_ref(type, x, rows * (ne0 / 32), out);
  const uint64_t size = qd_ggml_block_bytes(type), values = qd_ggml_block_values(type), blocks = ne0 / values;
  for (uint64_t r = 0; r < rows; r++) {
    const float *xr = x + r * ne0;
    uint8_t *outr = out + r * blocks * size;
    if (qd_ggml_legacy_weighted(type)) {
      const float sigma2 = qd_ggml_row_sigma2(xr, ne0);
      float w[32];
      for (uint64_t b = 0; b < blocks; b++) {
        qd_matrix_weights(xr + 32 * b, qw + 32 * b, sigma2, 32, w);
        qd_ggml_legacy_weighted_block_ref(type, xr + 32 * b, w, outr + size * b);
      }
      continue;
    }
    for (uint64_t b = 0; b < blocks; b++)
      qd_ggml_weighted_block_ref(type, xr + values * b, qw + values * b, outr + size * b);
  }
  return QD_OK;
}
