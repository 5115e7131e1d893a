/*
 * AutoGPTQ's packing over the vector primitives (included by simd_kernels.h), byte for byte
 * gptq_ref.c. Q is rounded to float16 by vf_f16_round and to bfloat16 by f32_to_bf16's integer
 * work on the bits. Three things make it fast, none of which changes a result:
 *
 * - Writes. The reference clears qweight and ORs each code into its word, a read-modify-write per
 *   weight on words `out` apart (on a power-of-two `out`, all in one cache set). Here a tile of 16
 *   rows (a cache line of words) by up to 128 inputs is packed in registers (four vectors at a
 *   time into nibbles or bytes) and written as whole lines, once, nothing cleared. That needs
 *   every word inside one group (group sizes a multiple of 32 / bits, as every real one is).
 * - Parameters. qd_gptq_params' divisions and float16 rounding for the tile's 16 rows at once,
 *   lane by lane (gptq_params): the same operations in the same order on each lane.
 * - Divisions. rint(a / b) is rint(a · (1/b)) unless a / b lies near a half-integer: with
 *   r = RN(1/b) and y = RN(a · r), |y − RN(a / b)| ≤ |y| · 2^-22 (three roundings of 2^-24
 *   each), so where y is farther than |y| · 2^-21 from every half-integer both round to the same
 *   integer. A vector with any lane nearer (or not finite) is computed again with divisions.
 *   For x / scale, |y| ≤ maxq + 1 (every x of a group lies within xmax − xmin = maxq · scale of
 *   0), so one bound serves every lane: |y − rint(y)| < 0.5 − (maxq + 1) · 2^-21.
 * - Codes (2 and 4 bits). After q (an integer 0…maxq) the rest of the reference's work on a
 *   weight (the fake-quantized value, rounded to the layer's dtype, its code re-derived by the
 *   float16 scale and clamped) depends on q and the group's parameters only: it is done once per
 *   group for each q (gptq_table, the same operations) and looked up per weight (vi_lut16). So a
 *   float16 or bfloat16 layer costs what a float32 one does.
 *
 * Any weight the vector path refuses (a value not finite, a scale float16 cannot hold) and group
 * sizes it does not take run the reference driver from the start, which gives its error and index.
 * A group's minimum and maximum may differ from the sequential scan's only in the sign of a zero,
 * which the parameters do not keep (both clamp at 0).
 */

/* One group's parameters as the code loop uses them (reciprocals included). */
typedef struct {
  float scale, zero, half_scale, scale_zero, inv_scale, inv_half_scale;
  uint8_t code[16], clamp[16]; /* for q = 0…15 (bits ≤ 4): its code, and 1 where it was clamped */
  int clamps;                  /* whether any q ≤ maxq is clamped */
} QD_NAME(gptq_lane);

/* The lane's code table (bits ≤ 4): qd_gptq_code's operations after q, VL values of q at once. */
QD_TARGET static void QD_NAME(gptq_table)(QD_NAME(gptq_lane) *p, uint32_t bits, int32_t store) {
  static const float iota[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  const vf s = vf_set(p->scale), z = vf_set(p->zero), sz = vf_set(p->scale_zero), floor0 = vf_set(0.0f);
  const vf top = vf_set((float)((1u << bits) - 1u));
  vm clamps = vm_none();
  for (int q0 = 0; q0 < 16; q0 += VL) {
    const vf q = vf_load(iota + q0);
    vf fake = vf_mul(s, vf_sub(q, z));
    if (store == 1) fake = vf_f16_round(fake);
    if (store == 2) fake = vi_bits(vi_sll(QD_NAME(bf16_bits)(fake), 16));
    const vf code = vf_round(vf_div(vf_add(fake, sz), vf_set(p->half_scale)));
    const vm inside = vm_and(vf_ge(code, floor0), vf_le(code, top)); /* NaN: outside, to 0 */
    vi_store_u8(p->code + q0, vf_to_vi_trunc(vf_select(vf_gt(code, top), top, vf_select(inside, code, floor0))));
    vi_store_u8(p->clamp + q0, vi_select(inside, vi_set(0), vi_set(1)));
    /* the q a weight can have (q ≤ maxq) that clamp: 0 ≤ code ≤ maxq fails, NaN included */
    const vm outside = vm_or(vf_unord(code), vm_or(vf_lt(code, floor0), vf_gt(code, top)));
    clamps = vm_or(clamps, vm_and(outside, vf_le(q, top)));
  }
  p->clamps = vm_any(clamps);
}

/* qd_gptq_params for VL rows' groups at once from their minima and maxima: each lane's parameters
 * into `lanes` and float16 scale into `half`, and whether that lane's group can be written (bit j). */
QD_TARGET static uint32_t QD_NAME(gptq_params)(const float *lo, const float *hi, uint32_t bits, int32_t sym,
                                               QD_NAME(gptq_lane) *lanes, uint16_t *half) {
  const vf maxq = vf_set((float)((1u << bits) - 1u)), zero0 = vf_set(0.0f), one = vf_set(1.0f);
  const vf l = vf_load(lo), h = vf_load(hi);
  vf xmin = vf_select(vf_lt(l, zero0), l, zero0), xmax = vf_select(vf_gt(h, zero0), h, zero0);
  if (sym) {
    const vf m = vf_abs(xmin);
    xmax = vf_select(vf_gt(m, xmax), m, xmax);
    xmin = vf_select(vf_lt(xmin, zero0), vf_neg(xmax), xmin);
  }
  const vm both_zero = vm_and(vf_ge(xmin, zero0), vf_le(xmax, zero0)); /* xmin ≤ 0 ≤ xmax */
  xmin = vf_select(both_zero, vf_neg(one), xmin);
  xmax = vf_select(both_zero, one, xmax);
  const vf scale = vf_div(vf_sub(xmax, xmin), maxq);
  const vf zero = sym ? vf_div(vf_add(maxq, one), vf_set(2.0f)) : vf_round(vf_div(vf_neg(xmin), scale));
  const vf half_scale = vf_f16_round(scale);
  const vm ok = vm_and(vm_and(vf_gt(half_scale, zero0), vf_lt(half_scale, vf_set(__builtin_inff()))),
                       vm_and(vf_ge(zero, zero0), vf_le(zero, maxq)));
  float s[VL], z[VL], hs[VL], sz[VL], is[VL], ihs[VL];
  uint8_t good[VL];
  vf_store(s, scale);
  vf_store(z, zero);
  vf_store(hs, half_scale);
  vf_store(sz, vf_mul(zero, scale));
  vf_store(is, vf_div(one, scale));
  vf_store(ihs, vf_div(one, half_scale));
  vm_store_bytes(good, ok);
#if QD_HAS_F16C
  vf_store_f16(half, scale);
#endif
  uint32_t mask = 0;
  for (int j = 0; j < VL; j++) { /* the code tables are gptq_table's */
    lanes[j].scale = s[j];
    lanes[j].zero = z[j];
    lanes[j].half_scale = hs[j];
    lanes[j].scale_zero = sz[j];
    lanes[j].inv_scale = is[j];
    lanes[j].inv_half_scale = ihs[j];
#if !QD_HAS_F16C
    half[j] = qd_f32_to_f16(s[j]);
#endif
    mask |= (uint32_t)(good[j] != 0) << j;
  }
  return mask;
}

/* y = RN(a · r) stands for RN(a / b) under rint when it is farther than |y| · 2^-21 from every
 * half-integer (see the top); the lanes where it does (NaN: none). */
QD_V vm QD_NAME(gptq_rint_safe)(vf y, vf rounded) {
  const vf gap = vf_sub(vf_set(0.5f), vf_abs(vf_sub(y, rounded)));
  return vf_gt(gap, vf_mul(vf_abs(y), vf_set(0x1p-21f)));
}

/* rint(x[0…VL) / scale) + zero clamped to 0…top, as the reference; `near` is
 * 0.5 − (maxq + 1) · 2^-21 (see the top). */
QD_V vf QD_NAME(gptq_q)(const float *x, const QD_NAME(gptq_lane) *p, vf top, vf near) {
  const vf v = vf_load(x);
  const vf y = vf_mul(v, vf_set(p->inv_scale));
  vf k = vf_round(y);
  if (!vm_all(vf_lt(vf_abs(vf_sub(y, k)), near))) k = vf_round(vf_div(v, vf_set(p->scale))); /* NaN too */
  return vf_min(vf_max(vf_add(k, vf_set(p->zero)), vf_set(0.0f)), top);
}

/* The codes of x[0…VL) of a group by the lane's table (bits ≤ 4), clamped ones counted. */
QD_V vi QD_NAME(gptq_lut_codes)(const float *x, const QD_NAME(gptq_lane) *p, vf top, vf near, uint64_t *clamped) {
  const vi q = vf_to_vi_trunc(QD_NAME(gptq_q)(x, p, top, near));
  if (p->clamps) *clamped += (uint64_t)vm_count(vi_gt(vi_lut16(vi_lut16_load(p->clamp), q), vi_set(0)));
  return vi_lut16(vi_lut16_load(p->code), q);
}

/* The codes of x[0…VL) of a group, clamped ones counted: the reference's operations. */
QD_V vi QD_NAME(gptq_codes)(const float *x, const QD_NAME(gptq_lane) *p, vf top, int32_t store, uint64_t *clamped) {
  const vf s = vf_set(p->scale), z = vf_set(p->zero), sz = vf_set(p->scale_zero), floor0 = vf_set(0.0f);
  const vf v = vf_load(x);
  const vf y = vf_mul(v, vf_set(p->inv_scale));
  vf q = vf_round(y);
  vm safe = QD_NAME(gptq_rint_safe)(y, q);
  if (!vm_all(safe)) q = vf_round(vf_div(v, s));
  q = vf_min(vf_max(vf_add(q, z), floor0), top);
  vf fake = vf_mul(s, vf_sub(q, z));
  if (store == 1) fake = vf_f16_round(fake);
  if (store == 2) fake = vi_bits(vi_sll(QD_NAME(bf16_bits)(fake), 16));
  const vf num = vf_add(fake, sz);
  const vf u = vf_mul(num, vf_set(p->inv_half_scale));
  vf code = vf_round(u);
  safe = QD_NAME(gptq_rint_safe)(u, code);
  if (!vm_all(safe)) code = vf_round(vf_div(num, vf_set(p->half_scale)));
  const vm outside = vm_or(vf_lt(code, floor0), vf_gt(code, top)); /* not NaN: 0 < half_scale < ∞ */
  if (vm_any(outside)) {
    *clamped += (uint64_t)vm_count(outside);
    code = vf_select(vf_gt(code, top), top, vf_select(outside, floor0, code));
  }
  return vf_to_vi_trunc(code);
}

/* The first 32 / bits codes at c (each < 2^bits) packed into one word, the first lowest. */
QD_V uint32_t QD_NAME(gptq_word)(const uint8_t *c, uint32_t bits) {
  uint64_t x;
  if (bits == 8) {
    uint32_t w;
    __builtin_memcpy(&w, c, 4);
    return w;
  }
  if (bits == 4) { /* eight bytes → nibbles: pairs, then quads, then the word */
    __builtin_memcpy(&x, c, 8);
    x = (x | x >> 4) & 0x00ff00ff00ff00ffull;
    x = (x | x >> 8) & 0x0000ffff0000ffffull;
    return (uint32_t)(x | x >> 16);
  }
  uint32_t w = 0;
  for (uint32_t k = 0; k < 16; k++) w |= (uint32_t)c[k] << (2 * k);
  return w;
}

/* Values x[0…n) of one row's group (n a multiple of 32 / bits) packed into n · bits / 32 words.
 * Runs of 4·VL values are packed in registers (4 and 8 bits); the rest goes through bytes. */
QD_TARGET static void QD_NAME(gptq_words)(const float *x, uint64_t n, uint32_t bits, int32_t store,
                                          const QD_NAME(gptq_lane) *p, uint32_t *words, uint64_t *clamped) {
  const float maxq = (float)((1u << bits) - 1u);
  const vf top = vf_set(maxq), near = vf_set(0.5f - (maxq + 1.0f) * 0x1p-21f);
  uint8_t codes[4 * VL];
  uint64_t k = 0;
  if (bits == 4) {
    for (; k + 4 * VL <= n; k += 4 * VL) {
      const vi a = QD_NAME(gptq_lut_codes)(x + k, p, top, near, clamped);
      const vi b = QD_NAME(gptq_lut_codes)(x + k + VL, p, top, near, clamped);
      const vi c = QD_NAME(gptq_lut_codes)(x + k + 2 * VL, p, top, near, clamped);
      const vi d = QD_NAME(gptq_lut_codes)(x + k + 3 * VL, p, top, near, clamped);
      store4_nibbles(words + (k * bits >> 5), a, b, c, d); /* 2 · VL bytes: the words, read back one by one */
    }
  }
  if (bits == 8) {
    for (; k + 4 * VL <= n; k += 4 * VL) {
      const vi a = QD_NAME(gptq_codes)(x + k, p, top, store, clamped);
      const vi b = QD_NAME(gptq_codes)(x + k + VL, p, top, store, clamped);
      const vi c = QD_NAME(gptq_codes)(x + k + 2 * VL, p, top, store, clamped);
      const vi d = QD_NAME(gptq_codes)(x + k + 3 * VL, p, top, store, clamped);
      store4_u8(codes, a, b, c, d);
      __builtin_memcpy(words + (k * bits >> 5), codes, 4 * VL);
    }
  }
  const qd_gptq_group_params ref = {maxq, p->scale, p->zero, p->half_scale, p->scale_zero, 0};
  const uint32_t per_word = 32 / bits;
  while (k < n) { /* codes as bytes, then words (m is a multiple of per_word) */
    const uint64_t m = n - k < 4 * VL ? n - k : 4 * VL;
    uint64_t j = 0;
    for (; j + VL <= m; j += VL)
      vi_store_u8(codes + j, bits == 8 ? QD_NAME(gptq_codes)(x + k + j, p, top, store, clamped)
                                       : QD_NAME(gptq_lut_codes)(x + k + j, p, top, near, clamped));
    for (; j < m; j++) codes[j] = (uint8_t)qd_gptq_code(x[k + j], &ref, store, clamped);
    for (uint64_t w = 0; w < (m * bits >> 5); w++)
      words[(k * bits >> 5) + w] = QD_NAME(gptq_word)(codes + w * per_word, bits);
    k += m;
  }
}

QD_TARGET static qd_status QD_NAME(gptq_quantize)(const float *w, uint64_t out, uint64_t in, uint32_t bits,
                                                  uint64_t group_size, int32_t sym, int32_t store, uint32_t *qweight,
                                                  uint32_t *qzeros, uint16_t *scales, uint64_t *counts,
                                                  uint64_t *bad) {
  enum { ROWS = 16, CHUNK = 128 }; /* a tile: 16 rows (a cache line of words) by 128 inputs */
  if (out == 0 || in == 0 || out % 32 != 0 || in % 32 != 0 || group_size == 0 || store < 0 || store > 2 ||
      (bits != 2 && bits != 4 && bits != 8) || group_size % (32 / bits) != 0)
    return qd_gptq_quantize_ref(w, out, in, bits, group_size, sym, store, qweight, qzeros, scales, counts, bad);
  const uint64_t groups = (in + group_size - 1) / group_size, zero_words = out * bits / 32;
  for (uint64_t k = 0; k < groups * zero_words; k++) qzeros[k] = 0;
  uint64_t zero_groups = 0, clamped = 0;
  for (uint64_t r0 = 0; r0 < out; r0 += ROWS) {
    for (uint64_t g = 0; g < groups; g++) {
      const uint64_t begin = g * group_size, n = (begin + group_size < in ? begin + group_size : in) - begin;
      const float *x = w + r0 * in + begin;
      float lo[ROWS], hi[ROWS];
      QD_NAME(gptq_lane) lanes[ROWS];
      uint16_t half[ROWS];
      /* The group two after this one (in the next tile past the row's end) is asked into the
       * cache row by row as the codes are made, a few lines per vector of work: 16 rows are more
       * streams than the hardware prefetchers follow. One group ahead, or all of a group's lines
       * issued at once before its range pass, was measurably slower on AVX2, no faster on AVX-512. */
      uint64_t ga = g + 2, ra = r0;
      if (ga >= groups) ga -= groups, ra += ROWS;
      const int has = ga < groups && ra < out;
      const float *ahead = has ? w + ra * in + ga * group_size : x;
      const uint64_t ahead_n = !has ? 0 : in - ga * group_size < group_size ? in - ga * group_size : group_size;
      uint32_t ok = 0;
      for (int j = 0; j < ROWS; j++)
        if (!group_range(x + (uint64_t)j * in, n, &lo[j], &hi[j]))
          return qd_gptq_quantize_ref(w, out, in, bits, group_size, sym, store, qweight, qzeros, scales, counts, bad);
      for (int j = 0; j < ROWS; j += VL)
        ok |= QD_NAME(gptq_params)(lo + j, hi + j, bits, sym, lanes + j, half + j) << j;
      if (ok != (1u << ROWS) - 1)
        return qd_gptq_quantize_ref(w, out, in, bits, group_size, sym, store, qweight, qzeros, scales, counts, bad);
      if (bits <= 4)
        for (int j = 0; j < ROWS; j++) QD_NAME(gptq_table)(&lanes[j], bits, store);
      for (int j = 0; j < ROWS; j++) {
        const uint32_t zero = (uint32_t)lanes[j].zero;
        if (zero == 0) zero_groups++;
        const uint64_t zbit = (r0 + (uint64_t)j) * bits;
        qzeros[g * zero_words + (zbit >> 5)] |= zero << (zbit & 31);
        scales[g * out + r0 + (uint64_t)j] = half[j];
      }
      for (uint64_t c0 = 0; c0 < n; c0 += CHUNK) { /* each row's words, then whole lines of qweight */
        const uint64_t m = n - c0 < CHUNK ? n - c0 : CHUNK, words = m * bits >> 5;
        uint32_t tile[ROWS][CHUNK / 4];
        for (int j = 0; j < ROWS; j++) {
          if (c0 == 0)
            for (uint64_t i = 0; i < ahead_n; i += 16) __builtin_prefetch(ahead + (uint64_t)j * in + i);
          QD_NAME(gptq_words)(x + (uint64_t)j * in + c0, m, bits, store, &lanes[j], tile[j], &clamped);
        }
        uint32_t *dst = qweight + ((begin + c0) * bits >> 5) * out + r0;
        for (uint64_t k = 0; k < words; k++, dst += out)
          for (int j = 0; j < ROWS; j++) dst[j] = tile[j][k];
      }
    }
  }
  qd_gptq_v1_zeros(qzeros, groups * zero_words, bits);
  counts[0] = zero_groups;
  counts[1] = clamped;
  return QD_OK;
}
