/*
 * ONNX Runtime's MatMulNBits quantizer over the vector primitives (included by simd_kernels.h
 * after simd_ggml.h): nbits_ref.c's driver with a vector body for whole blocks. A block's range
 * is an order-key minimum and maximum, which equals the reference's sequential scan except for
 * the sign of a zero extreme (the scan keeps the first zero it met): such a block, and one holding
 * NaN or ±Infinity, is left to the reference. The scale and zero point are the reference's own
 * function; the codes are the same float32 multiply, add, roundf and clamp per lane.
 */

QD_TARGET static int QD_NAME(nbits_block)(const float *x, uint64_t count, int32_t sym, int32_t f16, float *scale,
                                          uint8_t *zp, uint8_t *out, uint64_t *bad) {
  int32_t lo = qd_key(qd_float(0x7f7fffffu)), hi = qd_key(-qd_float(0x7f7fffffu));
  if (count % VL != 0 || !run_minmax(x, count, &lo, &hi))
    return qd_nbits_block_ref(x, count, sym, f16, scale, zp, out, bad);
  float min = qd_unkey(lo), max = qd_unkey(hi);
  if (min == 0.0f || max == 0.0f) return qd_nbits_block_ref(x, count, sym, f16, scale, zp, out, bad);
  float recip;
  if (!qd_nbits_params(min, max, sym, f16, scale, zp, &recip)) return 0;
  const vf r = vf_set(recip), z = vf_set((float)*zp), zero = vf_set(0.0f), fifteen = vf_set(15.0f);
  int32_t codes[VL];
  for (uint64_t k = 0; k < count; k += VL) {
    vf t = vf_roundf(vf_add(vf_mul(vf_load(x + k), r), z));
    t = vf_select(vf_lt(t, zero), zero, vf_select(vf_gt(t, fifteen), fifteen, t));
    vi_store(codes, vf_to_vi_trunc(t));
    for (int j = 0; j < VL; j += 2) out[(k + j) >> 1] = (uint8_t)(codes[j] | codes[j + 1] << 4);
  }
  return 1;
}

QD_TARGET static qd_status QD_NAME(nbits_quantize)(const float *w, uint64_t n_cols, uint64_t k_len,
                                                   uint64_t block_size, int32_t sym, int32_t f16, uint8_t *b,
                                                   float *scales, uint8_t *zero_points, uint64_t *bad) {
  return qd_nbits_quantize_with(QD_NAME(nbits_block), w, n_cols, k_len, block_size, sym, f16, b, scales, zero_points,
                                bad);
}
