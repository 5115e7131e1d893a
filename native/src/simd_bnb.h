/*
 * bitsandbytes' NF4 / FP4 over the vector primitives (included by simd_kernels.h after
 * simd_ggml.h): what bnb_ref.c does, lane for lane. A block's absmax is a maximum, exact in any
 * order; x·inv is one float32 product per lane; the codes are the same strict comparisons with
 * the same thresholds (NF4 counts those exceeded, FP4 walks its tree with selects), so a NaN
 * lane (0·∞ in an all-zero block) takes code 0 as in the reference. Whole blocks of a multiple
 * of 2·VL values run here; a block holding NaN or ±Infinity, the partial last block and odd
 * block sizes go to the reference, which reports the first offending index.
 */

QD_V vi bnb_nf4_codes(vf v) {
  vi c = vi_set(0), one = vi_set(1), zero = vi_set(0);
  for (int k = 0; k < 15; k++) c = vi_add(c, vi_select(vf_gt(v, vf_set(qd_nf4_thresholds[k])), one, zero));
  return c;
}

QD_V vi bnb_fp4_codes(vf v) {
  const float *t = qd_fp4_thresholds;
  vf a = vf_abs(v);
  vi sign = vi_select(vf_lt(v, vf_set(0.0f)), vi_set(8), vi_set(0));
  vi high = vi_select(vf_gt(a, vf_set(t[1])), vi_select(vf_gt(a, vf_set(t[2])), vi_set(3), vi_set(2)),
                      vi_select(vf_gt(a, vf_set(t[3])), vi_set(5), vi_set(4)));
  vi low = vi_select(vf_gt(a, vf_set(t[4])), vi_select(vf_gt(a, vf_set(t[5])), vi_set(7), vi_set(6)),
                     vi_select(vf_gt(a, vf_set(t[6])), vi_set(1), vi_set(0)));
  return vi_add(vi_select(vf_gt(a, vf_set(t[0])), high, low), sign);
}

/* One whole block: 0 if it holds a non-finite value (nothing written). */
QD_TARGET static int bnb_block(int32_t type, const float *x, uint64_t blocksize, uint8_t *packed, float *absmax) {
  vm bad = vm_none();
  vi top = vi_set(0);
  for (uint64_t j = 0; j < blocksize; j += VL) {
    vi bits = vi_load(x + j);
    bad = vm_or(bad, nonfinite_bits(bits));
    top = vi_max(top, vi_and(bits, vi_set(0x7fffffff))); /* magnitudes order as their bits */
  }
  if (vm_any(bad)) return 0;
  int32_t m_bits = vi_hmax(top);
  float m;
  __builtin_memcpy(&m, &m_bits, sizeof m);
  *absmax = m;
  vf inv = vf_set(1.0f / m);
  int32_t codes[VL];
  for (uint64_t j = 0; j < blocksize; j += VL) {
    vf v = vf_mul(vf_load(x + j), inv);
    vi_store(codes, type == QD_BNB_NF4 ? bnb_nf4_codes(v) : bnb_fp4_codes(v));
    for (int k = 0; k < VL; k += 2) packed[(j + k) >> 1] = (uint8_t)(codes[k] << 4 | codes[k + 1]);
  }
  return 1;
}

QD_TARGET static qd_status QD_NAME(bnb_quantize)(int32_t type, const float *x, uint64_t n, uint64_t blocksize,
                                                 uint8_t *packed, float *absmax, uint64_t *bad) {
  if ((type != QD_BNB_NF4 && type != QD_BNB_FP4) || blocksize == 0 || blocksize % (2 * VL) != 0)
    return qd_bnb_quantize_ref(type, x, n, blocksize, packed, absmax, bad);
  uint64_t whole = n / blocksize;
  for (uint64_t b = 0; b < whole; b++) {
    if (!bnb_block(type, x + b * blocksize, blocksize, packed + b * blocksize / 2, absmax + b))
      return qd_bnb_quantize_ref(type, x, n, blocksize, packed, absmax, bad);
  }
  uint64_t done = whole * blocksize; /* even: the tail starts on a byte */
  qd_status s = qd_bnb_quantize_ref(type, x + done, n - done, blocksize, packed + done / 2, absmax + whole, bad);
  if (s == QD_NOT_FINITE) *bad += done;
  return s;
}
