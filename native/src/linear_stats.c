/*
 * A calibration batch added to a linear layer's statistics (src/core/linear-stats.ts's
 * addLinearStats is the oracle): Σ xᵀx into the k×k Hessian and Σ |x| per input, in float64.
 * Every entry takes the batch's tokens in order, one rounding per addition, as the TypeScript
 * does, so the results are equal to the bit. Each product x_i·x_j is exact (two float32 values:
 * 24 + 24 significant bits, a float64 holds 53), so a fused multiply-add, which rounds a·b + c
 * once, rounds exactly as the addition of the (exact) product does: the vector paths use FMA,
 * whatever -ffp-contract=off says about the compiler's own contractions.
 *
 * It is a symmetric rank-k update (BLAS's syrk), blocked as GEMMs are, with one constraint GEMMs
 * do not have: no entry's sum may be split or reordered, so the tokens are the innermost loop of
 * a tile, never a vector lane or a reduction. Hence:
 * - the tokens go in blocks of LS_TOKENS, converted once to float64 and packed in panels of 8
 *   inputs ([panel][token][8]): a tile reads its rows' values (broadcast) and its columns'
 *   vectors contiguously, token after token;
 * - the lower triangle goes by register tiles (AVX-512: 8 rows × 16 columns, AVX2: 6 × 8,
 *   portable: 4 × 8), each loaded from the Hessian once per token block, updated token by token,
 *   and stored: the Hessian is read and written once per LS_TOKENS tokens instead of per token;
 * - columns go in blocks of LS_COLUMNS, whose packed panels stay in L2 while every row below
 *   them goes by;
 * - a tile on the diagonal also updates the few entries above it, which the final mirror (the
 *   upper triangle from the lower, by cache-sized squares) overwrites with the lower ones.
 * Rows and columns past k are computed on zeros and never stored (a dummy row, masked columns).
 */
#include <math.h>
#include <string.h>

#include "common.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LS_X86 1
#endif

enum {
  LS_TOKENS = 128,  /* tokens per packed block (the results do not depend on it) */
  LS_PANEL = 8,     /* inputs per packed panel */
  LS_COLUMNS = 256, /* columns whose panels stay in L2 while the rows go by */
  LS_DUMMY = 16,    /* the widest tile: the dummy row past k */
  LS_MIRROR = 32,   /* the mirror's squares */
  LS_MAX_R = 8,     /* the most rows of a tile */
};

/* The packed block (one panel more than k needs: a 16-column tile at the last panel reads the next
 * one, masked off) and the dummy row. */
uint64_t qd_linear_stats_scratch(uint64_t k) {
  return (uint64_t)LS_TOKENS * ((k + LS_PANEL - 1) / LS_PANEL + 1) * LS_PANEL + LS_DUMMY;
}

/* Tokens t0..t0+nb of x as float64 panels: p[(j / 8)·LS_TOKENS·8 + t·8 + j % 8], zeros past k
 * (and in the spare panel after the last). */
static void pack_block(const float *x, uint64_t k, uint64_t t0, uint64_t nb, double *p) {
  const uint64_t panels = (k + LS_PANEL - 1) / LS_PANEL;
  memset(p + panels * LS_TOKENS * LS_PANEL, 0, LS_TOKENS * LS_PANEL * sizeof(double));
  for (uint64_t q = 0; q < panels; q++) {
    double *dst = p + q * LS_TOKENS * LS_PANEL;
    const uint64_t j0 = q * LS_PANEL, width = k - j0 < LS_PANEL ? k - j0 : LS_PANEL;
    for (uint64_t t = 0; t < nb; t++) {
      const float *src = x + (t0 + t) * k + j0;
      uint64_t l = 0;
      for (; l < width; l++) dst[t * LS_PANEL + l] = src[l];
      for (; l < LS_PANEL; l++) dst[t * LS_PANEL + l] = 0;
    }
  }
}

/* Where a tile's row i reads its values (8 doubles apart per token): inside the packed block, or
 * its first panel for a row past k (computed, never stored). */
static const double *row_values(const double *p, uint64_t i, uint64_t k) {
  return i < k ? p + (i / LS_PANEL) * LS_TOKENS * LS_PANEL + i % LS_PANEL : p;
}

/* A tile: rows i0.. (R of them, their Hessian rows at h[r] from column j0, the dummy past k),
 * columns j0.. (`cols` of them inside k), the block's nb tokens in order. */
typedef void (*ls_tile)(double *const *h, uint64_t cols, const double *const *rows, const double *col, uint64_t nb);

#define LS_PORT_R 4
#define LS_PORT_C 8

static void tile_portable(double *const *h, uint64_t cols, const double *const *rows, const double *col,
                          uint64_t nb) {
  double acc[LS_PORT_R][LS_PORT_C];
  for (int r = 0; r < LS_PORT_R; r++)
    for (int c = 0; c < LS_PORT_C; c++) acc[r][c] = (uint64_t)c < cols ? h[r][c] : 0;
  for (uint64_t t = 0; t < nb; t++) {
    const double *v = col + t * LS_PANEL;
    for (int r = 0; r < LS_PORT_R; r++) {
      const double a = rows[r][t * LS_PANEL];
      for (int c = 0; c < LS_PORT_C; c++) acc[r][c] += a * v[c];
    }
  }
  for (int r = 0; r < LS_PORT_R; r++)
    for (int c = 0; c < LS_PORT_C; c++)
      if ((uint64_t)c < cols) h[r][c] = acc[r][c];
}

#ifdef LS_X86
#define LS_AVX2_R 6
#define LS_AVX2_C 8

__attribute__((target("avx2,fma"))) static void tile_avx2(double *const *h, uint64_t cols, const double *const *rows,
                                                          const double *col, uint64_t nb) {
  const __m256i lane = _mm256_setr_epi64x(0, 1, 2, 3);
  const __m256i m0 = _mm256_cmpgt_epi64(_mm256_set1_epi64x((int64_t)cols), lane);
  const __m256i m1 = _mm256_cmpgt_epi64(_mm256_set1_epi64x((int64_t)cols - 4), lane);
  __m256d a0[LS_AVX2_R], a1[LS_AVX2_R];
  for (int r = 0; r < LS_AVX2_R; r++) {
    a0[r] = _mm256_maskload_pd(h[r], m0);
    a1[r] = _mm256_maskload_pd(h[r] + 4, m1);
  }
  for (uint64_t t = 0; t < nb; t++) {
    const __m256d v0 = _mm256_loadu_pd(col + t * LS_PANEL), v1 = _mm256_loadu_pd(col + t * LS_PANEL + 4);
    for (int r = 0; r < LS_AVX2_R; r++) {
      const __m256d b = _mm256_broadcast_sd(rows[r] + t * LS_PANEL);
      a0[r] = _mm256_fmadd_pd(b, v0, a0[r]);
      a1[r] = _mm256_fmadd_pd(b, v1, a1[r]);
    }
  }
  for (int r = 0; r < LS_AVX2_R; r++) {
    _mm256_maskstore_pd(h[r], m0, a0[r]);
    _mm256_maskstore_pd(h[r] + 4, m1, a1[r]);
  }
}

#define LS_AVX512_R 8
#define LS_AVX512_C 16

__attribute__((target("avx512f"))) static void tile_avx512(double *const *h, uint64_t cols,
                                                           const double *const *rows, const double *col,
                                                           uint64_t nb) {
  const __mmask8 m0 = cols >= 8 ? 0xff : (__mmask8)((1u << cols) - 1);
  const __mmask8 m1 = cols >= 16 ? 0xff : cols <= 8 ? 0 : (__mmask8)((1u << (cols - 8)) - 1);
  const double *col1 = col + LS_TOKENS * LS_PANEL; /* the next panel: columns j0 + 8.. */
  __m512d a0[LS_AVX512_R], a1[LS_AVX512_R];
  for (int r = 0; r < LS_AVX512_R; r++) {
    a0[r] = _mm512_maskz_loadu_pd(m0, h[r]);
    a1[r] = _mm512_maskz_loadu_pd(m1, h[r] + 8);
  }
  for (uint64_t t = 0; t < nb; t++) {
    const __m512d v0 = _mm512_loadu_pd(col + t * LS_PANEL), v1 = _mm512_loadu_pd(col1 + t * LS_PANEL);
    for (int r = 0; r < LS_AVX512_R; r++) {
      const __m512d b = _mm512_set1_pd(rows[r][t * LS_PANEL]);
      a0[r] = _mm512_fmadd_pd(b, v0, a0[r]);
      a1[r] = _mm512_fmadd_pd(b, v1, a1[r]);
    }
  }
  for (int r = 0; r < LS_AVX512_R; r++) {
    _mm512_mask_storeu_pd(h[r], m0, a0[r]);
    _mm512_mask_storeu_pd(h[r] + 8, m1, a1[r]);
  }
}
#endif

/* The lower triangle (and the few entries above the diagonal its tiles cover) of one packed block
 * of nb tokens, by tiles of R × C. */
static void update_block(double *hessian, uint64_t k, const double *p, uint64_t nb, double *dummy, ls_tile tile,
                         uint64_t R, uint64_t C) {
  double *h[LS_MAX_R];
  const double *rows[LS_MAX_R];
  for (uint64_t jb = 0; jb < k; jb += LS_COLUMNS) {
    const uint64_t je = jb + LS_COLUMNS < k ? jb + LS_COLUMNS : k;
    for (uint64_t i0 = jb - jb % R; i0 < k; i0 += R) {
      for (uint64_t r = 0; r < R; r++) rows[r] = row_values(p, i0 + r, k);
      /* columns up to the tile's last row (the lower triangle), within this column block */
      const uint64_t last = i0 + R - 1 < je - 1 ? i0 + R - 1 : je - 1;
      for (uint64_t j0 = jb; j0 <= last; j0 += C) {
        for (uint64_t r = 0; r < R; r++) h[r] = i0 + r < k ? hessian + (i0 + r) * k + j0 : dummy;
        const uint64_t cols = k - j0 < C ? k - j0 : C;
        tile(h, cols, rows, p + (j0 / LS_PANEL) * LS_TOKENS * LS_PANEL, nb);
      }
    }
  }
}

/* The upper triangle from the lower, a square of LS_MIRROR × LS_MIRROR at a time (a plain
 * transposed copy walks a column of k rows for every row). */
static void mirror(double *hessian, uint64_t k) {
  for (uint64_t i0 = 0; i0 < k; i0 += LS_MIRROR) {
    const uint64_t i1 = i0 + LS_MIRROR < k ? i0 + LS_MIRROR : k;
    for (uint64_t j0 = 0; j0 <= i0; j0 += LS_MIRROR) {
      for (uint64_t i = i0; i < i1; i++) {
        const uint64_t j1 = j0 + LS_MIRROR < i ? j0 + LS_MIRROR : i;
        for (uint64_t j = j0; j < j1; j++) hessian[j * k + i] = hessian[i * k + j];
      }
    }
  }
}

qd_status qd_linear_stats_add(double *hessian, double *abs_sum, uint64_t k, const float *x, uint64_t tokens,
                              double *scratch, uint64_t *bad, int32_t isa) {
  for (uint64_t i = 0; i < tokens * k; i++) {
    if (!isfinite(x[i])) {
      *bad = i;
      return QD_NOT_FINITE;
    }
  }
  ls_tile tile = tile_portable;
  uint64_t R = LS_PORT_R, C = LS_PORT_C;
#ifdef LS_X86
  __builtin_cpu_init();
  if (isa >= 2 && __builtin_cpu_supports("avx512f")) {
    tile = tile_avx512, R = LS_AVX512_R, C = LS_AVX512_C;
  } else if (isa >= 1 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    tile = tile_avx2, R = LS_AVX2_R, C = LS_AVX2_C;
  }
#else
  (void)isa;
#endif
  double *dummy = scratch + qd_linear_stats_scratch(k) - LS_DUMMY;
  for (uint64_t t0 = 0; t0 < tokens; t0 += LS_TOKENS) {
    const uint64_t nb = tokens - t0 < LS_TOKENS ? tokens - t0 : LS_TOKENS;
    for (uint64_t t = 0; t < nb; t++) {
      const float *xt = x + (t0 + t) * k;
      for (uint64_t j = 0; j < k; j++) abs_sum[j] += fabs((double)xt[j]);
    }
    pack_block(x, k, t0, nb, scratch);
    update_block(hessian, k, scratch, nb, dummy, tile, R, C);
  }
  mirror(hessian, k);
  return QD_OK;
}
