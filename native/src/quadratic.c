/*
 * Row-wise quadratic forms δ H δᵀ in float64 (src/core/stats-error.ts's quadraticForm is
 * the oracle): the output error of weight changes δ (rows of `d`) on inputs whose Hessian is H,
 * what AWQ's searches and the calibrated quality report sum. Each row's sum runs over the same
 * terms in the same order as the TypeScript (lower triangle, i then j ascending; a zero δ_i adds
 * nothing), so the results are equal to the bit (built with -ffp-contract=off, and no fused
 * multiply-add in the AVX2 path). The speed comes from taking a block of rows at once, one per
 * independent chain: each H_ij is loaded once for all of them, and the block sits transposed in
 * `scratch` so the lanes of one j are contiguous. The AVX2 path keeps 32 rows in eight
 * registers, enough chains to cover the adder's latency; the portable one takes 16 and lets the
 * compiler vectorize the lane loop.
 */
#include <string.h>

#include "common.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define QF_AVX2 1
#endif

enum { QF_LANES = 16, QF_WIDE = 32 };

/* The block of rows r0.. (at most `lanes` of them, `width` lanes wide) transposed into scratch,
 * the missing rows as zeros (they add nothing and are not stored). */
static void transpose_block(const double *d, uint64_t r0, uint64_t rows, uint64_t n, uint64_t width,
                            double *scratch) {
  const uint64_t lanes = r0 + width < rows ? width : rows - r0;
  for (uint64_t j = 0; j < n; j++)
    for (uint64_t l = 0; l < width; l++) scratch[j * width + l] = l < lanes ? d[(r0 + l) * n + j] : 0;
}

static void forms_portable(const double *h, const double *d, uint64_t rows, uint64_t n, double *out,
                           double *scratch) {
  for (uint64_t r0 = 0; r0 < rows; r0 += QF_LANES) {
    transpose_block(d, r0, rows, n, QF_LANES, scratch);
    double acc[QF_LANES] = {0};
    for (uint64_t i = 0; i < n; i++) {
      const double *hi = h + i * n;
      double row[QF_LANES] = {0};
      for (uint64_t j = 0; j < i; j++) {
        const double hij = hi[j];
        const double *dj = scratch + j * QF_LANES;
        for (uint64_t l = 0; l < QF_LANES; l++) row[l] += hij * dj[l];
      }
      const double hii = hi[i];
      const double *di = scratch + i * QF_LANES;
      for (uint64_t l = 0; l < QF_LANES; l++)
        if (di[l] != 0) acc[l] += di[l] * (2 * row[l] + hii * di[l]);
    }
    for (uint64_t l = 0; l < QF_LANES && r0 + l < rows; l++) out[r0 + l] = acc[l];
  }
}

#ifdef QF_AVX2
__attribute__((target("avx2"))) static void forms_avx2(const double *h, const double *d, uint64_t rows, uint64_t n,
                                                       double *out, double *scratch) {
  enum { V = QF_WIDE / 4 };
  const __m256d zero = _mm256_setzero_pd(), two = _mm256_set1_pd(2);
  for (uint64_t r0 = 0; r0 < rows; r0 += QF_WIDE) {
    transpose_block(d, r0, rows, n, QF_WIDE, scratch);
    __m256d acc[V];
    for (int v = 0; v < V; v++) acc[v] = zero;
    for (uint64_t i = 0; i < n; i++) {
      const double *hi = h + i * n;
      __m256d row[V];
      for (int v = 0; v < V; v++) row[v] = zero;
      for (uint64_t j = 0; j < i; j++) {
        const __m256d hij = _mm256_broadcast_sd(hi + j);
        const double *dj = scratch + j * QF_WIDE;
        for (int v = 0; v < V; v++) row[v] = _mm256_add_pd(row[v], _mm256_mul_pd(hij, _mm256_loadu_pd(dj + 4 * v)));
      }
      const __m256d hii = _mm256_broadcast_sd(hi + i);
      const double *di = scratch + i * QF_WIDE;
      for (int v = 0; v < V; v++) {
        const __m256d x = _mm256_loadu_pd(di + 4 * v);
        const __m256d term = _mm256_mul_pd(x, _mm256_add_pd(_mm256_mul_pd(two, row[v]), _mm256_mul_pd(hii, x)));
        const __m256d taken = _mm256_cmp_pd(x, zero, _CMP_NEQ_UQ);
        acc[v] = _mm256_blendv_pd(acc[v], _mm256_add_pd(acc[v], term), taken);
      }
    }
    double lanes[QF_WIDE];
    for (int v = 0; v < V; v++) _mm256_storeu_pd(lanes + 4 * v, acc[v]);
    for (uint64_t l = 0; l < QF_WIDE && r0 + l < rows; l++) out[r0 + l] = lanes[l];
  }
}
#endif

void qd_quadratic_forms(const double *h, const double *d, uint64_t rows, uint64_t n, double *out, double *scratch,
                        int32_t avx2) {
#ifdef QF_AVX2
  if (avx2) {
    forms_avx2(h, d, rows, n, out, scratch);
    return;
  }
#endif
  forms_portable(h, d, rows, n, out, scratch);
}
