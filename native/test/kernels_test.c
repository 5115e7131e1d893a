/*
 * C-level tests: every SIMD variant against the scalar reference, byte for byte — outputs,
 * statuses and reported indices — over lengths 1 … 2·block + 1, unaligned pointers and starts,
 * every layout shape, every code kind, NaN / ±Infinity / halves / saturation, and exhaustive
 * float16 / bfloat16 conversions. Run by `npm test` (test/native/c-kernels.test.ts), also under
 * AddressSanitizer and UndefinedBehaviorSanitizer.
 *
 * Usage: kernels_test [isa ...]   (default: every ISA this CPU supports)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../include/quantd.h"
#include "../src/common.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 11);
}
static float uniform(void) { return (float)(next_u32() >> 8) / 16777216.0f; }

static int failures = 0;
static long checks = 0;
#define CHECK(cond, ...)                                                                                        \
  do {                                                                                                          \
    checks++;                                                                                                   \
    if (!(cond)) {                                                                                              \
      if (failures < 30) {                                                                                      \
        fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                    \
        fprintf(stderr, __VA_ARGS__);                                                                           \
        fprintf(stderr, "\n");                                                                                  \
      }                                                                                                         \
      failures++;                                                                                               \
    }                                                                                                           \
  } while (0)

/* Values that stress the numerics: exact halves after scaling, ±0, subnormals, huge, specials. */
static float interesting(float scale, int allow_nan, int allow_inf) {
  uint32_t r = next_u32() % 100;
  if (r < 40) return (uniform() * 2 - 1) * 300 * scale;
  if (r < 60) return ((float)((int32_t)(next_u32() % 600) - 300) + 0.5f) * scale; /* halves */
  if (r < 65) return (next_u32() & 1) ? 0.0f : -0.0f;
  if (r < 70) return qd_float(next_u32() & 0x807fffffu); /* subnormals */
  if (r < 75) return (uniform() * 2 - 1) * 3e38f;
  if (r < 80) return qd_float(next_u32()) * 0.0f + ((next_u32() & 1) ? 1e30f : -1e30f);
  if (r < 83 && allow_inf) return (next_u32() & 1) ? INFINITY : -INFINITY;
  if (r < 85 && allow_nan) return NAN;
  if (r < 90) return (float)((int32_t)(next_u32() % 41) - 20);
  return qd_float(next_u32() & 0xbfffffffu); /* any finite-ish bit pattern below 2 in exponent */
}

static const int32_t RANGES[][2] = {
    [QD_CODES_I8] = {-128, 127}, [QD_CODES_U8] = {0, 255}, [QD_CODES_I16] = {-32768, 32767},
    [QD_CODES_I32] = {INT32_MIN, INT32_MAX}, [QD_CODES_I4] = {-8, 7}, [QD_CODES_U4] = {0, 15},
    [QD_CODES_I2] = {-2, 1}, [QD_CODES_U2] = {0, 3}, [QD_CODES_E4M3] = {-448, 448}, [QD_CODES_E5M2] = {-57344, 57344},
};

typedef struct {
  qd_layout l;
  uint64_t numel;
} shape;

static shape random_shape(uint64_t max_numel) {
  shape s;
  uint32_t kind = next_u32() % 5;
  uint64_t n = 1 + next_u32() % max_numel;
  if (kind == 0) { /* per tensor */
    s.l = (qd_layout){1, 1, n};
  } else if (kind == 1) { /* per channel, last axis (inner 1) */
    uint64_t c = 1 + next_u32() % 80;
    s.l = (qd_layout){1 + n / c, c, 1};
  } else if (kind == 2) { /* per channel / group / token, long runs */
    uint64_t inner = 1 + next_u32() % 150;
    s.l = (qd_layout){1 + next_u32() % 3, 1 + next_u32() % 5, inner};
  } else if (kind == 3) { /* short runs */
    s.l = (qd_layout){1 + next_u32() % 4, 1 + next_u32() % 9, 1 + next_u32() % 7};
  } else {
    s.l = (qd_layout){1, 1 + next_u32() % 6, 32 * (1 + next_u32() % 5)};
  }
  s.numel = s.l.outer * s.l.channels * s.l.inner;
  return s;
}

static void random_qparams(uint64_t channels, int32_t kind, int float_zp, int32_t qmin, int32_t qmax, float *scale,
                           float *zp) {
  for (uint64_t c = 0; c < channels; c++) {
    uint32_t r = next_u32() % 4;
    scale[c] = r == 0 ? 0.125f : r == 1 ? 0.1f : r == 2 ? uniform() * 5 + 1e-3f : 1e-6f;
    if (kind == QD_CODES_E4M3 || kind == QD_CODES_E5M2) {
      zp[c] = 0;
    } else if (float_zp) {
      zp[c] = (uniform() * 2 - 1) * 300;
    } else {
      int64_t span = (int64_t)qmax - qmin;
      zp[c] = (float)(qmin + (int64_t)(((uint64_t)next_u32() << 16 ^ next_u32()) % (uint64_t)(span + 1)));
    }
  }
}

/* ---- per op ---- */

static void test_minmax(const qd_kernels *k) {
  for (int iter = 0; iter < 3000; iter++) {
    shape s = random_shape(600);
    uint64_t start = next_u32() % s.numel, count = next_u32() % (s.numel - start + 1);
    int specials = next_u32() % 4 == 0;
    float *x = malloc(sizeof(float) * (s.numel + 1)) ;
    float *xs = x + (next_u32() & 1); /* unaligned half the time */
    for (uint64_t i = 0; i < s.numel; i++) {
      uint32_t r = next_u32() % 10;
      xs[i] = r < 2 ? ((next_u32() & 1) ? 0.0f : -0.0f) : interesting(1, specials, specials);
    }
    uint64_t c = s.l.channels;
    float *m1 = malloc(4 * c), *M1 = malloc(4 * c), *m2 = malloc(4 * c), *M2 = malloc(4 * c);
    for (uint64_t i = 0; i < c; i++) m1[i] = m2[i] = INFINITY, M1[i] = M2[i] = -INFINITY;
    uint64_t b1 = 7, b2 = 7;
    qd_status s1 = qd_kernels_ref.minmax(xs + start, start, count, &s.l, m1, M1, &b1);
    qd_status s2 = k->minmax(xs + start, start, count, &s.l, m2, M2, &b2);
    CHECK(s1 == s2, "%s minmax status %d vs %d", k->isa, s1, s2);
    if (s1 == QD_OK) {
      CHECK(!memcmp(m1, m2, 4 * c) && !memcmp(M1, M2, 4 * c), "%s minmax values (layout %llu %llu %llu)", k->isa,
            (unsigned long long)s.l.outer, (unsigned long long)s.l.channels, (unsigned long long)s.l.inner);
    } else {
      CHECK(b1 == b2, "%s minmax bad index %llu vs %llu", k->isa, (unsigned long long)b1, (unsigned long long)b2);
    }
    free(x), free(m1), free(M1), free(m2), free(M2);
  }
}

static void test_quantize(const qd_kernels *k) {
  for (int iter = 0; iter < 20000; iter++) {
    int32_t kind = (int32_t)(next_u32() % 10);
    shape s = random_shape(iter % 10 == 0 ? 3000 : 300);
    int per = qd_codes_per_byte(kind);
    uint64_t start = (next_u32() % s.numel) / (uint64_t)per * (uint64_t)per;
    uint64_t count = next_u32() % (s.numel - start + 1);
    qd_quant q = {kind, RANGES[kind][0], RANGES[kind][1], (int32_t)(next_u32() & 1), (int32_t)(next_u32() % 3 == 0)};
    if (next_u32() % 3 == 0 && kind != QD_CODES_I32) { /* a narrowed range */
      int32_t lo = q.qmin + (int32_t)(next_u32() % 3), hi = q.qmax - (int32_t)(next_u32() % 3);
      if (lo < hi) q.qmin = lo, q.qmax = hi;
    }
    int float_zp = q.add_zero_point_first && (next_u32() & 1);
    int specials = next_u32() % 3 == 0;
    float *scale = malloc(4 * s.l.channels), *zp = malloc(4 * s.l.channels);
    random_qparams(s.l.channels, kind, float_zp, q.qmin, q.qmax, scale, zp);
    float *x = malloc(sizeof(float) * (s.numel + 3));
    float *xs = x + next_u32() % 4;
    for (uint64_t i = 0; i < s.numel; i++) xs[i] = interesting(scale[(i / s.l.inner) % s.l.channels], specials, 1);
    size_t nb = qd_code_bytes(kind, count) + 8;
    uint8_t *o1 = malloc(nb), *o2 = malloc(nb + 1);
    uint8_t *o2s = o2 + (next_u32() & 1);
    memset(o1, 0xa5, nb);
    memset(o2s, 0xa5, nb);
    uint64_t b1 = 7, b2 = 7;
    qd_status s1 = qd_kernels_ref.quantize(xs + start, start, count, &s.l, scale, zp, &q, o1, &b1);
    qd_status s2 = k->quantize(xs + start, start, count, &s.l, scale, zp, &q, o2s, &b2);
    CHECK(s1 == s2, "%s quantize kind %d status %d vs %d", k->isa, kind, s1, s2);
    if (s1 == QD_OK) {
      size_t used = qd_code_bytes(kind, count);
      int same = !memcmp(o1, o2s, used);
      CHECK(same, "%s quantize kind %d add_first %d layout %llu %llu %llu start %llu count %llu", k->isa, kind,
            q.add_zero_point_first, (unsigned long long)s.l.outer, (unsigned long long)s.l.channels,
            (unsigned long long)s.l.inner, (unsigned long long)start, (unsigned long long)count);
      CHECK(o2s[used] == 0xa5, "%s quantize kind %d wrote past the end", k->isa, kind);
    } else {
      CHECK(b1 == b2, "%s quantize bad index %llu vs %llu", k->isa, (unsigned long long)b1, (unsigned long long)b2);
    }
    free(scale), free(zp), free(x), free(o1), free(o2);
  }
}

static void test_dequantize(const qd_kernels *k) {
  for (int iter = 0; iter < 10000; iter++) {
    int32_t kind = (int32_t)(next_u32() % 10);
    shape s = random_shape(iter % 10 == 0 ? 3000 : 300);
    int per = qd_codes_per_byte(kind);
    uint64_t start = (next_u32() % s.numel) / (uint64_t)per * (uint64_t)per;
    uint64_t count = next_u32() % (s.numel - start + 1);
    size_t nb = qd_code_bytes(kind, s.numel) + 4;
    uint8_t *codes = malloc(nb + 1);
    uint8_t *cs = codes + (next_u32() & 1);
    for (size_t i = 0; i < nb; i++) cs[i] = (uint8_t)next_u32();
    float *scale = malloc(4 * s.l.channels), *zp = malloc(4 * s.l.channels);
    random_qparams(s.l.channels, kind, next_u32() & 1, RANGES[kind][0], RANGES[kind][1], scale, zp);
    float *o1 = malloc(4 * (count + 1)), *o2 = malloc(4 * (count + 2));
    float *o2s = o2 + (next_u32() & 1);
    const uint8_t *at = cs + qd_code_bytes(kind, start) - (kind >= QD_CODES_I4 && kind <= QD_CODES_U2 ? 0 : 0);
    qd_status s1 = qd_kernels_ref.dequantize(at, kind, start, count, &s.l, scale, zp, o1);
    qd_status s2 = k->dequantize(at, kind, start, count, &s.l, scale, zp, o2s);
    CHECK(s1 == s2 && !memcmp(o1, o2s, 4 * count), "%s dequantize kind %d layout %llu %llu %llu", k->isa, kind,
          (unsigned long long)s.l.outer, (unsigned long long)s.l.channels, (unsigned long long)s.l.inner);
    free(codes), free(scale), free(zp), free(o1), free(o2);
  }
}

static void test_fake_quantize(const qd_kernels *k) {
  for (int iter = 0; iter < 6000; iter++) {
    int32_t kind = (int32_t)(next_u32() % 8); /* integer grids */
    shape s = random_shape(400);
    uint64_t start = next_u32() % s.numel, count = next_u32() % (s.numel - start + 1);
    int float_zp = next_u32() % 4 == 0;
    float *scale = malloc(4 * s.l.channels), *zp = malloc(4 * s.l.channels);
    random_qparams(s.l.channels, kind, float_zp, RANGES[kind][0], RANGES[kind][1], scale, zp);
    int specials = next_u32() % 3 == 0;
    float *x = malloc(sizeof(float) * (s.numel + 1));
    for (uint64_t i = 0; i < s.numel; i++) x[i] = interesting(scale[(i / s.l.inner) % s.l.channels], specials, 1);
    float *o1 = malloc(4 * count + 4), *o2 = malloc(4 * count + 4);
    uint8_t *m1 = malloc(count + 1), *m2 = malloc(count + 1);
    uint64_t b1 = 7, b2 = 7;
    qd_status s1 = qd_kernels_ref.fake_quantize(x + start, start, count, &s.l, scale, zp, RANGES[kind][0],
                                                RANGES[kind][1], float_zp, o1, m1, &b1);
    qd_status s2 = k->fake_quantize(x + start, start, count, &s.l, scale, zp, RANGES[kind][0], RANGES[kind][1],
                                    float_zp, o2, m2, &b2);
    CHECK(s1 == s2, "%s fake_quantize status", k->isa);
    if (s1 == QD_OK)
      CHECK(!memcmp(o1, o2, 4 * count) && !memcmp(m1, m2, count), "%s fake_quantize kind %d float_zp %d", k->isa,
            kind, float_zp);
    else
      CHECK(b1 == b2, "%s fake_quantize bad index", k->isa);
    free(scale), free(zp), free(x), free(o1), free(o2), free(m1), free(m2);
  }
}

/* A random choose mode for codes `kind` (fp8: the symmetric ones) and the quantization it implies:
 * per_token modes add the zero point before rounding, per_tensor / per_group ones after. */
static void random_choice(int32_t kind, qd_choose *c, qd_quant *q) {
  const int fp8 = kind == QD_CODES_E4M3 || kind == QD_CODES_E5M2;
  const uint32_t m = next_u32() % 5;
  qd_choose chosen = {0, RANGES[kind][0], RANGES[kind][1], 1.1920929e-7f, 0};
  chosen.mode = fp8 ? (m & 1 ? QD_SYMMETRIC : QD_TOKEN_SYMMETRIC) : (int32_t)m;
  if (chosen.mode == QD_TOKEN_SYMMETRIC && RANGES[kind][0] >= 0) chosen.mode = QD_TOKEN_AFFINE;
  chosen.symmetric_zero_point =
      RANGES[kind][0] < 0 ? 0 : (kind == QD_CODES_U8 ? 128 : kind == QD_CODES_U4 ? 8 : 2);
  qd_quant quant = {kind, chosen.qmin, chosen.qmax, chosen.mode != QD_AFFINE && chosen.mode != QD_SYMMETRIC, 1};
  *c = chosen;
  *q = quant;
}

static void test_choose_quantize(const qd_kernels *k) {
  for (int iter = 0; iter < 6000; iter++) {
    int32_t kind = (int32_t)(next_u32() % 10);
    qd_choose c;
    qd_quant q;
    random_choice(kind, &c, &q);
    if (c.mode == QD_AFFINE || c.mode == QD_SYMMETRIC) q.add_zero_point_first = 1; /* per_group */
    uint64_t unit = 1 + next_u32() % 200, units = 1 + next_u32() % 12;
    int per = qd_codes_per_byte(kind);
    uint64_t first = next_u32() % 4;
    while ((first * unit) % (uint64_t)per) first++;
    int specials = next_u32() % 5 == 0;
    float *x = malloc(sizeof(float) * unit * units);
    float span = (next_u32() & 1) ? 1.0f : 1e-30f;
    for (uint64_t i = 0; i < unit * units; i++) x[i] = interesting(span, specials, specials);
    if (next_u32() % 8 == 0)
      for (uint64_t i = 0; i < unit; i++) x[i] = 2.5f; /* an all-equal unit */
    float *s1v = malloc(4 * units), *s2v = malloc(4 * units);
    double *z1 = malloc(8 * units), *z2 = malloc(8 * units);
    size_t nb = qd_code_bytes(kind, unit * units) + 4;
    uint8_t *o1 = calloc(nb, 1), *o2 = calloc(nb, 1);
    uint64_t b1 = 7, b2 = 7;
    qd_status r1 = qd_kernels_ref.choose_quantize(x, first, units, unit, &c, &q, s1v, z1, o1, &b1);
    qd_status r2 = k->choose_quantize(x, first, units, unit, &c, &q, s2v, z2, o2, &b2);
    CHECK(r1 == r2, "%s choose_quantize status %d vs %d", k->isa, r1, r2);
    if (r1 == QD_OK) {
      CHECK(!memcmp(s1v, s2v, 4 * units) && !memcmp(z1, z2, 8 * units) &&
                !memcmp(o1, o2, qd_code_bytes(kind, unit * units)),
            "%s choose_quantize kind %d mode %d unit %llu", k->isa, kind, c.mode, (unsigned long long)unit);
    } else {
      CHECK(b1 == b2, "%s choose_quantize bad index", k->isa);
    }
    free(x), free(s1v), free(s2v), free(z1), free(z2), free(o1), free(o2);
  }
}

static int close_to(double a, double b, double rel) {
  if (a != a || b != b) return a != a && b != b;           /* NaN only matches NaN */
  if (a - a != 0 || b - b != 0) return a == b;             /* infinities only match themselves */
  double d = a > b ? a - b : b - a;
  double m = (a > b ? a : b) > 0 ? (a > b ? a : b) : -(a < b ? a : b);
  return d <= rel * m + 1e-30;
}

static void test_quality(const qd_kernels *k) {
  for (int iter = 0; iter < 4000; iter++) {
    int32_t kind = (int32_t)(next_u32() % 10);
    shape s = random_shape(iter % 10 == 0 ? 3000 : 400);
    int per = qd_codes_per_byte(kind);
    uint64_t start = (next_u32() % s.numel) / (uint64_t)per * (uint64_t)per;
    uint64_t count = next_u32() % (s.numel - start + 1);
    qd_quant q = {kind, RANGES[kind][0], RANGES[kind][1], (int32_t)(next_u32() & 1), 0};
    float *scale = malloc(4 * s.l.channels), *zp = malloc(4 * s.l.channels);
    random_qparams(s.l.channels, kind, 0, q.qmin, q.qmax, scale, zp);
    float *x = malloc(sizeof(float) * s.numel);
    /* every 8th case at |x| ~ 1e20..1e30, where float32 squares overflow */
    const float huge = iter % 8 == 0 ? 1e20f * (float)(1 + next_u32() % 1000000000u) : 1.0f;
    for (uint64_t c = 0; c < s.l.channels && huge > 1.0f; c++) scale[c] *= huge;
    for (uint64_t i = 0; i < s.numel; i++) x[i] = interesting(scale[(i / s.l.inner) % s.l.channels], 0, 0);
    uint8_t *codes = malloc(qd_code_bytes(kind, count) + 8);
    uint64_t bad;
    if (qd_kernels_ref.quantize(x + start, start, count, &s.l, scale, zp, &q, codes, &bad) != QD_OK) {
      free(scale), free(zp), free(x), free(codes);
      continue;
    }
    qd_quality a = {0}, b = {0};
    qd_status s1 = qd_kernels_ref.quality(x + start, codes, start, count, &s.l, scale, zp, &q, &a);
    qd_status s2 = k->quality(x + start, codes, start, count, &s.l, scale, zp, &q, &b);
    CHECK(s1 == s2 && a.count == b.count && a.clipped == b.clipped, "%s quality counts kind %d: clipped %llu vs %llu",
          k->isa, kind, (unsigned long long)a.clipped, (unsigned long long)b.clipped);
    CHECK(close_to(a.sum_sq_error, b.sum_sq_error, 1e-5) && close_to(a.sum_sq_value, b.sum_sq_value, 1e-5) &&
              close_to(a.max_abs_error, b.max_abs_error, 1e-6),
          "%s quality sums kind %d: %g/%g %g/%g %g/%g", k->isa, kind, a.sum_sq_error, b.sum_sq_error, a.sum_sq_value,
          b.sum_sq_value, a.max_abs_error, b.max_abs_error);
    free(scale), free(zp), free(x), free(codes);
  }
}

/* measured.c: quantize / choose_quantize with statistics give the plain kernels' codes, qparams
 * and status, and the statistics of a separate quality pass. Sizes reach several chunks. */
static void test_measured(const qd_kernels *k) {
  for (int iter = 0; iter < 300; iter++) {
    int32_t kind = (int32_t)(next_u32() % 10);
    int per = qd_codes_per_byte(kind);
    const int fp8 = kind == QD_CODES_E4M3 || kind == QD_CODES_E5M2;
    qd_quant q = {kind, RANGES[kind][0], RANGES[kind][1], (int32_t)(next_u32() & 1), 0};
    /* per_tensor / per_channel with given qparams */
    shape sh = random_shape(iter % 3 == 0 ? 70000 : 3000);
    uint64_t start = (next_u32() % sh.numel) / (uint64_t)per * (uint64_t)per;
    uint64_t count = sh.numel - start;
    float *scale = malloc(4 * sh.l.channels), *zp = malloc(4 * sh.l.channels);
    random_qparams(sh.l.channels, kind, 0, q.qmin, q.qmax, scale, zp);
    float *x = malloc(sizeof(float) * sh.numel);
    for (uint64_t i = 0; i < sh.numel; i++) x[i] = interesting(scale[(i / sh.l.inner) % sh.l.channels], 0, 0);
    size_t nb = qd_code_bytes(kind, count) + 4;
    uint8_t *o1 = calloc(nb, 1), *o2 = calloc(nb, 1);
    uint64_t b1 = 0, b2 = 0;
    qd_quality a = {0}, b = {0};
    qd_status r1 = k->quantize(x + start, start, count, &sh.l, scale, zp, &q, o1, &b1);
    if (r1 == QD_OK) k->quality(x + start, o1, start, count, &sh.l, scale, zp, &q, &a);
    qd_status r2 = qd_quantize_measured(k, x + start, start, count, &sh.l, scale, zp, &q, o2, &b2, &b);
    CHECK(r1 == r2 && (r1 != QD_OK || !memcmp(o1, o2, qd_code_bytes(kind, count))), "%s quantize_measured kind %d",
          k->isa, kind);
    CHECK(r1 != QD_OK || (a.count == b.count && a.clipped == b.clipped && close_to(a.sum_sq_error, b.sum_sq_error, 1e-5) &&
                          close_to(a.sum_sq_value, b.sum_sq_value, 1e-5) && close_to(a.max_abs_error, b.max_abs_error, 1e-6)),
          "%s quantize_measured stats kind %d", k->isa, kind);
    free(scale), free(zp), free(x), free(o1), free(o2);
    /* per_group-like units, chosen qparams */
    if (fp8) continue;
    qd_choose c = {QD_AFFINE, q.qmin, q.qmax, 1.1920929e-7f, 0};
    q.add_zero_point_first = 1;
    q.reject_infinity = 1;
    uint64_t unit = 2 + next_u32() % 300, units = 1 + next_u32() % 400;
    float *xs = malloc(sizeof(float) * unit * units);
    for (uint64_t i = 0; i < unit * units; i++) xs[i] = interesting(1.0f, 0, 0);
    float *s1 = malloc(4 * units), *s2 = malloc(4 * units);
    double *z1 = malloc(8 * units), *z2 = malloc(8 * units);
    nb = qd_code_bytes(kind, unit * units) + 4;
    o1 = calloc(nb, 1), o2 = calloc(nb, 1);
    qd_quality ca = {0}, cb = {0};
    r1 = k->choose_quantize(xs, 0, units, unit, &c, &q, s1, z1, o1, &b1);
    r2 = qd_choose_quantize_chunked(k, xs, QD_INPUT_F32, 0, units, unit, &c, &q, s2, z2, o2, &b2, &cb, NULL);
    CHECK(r1 == r2 && (r1 != QD_OK || (!memcmp(o1, o2, qd_code_bytes(kind, unit * units)) && !memcmp(s1, s2, 4 * units) &&
                                       !memcmp(z1, z2, 8 * units))),
          "%s choose_quantize_chunked kind %d unit %llu", k->isa, kind, (unsigned long long)unit);
    if (r1 == QD_OK) {
      float *zf = malloc(4 * units);
      for (uint64_t u = 0; u < units; u++) zf[u] = (float)z1[u];
      qd_layout ul = {1, units, unit};
      k->quality(xs, o1, 0, unit * units, &ul, s1, zf, &q, &ca);
      CHECK(ca.count == cb.count && ca.clipped == cb.clipped && close_to(ca.sum_sq_error, cb.sum_sq_error, 1e-5) &&
                close_to(ca.sum_sq_value, cb.sum_sq_value, 1e-5),
            "%s choose_quantize_chunked stats kind %d", k->isa, kind);
      free(zf);
    }
    free(xs), free(s1), free(s2), free(z1), free(z2), free(o1), free(o2);
  }
}

/* v as element i of an input of kind `input` (float32, or its bfloat16 / float16 rounding), and
 * the float32 value the kernels see there as wide[i] */
static void put_input(void *x, float *wide, uint64_t i, float v, int input) {
  if (input == QD_INPUT_F32) {
    ((float *)x)[i] = wide[i] = v;
  } else if (input == QD_INPUT_BF16) {
    ((uint16_t *)x)[i] = (uint16_t)(qd_bits(v) >> 16);
    wide[i] = qd_bf16_to_f32(((uint16_t *)x)[i]);
  } else {
    ((uint16_t *)x)[i] = qd_f32_to_f16(v);
    wide[i] = qd_f16_to_f32(((uint16_t *)x)[i]);
  }
}

/* choose_quantize_from (simd_choose.h's one-pass loop, or the chunked kernels): from float32,
 * float16 and bfloat16, with and without statistics, the codes, qparams, status and bad index of
 * the reference's choose_quantize on the widened values, and the statistics of its quality kernel
 * to rounding; the same statistics, to the bit, when the units come in several calls of whole
 * measured chunks. Unit lengths of whole SIMD blocks (the one-pass loop's) and any other. */
static float tame(float scale);
static void test_choose_quantize_from(const qd_kernels *k) {
  for (int iter = 0; iter < 1500; iter++) {
    int32_t kind = (int32_t)(next_u32() % 10);
    int32_t input = (int32_t)(next_u32() % 3);
    int measure = next_u32() % 4 != 0;
    qd_choose c;
    qd_quant q;
    random_choice(kind, &c, &q);
    if (c.mode == QD_AFFINE || c.mode == QD_SYMMETRIC) q.add_zero_point_first = next_u32() & 1;
    uint64_t unit = next_u32() % 3 ? 64 * (1 + next_u32() % 6) : 4 * (1 + next_u32() % 80);
    uint64_t units = 1 + next_u32() % (iter % 10 == 0 ? 700 : 40);
    const uint64_t n = unit * units;
    int specials = next_u32() % 6 == 0;
    float span = (next_u32() & 1) ? 1.0f : 1e-30f;
    float *wide = malloc(sizeof(float) * n);
    void *x = malloc(sizeof(float) * n);
    const int wild = iter % 4 == 0; /* huge values and ranges that overflow, or values a weight takes */
    for (uint64_t i = 0; i < n; i++) {
      float v = wild ? interesting(span, 0, 0) : tame(span * 100);
      if (specials && next_u32() % 200 == 0) v = (next_u32() & 1) ? NAN : (next_u32() & 1) ? INFINITY : -INFINITY;
      put_input(x, wide, i, v, input);
    }
    float *s1 = malloc(4 * units), *s2 = malloc(4 * units), *zf = malloc(4 * units);
    double *z1 = malloc(8 * units), *z2 = malloc(8 * units);
    float *scratch = malloc(sizeof(float) * qd_measured_chunk_units(unit) * unit);
    size_t nb = qd_code_bytes(kind, n) + 4;
    uint8_t *o1 = calloc(nb, 1), *o2 = calloc(nb, 1);
    uint64_t b1 = 7, b2 = 7;
    qd_quality want = {0}, got = {0}, sliced = {0};
    qd_status r1 = qd_kernels_ref.choose_quantize(wide, 0, units, unit, &c, &q, s1, z1, o1, &b1);
    qd_status r2 = k->choose_quantize_from(x, input, 0, units, unit, &c, &q, s2, z2, o2, &b2,
                                           measure ? &got : NULL, scratch);
    CHECK(r1 == r2, "%s choose_quantize_from input %d status %d vs %d", k->isa, input, r1, r2);
    if (r1 != QD_OK) {
      CHECK(b1 == b2, "%s choose_quantize_from input %d bad %llu vs %llu", k->isa, input, (unsigned long long)b1,
            (unsigned long long)b2);
    } else {
      CHECK(!memcmp(s1, s2, 4 * units) && !memcmp(z1, z2, 8 * units) && !memcmp(o1, o2, qd_code_bytes(kind, n)),
            "%s choose_quantize_from input %d kind %d mode %d unit %llu", k->isa, input, kind, c.mode,
            (unsigned long long)unit);
    }
    if (r1 == QD_OK && measure) {
      for (uint64_t u = 0; u < units; u++) zf[u] = (float)z1[u];
      qd_layout ul = {1, units, unit};
      qd_kernels_ref.quality(wide, o1, 0, n, &ul, s1, zf, &q, &want);
      CHECK(want.count == got.count && want.clipped == got.clipped &&
                close_to(want.sum_sq_error, got.sum_sq_error, 1e-5) &&
                close_to(want.sum_sq_value, got.sum_sq_value, 1e-5) &&
                close_to(want.max_abs_error, got.max_abs_error, 1e-6),
            "%s choose_quantize_from input %d kind %d stats: %g/%g %g/%g %g/%g clipped %llu/%llu", k->isa, input,
            kind, want.sum_sq_error, got.sum_sq_error, want.sum_sq_value, got.sum_sq_value, want.max_abs_error,
            got.max_abs_error, (unsigned long long)want.clipped, (unsigned long long)got.clipped);
      /* in calls of whole measured chunks: the same sums */
      const uint64_t step = qd_measured_chunk_units(unit) * (1 + next_u32() % 2);
      const size_t width = input == QD_INPUT_F32 ? 4 : 2;
      for (uint64_t u = 0; u < units; u += step) {
        uint64_t mu = units - u < step ? units - u : step;
        k->choose_quantize_from((const uint8_t *)x + u * unit * width, input, u, mu, unit, &c, &q, s2 + u, z2 + u,
                                o2 + qd_code_bytes(kind, u * unit), &b2, &sliced, scratch);
      }
      CHECK(!memcmp(&got, &sliced, sizeof got), "%s choose_quantize_from input %d: sliced statistics differ",
            k->isa, input);
    }
    free(wide), free(x), free(s1), free(s2), free(zf), free(z1), free(z2), free(scratch), free(o1), free(o2);
  }
}

/* choose_quantize_from on x (values of `input`) against `oracle`'s choose_quantize on their float32
 * copy `wide`: the status and bad index, and where both succeed the scales, zero points, codes and
 * (measured) the count. */
static void check_choose_from(const qd_kernels *k, const qd_kernels *oracle, const float *wide, const void *x,
                              int32_t input, uint64_t units, uint64_t unit, const qd_choose *c, const qd_quant *q,
                              int measure, const char *what) {
  const uint64_t n = units * unit;
  float *s1 = malloc(4 * units), *s2 = malloc(4 * units);
  double *z1 = malloc(8 * units), *z2 = malloc(8 * units);
  float *scratch = malloc(sizeof(float) * qd_measured_chunk_units(unit) * unit);
  const size_t nb = qd_code_bytes(q->codes, n);
  uint8_t *o1 = calloc(nb, 1), *o2 = calloc(nb, 1);
  uint64_t b1 = 7, b2 = 7;
  qd_quality got = {0};
  qd_status r1 = oracle->choose_quantize(wide, 0, units, unit, c, q, s1, z1, o1, &b1);
  qd_status r2 = k->choose_quantize_from(x, input, 0, units, unit, c, q, s2, z2, o2, &b2, measure ? &got : NULL,
                                         scratch);
  CHECK(r1 == r2 && (r1 == QD_OK || b1 == b2), "%s %s: status %d/%d bad %llu/%llu", k->isa, what, r1, r2,
        (unsigned long long)b1, (unsigned long long)b2);
  if (r1 == QD_OK && r2 == QD_OK)
    CHECK(!memcmp(s1, s2, 4 * units) && !memcmp(z1, z2, 8 * units) && !memcmp(o1, o2, nb) &&
              (!measure || got.count == n),
          "%s %s: codes or qparams differ", k->isa, what);
  free(s1), free(s2), free(z1), free(z2), free(scratch), free(o1), free(o2);
}

/* Long units (a few to a measured chunk, the next batch asked into the cache across the chunk's
 * end): a NaN or an Infinity in a later unit, or a unit whose scale underflows, gives the
 * reference's status and bad index, and clean ones its codes and qparams, with and without
 * statistics, for every input. */
static void test_choose_long_units(const qd_kernels *k) {
  static const uint64_t lengths[] = {512, 1088, 4096};
  for (int iter = 0; iter < 90; iter++) {
    const uint64_t unit = lengths[iter % 3], units = 2 + next_u32() % 9, n = unit * units;
    const int32_t input = (int32_t)(iter / 3 % 3), kind = (int32_t[]){QD_CODES_I8, QD_CODES_U4, QD_CODES_I16}[iter % 3];
    const int measure = iter / 9 % 2, fault = iter / 18 % 5; /* none, NaN, +Inf, -Inf, a unit of 1e-40 */
    qd_choose c;
    qd_quant q;
    random_choice(kind, &c, &q);
    if (fault == 2) q.reject_infinity = 1;
    float *wide = malloc(sizeof(float) * n);
    void *x = malloc(sizeof(float) * n);
    const uint64_t at = unit * (1 + next_u32() % (units - 1)) + next_u32() % unit; /* not in the first unit */
    for (uint64_t i = 0; i < n; i++) {
      float v = tame(100.0f);
      if (fault == 4 && i / unit == at / unit) v = (i % 2 ? 1e-40f : -1e-40f);
      if (i == at && fault >= 1 && fault <= 3) v = fault == 1 ? NAN : fault == 2 ? INFINITY : -INFINITY;
      put_input(x, wide, i, v, input);
    }
    char what[96];
    snprintf(what, sizeof what, "long units input %d fault %d kind %d unit %llu", input, fault, kind,
             (unsigned long long)unit);
    check_choose_from(k, &qd_kernels_ref, wide, x, input, units, unit, &c, &q, measure, what);
    free(wide), free(x);
  }
}

/* Units of 128 and 64 in batches whose qparams are computed VL units at a time (simd_choose.h
 * unit_params), each batch mixing plain units with one of a kind the vector path must refuse or get
 * right at its edge: zero, ±0 and all-equal ranges, huge ranges whose scale overflows, tiny ones
 * whose scale's reciprocal does not, NaN / ±Infinity; every mode, eps 0 and large, bounds beyond
 * 2^22, every input, with and without statistics: the reference's status, bad index, qparams and
 * codes. */
static void test_choose_unit_batches(const qd_kernels *k) {
  static const int32_t kinds[] = {QD_CODES_I4, QD_CODES_U4, QD_CODES_I8, QD_CODES_U8, QD_CODES_I16, QD_CODES_I2, QD_CODES_U2};
  for (int iter = 0; iter < 1200; iter++) {
    const int32_t kind = kinds[next_u32() % 7], input = (int32_t)(next_u32() % 3);
    const int measure = next_u32() & 1;
    qd_choose c;
    qd_quant q;
    random_choice(kind, &c, &q);
    c.mode = (int32_t)(next_u32() % 5);
    /* float zero points are added before rounding (as random_choice pairs them); else, and with
     * code bounds beyond ±2^22, the oracle is the kernels' own choose_quantize (codes not integral
     * before their conversion, which the reference rounds otherwise) */
    const int against_simd = next_u32() % 4 == 0;
    q.add_zero_point_first = c.mode != QD_AFFINE && c.mode != QD_SYMMETRIC && !against_simd ? 1 : (int32_t)(next_u32() & 1);
    if (against_simd && next_u32() % 2) q.qmin = c.qmin = -(1 << 23) - 1, q.qmax = c.qmax = (1 << 23) + 5;
    const uint32_t e = next_u32() % 6;
    c.eps = e == 0 ? 0.0f : e == 1 ? 0.75f : e == 2 ? 1e-45f : 1.1920929e-7f;
    if (next_u32() % 8 == 0) c.qmin = -(1 << 23), c.qmax = (1 << 22) + 1;
    if (next_u32() % 8 == 0) c.symmetric_zero_point = 16777217;
    const uint64_t unit = next_u32() % 4 ? 128 : 64, units = 1 + next_u32() % 48, n = unit * units;
    const uint64_t odd = next_u32() % units; /* the unit of another kind */
    const uint32_t what = next_u32() % 10;
    float *wide = malloc(sizeof(float) * n);
    void *x = malloc(sizeof(float) * n);
    for (uint64_t i = 0; i < n; i++) {
      float v = tame(next_u32() % 3 ? 1.0f : 1e4f);
      if (i / unit == odd) {
        switch (what) {
        case 0: v = 0.0f; break;
        case 1: v = (i & 1) ? 0.0f : -0.0f; break;
        case 2: v = -0.0f; break;
        case 3: v = -2.5f; break;
        case 4: v = (i & 1) ? 3e38f : -3e38f; break;
        case 5: v = (i & 1) ? 1e-40f : -1e-41f; break;
        case 6: v = (i & 1) ? 1e-38f : 3e-39f; break;
        case 7: if (i % unit == 5) v = NAN; break;
        case 8: if (i % unit == 9) v = (i & 1) ? INFINITY : -INFINITY; break;
        default: break;
        }
      }
      put_input(x, wide, i, v, input);
    }
    char label[96];
    snprintf(label, sizeof label, "unit batches mode %d what %u input %d kind %d", c.mode, what, input, kind);
    check_choose_from(k, against_simd ? k : &qd_kernels_ref, wide, x, input, units, unit, &c, &q, measure, label);
    free(wide), free(x);
  }
}

static void test_conversions(const qd_kernels *k) {
  uint16_t *h = malloc(2 * 65536 + 2);
  float *f1 = malloc(4 * 65536), *f2 = malloc(4 * 65536 + 4);
  for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
  for (int bf = 0; bf < 2; bf++) {
    (bf ? qd_kernels_ref.bf16_to_f32 : qd_kernels_ref.f16_to_f32)(h, 65536, f1);
    (bf ? k->bf16_to_f32 : k->f16_to_f32)(h, 65536, f2 + 1);
    CHECK(!memcmp(f1, f2 + 1, 4 * 65536), "%s %s_to_f32 exhaustive", k->isa, bf ? "bf16" : "f16");
  }
  uint16_t *o1 = malloc(2 * 4099), *o2 = malloc(2 * 4099);
  for (int iter = 0; iter < 400; iter++) {
    uint64_t n = 1 + next_u32() % 4097;
    for (uint64_t i = 0; i < n; i++) {
      uint32_t r = next_u32() % 4;
      f1[i] = r == 0 ? qd_float(next_u32()) : r == 1 ? qd_float((next_u32() & 0xffff0000u) | 0x8000u)
                                        : r == 2 ? qd_float((next_u32() & 0xffffe000u) | 0x1000u)
                                                 : (uniform() - 0.5f) * 131072.0f;
    }
    for (int bf = 0; bf < 2; bf++) {
      (bf ? qd_kernels_ref.f32_to_bf16 : qd_kernels_ref.f32_to_f16)(f1, n, o1);
      (bf ? k->f32_to_bf16 : k->f32_to_f16)(f1, n, o2);
      CHECK(!memcmp(o1, o2, 2 * n), "%s f32_to_%s", k->isa, bf ? "bf16" : "f16");
    }
  }
  free(h), free(f1), free(f2), free(o1), free(o2);
}

/* ggml types with an importance matrix: every variant equals the scalar twin of llama.cpp's
 * quant_weights paths, on weight-like rows and interesting values (NaN in some), with column
 * weights that include zeros and outliers; unknown types and partial blocks are refused. */
static void test_ggml_weighted(const qd_kernels *k) {
  enum { NE0 = 512, ROWS = 4 };
  float *x = malloc(4 * NE0 * ROWS), *qw = malloc(4 * NE0);
  uint8_t *o1 = malloc(2 * NE0 * ROWS), *o2 = malloc(2 * NE0 * ROWS);
  for (int iter = 0; iter < 40; iter++) {
    const float scale = iter % 3 == 0 ? 1.0f : iter % 3 == 1 ? 1e-3f : 1e-30f;
    for (int i = 0; i < NE0 * ROWS; i++) {
      x[i] = iter % 2 ? (uniform() + uniform() + uniform() + uniform() - 2) * scale
                      : interesting(scale, iter % 4 == 0, 0);
    }
    for (int i = 0; i < NE0; i++) qw[i] = i % 37 == 0 ? 0.0f : i % 41 == 0 ? 1e4f * uniform() : uniform() * uniform();
    for (int i = 0; i < 16; i++) x[256 + i] = x[256]; /* an all-equal sub-block */
    for (int32_t type = QD_GGML_Q8_0; type <= QD_GGML_IQ4_XS; type++) {
      if (qd_ggml_block_values(type) == 0) { /* an id no type has */
        CHECK(k->ggml_quantize_weighted(type, x, ROWS, NE0, qw, o2) == QD_BAD_ARGUMENT, "%s weighted type %d", k->isa,
              type);
        continue;
      }
      const size_t bytes = qd_ggml_block_bytes(type) * (NE0 / qd_ggml_block_values(type)) * ROWS;
      memset(o1, 0xa5, bytes), memset(o2, 0x5a, bytes);
      CHECK(qd_kernels_ref.ggml_quantize_weighted(type, x, ROWS, NE0, qw, o1) == QD_OK, "weighted ref status");
      CHECK(k->ggml_quantize_weighted(type, x, ROWS, NE0, qw, o2) == QD_OK, "%s weighted status", k->isa);
      CHECK(!memcmp(o1, o2, bytes), "%s weighted type %d iteration %d", k->isa, type, iter);
    }
  }
  CHECK(k->ggml_quantize_weighted(QD_GGML_Q4_K, x, 1, 288, qw, o2) == QD_BAD_ARGUMENT, "%s weighted: ne0", k->isa);
  CHECK(k->ggml_quantize_weighted(QD_GGML_IQ4_NL, x, 1, 48, qw, o2) == QD_BAD_ARGUMENT, "%s weighted: IQ4_NL ne0",
        k->isa);
  CHECK(k->ggml_quantize_weighted(12, x, 1, 512, qw, o2) == QD_BAD_ARGUMENT, "%s weighted: unknown type", k->isa);
  free(x), free(qw), free(o1), free(o2);
}

/* ggml block types: every variant equals the scalar twin of ggml's reference, block for block,
 * on blocks of interesting values (halves, ±0, subnormals, huge, ±Inf, NaN), of one value, of
 * non-negative values, of weight-like values, and with ±0 at an end of the range (where Q4_1 /
 * Q5_1 keep the first). */
static void test_ggml(const qd_kernels *k) {
  enum { BLOCKS = 64 };
  float *x = malloc(4 * 32 * BLOCKS);
  uint8_t *o1 = malloc(34 * BLOCKS), *o2 = malloc(34 * BLOCKS);
  for (int iter = 0; iter < 300; iter++) {
    const float scale = iter % 3 == 0 ? 1.0f : iter % 3 == 1 ? 1e-3f : 1e-40f;
    for (int i = 0; i < 32 * BLOCKS; i++) x[i] = interesting(scale, iter % 4 == 0, iter % 2 == 0);
    if (iter % 4 == 1) { /* weight-like: where the K-quant searches' later trials win */
      for (int i = 0; i < 32 * BLOCKS; i++) x[i] = (uniform() + uniform() + uniform() + uniform() - 2) * scale;
    }
    if (iter % 5 == 0) {
      for (int i = 0; i < 32; i++) x[i] = x[0]; /* all-equal block */
    }
    for (int i = 32; i < 64; i++) x[i] = __builtin_fabsf(x[i]); /* no negative value */
    x[64 + iter % 32] = iter % 2 ? 0.0f : -0.0f;                /* a zero, maybe the max */
    for (int i = 96; i < 128; i++) x[i] = (float)(i % 7) * scale; /* +0 is the min */
    for (int32_t type = QD_GGML_Q8_0; type <= QD_GGML_IQ4_XS; type++) {
      if (qd_ggml_block_values(type) == 0) continue; /* an id no type has */
      const uint64_t blocks = 32 * BLOCKS / qd_ggml_block_values(type);
      const size_t bytes = qd_ggml_block_bytes(type) * blocks;
      memset(o1, 0xa5, bytes), memset(o2, 0x5a, bytes);
      CHECK(qd_kernels_ref.ggml_quantize(type, x, blocks, o1) == QD_OK, "ggml ref status");
      CHECK(k->ggml_quantize(type, x, blocks, o2) == QD_OK, "%s ggml status", k->isa);
      CHECK(!memcmp(o1, o2, bytes), "%s ggml type %d iteration %d", k->isa, type, iter);
    }
  }
  CHECK(k->ggml_quantize(12, x, 1, o2) == QD_BAD_ARGUMENT, "%s ggml: unknown type", k->isa);
  CHECK(k->ggml_quantize(-1, x, 1, o2) == QD_BAD_ARGUMENT, "%s ggml: negative type", k->isa);
  free(x), free(o1), free(o2);
}

/* The reference's own arithmetic on a few hand-checked values (the TS side has the goldens). */
static void test_reference_values(void) {
  CHECK(qd_rint(2.5f) == 2.0f && qd_rint(3.5f) == 4.0f && qd_rint(-2.5f) == -2.0f, "rint ties to even");
  CHECK(qd_bits(qd_rint(-0.3f)) == 0x80000000u, "rint keeps the sign of zero");
  CHECK(qd_encode_fp8(448.0f, 0) == 0x7e && qd_encode_fp8(464.0f, 0) == 0x7e && qd_encode_fp8(465.0f, 0) == 0x7f,
        "e4m3fn around its maximum");
  CHECK(qd_encode_fp8(-0.0f, 1) == 0x80 && qd_encode_fp8(57344.0f, 1) == 0x7b, "e5m2 zero and maximum");
  uint8_t packed[3] = {0};
  for (int i = 0; i < 5; i++) qd_store_code(packed, QD_CODES_U4, (uint64_t)i, 3);
  CHECK(packed[0] == 51 && packed[1] == 51 && packed[2] == 3, "five 4-bit 3s pack to [51, 51, 3]");
  float mins[1] = {INFINITY}, maxs[1] = {-INFINITY};
  float x[4] = {0.0f, -0.0f, 1.0f, 0.0f};
  uint64_t bad;
  qd_layout l = {1, 1, 4};
  qd_kernels_ref.minmax(x, 0, 4, &l, mins, maxs, &bad);
  CHECK(qd_bits(mins[0]) == 0x80000000u && maxs[0] == 1.0f, "minimum orders -0 below +0");
  qd_choose c = {QD_AFFINE, 0, 255, 1.1920929e-7f, 128};
  float lo = -1, hi = 3, s;
  double z;
  qd_determine(&lo, &hi, 1, &c, &s, &z, &bad);
  CHECK(s == 4.0f / 255.0f && z == 64, "uint8 affine on [-1, 3]: scale 4/255, zero point 64");
  /* ggml: amax 127 gives d = 1 (fp16 0x3c00), and ±2.5 round away from zero to ±3 in Q8_0;
   * in Q4_0 the largest magnitude -8 gives d = 1, id = 1, and 7.5 + 8.5 = 16 clamps to 15. */
  float block[32] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f};
  uint8_t q8[34], q4[18];
  qd_kernels_ref.ggml_quantize(QD_GGML_Q8_0, block, 1, q8);
  CHECK(q8[0] == 0x00 && q8[1] == 0x3c && q8[2] == 127 && q8[3] == 3 && q8[4] == 0xfd && q8[5] == 1 &&
            q8[6] == 0xff && q8[7] == 0,
        "Q8_0 rounds half away from zero");
  float block4[32] = {-8.0f, 7.5f, -0.5f, 0.49f};
  qd_kernels_ref.ggml_quantize(QD_GGML_Q4_0, block4, 1, q4);
  CHECK(q4[0] == 0x00 && q4[1] == 0x3c && q4[2] == 0x80 && q4[3] == 0x8f && q4[4] == 0x88 && q4[5] == 0x88,
        "Q4_0 truncates x·id + 8.5 and clamps at 15");
  /* histc over [0, 4] in 4 bins: the right edge falls in the last bin; -1, 4.0000005 and NaN are
   * outside; an empty-width range (both edges one float32) counts nothing and writes nothing */
  float hx[9] = {0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 2.5f, -1.0f, 4.0000005f, NAN};
  float hist[5] = {0, 0, 0, 0, -7.0f};
  qd_histc(hx, 9, 0.0f, 4.0f, 4, hist);
  CHECK(hist[0] == 1 && hist[1] == 1 && hist[2] == 2 && hist[3] == 2 && hist[4] == -7.0f,
        "histc: [1, 1, 2, 2], the last bin closed, nothing past the bins");
  float flat[2] = {0, 0};
  float big = 1e20f;
  qd_histc(&big, 1, big, big, 2, flat);
  CHECK(flat[0] == 0 && flat[1] == 0, "histc with a zero-width range counts nothing");
  CHECK(qd_histc(hx, 9, 0.0f, 4.0f, 0, hist) == QD_BAD_ARGUMENT, "histc with no bins");
}

/* bitsandbytes NF4 / FP4: the SIMD variant against the reference over block sizes the vector
 * path takes and ones it leaves to the reference, partial last blocks, odd counts, unaligned
 * input, all-zero blocks, and NaN / ±Infinity (status and first index). */
static void test_bnb(const qd_kernels *k) {
  enum { MAX = 4096 * 3 + 7 };
  static const uint64_t sizes[] = {64, 128, 256, 4096, 96, 100, 33, 2};
  float *buf = malloc(4 * (MAX + 1));
  uint8_t *p1 = malloc(MAX / 2 + 1), *p2 = malloc(MAX / 2 + 1);
  float *a1 = malloc(4 * MAX), *a2 = malloc(4 * MAX);
  for (int iter = 0; iter < 240; iter++) {
    const uint64_t bs = sizes[iter % 8];
    const uint64_t n = (uint64_t)(next_u32() % (3 * bs + 8));
    float *x = buf + (iter & 1); /* unaligned every other time */
    const float scale = iter % 3 == 0 ? 1.0f : iter % 3 == 1 ? 1e-3f : 1e-40f;
    const int specials = iter % 5 == 0;
    for (uint64_t i = 0; i < n; i++) x[i] = interesting(scale, specials, specials);
    if (iter % 7 == 0 && n > 0) memset(x, 0, 4 * (n < bs ? n : bs)); /* an all-zero block */
    for (int32_t type = QD_BNB_NF4; type <= QD_BNB_FP4; type++) {
      const uint64_t bytes = (n + 1) / 2, blocks = (n + bs - 1) / bs;
      uint64_t bad1 = 7, bad2 = 9;
      memset(p1, 0xa5, bytes), memset(p2, 0x5a, bytes);
      memset(a1, 0xa5, 4 * blocks), memset(a2, 0x5a, 4 * blocks);
      qd_status s1 = qd_kernels_ref.bnb_quantize(type, x, n, bs, p1, a1, &bad1);
      qd_status s2 = k->bnb_quantize(type, x, n, bs, p2, a2, &bad2);
      CHECK(s1 == s2, "%s bnb status %d vs %d (type %d, bs %llu, n %llu)", k->isa, s2, s1, type,
            (unsigned long long)bs, (unsigned long long)n);
      if (s1 == QD_OK && s2 == QD_OK) {
        CHECK(!memcmp(p1, p2, bytes) && !memcmp(a1, a2, 4 * blocks), "%s bnb type %d bs %llu n %llu", k->isa, type,
              (unsigned long long)bs, (unsigned long long)n);
      } else {
        CHECK(bad1 == bad2, "%s bnb index %llu vs %llu", k->isa, (unsigned long long)bad2, (unsigned long long)bad1);
      }
    }
  }
  CHECK(k->bnb_quantize(2, buf, 64, 64, p2, a2, &(uint64_t){0}) == QD_BAD_ARGUMENT, "%s bnb: unknown type", k->isa);
  CHECK(k->bnb_quantize(0, buf, 64, 0, p2, a2, &(uint64_t){0}) == QD_BAD_ARGUMENT, "%s bnb: block size 0", k->isa);
  free(buf), free(p1), free(p2), free(a1), free(a2);
}

/* bitsandbytes at its thresholds: blocks whose absmax is 1 (inv = 1, so x·inv = x) holding each
 * NF4 / FP4 threshold, its float32 neighbours and their negatives, where a search that compared
 * against the wrong threshold, or with >= for >, would give another code. */
extern const float qd_nf4_thresholds[15], qd_fp4_thresholds[7];
static void test_bnb_thresholds(const qd_kernels *k) {
  enum { N = 64 * 8 };
  float x[N];
  uint8_t p1[N / 2], p2[N / 2];
  float a1[N / 64], a2[N / 64];
  int at = 0;
  for (int i = 0; i < 15 + 7; i++) {
    const float t = i < 15 ? qd_nf4_thresholds[i] : qd_fp4_thresholds[i - 15];
    const float near[] = {t, nextafterf(t, 2.0f), nextafterf(t, -2.0f)};
    for (int j = 0; j < 3; j++) x[at++] = near[j], x[at++] = -near[j];
  }
  while (at < N) x[at] = (float)(at % 37) / 36.0f - 0.5f, at++;
  for (int b = 0; b < N / 64; b++) x[b * 64 + 63] = b & 1 ? -1.0f : 1.0f; /* absmax 1 */
  for (int32_t type = QD_BNB_NF4; type <= QD_BNB_FP4; type++) {
    for (uint64_t bs = 64; bs <= 128; bs *= 2) {
      uint64_t bad1 = 0, bad2 = 0;
      qd_status s1 = qd_kernels_ref.bnb_quantize(type, x, N, bs, p1, a1, &bad1);
      qd_status s2 = k->bnb_quantize(type, x, N, bs, p2, a2, &bad2);
      CHECK(s1 == QD_OK && s2 == QD_OK && !memcmp(p1, p2, N / 2) && !memcmp(a1, a2, 4 * (N / bs)),
            "%s bnb at thresholds, type %d bs %llu", k->isa, type, (unsigned long long)bs);
    }
  }
}

/* MatMulNBits: the SIMD variant against the reference, every block size, both schemes and scale
 * types, K with partial last blocks and odd, zero extremes, subnormal ranges (QD_RANGE_OVERFLOW),
 * NaN / ±Infinity (status and first index). */
static void test_nbits(const qd_kernels *k) {
  enum { ROWS = 3, MAXK = 4 * 256 + 3 };
  float *w = malloc(4 * ROWS * MAXK);
  uint8_t *b1 = malloc(ROWS * MAXK), *b2 = malloc(ROWS * MAXK), *z1 = malloc(ROWS * MAXK), *z2 = malloc(ROWS * MAXK);
  float *s1 = malloc(4 * ROWS * MAXK), *s2 = malloc(4 * ROWS * MAXK);
  for (int iter = 0; iter < 200; iter++) {
    const uint64_t bs = 16u << (iter % 5), ks[] = {bs * 3, bs * 2 + 1, bs - 1, 1, 4 * bs + 3};
    const uint64_t kl = ks[(iter / 5) % 5];
    const float scale = iter % 3 == 0 ? 1.0f : iter % 3 == 1 ? 1e-3f : 1e-40f;
    const int specials = iter % 7 == 0;
    for (uint64_t i = 0; i < ROWS * kl; i++) w[i] = interesting(scale, specials, specials);
    if (iter % 4 == 1)
      for (uint64_t i = 0; i < kl && i < bs; i++) w[i] = (i & 1) ? 0.0f : -0.0f; /* a zero block */
    if (iter % 4 == 2)
      for (uint64_t i = 0; i < kl && i < bs; i++) w[i] = i % 3 ? __builtin_fabsf(w[i]) : 0.0f; /* zero minimum */
    const uint64_t kb = (kl + bs - 1) / bs, bytes = ROWS * kb * (bs / 2), zps = ROWS * ((kb + 1) / 2);
    for (int32_t sym = 0; sym <= 1; sym++) {
      for (int32_t f16 = 0; f16 <= 1; f16++) {
        uint64_t bad1 = 7, bad2 = 9;
        memset(b1, 0xa5, bytes), memset(b2, 0x5a, bytes), memset(z1, 0xa5, zps), memset(z2, 0x5a, zps);
        qd_status r1 = qd_kernels_ref.nbits_quantize(w, ROWS, kl, bs, sym, f16, b1, s1, z1, &bad1);
        qd_status r2 = k->nbits_quantize(w, ROWS, kl, bs, sym, f16, b2, s2, z2, &bad2);
        CHECK(r1 == r2, "%s nbits status %d vs %d (bs %llu, K %llu)", k->isa, r2, r1, (unsigned long long)bs,
              (unsigned long long)kl);
        if (r1 == QD_OK && r2 == QD_OK) {
          CHECK(!memcmp(b1, b2, bytes) && !memcmp(s1, s2, 4 * ROWS * kb) && (sym || !memcmp(z1, z2, zps)),
                "%s nbits bs %llu K %llu sym %d f16 %d", k->isa, (unsigned long long)bs, (unsigned long long)kl, sym, f16);
        } else {
          CHECK(bad1 == bad2, "%s nbits index %llu vs %llu", k->isa, (unsigned long long)bad2, (unsigned long long)bad1);
        }
      }
    }
  }
  CHECK(k->nbits_quantize(w, 1, 32, 24, 0, 0, b2, s2, z2, &(uint64_t){0}) == QD_BAD_ARGUMENT, "%s nbits: block size",
        k->isa);
  free(w), free(b1), free(b2), free(z1), free(z2), free(s1), free(s2);
}

/* MatMulNBits over many whole blocks per row (more than one vector's worth, not a multiple of any
 * VL), where the vector path computes the scales and zero points of several blocks side by side:
 * mixed magnitudes per block, a zero block, a zero-minimum block and an overflowing range among
 * them. */
static void test_nbits_many(const qd_kernels *k) {
  enum { ROWS = 2, BLOCKS = 37, MAXK = 32 * BLOCKS };
  static float w[ROWS * MAXK], s1[ROWS * BLOCKS], s2[ROWS * BLOCKS];
  static uint8_t b1[ROWS * MAXK / 2], b2[ROWS * MAXK / 2], z1[ROWS * BLOCKS], z2[ROWS * BLOCKS];
  for (int iter = 0; iter < 24; iter++) {
    const uint64_t bs = iter & 1 ? 32 : 16, kl = bs * BLOCKS, kb = BLOCKS, zps = ROWS * ((kb + 1) / 2);
    for (uint64_t i = 0; i < ROWS * kl; i++) {
      const uint64_t blk = i / bs;
      w[i] = interesting(blk % 3 == 0 ? 1.0f : blk % 3 == 1 ? 1e-3f : 40.0f, iter % 8 == 7, 0);
    }
    for (uint64_t i = 0; i < bs; i++) w[5 * bs + i] = 0.0f;                               /* zero block */
    for (uint64_t i = 0; i < bs; i++) w[9 * bs + i] = __builtin_fabsf(w[9 * bs + i]);     /* min > 0 */
    for (uint64_t i = 0; i < bs; i++) w[20 * bs + i] = -__builtin_fabsf(w[20 * bs + i]);  /* max < 0 */
    if (iter % 6 == 4)
      for (uint64_t i = 0; i < bs; i++) w[kl + 30 * bs + i] = i & 1 ? 1e-44f : -1e-44f; /* overflowing 1/scale */
    for (int32_t sym = 0; sym <= 1; sym++) {
      for (int32_t f16 = 0; f16 <= 1; f16++) {
        uint64_t bad1 = 7, bad2 = 9;
        memset(b1, 0xa5, sizeof b1), memset(b2, 0x5a, sizeof b2), memset(z1, 0xa5, zps), memset(z2, 0x5a, zps);
        qd_status r1 = qd_kernels_ref.nbits_quantize(w, ROWS, kl, bs, sym, f16, b1, s1, z1, &bad1);
        qd_status r2 = k->nbits_quantize(w, ROWS, kl, bs, sym, f16, b2, s2, z2, &bad2);
        CHECK(r1 == r2, "%s nbits many status %d vs %d", k->isa, r2, r1);
        if (r1 == QD_OK && r2 == QD_OK)
          CHECK(!memcmp(b1, b2, ROWS * kl / 2) && !memcmp(s1, s2, 4 * ROWS * kb) && (sym || !memcmp(z1, z2, zps)),
                "%s nbits many bs %llu sym %d f16 %d", k->isa, (unsigned long long)bs, sym, f16);
        else
          CHECK(bad1 == bad2, "%s nbits many index %llu vs %llu", k->isa, (unsigned long long)bad2,
                (unsigned long long)bad1);
      }
    }
  }
}

/* Values of about `scale` that every float16 group scale holds (AWQ's and GPTQ's vector paths take
 * whole matrices of them): uniform, ±0, halves, float16 and float32 subnormals. */
static float tame(float scale) {
  const uint32_t r = next_u32() % 10;
  if (r < 6) return (uniform() * 2 - 1) * scale;
  if (r < 7) return (next_u32() & 1) ? 0.0f : -0.0f;
  if (r < 8) return (float)((int32_t)(next_u32() % 2048) - 1024) * 0x1p-24f;
  if (r < 9) return ((float)((int32_t)(next_u32() % 600) - 300) + 0.5f) * scale / 300;
  return qd_float(next_u32() & 0x807fffffu);
}

/* AWQ: the SIMD variant against the reference over group sizes the vector path takes and ones it
 * leaves, values past float16's range (QD_RANGE_OVERFLOW), float16 subnormals, NaN / ±Infinity. */
static void test_awq(const qd_kernels *k) {
  enum { OUT = 136, IN = 256 }; /* the vector path's tiles of 128 rows: one whole, one of 8 */
  float *w = malloc(4 * OUT * IN);
  uint32_t *q1 = malloc(4 * IN * OUT / 8), *q2 = malloc(4 * IN * OUT / 8), *z1 = malloc(4 * IN * OUT / 8),
           *z2 = malloc(4 * IN * OUT / 8);
  uint16_t *s1 = malloc(2 * IN * OUT), *s2 = malloc(2 * IN * OUT);
  static const uint64_t sizes[] = {32, 128, 256, 12, 64};
  for (int iter = 0; iter < 150; iter++) {
    const uint64_t gs = sizes[iter % 5], in = gs == 12 ? 240 : IN, groups = in / gs;
    const float scale = iter % 3 == 0 ? 1.0f : iter % 3 == 1 ? 1e-6f : 3e4f;
    const int specials = iter % 11 == 0;
    for (uint64_t i = 0; i < OUT * in; i++)
      w[i] = iter % 2 ? tame(scale == 3e4f ? 3e4f : scale * 30) : interesting(scale, specials, specials) * 1e-2f;
    uint64_t bad1 = 7, bad2 = 9;
    memset(q2, 0x5a, 4 * in * OUT / 8), memset(z2, 0x5a, 4 * groups * OUT / 8);
    qd_status r1 = qd_kernels_ref.awq_quantize(w, OUT, in, gs, q1, z1, s1, &bad1);
    qd_status r2 = k->awq_quantize(w, OUT, in, gs, q2, z2, s2, &bad2);
    CHECK(r1 == r2, "%s awq status %d vs %d (group %llu, iteration %d)", k->isa, r2, r1, (unsigned long long)gs, iter);
    if (r1 == QD_OK && r2 == QD_OK) {
      CHECK(!memcmp(q1, q2, 4 * in * OUT / 8) && !memcmp(z1, z2, 4 * groups * OUT / 8) &&
                !memcmp(s1, s2, 2 * groups * OUT),
            "%s awq group %llu iteration %d", k->isa, (unsigned long long)gs, iter);
    } else {
      CHECK(bad1 == bad2, "%s awq index %llu vs %llu", k->isa, (unsigned long long)bad2, (unsigned long long)bad1);
    }
  }
  CHECK(k->awq_quantize(w, 12, IN, 32, q2, z2, s2, &(uint64_t){0}) == QD_BAD_ARGUMENT, "%s awq: out", k->isa);
  free(w), free(q1), free(q2), free(z1), free(z2), free(s1), free(s2);
}

/* AWQ where qweight's rows are whole cache lines apart (out a multiple of 128) and large enough to
 * be stored past the caches, with qweight at every word offset from a line: the first tile cut
 * short (simd_awq.h) and the tiles' streamed lines. */
static void test_awq_lines(const qd_kernels *k) {
  enum { OUT = 256, IN = 2048 };
  float *w = malloc(4 * OUT * IN);
  uint32_t *q1 = malloc(4 * IN * OUT / 8), *q2 = malloc(4 * IN * OUT / 8 + 64), *z1 = malloc(4 * IN * OUT / 8),
           *z2 = malloc(4 * IN * OUT / 8);
  uint16_t *s1 = malloc(2 * IN * OUT), *s2 = malloc(2 * IN * OUT);
  static const uint64_t sizes[] = {128, 64, 256};
  for (int iter = 0; iter < 6; iter++) {
    const uint64_t gs = sizes[iter % 3], groups = IN / gs, off = (uint64_t)(iter * 5 + 1) % 16;
    for (uint64_t i = 0; i < (uint64_t)OUT * IN; i++) w[i] = tame(iter % 2 ? 30.0f : 1e-3f);
    uint32_t *q = q2 + off;
    uint64_t bad1 = 7, bad2 = 9;
    memset(q2, 0x5a, 4 * IN * OUT / 8 + 64);
    qd_status r1 = qd_kernels_ref.awq_quantize(w, OUT, IN, gs, q1, z1, s1, &bad1);
    qd_status r2 = k->awq_quantize(w, OUT, IN, gs, q, z2, s2, &bad2);
    CHECK(r1 == QD_OK && r2 == QD_OK, "%s awq lines status %d vs %d (group %llu)", k->isa, r2, r1,
          (unsigned long long)gs);
    CHECK(!memcmp(q1, q, 4 * IN * OUT / 8) && !memcmp(z1, z2, 4 * groups * OUT / 8) && !memcmp(s1, s2, 2 * groups * OUT),
          "%s awq lines group %llu offset %llu", k->isa, (unsigned long long)gs, (unsigned long long)off);
  }
  free(w), free(q1), free(q2), free(z1), free(z2), free(s1), free(s2);
}

/* GPTQ groups whose values divide by their scale to exact half-integers, give or take one ulp:
 * where the vector path's reciprocal cannot stand for the division (rint's ties). The scale is
 * d = (1 + m / 2^16) · 2^e, exact through the parameters (the range is maxq · d), or one of
 * 5.5, 7.5, … · 2^-24, whose float16 (6, 8, … · 2^-24) puts the second quotient, q · d / f16(d),
 * on half-integers too (5.5 · 6 / 6). */
static void gptq_ties(float *w, uint64_t n, uint64_t group_size, uint32_t bits) {
  const uint32_t levels = 1u << bits;
  for (uint64_t g = 0; g < n; g += group_size) {
    float d = (1.0f + (float)(next_u32() % 65536) / 65536.0f) * ldexpf(1.0f, (int)(next_u32() % 34) - 24);
    if (next_u32() % 3 == 0) d = ((float)(next_u32() % 8) * 2.0f + 5.5f) * 0x1p-24f; /* float16 6, 8, 10…: ties */
    for (uint64_t i = g; i < g + group_size && i < n; i++) {
      const uint64_t k = i - g < levels ? i - g : next_u32() % levels; /* both ends first */
      uint32_t b = qd_bits(((float)k - (float)levels / 2 + 0.5f) * d);
      const uint32_t nudge = next_u32() % 3;
      if (i - g >= levels && b != 0) b += nudge == 0 ? 1 : nudge == 1 ? 0xffffffffu : 0;
      w[i] = qd_float(b);
    }
  }
}

/* GPTQ: the SIMD variant against the reference over bits, schemes, layer dtypes, group sizes the
 * vector path takes and ones it leaves (a last group of 16, groups of 12), scales whose float16 is
 * 0 (QD_RANGE_OVERFLOW), NaN / ±Infinity, quotients at half-integers (gptq_ties); the counts of
 * zero-point-0 groups and clamped codes. 64 rows: the vector path's tiles of 16 rows, four times. */
static void test_gptq(const qd_kernels *k) {
  enum { OUT = 64, IN = 256 };
  float *w = malloc(4 * OUT * IN);
  uint32_t *q1 = malloc(4 * IN * OUT), *q2 = malloc(4 * IN * OUT), *z1 = malloc(4 * IN * OUT), *z2 = malloc(4 * IN * OUT);
  uint16_t *s1 = malloc(2 * IN * OUT), *s2 = malloc(2 * IN * OUT);
  static const uint64_t sizes[] = {32, 128, 256, 48, 12};
  uint64_t lcg = 12345, clamped = 0;
  for (int iter = 0; iter < 180; iter++) {
    const uint64_t gs = sizes[iter % 5], in = gs == 48 ? 160 : gs == 12 ? 96 : IN, groups = (in + gs - 1) / gs;
    const uint32_t bits = iter % 3 == 0 ? 2 : iter % 3 == 1 ? 4 : 8;
    const int32_t sym = iter / 3 % 2, store = iter / 6 % 3;
    const float scale = iter % 4 == 0 ? 1.0f : iter % 4 == 1 ? 1e-9f : iter % 4 == 2 ? 3e3f : 1e-3f;
    const int specials = iter % 13 == 0;
    for (uint64_t i = 0; i < OUT * in; i++) w[i] = interesting(scale, specials, specials) * 1e-2f;
    if (iter % 7 == 5) gptq_ties(w, OUT * in, gs, bits);
    else if (iter % 2 && !specials)
      for (uint64_t i = 0; i < OUT * in; i++) w[i] = tame(scale * 300);
    else if (store == 2 && !specials) { /* uniform and off-centre: bfloat16 layers at 8 bits clamp codes */
      for (uint64_t i = 0; i < OUT * in; i++) {
        lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
        w[i] = ((float)(lcg >> 40) / 16777216.0f - 0.3f) * scale;
      }
    }
    uint64_t bad1 = 7, bad2 = 9, c1[2], c2[2];
    const uint64_t words = in * bits / 32 * OUT, zwords = groups * OUT * bits / 32;
    memset(q2, 0x5a, 4 * words), memset(z2, 0x5a, 4 * zwords);
    qd_status r1 = qd_kernels_ref.gptq_quantize(w, OUT, in, bits, gs, sym, store, q1, z1, s1, c1, &bad1);
    qd_status r2 = k->gptq_quantize(w, OUT, in, bits, gs, sym, store, q2, z2, s2, c2, &bad2);
    CHECK(r1 == r2, "%s gptq status %d vs %d (iteration %d)", k->isa, r2, r1, iter);
    if (r1 == QD_OK && r2 == QD_OK) {
      CHECK(!memcmp(q1, q2, 4 * words) && !memcmp(z1, z2, 4 * zwords) && !memcmp(s1, s2, 2 * groups * OUT) &&
                c1[0] == c2[0] && c1[1] == c2[1],
            "%s gptq iteration %d", k->isa, iter);
      clamped += c1[1];
    } else {
      CHECK(bad1 == bad2, "%s gptq index %llu vs %llu", k->isa, (unsigned long long)bad2, (unsigned long long)bad1);
    }
  }
  CHECK(clamped > 0, "%s gptq: no clamped code compared", k->isa);
  CHECK(k->gptq_quantize(w, 16, IN, 4, 32, 0, 0, q2, z2, s2, (uint64_t[2]){0}, &(uint64_t){0}) == QD_BAD_ARGUMENT,
        "%s gptq: out", k->isa);
  CHECK(k->gptq_quantize(w, OUT, IN, 3, 32, 0, 0, q2, z2, s2, (uint64_t[2]){0}, &(uint64_t){0}) == QD_BAD_ARGUMENT,
        "%s gptq: bits", k->isa);
  free(w), free(q1), free(q2), free(z1), free(z2), free(s1), free(s2);
}

/* GPTQ's solver (gptq_solve.c; test/gptq/gptq-solve-kernel.test.ts checks it against the
 * TypeScript to the bit): values worked by hand, and the refusal of an indefinite Hessian. */
static void test_gptq_solve(void) {
  /* H = [[4, 2], [2, 3]]: H⁻¹ = [[3/8, -1/4], [-1/4, 1/2]] = UᵀU with U upper */
  double h[4] = {4, 2, 2, 3}, u[4] = {-1, -1, -1, -1}, lit[4];
  CHECK(qd_gptq_inverse_cholesky(h, 2, u, lit) == -1, "gptq: [[4, 2], [2, 3]] is positive definite");
  const double u00 = sqrt(0.375), u01 = -0.25 / u00, u11 = sqrt(0.5 - u01 * u01);
  CHECK(fabs(u[0] - u00) < 1e-15 && fabs(u[1] - u01) < 1e-15 && u[2] == 0 && fabs(u[3] - u11) < 1e-15,
        "gptq: U = [[%g, %g], [%g, %g]]", u[0], u[1], u[2], u[3]);
  double bad[4] = {1, 2, 2, 1};
  CHECK(qd_gptq_inverse_cholesky(bad, 2, u, lit) == 1, "gptq: [[1, 2], [2, 1]] fails at column 1");
  /* one row [0.5, -0.25], U = I, 4-bit asym over the row: scale 0.75 / 15, zero point 5 */
  double w[2] = {0.5, -0.25}, eye[4] = {1, 0, 0, 1}, scale = 0, zero = 0, scratch[2 * 1 * (128 + 1)];
  uint8_t codes[2] = {0xa5, 0xa5};
  qd_gptq_columns(w, 1, 2, eye, 15, 2, 0, 0, 128, codes, &scale, &zero, scratch);
  CHECK(scale == 0.75 / 15 && zero == 5 && codes[0] == 15 && codes[1] == 0,
        "gptq: codes [15, 0], scale 0.05, zero 5 (got [%d, %d], %g, %g)", codes[0], codes[1], scale, zero);
}

/* Quadratic forms (quadratic.c; test/awq/quadratic-kernel.test.ts checks it against the
 * TypeScript to the bit): δHδᵀ worked by hand, rows past one block of lanes. */
static void test_quadratic_forms(void) {
  const double h[4] = {4, 2, 2, 3};
  double d[2 * 35], out[35], scratch[32 * 2];
  for (int r = 0; r < 35; r++) d[2 * r] = r % 2 ? 0 : 1, d[2 * r + 1] = r % 2 ? 2 : -1;
  for (int avx2 = 0; avx2 < (qd_select("avx2") ? 2 : 1); avx2++) {
    qd_quadratic_forms(h, d, 35, 2, out, scratch, avx2);
    for (int r = 0; r < 35; r++)
      CHECK(out[r] == (r % 2 ? 12 : 3), "quadratic%s: row %d is %g, expected %d", avx2 ? " avx2" : "", r, out[r],
            r % 2 ? 12 : 3);
  }
}

/* Linear statistics (linear_stats.c; test/gptq/gptq-solve-kernel.test.ts checks it against the
 * TypeScript to the bit): each vector path against the plain definition — every entry's sum over
 * the tokens in order, then mirrored — on shapes past every block edge (tiles of 4, 6 and 8 rows,
 * 8 and 16 columns, 256-column blocks, 128-token blocks), from a non-empty start, with zeros and
 * -0 among the inputs; then NaN refused at its index with nothing changed. */
static void test_linear_stats(void) {
  static const uint64_t shapes[][2] = {{1, 1}, {3, 7}, {13, 129}, {37, 33}, {64, 128}, {300, 260}, {517, 131}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    const uint64_t k = shapes[s][0], n = shapes[s][1];
    float *x = malloc(n * k * 4);
    /* got: a guard of -0 after the Hessian, which a store past its last row would make +0 (a value
     * read and written back plus a zero product of either sign is -0 only if both are) */
    enum { GUARD = 64 };
    double *want = malloc(k * k * 8), *got = malloc((k * k + GUARD) * 8), *start = malloc(k * k * 8);
    double *aw = malloc(k * 8), *ag = malloc(k * 8);
    double *scratch = malloc(qd_linear_stats_scratch(k) * 8);
    for (uint64_t i = 0; i < n * k; i++) {
      const uint32_t r = next_u32() % 10;
      x[i] = r == 0 ? 0.0f : r == 1 ? -0.0f : (uniform() - 0.5f) * (float)(1u << (next_u32() % 12));
    }
    for (uint64_t i = 0; i < k; i++)
      for (uint64_t j = 0; j <= i; j++) start[i * k + j] = start[j * k + i] = (uniform() - 0.5) * 3;
    memcpy(want, start, k * k * 8);
    for (uint64_t i = 0; i < k; i++) aw[i] = i;
    for (uint64_t t = 0; t < n; t++)
      for (uint64_t i = 0; i < k; i++) {
        aw[i] += fabs((double)x[t * k + i]);
        for (uint64_t j = 0; j <= i; j++) want[i * k + j] += (double)x[t * k + i] * (double)x[t * k + j];
      }
    for (uint64_t i = 0; i < k; i++)
      for (uint64_t j = 0; j < i; j++) want[j * k + i] = want[i * k + j];
    for (int32_t isa = 0; isa <= 2; isa++) {
      memcpy(got, start, k * k * 8);
      for (int g = 0; g < GUARD; g++) got[k * k + g] = -0.0;
      for (uint64_t i = 0; i < k; i++) ag[i] = i;
      uint64_t bad = 99;
      CHECK(qd_linear_stats_add(got, ag, k, x, n, scratch, &bad, isa) == QD_OK && bad == 99, "stats %d: status", isa);
      CHECK(!memcmp(got, want, k * k * 8), "stats isa %d: k %llu, %llu tokens: Σ xᵀx differs", isa,
            (unsigned long long)k, (unsigned long long)n);
      CHECK(!memcmp(ag, aw, k * 8), "stats isa %d: k %llu: Σ |x| differs", isa, (unsigned long long)k);
      for (int g = 0; g < GUARD; g++)
        CHECK(got[k * k + g] == 0 && signbit(got[k * k + g]), "stats isa %d: k %llu: wrote past the Hessian", isa,
              (unsigned long long)k);
    }
    x[n * k - 1] = NAN;
    memcpy(got, start, k * k * 8);
    uint64_t bad = 0;
    CHECK(qd_linear_stats_add(got, ag, k, x, n, scratch, &bad, 2) == QD_NOT_FINITE && bad == n * k - 1 &&
              !memcmp(got, start, k * k * 8),
          "stats: NaN at %llu refused, nothing changed", (unsigned long long)(n * k - 1));
    free(x), free(want), free(got), free(start), free(aw), free(ag), free(scratch);
  }
}

/* Linear outputs (linear_out.c; test/core/linear-outputs-kernel.test.ts checks it against the
 * TypeScript to the bit): X·Wᵀ + b worked by hand, outputs past one block of lanes. */
static void test_linear_outputs(void) {
  enum { N = 2, K = 3, OUT = 35 };
  float x[N * K] = {1, 2, 3, -1, 0, 0.5f}, w[OUT * K], bias[OUT];
  double y[N * OUT], scratch[32 * K];
  for (int o = 0; o < OUT; o++) w[o * K] = (float)o, w[o * K + 1] = 1, w[o * K + 2] = -2, bias[o] = 0.25f;
  for (int avx2 = 0; avx2 < (qd_select("avx2") ? 2 : 1); avx2++) {
    qd_linear_outputs(x, w, bias, N, K, OUT, y, scratch, avx2);
    for (int o = 0; o < OUT; o++) {
      /* token 0: o + 2 − 6 + 0.25; token 1: −o − 1 + 0.25 */
      CHECK(y[o] == o - 3.75 && y[OUT + o] == -o - 0.75, "linear%s: output %d is %g, %g", avx2 ? " avx2" : "", o,
            y[o], y[OUT + o]);
    }
  }
}

int main(int argc, char **argv) {
  const char *all[] = {"avx2", "avx512", "simd128"};
  const char **isas = argc > 1 ? (const char **)argv + 1 : all;
  int n = argc > 1 ? argc - 1 : 3;
  test_reference_values();
  test_gptq_solve();
  test_quadratic_forms();
  test_linear_stats();
  test_linear_outputs();
  int tested = 0;
  for (int i = 0; i < n; i++) {
    if (!qd_supported(isas[i])) {
      if (argc > 1) {
        fprintf(stderr, "FAIL: ISA %s is not supported here\n", isas[i]);
        return 1;
      }
      continue;
    }
    const qd_kernels *k = qd_select(isas[i]);
    test_minmax(k);
    test_quantize(k);
    test_dequantize(k);
    test_fake_quantize(k);
    test_choose_quantize(k);
    test_conversions(k);
    test_quality(k);
    test_measured(k);
    test_choose_quantize_from(k);
    test_choose_long_units(k);
    test_choose_unit_batches(k);
    test_ggml(k);
    test_ggml_weighted(k);
    test_bnb(k);
    test_bnb_thresholds(k);
    test_nbits(k);
    test_nbits_many(k);
    test_awq(k);
    test_awq_lines(k);
    test_gptq(k);
    printf("%s: ok\n", k->isa);
    tested++;
  }
  printf("%ld checks, %d failures, %d ISAs\n", checks, failures, tested);
  return failures == 0 && tested > 0 ? 0 : 1;
}
