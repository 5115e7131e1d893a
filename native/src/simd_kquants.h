/*
 * The K-quants' sub-block searches over the vector primitives (included by simd_ggml.h): one
 * sub-block per lane, so every lane runs ggml_kquants.c's statements in their order — the same
 * float32 operations, the same sums in the same order — and the bytes are identical. Never a
 * sum reassociated across lanes. A super-block holding NaN goes to the scalar reference (which
 * NaN payload survives a two-NaN operation is the compiler's choice, not ours).
 */

/* ggml's nearest_int per lane: add 1.5·2^23, keep the low mantissa bits. */
QD_V vi kq_nearest(vf v) {
  vi bits = vf_bits(vf_add(v, vf_set(12582912.0f)));
  return vi_sub(vi_and(bits, vi_set(0x007fffff)), vi_set(0x00400000));
}

QD_V vi kq_clamp(vi v, int32_t lo, int32_t hi) { return vi_min(vi_max(v, vi_set(lo)), vi_set(hi)); }

/* x == 0 (either zero) without an equality primitive; false for NaN. */
QD_V vm kq_is_zero(vf x) { return vm_and(vf_ge(x, vf_set(0.0f)), vf_le(x, vf_set(0.0f))); }

/* Whether a super-block of 256 floats holds NaN. */
QD_TARGET static int QD_NAME(kq_has_nan)(const float *x) {
  vm nan = vm_none();
  for (int k = 0; k < 256; k += VL) nan = vm_or(nan, vf_unord(vf_load(x + k)));
  return vm_any(nan);
}

/* VL sub-blocks of n (t[stride·i + s] is element i of sub-block s; lanes: sub-blocks first ..
 * first + VL) into xs, and each one's signed value of largest magnitude (the first such),
 * as qd_ggml_signed_abs_max; *zero_group: the lanes whose magnitude is below GROUP_MAX_EPS. */
QD_V vf kq_load_signed_max(const float *t, int stride, int first, int n, vf *xs, vm *zero_group) {
  vf max = vf_set(0.0f), amax = vf_set(0.0f);
  for (int i = 0; i < n; i++) {
    xs[i] = vf_load(t + stride * i + first);
    vf ax = vf_abs(xs[i]);
    vm bigger = vf_gt(ax, amax);
    amax = vf_select(bigger, ax, amax);
    max = vf_select(bigger, xs[i], max);
  }
  *zero_group = vf_lt(amax, vf_set(1e-15f));
  return max;
}

/* make_qx_quants (rmse_type 1) for VL sub-blocks of N (kq_load_signed_max's t): Q6_K (N 16, nmax
 * 32) weighted by x²; with an importance matrix's weights tw (laid out as t), Q6_K, Q3_K (nmax 4),
 * Q4_0 (N 32, nmax 8) and Q5_0 (N 32, nmax 16). Their scales to scales[], codes (nmax + code) to
 * L[N·s + i]. Always inlined, so that N and NMAX are constants. */
QD_V void QD_NAME(kq_qx_search)(const float *t, const float *tw, const int stride, int first, const int N,
                                float *scales, int8_t *L, const int32_t NMAX) {
  vf xs[32], ws[32];
  vm zero_group; /* all codes 0, scale 0 */
  const vf max = kq_load_signed_max(t, stride, first, N, xs, &zero_group);
  for (int i = 0; i < N; i++) ws[i] = tw != NULL ? vf_load(tw + stride * i + first) : vf_mul(xs[i], xs[i]);
  vf iscale = vf_div(vf_set(-(float)NMAX), max);
  vf sumlx = vf_set(0.0f), suml2 = vf_set(0.0f);
  vi l[32];
  for (int i = 0; i < N; i++) {
    vi li = kq_clamp(kq_nearest(vf_mul(iscale, xs[i])), -NMAX, NMAX - 1);
    l[i] = vi_add(li, vi_set(NMAX));
    const vf lf = vi_to_vf(li), w = ws[i];
    sumlx = vf_add(sumlx, vf_mul(vf_mul(w, xs[i]), lf));
    suml2 = vf_add(suml2, vf_mul(vf_mul(w, lf), lf));
  }
  vf scale = vf_select(kq_is_zero(suml2), vf_set(0.0f), vf_div(sumlx, suml2));
  vf best = vf_mul(scale, sumlx);
  for (int is = -9; is <= 9; is++) { /* make_qx_quants' trials */
    if (is == 0) continue;
    iscale = vf_div(vf_set(-((float)NMAX + 0.1f * (float)is)), max);
    sumlx = suml2 = vf_set(0.0f);
    for (int i = 0; i < N; i++) {
      const vf lf = vi_to_vf(kq_clamp(kq_nearest(vf_mul(iscale, xs[i])), -NMAX, NMAX - 1));
      const vf w = ws[i];
      sumlx = vf_add(sumlx, vf_mul(vf_mul(w, xs[i]), lf));
      suml2 = vf_add(suml2, vf_mul(vf_mul(w, lf), lf));
    }
    const vm better =
        vm_and(vf_gt(suml2, vf_set(0.0f)), vf_gt(vf_mul(sumlx, sumlx), vf_mul(best, suml2)));
    if (!vm_any(better)) continue;
    for (int i = 0; i < N; i++) {
      vi li = vi_add(kq_clamp(kq_nearest(vf_mul(iscale, xs[i])), -NMAX, NMAX - 1), vi_set(NMAX));
      l[i] = vi_select(better, li, l[i]);
    }
    const vf this_scale = vf_div(sumlx, suml2);
    scale = vf_select(better, this_scale, scale);
    best = vf_select(better, vf_mul(this_scale, sumlx), best);
  }
  scale = vf_select(zero_group, vf_set(0.0f), scale);
  int32_t lanes[32][VL];
  for (int i = 0; i < N; i++) vi_store(lanes[i], vi_select(zero_group, vi_set(0), l[i]));
  vf_store(scales + first, scale);
  for (int s = 0; s < VL; s++) {
    for (int i = 0; i < N; i++) L[N * (first + s) + i] = (int8_t)lanes[i][s];
  }
}

/* make_q3_quants (nmax 4, do_rmse) for VL sub-blocks of 16 (kq_load_signed_max's t); scales to
 * scales[], codes (code + 4; 0 for an all-zero sub-block) to L[16·s + i]. The reference's passes
 * of single-code changes run on all lanes together until no lane changes (at most five): a lane
 * whose pass changed nothing would change nothing in the next, so the extra passes leave it. */
QD_TARGET static void QD_NAME(kq_q3_search)(const float *t, int first, float *scales, int8_t *L) {
  enum { N = 16, NMAX = 4 };
  vf xs[N];
  vm zero_group;
  const vf max = kq_load_signed_max(t, 16, first, 16, xs, &zero_group);
  const vf iscale = vf_div(vf_set(-(float)NMAX), max);
  vf sumlx = vf_set(0.0f), suml2 = vf_set(0.0f);
  vi l[N];
  for (int i = 0; i < N; i++) {
    l[i] = kq_clamp(kq_nearest(vf_mul(iscale, xs[i])), -NMAX, NMAX - 1);
    const vf lf = vi_to_vf(l[i]), w = vf_mul(xs[i], xs[i]);
    sumlx = vf_add(sumlx, vf_mul(vf_mul(w, xs[i]), lf));
    suml2 = vf_add(suml2, vf_mul(vf_mul(w, lf), lf));
  }
  for (int itry = 0; itry < 5; itry++) {
    vm changed = vm_none();
    for (int i = 0; i < N; i++) {
      const vf w = vf_mul(xs[i], xs[i]), wx = vf_mul(w, xs[i]), lf = vi_to_vf(l[i]);
      vf slx = vf_sub(sumlx, vf_mul(wx, lf));
      vf sl2 = vf_sub(suml2, vf_mul(vf_mul(w, lf), lf));
      const vi new_l = kq_clamp(kq_nearest(vf_div(vf_mul(xs[i], sl2), slx)), -NMAX, NMAX - 1);
      const vm moved = vm_and(vf_gt(slx, vf_set(0.0f)), vm_or(vi_gt(new_l, l[i]), vi_gt(l[i], new_l)));
      if (!vm_any(moved)) continue;
      const vf nf = vi_to_vf(new_l);
      slx = vf_add(slx, vf_mul(wx, nf));
      sl2 = vf_add(sl2, vf_mul(vf_mul(w, nf), nf));
      const vf gain = vf_mul(vf_mul(slx, slx), suml2), kept = vf_mul(vf_mul(sumlx, sumlx), sl2);
      const vm better = vm_and(moved, vm_and(vf_gt(sl2, vf_set(0.0f)), vf_gt(gain, kept)));
      l[i] = vi_select(better, new_l, l[i]);
      sumlx = vf_select(better, slx, sumlx);
      suml2 = vf_select(better, sl2, suml2);
      changed = vm_or(changed, better);
    }
    if (!vm_any(changed)) break;
  }
  vf scale = vf_select(vf_gt(suml2, vf_set(0.0f)), vf_div(sumlx, suml2), vf_set(0.0f));
  vf_store(scales + first, vf_select(zero_group, vf_set(0.0f), scale));
  int32_t lanes[N][VL];
  for (int i = 0; i < N; i++) vi_store(lanes[i], vi_select(zero_group, vi_set(0), vi_add(l[i], vi_set(NMAX))));
  for (int s = 0; s < VL; s++) {
    for (int i = 0; i < N; i++) L[16 * (first + s) + i] = (int8_t)lanes[i][s];
  }
}

/* Super-blocks per Q4_K search: its 8 sub-blocks fill VL lanes, or half of AVX-512's 16. */
#define KQ_Q4_SUPER (VL > 8 ? VL / 8 : 1)
#define KQ_Q4_SUBS (8 * KQ_Q4_SUPER)

/* make_qkx2_quants for VL sub-blocks of N, with its callers' weights:
 * - Q4_K (nmax 15, rmin -1, rdelta 0.1, nstep 20) and Q5_K (nmax 31, rmin -0.5, nstep 15): N 32,
 *   weights av_x + |x|, squared error;
 * - Q2_K (`mad`: nmax 3, rmin -0.5, rdelta 0.1, nstep 15): N 16, weights |x|, absolute error;
 * - with an importance matrix (rmin -0.9, rdelta 0.05, nstep 36, squared error): its weights
 *   tw, laid out as t.
 * t[stride·i + s] is element i of sub-block s (lanes: sub-blocks first .. first + VL); scales,
 * negated mins and codes L[N·s + i] out. Always inlined, so that N and `mad` are constants. */
QD_V void QD_NAME(kq_affine_search)(const float *t, const float *tw, const int stride, const int first, const int N,
                                    const int mad, float *scales, float *neg_mins, uint8_t *L, const int32_t NMAX,
                                    const float rmin, const float rdelta, const int NSTEP) {
  vf xs[32], ws[32];
  vf sum_x2 = vf_set(0.0f);
  for (int i = 0; i < N; i++) {
    xs[i] = vf_load(t + stride * i + first);
    sum_x2 = vf_add(sum_x2, vf_mul(xs[i], xs[i]));
  }
  if (tw != NULL) {
    for (int i = 0; i < N; i++) ws[i] = vf_load(tw + stride * i + first);
  } else if (mad) {
    for (int i = 0; i < N; i++) ws[i] = vf_abs(xs[i]);
  } else {
    float av[VL];
    vf_store(av, vf_div(sum_x2, vf_set(32.0f)));
    for (int s = 0; s < VL; s++) av[s] = __builtin_sqrtf(av[s]);
    const vf av_x = vf_load(av);
    for (int i = 0; i < N; i++) ws[i] = vf_add(av_x, vf_abs(xs[i]));
  }
  vf min = xs[0], max = xs[0];
  vf sum_w = ws[0];
  vf sum_x = vf_mul(sum_w, xs[0]);
  for (int i = 1; i < N; i++) {
    min = vf_select(vf_lt(xs[i], min), xs[i], min);
    max = vf_select(vf_gt(xs[i], max), xs[i], max);
    sum_w = vf_add(sum_w, ws[i]);
    sum_x = vf_add(sum_x, vf_mul(ws[i], xs[i]));
  }
  min = vf_select(vf_gt(min, vf_set(0.0f)), vf_set(0.0f), min);
  const vf flat_min = min; /* lanes with max == min stop here: codes 0, scale 0 */
  const vm flat = vm_and(vf_ge(max, min), vf_le(max, min));
  vf iscale = vf_div(vf_set((float)NMAX), vf_sub(max, min));
  vf scale = vf_div(vf_set(1.0f), iscale);
  vf best_error = vf_set(0.0f);
  vi l[32];
  for (int i = 0; i < N; i++) {
    l[i] = kq_clamp(kq_nearest(vf_mul(iscale, vf_sub(xs[i], min))), 0, NMAX);
    vf diff = vf_sub(vf_add(vf_mul(scale, vi_to_vf(l[i])), min), xs[i]);
    best_error = vf_add(best_error, vf_mul(ws[i], mad ? vf_abs(diff) : vf_mul(diff, diff)));
  }
  for (int is = 0; is <= NSTEP; is++) {
    iscale = vf_div(vf_set(rmin + rdelta * (float)is + (float)NMAX), vf_sub(max, min));
    vf sum_l = vf_set(0.0f), sum_l2 = vf_set(0.0f), sum_xl = vf_set(0.0f);
    vi laux[32];
    for (int i = 0; i < N; i++) {
      laux[i] = kq_clamp(kq_nearest(vf_mul(iscale, vf_sub(xs[i], min))), 0, NMAX);
      const vf lf = vi_to_vf(laux[i]), wl = vf_mul(ws[i], lf);
      sum_l = vf_add(sum_l, wl);
      sum_l2 = vf_add(sum_l2, vf_mul(wl, lf));
      sum_xl = vf_add(sum_xl, vf_mul(wl, xs[i]));
    }
    const vf D = vf_sub(vf_mul(sum_w, sum_l2), vf_mul(sum_l, sum_l));
    const vm solvable = vf_gt(D, vf_set(0.0f));
    if (!vm_any(solvable)) continue;
    vf this_scale = vf_div(vf_sub(vf_mul(sum_w, sum_xl), vf_mul(sum_x, sum_l)), D);
    vf this_min = vf_div(vf_sub(vf_mul(sum_l2, sum_x), vf_mul(sum_l, sum_xl)), D);
    const vm positive_min = vf_gt(this_min, vf_set(0.0f));
    this_min = vf_select(positive_min, vf_set(0.0f), this_min);
    this_scale = vf_select(positive_min, vf_div(sum_xl, sum_l2), this_scale);
    vf cur_error = vf_set(0.0f);
    for (int i = 0; i < N; i++) {
      vf diff = vf_sub(vf_add(vf_mul(this_scale, vi_to_vf(laux[i])), this_min), xs[i]);
      cur_error = vf_add(cur_error, vf_mul(ws[i], mad ? vf_abs(diff) : vf_mul(diff, diff)));
    }
    const vm better = vm_and(solvable, vf_lt(cur_error, best_error));
    if (!vm_any(better)) continue;
    for (int i = 0; i < N; i++) l[i] = vi_select(better, laux[i], l[i]);
    best_error = vf_select(better, cur_error, best_error);
    scale = vf_select(better, this_scale, scale);
    min = vf_select(better, this_min, min);
  }
  scale = vf_select(flat, vf_set(0.0f), scale);
  min = vf_select(flat, flat_min, min);
  vf_store(scales + first, scale);
  vf_store(neg_mins + first, vi_bits(vi_xor(vf_bits(min), vi_set(INT32_MIN)))); /* -min, -0 for +0 */
  int32_t lanes[32][VL];
  for (int i = 0; i < N; i++) vi_store(lanes[i], vi_select(flat, vi_set(0), l[i]));
  for (int s = 0; s < VL; s++) {
    for (int i = 0; i < N; i++) L[N * (first + s) + i] = (uint8_t)lanes[i][s];
  }
}

/* `n` (at most KQ_Q4_SUPER) Q4_K (five_bits 0) or Q5_K (1) super-blocks, with an importance
 * matrix's column weights qw (NULL: without one): those without NaN searched together, the others
 * by the scalar reference. */
QD_TARGET static void QD_NAME(kq_affine_k_blocks)(const float *x, const float *qw, int n, uint8_t *out,
                                                  const int five_bits) {
  const int32_t type = five_bits ? QD_GGML_Q5_K : QD_GGML_Q4_K;
  const uint64_t size = five_bits ? 176 : 144;
  float t[256 * KQ_Q4_SUPER], tw[256 * KQ_Q4_SUPER], w[256], sw[KQ_Q4_SUBS];
  float scales[KQ_Q4_SUBS], neg_mins[KQ_Q4_SUBS];
  uint8_t L[256 * KQ_Q4_SUPER];
  int nan[KQ_Q4_SUPER];
  for (int b = 0; b < KQ_Q4_SUPER; b++) {
    nan[b] = b < n && QD_NAME(kq_has_nan)(x + 256 * b);
    const int used = b < n && !nan[b];
    if (used && qw != NULL) qd_ggml_matrix_weights(type, x + 256 * b, qw + 256 * b, w, sw + 8 * b);
    for (int s = 0; s < 8; s++) {
      for (int i = 0; i < 32; i++) {
        t[KQ_Q4_SUBS * i + 8 * b + s] = used ? x[256 * b + 32 * s + i] : 0.0f;
        if (qw != NULL) tw[KQ_Q4_SUBS * i + 8 * b + s] = used ? w[32 * s + i] : 0.0f;
      }
    }
  }
  for (int first = 0; first < KQ_Q4_SUBS; first += VL) {
    if (qw != NULL && five_bits)
      QD_NAME(kq_affine_search)(t, tw, KQ_Q4_SUBS, first, 32, 0, scales, neg_mins, L, 31, -0.9f, 0.05f, 36);
    else if (qw != NULL)
      QD_NAME(kq_affine_search)(t, tw, KQ_Q4_SUBS, first, 32, 0, scales, neg_mins, L, 15, -0.9f, 0.05f, 36);
    else if (five_bits)
      QD_NAME(kq_affine_search)(t, NULL, KQ_Q4_SUBS, first, 32, 0, scales, neg_mins, L, 31, -0.5f, 0.1f, 15);
    else
      QD_NAME(kq_affine_search)(t, NULL, KQ_Q4_SUBS, first, 32, 0, scales, neg_mins, L, 15, -1.0f, 0.1f, 20);
  }
  for (int b = 0; b < n; b++) {
    const float *xb = x + 256 * b;
    uint8_t *ob = out + size * b;
    if (nan[b] && qw != NULL)
      qd_ggml_weighted_block_ref(type, xb, qw + 256 * b, ob);
    else if (nan[b])
      (five_bits ? qd_ggml_q5_k_block_ref : qd_ggml_q4_k_block_ref)(xb, ob);
    else if (qw != NULL)
      qd_ggml_weighted_finish(type, xb, scales + 8 * b, neg_mins + 8 * b, sw + 8 * b, L + 256 * b, ob);
    else
      (five_bits ? qd_ggml_q5_k_finish : qd_ggml_q4_k_finish)(xb, scales + 8 * b, neg_mins + 8 * b, L + 256 * b, ob);
  }
}

/* One Q2_K, Q3_K or Q6_K super-block (16 sub-blocks of 16), with an importance matrix's column
 * weights qw (NULL: without one): its sub-blocks searched across lanes, then finished by the scalar
 * code (with a matrix, all of its finish); a super-block holding NaN by the scalar reference. */
QD_TARGET static void QD_NAME(kq_sixteen_block)(int32_t type, const float *x, const float *qw, uint8_t *out) {
  if (QD_NAME(kq_has_nan)(x)) {
    if (qw != NULL)
      qd_ggml_weighted_block_ref(type, x, qw, out);
    else
      qd_ggml_block_ref(type)(x, out);
    return;
  }
  float t[256], tw[256], w[256], sw[16], scales[16], neg_mins[16];
  uint8_t L[256];
  if (qw != NULL) qd_ggml_matrix_weights(type, x, qw, w, sw);
  for (int s = 0; s < 16; s++) {
    for (int i = 0; i < 16; i++) {
      t[16 * i + s] = x[16 * s + i];
      if (qw != NULL) tw[16 * i + s] = w[16 * s + i];
    }
  }
  const float *weights = qw != NULL ? tw : NULL;
  for (int first = 0; first < 16; first += VL) {
    if (type == QD_GGML_Q6_K)
      QD_NAME(kq_qx_search)(t, weights, 16, first, 16, scales, (int8_t *)L, 32);
    else if (type == QD_GGML_Q3_K && qw != NULL)
      QD_NAME(kq_qx_search)(t, tw, 16, first, 16, scales, (int8_t *)L, 4);
    else if (type == QD_GGML_Q3_K)
      QD_NAME(kq_q3_search)(t, first, scales, (int8_t *)L);
    else if (qw != NULL)
      QD_NAME(kq_affine_search)(t, tw, 16, first, 16, 0, scales, neg_mins, L, 3, -0.9f, 0.05f, 36);
    else
      QD_NAME(kq_affine_search)(t, NULL, 16, first, 16, 1, scales, neg_mins, L, 3, -0.5f, 0.1f, 15);
  }
  if (qw != NULL) {
    qd_ggml_weighted_finish(type, x, scales, neg_mins, sw, L, out);
    return;
  }
  float d[16], dm[16];
  if (!qd_ggml_sixteen_head(type, scales, type == QD_GGML_Q2_K ? neg_mins : NULL, out, d, dm)) return;
  const int32_t lo = qd_ggml_sixteen_low(type), hi = type == QD_GGML_Q2_K ? 3 : -lo - 1;
  for (int j = 0; j < 16; j++) { /* the codes against the rounded d (and dm), as the reference's */
    if (d[j] == 0) continue;
    const vf dj = vf_set(d[j]), dmj = vf_set(type == QD_GGML_Q2_K ? dm[j] : 0.0f);
    for (int k = 0; k < 16; k += VL) {
      vf v = vf_load(x + 16 * j + k);
      if (type == QD_GGML_Q2_K) v = vf_add(v, dmj);
      vi_store_u8(L + 16 * j + k, vi_sub(kq_clamp(kq_nearest(vf_div(v, dj)), lo, hi), vi_set(lo)));
    }
  }
  qd_ggml_sixteen_pack(type, L, out);
}
