/*
 * IQ4_NL and IQ4_XS over the vector primitives (included by simd_ggml.h): ggml_iquants.c with
 * one group of 32 values per lane. The scale search runs qd_ggml_iq4_scale's statements in their
 * order in every lane — the same float32 operations, the refit sums over the values in the same
 * order — so the scales are identical; trial choices become lane masks. The codes are
 * best_index_int8 per lane; the fp16 d and IQ4_XS's 6-bit scales stay scalar
 * (qd_ggml_iq4_*_head). A chunk holding NaN is searched by the scalar code (a sum of two NaNs
 * keeps the compiler's choice of payload).
 */

static const float IQ4_LEVELS[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* Whether best_index_int8 keeps x below level k, given level k − 1: x − L[k−1] < L[k] − x. For
 * the pair bracketing x this is the scalar code's float32 comparison; for the others the signs
 * decide (a difference of distinct floats is never 0). NaN is never kept below: it climbs to the
 * last level, as in the scalar code. */
QD_V vm iq4_below(vf x, int k) {
  return vf_lt(vf_sub(x, vf_set(IQ4_LEVELS[k - 1])), vf_sub(vf_set(IQ4_LEVELS[k]), x));
}

/* The level best_index_int8 picks for x, as a float: −127 plus each step x climbs (exact). */
QD_V vf iq4_level(vf x) {
  vf q = vf_set(IQ4_LEVELS[0]);
  for (int k = 1; k < 16; k++) {
    q = vf_add(q, vf_select(iq4_below(x, k), vf_set(0.0f), vf_set(IQ4_LEVELS[k] - IQ4_LEVELS[k - 1])));
  }
  return q;
}

/* Its index: the number of steps x climbs. */
QD_V vi iq4_index(vf x) {
  vi idx = vi_set(0);
  for (int k = 1; k < 16; k++) idx = vi_add(idx, vi_select(iq4_below(x, k), vi_set(0), vi_set(1)));
  return idx;
}

/* The n (≤ VL) groups of 32 values at x, transposed: t[j][s] is value j of group s; spare lanes
 * hold zero groups. */
QD_V void iq4_transpose(const float *x, int n, float (*t)[VL]) {
  for (int s = 0; s < VL; s++) {
    for (int j = 0; j < 32; j++) t[j][s] = s < n ? x[32 * s + j] : 0.0f;
  }
}

/* The refit sums of the reciprocal scales id, per lane (weights tw, laid out as t, or x²; summed
 * in j order). */
QD_V void iq4_refit(const float (*t)[VL], const float (*tw)[VL], vf id, vf *sumqx, vf *sumq2) {
  vf sqx = vf_set(0.0f), sq2 = vf_set(0.0f);
  for (int j = 0; j < 32; j++) {
    const vf x = vf_load(t[j]);
    const vf q = iq4_level(vf_mul(id, x));
    const vf wq = vf_mul(tw != NULL ? vf_load(tw[j]) : vf_mul(x, x), q);
    sqx = vf_add(sqx, vf_mul(wq, x));
    sq2 = vf_add(sq2, vf_mul(wq, q));
  }
  *sumqx = sqx, *sumq2 = sq2;
}

/* qd_ggml_iq4_scale of the n groups at x (transposed in t; with an importance matrix, their
 * weights w, transposed in tw), to scales[0..VL) (0 for the spare lanes: always a whole vector, as
 * copying n floats would be a memcpy call the wasm build has not). */
QD_TARGET static void QD_NAME(iq4_search)(const float *x, const float *w, int n, const float (*t)[VL],
                                          const float (*tw)[VL], float *scales) {
  vm nan = vm_none();
  vf max = vf_set(0.0f), amax = vf_set(0.0f);
  for (int j = 0; j < 32; j++) {
    const vf v = vf_load(t[j]);
    nan = vm_or(nan, vf_unord(v));
    const vf ax = vf_abs(v);
    const vm bigger = vf_gt(ax, amax);
    amax = vf_select(bigger, ax, amax);
    max = vf_select(bigger, v, max);
  }
  if (vm_any(nan)) {
    for (int s = 0; s < VL; s++)
      scales[s] = s < n ? qd_ggml_iq4_scale(x + 32 * s, w != NULL ? w + 32 * s : NULL) : 0.0f;
    return;
  }
  const vm zero_group = vf_lt(amax, vf_set(1e-15f)); /* GROUP_MAX_EPS: scale 0 */
  const vf neg_max = vi_bits(vi_xor(vf_bits(max), vi_set(INT32_MIN)));
  vf sumqx, sumq2;
  iq4_refit(t, tw, vf_div(vf_set(1.0f), vf_div(neg_max, vf_set(-127.0f))), &sumqx, &sumq2);
  vf d = vf_select(vf_gt(sumq2, vf_set(0.0f)), vf_div(sumqx, sumq2), vf_set(0.0f));
  vf best = vf_mul(d, sumqx);
  for (int itry = -7; itry <= 7; itry++) {
    iq4_refit(t, tw, vf_div(vf_set((float)(itry - 127)), max), &sumqx, &sumq2);
    const vm better = vm_and(vf_gt(sumq2, vf_set(0.0f)), vf_gt(vf_mul(sumqx, sumqx), vf_mul(best, sumq2)));
    const vf this_d = vf_div(sumqx, sumq2);
    d = vf_select(better, this_d, d);
    best = vf_select(better, vf_mul(this_d, sumqx), best);
  }
  vf_store(scales, vf_select(zero_group, vf_set(0.0f), d));
}

/* The codes of the n groups in t for the reciprocals ids[0..VL), 16 packed bytes to dst[s]. */
QD_TARGET static void QD_NAME(iq4_codes)(int n, const float (*t)[VL], const float *ids, uint8_t *const *dst) {
  const vf id = vf_load(ids);
  int32_t c[32][VL];
  for (int j = 0; j < 32; j++) vi_store(c[j], iq4_index(vf_mul(id, vf_load(t[j]))));
  for (int s = 0; s < n; s++) {
    for (int j = 0; j < 16; j++) dst[s][j] = (uint8_t)(c[j][s] | (c[16 + j][s] << 4));
  }
}

/* IQ4_NL, with an importance matrix's column weights qw (NULL: without one; block b's at qw + 32b). */
QD_TARGET static void QD_NAME(iq4_nl_blocks)(const float *x, const float *qw, uint64_t blocks, uint8_t *out) {
  float t[32][VL], tw[32][VL], w[32 * VL], scales[VL], ids[VL];
  uint8_t *dst[VL];
  for (uint64_t b = 0; b < blocks; b += VL) {
    const int n = blocks - b < VL ? (int)(blocks - b) : VL;
    iq4_transpose(x + 32 * b, n, t);
    if (qw != NULL) {
      for (int s = 0; s < n; s++) qd_ggml_iq4_weights(x + 32 * (b + s), qw + 32 * (b + s), 32, w + 32 * s);
      iq4_transpose(w, n, tw);
    }
    QD_NAME(iq4_search)(x + 32 * b, qw != NULL ? w : NULL, n, (const float(*)[VL])t,
                        qw != NULL ? (const float(*)[VL])tw : NULL, scales);
    vf_store(ids, vf_set(0.0f));
    for (int s = 0; s < n; s++) {
      ids[s] = qd_ggml_iq4_nl_head(scales[s], out + 18 * (b + s));
      dst[s] = out + 18 * (b + s) + 2;
    }
    QD_NAME(iq4_codes)(n, (const float(*)[VL])t, ids, dst);
  }
}

/* IQ4_XS: a batch of super-blocks fills whole vectors of groups (VL / 8 of them; one on wasm,
 * whose 8 groups are two vectors). Every scale of a super-block is needed before its codes. With
 * an importance matrix's column weights qw (NULL: without one), super-block b's are at qw + 256b. */
QD_TARGET static void QD_NAME(iq4_xs_blocks)(const float *x, const float *qw, uint64_t blocks, uint8_t *out) {
  enum { SUPER = VL >= 8 ? VL / 8 : 1, GROUPS = 8 * SUPER, VECS = GROUPS / VL };
  float t[VECS][32][VL], tw[VECS][32][VL], w[256 * SUPER], scales[GROUPS], ids[GROUPS];
  uint8_t *dst[GROUPS];
  for (uint64_t b = 0; b < blocks; b += SUPER) {
    const int nb = blocks - b < SUPER ? (int)(blocks - b) : SUPER;
    if (qw != NULL) {
      for (int i = 0; i < nb; i++) qd_ggml_iq4_weights(x + 256 * (b + i), qw + 256 * (b + i), 256, w + 256 * i);
    }
    for (int v = 0; v < VECS; v++) {
      const int left = 8 * nb - VL * v, n = left < VL ? (left > 0 ? left : 0) : VL;
      iq4_transpose(x + 256 * b + 32 * VL * v, n, t[v]);
      if (qw != NULL) iq4_transpose(w + 32 * VL * v, n, tw[v]);
      QD_NAME(iq4_search)(x + 256 * b + 32 * VL * v, qw != NULL ? w + 32 * VL * v : NULL, n, (const float(*)[VL])t[v],
                          qw != NULL ? (const float(*)[VL])tw[v] : NULL, scales + VL * v);
    }
    for (int g = 0; g < GROUPS; g += VL) vf_store(ids + g, vf_set(0.0f));
    for (int i = 0; i < nb; i++) {
      qd_ggml_iq4_xs_head(scales + 8 * i, out + 136 * (b + i), ids + 8 * i);
      for (int g = 0; g < 8; g++) dst[8 * i + g] = out + 136 * (b + i) + 8 + 16 * g;
    }
    for (int v = 0; v < VECS; v++) {
      const int left = 8 * nb - VL * v, n = left < VL ? (left > 0 ? left : 0) : VL;
      QD_NAME(iq4_codes)(n, (const float(*)[VL])t[v], ids + VL * v, dst + VL * v);
    }
  }
}
