/*
 * The vector primitives of simd_kernels.h for WebAssembly SIMD128 (4 float32 lanes). wasm has
 * no gather and no float16 conversion: fp8 dequantize and the float16 conversions use the
 * scalar reference; rounding to float16 and back (AWQ, GPTQ's float16 layers) is integer work on
 * the bits (vf_f16_round). f32x4.nearest rounds half to even; i32x4.trunc_sat saturates exactly as
 * the reference clamps.
 */
#ifndef QUANTD_SIMD_WASM_H
#define QUANTD_SIMD_WASM_H

#include <wasm_simd128.h>

#include "common.h"

#define QD_TARGET
#define QD_V static inline __attribute__((always_inline))
#define QD_ISA simd128
#define QD_ISA_NAME "simd128"
#define VL 4
#define QD_HAS_GATHER 0
#define QD_HAS_F16C 0
/* store4_i8 / _u8 narrow with saturation: the lanes must be the codes themselves */
#define QD_STORES_TRUNCATE 0
/* choose_quantize_from runs float32 without statistics through simd_choose.h's loop */
#define QD_FUSE_PLAIN 0

typedef v128_t vf;
typedef v128_t vi;
typedef v128_t vm;

QD_V vf vf_load(const float *p) { return wasm_v128_load(p); }
QD_V void vf_store(float *p, vf v) { wasm_v128_store(p, v); }
QD_V vf vf_set(float x) { return wasm_f32x4_splat(x); }
QD_V vf vf_mul(vf a, vf b) { return wasm_f32x4_mul(a, b); }
QD_V vf vf_add(vf a, vf b) { return wasm_f32x4_add(a, b); }
QD_V vf vf_sub(vf a, vf b) { return wasm_f32x4_sub(a, b); }
QD_V vf vf_div(vf a, vf b) { return wasm_f32x4_div(a, b); }
QD_V vf vf_round(vf a) { return wasm_f32x4_nearest(a); }
QD_V vf vf_trunc(vf a) { return wasm_f32x4_trunc(a); }
/* pmin/pmax (a < b ? ...) map to single SSE instructions in engines; NaN lanes are flagged apart. */
QD_V vf vf_min(vf a, vf b) { return wasm_f32x4_pmin(a, b); }
QD_V vf vf_max(vf a, vf b) { return wasm_f32x4_pmax(a, b); }

/* Truncating conversion; NaN gives 0 and out-of-range lanes saturate (unlike x86). */
QD_V vi vf_to_vi_trunc(vf v) { return wasm_i32x4_trunc_sat_f32x4(v); }
/* Nearest (half to even) integers of lanes within ±2^22: v + 1.5·2^23 has them in its low bits
 * (engines make trunc_sat several instructions). */
QD_V vi vf_small_to_vi(vf v) {
  return wasm_i32x4_sub(wasm_f32x4_add(v, wasm_f32x4_splat(12582912.0f)), wasm_i32x4_splat(0x4b400000));
}
QD_V vi vi_load(const void *p) { return wasm_v128_load(p); }
QD_V void vi_store(void *p, vi v) { wasm_v128_store(p, v); }
QD_V vi vi_set(int32_t x) { return wasm_i32x4_splat(x); }
QD_V vi vi_and(vi a, vi b) { return wasm_v128_and(a, b); }
QD_V vi vi_or(vi a, vi b) { return wasm_v128_or(a, b); }
QD_V vi vi_xor(vi a, vi b) { return wasm_v128_xor(a, b); }
QD_V vi vi_add(vi a, vi b) { return wasm_i32x4_add(a, b); }
QD_V vi vi_sub(vi a, vi b) { return wasm_i32x4_sub(a, b); }
QD_V vi vi_min(vi a, vi b) { return wasm_i32x4_min(a, b); }
QD_V vi vi_max(vi a, vi b) { return wasm_i32x4_max(a, b); }
#define vi_sra(v, n) wasm_i32x4_shr((v), (n))
#define vi_srl(v, n) wasm_u32x4_shr((v), (n))
#define vi_sll(v, n) wasm_i32x4_shl((v), (n))
QD_V vi vf_bits(vf v) { return v; }
QD_V vf vi_bits(vi v) { return v; }
QD_V vf vi_to_vf(vi v) { return wasm_f32x4_convert_i32x4(v); }
QD_V vi vf_to_vi_sat(vf u) { return wasm_i32x4_trunc_sat_f32x4(u); }

QD_V vm vm_none(void) { return wasm_i32x4_splat(0); }
QD_V vm vm_or(vm a, vm b) { return wasm_v128_or(a, b); }
QD_V vm vm_and(vm a, vm b) { return wasm_v128_and(a, b); }
QD_V int vm_count(vm m) { return __builtin_popcount((unsigned)wasm_i32x4_bitmask(m)); }
QD_V int vm_any(vm m) { return wasm_v128_any_true(m); }
QD_V int vm_all(vm m) { return wasm_i32x4_all_true(m); }
QD_V vm vf_unord(vf a) { return wasm_f32x4_ne(a, a); }
QD_V vm vf_ge(vf a, vf b) { return wasm_f32x4_ge(a, b); }
QD_V vm vf_le(vf a, vf b) { return wasm_f32x4_le(a, b); }
QD_V vm vf_lt(vf a, vf b) { return wasm_f32x4_lt(a, b); }
QD_V vm vf_gt(vf a, vf b) { return wasm_f32x4_gt(a, b); }
QD_V vm vi_eq(vi a, vi b) { return wasm_i32x4_eq(a, b); }
QD_V vm vi_gt(vi a, vi b) { return wasm_i32x4_gt(a, b); }
QD_V vm vf_ne(vf a, vf b) { return wasm_f32x4_ne(a, b); }
/* acc plus one in the lanes of m: a set lane is -1 */
QD_V vi vi_count(vi acc, vm m) { return wasm_i32x4_sub(acc, m); }
QD_V vi vi_count_merged(vi acc, vm m) { return vi_count(acc, m); } /* (AVX-512 merges) */
/* max(|a|, b) for b ≥ +0, neither NaN */
QD_V vf vf_absmax(vf a, vf b) { return wasm_f32x4_pmax(wasm_v128_and(a, wasm_i32x4_splat(0x7fffffff)), b); }
QD_V vi vi_select(vm m, vi yes, vi no) { return wasm_v128_bitselect(yes, no, m); }
QD_V vf vf_select(vm m, vf yes, vf no) { return wasm_v128_bitselect(yes, no, m); }
QD_V void vm_store_bytes(uint8_t *out, vm m) {
  v128_t ones = wasm_v128_and(m, wasm_i32x4_splat(1));
  v128_t w = wasm_i16x8_narrow_i32x4(ones, ones);
  wasm_v128_store32_lane(out, wasm_i8x16_narrow_i16x8(w, w), 0);
}
QD_V int32_t vi_hmin(vi v) {
  v = wasm_i32x4_min(v, wasm_i32x4_shuffle(v, v, 2, 3, 0, 1));
  v = wasm_i32x4_min(v, wasm_i32x4_shuffle(v, v, 1, 0, 3, 2));
  return wasm_i32x4_extract_lane(v, 0);
}
QD_V int32_t vi_hmax(vi v) {
  v = wasm_i32x4_max(v, wasm_i32x4_shuffle(v, v, 2, 3, 0, 1));
  v = wasm_i32x4_max(v, wasm_i32x4_shuffle(v, v, 1, 0, 3, 2));
  return wasm_i32x4_extract_lane(v, 0);
}
/* Lane j: the minimum (or maximum) of v[j]'s lanes, for VL vectors at once: pairs of vectors
 * halved twice (vector 2p's part in the low lanes, 2p + 1's in the high ones). */
QD_V vi vi_hreduce_each(const vi *v, const int max) {
#define QD_RED(a, b) (max ? wasm_i32x4_max((a), (b)) : wasm_i32x4_min((a), (b)))
  vi h0 = QD_RED(wasm_i32x4_shuffle(v[0], v[1], 0, 1, 4, 5), wasm_i32x4_shuffle(v[0], v[1], 2, 3, 6, 7));
  vi h1 = QD_RED(wasm_i32x4_shuffle(v[2], v[3], 0, 1, 4, 5), wasm_i32x4_shuffle(v[2], v[3], 2, 3, 6, 7));
  return QD_RED(wasm_i32x4_shuffle(h0, h1, 0, 2, 4, 6), wasm_i32x4_shuffle(h0, h1, 1, 3, 5, 7));
#undef QD_RED
}
QD_V vi vi_hmin_each(const vi *v) { return vi_hreduce_each(v, 0); }
QD_V vi vi_hmax_each(const vi *v) { return vi_hreduce_each(v, 1); }

/* ---- codes in ---- */
QD_V vi vi_load_i8(const void *p) {
  return wasm_i32x4_extend_low_i16x8(wasm_i16x8_extend_low_i8x16(wasm_v128_load32_zero(p)));
}
QD_V vi vi_load_u8(const void *p) {
  return wasm_u32x4_extend_low_u16x8(wasm_u16x8_extend_low_u8x16(wasm_v128_load32_zero(p)));
}
QD_V vi vi_load_i16(const void *p) { return wasm_i32x4_load16x4(p); }
/* 4 codes from 2 bytes: lanes [b0, b0, b1, b1], low nibble in lanes 0 and 2, high in 1 and 3. */
QD_V vi vi_load_nibbles(const void *p, int is_signed) {
  const uint8_t *b = (const uint8_t *)p;
  v128_t v = wasm_i32x4_make(b[0], b[0], b[1], b[1]);
  v128_t lo = wasm_v128_and(v, wasm_i32x4_splat(15));
  v128_t hi = wasm_v128_and(wasm_u32x4_shr(v, 4), wasm_i32x4_splat(15));
  v128_t codes = wasm_i32x4_shuffle(lo, hi, 0, 5, 2, 7);
  return is_signed ? wasm_i32x4_sub(wasm_v128_xor(codes, wasm_i32x4_splat(8)), wasm_i32x4_splat(8)) : codes;
}
QD_V vf vf_gather(const float *table, vi idx) {
  return wasm_f32x4_make(table[wasm_i32x4_extract_lane(idx, 0)], table[wasm_i32x4_extract_lane(idx, 1)],
                         table[wasm_i32x4_extract_lane(idx, 2)], table[wasm_i32x4_extract_lane(idx, 3)]);
}
/* A 16-entry byte table made ready for vi_lut16, and its lookup: lanes idx (each 0…15) to t[idx];
 * swizzle gives 0 for the index bytes 0x80 put in each lane's upper three bytes. */
QD_V vi vi_lut16_load(const uint8_t *t) { return wasm_v128_load(t); }
QD_V vi vi_lut16(vi table, vi idx) { return wasm_i8x16_swizzle(table, wasm_v128_or(idx, wasm_i32x4_splat((int32_t)0x80808000u))); }

/* ---- codes out ---- */
QD_V void store4_i8(void *out, vi a, vi b, vi c, vi d) {
  wasm_v128_store(out, wasm_i8x16_narrow_i16x8(wasm_i16x8_narrow_i32x4(a, b), wasm_i16x8_narrow_i32x4(c, d)));
}
/* The low byte of each lane (lanes already within 0…255) to VL bytes. */
QD_V void vi_store_u8(void *p, vi v) {
  v128_t w = wasm_u16x8_narrow_i32x4(v, v);
  wasm_v128_store32_lane(p, wasm_u8x16_narrow_i16x8(w, w), 0);
}
QD_V void store4_u8(void *out, vi a, vi b, vi c, vi d) {
  wasm_v128_store(out, wasm_u8x16_narrow_i16x8(wasm_i16x8_narrow_i32x4(a, b), wasm_i16x8_narrow_i32x4(c, d)));
}
QD_V void store4_i16(void *out, vi a, vi b, vi c, vi d) {
  wasm_v128_store(out, wasm_i16x8_narrow_i32x4(a, b));
  wasm_v128_store((uint8_t *)out + 16, wasm_i16x8_narrow_i32x4(c, d));
}
QD_V void store4_i32(void *out, vi a, vi b, vi c, vi d) {
  uint8_t *o = (uint8_t *)out;
  wasm_v128_store(o, a);
  wasm_v128_store(o + 16, b);
  wasm_v128_store(o + 32, c);
  wasm_v128_store(o + 48, d);
}
QD_V void store4_nibbles(void *out, vi a, vi b, vi c, vi d) {
  v128_t bytes = wasm_i8x16_narrow_i16x8(wasm_i16x8_narrow_i32x4(a, b), wasm_i16x8_narrow_i32x4(c, d));
  v128_t lo = wasm_v128_and(bytes, wasm_i16x8_splat(0x000f));
  v128_t hi = wasm_v128_and(wasm_u16x8_shr(bytes, 4), wasm_i16x8_splat(0x00f0));
  v128_t words = wasm_v128_or(lo, hi);
  wasm_v128_store64_lane(out, wasm_u8x16_narrow_i16x8(words, words), 0);
}

/* ---- float16 rounding without a conversion instruction ---- */
/* x rounded to float16 (nearest-even, overflow to ±Infinity) and back, as qd_f16_round, on the
 * bits: in float16's normal range the 13 low mantissa bits round away (adding 0xfff plus the
 * kept bit's parity carries exactly when nearest-even rounds up); below it float16's step is the
 * fixed 2^-24, which (|x| + 0.5) - 0.5 rounds to (0.5's step is 2^-24, and 0.5 is even). NaN
 * passes through. */
QD_V vf vf_f16_round(vf v) {
  const v128_t a = wasm_v128_and(v, wasm_i32x4_splat(0x7fffffff)), sign = wasm_v128_xor(v, a);
  const v128_t odd = wasm_v128_and(wasm_u32x4_shr(a, 13), wasm_i32x4_splat(1));
  v128_t normal = wasm_i32x4_add(a, wasm_i32x4_add(wasm_i32x4_splat(0xfff), odd));
  normal = wasm_v128_and(normal, wasm_i32x4_splat(~0x1fff));
  const v128_t overflow = wasm_i32x4_gt(normal, wasm_i32x4_splat(0x477fe000)); /* past 65504 */
  normal = wasm_v128_bitselect(wasm_i32x4_splat(0x7f800000), normal, overflow);
  const v128_t half = wasm_f32x4_splat(0.5f);
  const v128_t small = wasm_f32x4_sub(wasm_f32x4_add(a, half), half);
  v128_t r = wasm_v128_bitselect(small, normal, wasm_i32x4_lt(a, wasm_i32x4_splat(0x38800000)));
  r = wasm_v128_or(r, sign);
  return wasm_v128_bitselect(v, r, wasm_i32x4_gt(a, wasm_i32x4_splat(0x7f800000)));
}

/* ---- bfloat16 (float16 has no vector conversion here) ---- */
QD_V vi vi_load_u16(const void *p) { return wasm_u32x4_load16x4(p); }
QD_V void vi_store_u16(void *p, vi v) { wasm_v128_store64_lane(p, wasm_u16x8_narrow_i32x4(v, v), 0); }

#endif
