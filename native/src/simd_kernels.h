/*
 * The SIMD kernels, written once over the vector primitives of simd_<isa>.h (vf: float32 lanes,
 * vi: int32 lanes, vm: lane masks; VL lanes). Each ISA file includes its primitives and then this
 * file, which defines qd_<op>__<isa> and the table qd_kernels_<isa>.
 *
 * Every vector path computes exactly what the scalar reference (ref.c) does, operation for
 * operation, and falls back to it for tails, short runs and odd layouts. When a block meets an
 * input the op rejects (NaN, or ±Infinity in per_group), the whole call is re-run by the
 * reference, which finds and reports the first offending index.
 */
#ifndef QD_ISA
#error "include simd_<isa>.h first"
#endif

#include "fp8_tables.h"
#include "ref.h"

#define QD_CAT2(a, b) a##__##b
#define QD_CAT(a, b) QD_CAT2(a, b)
#define QD_NAME(op) QD_CAT(qd_##op, QD_ISA)
#define QD_PASTE2(a, b) a##b
#define QD_PASTE(a, b) QD_PASTE2(a, b)
#define QD_BLOCK (4 * VL)



/* ---- min / max ---- */

/* The order key of float32 bits: negative values' magnitude bits flipped. The mask is an and
 * rather than a second shift so that AVX-512 folds the and + xor into one ternary-logic op. */
QD_V vi key_of(vi bits) { return vi_xor(bits, vi_and(vi_sra(bits, 31), vi_set(0x7fffffff))); }
QD_V vm nonfinite_bits(vi bits) {
  return vi_eq(vi_and(bits, vi_set(0x7f800000)), vi_set(0x7f800000));
}

/* Folds x[0, n) into the order keys *lo / *hi; 0 if a value (or a key given) is not finite. The
 * keys of ±Infinity and NaN lie outside those of every finite value, so the extremes tell, without
 * a test per vector. */
QD_TARGET static int run_minmax(const float *x, uint64_t n, int32_t *lo, int32_t *hi) {
  vi lo0 = vi_set(*lo), hi0 = vi_set(*hi), lo1 = lo0, hi1 = hi0;
  uint64_t i = 0;
  for (; i + 2 * VL <= n; i += 2 * VL) {
    vi ka = key_of(vi_load(x + i)), kb = key_of(vi_load(x + i + VL));
    lo0 = vi_min(lo0, ka);
    hi0 = vi_max(hi0, ka);
    lo1 = vi_min(lo1, kb);
    hi1 = vi_max(hi1, kb);
  }
  int32_t l = vi_hmin(vi_min(lo0, lo1)), h = vi_hmax(vi_max(hi0, hi1));
  for (; i < n; i++) {
    int32_t k = qd_key(x[i]);
    l = k < l ? k : l;
    h = k > h ? k : h;
  }
  *lo = l;
  *hi = h;
  return l > qd_key(-__builtin_inff()) && h < qd_key(__builtin_inff());
}

/* The minimum and maximum of one group x[0…n) (the sign of a zero aside); 0 if a value is not
 * finite. (AWQ's and GPTQ's tiles ask their next groups into the cache themselves.) */
QD_TARGET static int group_range(const float *x, uint64_t n, float *lo, float *hi) {
  int32_t l = qd_key(__builtin_inff()), h = qd_key(-__builtin_inff());
  if (!run_minmax(x, n, &l, &h)) return 0;
  *lo = qd_unkey(l);
  *hi = qd_unkey(h);
  return 1;
}

QD_TARGET static qd_status QD_NAME(minmax)(const float *x, uint64_t start, uint64_t count, const qd_layout *l,
                                           float *mins, float *maxs, uint64_t *bad) {
  if (l->channels == 0 || l->inner == 0) return qd_minmax_ref(x, start, count, l, mins, maxs, bad);
  if (l->inner == 1 && l->channels >= VL) {
    /* per_channel on the last axis: consecutive elements are consecutive units */
    uint64_t i = 0, c = start % l->channels;
    vm nf = vm_none();
    while (i < count) {
      if (c + VL <= l->channels && i + VL <= count) {
        vi b = vi_load(x + i);
        nf = vm_or(nf, nonfinite_bits(b));
        vi k = key_of(b);
        vf_store(mins + c, vi_bits(key_of(vi_min(key_of(vf_bits(vf_load(mins + c))), k))));
        vf_store(maxs + c, vi_bits(key_of(vi_max(key_of(vf_bits(vf_load(maxs + c))), k))));
        i += VL;
        c += VL;
      } else {
        if (!qd_is_finite(x[i])) return qd_minmax_ref(x, start, count, l, mins, maxs, bad);
        int32_t k = qd_key(x[i]);
        int32_t lo = qd_key(mins[c]), hi = qd_key(maxs[c]);
        mins[c] = qd_unkey(k < lo ? k : lo);
        maxs[c] = qd_unkey(k > hi ? k : hi);
        i++;
        c++;
      }
      if (c == l->channels) c = 0;
    }
    return vm_any(nf) ? qd_minmax_ref(x, start, count, l, mins, maxs, bad) : QD_OK;
  }
  if (l->inner < VL) return qd_minmax_ref(x, start, count, l, mins, maxs, bad);
  uint64_t i = 0;
  while (i < count) {
    uint64_t pos = start + i;
    uint64_t unit = (pos / l->inner) % l->channels;
    uint64_t n = l->inner - pos % l->inner;
    if (n > count - i) n = count - i;
    int32_t lo = qd_key(mins[unit]), hi = qd_key(maxs[unit]);
    if (!run_minmax(x + i, n, &lo, &hi)) return qd_minmax_ref(x, start, count, l, mins, maxs, bad);
    mins[unit] = qd_unkey(lo);
    maxs[unit] = qd_unkey(hi);
    i += n;
  }
  return QD_OK;
}

/* ---- quantize ----
 *
 * The block loops are specialised at compile time on (codes, add_first, reject_inf): each is an
 * always-inline function called with constants from one switch, so every specialisation is a
 * straight-line loop without per-block branches (which the WebAssembly engines do not hoist). */

typedef struct {
  vi qmin_i, qmax_i;
  vf qmin_f, qmax_f;
} bounds;

/* Integer codes of VL elements (quantize.ts, the integer path), clamped to [qmin, qmax].
 * Codes narrower than 23 bits are clamped as floats (the bounds are exact there) and converted by
 * adding 1.5·2^23, whose ulp is 1, and reading the bits: cheaper than a saturating conversion. */
QD_V vi codes_int(vf x, vf inv, vf zp, bounds b, vm *bad, const int codes, const int add_first,
                  const int reject_inf) {
  vf t = vf_mul(x, inv);
  *bad = vm_or(*bad, vf_unord(t));
  if (reject_inf) *bad = vm_or(*bad, nonfinite_bits(vf_bits(x)));
  vf u = add_first ? vf_round(vf_add(t, zp)) : vf_add(vf_round(t), zp);
  if (codes == QD_CODES_I32) return vi_min(vi_max(vf_to_vi_sat(u), b.qmin_i), b.qmax_i);
  vf c = vf_min(vf_max(u, b.qmin_f), b.qmax_f);
  return vi_sub(vf_bits(vf_add(c, vf_set(12582912.0f))), vi_set(0x4b400000));
}

/* fp8 codes of VL elements: clamp x·inv as `t < lo ? lo : t > hi ? hi : t`, then round to the
 * nearest fp8 (the normal range by integer rounding of the float32 bits, the subnormal range by
 * adding a power of two whose ulp is the subnormal step). */
QD_V vi codes_fp8(vf x, vf inv, bounds b, vm *bad, const int codes, const int reject_inf) {
  vf t = vf_mul(x, inv);
  *bad = vm_or(*bad, vf_unord(t));
  if (reject_inf) *bad = vm_or(*bad, nonfinite_bits(vf_bits(x)));
  vf c = vf_select(vf_lt(t, b.qmin_f), b.qmin_f, vf_select(vf_gt(t, b.qmax_f), b.qmax_f, t));
  vi bits = vf_bits(c);
  vi sign = vi_and(bits, vi_set((int32_t)0x80000000u));
  vi a = vi_xor(bits, sign);
  vi code;
  if (codes == QD_CODES_E5M2) {
    vm sub = vi_gt(vi_set(113 << 23), a);
    vi normal = vi_srl(vi_add(vi_add(a, vi_set((int32_t)((uint32_t)(15 - 127) << 23) + 0xfffff)),
                              vi_and(vi_srl(a, 21), vi_set(1))),
                       21);
    vi subnormal = vi_sub(vf_bits(vf_add(vi_bits(a), vf_set(128.0f))), vi_set(0x43000000));
    code = vi_select(sub, subnormal, normal);
  } else {
    vm sub = vi_gt(vi_set(121 << 23), a);
    vi normal = vi_srl(vi_add(vi_add(a, vi_set((int32_t)((uint32_t)(7 - 127) << 23) + 0x7ffff)),
                              vi_and(vi_srl(a, 20), vi_set(1))),
                       20);
    vi subnormal = vi_sub(vf_bits(vf_add(vi_bits(a), vf_set(16384.0f))), vi_set(0x46800000));
    code = vi_select(sub, subnormal, normal);
  }
  return vi_or(code, vi_srl(sign, 24));
}

QD_V vi codes_of(vf x, vf inv, vf zp, bounds b, vm *bad, const int codes, const int add_first,
                 const int reject_inf) {
  if (codes == QD_CODES_E4M3 || codes == QD_CODES_E5M2) return codes_fp8(x, inv, b, bad, codes, reject_inf);
  return codes_int(x, inv, zp, b, bad, codes, add_first, reject_inf);
}

/* Stores 4·VL codes as elements [rel, rel + 4·VL) of out; rel is a multiple of the codes per byte. */
QD_V void store_block(void *out, uint64_t rel, const int codes, vi c0, vi c1, vi c2, vi c3) {
  uint8_t *o = (uint8_t *)out;
  switch (codes) {
  case QD_CODES_I8:
    store4_i8(o + rel, c0, c1, c2, c3);
    return;
  case QD_CODES_U8:
  case QD_CODES_E4M3:
  case QD_CODES_E5M2:
    store4_u8(o + rel, c0, c1, c2, c3);
    return;
  case QD_CODES_I16:
    store4_i16(o + rel * 2, c0, c1, c2, c3);
    return;
  case QD_CODES_I32:
    store4_i32(o + rel * 4, c0, c1, c2, c3);
    return;
  case QD_CODES_I4:
  case QD_CODES_U4:
    store4_nibbles(o + rel / 2, c0, c1, c2, c3);
    return;
  default: {
    int32_t spill[QD_BLOCK];
    vi_store(spill, c0);
    vi_store(spill + VL, c1);
    vi_store(spill + 2 * VL, c2);
    vi_store(spill + 3 * VL, c3);
    for (int j = 0; j < QD_BLOCK; j++) qd_store_code(out, codes, rel + (uint64_t)j, spill[j]);
    return;
  }
  }
}

QD_TARGET static bounds bounds_of(const qd_quant *q) {
  bounds b = {vi_set(q->qmin), vi_set(q->qmax), vf_set((float)q->qmin), vf_set((float)q->qmax)};
  return b;
}

/* One unit: blocks of x[i, n) with broadcast scale and zero point; returns where it stopped. */
QD_V uint64_t blocks_run(const float *x, uint64_t i, uint64_t n, vf inv, vf zp, bounds b, void *out, uint64_t rel,
                         vm *bad, const int codes, const int add_first, const int reject_inf) {
  for (; i + QD_BLOCK <= n; i += QD_BLOCK) {
    vi c0 = codes_of(vf_load(x + i), inv, zp, b, bad, codes, add_first, reject_inf);
    vi c1 = codes_of(vf_load(x + i + VL), inv, zp, b, bad, codes, add_first, reject_inf);
    vi c2 = codes_of(vf_load(x + i + 2 * VL), inv, zp, b, bad, codes, add_first, reject_inf);
    vi c3 = codes_of(vf_load(x + i + 3 * VL), inv, zp, b, bad, codes, add_first, reject_inf);
    store_block(out, rel + i, codes, c0, c1, c2, c3);
  }
  return i;
}

/* inner == 1: block j spans units c .. c + 4·VL - 1, each lane with its own scale and zero point. */
QD_V void block_across(const float *x, const float *scale, const float *zero_point, bounds b, void *out,
                       uint64_t rel, vm *bad, const int codes, const int add_first, const int reject_inf) {
  const vf one = vf_set(1.0f);
  vi c[4];
  for (int j = 0; j < 4; j++) {
    vf inv = vf_div(one, vf_load(scale + j * VL));
    c[j] = codes_of(vf_load(x + j * VL), inv, vf_load(zero_point + j * VL), b, bad, codes, add_first, reject_inf);
  }
  store_block(out, rel, codes, c[0], c[1], c[2], c[3]);
}

/* Calls BODY(codes, add_first, reject_inf) with compile-time constants matching the runtime ones. */
#define QD_SPECIALISE(codes, add_first, reject_inf, BODY)                                                       \
  switch ((codes) * 4 + (add_first) * 2 + (reject_inf)) {                                                       \
    QD_SPECIALISE_KIND(QD_CODES_I8, BODY)                                                                       \
    QD_SPECIALISE_KIND(QD_CODES_U8, BODY)                                                                       \
    QD_SPECIALISE_KIND(QD_CODES_I16, BODY)                                                                      \
    QD_SPECIALISE_KIND(QD_CODES_I32, BODY)                                                                      \
    QD_SPECIALISE_KIND(QD_CODES_I4, BODY)                                                                       \
    QD_SPECIALISE_KIND(QD_CODES_U4, BODY)                                                                       \
    QD_SPECIALISE_KIND(QD_CODES_I2, BODY)                                                                       \
    QD_SPECIALISE_KIND(QD_CODES_U2, BODY)                                                                       \
    QD_SPECIALISE_KIND(QD_CODES_E4M3, BODY)                                                                     \
    QD_SPECIALISE_KIND(QD_CODES_E5M2, BODY)                                                                     \
  }
#define QD_SPECIALISE_KIND(K, BODY)                                                                             \
  case (K) * 4 + 0:                                                                                             \
    BODY(K, 0, 0);                                                                                              \
    break;                                                                                                      \
  case (K) * 4 + 1:                                                                                             \
    BODY(K, 0, 1);                                                                                              \
    break;                                                                                                      \
  case (K) * 4 + 2:                                                                                             \
    BODY(K, 1, 0);                                                                                              \
    break;                                                                                                      \
  case (K) * 4 + 3:                                                                                             \
    BODY(K, 1, 1);                                                                                              \
    break;

/* Quantizes x[0, n), one unit (scale, zero point), into elements [rel, rel + n) of out.
 * Returns 0 when an input the op rejects was met. */
QD_TARGET static int quantize_run(const float *x, uint64_t n, float scale, float zp, const qd_quant *q, bounds b,
                                  void *out, uint64_t rel) {
  const float inv = 1.0f / scale;
  const uint64_t per = (uint64_t)qd_codes_per_byte(q->codes);
  uint64_t i = 0;
  for (; i < n && (rel + i) % per; i++) {
    int rejected = 0;
    qd_store_code(out, q->codes, rel + i, qd_quantize_one(x[i], inv, zp, q, &rejected));
    if (rejected) return 0;
  }
  const vf vinv = vf_set(inv), vzp = vf_set(zp);
  vm bad = vm_none();
#define QD_RUN_BODY(K, A, R) i = blocks_run(x, i, n, vinv, vzp, b, out, rel, &bad, K, A, R)
  QD_SPECIALISE(q->codes, q->add_zero_point_first != 0, q->reject_infinity != 0, QD_RUN_BODY)
#undef QD_RUN_BODY
  if (vm_any(bad)) return 0;
  for (; i < n; i++) {
    int rejected = 0;
    qd_store_code(out, q->codes, rel + i, qd_quantize_one(x[i], inv, zp, q, &rejected));
    if (rejected) return 0;
  }
  return 1;
}

/* inner == 1: element i belongs to unit i % channels; vectors span consecutive units. */
QD_TARGET static int quantize_across_channels(const float *x, uint64_t start, uint64_t count, uint64_t channels,
                                              const float *scale, const float *zero_point, const qd_quant *q,
                                              bounds b, void *out) {
  const uint64_t per = (uint64_t)qd_codes_per_byte(q->codes);
  vm bad = vm_none();
  uint64_t i = 0, c = start % channels;
  while (i < count) {
    if (c + QD_BLOCK <= channels && i + QD_BLOCK <= count && i % per == 0) {
#define QD_ACROSS_BODY(K, A, R) block_across(x + i, scale + c, zero_point + c, b, out, i, &bad, K, A, R)
      QD_SPECIALISE(q->codes, q->add_zero_point_first != 0, q->reject_infinity != 0, QD_ACROSS_BODY)
#undef QD_ACROSS_BODY
      i += QD_BLOCK;
      c += QD_BLOCK;
    } else {
      int rejected = 0;
      qd_store_code(out, q->codes, i, qd_quantize_one(x[i], 1.0f / scale[c], zero_point[c], q, &rejected));
      if (rejected) return 0;
      i++;
      c++;
    }
    if (c == channels) c = 0;
  }
  return !vm_any(bad);
}

QD_TARGET static qd_status QD_NAME(quantize)(const float *x, uint64_t start, uint64_t count, const qd_layout *l,
                                             const float *scale, const float *zero_point, const qd_quant *q,
                                             void *out, uint64_t *bad) {
  if (l->channels == 0 || l->inner == 0 || !qd_codes_valid(q->codes) ||
      start % (uint64_t)qd_codes_per_byte(q->codes))
    return qd_quantize_ref(x, start, count, l, scale, zero_point, q, out, bad);
  const bounds b = bounds_of(q);
  int ok = 1;
  if (l->inner == 1 && l->channels >= QD_BLOCK) {
    ok = quantize_across_channels(x, start, count, l->channels, scale, zero_point, q, b, out);
  } else if (l->inner >= QD_BLOCK) {
    for (uint64_t i = 0; i < count && ok;) {
      uint64_t pos = start + i, unit = (pos / l->inner) % l->channels;
      uint64_t n = l->inner - pos % l->inner;
      if (n > count - i) n = count - i;
      ok = quantize_run(x + i, n, scale[unit], zero_point[unit], q, b, out, i);
      i += n;
    }
  } else {
    return qd_quantize_ref(x, start, count, l, scale, zero_point, q, out, bad);
  }
  return ok ? QD_OK : qd_quantize_ref(x, start, count, l, scale, zero_point, q, out, bad);
}

/* ---- choose + quantize, unit by unit ----
 * Units go in batches: first every unit's min/max, then every unit's qparams (independent
 * divisions that the CPU overlaps), then the codes, while the batch is still in L1. */

#define QD_BATCH 16

QD_TARGET static qd_status QD_NAME(choose_quantize)(const float *x, uint64_t first, uint64_t units,
                                                    uint64_t unit_size, const qd_choose *c, const qd_quant *q,
                                                    float *scale, double *zero_point, void *out, uint64_t *bad) {
  if (unit_size < VL || !qd_codes_valid(q->codes) ||
      (first * unit_size) % (uint64_t)qd_codes_per_byte(q->codes))
    return qd_choose_quantize_ref(x, first, units, unit_size, c, q, scale, zero_point, out, bad);
  const bounds b = bounds_of(q);
  /* run_minmax has found every value finite: the codes need not look for ±Infinity again */
  qd_quant finite = *q;
  finite.reject_infinity = 0;
  int32_t lo[QD_BATCH], hi[QD_BATCH];
  for (uint64_t u0 = 0; u0 < units; u0 += QD_BATCH) {
    const uint64_t m = units - u0 < QD_BATCH ? units - u0 : QD_BATCH;
    int ok = 1;
    for (uint64_t j = 0; j < m; j++) {
      lo[j] = qd_key(__builtin_inff());
      hi[j] = qd_key(-__builtin_inff());
      ok &= run_minmax(x + (u0 + j) * unit_size, unit_size, &lo[j], &hi[j]);
    }
    for (uint64_t j = 0; j < m && ok; j++)
      ok = qd_determine_unit(qd_unkey(lo[j]), qd_unkey(hi[j]), c, &scale[u0 + j], &zero_point[u0 + j]) == QD_OK;
    for (uint64_t j = 0; j < m && ok; j++) {
      const uint64_t u = u0 + j;
      ok = quantize_run(x + u * unit_size, unit_size, scale[u], (float)zero_point[u], &finite, b, out,
                        u * unit_size);
    }
    if (!ok) return qd_choose_quantize_ref(x, first, units, unit_size, c, q, scale, zero_point, out, bad);
  }
  return QD_OK;
}

/* ---- dequantize ---- */

/* VL codes starting at element rel (aligned for packed kinds) as float32 values. */
QD_V vf code_values(const void *codes, int32_t kind, uint64_t rel) {
  const uint8_t *p = (const uint8_t *)codes;
  switch (kind) {
  case QD_CODES_I8:
    return vi_to_vf(vi_load_i8(p + rel));
  case QD_CODES_U8:
    return vi_to_vf(vi_load_u8(p + rel));
  case QD_CODES_I16:
    return vi_to_vf(vi_load_i16(p + rel * 2));
  case QD_CODES_I32:
    return vi_to_vf(vi_load(p + rel * 4));
  case QD_CODES_I4:
    return vi_to_vf(vi_load_nibbles(p + rel / 2, 1));
  case QD_CODES_U4:
    return vi_to_vf(vi_load_nibbles(p + rel / 2, 0));
  case QD_CODES_E4M3:
    return vf_gather((const float *)qd_e4m3_bits, vi_load_u8(p + rel));
  default:
    return vf_gather((const float *)qd_e5m2_bits, vi_load_u8(p + rel));
  }
}

QD_V int vector_dequantizable(int32_t kind) {
  if (kind == QD_CODES_I2 || kind == QD_CODES_U2) return 0;
  return QD_HAS_GATHER || (kind != QD_CODES_E4M3 && kind != QD_CODES_E5M2);
}

QD_TARGET static void dequantize_run(const void *codes, int32_t kind, uint64_t rel, uint64_t n, float s, float zp,
                                     float *out) {
  const uint64_t per = (uint64_t)qd_codes_per_byte(kind);
  uint64_t i = 0;
  for (; i < n && (rel + i) % per; i++) out[i] = (qd_load_code(codes, kind, rel + i) - zp) * s;
  const vf vs = vf_set(s), vzp = vf_set(zp);
  for (; i + VL <= n; i += VL) vf_store(out + i, vf_mul(vf_sub(code_values(codes, kind, rel + i), vzp), vs));
  for (; i < n; i++) out[i] = (qd_load_code(codes, kind, rel + i) - zp) * s;
}

QD_TARGET static qd_status QD_NAME(dequantize)(const void *codes, int32_t kind, uint64_t start, uint64_t count,
                                               const qd_layout *l, const float *scale, const float *zero_point,
                                               float *out) {
  if (l->channels == 0 || l->inner == 0 || !qd_codes_valid(kind) || !vector_dequantizable(kind) ||
      start % (uint64_t)qd_codes_per_byte(kind))
    return qd_dequantize_ref(codes, kind, start, count, l, scale, zero_point, out);
  if (l->inner == 1 && l->channels >= VL) {
    const uint64_t per = (uint64_t)qd_codes_per_byte(kind);
    uint64_t i = 0, c = start % l->channels;
    while (i < count) {
      if (c + VL <= l->channels && i + VL <= count && i % per == 0) {
        vf v = vf_sub(code_values(codes, kind, i), vf_load(zero_point + c));
        vf_store(out + i, vf_mul(v, vf_load(scale + c)));
        i += VL;
        c += VL;
      } else {
        out[i] = (qd_load_code(codes, kind, i) - zero_point[c]) * scale[c];
        i++;
        c++;
      }
      if (c == l->channels) c = 0;
    }
    return QD_OK;
  }
  if (l->inner < VL) return qd_dequantize_ref(codes, kind, start, count, l, scale, zero_point, out);
  for (uint64_t i = 0; i < count;) {
    uint64_t pos = start + i, unit = (pos / l->inner) % l->channels;
    uint64_t n = l->inner - pos % l->inner;
    if (n > count - i) n = count - i;
    dequantize_run(codes, kind, i, n, scale[unit], zero_point[unit], out + i);
    i += n;
  }
  return QD_OK;
}

/* ---- fake quantize ---- */

/* The float32 evaluation equals torch's float64 one when codes, zero point and their differences
 * are exact in float32: integer zero points and bounds below 2^23 in magnitude. */
QD_V int fake_quantize_exact_in_f32(int32_t qmin, int32_t qmax, int32_t float_zp) {
  const int32_t limit = 1 << 23;
  return !float_zp && qmin > -limit && qmax < limit;
}

QD_TARGET static qd_status QD_NAME(fake_quantize)(const float *x, uint64_t start, uint64_t count,
                                                  const qd_layout *l, const float *scale, const float *zero_point,
                                                  int32_t qmin, int32_t qmax, int32_t float_zero_point, float *out,
                                                  uint8_t *mask, uint64_t *bad) {
  if (l->channels == 0 || l->inner < VL || !fake_quantize_exact_in_f32(qmin, qmax, float_zero_point))
    return qd_fake_quantize_ref(x, start, count, l, scale, zero_point, qmin, qmax, float_zero_point, out, mask,
                                bad);
  for (uint64_t u = 0; u < l->channels; u++) {
    float z = zero_point[u];
    if (!(z > -8388608.0f && z < 8388608.0f))
      return qd_fake_quantize_ref(x, start, count, l, scale, zero_point, qmin, qmax, float_zero_point, out, mask,
                                  bad);
  }
  const vf lo = vf_set((float)qmin), hi = vf_set((float)qmax);
  vm nan = vm_none();
  for (uint64_t i = 0; i < count;) {
    uint64_t pos = start + i, unit = (pos / l->inner) % l->channels;
    uint64_t n = l->inner - pos % l->inner;
    if (n > count - i) n = count - i;
    const float s = scale[unit], inv = 1.0f / s, zp = zero_point[unit];
    const vf vs = vf_set(s), vinv = vf_set(inv), vzp = vf_set(zp);
    uint64_t j = 0;
    for (; j + VL <= n; j += VL) {
      vf t = vf_mul(vf_load(x + i + j), vinv);
      nan = vm_or(nan, vf_unord(t));
      vf u = vf_add(vf_round(t), vzp);
      vm below = vf_lt(u, lo), above = vf_gt(u, hi);
      vf clamped = vf_select(below, lo, vf_select(above, hi, u));
      vf_store(out + i + j, vf_mul(vf_sub(clamped, vzp), vs));
      vm_store_bytes(mask + i + j, vm_and(vf_ge(u, lo), vf_le(u, hi)));
    }
    for (; j < n; j++) {
      float v = x[i + j];
      if (qd_is_nan(v)) /* the reference reports the first NaN of the call, maybe in an earlier block */
        return qd_fake_quantize_ref(x, start, count, l, scale, zero_point, qmin, qmax, float_zero_point, out,
                                    mask, bad);
      float t = qd_rint(v * inv) + zp;
      int inside = t >= (float)qmin && t <= (float)qmax;
      float clamped = inside ? t : (t < (float)qmin ? (float)qmin : (float)qmax);
      out[i + j] = (clamped - zp) * s;
      mask[i + j] = (uint8_t)inside;
    }
    i += n;
  }
  if (vm_any(nan))
    return qd_fake_quantize_ref(x, start, count, l, scale, zero_point, qmin, qmax, float_zero_point, out, mask,
                                bad);
  return QD_OK;
}

/* ---- quality ----
 * Errors are squared and summed in float32, each lane over up to 64 vectors, then added to float64
 * totals (flushing every few vectors made the kernel 5x slower): the statistics agree with the
 * reference to rounding, about 64 float32 ulps at worst (not bit for bit). */

/* Whether a block's float32 sums of squares (per lane, with the lane's largest |error|, and the or
 * of its values' magnitude bits, never negative) are good to float32 precision: not when a square
 * overflowed (|x| > 1.8e19; or NaN), nor when nonzero squares fell among float32 subnormals (a lane
 * sum under 2^-100). Such blocks are summed again in float64, as the reference does. Shared by the
 * quality kernel and choose_quantize_from's statistics (simd_choose.h). */
QD_V int lane_sums_hold(vf err_sq, vf val_sq, vf err_max, vi val_bits) {
  const vf tiny = vf_set(0x1p-100f);
  /* x - x is NaN where x is not finite; err_max and val_bits are never negative: > 0 is nonzero */
  const vm bad = vm_or(vm_or(vf_unord(vf_sub(err_sq, err_sq)), vf_unord(vf_sub(val_sq, val_sq))),
                       vm_or(vm_and(vf_gt(err_max, vf_set(0.0f)), vf_lt(err_sq, tiny)),
                             vm_and(vi_gt(val_bits, vi_set(0)), vf_lt(val_sq, tiny))));
  return !vm_any(bad);
}

/* A quality block's vectors: where each starts in the range, so that a block whose float32 sums
 * do not hold can be summed again element by element (element k of the range is element
 * start + k of the tensor, whose unit gives its qparams). */
typedef struct {
  int n;
  uint64_t at[64];
} QD_NAME(quality_block);

/* Adds a block's per-lane sums to the float64 totals, or, when they do not hold, its elements one
 * by one. */
QD_TARGET static void QD_NAME(quality_flush)(QD_NAME(quality_block) * b, vf err_sq, vf val_sq, vf err_max,
                                             vi val_bits, uint64_t clipped, const float *x, const void *codes,
                                             uint64_t start, const qd_layout *l, const float *scale,
                                             const float *zero_point, const qd_quant *q, qd_quality *stats) {
  if (b->n == 0) return;
  if (!lane_sums_hold(err_sq, val_sq, err_max, val_bits)) {
    for (int v = 0; v < b->n; v++) {
      for (uint64_t k = b->at[v]; k < b->at[v] + VL; k++) {
        const uint64_t unit = ((start + k) / l->inner) % l->channels;
        const float s = scale[unit];
        qd_quality_one(x[k], qd_load_code(codes, q->codes, k), s, 1.0f / s, zero_point[unit], q, stats);
      }
    }
  } else {
    float sums[3][VL];
    vf_store(sums[0], err_sq);
    vf_store(sums[1], val_sq);
    vf_store(sums[2], err_max);
    for (int k = 0; k < VL; k++) {
      stats->sum_sq_error += (double)sums[0][k];
      stats->sum_sq_value += (double)sums[1][k];
      if ((double)sums[2][k] > stats->max_abs_error) stats->max_abs_error = (double)sums[2][k];
    }
    stats->clipped += clipped;
  }
  b->n = 0;
}

/* One vector's contribution to a set of accumulators. */
#define QD_QUALITY_STEP(at_, ERR_SQ, VAL_SQ, ERR_MAX)                                                          \
  do {                                                                                                          \
    vf v = vf_load(x + (at_));                                                                                  \
    vf err = vf_sub(v, vf_mul(vf_sub(code_values(codes, kind, (at_)), vzp), vs));                               \
    ERR_SQ = vf_add(ERR_SQ, vf_mul(err, err));                                                                  \
    VAL_SQ = vf_add(VAL_SQ, vf_mul(v, v));                                                                      \
    vf abs_err = vi_bits(vi_and(vf_bits(err), abs_mask));                                                       \
    ERR_MAX = vf_select(vf_gt(abs_err, ERR_MAX), abs_err, ERR_MAX);                                             \
    val_bits = vi_or(val_bits, vi_and(vf_bits(v), abs_mask));                                                   \
    vf t = vf_mul(v, vinv);                                                                                     \
    vf u = fp8 ? t : (q->add_zero_point_first ? vf_round(vf_add(t, vzp)) : vf_add(vf_round(t), vzp));          \
    clipped += (uint64_t)vm_count(vm_or(vf_lt(u, lo), vf_gt(u, hi)));                                           \
    b.at[b.n++] = (at_);                                                                                        \
  } while (0)

QD_TARGET static qd_status QD_NAME(quality)(const float *x, const void *codes, uint64_t start, uint64_t count,
                                            const qd_layout *l, const float *scale, const float *zero_point,
                                            const qd_quant *q, qd_quality *stats) {
  const int32_t kind = q->codes;
  if (l->channels == 0 || l->inner < VL || !qd_codes_valid(kind) || !vector_dequantizable(kind) ||
      kind == QD_CODES_I32 || start % (uint64_t)qd_codes_per_byte(kind))
    return qd_quality_ref(x, codes, start, count, l, scale, zero_point, q, stats);
  const uint64_t per = (uint64_t)qd_codes_per_byte(kind);
  const int fp8 = kind == QD_CODES_E4M3 || kind == QD_CODES_E5M2;
  const vf lo = vf_set((float)q->qmin), hi = vf_set((float)q->qmax), zero = vf_set(0.0f);
  const vi abs_mask = vi_set(0x7fffffff);
  /* Two accumulator sets, so that consecutive vectors do not wait on each other; a block spans
   * units (per_group rows are short) and goes to float64 every 64 vectors or so. */
  vf err_sq0 = zero, err_sq1 = zero, val_sq0 = zero, val_sq1 = zero, err_max0 = zero, err_max1 = zero;
  vi val_bits = vi_set(0);
  uint64_t clipped = 0;
  QD_NAME(quality_block) b;
  b.n = 0;
#define QD_QUALITY_FLUSH()                                                                                      \
  do {                                                                                                          \
    QD_NAME(quality_flush)(&b, vf_add(err_sq0, err_sq1), vf_add(val_sq0, val_sq1),                              \
                           vf_select(vf_gt(err_max1, err_max0), err_max1, err_max0), val_bits, clipped, x, codes, \
                           start, l, scale, zero_point, q, stats);                                              \
    err_sq0 = err_sq1 = val_sq0 = val_sq1 = err_max0 = err_max1 = zero;                                          \
    val_bits = vi_set(0);                                                                                       \
    clipped = 0;                                                                                                \
  } while (0)
  for (uint64_t i = 0; i < count;) {
    uint64_t pos = start + i, unit = (pos / l->inner) % l->channels;
    uint64_t n = l->inner - pos % l->inner;
    if (n > count - i) n = count - i;
    const float s = scale[unit], inv = 1.0f / s, zp = zero_point[unit];
    uint64_t j = 0;
    for (; j < n && (i + j) % per; j++)
      qd_quality_one(x[i + j], qd_load_code(codes, kind, i + j), s, inv, zp, q, stats);
    const vf vs = vf_set(s), vinv = vf_set(inv), vzp = vf_set(zp);
    for (; j + 2 * VL <= n; j += 2 * VL) {
      QD_QUALITY_STEP(i + j, err_sq0, val_sq0, err_max0);
      QD_QUALITY_STEP(i + j + VL, err_sq1, val_sq1, err_max1);
      if (b.n >= 62) QD_QUALITY_FLUSH();
    }
    if (j + VL <= n) {
      QD_QUALITY_STEP(i + j, err_sq0, val_sq0, err_max0);
      if (b.n >= 62) QD_QUALITY_FLUSH();
      j += VL;
    }
    for (; j < n; j++) qd_quality_one(x[i + j], qd_load_code(codes, kind, i + j), s, inv, zp, q, stats);
    i += n;
  }
  QD_QUALITY_FLUSH();
#undef QD_QUALITY_FLUSH
  stats->count += count;
  return QD_OK;
}
#undef QD_QUALITY_STEP

/* ---- conversions ---- */

QD_TARGET static void QD_NAME(bf16_to_f32)(const void *in, uint64_t n, void *out) {
  const uint16_t *h = (const uint16_t *)in;
  float *f = (float *)out;
  uint64_t i = 0;
  for (; i + VL <= n; i += VL) vi_store(f + i, vi_sll(vi_load_u16(h + i), 16));
  for (; i < n; i++) f[i] = qd_bf16_to_f32(h[i]);
}

/* bfloat16 bits of each lane (in the low 16 bits): round to nearest even, NaN kept quiet. */
QD_V vi QD_NAME(bf16_bits)(vf v) {
  vi b = vf_bits(v);
  vi rounded = vi_srl(vi_add(vi_add(b, vi_set(0x7fff)), vi_and(vi_srl(b, 16), vi_set(1))), 16);
  vi quiet = vi_or(vi_srl(b, 16), vi_set(0x40));
  return vi_select(vf_unord(v), quiet, rounded);
}

QD_TARGET static void QD_NAME(f32_to_bf16)(const void *in, uint64_t n, void *out) {
  const float *f = (const float *)in;
  uint16_t *h = (uint16_t *)out;
  uint64_t i = 0;
  for (; i + VL <= n; i += VL) vi_store_u16(h + i, QD_NAME(bf16_bits)(vf_load(f + i)));
  for (; i < n; i++) h[i] = qd_f32_to_bf16(f[i]);
}

#if QD_HAS_F16C
QD_TARGET static void QD_NAME(f16_to_f32)(const void *in, uint64_t n, void *out) {
  const uint16_t *h = (const uint16_t *)in;
  float *f = (float *)out;
  uint64_t i = 0;
  for (; i + VL <= n; i += VL) vf_store(f + i, vf_load_f16(h + i));
  for (; i < n; i++) f[i] = qd_f16_to_f32(h[i]);
}

QD_TARGET static void QD_NAME(f32_to_f16)(const void *in, uint64_t n, void *out) {
  const float *f = (const float *)in;
  uint16_t *h = (uint16_t *)out;
  uint64_t i = 0;
  for (; i + VL <= n; i += VL) vf_store_f16(h + i, vf_load(f + i));
  for (; i < n; i++) h[i] = qd_f32_to_f16(f[i]);
}
#define QD_F16_TO_F32 QD_NAME(f16_to_f32)
#define QD_F32_TO_F16 QD_NAME(f32_to_f16)
#else
#define QD_F16_TO_F32 qd_f16_to_f32_ref
#define QD_F32_TO_F16 qd_f32_to_f16_ref
#endif

#include "simd_choose.h"
#include "simd_ggml.h"
#include "simd_bnb.h"
#include "simd_nbits.h"
#include "simd_awq.h"
#include "simd_gptq.h"

const qd_kernels QD_PASTE(qd_kernels_, QD_ISA) = {
    QD_ISA_NAME,
    QD_NAME(minmax),
    QD_NAME(quantize),
    QD_NAME(dequantize),
    QD_NAME(fake_quantize),
    QD_NAME(choose_quantize),
    QD_F16_TO_F32,
    QD_NAME(bf16_to_f32),
    QD_F32_TO_F16,
    QD_NAME(f32_to_bf16),
    QD_NAME(quality),
    QD_NAME(choose_quantize_from),
    QD_NAME(ggml_quantize),
    QD_NAME(ggml_quantize_weighted),
    QD_NAME(bnb_quantize),
    QD_NAME(nbits_quantize),
    QD_NAME(awq_quantize),
    QD_NAME(gptq_quantize),
};
