/*
 * The GPTQ algorithm's two costly steps (src/core/interop/gptq-solve.ts, the oracle) in float64:
 * the upper Cholesky factor of the damped inverse Hessian, and the column loop with its lazy
 * batch updates. Every sum runs over the same terms in the same order as the TypeScript, so the
 * results are equal to the bit (built with -ffp-contract=off: no fused multiply-add). The speed
 * comes from memory order and independent chains, never from reassociating a sum:
 *
 * - the triangular solves keep L⁻¹ transposed, so each sum reads two contiguous rows;
 * - several independent sums (rows of a factor, columns of L⁻¹, entries of the inverse) run side
 *   by side, four chains instead of one, as each sum on its own is bound by the adder's latency;
 * - the lazy update W[:, b1:] -= E · U[b0:b1, b1:] is tiled (rows × columns) so a tile of W and
 *   of U stay in cache while the block's columns go by, in the same order for every entry.
 */
#include <math.h>
#include <string.h>

#include "common.h"

/* In place: a (n×n, symmetric positive definite) → its lower Cholesky factor. Returns -1, or the
 * column whose pivot is not positive. */
static int64_t cholesky_lower(double *a, uint64_t n) {
  for (uint64_t j = 0; j < n; j++) {
    const double *aj = a + j * n;
    double d = aj[j];
    for (uint64_t k = 0; k < j; k++) d -= aj[k] * aj[k];
    if (!(d > 0)) return (int64_t)j;
    const double ljj = sqrt(d);
    a[j * n + j] = ljj;
    uint64_t i = j + 1;
    for (; i + 4 <= n; i += 4) {
      const double *r0 = a + i * n, *r1 = r0 + n, *r2 = r1 + n, *r3 = r2 + n;
      double s0 = r0[j], s1 = r1[j], s2 = r2[j], s3 = r3[j];
      for (uint64_t k = 0; k < j; k++) {
        const double v = aj[k];
        s0 -= r0[k] * v;
        s1 -= r1[k] * v;
        s2 -= r2[k] * v;
        s3 -= r3[k] * v;
      }
      a[i * n + j] = s0 / ljj;
      a[(i + 1) * n + j] = s1 / ljj;
      a[(i + 2) * n + j] = s2 / ljj;
      a[(i + 3) * n + j] = s3 / ljj;
    }
    for (; i < n; i++) {
      const double *ri = a + i * n;
      double s = ri[j];
      for (uint64_t k = 0; k < j; k++) s -= ri[k] * aj[k];
      a[i * n + j] = s / ljj;
    }
    for (uint64_t k = j + 1; k < n; k++) a[j * n + k] = 0;
  }
  return -1;
}

int64_t qd_gptq_inverse_cholesky(double *h, uint64_t n, double *u, double *lit) {
  int64_t failed = cholesky_lower(h, n); /* h now holds L */
  if (failed >= 0) return failed;
  const double *l = h;
  /* L⁻¹ by forward substitution, stored transposed: lit[c][i] = L⁻¹[i][c]. Four columns at a
   * time: below their first rows, each row's four sums share the terms k ≥ c + 4 (after each
   * has taken its own few terms k < c + 4 first, as k runs upwards in every sum). */
  uint64_t c = 0;
  for (; c + 4 <= n; c += 4) {
    double *col[4] = {lit + c * n, lit + (c + 1) * n, lit + (c + 2) * n, lit + (c + 3) * n};
    for (uint64_t q = 0; q < 4; q++) {
      for (uint64_t i = 0; i < c + q; i++) col[q][i] = 0;
      for (uint64_t i = c + q; i < c + 4; i++) {
        const double *li = l + i * n;
        double s = i == c + q ? 1 : 0;
        for (uint64_t k = c + q; k < i; k++) s -= li[k] * col[q][k];
        col[q][i] = s / li[i];
      }
    }
    for (uint64_t i = c + 4; i < n; i++) {
      const double *li = l + i * n;
      double s[4] = {0, 0, 0, 0};
      for (uint64_t q = 0; q < 4; q++)
        for (uint64_t k = c + q; k < c + 4; k++) s[q] -= li[k] * col[q][k];
      double s0 = s[0], s1 = s[1], s2 = s[2], s3 = s[3];
      const double *c0 = col[0], *c1 = col[1], *c2 = col[2], *c3 = col[3];
      for (uint64_t k = c + 4; k < i; k++) {
        const double v = li[k];
        s0 -= v * c0[k];
        s1 -= v * c1[k];
        s2 -= v * c2[k];
        s3 -= v * c3[k];
      }
      col[0][i] = s0 / li[i];
      col[1][i] = s1 / li[i];
      col[2][i] = s2 / li[i];
      col[3][i] = s3 / li[i];
    }
  }
  for (; c < n; c++) {
    double *col = lit + c * n;
    for (uint64_t i = 0; i < c; i++) col[i] = 0;
    for (uint64_t i = c; i < n; i++) {
      const double *li = l + i * n;
      double s = i == c ? 1 : 0;
      for (uint64_t k = c; k < i; k++) s -= li[k] * col[k];
      col[i] = s / li[i];
    }
  }
  /* H⁻¹ = L⁻ᵀ L⁻¹ into h (lower and upper): entry (i, j ≤ i) = Σ_{k ≥ i} L⁻¹[k][i] · L⁻¹[k][j] */
  double *inv = h;
  for (uint64_t i = 0; i < n; i++) {
    const double *ci = lit + i * n;
    uint64_t j = 0;
    for (; j + 4 <= i + 1; j += 4) {
      const double *c0 = lit + j * n, *c1 = c0 + n, *c2 = c1 + n, *c3 = c2 + n;
      double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (uint64_t k = i; k < n; k++) {
        const double v = ci[k];
        s0 += v * c0[k];
        s1 += v * c1[k];
        s2 += v * c2[k];
        s3 += v * c3[k];
      }
      inv[i * n + j] = s0;
      inv[i * n + j + 1] = s1;
      inv[i * n + j + 2] = s2;
      inv[i * n + j + 3] = s3;
    }
    for (; j <= i; j++) {
      const double *cj = lit + j * n;
      double s = 0;
      for (uint64_t k = i; k < n; k++) s += ci[k] * cj[k];
      inv[i * n + j] = s;
    }
  }
  /* the upper triangle, mirrored only now: the sums above read rows of lit, never of inv */
  for (uint64_t i = 0; i < n; i++)
    for (uint64_t j = 0; j < i; j++) inv[j * n + i] = inv[i * n + j];
  failed = cholesky_lower(inv, n);
  if (failed >= 0) return failed;
  for (uint64_t i = 0; i < n; i++)
    for (uint64_t j = 0; j < n; j++) u[j * n + i] = j <= i ? inv[i * n + j] : 0;
  return -1;
}

/* AutoGPTQ's find_params for one row's values (gptq-solve.ts findParams). */
static void find_params(const double *v, uint64_t count, double maxq, int32_t sym, double *scale, double *zero) {
  double lo = 0, hi = 0;
  for (uint64_t i = 0; i < count; i++) {
    if (v[i] < lo) lo = v[i];
    if (v[i] > hi) hi = v[i];
  }
  if (sym) {
    hi = fabs(lo) > hi ? fabs(lo) : hi;
    if (lo < 0) lo = -hi;
  }
  if (lo == 0 && hi == 0) {
    lo = -1;
    hi = 1;
  }
  *scale = (hi - lo) / maxq;
  *zero = sym ? (maxq + 1) / 2 : rint(-lo / *scale);
}

enum { LAZY_ROWS = 32, LAZY_COLS = 256 };

void qd_gptq_columns(double *wp, uint64_t out, uint64_t n, const double *u, double maxq, uint64_t group_size,
                     int32_t grouped, int32_t sym, uint64_t block, uint8_t *codes, double *scale, double *zero,
                     double *scratch) {
  double *row_scale = scratch, *row_zero = scratch + out;
  double *err = scratch + 2 * out, *w1 = err + out * block;
  if (!grouped) {
    for (uint64_t r = 0; r < out; r++) {
      find_params(wp + r * n, n, maxq, sym, &row_scale[r], &row_zero[r]);
      scale[r] = row_scale[r];
      zero[r] = row_zero[r];
    }
  }
  for (uint64_t b0 = 0; b0 < n; b0 += block) {
    const uint64_t b1 = b0 + block < n ? b0 + block : n, width = b1 - b0;
    for (uint64_t r = 0; r < out; r++) memcpy(w1 + r * block, wp + r * n + b0, width * sizeof(double));
    for (uint64_t j = b0; j < b1; j++) {
      if (grouped && j % group_size == 0) {
        const uint64_t g = j / group_size, end = j + group_size < n ? j + group_size : n;
        for (uint64_t r = 0; r < out; r++) {
          find_params(wp + r * n + j, end - j, maxq, sym, &row_scale[r], &row_zero[r]);
          scale[g * out + r] = row_scale[r];
          zero[g * out + r] = row_zero[r];
        }
      }
      const double d = u[j * n + j];
      const uint64_t c = j - b0;
      const double *uj = u + j * n + b0;
      for (uint64_t r = 0; r < out; r++) {
        double *row = w1 + r * block;
        const double x = row[c], s = row_scale[r], z = row_zero[r];
        double q = rint(x / s) + z;
        q = q < 0 ? 0 : q > maxq ? maxq : q;
        codes[r * n + j] = (uint8_t)q;
        const double e = (x - s * (q - z)) / d;
        err[r * block + c] = e;
        for (uint64_t k = c + 1; k < width; k++) row[k] -= e * uj[k];
      }
    }
    /* W[:, b1:] -= E · U[b0:b1, b1:], tile by tile; each entry takes the block's columns in order */
    for (uint64_t r0 = 0; r0 < out; r0 += LAZY_ROWS) {
      const uint64_t r1 = r0 + LAZY_ROWS < out ? r0 + LAZY_ROWS : out;
      for (uint64_t k0 = b1; k0 < n; k0 += LAZY_COLS) {
        const uint64_t k1 = k0 + LAZY_COLS < n ? k0 + LAZY_COLS : n;
        for (uint64_t c = 0; c < width; c++) {
          const double *uc = u + (b0 + c) * n;
          for (uint64_t r = r0; r < r1; r++) {
            const double e = err[r * block + c];
            if (e == 0) continue;
            double *row = wp + r * n;
            for (uint64_t k = k0; k < k1; k++) row[k] -= e * uc[k];
          }
        }
      }
    }
  }
}
