/*
 * A linear layer's output Y = X·Wᵀ + b in float64 (src/core/linear-eval.ts's linearOutput is the
 * oracle): X [n, k] and W [out, k] float32, each product exact in float64 (24 + 24 significant
 * bits), each output's sum from its bias (or 0) over i ascending — the TypeScript's order, so the
 * results are equal to the bit (built with -ffp-contract=off; no fused multiply-add in the AVX2
 * path). What /v1/linear-error computes three times (the float, weight-only and int8 products: the
 * integer codes are exact in float32, their sums exact in float64). The speed comes from a block
 * of output rows at once, one independent chain each, W's block transposed to float64 in `scratch`.
 */
#include "common.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LO_AVX2 1
#endif

enum { LO_LANES = 32 };

static void transpose_rows(const float *w, uint64_t o0, uint64_t out, uint64_t k, double *scratch) {
  const uint64_t lanes = o0 + LO_LANES < out ? LO_LANES : out - o0;
  for (uint64_t i = 0; i < k; i++)
    for (uint64_t l = 0; l < LO_LANES; l++) scratch[i * LO_LANES + l] = l < lanes ? w[(o0 + l) * k + i] : 0;
}

static void outputs_portable(const float *x, const float *w, const float *bias, uint64_t n, uint64_t k, uint64_t out,
                             double *y, double *scratch) {
  for (uint64_t o0 = 0; o0 < out; o0 += LO_LANES) {
    transpose_rows(w, o0, out, k, scratch);
    for (uint64_t s = 0; s < n; s++) {
      double acc[LO_LANES];
      for (uint64_t l = 0; l < LO_LANES; l++) acc[l] = bias && o0 + l < out ? bias[o0 + l] : 0;
      const float *xs = x + s * k;
      for (uint64_t i = 0; i < k; i++) {
        const double xi = xs[i];
        const double *wi = scratch + i * LO_LANES;
        for (uint64_t l = 0; l < LO_LANES; l++) acc[l] += xi * wi[l];
      }
      for (uint64_t l = 0; l < LO_LANES && o0 + l < out; l++) y[s * out + o0 + l] = acc[l];
    }
  }
}

#ifdef LO_AVX2
__attribute__((target("avx2"))) static void outputs_avx2(const float *x, const float *w, const float *bias, uint64_t n,
                                                         uint64_t k, uint64_t out, double *y, double *scratch) {
  enum { V = LO_LANES / 4 };
  for (uint64_t o0 = 0; o0 < out; o0 += LO_LANES) {
    transpose_rows(w, o0, out, k, scratch);
    double init[LO_LANES];
    for (uint64_t l = 0; l < LO_LANES; l++) init[l] = bias && o0 + l < out ? bias[o0 + l] : 0;
    for (uint64_t s = 0; s < n; s++) {
      __m256d acc[V];
      for (int v = 0; v < V; v++) acc[v] = _mm256_loadu_pd(init + 4 * v);
      const float *xs = x + s * k;
      for (uint64_t i = 0; i < k; i++) {
        const __m256d xi = _mm256_set1_pd((double)xs[i]);
        const double *wi = scratch + i * LO_LANES;
        for (int v = 0; v < V; v++) acc[v] = _mm256_add_pd(acc[v], _mm256_mul_pd(xi, _mm256_loadu_pd(wi + 4 * v)));
      }
      double lanes[LO_LANES];
      for (int v = 0; v < V; v++) _mm256_storeu_pd(lanes + 4 * v, acc[v]);
      for (uint64_t l = 0; l < LO_LANES && o0 + l < out; l++) y[s * out + o0 + l] = lanes[l];
    }
  }
}
#endif

void qd_linear_outputs(const float *x, const float *w, const float *bias, uint64_t n, uint64_t k, uint64_t out,
                       double *y, double *scratch, int32_t avx2) {
#ifdef LO_AVX2
  if (avx2) {
    outputs_avx2(x, w, bias, n, k, out, y, scratch);
    return;
  }
#endif
  outputs_portable(x, w, bias, n, k, out, y, scratch);
}
