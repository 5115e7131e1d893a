/*
 * AutoAWQ's packing over the vector primitives (included by simd_kernels.h), where the ISA
 * converts to float16 in hardware (F16C): awq_ref.c's driver with a vector body per group. Each
 * step is the reference's float32 operation followed by a round trip through float16 (the
 * hardware's round-to-nearest-even, as qd_f32_to_f16). The group's minimum and maximum may differ
 * from the sequential scan's only in the sign of a zero, which no output keeps (codes and zero
 * points are integers; the scale is chosen from the range, floored at float16(1e-5)). Group sizes
 * that are not a multiple of VL, codes the scale cannot re-derive, and ISAs without F16C go to the
 * reference.
 */
#if QD_HAS_F16C
QD_V vf vf_half(vf v) {
  uint16_t h[VL];
  vf_store_f16(h, v);
  return vf_load_f16(h);
}

QD_TARGET static int QD_NAME(awq_group)(const float *x, uint64_t n, uint64_t stride, uint32_t shift,
                                        uint32_t *qweight, uint32_t *qzero, uint16_t *scale_out) {
  if (n % VL != 0) return qd_awq_group_ref(x, n, stride, shift, qweight, qzero, scale_out);
  vf lo = vf_set(__builtin_inff()), hi = vf_set(-__builtin_inff());
  for (uint64_t k = 0; k < n; k += VL) {
    vf v = vf_half(vf_load(x + k));
    lo = vf_min(lo, v);
    hi = vf_max(hi, v);
  }
  float los[VL], his[VL], l = __builtin_inff(), h = -__builtin_inff(), scale, zero, scale_zero;
  vf_store(los, lo);
  vf_store(his, hi);
  for (int j = 0; j < VL; j++) {
    l = los[j] < l ? los[j] : l;
    h = his[j] > h ? his[j] : h;
  }
  qd_awq_params(l, h, &scale, &zero, &scale_zero);
  if (!qd_is_finite(scale)) return 0;
  const vf s = vf_set(scale), z = vf_set(zero), sz = vf_set(scale_zero), top = vf_set(15.0f), floor0 = vf_set(0.0f);
  for (uint64_t k = 0; k < n; k += VL) {
    vf q = vf_add(vf_round(vf_half(vf_div(vf_half(vf_load(x + k)), s))), z);
    q = vf_min(vf_max(q, floor0), top);
    vf fake = vf_half(vf_mul(vf_sub(q, z), s));
    vf code = vf_round(vf_half(vf_div(vf_half(vf_add(fake, sz)), s)));
    if (vm_any(vm_or(vf_lt(code, floor0), vf_gt(code, top)))) return 0;
    int32_t codes[VL];
    vi_store(codes, vf_to_vi_trunc(code));
    for (int j = 0; j < VL; j++) qweight[(k + j) * stride] |= (uint32_t)codes[j] << shift;
  }
  *qzero |= (uint32_t)zero << shift;
  *scale_out = qd_f32_to_f16(scale);
  return 1;
}

QD_TARGET static qd_status QD_NAME(awq_quantize)(const float *w, uint64_t out, uint64_t in, uint64_t group_size,
                                                 uint32_t *qweight, uint32_t *qzeros, uint16_t *scales,
                                                 uint64_t *bad) {
  return qd_awq_quantize_with(QD_NAME(awq_group), w, out, in, group_size, qweight, qzeros, scales, bad);
}
#define QD_AWQ_QUANTIZE QD_NAME(awq_quantize)
#else
#define QD_AWQ_QUANTIZE qd_awq_quantize_ref
#endif
