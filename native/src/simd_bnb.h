/*
 * bitsandbytes' NF4 / FP4 over the vector primitives (included by simd_kernels.h after
 * simd_ggml.h): what bnb_ref.c does, lane for lane. A block's absmax is a maximum, exact in any
 * order; x·inv is one float32 product per lane; the codes are the same strict comparisons with
 * the same thresholds (NF4's count of those exceeded and FP4's tree are both a binary search over
 * ascending thresholds: four and three comparisons, each against the threshold the earlier answers
 * pick), so a NaN lane (0·∞ in an all-zero block) takes code 0 as in the reference. Whole
 * blocks of a multiple of 2·VL values run here; a block holding NaN or ±Infinity, the partial last
 * block and odd block sizes go to the reference, which reports the first offending index.
 */

/* The thresholds' lookups per lane. On x86 a lane picks its next threshold with one permute from
 * an 8-entry table (AVX2's vpermps, AVX-512's vpermps on a zero-extended table: indices stay below
 * 8); elsewhere by selects. */
#if defined(QUANTD_SIMD_AVX512_H)
#define BNB_PERMUTE 1
typedef __m512 bnb_table;
QD_V bnb_table bnb_table_load(const float *t) { return _mm512_zextps256_ps512(_mm256_loadu_ps(t)); }
QD_V vf bnb_permute(bnb_table t, vi idx) { return _mm512_permutexvar_ps(idx, t); }
#elif defined(QUANTD_SIMD_AVX2_H)
#define BNB_PERMUTE 1
typedef __m256 bnb_table;
QD_V bnb_table bnb_table_load(const float *t) { return _mm256_loadu_ps(t); }
QD_V vf bnb_permute(bnb_table t, vi idx) { return _mm256_permutevar8x32_ps(t, idx); }
#else
#define BNB_PERMUTE 0
#endif

#if BNB_PERMUTE
/* The thresholds each step of the search compares with, by the bits found so far (a binary
 * search over ascending thresholds, as below): NF4's step 2 by b8, step 3 by 2·b8 + b4, step 4 by
 * 4·b8 + 2·b4 + b2; FP4's over its thresholds sorted (t6 < t4 < t5 < t0 < t3 < t1 < t2). */
typedef struct {
  bnb_table step2, step3, step4;
} bnb_tables;
QD_V bnb_tables bnb_nf4_tables(void) {
  const float *t = qd_nf4_thresholds;
  const float s2[8] = {t[3], t[11], 0, 0, 0, 0, 0, 0}, s3[8] = {t[1], t[5], t[9], t[13], 0, 0, 0, 0};
  const float s4[8] = {t[0], t[2], t[4], t[6], t[8], t[10], t[12], t[14]};
  bnb_tables r = {bnb_table_load(s2), bnb_table_load(s3), bnb_table_load(s4)};
  return r;
}
QD_V bnb_tables bnb_fp4_tables(void) {
  const float *t = qd_fp4_thresholds;
  const float s2[8] = {t[4], t[1], 0, 0, 0, 0, 0, 0}, s3[8] = {t[6], t[5], t[3], t[2], 0, 0, 0, 0};
  bnb_tables r = {bnb_table_load(s2), bnb_table_load(s3), bnb_table_load(s2)};
  return r;
}
#else
typedef struct {
  int unused; /* the selects below need no tables */
} bnb_tables;
QD_V bnb_tables bnb_nf4_tables(void) {
  bnb_tables r = {0};
  return r;
}
QD_V bnb_tables bnb_fp4_tables(void) { return bnb_nf4_tables(); }
#endif

/* The count of thresholds v exceeds, as a binary search: the thresholds ascend, so v > t[k]
 * implies v > t[j] for every j < k, and four strict comparisons (each against the threshold the
 * earlier answers pick) give the same count as fifteen. NaN exceeds none: 0. */
#if BNB_PERMUTE
QD_V vi bnb_nf4_codes(vf v, const bnb_tables *tb) {
  vi k = vi_count(vi_set(0), vf_gt(v, vf_set(qd_nf4_thresholds[7]))); /* b8 */
  k = vi_count(vi_add(k, k), vf_gt(v, bnb_permute(tb->step2, k)));      /* 2·b8 + b4 */
  k = vi_count(vi_add(k, k), vf_gt(v, bnb_permute(tb->step3, k)));      /* 4·b8 + 2·b4 + b2 */
  return vi_count(vi_add(k, k), vf_gt(v, bnb_permute(tb->step4, k)));   /* the code */
}
#else
QD_V vi bnb_nf4_codes(vf v, const bnb_tables *unused) {
  (void)unused;
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
#endif

/* FP4's tree over |v| is a binary search over its seven thresholds sorted, t6 < t4 < t5 < t0 <
 * t3 < t1 < t2: the rank r (how many |v| exceeds) picks the code, 0 1 6 7 4 5 2 3, plus 8 where
 * v < 0 (-0 and NaN: not). NaN exceeds none: rank 0, code 0. */
#if BNB_PERMUTE
QD_V vi bnb_fp4_codes(vf v, const bnb_tables *tb) {
  static const uint8_t code[16] = {0, 1, 6, 7, 4, 5, 2, 3, 8, 9, 14, 15, 12, 13, 10, 11};
  const vf a = vf_abs(v);
  vi k = vi_count(vi_set(0), vf_gt(a, vf_set(qd_fp4_thresholds[0]))); /* b4 */
  k = vi_count(vi_add(k, k), vf_gt(a, bnb_permute(tb->step2, k)));      /* 2·b4 + b2 */
  k = vi_count(vi_add(k, k), vf_gt(a, bnb_permute(tb->step3, k)));      /* the rank */
  k = vi_or(k, vi_select(vf_lt(v, vf_set(0.0f)), vi_set(8), vi_set(0)));
  return vi_lut16(vi_lut16_load(code), k);
}
#else
QD_V vi bnb_fp4_codes(vf v, const bnb_tables *unused) {
  (void)unused;
  const float *t = qd_fp4_thresholds;
  vf a = vf_abs(v);
  vi sign = vi_select(vf_lt(v, vf_set(0.0f)), vi_set(8), vi_set(0));
  vi high = vi_select(vf_gt(a, vf_set(t[1])), vi_select(vf_gt(a, vf_set(t[2])), vi_set(3), vi_set(2)),
                      vi_select(vf_gt(a, vf_set(t[3])), vi_set(5), vi_set(4)));
  vi low = vi_select(vf_gt(a, vf_set(t[4])), vi_select(vf_gt(a, vf_set(t[5])), vi_set(7), vi_set(6)),
                     vi_select(vf_gt(a, vf_set(t[6])), vi_set(1), vi_set(0)));
  return vi_add(vi_select(vf_gt(a, vf_set(t[0])), high, low), sign);
}
#endif

/* 4·VL codes (0…15) into 2·VL bytes, bitsandbytes' order: the first code of a pair in the high
 * nibble. On x86 the bytes of a pair are combined by one multiply-add (16·first + second). */
#if defined(QUANTD_SIMD_AVX512_H)
QD_V void bnb_store4(uint8_t *out, vi a, vi b, vi c, vi d) {
  __m256i ab = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtepi32_epi8(a)), _mm512_cvtepi32_epi8(b), 1);
  __m256i cd = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtepi32_epi8(c)), _mm512_cvtepi32_epi8(d), 1);
  __m512i bytes = _mm512_inserti64x4(_mm512_castsi256_si512(ab), cd, 1);
  __m512i words = _mm512_maddubs_epi16(bytes, _mm512_set1_epi16(0x0110));
  _mm256_storeu_si256((__m256i *)out, _mm512_cvtepi16_epi8(words));
}
#elif defined(QUANTD_SIMD_AVX2_H)
QD_V void bnb_store4(uint8_t *out, vi a, vi b, vi c, vi d) {
  __m256i words = _mm256_maddubs_epi16(pack4_bytes(a, b, c, d, 1), _mm256_set1_epi16(0x0110));
  __m256i packed = _mm256_packus_epi16(words, words);
  _mm_storeu_si128((__m128i *)out, _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08)));
}
#else
/* store4_nibbles puts the first code of a pair in the low nibble: the nibbles of its 2 · VL
 * bytes swapped, eight bytes at a time */
QD_V void bnb_store4(uint8_t *o, vi a, vi b, vi c, vi d) {
  store4_nibbles(o, a, b, c, d);
  for (int k = 0; k < 2 * VL; k += 8) {
    uint64_t w;
    __builtin_memcpy(&w, o + k, 8);
    w = (w & 0x0f0f0f0f0f0f0f0full) << 4 | (w >> 4 & 0x0f0f0f0f0f0f0f0full);
    __builtin_memcpy(o + k, &w, 8);
  }
}
#endif

/* One whole block: 0 if it holds a non-finite value (nothing written). Inlined into a loop per
 * type, so that the type is a constant there. */
QD_V int bnb_block(int32_t type, const bnb_tables *tables, const float *x, uint64_t blocksize, uint8_t *packed,
                   float *absmax) {
  vm bad = vm_none();
  vi top = vi_set(0);
  for (uint64_t j = 0; j < blocksize; j += VL) {
    /* 2 KiB ahead, a line at a time: the hardware's prefetchers alone leave the loads waiting */
    if (j % 16 == 0) __builtin_prefetch((const char *)(x + j) + 2048);
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
  const bnb_tables tb = *tables;
#define BNB_CODES(j) (type == QD_BNB_NF4 ? bnb_nf4_codes(vf_mul(vf_load(x + (j)), inv), &tb) : bnb_fp4_codes(vf_mul(vf_load(x + (j)), inv), &tb))
  if (blocksize % (4 * VL) == 0) {
    for (uint64_t j = 0; j < blocksize; j += 4 * VL)
      bnb_store4(packed + j / 2, BNB_CODES(j), BNB_CODES(j + VL), BNB_CODES(j + 2 * VL), BNB_CODES(j + 3 * VL));
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
  const bnb_tables tables = type == QD_BNB_NF4 ? bnb_nf4_tables() : bnb_fp4_tables();
  for (uint64_t b = 0; b < whole; b++) {
    if (type == QD_BNB_NF4 ? !bnb_block(QD_BNB_NF4, &tables, x + b * blocksize, blocksize, packed + b * blocksize / 2, absmax + b)
                           : !bnb_block(QD_BNB_FP4, &tables, x + b * blocksize, blocksize, packed + b * blocksize / 2, absmax + b))
      return qd_bnb_quantize_ref(type, x, n, blocksize, packed, absmax, bad);
  }
  uint64_t done = whole * blocksize; /* even: the tail starts on a byte */
  qd_status s = qd_bnb_quantize_ref(type, x + done, n - done, blocksize, packed + done / 2, absmax + whole, bad);
  if (s == QD_NOT_FINITE) *bad += done;
  return s;
}
