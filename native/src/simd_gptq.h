/*
 * AutoGPTQ's packing over the vector primitives (included by simd_kernels.h): gptq_ref.c's
 * driver with a vector body per group, VL consecutive inputs of one row at a time, each step the
 * reference's float32 operation (rounding Q to float16 needs F16C; to bfloat16 is f32_to_bf16's
 * integer work on the bits). The group's minimum and maximum may differ from the sequential
 * scan's only in the sign of a zero, which the parameters do not keep (both clamp at 0). Groups
 * that are not a multiple of VL, and float16 layers without F16C, go to the reference.
 */
#if QD_HAS_F16C
#define QD_GPTQ_F16 1
#else
#define QD_GPTQ_F16 0
#endif

QD_TARGET static int QD_NAME(gptq_group)(const float *x, uint64_t begin, uint64_t end, uint64_t out, uint32_t bits,
                                         int32_t sym, int32_t store, uint32_t *qweight_col, uint32_t *zero_out,
                                         uint16_t *scale_out, uint64_t *clamped) {
  if ((end - begin) % VL != 0 || (store == 1 && !QD_GPTQ_F16))
    return qd_gptq_group_ref(x, begin, end, out, bits, sym, store, qweight_col, zero_out, scale_out, clamped);
  vf lo = vf_set(__builtin_inff()), hi = vf_set(-__builtin_inff());
  for (uint64_t i = begin; i < end; i += VL) {
    vf v = vf_load(x + i);
    lo = vf_min(lo, v);
    hi = vf_max(hi, v);
  }
  float los[VL], his[VL], l = __builtin_inff(), h = -__builtin_inff();
  vf_store(los, lo);
  vf_store(his, hi);
  for (int j = 0; j < VL; j++) {
    l = los[j] < l ? los[j] : l;
    h = his[j] > h ? his[j] : h;
  }
  qd_gptq_group_params p;
  if (!qd_gptq_params(l, h, bits, sym, &p)) return 0;
  const vf s = vf_set(p.scale), z = vf_set(p.zero), sz = vf_set(p.scale_zero), hs = vf_set(p.half_scale);
  const vf top = vf_set(p.maxq), floor0 = vf_set(0.0f);
  for (uint64_t i = begin; i < end; i += VL) {
    vf q = vf_add(vf_round(vf_div(vf_load(x + i), s)), z);
    q = vf_min(vf_max(q, floor0), top);
    vf fake = vf_mul(s, vf_sub(q, z));
#if QD_HAS_F16C
    if (store == 1) {
      uint16_t halves[VL];
      vf_store_f16(halves, fake);
      fake = vf_load_f16(halves);
    }
#endif
    if (store == 2) fake = vi_bits(vi_sll(QD_NAME(bf16_bits)(fake), 16));
    vf code = vf_round(vf_div(vf_add(fake, sz), hs));
    vm outside = vm_or(vm_or(vf_lt(code, floor0), vf_gt(code, top)), vf_unord(code));
    if (vm_any(outside)) {
      *clamped += (uint64_t)vm_count(outside);
      code = vf_select(vf_gt(code, top), top, vf_select(outside, floor0, code));
    }
    int32_t codes[VL];
    vi_store(codes, vf_to_vi_trunc(code));
    for (int j = 0; j < VL; j++) {
      const uint64_t bit = (i + (uint64_t)j) * bits;
      qweight_col[(bit >> 5) * out] |= (uint32_t)codes[j] << (bit & 31);
    }
  }
  *zero_out = (uint32_t)p.zero;
  *scale_out = p.half;
  return 1;
}

QD_TARGET static qd_status QD_NAME(gptq_quantize)(const float *w, uint64_t out, uint64_t in, uint32_t bits,
                                                  uint64_t group_size, int32_t sym, int32_t store, uint32_t *qweight,
                                                  uint32_t *qzeros, uint16_t *scales, uint64_t *counts,
                                                  uint64_t *bad) {
  return qd_gptq_quantize_with(QD_NAME(gptq_group), w, out, in, bits, group_size, sym, store, qweight, qzeros, scales,
                               counts, bad);
}
#undef QD_GPTQ_F16
