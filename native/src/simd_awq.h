/*
 * AutoAWQ's packing over the vector primitives (included by simd_kernels.h), byte for byte
 * awq_ref.c: each step is the reference's float32 operation followed by a round trip through
 * float16 (vf_f16_round, as qd_f16_round), VL consecutive inputs at a time.
 *
 * The speed is in the writes. A qweight word holds one input of eight consecutive output rows (a
 * nibble each, in AutoAWQ's order), so the reference clears qweight and ORs each code into a word
 * `out / 8` words from the last: a read-modify-write per weight, and on a power-of-two `out` every
 * word of a row in the same cache set. Here a tile of 128 rows (a cache line of words) by 32
 * inputs is packed in registers, eight rows at a time, and written as whole lines, once.
 *
 * The group's range is taken on the float32 values and rounded to float16 once: rounding is
 * monotonic, so that is the minimum and maximum of the rounded values. It may differ from the
 * sequential scan's only in the sign of a zero, which no output keeps (codes and zero points are
 * integers; the scale is chosen from the range, floored at float16(1e-5)). The parameters are
 * qd_awq_params' operations lane for lane, VL rows at once. Any group the vector path refuses (a
 * value not finite, a scale float16 cannot hold, a code the scale cannot re-derive) reruns the
 * reference driver from the start, which gives the reference's error and index.
 */

/* One row's group parameters as the code loop uses them. */
typedef struct {
  float scale, zero, scale_zero;
} QD_NAME(awq_lane);

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
  float s[VL], zs[VL], sz[VL];
  vf_store(s, scale);
  vf_store(zs, zero);
  vf_store(sz, scale_zero);
  for (int j = 0; j < VL; j++) {
    lanes[j] = (QD_NAME(awq_lane)){s[j], zs[j], sz[j]};
    half[j] = qd_f32_to_f16(s[j]);
  }
  return 1;
}

/* Eight rows (`in` apart) of m inputs into m words, each row's codes at its nibble; 0 if a code
 * cannot be re-derived. */
QD_TARGET static int QD_NAME(awq_words)(const float *x, uint64_t in, uint64_t m, const QD_NAME(awq_lane) *p,
                                        uint32_t *words) {
  const vf top = vf_set(15.0f), floor0 = vf_set(0.0f);
  uint64_t k = 0;
  for (; k + VL <= m; k += VL) {
    vi word = vi_set(0);
    vm outside = vm_none();
    for (int j = 0; j < 8; j++) {
      const vf s = vf_set(p[j].scale), z = vf_set(p[j].zero), sz = vf_set(p[j].scale_zero);
      vf q = vf_add(vf_round(vf_f16_round(vf_div(vf_f16_round(vf_load(x + (uint64_t)j * in + k)), s))), z);
      q = vf_min(vf_max(q, floor0), top);
      const vf fake = vf_f16_round(vf_mul(vf_sub(q, z), s));
      const vf code = vf_round(vf_f16_round(vf_div(vf_f16_round(vf_add(fake, sz)), s)));
      outside = vm_or(outside, vm_or(vf_lt(code, floor0), vf_gt(code, top)));
      word = vi_or(word, vi_sll(vf_to_vi_trunc(code), 4 * qd_awq_slot[j]));
    }
    if (vm_any(outside)) return 0;
    vi_store(words + k, word);
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

QD_TARGET static qd_status QD_NAME(awq_quantize)(const float *w, uint64_t out, uint64_t in, uint64_t group_size,
                                                 uint32_t *qweight, uint32_t *qzeros, uint16_t *scales,
                                                 uint64_t *bad) {
  enum { ROWS = 128, CHUNK = 32 }; /* a tile: 128 rows (a cache line of words) by 32 inputs */
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
      for (uint64_t j = 0; j < ROWS; j++) {
        lo[j] = hi[j] = 0.0f;
        if (j < rows && !group_range(x + j * in, group_size, x + j * in + group_size, g + 1 < groups ? group_size : 0,
                                     &lo[j], &hi[j]))
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
        for (uint64_t b = 0; b < blocks; b++)
          if (!QD_NAME(awq_words)(x + 8 * b * in + c0, in, m, lanes + 8 * b, tile[b]))
            return qd_awq_quantize_ref(w, out, in, group_size, qweight, qzeros, scales, bad);
        uint32_t *dst = qweight + (g * group_size + c0) * words + r0 / 8;
        for (uint64_t k = 0; k < m; k++, dst += words)
          for (uint64_t b = 0; b < blocks; b++) dst[b] = tile[b][k];
      }
    }
  }
  return QD_OK;
}
