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

/* make_qx_quants (nmax 32, rmse_type 1) for VL sub-blocks of 16: t[16·i + s] is element i of
 * sub-block s (lanes: sub-blocks first .. first + VL); their scales to scales[], codes (nmax +
 * code) to L[16·s + i]. */
QD_TARGET static void QD_NAME(kq_q6_search)(const float *t, int first, float *scales, int8_t *L) {
  enum { N = 16, NMAX = 32 };
  vf xs[N];
  vf max = vf_set(0.0f), amax = vf_set(0.0f);
  for (int i = 0; i < N; i++) {
    xs[i] = vf_load(t + 16 * i + first);
    vf ax = vf_abs(xs[i]);
    vm bigger = vf_gt(ax, amax);
    amax = vf_select(bigger, ax, amax);
    max = vf_select(bigger, xs[i], max);
  }
  const vm zero_group = vf_lt(amax, vf_set(1e-15f)); /* GROUP_MAX_EPS: all codes 0, scale 0 */
  vf iscale = vf_div(vf_set(-(float)NMAX), max);
  vf sumlx = vf_set(0.0f), suml2 = vf_set(0.0f);
  vi l[N];
  for (int i = 0; i < N; i++) {
    vi li = kq_clamp(kq_nearest(vf_mul(iscale, xs[i])), -NMAX, NMAX - 1);
    l[i] = vi_add(li, vi_set(NMAX));
    const vf lf = vi_to_vf(li), w = vf_mul(xs[i], xs[i]);
    sumlx = vf_add(sumlx, vf_mul(vf_mul(w, xs[i]), lf));
    suml2 = vf_add(suml2, vf_mul(vf_mul(w, lf), lf));
  }
  vf scale = vf_select(kq_is_zero(suml2), vf_set(0.0f), vf_div(sumlx, suml2));
  vf best = vf_mul(scale, sumlx);
  for (int is = -9; is <= 9; is++) {
    if (is == 0) continue;
    iscale = vf_div(vf_set(-((float)NMAX + 0.1f * (float)is)), max);
    sumlx = suml2 = vf_set(0.0f);
    for (int i = 0; i < N; i++) {
      const vf lf = vi_to_vf(kq_clamp(kq_nearest(vf_mul(iscale, xs[i])), -NMAX, NMAX - 1));
      const vf w = vf_mul(xs[i], xs[i]);
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
  int32_t lanes[N][VL];
  for (int i = 0; i < N; i++) vi_store(lanes[i], vi_select(zero_group, vi_set(0), l[i]));
  vf_store(scales + first, scale);
  for (int s = 0; s < VL; s++) {
    for (int i = 0; i < N; i++) L[16 * (first + s) + i] = (int8_t)lanes[i][s];
  }
}

QD_TARGET static void QD_NAME(kq_q6_k_block)(const float *x, uint8_t *out) {
  if (QD_NAME(kq_has_nan)(x)) {
    qd_ggml_q6_k_block_ref(x, out);
    return;
  }
  float t[256], scales[16];
  int8_t L[256];
  for (int s = 0; s < 16; s++) {
    for (int i = 0; i < 16; i++) t[16 * i + s] = x[16 * s + i];
  }
  for (int first = 0; first < 16; first += VL) QD_NAME(kq_q6_search)(t, first, scales, L);
  qd_ggml_q6_k_finish(x, scales, L, out);
}
