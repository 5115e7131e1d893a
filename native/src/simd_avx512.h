/*
 * The vector primitives of simd_kernels.h for x86 AVX-512 (F, BW, VL, DQ; 16 float32 lanes,
 * mask registers). Target attributes as in simd_avx2.h. AVX-512F has fused multiply-add
 * instructions; -ffp-contract=off keeps the compiler from using them.
 */
#ifndef QUANTD_SIMD_AVX512_H
#define QUANTD_SIMD_AVX512_H

#include <immintrin.h>

#include "common.h"

#define QD_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,f16c")))
#define QD_V static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl,avx512dq,avx2,f16c")))
#define QD_ISA avx512
#define QD_ISA_NAME "avx512"
#define VL 16
#define QD_HAS_GATHER 1
#define QD_HAS_F16C 1
/* store4_i8 / _u8 / _i16 / _nibbles keep the low bits of each lane (vpmov truncates) */
#define QD_STORES_TRUNCATE 1
/* choose_quantize_from runs float32 without statistics through simd_choose.h's loop */
#define QD_FUSE_PLAIN 1

typedef __m512 vf;
typedef __m512i vi;
typedef __mmask16 vm;

QD_V vf vf_load(const float *p) { return _mm512_loadu_ps(p); }
QD_V void vf_store(float *p, vf v) { _mm512_storeu_ps(p, v); }
QD_V vf vf_set(float x) { return _mm512_set1_ps(x); }
QD_V vf vf_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
QD_V vf vf_add(vf a, vf b) { return _mm512_add_ps(a, b); }
QD_V vf vf_sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
QD_V vf vf_div(vf a, vf b) { return _mm512_div_ps(a, b); }
QD_V vf vf_round(vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
QD_V vf vf_trunc(vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
QD_V vf vf_min(vf a, vf b) { return _mm512_min_ps(a, b); }
QD_V vf vf_max(vf a, vf b) { return _mm512_max_ps(a, b); }

QD_V vi vi_load(const void *p) { return _mm512_loadu_si512(p); }
QD_V void vi_store(void *p, vi v) { _mm512_storeu_si512(p, v); }
QD_V vi vi_set(int32_t x) { return _mm512_set1_epi32(x); }
QD_V vi vi_and(vi a, vi b) { return _mm512_and_si512(a, b); }
QD_V vi vi_or(vi a, vi b) { return _mm512_or_si512(a, b); }
QD_V vi vi_xor(vi a, vi b) { return _mm512_xor_si512(a, b); }
QD_V vi vi_add(vi a, vi b) { return _mm512_add_epi32(a, b); }
QD_V vi vi_sub(vi a, vi b) { return _mm512_sub_epi32(a, b); }
QD_V vi vi_min(vi a, vi b) { return _mm512_min_epi32(a, b); }
QD_V vi vi_max(vi a, vi b) { return _mm512_max_epi32(a, b); }
#define vi_sra(v, n) _mm512_srai_epi32((v), (n))
#define vi_srl(v, n) _mm512_srli_epi32((v), (n))
#define vi_sll(v, n) _mm512_slli_epi32((v), (n))
QD_V vi vf_bits(vf v) { return _mm512_castps_si512(v); }
QD_V vf vi_bits(vi v) { return _mm512_castsi512_ps(v); }
QD_V vf vi_to_vf(vi v) { return _mm512_cvtepi32_ps(v); }

/* Truncating conversion; NaN and out-of-range lanes give INT32_MIN. */
QD_V vi vf_to_vi_trunc(vf v) { return _mm512_cvttps_epi32(v); }
/* Nearest (half to even) integers of lanes within ±2^22 (any within int32 here). */
QD_V vi vf_small_to_vi(vf v) { return _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/* Integral lanes to int32, saturating (see simd_avx2.h). */
QD_V vi vf_to_vi_sat(vf u) {
  vi c = _mm512_cvtps_epi32(u);
  __mmask16 high = _mm512_cmp_ps_mask(u, _mm512_set1_ps(2147483648.0f), _CMP_GE_OQ);
  return _mm512_mask_mov_epi32(c, high, _mm512_set1_epi32(INT32_MAX));
}

QD_V vm vm_none(void) { return 0; }
QD_V vm vm_or(vm a, vm b) { return (vm)(a | b); }
QD_V vm vm_and(vm a, vm b) { return (vm)(a & b); }
QD_V int vm_count(vm m) { return __builtin_popcount((unsigned)m); }
QD_V int vm_any(vm m) { return m != 0; }
QD_V int vm_all(vm m) { return m == 0xffff; }
QD_V vm vf_unord(vf a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
QD_V vm vf_ge(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
QD_V vm vf_le(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ); }
QD_V vm vf_lt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
QD_V vm vf_gt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
QD_V vm vi_eq(vi a, vi b) { return _mm512_cmpeq_epi32_mask(a, b); }
QD_V vm vi_gt(vi a, vi b) { return _mm512_cmpgt_epi32_mask(a, b); }
/* a != b as C has it: true where either is NaN (as wasm's f32x4.ne) */
QD_V vm vf_ne(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_NEQ_UQ); }
/* acc plus one in the lanes of m: the mask as -1 lanes (vpmovm2d), subtracted (a merge-masked
 * subtraction made the compiler copy the accumulator twice per vector) */
QD_V vi vi_count(vi acc, vm m) { return _mm512_sub_epi32(acc, _mm512_movm_epi32(m)); }
/* The same by a merge-masked subtraction: one µop fewer where the accumulator stays in its
 * register (choose_units' statistics: 3% there). */
QD_V vi vi_count_merged(vi acc, vm m) { return _mm512_mask_sub_epi32(acc, m, acc, _mm512_set1_epi32(-1)); }
/* max(|a|, b) for b ≥ +0, neither NaN: VRANGEPS picks the greater magnitude and clears its sign
 * (imm 0b1011), one instruction for the and + max */
QD_V vf vf_absmax(vf a, vf b) { return _mm512_range_ps(a, b, 0x0b); }
QD_V vi vi_select(vm m, vi yes, vi no) { return _mm512_mask_blend_epi32(m, no, yes); }
QD_V vf vf_select(vm m, vf yes, vf no) { return _mm512_mask_blend_ps(m, no, yes); }
QD_V void vm_store_bytes(uint8_t *out, vm m) {
  _mm_storeu_si128((__m128i *)out, _mm512_cvtepi32_epi8(_mm512_maskz_set1_epi32(m, 1)));
}
QD_V int32_t vi_hmin(vi v) { return _mm512_reduce_min_epi32(v); }
QD_V int32_t vi_hmax(vi v) { return _mm512_reduce_max_epi32(v); }
/* Lane j: the minimum (or maximum) of v[j]'s lanes, for VL vectors at once. A tree of pairs in
 * which each step halves the lanes holding a vector's part: under two shuffles a vector where
 * vi_hmin takes four. It leaves vector 4i + k in lane 4k + i, so v is read in that order. */
QD_V vi vi_hreduce_each(const vi *v, const int max) {
#define QD_RED(a, b) (max ? _mm512_max_epi32((a), (b)) : _mm512_min_epi32((a), (b)))
#define QD_W(n) v[4 * ((n) % 4) + (n) / 4]
  vi h[8], q[4], e[2];
  for (int p = 0; p < 8; p++) /* 256-bit halves: chunks 0-1 vector 2p, 2-3 vector 2p + 1 */
    h[p] = QD_RED(_mm512_shuffle_i64x2(QD_W(2 * p), QD_W(2 * p + 1), 0x44),
                  _mm512_shuffle_i64x2(QD_W(2 * p), QD_W(2 * p + 1), 0xee));
  for (int r = 0; r < 4; r++) /* 128-bit chunk k: vector 4r + k */
    q[r] = QD_RED(_mm512_shuffle_i64x2(h[2 * r], h[2 * r + 1], 0x88),
                  _mm512_shuffle_i64x2(h[2 * r], h[2 * r + 1], 0xdd));
  for (int t = 0; t < 2; t++) /* chunk k: vector 8t + k in lanes 0 and 2, 8t + 4 + k in 1 and 3 */
    e[t] = QD_RED(_mm512_unpacklo_epi32(q[2 * t], q[2 * t + 1]), _mm512_unpackhi_epi32(q[2 * t], q[2 * t + 1]));
  return QD_RED(_mm512_unpacklo_epi64(e[0], e[1]), _mm512_unpackhi_epi64(e[0], e[1]));
#undef QD_W
#undef QD_RED
}
QD_V vi vi_hmin_each(const vi *v) { return vi_hreduce_each(v, 0); }
QD_V vi vi_hmax_each(const vi *v) { return vi_hreduce_each(v, 1); }

/* ---- codes in ---- */
QD_V vi vi_load_i8(const void *p) { return _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)); }
QD_V vi vi_load_u8(const void *p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)); }
QD_V vi vi_load_i16(const void *p) { return _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)p)); }
QD_V vi vi_load_nibbles(const void *p, int is_signed) {
  __m128i bytes = _mm_loadl_epi64((const __m128i *)p);
  __m128i twice = _mm_shuffle_epi8(bytes, _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7));
  vi v = _mm512_srlv_epi32(_mm512_cvtepu8_epi32(twice),
                           _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4));
  v = _mm512_and_si512(v, _mm512_set1_epi32(15));
  return is_signed ? _mm512_sub_epi32(_mm512_xor_si512(v, _mm512_set1_epi32(8)), _mm512_set1_epi32(8)) : v;
}
QD_V vf vf_gather(const float *table, vi idx) { return _mm512_i32gather_ps(idx, table, 4); }
/* A 16-entry byte table made ready for vi_lut16, and its lookup: lanes idx (each 0…15) to t[idx]. */
QD_V vi vi_lut16_load(const uint8_t *t) { return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)t)); }
QD_V vi vi_lut16(vi table, vi idx) { return _mm512_permutexvar_epi32(idx, table); }

/* ---- codes out ---- */
QD_V void store4_i8(void *out, vi a, vi b, vi c, vi d) {
  uint8_t *o = (uint8_t *)out;
  _mm_storeu_si128((__m128i *)o, _mm512_cvtepi32_epi8(a));
  _mm_storeu_si128((__m128i *)(o + 16), _mm512_cvtepi32_epi8(b));
  _mm_storeu_si128((__m128i *)(o + 32), _mm512_cvtepi32_epi8(c));
  _mm_storeu_si128((__m128i *)(o + 48), _mm512_cvtepi32_epi8(d));
}
/* The low byte of each lane (lanes already within 0…255) to VL bytes. */
QD_V void vi_store_u8(void *p, vi v) { _mm_storeu_si128((__m128i *)p, _mm512_cvtepi32_epi8(v)); }
QD_V void store4_u8(void *out, vi a, vi b, vi c, vi d) { store4_i8(out, a, b, c, d); }
QD_V void store4_i16(void *out, vi a, vi b, vi c, vi d) {
  uint8_t *o = (uint8_t *)out;
  _mm256_storeu_si256((__m256i *)o, _mm512_cvtepi32_epi16(a));
  _mm256_storeu_si256((__m256i *)(o + 32), _mm512_cvtepi32_epi16(b));
  _mm256_storeu_si256((__m256i *)(o + 64), _mm512_cvtepi32_epi16(c));
  _mm256_storeu_si256((__m256i *)(o + 96), _mm512_cvtepi32_epi16(d));
}
QD_V void store4_i32(void *out, vi a, vi b, vi c, vi d) {
  uint8_t *o = (uint8_t *)out;
  vi_store(o, a);
  vi_store(o + 64, b);
  vi_store(o + 128, c);
  vi_store(o + 192, d);
}
/* 64 codes → 32 bytes of nibbles. Each lane's low nibble (only its low 4 bits matter: vpmov
 * truncates, so the lanes may still carry code_bits' bias) narrowed in-lane, where nothing
 * saturates (11 µops; vpmovdb per vector took 15): 128-bit chunk k then holds elements 4k…4k+3 of
 * a, b, c and d, a dword each, which one permutation puts back in order; byte pairs are then
 * joined as low + 16 · high. */
QD_V void store4_nibbles(void *out, vi a, vi b, vi c, vi d) {
  const vi low = _mm512_set1_epi32(15);
  vi bytes = _mm512_packus_epi16(_mm512_packus_epi32(_mm512_and_si512(a, low), _mm512_and_si512(b, low)),
                                 _mm512_packus_epi32(_mm512_and_si512(c, low), _mm512_and_si512(d, low)));
  bytes = _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), bytes);
  _mm256_storeu_si256((__m256i *)out, _mm512_cvtepi16_epi8(_mm512_maddubs_epi16(bytes, _mm512_set1_epi16(0x1001))));
}

/* ---- float16 / bfloat16 ---- */
QD_V vf vf_load_f16(const void *p) {
  vf v = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v,
                              _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000)));
}
QD_V void vf_store_f16(void *p, vf v) {
  __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  __m256i canonical = _mm256_or_si256(_mm256_and_si256(h, _mm256_set1_epi16((short)0x8000)), _mm256_set1_epi16(0x7e00));
  _mm256_storeu_si256((__m256i *)p, _mm256_mask_blend_epi16(nan, h, canonical));
}
/* x rounded to float16 and back, in registers (as qd_f16_round). */
QD_V vf vf_f16_round(vf v) {
  return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
QD_V vi vi_load_u16(const void *p) { return _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)); }
QD_V void vi_store_u16(void *p, vi v) { _mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16(v)); }

#endif
