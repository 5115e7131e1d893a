/*
 * ONNX Runtime's MatMulNBits quantizer over the vector primitives (included by simd_kernels.h
 * after simd_ggml.h): nbits_ref.c's driver with a vector body for whole blocks. A block's range
 * is an order-key minimum and maximum, which equals the reference's sequential scan except for
 * the sign of a zero extreme (the scan keeps the first zero it met): such a block, and one holding
 * NaN or ±Infinity, is left to the reference. When K is whole blocks, the scales and zero points
 * of VL blocks are computed side by side, qd_nbits_params' operations lane for lane (its three
 * scalar divisions were the largest cost per block); otherwise they are that function itself. The
 * codes are the same float32 multiply, add, roundf and clamp per lane, packed in registers.
 */

/* The codes of one block of count values (a multiple of VL) from its reciprocal and zero point. */
QD_V void QD_NAME(nbits_codes)(const float *x, uint64_t count, float recip, uint8_t zp, uint8_t *out) {
  const vf r = vf_set(recip), z = vf_set((float)zp), zero = vf_set(0.0f), fifteen = vf_set(15.0f);
  /* The clamp as max / min: t is never NaN (x finite, recip finite), and a -0 and a +0 both
   * truncate to code 0, so this is the reference's r < 0 ? 0 : r > 15 ? 15 : r. */
#define NBITS_CODE(k) vf_to_vi_trunc(vf_min(vf_max(vf_roundf(vf_add(vf_mul(vf_load(x + (k)), r), z)), zero), fifteen))
  if (count % (4 * VL) == 0) {
    for (uint64_t k = 0; k < count; k += 4 * VL)
      store4_nibbles(out + k / 2, NBITS_CODE(k), NBITS_CODE(k + VL), NBITS_CODE(k + 2 * VL), NBITS_CODE(k + 3 * VL));
  } else if (count % (2 * VL) == 0) {
    /* half of store4_nibbles' 4 · VL codes (AVX-512's 16 lanes, block 32): the pairs packed in
     * registers all the same, through a scratch buffer */
    uint8_t tmp[2 * VL];
    for (uint64_t k = 0; k < count; k += 2 * VL) {
      vi a = NBITS_CODE(k), b = NBITS_CODE(k + VL);
      store4_nibbles(tmp, a, b, a, b);
      __builtin_memcpy(out + k / 2, tmp, VL);
    }
  } else {
    int32_t codes[VL];
    for (uint64_t k = 0; k < count; k += VL) {
      vi_store(codes, NBITS_CODE(k));
      for (int j = 0; j < VL; j += 2) out[(k + j) >> 1] = (uint8_t)(codes[j] | codes[j + 1] << 4);
    }
  }
#undef NBITS_CODE
}

/* run_minmax for a whole block (a multiple of VL values), inlined: the same order keys from the
 * same starting keys, one vector of each at a time. The input 2 KiB on is asked into the cache a
 * line at a time: the hardware's prefetchers alone left these loads waiting (a third of the time
 * at block 32). */
QD_V int QD_NAME(nbits_range)(const float *x, uint64_t n, int32_t *lo, int32_t *hi) {
  vi l = vi_set(*lo), h = vi_set(*hi);
  for (uint64_t i = 0; i < n; i += VL) {
    if (i % 16 == 0) __builtin_prefetch((const char *)(x + i) + 2048);
    const vi k = key_of(vi_load(x + i));
    l = vi_min(l, k);
    h = vi_max(h, k);
  }
  *lo = vi_hmin(l);
  *hi = vi_hmax(h);
  return *lo > qd_key(-__builtin_inff()) && *hi < qd_key(__builtin_inff());
}

QD_TARGET static int QD_NAME(nbits_block)(const float *x, uint64_t count, int32_t sym, int32_t f16, float *scale,
                                          uint8_t *zp, uint8_t *out, uint64_t *bad) {
  int32_t lo = qd_key(qd_float(0x7f7fffffu)), hi = qd_key(-qd_float(0x7f7fffffu));
  if (count % VL != 0 || !run_minmax(x, count, &lo, &hi))
    return qd_nbits_block_ref(x, count, sym, f16, scale, zp, out, bad);
  float min = qd_unkey(lo), max = qd_unkey(hi);
  if (min == 0.0f || max == 0.0f) return qd_nbits_block_ref(x, count, sym, f16, scale, zp, out, bad);
  float recip;
  if (!qd_nbits_params(min, max, sym, f16, scale, zp, &recip)) return 0;
  QD_NAME(nbits_codes)(x, count, recip, *zp, out);
  return 1;
}

QD_TARGET static qd_status QD_NAME(nbits_quantize)(const float *w, uint64_t n_cols, uint64_t k_len,
                                                   uint64_t block_size, int32_t sym, int32_t f16, uint8_t *b,
                                                   float *scales, uint8_t *zero_points, uint64_t *bad) {
  if (n_cols == 0 || block_size < 16 || (block_size & (block_size - 1)) != 0 || k_len == 0 || k_len % block_size != 0)
    return qd_nbits_quantize_with(QD_NAME(nbits_block), w, n_cols, k_len, block_size, sym, f16, b, scales,
                                  zero_points, bad);
  /* Whole blocks only (K even, no padding, no odd-K carry-over), VL blocks at a time: their
   * ranges one by one, then qd_nbits_params lane for lane (the same float32 comparisons,
   * divisions and roundf per block, only side by side), then the codes. Every block writes all of
   * its code bytes, so the row needs no zeroing first. A block with a zero extreme is the
   * reference's (as in nbits_block); a rejected block re-runs the reference driver, for its
   * partial outputs and the index it reports. */
  const uint64_t k_blocks = k_len / block_size, zp_bytes = (k_blocks + 1) / 2;
  const vf zero = vf_set(0.0f), fifteen = vf_set(15.0f);
  for (uint64_t n = 0; n < n_cols; n++) {
    uint8_t *zps = sym ? 0 : zero_points + n * zp_bytes;
    uint8_t pair = 0;
    for (uint64_t g = 0; g < k_blocks; g += VL) {
      const uint64_t cnt = k_blocks - g < VL ? k_blocks - g : VL;
      float mins[VL], maxs[VL], recips[VL];
      int32_t zpv[VL], fine[VL];
      for (int j = 0; j < VL; j++) {
        int32_t lo = qd_key(qd_float(0x7f7fffffu)), hi = qd_key(-qd_float(0x7f7fffffu));
        fine[j] = (uint64_t)j < cnt && QD_NAME(nbits_range)(w + n * k_len + (g + j) * block_size, block_size, &lo, &hi);
        mins[j] = fine[j] ? qd_unkey(lo) : -1.0f; /* lanes not computed here: any finite range */
        maxs[j] = fine[j] ? qd_unkey(hi) : 1.0f;
        fine[j] &= mins[j] != 0.0f && maxs[j] != 0.0f;
      }
      vf mn = vf_load(mins), mx = vf_load(maxs), scale;
      vi zpi;
      if (sym) {
        scale = vf_div(vf_neg(vf_select(vf_gt(vf_abs(mx), vf_abs(mn)), mx, mn)), vf_set(8.0f));
        zpi = vi_set(8);
      } else {
        mn = vf_select(vf_lt(zero, mn), zero, mn); /* std::min(min, 0.0f), keeping a -0 */
        mx = vf_select(vf_lt(mx, zero), zero, mx);
        scale = vf_div(vf_sub(mx, mn), fifteen);
        vf zpf = vf_select(vf_ne(scale, zero), vf_sub(zero, vf_div(mn, scale)), mn);
        /* zpf is finite (|min| ≤ 15 · scale): clamping before roundf gives the same code as the
         * reference's clamp-or-round, a -0 included */
        zpi = vf_to_vi_trunc(vf_roundf(vf_min(vf_max(zpf, zero), fifteen)));
      }
      vf stored = f16 ? vf_f16_round(scale) : scale;
      vf recip = vf_select(vf_ne(stored, zero), vf_div(vf_set(1.0f), stored), zero);
      vm overflow = nonfinite_bits(vf_bits(recip));
      if (vm_any(overflow)) return qd_nbits_quantize_ref(w, n_cols, k_len, block_size, sym, f16, b, scales, zero_points, bad);
      vf_store(recips, recip);
      vi_store(zpv, zpi);
      float sc[VL];
      vf_store(sc, stored);
      for (uint64_t j = 0; j < cnt; j++) {
        const uint64_t blk = g + j, at = n * k_len + blk * block_size;
        uint8_t zp = (uint8_t)zpv[j];
        if (fine[j]) {
          scales[n * k_blocks + blk] = sc[j];
          QD_NAME(nbits_codes)(w + at, block_size, recips[j], zp, b + at / 2);
        } else {
          uint64_t unused = 0;
          if (qd_nbits_block_ref(w + at, block_size, sym, f16, scales + n * k_blocks + blk, &zp, b + at / 2, &unused) != 1)
            return qd_nbits_quantize_ref(w, n_cols, k_len, block_size, sym, f16, b, scales, zero_points, bad);
        }
        if (!(blk & 1))
          pair = zp;
        else if (zps)
          zps[blk >> 1] = (uint8_t)(pair | zp << 4);
      }
    }
    if (zps && k_blocks % 2 == 1) zps[zp_bytes - 1] = (uint8_t)(pair | 8 << 4); /* the absent block's default */
  }
  return QD_OK;
}
