/*
 * ggml's 32-element block quantizers (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) over the vector primitives
 * (included by simd_kernels.h): operation for operation what ggml_ref.c does, so the bytes are
 * identical. The K-quants search their sub-blocks across lanes (simd_kquants.h), IQ4_NL / IQ4_XS
 * their groups of 32 (simd_iquants.h).
 * A block of 32 floats is QD_GGML_VECS vectors; the scales of a group of blocks are vectors
 * too (a scalar fp16 conversion per block cost more than all the rest of Q8_0). A block holding
 * NaN goes to the scalar reference, whose comparison order decides what NaN does; ±Infinity
 * needs no special case (every step is the same IEEE operation in both).
 */
#define QD_GGML_VECS (32 / VL)

QD_V vf vf_abs(vf v) { return vi_bits(vi_and(vf_bits(v), vi_set(0x7fffffff))); }
/* −v as C's unary minus: the sign bit flipped. */
QD_V vf vf_neg(vf v) { return vi_bits(vi_xor(vf_bits(v), vi_set((int32_t)0x80000000u))); }

/* roundf (half away from zero): trunc, then one step away from zero when the dropped fraction
 * is at least one half; v - trunc(v) is exact in float32. */
QD_V vf vf_roundf(vf v) {
  vf t = vf_trunc(v);
  vm up = vf_ge(vf_abs(vf_sub(v, t)), vf_set(0.5f));
  vf one = vi_bits(vi_or(vi_and(vf_bits(v), vi_set(INT32_MIN)), vi_set(0x3f800000))); /* copysign(1, v) */
  return vf_select(up, vf_add(t, one), t);
}

/* c_int of integral lanes, except that NaN and values outside int32 (INT32_MIN in C) give 0:
 * only the low byte of the result is ever used, and INT32_MIN's is 0 too. */
QD_V vi vi_c_int_low(vf r) {
  vm in_range = vm_and(vf_ge(r, vf_set(-2147483648.0f)), vf_lt(r, vf_set(2147483648.0f)));
  return vi_select(in_range, vf_to_vi_sat(r), vi_set(0));
}

/* Loads a block; 0 when it holds NaN. *amax: the largest magnitude (the bits of non-negative
 * floats order as integers). */
QD_V int ggml_load_block(const float *x, vf *v, float *amax) {
  vm nan = vm_none();
  vi top = vi_set(0);
  for (int k = 0; k < QD_GGML_VECS; k++) {
    v[k] = vf_load(x + k * VL);
    nan = vm_or(nan, vf_unord(v[k]));
    top = vi_max(top, vf_bits(vf_abs(v[k])));
  }
  int32_t bits = vi_hmax(top);
  __builtin_memcpy(amax, &bits, 4);
  return !vm_any(nan);
}

/* Blocks per group: the scales of a group are computed as vectors (two divisions and the fp16
 * conversion per lane instead of per block), then each block's codes with its broadcast id. */
#define QD_GGML_GROUP 16

/* What the reference stores for `amax`: d = amax / 127 (Q8_0) or max / -8 (Q4_0) with its fp16
 * bits, and id = d ? 1/d : 0 — lane for lane the reference's float32 operations. */
QD_TARGET static void QD_NAME(ggml_scales)(const float *top, float divisor, int n, float *ids, uint8_t *out,
                                        uint64_t block_bytes) {
  float d[QD_GGML_GROUP];
  uint16_t h[QD_GGML_GROUP];
  int i = 0;
  for (; i + VL <= n; i += VL) {
    vf dv = vf_div(vf_load(top + i), vf_set(divisor));
    vm zero = vf_ge(vf_set(0.0f), vf_abs(dv)); /* d == ±0 */
    vf_store(ids + i, vf_select(zero, vf_set(0.0f), vf_div(vf_set(1.0f), dv)));
#if QD_HAS_F16C
    vf_store_f16(h + i, dv);
#else
    vf_store(d + i, dv);
    for (int j = i; j < i + VL; j++) h[j] = qd_f32_to_f16(d[j]);
#endif
  }
  for (; i < n; i++) {
    d[i] = top[i] / divisor;
    ids[i] = d[i] != 0.0f ? 1.0f / d[i] : 0.0f;
    h[i] = qd_f32_to_f16(d[i]);
  }
  for (int b = 0; b < n; b++) {
    out[block_bytes * (uint64_t)b] = (uint8_t)h[b];
    out[block_bytes * (uint64_t)b + 1] = (uint8_t)(h[b] >> 8);
  }
}

/* Codes whose products are far from int32's limits (|id| finite and at most 2^20: |x·id| stays
 * near 127, or is NaN from Inf·0) need no range check: NaN converts to a low byte of 0 either way.
 * The magnitude matters: Q4_0 / Q5_0 ids are negative for a positive max, and an id of -Inf
 * (a subnormal d) must take the checked path, where ±Inf gives 0 as in C — SIMD128's saturating
 * conversion would give INT32_MAX for +Inf. */
#define QD_GGML_TAME(id) (__builtin_fabsf(id) <= 1048576.0f)

/* roundf for tame lanes, to int: trunc(v + copysign(½, v)) is exact for |v| ≥ ½ (the sum can
 * only round onto an integer it already truncates to), and |v| < ½ is 0 — where the sum may
 * round up to 1. NaN stays NaN, whose conversion has a low byte of 0. */
QD_V vi vi_roundf_tame(vf v) {
  vf half = vi_bits(vi_or(vi_and(vf_bits(v), vi_set(INT32_MIN)), vi_set(0x3f000000))); /* copysign(½, v) */
  vi r = vf_to_vi_trunc(vf_add(v, half));
  return vi_select(vf_lt(vf_abs(v), vf_set(0.5f)), vi_set(0), r);
}

QD_TARGET static void QD_NAME(ggml_q8_0_group)(const float *x, int n, uint8_t *out) {
  float top[QD_GGML_GROUP] = {0}, ids[QD_GGML_GROUP];
  vf v[QD_GGML_VECS];
  for (int b = 0; b < n; b++) {
    if (!ggml_load_block(x + 32 * b, v, &top[b])) { /* NaN: the reference's order decides */
      for (int c = 0; c < n; c++) qd_ggml_q8_0_block_ref(x + 32 * c, out + 34 * c);
      return;
    }
  }
  QD_NAME(ggml_scales)(top, 127.0f, n, ids, out, 34);
  for (int b = 0; b < n; b++) {
    const float *xb = x + 32 * b;
    uint8_t *ob = out + 34 * b + 2;
    const vf id = vf_set(ids[b]);
    vi q[QD_GGML_VECS];
    if (QD_GGML_TAME(ids[b])) {
      for (int k = 0; k < QD_GGML_VECS; k++)
        q[k] = vi_and(vi_roundf_tame(vf_mul(vf_load(xb + k * VL), id)), vi_set(0xff));
    } else {
      for (int k = 0; k < QD_GGML_VECS; k++)
        q[k] = vi_and(vi_c_int_low(vf_roundf(vf_mul(vf_load(xb + k * VL), id))), vi_set(0xff));
    }
#if 32 % (4 * VL) == 0
    for (int k = 0; k < QD_GGML_VECS; k += 4) store4_u8(ob + k * VL, q[k], q[k + 1], q[k + 2], q[k + 3]);
#else
    for (int k = 0; k < QD_GGML_VECS; k++) vi_store_u8(ob + k * VL, q[k]);
#endif
  }
}

/* The first value of largest magnitude `amax` (the reference's strict `<` keeps the first);
 * +0 when every value is ±0, as the reference starts from max = 0. */
QD_TARGET static float QD_NAME(ggml_first_max)(const float *x, float amax) {
  if (amax == 0.0f) return 0.0f;
  const vf target = vf_set(amax);
  for (int k = 0; k < QD_GGML_VECS; k++) {
    if (!vm_any(vf_ge(vf_abs(vf_load(x + k * VL)), target))) continue;
    for (int j = k * VL;; j++) {
      if (__builtin_fabsf(x[j]) == amax) return x[j];
    }
  }
  return 0.0f; /* not reached: amax is one of the magnitudes */
}

/* The reference's max for Q4_0 from the block's smallest and largest values (order keys, so
 * that no NaN-free block needs a scan): the one of larger magnitude, unless both magnitudes are
 * equal — then whichever comes first. 0 when NaN is present. */
QD_TARGET static int QD_NAME(ggml_signed_max)(const float *x, float *max) {
  vm nan = vm_none();
  vi hi = vi_set(INT32_MIN), lo = vi_set(INT32_MAX);
  for (int k = 0; k < QD_GGML_VECS; k++) {
    vf v = vf_load(x + k * VL);
    nan = vm_or(nan, vf_unord(v));
    vi key = key_of(vf_bits(v));
    hi = vi_max(hi, key);
    lo = vi_min(lo, key);
  }
  if (vm_any(nan)) return 0;
  int32_t hk = vi_hmax(hi), lk = vi_hmin(lo);
  hk ^= (int32_t)((uint32_t)(hk >> 31) >> 1), lk ^= (int32_t)((uint32_t)(lk >> 31) >> 1); /* keys back to bits */
  float h, l;
  __builtin_memcpy(&h, &hk, 4);
  __builtin_memcpy(&l, &lk, 4);
  const float ah = __builtin_fabsf(h), al = __builtin_fabsf(l);
  *max = ah > al ? h : al > ah ? l : QD_NAME(ggml_first_max)(x, ah);
  return 1;
}

QD_TARGET static void QD_NAME(ggml_q4_0_group)(const float *x, int n, uint8_t *out) {
  float top[QD_GGML_GROUP] = {0}, ids[QD_GGML_GROUP];
  for (int b = 0; b < n; b++) {
    if (!QD_NAME(ggml_signed_max)(x + 32 * b, &top[b])) { /* NaN: the reference's order decides */
      for (int c = 0; c < n; c++) qd_ggml_q4_0_block_ref(x + 32 * c, out + 18 * c);
      return;
    }
  }
  QD_NAME(ggml_scales)(top, -8.0f, n, ids, out, 18);
  for (int b = 0; b < n; b++) {
    const float *xb = x + 32 * b;
    const vf id = vf_set(ids[b]);
    vi q[QD_GGML_VECS];
    for (int k = 0; k < QD_GGML_VECS; k++) {
      vf y = vf_add(vf_mul(vf_load(xb + k * VL), id), vf_set(8.5f));
      vi i = QD_GGML_TAME(ids[b]) ? vf_to_vi_trunc(y) : vi_c_int_low(vf_trunc(y));
      q[k] = vi_min(vi_sra(vi_sll(i, 24), 24), vi_set(15)); /* (int8_t), then MIN(15, ·) */
    }
    /* byte j: element j in the low nibble (all eight bits of it, as the reference ORs them),
     * element j + 16 in the high one */
    uint8_t *ob = out + 18 * b + 2;
    for (int k = 0; k < QD_GGML_VECS / 2; k++) {
      vi lo = vi_and(q[k], vi_set(0xff)), hi = vi_sll(vi_and(q[k + QD_GGML_VECS / 2], vi_set(0x0f)), 4);
      vi_store_u8(ob + k * VL, vi_and(vi_or(lo, hi), vi_set(0xff)));
    }
  }
}

/* fp16 of n floats, to out + stride·b (the min of Q4_1 / Q5_1 blocks). */
QD_TARGET static void QD_NAME(ggml_store_f16s)(const float *v, int n, uint8_t *out, uint64_t stride) {
  uint16_t h[QD_GGML_GROUP];
  int i = 0;
#if QD_HAS_F16C
  for (; i + VL <= n; i += VL) vf_store_f16(h + i, vf_load(v + i));
#endif
  for (; i < n; i++) h[i] = qd_f32_to_f16(v[i]);
  for (int b = 0; b < n; b++) {
    out[stride * (uint64_t)b] = (uint8_t)h[b];
    out[stride * (uint64_t)b + 1] = (uint8_t)(h[b] >> 8);
  }
}

/* The reference's min and max of a block (from ±FLT_MAX with strict comparisons) from order
 * keys; 0 when the block holds NaN or either end is ±0 (then which zero comes first decides). */
QD_TARGET static int QD_NAME(ggml_min_max)(const float *x, float *min, float *max) {
  vm nan = vm_none();
  vi hi = vi_set(INT32_MIN), lo = vi_set(INT32_MAX);
  for (int k = 0; k < QD_GGML_VECS; k++) {
    vf v = vf_load(x + k * VL);
    nan = vm_or(nan, vf_unord(v));
    vi key = key_of(vf_bits(v));
    hi = vi_max(hi, key);
    lo = vi_min(lo, key);
  }
  if (vm_any(nan)) return 0;
  int32_t hk = vi_hmax(hi), lk = vi_hmin(lo);
  hk ^= (int32_t)((uint32_t)(hk >> 31) >> 1), lk ^= (int32_t)((uint32_t)(lk >> 31) >> 1); /* keys back to bits */
  float h, l;
  __builtin_memcpy(&h, &hk, 4);
  __builtin_memcpy(&l, &lk, 4);
  if (h == 0.0f || l == 0.0f) return 0;
  *min = l < 3.40282347e38f ? l : 3.40282347e38f; /* a block of +Inf keeps the starting FLT_MAX */
  *max = h > -3.40282347e38f ? h : -3.40282347e38f;
  return 1;
}

/* Bit 4 of 32 code bytes as a 32-bit mask (qh of Q5_0 / Q5_1): each 0/1 byte of a word moves to
 * bit i of the top byte by one multiplication (the partial products never overlap). */
static inline uint32_t ggml_fifth_bits(const uint8_t *codes) {
  uint32_t qh = 0;
  for (int w = 0; w < 4; w++) {
    uint64_t word;
    __builtin_memcpy(&word, codes + 8 * w, 8);
    const uint64_t bits = (word >> 4) & 0x0101010101010101ull;
    qh |= (uint32_t)((bits * 0x0102040810204080ull) >> 56) << (8 * w);
  }
  return qh;
}

/* Codes 0..255 of a Q5 block: their low nibbles into qs (element j low, j + 16 high) and their
 * fifth bits into qh. */
QD_TARGET static void QD_NAME(ggml_store_five_bits)(const vi *q, uint8_t *qh, uint8_t *qs) {
  uint8_t codes[32];
  for (int k = 0; k < QD_GGML_VECS; k++) vi_store_u8(codes + k * VL, q[k]);
  const uint32_t bits = ggml_fifth_bits(codes);
  for (int i = 0; i < 4; i++) qh[i] = (uint8_t)(bits >> (8 * i));
  for (int k = 0; k < QD_GGML_VECS / 2; k++) {
    vi lo = vi_and(q[k], vi_set(0x0f)), hi = vi_sll(vi_and(q[k + QD_GGML_VECS / 2], vi_set(0x0f)), 4);
    vi_store_u8(qs + k * VL, vi_or(lo, hi));
  }
}

/* The affine types Q4_1 (nmax 15, clamped) and Q5_1 (nmax 31, unclamped): d = (max - min)/nmax,
 * codes (x - min)·id + ½ truncated. */
QD_TARGET static void QD_NAME(ggml_affine_group)(const float *x, int n, int five_bits, uint8_t *out) {
  const uint64_t size = five_bits ? 24 : 20;
  float mins[QD_GGML_GROUP] = {0}, ranges[QD_GGML_GROUP] = {0}, ids[QD_GGML_GROUP];
  for (int b = 0; b < n; b++) {
    float max;
    if (!QD_NAME(ggml_min_max)(x + 32 * b, &mins[b], &max)) { /* the reference's order decides */
      for (int c = 0; c < n; c++) (five_bits ? qd_ggml_q5_1_block_ref : qd_ggml_q4_1_block_ref)(x + 32 * c, out + size * c);
      return;
    }
    ranges[b] = max - mins[b];
  }
  QD_NAME(ggml_scales)(ranges, five_bits ? 31.0f : 15.0f, n, ids, out, size);
  QD_NAME(ggml_store_f16s)(mins, n, out + 2, size);
  for (int b = 0; b < n; b++) {
    const float *xb = x + 32 * b;
    const vf id = vf_set(ids[b]), min = vf_set(mins[b]);
    vi q[QD_GGML_VECS];
    for (int k = 0; k < QD_GGML_VECS; k++) {
      vf y = vf_add(vf_mul(vf_sub(vf_load(xb + k * VL), min), id), vf_set(0.5f));
      vi i = QD_GGML_TAME(ids[b]) ? vf_to_vi_trunc(y) : vi_c_int_low(vf_trunc(y));
      /* Q5_1: (uint8_t) of the int; Q4_1: MIN(15, (int8_t) of it) */
      q[k] = five_bits ? vi_and(i, vi_set(0xff)) : vi_min(vi_sra(vi_sll(i, 24), 24), vi_set(15));
    }
    uint8_t *ob = out + size * b + (five_bits ? 8 : 4);
    if (five_bits) {
      QD_NAME(ggml_store_five_bits)(q, ob - 4, ob);
    } else {
      /* as Q4_0: the low nibble keeps all eight bits of its code, as the reference ORs them */
      for (int k = 0; k < QD_GGML_VECS / 2; k++) {
        vi lo = vi_and(q[k], vi_set(0xff)), hi = vi_sll(vi_and(q[k + QD_GGML_VECS / 2], vi_set(0x0f)), 4);
        vi_store_u8(ob + k * VL, vi_and(vi_or(lo, hi), vi_set(0xff)));
      }
    }
  }
}

/* Q5_0: Q4_0's scheme with d = max / -16 and codes MIN(31, (int8_t)(x·id + 16.5)). */
QD_TARGET static void QD_NAME(ggml_q5_0_group)(const float *x, int n, uint8_t *out) {
  float top[QD_GGML_GROUP] = {0}, ids[QD_GGML_GROUP];
  for (int b = 0; b < n; b++) {
    if (!QD_NAME(ggml_signed_max)(x + 32 * b, &top[b])) { /* NaN: the reference's order decides */
      for (int c = 0; c < n; c++) qd_ggml_q5_0_block_ref(x + 32 * c, out + 22 * c);
      return;
    }
  }
  QD_NAME(ggml_scales)(top, -16.0f, n, ids, out, 22);
  for (int b = 0; b < n; b++) {
    const float *xb = x + 32 * b;
    const vf id = vf_set(ids[b]);
    vi q[QD_GGML_VECS];
    for (int k = 0; k < QD_GGML_VECS; k++) {
      vf y = vf_add(vf_mul(vf_load(xb + k * VL), id), vf_set(16.5f));
      vi i = QD_GGML_TAME(ids[b]) ? vf_to_vi_trunc(y) : vi_c_int_low(vf_trunc(y));
      q[k] = vi_and(vi_min(vi_sra(vi_sll(i, 24), 24), vi_set(31)), vi_set(0xff));
    }
    QD_NAME(ggml_store_five_bits)(q, out + 22 * b + 2, out + 22 * b + 6);
  }
}

#include "simd_kquants.h"
#include "simd_iquants.h"

QD_TARGET static qd_status QD_NAME(ggml_quantize)(int32_t type, const float *x, uint64_t blocks, uint8_t *out) {
  const uint64_t size = qd_ggml_block_bytes(type);
  if (size == 0) return QD_BAD_ARGUMENT;
  if (type == QD_GGML_Q6_K || type == QD_GGML_Q3_K || type == QD_GGML_Q2_K) {
    for (uint64_t b = 0; b < blocks; b++) QD_NAME(kq_sixteen_block)(type, x + 256 * b, NULL, out + size * b);
    return QD_OK;
  }
  if (type == QD_GGML_IQ4_NL) {
    QD_NAME(iq4_nl_blocks)(x, NULL, blocks, out);
    return QD_OK;
  }
  if (type == QD_GGML_IQ4_XS) {
    QD_NAME(iq4_xs_blocks)(x, NULL, blocks, out);
    return QD_OK;
  }
  if (type == QD_GGML_Q4_K || type == QD_GGML_Q5_K) {
    for (uint64_t b = 0; b < blocks; b += KQ_Q4_SUPER) {
      const int n = blocks - b < KQ_Q4_SUPER ? (int)(blocks - b) : KQ_Q4_SUPER;
      QD_NAME(kq_affine_k_blocks)(x + 256 * b, NULL, n, out + size * b, type == QD_GGML_Q5_K);
    }
    return QD_OK;
  }
  for (uint64_t b = 0; b < blocks; b += QD_GGML_GROUP) {
    const int n = blocks - b < QD_GGML_GROUP ? (int)(blocks - b) : QD_GGML_GROUP;
    const float *xg = x + 32 * b;
    uint8_t *og = out + size * b;
    switch (type) {
    case QD_GGML_Q8_0: QD_NAME(ggml_q8_0_group)(xg, n, og); break;
    case QD_GGML_Q4_0: QD_NAME(ggml_q4_0_group)(xg, n, og); break;
    case QD_GGML_Q4_1: QD_NAME(ggml_affine_group)(xg, n, 0, og); break;
    case QD_GGML_Q5_0: QD_NAME(ggml_q5_0_group)(xg, n, og); break;
    default: QD_NAME(ggml_affine_group)(xg, n, 1, og); break; /* Q5_1 */
    }
  }
  return QD_OK;
}

/* One row of Q4_0 / Q5_0 / Q4_1 / Q5_1 with an importance matrix: VL blocks of 32 at a time, one
 * per lane, through the K-quants' searches (make_qx_quants, make_qkx3_quants); a chunk holding NaN
 * by the scalar reference. */
QD_TARGET static void QD_NAME(ggml_legacy_weighted_row)(int32_t type, const float *x, uint64_t ne0, const float *qw,
                                                      uint8_t *out) {
  const uint64_t size = qd_ggml_block_bytes(type), blocks = ne0 / 32;
  const float sigma2 = qd_ggml_row_sigma2(x, ne0);
  const int32_t nmax = qd_ggml_legacy_nmax(type);
  const int symmetric = type == QD_GGML_Q4_0 || type == QD_GGML_Q5_0;
  float w[32 * VL], t[32 * VL], tw[32 * VL], scales[VL], neg_mins[VL];
  uint8_t L[32 * VL];
  for (uint64_t b = 0; b < blocks; b += VL) {
    const int n = blocks - b < VL ? (int)(blocks - b) : VL;
    vm nan = vm_none();
    for (int s = 0; s < VL; s++) {
      if (s < n) qd_matrix_weights(x + 32 * (b + s), qw + 32 * (b + s), sigma2, 32, w + 32 * s);
      for (int i = 0; i < 32; i++) {
        t[VL * i + s] = s < n ? x[32 * (b + s) + i] : 0.0f;
        tw[VL * i + s] = s < n ? w[32 * s + i] : 0.0f;
      }
    }
    for (int i = 0; i < 32; i++) nan = vm_or(nan, vf_unord(vf_load(t + VL * i)));
    if (vm_any(nan)) {
      for (int s = 0; s < n; s++)
        qd_ggml_legacy_weighted_block_ref(type, x + 32 * (b + s), w + 32 * s, out + size * (b + s));
      continue;
    }
    if (symmetric && nmax == 8)
      QD_NAME(kq_qx_search)(t, tw, VL, 0, 32, scales, (int8_t *)L, 8);
    else if (symmetric)
      QD_NAME(kq_qx_search)(t, tw, VL, 0, 32, scales, (int8_t *)L, 16);
    else if (nmax == 15)
      QD_NAME(kq_affine_search)(t, tw, VL, 0, 32, 0, scales, neg_mins, L, 15, -0.9f, 0.05f, 36);
    else
      QD_NAME(kq_affine_search)(t, tw, VL, 0, 32, 0, scales, neg_mins, L, 31, -0.9f, 0.05f, 36);
    for (int s = 0; s < n; s++)
      qd_ggml_legacy_weighted_finish(type, scales[s], symmetric ? 0.0f : neg_mins[s], L + 32 * s, out + size * (b + s));
  }
}

/* With an importance matrix: each row's blocks searched across lanes as without one (several at a
 * time, never across rows: each block has its own columns' weights). */
QD_TARGET static qd_status QD_NAME(ggml_quantize_weighted)(int32_t type, const float *x, uint64_t rows, uint64_t ne0,
                                                         const float *qw, uint8_t *out) {
  if (qd_ggml_block_values(type) == 0 || ne0 == 0 || ne0 % qd_ggml_block_values(type) != 0) return QD_BAD_ARGUMENT;
  const uint64_t size = qd_ggml_block_bytes(type), blocks = ne0 / qd_ggml_block_values(type);
  if (type == QD_GGML_Q8_0) return QD_NAME(ggml_quantize)(type, x, rows * blocks, out); /* no weights */
  const int affine = type == QD_GGML_Q4_K || type == QD_GGML_Q5_K;
  for (uint64_t r = 0; r < rows; r++) {
    const float *xr = x + r * ne0;
    uint8_t *outr = out + r * blocks * size;
    if (qd_ggml_legacy_weighted(type)) {
      QD_NAME(ggml_legacy_weighted_row)(type, xr, ne0, qw, outr);
      continue;
    }
    if (type == QD_GGML_IQ4_NL || type == QD_GGML_IQ4_XS) {
      (type == QD_GGML_IQ4_NL ? QD_NAME(iq4_nl_blocks) : QD_NAME(iq4_xs_blocks))(xr, qw, blocks, outr);
      continue;
    }
    for (uint64_t b = 0; b < blocks; b += affine ? KQ_Q4_SUPER : 1) {
      if (!affine) {
        QD_NAME(kq_sixteen_block)(type, xr + 256 * b, qw + 256 * b, outr + size * b);
        continue;
      }
      const int n = blocks - b < KQ_Q4_SUPER ? (int)(blocks - b) : KQ_Q4_SUPER;
      QD_NAME(kq_affine_k_blocks)(xr + 256 * b, qw + 256 * b, n, outr + size * b, type == QD_GGML_Q5_K);
    }
  }
  return QD_OK;
}
