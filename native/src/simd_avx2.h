/*
 * The vector primitives of simd_kernels.h for x86 AVX2 (8 float32 lanes). Every function is
 * compiled for AVX2 + F16C through a target attribute, so the library itself builds without
 * global -mavx2 and runs on CPUs without it (dispatch.c only selects it when supported).
 * No FMA: results must equal the scalar reference exactly.
 */
#ifndef QUANTD_SIMD_AVX2_H
#define QUANTD_SIMD_AVX2_H

#include <immintrin.h>

#include "common.h"

#define QD_TARGET __attribute__((target("avx2,f16c")))
#define QD_V static inline __attribute__((always_inline, target("avx2,f16c")))
#define QD_ISA avx2
#define QD_ISA_NAME "avx2"
#define VL 8
#define QD_HAS_GATHER 1
#define QD_HAS_F16C 1
/* store4_i8 / _u8 narrow with saturation: the lanes must be the codes themselves */
#define QD_STORES_TRUNCATE 0
/* choose_quantize_from runs float32 without statistics through simd_choose.h's loop */
#define QD_FUSE_PLAIN 1

typedef __m256 vf;
typedef __m256i vi;
typedef __m256i vm; /* lane mask: all ones or all zeros per 32-bit lane */

QD_V vf vf_load(const float *p) { return _mm256_loadu_ps(p); }
QD_V void vf_store(float *p, vf v) { _mm256_storeu_ps(p, v); }
QD_V vf vf_set(float x) { return _mm256_set1_ps(x); }
QD_V vf vf_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
QD_V vf vf_add(vf a, vf b) { return _mm256_add_ps(a, b); }
QD_V vf vf_sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
QD_V vf vf_div(vf a, vf b) { return _mm256_div_ps(a, b); }
QD_V vf vf_round(vf a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
QD_V vf vf_trunc(vf a) { return _mm256_round_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
QD_V vf vf_min(vf a, vf b) { return _mm256_min_ps(a, b); }
QD_V vf vf_max(vf a, vf b) { return _mm256_max_ps(a, b); }

QD_V vi vi_load(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
QD_V void vi_store(void *p, vi v) { _mm256_storeu_si256((__m256i *)p, v); }
QD_V vi vi_set(int32_t x) { return _mm256_set1_epi32(x); }
QD_V vi vi_and(vi a, vi b) { return _mm256_and_si256(a, b); }
QD_V vi vi_or(vi a, vi b) { return _mm256_or_si256(a, b); }
QD_V vi vi_xor(vi a, vi b) { return _mm256_xor_si256(a, b); }
QD_V vi vi_add(vi a, vi b) { return _mm256_add_epi32(a, b); }
QD_V vi vi_sub(vi a, vi b) { return _mm256_sub_epi32(a, b); }
QD_V vi vi_min(vi a, vi b) { return _mm256_min_epi32(a, b); }
QD_V vi vi_max(vi a, vi b) { return _mm256_max_epi32(a, b); }
#define vi_sra(v, n) _mm256_srai_epi32((v), (n))
#define vi_srl(v, n) _mm256_srli_epi32((v), (n))
#define vi_sll(v, n) _mm256_slli_epi32((v), (n))
QD_V vi vf_bits(vf v) { return _mm256_castps_si256(v); }
QD_V vf vi_bits(vi v) { return _mm256_castsi256_ps(v); }
QD_V vf vi_to_vf(vi v) { return _mm256_cvtepi32_ps(v); }

/* Truncating conversion; NaN and out-of-range lanes give INT32_MIN. */
QD_V vi vf_to_vi_trunc(vf v) { return _mm256_cvttps_epi32(v); }
/* Nearest (half to even) integers of lanes within ±2^22 (any within int32 here: MXCSR's rounding,
 * as everywhere here). */
QD_V vi vf_small_to_vi(vf v) { return _mm256_cvtps_epi32(v); }
/* Integral float32 lanes to int32, saturating: 2^31 and above (and +Inf) become INT32_MAX;
 * cvtps already turns -2^31 and below (and -Inf) into INT32_MIN. */
QD_V vi vf_to_vi_sat(vf u) {
  vi c = _mm256_cvtps_epi32(u);
  __m256 high = _mm256_cmp_ps(u, _mm256_set1_ps(2147483648.0f), _CMP_GE_OQ);
  return _mm256_blendv_epi8(c, _mm256_set1_epi32(INT32_MAX), _mm256_castps_si256(high));
}

QD_V vm vm_none(void) { return _mm256_setzero_si256(); }
QD_V vm vm_or(vm a, vm b) { return _mm256_or_si256(a, b); }
QD_V vm vm_and(vm a, vm b) { return _mm256_and_si256(a, b); }
QD_V int vm_count(vm m) { return __builtin_popcount((unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(m))); }
QD_V int vm_any(vm m) { return !_mm256_testz_si256(m, m); }
QD_V int vm_all(vm m) { return _mm256_movemask_ps(_mm256_castsi256_ps(m)) == 0xff; }
QD_V vm vf_unord(vf a) { return _mm256_castps_si256(_mm256_cmp_ps(a, a, _CMP_UNORD_Q)); }
QD_V vm vf_ge(vf a, vf b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_GE_OQ)); }
QD_V vm vf_le(vf a, vf b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_LE_OQ)); }
QD_V vm vf_lt(vf a, vf b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_LT_OQ)); }
QD_V vm vi_eq(vi a, vi b) { return _mm256_cmpeq_epi32(a, b); }
QD_V vm vi_gt(vi a, vi b) { return _mm256_cmpgt_epi32(a, b); }
QD_V vm vf_gt(vf a, vf b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_GT_OQ)); }
/* a != b as C has it: true where either is NaN (as wasm's f32x4.ne) */
QD_V vm vf_ne(vf a, vf b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_NEQ_UQ)); }
/* acc plus one in the lanes of m: a set lane is -1 */
QD_V vi vi_count(vi acc, vm m) { return _mm256_sub_epi32(acc, m); }
QD_V vi vi_count_merged(vi acc, vm m) { return vi_count(acc, m); } /* (AVX-512 merges) */
/* max(|a|, b) for b ≥ +0, neither NaN */
QD_V vf vf_absmax(vf a, vf b) {
  return _mm256_max_ps(_mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))), b);
}
QD_V vi vi_select(vm m, vi yes, vi no) { return _mm256_blendv_epi8(no, yes, m); }
QD_V vf vf_select(vm m, vf yes, vf no) { return _mm256_blendv_ps(no, yes, _mm256_castsi256_ps(m)); }
/* The 0/1 bytes of a lane mask, for fake-quantize's mask output (VL bytes). */
QD_V void vm_store_bytes(uint8_t *out, vm m) {
  __m256i ones = _mm256_and_si256(m, _mm256_set1_epi32(1));
  __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(ones), _mm256_extracti128_si256(ones, 1));
  _mm_storel_epi64((__m128i *)out, _mm_packs_epi16(w, w));
}

QD_V int32_t vi_hmin(vi v) {
  __m128i m = _mm_min_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  m = _mm_min_epi32(m, _mm_shuffle_epi32(m, 0x4e));
  m = _mm_min_epi32(m, _mm_shuffle_epi32(m, 0xb1));
  return _mm_cvtsi128_si32(m);
}
QD_V int32_t vi_hmax(vi v) {
  __m128i m = _mm_max_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  m = _mm_max_epi32(m, _mm_shuffle_epi32(m, 0x4e));
  m = _mm_max_epi32(m, _mm_shuffle_epi32(m, 0xb1));
  return _mm_cvtsi128_si32(m);
}
/* Lane j: the minimum (or maximum) of v[j]'s lanes, for VL vectors at once. A tree of pairs in
 * which each step halves the lanes holding a vector's part: 1.75 shuffles a vector where vi_hmin
 * takes three. It leaves vector 2i + c in lane 4c + i, so v is read in that order. */
QD_V vi vi_hreduce_each(const vi *v, const int max) {
#define QD_RED(a, b) (max ? _mm256_max_epi32((a), (b)) : _mm256_min_epi32((a), (b)))
#define QD_W(n) v[4 * ((n) % 2) + (n) / 2]
  vi h[4], e[2];
  for (int p = 0; p < 4; p++) /* 128-bit half 0: vector 2p, half 1: vector 2p + 1 */
    h[p] = QD_RED(_mm256_permute2x128_si256(QD_W(2 * p), QD_W(2 * p + 1), 0x20),
                  _mm256_permute2x128_si256(QD_W(2 * p), QD_W(2 * p + 1), 0x31));
  for (int t = 0; t < 2; t++) /* half c: vector 4t + c in lanes 0 and 2, 4t + 2 + c in 1 and 3 */
    e[t] = QD_RED(_mm256_unpacklo_epi32(h[2 * t], h[2 * t + 1]), _mm256_unpackhi_epi32(h[2 * t], h[2 * t + 1]));
  return QD_RED(_mm256_unpacklo_epi64(e[0], e[1]), _mm256_unpackhi_epi64(e[0], e[1]));
#undef QD_W
#undef QD_RED
}
QD_V vi vi_hmin_each(const vi *v) { return vi_hreduce_each(v, 0); }
QD_V vi vi_hmax_each(const vi *v) { return vi_hreduce_each(v, 1); }

/* ---- codes in: VL codes to int32 lanes ---- */
QD_V vi vi_load_i8(const void *p) { return _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)); }
QD_V vi vi_load_u8(const void *p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)); }
QD_V vi vi_load_i16(const void *p) { return _mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i *)p)); }
/* VL 4-bit codes from VL/2 bytes, LSB first. */
QD_V vi vi_load_nibbles(const void *p, int is_signed) {
  int32_t word;
  __builtin_memcpy(&word, p, 4);
  vi v = _mm256_srlv_epi32(_mm256_set1_epi32(word), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
  v = _mm256_and_si256(v, _mm256_set1_epi32(15));
  return is_signed ? _mm256_sub_epi32(_mm256_xor_si256(v, _mm256_set1_epi32(8)), _mm256_set1_epi32(8)) : v;
}
QD_V vf vf_gather(const float *table, vi idx) { return _mm256_i32gather_ps(table, idx, 4); }
/* A 16-entry byte table made ready for vi_lut16 (in both halves, as pshufb looks up within its
 * own 128 bits), and its lookup: lanes idx (each 0…15) to t[idx]; 0x80 in a lane's three upper
 * index bytes makes pshufb zero them. */
QD_V vi vi_lut16_load(const uint8_t *t) { return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)t)); }
QD_V vi vi_lut16(vi table, vi idx) {
  return _mm256_shuffle_epi8(table, _mm256_or_si256(idx, _mm256_set1_epi32((int32_t)0x80808000u)));
}

/* ---- codes out: 4·VL int32 lanes (already within the code range) ---- */
QD_V __m256i pack4_bytes(vi a, vi b, vi c, vi d, int is_unsigned) {
  __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
  __m256i bytes = is_unsigned ? _mm256_packus_epi16(ab, cd) : _mm256_packs_epi16(ab, cd);
  return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
QD_V void store4_i8(void *out, vi a, vi b, vi c, vi d) { vi_store(out, pack4_bytes(a, b, c, d, 0)); }
/* The low byte of each lane (lanes already within 0…255) to VL bytes. */
QD_V void vi_store_u8(void *p, vi v) {
  __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  _mm_storel_epi64((__m128i *)p, _mm_packus_epi16(w, w));
}
QD_V void store4_u8(void *out, vi a, vi b, vi c, vi d) { vi_store(out, pack4_bytes(a, b, c, d, 1)); }
QD_V void store4_i16(void *out, vi a, vi b, vi c, vi d) {
  vi_store(out, _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xd8));
  vi_store((uint8_t *)out + 32, _mm256_permute4x64_epi64(_mm256_packs_epi32(c, d), 0xd8));
}
QD_V void store4_i32(void *out, vi a, vi b, vi c, vi d) {
  vi_store(out, a);
  vi_store((uint8_t *)out + 32, b);
  vi_store((uint8_t *)out + 64, c);
  vi_store((uint8_t *)out + 96, d);
}
/* 4·VL 4-bit codes (two's complement fields) into 2·VL bytes: each byte's low nibble, byte pairs
 * joined as low + 16 · high by one multiply-add (8 µops, the shifts and masks took 10). */
QD_V void store4_nibbles(void *out, vi a, vi b, vi c, vi d) {
  __m256i low = _mm256_and_si256(pack4_bytes(a, b, c, d, 0), _mm256_set1_epi8(0x0f));
  __m256i words = _mm256_maddubs_epi16(low, _mm256_set1_epi16(0x1001));
  _mm_storeu_si128((__m128i *)out, _mm_packus_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1)));
}

/* ---- float16 / bfloat16 ---- */
/* float16 to float32, NaN made canonical (0x7fc00000) as float16.ts decodes it. */
QD_V vf vf_load_f16(const void *p) {
  vf v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
  return _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}
/* Nearest-even float16, NaN made canonical (0x7e00 | sign) as float16.ts does. */
QD_V void vf_store_f16(void *p, vf v) {
  __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  __m128i nan16 = _mm_packs_epi32(_mm256_castsi256_si128(nan), _mm256_extracti128_si256(nan, 1));
  __m128i sign = _mm_and_si128(h, _mm_set1_epi16((short)0x8000));
  __m128i canonical = _mm_or_si128(sign, _mm_set1_epi16(0x7e00));
  _mm_storeu_si128((__m128i *)p, _mm_blendv_epi8(h, canonical, nan16));
}
/* x rounded to float16 (nearest-even, overflow to ±Infinity) and back, in registers: the float16
 * arithmetic AWQ and GPTQ's float16 layers need, as qd_f16_round. */
QD_V vf vf_f16_round(vf v) {
  return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
QD_V vi vi_load_u16(const void *p) { return _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)); }
QD_V void vi_store_u16(void *p, vi v) {
  __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0x08);
  _mm_storeu_si128((__m128i *)p, _mm256_castsi256_si128(packed));
}

#endif
