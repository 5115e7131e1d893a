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
 * Where qweight's rows are whole lines apart, the tiles are placed so that their lines are the
 * cache's (the first tile cut short where qweight does not start a line), and on x86 a large
 * qweight's lines are streamed past the caches (no read for ownership, the 8 MiB of a 64 MiB input
 * otherwise read once more). Groups of up to 128 inputs go eight rows (AVX-512: sixteen) at a time,
 * range, parameters and codes, while those rows' inputs are in the nearest cache, the rows two
 * steps later asked into the cache a line or a few at a time as the codes are made.
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
  int fine = 1;
  for (int q0 = 0; q0 < 16; q0 += VL) {
    const vf fake = vf_f16_round(vf_mul(vf_sub(vf_load(iota + q0), z), s));
    const vf a = vf_f16_round(vf_add(fake, sz)), u = vf_mul(a, vf_set(p->inv_scale));
    vf c = vf_f16_round(u);
    if (vm_any(QD_NAME(awq_near_midpoint)(u))) c = vf_f16_round(vf_div(a, s));
    const vf code = vf_round(c);
    const vm inside = vm_and(vf_ge(code, vf_set(0.0f)), vf_le(code, top)); /* NaN: outside */
    fine &= vm_all(inside);
    vi_store_u8(p->code + q0, vi_select(inside, vf_to_vi_trunc(vf_select(inside, code, top)), vi_set(16)));
  }
  p->bad = !fine;
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
                               int check, const float *ahead, uint64_t ahead_rows) {
  uint64_t k = 0;
  for (; k + VL <= m; k += VL) { /* row j's nibble is 4 · qd_awq_slot[j]: 0, 16, 4, 20, 8, 24, 12, 28 */
    /* ahead's cache lines (16 floats of each row) asked for one row or a few at a time, spread over
     * the loop: in a burst they fill the line-fill buffers and the prefetches wait */
#if VL >= 16
    for (uint64_t j = 0; j < ahead_rows; j++) __builtin_prefetch(ahead + j * in + k);
#else
    if (k % 16 == 0)
      for (uint64_t j = 0; j < ahead_rows && j < 4; j++) __builtin_prefetch(ahead + j * in + k);
    else
      for (uint64_t j = 4; j < ahead_rows; j++) __builtin_prefetch(ahead + j * in + (k & ~(uint64_t)15));
#endif
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

/* ahead: ahead_rows (0…8) rows of the part of a later group to ask into the cache meanwhile. */
QD_TARGET static int QD_NAME(awq_words)(const float *x, uint64_t in, uint64_t m, const QD_NAME(awq_lane) *p,
                                        uint32_t *words, const float *ahead, uint64_t ahead_rows) {
  if (p[0].bad | p[1].bad | p[2].bad | p[3].bad | p[4].bad | p[5].bad | p[6].bad | p[7].bad)
    return QD_NAME(awq_words_as)(x, in, m, p, words, 1, ahead, ahead_rows);
  return QD_NAME(awq_words_as)(x, in, m, p, words, 0, ahead, ahead_rows);
}

/* group_range (run_minmax from ±Infinity's keys), inlined: the same order keys, one vector at a
 * time, the tail one by one. */
QD_V int QD_NAME(awq_range)(const float *x, uint64_t n, float *lo, float *hi) {
  vi lv = vi_set(qd_key(__builtin_inff())), hv = vi_set(qd_key(-__builtin_inff()));
  uint64_t i = 0;
  for (; i + VL <= n; i += VL) {
    const vi k = key_of(vi_load(x + i));
    lv = vi_min(lv, k);
    hv = vi_max(hv, k);
  }
  int32_t l = vi_hmin(lv), h = vi_hmax(hv);
  for (; i < n; i++) {
    const int32_t k = qd_key(x[i]);
    l = k < l ? k : l;
    h = k > h ? k : h;
  }
  *lo = qd_unkey(l);
  *hi = qd_unkey(h);
  return l > qd_key(-__builtin_inff()) && h < qd_key(__builtin_inff());
}

#ifndef AWQ_SPAN
#define AWQ_SPAN 1024
#endif
/* The tile's words of m inputs (tile[b][k]: block b, input k) into qweight from dst on. */
QD_V void QD_NAME(awq_store_tile)(const uint32_t *tile0, uint64_t stride, uint64_t blocks, uint64_t m, uint32_t *dst,
                                  uint64_t words, int stream) {
#define tile(b, k) tile0[(b) * stride + (k)]
  (void)stream;
#if defined(QUANTD_SIMD_AVX2_H) || defined(QUANTD_SIMD_AVX512_H)
  if (stream && blocks == 16 && ((uintptr_t)dst & 63) == 0 && words % 16 == 0) {
    /* whole lines: stored past the caches, with no read for ownership (awq_quantize fences) */
    for (uint64_t k = 0; k < m; k++, dst += words) {
      _mm256_stream_si256((__m256i *)dst, _mm256_setr_epi32((int)tile(0, k), (int)tile(1, k), (int)tile(2, k),
                          (int)tile(3, k), (int)tile(4, k), (int)tile(5, k), (int)tile(6, k), (int)tile(7, k)));
      _mm256_stream_si256((__m256i *)(dst + 8), _mm256_setr_epi32((int)tile(8, k), (int)tile(9, k), (int)tile(10, k),
                          (int)tile(11, k), (int)tile(12, k), (int)tile(13, k), (int)tile(14, k), (int)tile(15, k)));
    }
    return;
  }
#endif
  if (blocks == 16) /* a whole line: a count the compiler knows */
    for (uint64_t k = 0; k < m; k++, dst += words)
      for (uint64_t b = 0; b < 16; b++) dst[b] = tile(b, k);
  else
    for (uint64_t k = 0; k < m; k++, dst += words)
      for (uint64_t b = 0; b < blocks; b++) dst[b] = tile(b, k);
#undef tile
}

QD_TARGET static qd_status QD_NAME(awq_tiles)(const float *w, uint64_t out, uint64_t in, uint64_t group_size,
                                                 uint32_t *qweight, uint32_t *qzeros, uint16_t *scales,
                                                 uint64_t *bad) {
  enum { ROWS = 128, CHUNK = 128 }; /* a tile: 128 rows (a cache line of words) by 128 inputs */
  enum { UNIT = VL > 8 ? VL : 8 };  /* rows whose parameters are made together */
#if defined(QUANTD_SIMD_AVX2_H) || defined(QUANTD_SIMD_AVX512_H)
  enum { SPAN = AWQ_SPAN }; /* inputs of a band's tile (64 KiB at 1024: the stack has room) */
#else
  enum { SPAN = 128 }; /* WebAssembly's stack is 64 KiB */
#endif
  if (out == 0 || in == 0 || out % 8 != 0 || group_size == 0 || in % group_size != 0)
    return qd_awq_quantize_ref(w, out, in, group_size, qweight, qzeros, scales, bad);
  const uint64_t words = out / 8, groups = in / group_size;
  /* Where qweight's rows of words are whole cache lines apart (words a multiple of 16), the first
   * tile is cut short so that every later tile's 16 words are one line: a line that two tiles share
   * is fetched, evicted and fetched again between them. */
  const uint64_t first = words % 16 == 0 ? ((64 - ((uintptr_t)qweight & 63)) & 63) / 4 * 8 : 0;
  const int stream = in * words >= (1u << 16); /* qweight of 256 KiB or more: past the caches (x86) */
  for (uint64_t r0 = 0, rows; r0 < out; r0 += rows) {
    rows = r0 == 0 && first && first < out ? first : out - r0 < ROWS ? out - r0 : ROWS;
    const uint64_t blocks = rows / 8;
    if (group_size <= CHUNK) {
      /* Groups of up to 128 inputs: the band's rows UNIT at a time, along SPAN inputs (whole
       * groups) of them: a few streams the hardware prefetchers follow, and the next UNIT rows
       * asked into the cache a line or a few at a time as the codes are made. Group by group:
       * range, parameters and codes while the group's inputs are in the nearest cache. */
      const uint64_t span_max = SPAN / group_size * group_size;
      uint32_t tile[ROWS / 8][SPAN];
      for (uint64_t c0 = 0; c0 < in; c0 += span_max) {
        const uint64_t span = in - c0 < span_max ? in - c0 : span_max;
        for (uint64_t u0 = 0; u0 < rows; u0 += UNIT) {
          const uint64_t n = rows - u0 < UNIT ? rows - u0 : UNIT;
          uint64_t ua = u0 + UNIT, ca = c0, ra = r0, rows_a = rows;
          if (ua >= rows) {
            ua = 0, ca += span_max;
            if (ca >= in) ca = 0, ra += rows, rows_a = ra >= out ? 0 : out - ra < ROWS ? out - ra : ROWS;
          }
          const uint64_t ahead_rows = ua >= rows_a ? 0 : rows_a - ua < UNIT ? rows_a - ua : UNIT;
          const uint64_t span_a = in - ca < span_max ? in - ca : span_max;
          for (uint64_t c = 0; c < span; c += group_size) {
            const uint64_t g = (c0 + c) / group_size;
            const float *x = w + (r0 + u0) * in + c0 + c;
            float lo[UNIT], hi[UNIT];
            QD_NAME(awq_lane) lanes[UNIT];
            uint16_t half[UNIT];
            for (uint64_t j = 0; j < UNIT; j++) {
              lo[j] = hi[j] = 0.0f; /* rows past the end: any finite range */
              if (j < n && !QD_NAME(awq_range)(x + j * in, group_size, &lo[j], &hi[j]))
                return qd_awq_quantize_ref(w, out, in, group_size, qweight, qzeros, scales, bad);
            }
            for (uint64_t j = 0; j < n; j += VL)
              if (!QD_NAME(awq_params)(lo + j, hi + j, lanes + j, half + j))
                return qd_awq_quantize_ref(w, out, in, group_size, qweight, qzeros, scales, bad);
            for (uint64_t j = 0; j < n; j++) scales[g * out + r0 + u0 + j] = half[j];
            for (uint64_t off = 0; off < n; off += 8) {
              const uint64_t b = (u0 + off) / 8;
              uint32_t zeros = 0;
              for (int j = 0; j < 8; j++) zeros |= (uint32_t)lanes[off + (uint64_t)j].zero << (4u * qd_awq_slot[j]);
              qzeros[g * words + r0 / 8 + b] = zeros;
              const uint64_t ahead_here =
                  c >= span_a || ahead_rows <= off ? 0 : ahead_rows - off < 8 ? ahead_rows - off : 8;
              if (!QD_NAME(awq_words)(x + off * in, in, group_size, lanes + off, tile[b] + c,
                                      ahead_here ? w + (ra + ua + off) * in + ca + c : x, ahead_here))
                return qd_awq_quantize_ref(w, out, in, group_size, qweight, qzeros, scales, bad);
            }
          }
        }
        QD_NAME(awq_store_tile)(tile[0], SPAN, blocks, span, qweight + c0 * words + r0 / 8, words, stream);
      }
      continue;
    }
    for (uint64_t g = 0; g < groups; g++) {
      const float *x = w + r0 * in + g * group_size;
      float lo[ROWS], hi[ROWS];
      QD_NAME(awq_lane) lanes[ROWS];
      uint16_t half[ROWS];
      uint32_t tile[ROWS / 8][CHUNK];
      /* Longer groups: the range of all the tile's rows first, then their codes CHUNK inputs at a
       * time, the group two after this one (in the next tile past the rows' end) asked into the
       * cache meanwhile. */
      uint64_t ga = g + 2, ra = r0;
      if (ga >= groups) ga -= groups, ra += rows;
      const int has = ga < groups && ra < out;
      const float *ahead = has ? w + ra * in + ga * group_size : x;
      const uint64_t ahead_rows = !has ? 0 : out - ra < ROWS ? out - ra : ROWS;
      for (uint64_t j = 0; j < ROWS; j++) {
        lo[j] = hi[j] = 0.0f;
        if (j < rows && !QD_NAME(awq_range)(x + j * in, group_size, &lo[j], &hi[j]))
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
        for (uint64_t b = 0; b < blocks; b++) {
          const uint64_t ahead_here = ahead_rows <= 8 * b ? 0 : ahead_rows - 8 * b < 8 ? ahead_rows - 8 * b : 8;
          if (!QD_NAME(awq_words)(x + 8 * b * in + c0, in, m, lanes + 8 * b, tile[b],
                                  ahead_here ? ahead + 8 * b * in + c0 : x, ahead_here))
            return qd_awq_quantize_ref(w, out, in, group_size, qweight, qzeros, scales, bad);
        }
        QD_NAME(awq_store_tile)(tile[0], CHUNK, blocks, m, qweight + (g * group_size + c0) * words + r0 / 8, words, stream);
      }
    }
  }
  return QD_OK;
}

QD_TARGET static qd_status QD_NAME(awq_quantize)(const float *w, uint64_t out, uint64_t in, uint64_t group_size,
                                                 uint32_t *qweight, uint32_t *qzeros, uint16_t *scales,
                                                 uint64_t *bad) {
  const qd_status s = QD_NAME(awq_tiles)(w, out, in, group_size, qweight, qzeros, scales, bad);
#if defined(QUANTD_SIMD_AVX2_H) || defined(QUANTD_SIMD_AVX512_H)
  _mm_sfence(); /* the tiles' streaming stores ordered before whatever follows */
#endif
  return s;
}
