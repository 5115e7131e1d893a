/*
 * choose_quantize_from: choose, quantize and (when asked) measure units in one loop, reading
 * float32, float16 or bfloat16 (included by simd_kernels.h, whose primitives it uses).
 *
 * Units go in batches as in choose_quantize: every unit's range (read from memory), every unit's
 * qparams, then the codes, read again from L1. The ranges' lanes of VL units are reduced together
 * and their qparams computed in vector lanes (unit_params; units of 128 spent a fifth of their
 * time on two reductions, a call and two divisions each). The quality statistics come from the codes' own
 * float lanes in the same loop, instead of a second pass that unpacks the codes and rounds every
 * value again. Half-precision values are widened in registers as they are read: no float32 copy.
 *
 * Codes, scales and zero points are choose_quantize's bit for bit: the same operations per lane
 * (codes_int, determine_unit). The statistics are summed as the quality kernel sums them (float32
 * lanes of two sets, to float64 every 128 vectors and at the end of each measured chunk, a block
 * whose float32 sums do not hold summed again element by element), in another order, so they agree
 * with it to rounding. Units this loop does not take (not whole blocks of 4·VL, int32 or fp8 codes) and an
 * input it rejects go through the chunked composition of the plain kernels (measured.c), which
 * reports the first bad index as the reference does.
 */

/* float16 bits (the low half of each lane) as float32, as qd_f16_to_f32 widens them, without a
 * conversion instruction: the magnitude's bits moved to float32's places read as the value times
 * 2^-112 (subnormals too), so one exact multiplication rescales it; ±Infinity keeps its sign, NaN
 * becomes the canonical quiet NaN. */
QD_V vf f16_widened(vi h) {
  const vi top = vi_set(0x1f << 23);
  vi mag = vi_sll(vi_and(h, vi_set(0x7fff)), 13);
  vi sign = vi_sll(vi_and(h, vi_set(0x8000)), 16);
  vi finite = vi_or(vf_bits(vf_mul(vi_bits(mag), vf_set(0x1p112f))), sign);
  vi special = vi_select(vi_eq(mag, top), vi_or(sign, vi_set(0x7f800000)), vi_set(0x7fc00000));
  return vi_bits(vi_select(vi_eq(vi_and(mag, top), top), special, finite));
}

/* VL values from element i, as float32 lanes. */
QD_V vf input_values(const void *x, uint64_t i, const int input) {
  if (input == QD_INPUT_BF16) return vi_bits(vi_sll(vi_load_u16((const uint16_t *)x + i), 16));
#if QD_HAS_F16C
  if (input == QD_INPUT_F16) return vf_load_f16((const uint16_t *)x + i);
#else
  if (input == QD_INPUT_F16) return f16_widened(vi_load_u16((const uint16_t *)x + i));
#endif
  return vf_load((const float *)x + i);
}

/* One value, as input_values widens it (the slow path of a block whose sums do not hold). */
QD_V float input_value(const void *x, uint64_t i, const int input) {
  if (input == QD_INPUT_BF16) return qd_bf16_to_f32(((const uint16_t *)x)[i]);
  if (input == QD_INPUT_F16) return qd_f16_to_f32(((const uint16_t *)x)[i]);
  return ((const float *)x)[i];
}

/* The order keys of the extremes of elements [from, from + n) (n a multiple of VL), lane by lane:
 * the caller reduces VL units' lanes at once (vi_hmin_each). */
QD_V void unit_range(const void *x, uint64_t from, uint64_t n, const int input, vi *lo, vi *hi) {
  vi lo0 = vi_set(qd_key(__builtin_inff())), hi0 = vi_set(qd_key(-__builtin_inff())), lo1 = lo0, hi1 = hi0;
  uint64_t i = 0;
  for (; i + 2 * VL <= n; i += 2 * VL) {
    vi ka, kb;
    if (input == QD_INPUT_BF16) {
      /* 2·VL bfloat16 in one load; a range needs no order: the even elements are the low halves
       * of the int32 lanes, the odd ones the high halves, already float32 bits once masked */
      vi pairs = vi_load((const uint16_t *)x + from + i);
      ka = key_of(vi_sll(pairs, 16));
      kb = key_of(vi_and(pairs, vi_set((int32_t)0xffff0000u)));
    } else {
      ka = key_of(vf_bits(input_values(x, from + i, input)));
      kb = key_of(vf_bits(input_values(x, from + i + VL, input)));
    }
    lo0 = vi_min(lo0, ka);
    hi0 = vi_max(hi0, ka);
    lo1 = vi_min(lo1, kb);
    hi1 = vi_max(hi1, kb);
  }
  if (i < n) {
    vi k = key_of(vf_bits(input_values(x, from + i, input)));
    lo0 = vi_min(lo0, k);
    hi0 = vi_max(hi0, k);
  }
  *lo = vi_min(lo0, lo1);
  *hi = vi_max(hi0, hi1);
}

/* -v as C negates: the sign flipped (0 - v would turn -0 into +0). */
QD_V vf vf_negated(vf v) { return vi_bits(vi_xor(vf_bits(v), vi_set(INT32_MIN))); }

/* The qparams of VL units from the keys of their (finite) extremes, and the reciprocals and
 * float32 zero points the codes use: qd_determine_unit's operations lane by lane, in its order
 * and precision. Where it rounds a zero point in float64 (affine) the value is an integer under
 * 2^24 or one that the clamp replaces, with bounds exact in float32: float32 gives the same.
 * Returns 0, storing nothing, for a mode left to qd_determine_unit (per-token affine, affine with
 * bounds beyond 2^22), or where a unit would be refused or its reciprocal not finite: the caller
 * then takes these units one by one, to stop where the scalar path stops. */
QD_V int unit_params(vi klo, vi khi, const qd_choose *c, float *scale, double *zero_point, float *inv, float *zpf) {
  const vf lo = vi_bits(key_of(klo)), hi = vi_bits(key_of(khi)), zero = vf_set(0.0f), eps = vf_set(c->eps);
  const double qmin = c->qmin, qmax = c->qmax;
  const vf min_neg = vf_select(vf_le(lo, zero), lo, zero), max_pos = vf_select(vf_gt(hi, zero), hi, zero);
  vf s, zp = zero;
  int zp_fixed = 1; /* the zero point is the same in every lane: fixed */
  double fixed = 0;
  if (c->mode == QD_SYMMETRIC) {
    const vf a = vf_negated(min_neg);
    s = vf_div(vf_select(vf_gt(a, max_pos), a, max_pos), vf_set((float)((qmax - qmin) / 2)));
    s = vf_select(vf_lt(s, eps), eps, s);
    fixed = c->symmetric_zero_point;
  } else if (c->mode == QD_AFFINE && c->qmin >= -(1 << 22) && c->qmin <= 1 << 22 && c->qmax >= -(1 << 22) &&
             c->qmax <= 1 << 22) {
    const vf fmin = vf_set((float)qmin), fmax = vf_set((float)qmax);
    s = vf_div(vf_sub(max_pos, min_neg), vf_set((float)(qmax - qmin)));
    s = vf_select(vf_lt(s, eps), eps, s);
    zp = vf_sub(fmin, vf_round(vf_div(min_neg, s)));
    zp = vf_select(vf_lt(zp, fmin), fmin, vf_select(vf_gt(zp, fmax), fmax, zp));
    zp_fixed = 0;
  } else if (c->mode == QD_FLOAT_QPARAMS) {
    s = vf_div(vf_sub(hi, lo), vf_set((float)(qmax - qmin)));
    s = vf_select(vf_gt(s, eps), s, vf_set(1.0f));
    zp = vf_div(vf_negated(lo), s);
    zp_fixed = 0;
  } else if (c->mode == QD_TOKEN_SYMMETRIC) {
    const vf a = vi_bits(vi_and(vf_bits(lo), vi_set(0x7fffffff))), b = vi_bits(vi_and(vf_bits(hi), vi_set(0x7fffffff)));
    const vf amax = vf_select(vf_gt(a, b), a, b), floor_ = vf_set(1e-5f);
    s = vf_div(vf_select(vf_gt(amax, floor_), amax, floor_), vf_set((float)c->qmax));
  } else {
    return 0;
  }
  const vf r = vf_div(vf_set(1.0f), s);
  /* x - x is NaN where x is not finite */
  if (vm_any(vm_or(vm_or(vf_unord(vf_sub(s, s)), vf_unord(vf_sub(r, r))), vf_unord(vf_sub(zp, zp))))) return 0;
  float z[VL];
  vf_store(scale, s);
  vf_store(inv, r);
  vf_store(z, zp);
  for (int k = 0; k < VL; k++) {
    zero_point[k] = zp_fixed ? fixed : (double)z[k];
    zpf[k] = (float)zero_point[k];
  }
  return 1;
}

/* Per-lane float32 statistics of the vectors since the last flush. */
typedef struct {
  vf err_sq, val_sq, err_max;
  vi val_bits;
  vi clipped; /* per lane: lanes whose unclamped code fell outside the range */
} lane_sums;

QD_V lane_sums lane_sums_zero(void) {
  lane_sums z = {vf_set(0.0f), vf_set(0.0f), vf_set(0.0f), vi_set(0), vi_set(0)};
  return z;
}

/* Clamped codes of VL finite values, as floats; their errors added to `acc` when measuring (the
 * quality kernel's terms: the value less its code's value, its square, its magnitude, the value's
 * square). With a zero point of +0 (no_zp) its two operations are left out: c - (+0) is c to the
 * bit, and leaving -0 codes as they are changes no code and, in the errors, only the sign of a
 * zero (a zero value's), which none of the terms keeps. */
QD_V vf unit_codes(vf v, vf inv, vf s, vf zp, bounds b, lane_sums *acc, const int add_first, const int measure,
                   const int no_zp) {
  vf t = vf_mul(v, inv); /* never NaN: v and inv are finite */
  vf u = no_zp ? vf_round(t) : add_first ? vf_round(vf_add(t, zp)) : vf_add(vf_round(t), zp);
  vf c = vf_min(vf_max(u, b.qmin_f), b.qmax_f);
  if (measure) {
    vf err = vf_sub(v, vf_mul(no_zp ? c : vf_sub(c, zp), s));
    acc->err_sq = vf_add(acc->err_sq, vf_mul(err, err));
    acc->val_sq = vf_add(acc->val_sq, vf_mul(v, v));
    acc->err_max = vf_absmax(err, acc->err_max); /* neither is NaN: max is quality's select */
    /* the values' bits as they are: the flush drops the signs (an or of magnitudes is the
     * magnitude of the or) */
    acc->val_bits = vi_or(acc->val_bits, vf_bits(v));
    /* u (never NaN) lies outside [qmin, qmax] exactly when clamping changed it */
    acc->clipped = vi_count_merged(acc->clipped, vf_ne(c, u));
  }
  return c;
}

/* Integer codes of clamped float codes (codes_int's conversion: c + 1.5·2^23 rounds c to the
 * nearest, c not being integral where a float zero point was added after rounding). Where the
 * stores keep only a lane's low 8 or 16 bits, that sum's bits are enough; else, for bounds within
 * ±2^22 (not `wide`), the conversion to the nearest integer, the same there and on x86 one
 * instruction for the addition and the bias's subtraction. */
QD_V vi code_bits(vf c, const int kind, const int wide) {
  const vi biased = vf_bits(vf_add(c, vf_set(12582912.0f)));
  if (QD_STORES_TRUNCATE && (kind == QD_CODES_I8 || kind == QD_CODES_U8 || kind == QD_CODES_I16 ||
                             kind == QD_CODES_I4 || kind == QD_CODES_U4))
    return biased;
  return wide ? vi_sub(biased, vi_set(0x4b400000)) : vf_small_to_vi(c);
}

/* A chunk's elements [from, to) one by one into the totals: the flush's rare slow path, out of the
 * loop. */
QD_TARGET __attribute__((noinline)) static void QD_NAME(units_one_by_one)(const void *x, const int32_t input,
                                                                          const void *codes, uint64_t from,
                                                                          uint64_t to, uint64_t unit_size,
                                                                          const float *scale,
                                                                          const double *zero_point,
                                                                          const qd_quant *q, qd_quality *stats) {
  for (uint64_t k = from; k < to; k++) {
    const uint64_t unit = k / unit_size;
    const float s = scale[unit];
    qd_quality_one(input_value(x, k, input), qd_load_code(codes, q->codes, k), s, 1.0f / s,
                   (float)zero_point[unit], q, stats);
  }
}

/* The sums of a chunk's elements [from, to) go to the float64 totals, or, when their float32 sums
 * do not hold, those elements one by one (quality_flush's rule, lane_sums_hold). */
QD_V void units_flush(lane_sums a, lane_sums b, const void *x, const int32_t input, const void *codes, uint64_t from,
                      uint64_t to, uint64_t unit_size, const float *scale, const double *zero_point,
                      const qd_quant *q, qd_quality *stats) {
  if (from == to) return;
  const vf err_sq = vf_add(a.err_sq, b.err_sq), val_sq = vf_add(a.val_sq, b.val_sq);
  const vf err_max = vf_select(vf_gt(b.err_max, a.err_max), b.err_max, a.err_max);
  const vi bits = vi_and(vi_or(a.val_bits, b.val_bits), vi_set(0x7fffffff));
  if (!lane_sums_hold(err_sq, val_sq, err_max, bits)) {
    QD_NAME(units_one_by_one)(x, input, codes, from, to, unit_size, scale, zero_point, q, stats);
    return;
  }
  float sums[3][VL];
  int32_t clipped[VL];
  vf_store(sums[0], err_sq);
  vf_store(sums[1], val_sq);
  vf_store(sums[2], err_max);
  vi_store(clipped, vi_add(a.clipped, b.clipped));
  for (int k = 0; k < VL; k++) {
    stats->sum_sq_error += (double)sums[0][k];
    stats->sum_sq_value += (double)sums[1][k];
    if ((double)sums[2][k] > stats->max_abs_error) stats->max_abs_error = (double)sums[2][k];
    stats->clipped += (uint64_t)clipped[k];
  }
}

/* Vectors summed in float32 before a flush: each lane of the two sets sums 64. */
#define QD_FLUSH_VECTORS 128

/* The codes of one unit from element `at`, its statistics into acc0 / acc1 (flushed to the totals
 * every QD_FLUSH_VECTORS vectors since element *flushed). */
QD_V void code_unit(const void *x, uint64_t at, uint64_t unit_size, vf vinv, vf s, vf zp, bounds b, lane_sums *acc0,
                    lane_sums *acc1, uint64_t *flushed, const int prefetch, void *out, const float *scale,
                    const double *zero_point, const qd_quant *q, qd_quality *stats, const int input,
                    const int add_first, const int measure, const int kind, const int no_zp,
                    const int wide) {
  const uint64_t width = input == QD_INPUT_F32 ? 4 : 2;
  for (uint64_t i = at; i < at + unit_size; i += QD_BLOCK) {
    /* the hardware's prefetchers stop at a page's end */
    if (prefetch) {
      const char *ahead = (const char *)x + (i + QD_BATCH * unit_size) * width;
      for (uint64_t line = 0; line < QD_BLOCK * width; line += 64) __builtin_prefetch(ahead + line);
    }
    vf c0 = unit_codes(input_values(x, i, input), vinv, s, zp, b, acc0, add_first, measure, no_zp);
    vf c1 = unit_codes(input_values(x, i + VL, input), vinv, s, zp, b, acc1, add_first, measure, no_zp);
    vf c2 = unit_codes(input_values(x, i + 2 * VL, input), vinv, s, zp, b, acc0, add_first, measure, no_zp);
    vf c3 = unit_codes(input_values(x, i + 3 * VL, input), vinv, s, zp, b, acc1, add_first, measure, no_zp);
    store_block(out, i, kind, code_bits(c0, kind, wide), code_bits(c1, kind, wide), code_bits(c2, kind, wide),
                code_bits(c3, kind, wide));
    if (measure && i + QD_BLOCK - *flushed >= QD_FLUSH_VECTORS * VL) {
      units_flush(*acc0, *acc1, x, input, out, *flushed, i + QD_BLOCK, unit_size, scale, zero_point, q, stats);
      *acc0 = *acc1 = lane_sums_zero();
      *flushed = i + QD_BLOCK;
    }
  }
}

/* One measured chunk of units (at most 256), units of whole blocks, of an input that goes on to
 * element `readable` (the next batch may lie beyond the chunk). Returns 0 when an input the op
 * rejects was met (the caller then runs the plain kernels, which find it). */
QD_V int choose_units(const void *x, uint64_t readable, uint64_t units, uint64_t unit_size, const qd_choose *c,
                      const qd_quant *q, float *scale, double *zero_point, void *out, qd_quality *stats,
                      const int input, const int add_first, const int measure, const int kind) {
  const bounds b = bounds_of(q);
  /* code bounds beyond ±2^22 (none of these kinds has them): code_bits as codes_int */
  const int wide = q->qmin < -(1 << 22) || q->qmax > (1 << 22);
  lane_sums acc0 = lane_sums_zero(), acc1 = acc0;
  uint64_t flushed = 0;
  vi klo[QD_BATCH], khi[QD_BATCH];
  int32_t lo[QD_BATCH], hi[QD_BATCH];
  float inv[QD_BATCH], zpf[QD_BATCH];
  const vi key_ninf = vi_set(qd_key(-__builtin_inff())), key_inf = vi_set(qd_key(__builtin_inff()));
  for (uint64_t u0 = 0; u0 < units; u0 += QD_BATCH) {
    const uint64_t m = units - u0 < QD_BATCH ? units - u0 : QD_BATCH;
    /* the next batch into the cache while this one is coded, long units too (their range pass
     * alone waited on memory: int8 rows of 4096, 16 → 19 GB/s without statistics, 12 → 20 with),
     * across the chunk's end as long as the input goes on */
    const int prefetch = (u0 + 2 * QD_BATCH) * unit_size <= readable;
    for (uint64_t j = 0; j < m; j++) unit_range(x, (u0 + j) * unit_size, unit_size, input, &klo[j], &khi[j]);
    /* every extreme finite (run_minmax's test) before any qparams, as the scalar path */
    int ok = 1;
    uint64_t j = 0;
    for (; j + VL <= m; j += VL) {
      const vi l = vi_hmin_each(klo + j), h = vi_hmax_each(khi + j);
      vi_store(lo + j, l);
      vi_store(hi + j, h);
      ok &= vm_all(vm_and(vi_gt(l, key_ninf), vi_gt(key_inf, h)));
    }
    for (; j < m; j++) {
      lo[j] = vi_hmin(klo[j]);
      hi[j] = vi_hmax(khi[j]);
      ok &= lo[j] > qd_key(-__builtin_inff()) && hi[j] < qd_key(__builtin_inff());
    }
    if (!ok) return 0;
    for (j = 0; j < m;) {
      if (j + VL <= m &&
          unit_params(vi_load(lo + j), vi_load(hi + j), c, scale + u0 + j, zero_point + u0 + j, inv + j, zpf + j)) {
        j += VL;
        continue;
      }
      for (const uint64_t end = j + VL <= m ? j + VL : m; j < end; j++) {
        if (qd_determine_unit(qd_unkey(lo[j]), qd_unkey(hi[j]), c, &scale[u0 + j], &zero_point[u0 + j]) != QD_OK)
          return 0;
        inv[j] = 1.0f / scale[u0 + j];
        zpf[j] = (float)zero_point[u0 + j];
      }
    }
    for (j = 0; j < m; j++) {
      const uint64_t u = u0 + j, at = u * unit_size;
      const float sc = scale[u], r = inv[j];
      if (!qd_is_finite(r)) return 0; /* a scale under 2^-128 (the codes would see NaN at 0) */
      const vf vinv = vf_set(r), s = vf_set(sc), zp = vf_set(zpf[j]);
      /* symmetric qparams' usual zero point +0: a loop without it (2 of about 24 operations a
       * vector when measuring) */
      if (wide)
        code_unit(x, at, unit_size, vinv, s, zp, b, &acc0, &acc1, &flushed, prefetch, out, scale, zero_point, q, stats,
                  input, add_first, measure, kind, 0, 1);
      else if (qd_bits(zpf[j]) == 0)
        code_unit(x, at, unit_size, vinv, s, zp, b, &acc0, &acc1, &flushed, prefetch, out, scale, zero_point, q, stats,
                  input, add_first, measure, kind, 1, 0);
      else
        code_unit(x, at, unit_size, vinv, s, zp, b, &acc0, &acc1, &flushed, prefetch, out, scale, zero_point, q, stats,
                  input, add_first, measure, kind, 0, 0);
    }
  }
  if (measure) {
    units_flush(acc0, acc1, x, input, out, flushed, units * unit_size, unit_size, scale, zero_point, q, stats);
    stats->count += units * unit_size;
  }
  return 1;
}

/* Calls BODY(input, add_first, measure) with compile-time constants matching the runtime ones. */
#define QD_CHOOSE_SPECIALISE(input, add_first, measure, BODY)                                                  \
  switch ((input) * 4 + (add_first) * 2 + (measure)) {                                                          \
    QD_CHOOSE_SPECIALISE_INPUT(QD_INPUT_F32, BODY)                                                              \
    QD_CHOOSE_SPECIALISE_INPUT(QD_INPUT_F16, BODY)                                                              \
    QD_CHOOSE_SPECIALISE_INPUT(QD_INPUT_BF16, BODY)                                                             \
  }
#define QD_CHOOSE_SPECIALISE_INPUT(I, BODY)                                                                     \
  case (I) * 4 + 0:                                                                                             \
    BODY(I, 0, 0);                                                                                              \
    break;                                                                                                      \
  case (I) * 4 + 1:                                                                                             \
    BODY(I, 0, 1);                                                                                              \
    break;                                                                                                      \
  case (I) * 4 + 2:                                                                                             \
    BODY(I, 1, 0);                                                                                              \
    break;                                                                                                      \
  case (I) * 4 + 3:                                                                                             \
    BODY(I, 1, 1);                                                                                              \
    break;

extern const qd_kernels QD_PASTE(qd_kernels_, QD_ISA);

QD_TARGET static qd_status QD_NAME(choose_quantize_from)(const void *x, int32_t input, uint64_t first,
                                                         uint64_t units, uint64_t unit_size, const qd_choose *c,
                                                         const qd_quant *q, float *scale, double *zero_point,
                                                         void *out, uint64_t *bad, qd_quality *stats,
                                                         float *scratch) {
  const int32_t kind = q->codes;
  const int takes = unit_size > 0 && unit_size % QD_BLOCK == 0 && qd_codes_valid(kind) && kind != QD_CODES_I32 &&
                    kind != QD_CODES_E4M3 && kind != QD_CODES_E5M2 && input >= QD_INPUT_F32 &&
                    input <= QD_INPUT_BF16;
  /* float32 without statistics: on x86 this loop where it takes the units (it tests the reciprocal
   * of a scale once per unit, not every vector for NaN, and asks the next batch into the cache),
   * else the plain kernel, which takes every unit length (WebAssembly: always; this loop was not
   * faster there) */
  if (input == QD_INPUT_F32 && !stats && (!takes || !QD_FUSE_PLAIN))
    return QD_NAME(choose_quantize)((const float *)x, first, units, unit_size, c, q, scale, zero_point, out, bad);
  if (takes) {
    const qd_quality before = stats ? *stats : (qd_quality){0};
    const uint64_t per_chunk = qd_measured_chunk_units(unit_size), width = input == QD_INPUT_F32 ? 4 : 2;
    int ok = 1;
    for (uint64_t u = 0; u < units && ok; u += per_chunk) {
      const uint64_t m = units - u < per_chunk ? units - u : per_chunk, at = u * unit_size;
      const void *ux = (const uint8_t *)x + at * width;
      void *o = (uint8_t *)out + qd_code_bytes(kind, at);
#define QD_CHOOSE_BODY(I, A, M)                                                                                 \
  ok = choose_units(ux, (units - u) * unit_size, m, unit_size, c, q, scale + u, zero_point + u, o, stats, I, A, M, \
                    kind)
      QD_CHOOSE_SPECIALISE(input, q->add_zero_point_first != 0, stats != NULL, QD_CHOOSE_BODY)
#undef QD_CHOOSE_BODY
    }
    if (ok) return QD_OK;
    if (stats) *stats = before;
  }
  return qd_choose_quantize_chunked(&QD_PASTE(qd_kernels_, QD_ISA), x, input, first, units, unit_size, c, q, scale,
                                    zero_point, out, bad, stats, scratch);
}
