/*
 * bitsandbytes' NF4 / FP4 over the vector primitives (included by simd_kernels.h after
 * simd_ggml.h): what bnb_ref.c does, lane for lane. A block's absmax is a maximum, exact in any
 * order; x·inv is one float32 product per lane; the codes are the same strict comparisons with
 * the same thresholds (NF4 counts those exceeded, FP4 walks its tree with selects), so a NaN
 * lane (0·∞ in an all-zero block) takes code 0 as in the reference. Whole blocks of a multiple
 * of 2·VL values run here; a block holding NaN or ±Infinity, the partial last block and odd
 * block sizes go to the reference, which reports the first offending index.
 */

/* The count of thresholds v exceeds, as a binary search: the thresholds ascend, so v > t[k]
 * implies v > t[j] for every j < k, and four strict comparisons (each against the threshold the
 * earlier answers pick, by selects) give the same count as fifteen. NaN exceeds none: 0. */
QD_V vi bnb_nf4_codes(vf v) {
  const float *t = qd_nf4_thresholds;
  const vi zero = vi_set(0);
  vm m8 = vf_gt(v, vf_set(t[7]));
  vm m4 = vf_gt(v, vf_select(m8, vf_set(t[11]), vf_set(t[3])));
  vm m2 = vf_gt(v, vf_select(m8, vf_select(m4, vf_set(t[13]), vf_set(t[9])), vf_select(m4, vf_set(t[5]), vf_set(t[1]))));
  vf t8 = vf_select(m4, vf_select(m2, vf_set(t[14]), vf_set(t[12])), vf_select(m2, vf_set(t[10]), vf_set(t[8])));
  vf t0 = vf_select(m4, vf_select(m2, vf_set(t[6]), vf_set(t[4])), vf_select(m2, vf_set(t[2]), vf_set(t[0])));
  vm m1 = vf_gt(v, vf_select(m8, t8, t0));
  vi c = vi_or(vi_select(m8, vi_set(8), zero), vi_select(m4, vi_set(4), zero));
  return vi_or(c, vi_or(vi_select(m2, vi_set(2), zero), vi_select(m1, vi_set(1), zero)));
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
#define BNB_CODES(j) (type == QD_BNB_NF4 ? bnb_nf4_codes(vf_mul(vf_load(x + (j)), inv)) : bnb_fp4_codes(vf_mul(vf_load(x + (j)), inv)))
  if (blocksize % (4 * VL) == 0) {
    /* store4_nibbles puts the first code of a pair in the low nibble, bitsandbytes in the high:
     * the nibbles of its 2 · VL bytes swapped, eight bytes at a time */
    for (uint64_t j = 0; j < blocksize; j += 4 * VL) {
      uint8_t *o = packed + j / 2;
      store4_nibbles(o, BNB_CODES(j), BNB_CODES(j + VL), BNB_CODES(j + 2 * VL), BNB_CODES(j + 3 * VL));
      for (int k = 0; k < 2 * VL; k += 8) {
        uint64_t w;
        __builtin_memcpy(&w, o + k, 8);
        w = (w & 0x0f0f0f0f0f0f0f0full) << 4 | (w >> 4 & 0x0f0f0f0f0f0f0f0full);
        __builtin_memcpy(o + k, &w, 8);
      }
    }
  } else {
    int32_t codes[VL];
    for (uint64_t j = 0; j < blocksize; j += VL) {
      vi_store(codes, BNB_CODES(j));
      for (int k = 0; k < VL; k += 2) packed[(j + k) >> 1] = (uint8_t)(codes[k] << 4 | codes[k + 1]);
    }
  }
#undef BNB_CODES
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
