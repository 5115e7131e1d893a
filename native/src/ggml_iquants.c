/*
 * ggml's 4-bit non-linear quants IQ4_NL (blocks of 32) and IQ4_XS (super-blocks of 256), scalar:
 * the byte-exact twins of src/core/interop/ggml-iquants.ts (the oracle, itself byte-exact with
 * quantize_iq4_nl / quantize_iq4_xs of ggml-quants.c without weights, compiled without
 * contraction). Every statement is one of the oracle's, in its order: each float operation is
 * one float32 operation (-ffp-contract=off), and the refit sums run in the oracle's order, since
 * the search compares them in their last bits.
 */
#include "common.h"
#include "ref.h"

#define NTRY 7 /* the trials of quantize_iq4_nl / quantize_iq4_xs */

/* kvalues_iq4nl: the 16 levels a code stands for, times the block's scale. */
static const int8_t LEVELS[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* best_index_int8: the nearest level to x. A binary search brackets x, then the float32
 * comparison x − lo < hi − x picks lo, so a midpoint goes up; NaN ends on the last level. */
static int best_index(float x) {
  if (x <= (float)LEVELS[0]) return 0;
  if (x >= (float)LEVELS[15]) return 15;
  int ml = 0, mu = 15;
  while (mu - ml > 1) {
    const int mav = (ml + mu) / 2;
    if (x < (float)LEVELS[mav]) mu = mav;
    else ml = mav;
  }
  return x - (float)LEVELS[mu - 1] < (float)LEVELS[mu] - x ? mu - 1 : mu;
}


static void put_u16(uint8_t *out, uint16_t v) {
  out[0] = (uint8_t)v;
  out[1] = (uint8_t)(v >> 8);
}

/* The weighted sums of the least-squares refit for the reciprocal scale id (weights w, or x²). */
static void refit_sums(const float *x, const float *w, float id, float *sumqx, float *sumq2) {
  float sqx = 0.0f, sq2 = 0.0f;
  for (int j = 0; j < 32; j++) {
    const float q = (float)LEVELS[best_index(id * x[j])];
    const float wq = (w != NULL ? w[j] : x[j] * x[j]) * q;
    sqx += wq * x[j];
    sq2 += wq * q;
  }
  *sumqx = sqx, *sumq2 = sq2;
}

/* The scale search of quantize_row_iq4_nl_impl for 32 values (ntry 7). Its first trial's codes
 * are not kept: every caller recomputes them from the final scale. */
float qd_ggml_iq4_scale(const float *x, const float *w) {
  const float max = qd_ggml_signed_abs_max(x, 32);
  if (__builtin_fabsf(max) < QD_GROUP_MAX_EPS) return 0.0f;
  float d = -max / (float)LEVELS[0];
  float sumqx, sumq2;
  refit_sums(x, w, 1.0f / d, &sumqx, &sumq2);
  d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
  float best = d * sumqx;
  for (int itry = -NTRY; itry <= NTRY; itry++) {
    refit_sums(x, w, (float)(itry + LEVELS[0]) / max, &sumqx, &sumq2);
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

/* The 32 codes of x for the reciprocal id, as 16 bytes (low nibbles the first 16). */
static void pack_codes(const float *x, float id, uint8_t *q) {
  for (int j = 0; j < 16; j++) q[j] = (uint8_t)(best_index(id * x[j]) | (best_index(id * x[16 + j]) << 4));
}

void qd_ggml_iq4_nl_block_ref(const float *x, uint8_t *out) { qd_ggml_iq4_nl_weighted_ref(x, NULL, out); }

void qd_ggml_iq4_nl_weighted_ref(const float *x, const float *qw, uint8_t *out) {
  float w[32];
  if (qw != NULL) qd_ggml_iq4_weights(x, qw, 32, w);
  const float d = qd_ggml_iq4_scale(x, qw != NULL ? w : NULL);
  pack_codes(x, qd_ggml_iq4_nl_head(d, out), out + 2);
}

void qd_ggml_iq4_weights(const float *x, const float *qw, int size, float *w) {
  float sigma2 = qd_sum_squares(x, size);
  sigma2 *= 2.0f / (float)size;
  qd_matrix_weights(x, qw, sigma2, size, w);
}

float qd_ggml_iq4_nl_head(float d, uint8_t *out) {
  put_u16(out, qd_f32_to_f16(d));
  return d != 0.0f ? 1.0f / d : 0.0f; /* C's `d ? 1/d : 0`: NaN is true there */
}

void qd_ggml_iq4_xs_block_ref(const float *x, uint8_t *out) { qd_ggml_iq4_xs_weighted_ref(x, NULL, out); }

void qd_ggml_iq4_xs_weighted_ref(const float *x, const float *qw, uint8_t *out) {
  float scales[8], ids[8], w[256];
  if (qw != NULL) qd_ggml_iq4_weights(x, qw, 256, w);
  for (int ib = 0; ib < 8; ib++) scales[ib] = qd_ggml_iq4_scale(x + 32 * ib, qw != NULL ? w + 32 * ib : NULL);
  qd_ggml_iq4_xs_head(scales, out, ids);
  for (int ib = 0; ib < 8; ib++) pack_codes(x + 32 * ib, ids[ib], out + 8 + 16 * ib);
}

void qd_ggml_iq4_xs_head(const float *scales, uint8_t *out, float *ids) {
  float max_scale = 0.0f, amax_scale = 0.0f;
  for (int ib = 0; ib < 8; ib++) {
    if (__builtin_fabsf(scales[ib]) > amax_scale) {
      amax_scale = __builtin_fabsf(scales[ib]);
      max_scale = scales[ib];
    }
  }
  const float d = -max_scale / 32.0f; /* −0 when every scale is 0: stored as 0x8000 */
  put_u16(out, qd_f32_to_f16(d));
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  uint16_t scales_h = 0;
  for (int ib = 0; ib < 8; ib++) {
    int32_t l = qd_nearest_int(id * scales[ib]);
    l = l < -32 ? -32 : l > 31 ? 31 : l;
    const float dl = d * (float)l; /* the unrounded d: the codes do not see fp16(d) */
    ids[ib] = dl != 0.0f ? 1.0f / dl : 0.0f;
    const int u = l + 32;
    if (ib % 2 == 0) out[4 + ib / 2] = (uint8_t)(u & 0xf);
    else out[4 + ib / 2] |= (uint8_t)((u & 0xf) << 4);
    scales_h |= (uint16_t)((u >> 4) << (2 * ib));
  }
  put_u16(out + 2, scales_h);
}
