/*
 * AutoAWQ's packing over the vector primitives (included by simd_kernels.h), byte for byte
 * awq_ref.c: each step is the reference's float32 operation followed by a round trip through
 * float16 (vf_f16_round, as qd_f16_round), VL consecutive inputs at a time.
 *
 * The speed is in the writes. A qweight word holds one input of eight consecutive output rows (a
 * nibble each, in AutoAWQ's order), so the reference clears qweight and ORs each code into a word
 * `out / 8` words from the last: a read-modify-write per weight, and on a power-of-two `out` every
 * word of a row in the same cache set. Here a tile of 128 rows (a cache line of words) by a group's
 * inputs (up to 128) is packed in registers, eight rows at a time, and written as whole lines, once.
 *
 * The group's range is taken on the float32 values and rounded to float16 once: rounding is
 * monotonic, so that is the minimum and maximum of the rounded values. It may differ from the
 * sequential scan's only in the sign of a zero, which no output keeps (codes and zero points are
 * integers; the scale is chosen from the range, floored at float16(1e-5)). The parameters are
 * qd_awq_params' operations lane for lane, VL rows at once. Any group the vector path refuses (a
 * value not finite, a scale float16 cannot hold, a code the scale cannot re-derive) reruns the
 * reference driver from the start, which gives the reference's error and index.
 *
 * The arithmetic per weight is cut to what depends on the weight:
 *
 * - Codes. After q (an integer 0…15) everything the reference does (the fake-quantized value, its
 *   re-derived code and its check) depends on q and the group's parameters only: it is done once
 *   per group for all 16 values of q (awq_table, the same operations) and looked up per weight
 *   (vi_lut16), which takes one division and three roundings per weight away.
 * - The division x / scale. With r = RN(1/scale) and y = RN(x · r), |y − RN(x / scale)| is at most
 *   three float32 steps of y (see simd_gptq.h), so both round to the same float16 unless y is within
 *   four steps of a float16 midpoint: 0x1000 in the 13 mantissa bits float16 drops. A vector with
 *   any lane that near is computed again with the division. Out of float16's normal range this
 *   test does not look at the right bits, but there the rounded value is below 2^-14 (rint 0) or
 *   past 65504 (clamped) either way.
 */

/* The lanes of y = RN(x · RN(1/scale)) within four float32 steps of a float16 midpoint (see the
 * top): (bits − 0x0ffc) mod 2^13 ≤ 8. */
QD_V vm QD_NAME(awq_near_midpoint)(vf y) {
  const vi low = vi_and(vi_sub(vf_bits(y), vi_set(0x0ffc)), vi_set(0x1fff));
  return vi_gt(vi_set(9), low);
}

/* One row's group parameters as the code loop uses them; code[q] is the code a weight whose q is q
 * gets, 16 where the reference cannot re-derive it. */
typedef struct {
  float scale, zero, scale_zero, inv_scale, slack;
  uint8_t code[16];
  int bad; /* whether some code[q] is 16 */
} QD_NAME(awq_lane);

/* The lane's code table: qd_awq_code's operations after q, for q = 0…15, VL values at once, the
 * division by the scale as in the code loop (a multiplication where that is exact, see the top). */
QD_TARGET static void QD_NAME(awq_table)(QD_NAME(awq_lane) *p) {
  static const float iota[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  const vf s = vf_set(p->scale), z = vf_set(p->zero), sz = vf_set(p->scale_zero), top = vf_set(15.0f);
  vm bad = vm_none();
  for (int q0 = 0; q0 < 16; q0 += VL) {
    const vf fake = vf_f16_round(vf_mul(vf_sub(vf_load(iota + q0), z), s));
    const vf a = vf_f16_round(vf_add(fake, sz)), u = vf_mul(a, vf_set(p->inv_scale));
    vf c = vf_f16_round(u);
    if (vm_any(QD_NAME(awq_near_midpoint)(u))) c = vf_f16_round(vf_div(a, s));
    const vf code = vf_round(c);
    const vm inside = vm_and(vf_ge(code, vf_set(0.0f)), vf_le(code, top)); /* NaN: outside */
    bad = vm_or(bad, vm_or(vf_unord(code), vm_or(vf_lt(code, vf_set(0.0f)), vf_gt(code, top))));
    vi_store_u8(p->code + q0, vi_select(inside, vf_to_vi_trunc(vf_select(inside, code, top)), vi_set(16)));
  }
  p->bad = vm_any(bad);
}

/* qd_awq_params for VL rows at once from their float32 minima and maxima; 0 if a scale is not
 * finite. Each lane's float16 scale goes to `half`. */
QD_TARGET static int QD_NAME(awq_params)(const float *lo, const float *hi, QD_NAME(awq_lane) *lanes, uint16_t *half) {
  const vf l = vf_f16_round(vf_load(lo)), h = vf_f16_round(vf_load(hi));
  const vf min_range = vf_set(qd_f16_round(1e-5f)), maxq = vf_set(15.0f), zero0 = vf_set(0.0f);
  vf range = vf_f16_round(vf_sub(h, l));
  range = vf_select(vf_lt(range, min_range), min_range, range);
  const vf scale = vf_f16_round(vf_div(range, maxq));
  const vf z = vf_neg(vf_round(vf_f16_round(vf_div(l, scale))));
  const vf zero = vf_select(vf_lt(z, zero0), zero0, vf_select(vf_gt(z, maxq), maxq, z));
  const vf scale_zero = vf_f16_round(vf_mul(zero, scale));
  if (!vm_all(vf_lt(scale, vf_set(__builtin_inff())))) return 0; /* scale ≥ float16(1e-5) / 15 > 0 */
  float s[VL], zs[VL], sz[VL], is[VL], sl[VL];
  vf_store(s, scale);
  vf_store(zs, zero);
  vf_store(sz, scale_zero);
  const vf inv = vf_div(vf_set(1.0f), scale);
  vf_store(is, inv);
  vf_store(sl, vf_mul(vf_add(inv, vf_set(1.0f)), vf_set(0x1p-24f))); /* see awq_codes */
#if QD_HAS_F16C
  vf_store_f16(half, scale);
#endif
  for (int j = 0; j < VL; j++) {
    lanes[j].scale = s[j];
    lanes[j].zero = zs[j];
    lanes[j].scale_zero = sz[j];
    lanes[j].inv_scale = is[j];
    lanes[j].slack = sl[j];
    QD_NAME(awq_table)(&lanes[j]);
#if !QD_HAS_F16C
    half[j] = qd_f32_to_f16(s[j]);
#endif
  }
  return 1;
}

/* The codes of x[0…VL), a row's inputs of one group, by the reference's operations up to q and
 * the row's table after it (16 where a code cannot be re-derived). */
QD_V vi QD_NAME(awq_codes)(const float *x, const QD_NAME(awq_lane) *p) {
  const vf floor0 = vf_set(0.0f), top = vf_set(15.0f);
#if !QD_HAS_F16C
  /* Without a conversion instruction each float16 rounding is a dozen operations, so first both
   * are left out: y = RN(x · r) (clamped to ±64, past which q is 0 or 15 either way) is within
   * |y| · (2 · 2^-11 + 5 · 2^-24) of the reference's float16 quotient, plus 2^-25 · (r + 1) where
   * a value or the quotient is below float16's normal range (`slack`, doubled). Where each lane is
   * farther than |y| · 2^-9 + slack from a half-integer, rint of both is rint(y); other vectors
   * (a few in a hundred) take the reference's roundings below. */
  const vf y0 = vf_min(vf_max(vf_mul(vf_load(x), vf_set(p->inv_scale)), vf_set(-64.0f)), vf_set(64.0f));
  const vf k0 = vf_round(y0);
  const vf off = vf_add(vf_add(vf_abs(vf_sub(y0, k0)), vf_mul(vf_abs(y0), vf_set(0x1p-9f))), vf_set(p->slack));
  if (vm_all(vf_lt(off, vf_set(0.5f)))) {
    const vf q = vf_min(vf_max(vf_add(k0, vf_set(p->zero)), floor0), top);
    return vi_lut16(vi_lut16_load(p->code), vf_to_vi_trunc(q));
  }
#endif
  const vf xh = vf_f16_round(vf_load(x));
  const vf y = vf_mul(xh, vf_set(p->inv_scale));
  vf t = vf_f16_round(y);
  if (vm_any(QD_NAME(awq_near_midpoint)(y))) t = vf_f16_round(vf_div(xh, vf_set(p->scale)));
  const vf q = vf_min(vf_max(vf_add(vf_round(t), vf_set(p->zero)), floor0), top);
  return vi_lut16(vi_lut16_load(p->code), vf_to_vi_trunc(q));
}

/* Eight rows (`in` apart) of m inputs into m words, each row's codes at its nibble; 0 if a code
 * cannot be re-derived (looked for only where a row's table has a 16: `check`, constant). */
QD_V int QD_NAME(awq_words_as)(const float *x, uint64_t in, uint64_t m, const QD_NAME(awq_lane) *p, uint32_t *words,
                               int check) {
  uint64_t k = 0;
  for (; k + VL <= m; k += VL) { /* row j's nibble is 4 · qd_awq_slot[j]: 0, 16, 4, 20, 8, 24, 12, 28 */
    const vi c0 = QD_NAME(awq_codes)(x + k, p), c1 = QD_NAME(awq_codes)(x + in + k, p + 1);
    const vi c2 = QD_NAME(awq_codes)(x + 2 * in + k, p + 2), c3 = QD_NAME(awq_codes)(x + 3 * in + k, p + 3);
    const vi c4 = QD_NAME(awq_codes)(x + 4 * in + k, p + 4), c5 = QD_NAME(awq_codes)(x + 5 * in + k, p + 5);
    const vi c6 = QD_NAME(awq_codes)(x + 6 * in + k, p + 6), c7 = QD_NAME(awq_codes)(x + 7 * in + k, p + 7);
    if (check) {
      const vi seen = vi_or(vi_or(vi_or(c0, c1), vi_or(c2, c3)), vi_or(vi_or(c4, c5), vi_or(c6, c7)));
      if (vm_any(vi_gt(seen, vi_set(15)))) return 0;
    }
    const vi lo = vi_or(vi_or(c0, vi_sll(c2, 4)), vi_or(vi_sll(c4, 8), vi_sll(c6, 12)));
    const vi hi = vi_or(vi_or(c1, vi_sll(c3, 4)), vi_or(vi_sll(c5, 8), vi_sll(c7, 12)));
    vi_store(words + k, vi_or(lo, vi_sll(hi, 16)));
  }
  for (; k < m; k++) {
    uint32_t word = 0;
    for (int j = 0; j < 8; j++) {
      const int32_t code = qd_awq_code(x[(uint64_t)j * in + k], p[j].scale, p[j].zero, p[j].scale_zero);
      if (code < 0) return 0;
      word |= (uint32_t)code << (4u * qd_awq_slot[j]);
    }
    words[k] = word;
  }
  return 1;
}

QD_TARGET static int QD_NAME(awq_words)(const float *x, uint64_t in, uint64_t m, const QD_NAME(awq_lane) *p,
                                        uint32_t *words) {
  if (p[0].bad | p[1].bad | p[2].bad | p[3].bad | p[4].bad | p[5].bad | p[6].bad | p[7].bad)
    return QD_NAME(awq_words_as)(x, in, m, p, words, 1);
  return QD_NAME(awq_words_as)(x, in, m, p, words, 0);
}

QD_TARGET static qd_status QD_NAME(awq_quantize)(const float *w, uint64_t out, uint64_t in, uint64_t group_size,
                                                 uint32_t *qweight, uint32_t *qzeros, uint16_t *scales,
                                                 uint64_t *bad) {
  enum { ROWS = 128, CHUNK = 128 }; /* a tile: 128 rows (a cache line of words) by 128 inputs */
  if (out == 0 || in == 0 || out % 8 != 0 || group_size == 0 || in % group_size != 0)
    return qd_awq_quantize_ref(w, out, in, group_size, qweight, qzeros, scales, bad);
  const uint64_t words = out / 8, groups = in / group_size;
  for (uint64_t r0 = 0; r0 < out; r0 += ROWS) {
    const uint64_t rows = out - r0 < ROWS ? out - r0 : ROWS, blocks = rows / 8;
    for (uint64_t g = 0; g < groups; g++) {
      const float *x = w + r0 * in + g * group_size;
      float lo[ROWS], hi[ROWS];
      QD_NAME(awq_lane) lanes[ROWS];
      uint16_t half[ROWS];
      /* The group two after this one (in the next tile past the rows' end) is asked into the cache
       * block by block as the codes are made (as in simd_gptq.h): 128 rows are far more streams
       * than the hardware prefetchers follow. */
      uint64_t ga = g + 2, ra = r0;
      if (ga >= groups) ga -= groups, ra += ROWS;
      const int has = ga < groups && ra < out;
      const float *ahead = has ? w + ra * in + ga * group_size : x;
      const uint64_t ahead_rows = !has ? 0 : out - ra < ROWS ? out - ra : ROWS;
      for (uint64_t j = 0; j < ROWS; j++) {
        lo[j] = hi[j] = 0.0f;
        if (j < rows && !group_range(x + j * in, group_size, &lo[j], &hi[j]))
          return qd_awq_quantize_ref(w, out, in, group_size, qweight, qzeros, scales, bad);
      }
      for (uint64_t j = 0; j < rows; j += VL)
        if (!QD_NAME(awq_params)(lo + j, hi + j, lanes + j, half + j))
          return qd_awq_quantize_ref(w, out, in, group_size, qweight, qzeros, scales, bad);
      for (uint64_t b = 0; b < blocks; b++) {
        uint32_t zeros = 0;
        for (int j = 0; j < 8; j++) zeros |= (uint32_t)lanes[8 * b + (uint64_t)j].zero << (4u * qd_awq_slot[j]);
        qzeros[g * words + r0 / 8 + b] = zeros;
      }
      for (uint64_t j = 0; j < rows; j++) scales[g * out + r0 + j] = half[j];
      for (uint64_t c0 = 0; c0 < group_size; c0 += CHUNK) {
        const uint64_t m = group_size - c0 < CHUNK ? group_size - c0 : CHUNK;
        uint32_t tile[ROWS / 8][CHUNK];
        for (uint64_t b = 0; b < blocks; b++) {
          if (c0 == 0)
            for (uint64_t j = 8 * b; j < 8 * b + 8 && j < ahead_rows; j++)
              for (uint64_t i = 0; i < group_size; i += 16) __builtin_prefetch(ahead + j * in + i);
          if (!QD_NAME(awq_words)(x + 8 * b * in + c0, in, m, lanes + 8 * b, tile[b]))
            return qd_awq_quantize_ref(w, out, in, group_size, qweight, qzeros, scales, bad);
        }
        uint32_t *dst = qweight + (g * group_size + c0) * words + r0 / 8;
        if (blocks == ROWS / 8) /* a whole line: a count the compiler knows */
          for (uint64_t k = 0; k < m; k++, dst += words)
            for (uint64_t b = 0; b < ROWS / 8; b++) dst[b] = tile[b][k];
        else
          for (uint64_t k = 0; k < m; k++, dst += words)
            for (uint64_t b = 0; b < blocks; b++) dst[b] = tile[b][k];
      }
    }
  }
  return QD_OK;
}
