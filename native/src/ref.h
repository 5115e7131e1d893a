/* The scalar reference kernels, for the SIMD variants to fall back on (tails, odd layouts). */
#ifndef QUANTD_REF_H
#define QUANTD_REF_H

#include "../include/quantd.h"

qd_status qd_minmax_ref(const float *x, uint64_t start, uint64_t count, const qd_layout *l, float *mins,
                        float *maxs, uint64_t *bad);
qd_status qd_quantize_ref(const float *x, uint64_t start, uint64_t count, const qd_layout *l, const float *scale,
                          const float *zero_point, const qd_quant *q, void *out, uint64_t *bad);
qd_status qd_dequantize_ref(const void *codes, int32_t kind, uint64_t start, uint64_t count, const qd_layout *l,
                            const float *scale, const float *zero_point, float *out);
qd_status qd_fake_quantize_ref(const float *x, uint64_t start, uint64_t count, const qd_layout *l,
                               const float *scale, const float *zero_point, int32_t qmin, int32_t qmax,
                               int32_t float_zero_point, float *out, uint8_t *mask, uint64_t *bad);
qd_status qd_choose_quantize_ref(const float *x, uint64_t first, uint64_t units, uint64_t unit_size,
                                 const qd_choose *c, const qd_quant *q, float *scale, double *zero_point,
                                 void *out, uint64_t *bad);
/* Qparams of one unit from its min and max (qd_determine for n = 1). */
qd_status qd_determine_unit(float lo, float hi, const qd_choose *c, float *scale, double *zero_point);
void qd_f16_to_f32_ref(const void *in, uint64_t n, void *out);
void qd_bf16_to_f32_ref(const void *in, uint64_t n, void *out);
void qd_f32_to_f16_ref(const void *in, uint64_t n, void *out);
void qd_f32_to_bf16_ref(const void *in, uint64_t n, void *out);
qd_status qd_choose_quantize_from_ref(const void *x, int32_t input, uint64_t first, uint64_t units,
                                      uint64_t unit_size, const qd_choose *c, const qd_quant *q, float *scale,
                                      double *zero_point, void *out, uint64_t *bad, qd_quality *stats,
                                      float *scratch);
qd_status qd_quality_ref(const float *x, const void *codes, uint64_t start, uint64_t count, const qd_layout *l,
                         const float *scale, const float *zero_point, const qd_quant *q, qd_quality *stats);

/* ggml block quantizers (ggml_ref.c, ggml_kquants.c, ggml_iquants.c): one block (32 floats, or
 * 256 for the K-quants and IQ4_XS), and the table entry. */
typedef void (*qd_ggml_block_fn)(const float *x, uint8_t *out);

/* GROUP_MAX_EPS of ggml-quants.c: a group whose largest magnitude is below it is all zero. */
#define QD_GROUP_MAX_EPS 1e-15f

/* The value of largest magnitude of x[0..n), signed; the first one wins a tie and NaN never does
 * (`if (ax > amax)`, as every ggml search starts). Its magnitude is the group's amax. */
static inline float qd_ggml_signed_abs_max(const float *x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; i++) {
    const float ax = __builtin_fabsf(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  return max;
}
void qd_ggml_q8_0_block_ref(const float *x, uint8_t *out);
void qd_ggml_q4_0_block_ref(const float *x, uint8_t *out);
void qd_ggml_q4_1_block_ref(const float *x, uint8_t *out);
void qd_ggml_q5_0_block_ref(const float *x, uint8_t *out);
void qd_ggml_q5_1_block_ref(const float *x, uint8_t *out);
void qd_ggml_q4_k_block_ref(const float *x, uint8_t *out);
void qd_ggml_q2_k_block_ref(const float *x, uint8_t *out);
void qd_ggml_q3_k_block_ref(const float *x, uint8_t *out);
void qd_ggml_q5_k_block_ref(const float *x, uint8_t *out);
/* Q5_K after the sub-block search, as qd_ggml_q4_k_finish. */
void qd_ggml_q5_k_finish(const float *x, const float *scales, const float *mins, uint8_t *L, uint8_t *out);
void qd_ggml_q6_k_block_ref(const float *x, uint8_t *out);
/* Q4_K after the sub-block search: the 8 scales, 8 negated mins and codes L → the block's bytes. */
void qd_ggml_q4_k_finish(const float *x, const float *scales, const float *mins, uint8_t *L, uint8_t *out);
/* Q4_K's / Q5_K's j-th 6-bit scale and min into the 12 scale bytes sc (set_scale_min_k4). */
void qd_ggml_put_scale_min_k4(int j, uint8_t ls, uint8_t lm, uint8_t *sc);
/* Q4_K (nmax 15) / Q5_K (31) once d, dmin and the scale bytes are written: each value's code
 * against its rounded scale and min (sub-blocks of scale 0 keep L's), packed. */
void qd_ggml_k4_tail(const float *x, uint8_t *L, uint8_t *out, int32_t nmax);
/* make_qkx2_quants (and make_qkx3_quants, which differs only for NaN) for one sub-block of N ≤ 32:
 * Q4_K 32 values, nmax 15, rmin -1, rdelta 0.1, nstep 20, squared error; Q5_K nmax 31, rmin -0.5,
 * nstep 15; Q2_K 16 values, nmax 3, rmin -0.5, nstep 15, absolute error; with an importance
 * matrix rmin -0.9, rdelta 0.05, nstep 36, squared error. The codes go to L, the returned scale
 * and *neg_min (= -min, so ≥ 0) fit x ≈ scale·L - neg_min. */
float qd_ggml_make_qkx2_quants(const float *x, const float *weights, uint8_t *L, float *neg_min, int32_t NMAX,
                               float rmin, float rdelta, int NSTEP, int N, int use_mad);
/* Q2_K, Q3_K and Q6_K after their 16 sub-block searches (scales, Q2_K's negated mins, codes L
 * stored minus qd_ggml_sixteen_low): the head writes the scale bytes and each sub-block's rounded
 * d (Q2_K: and dm), 0 when it wrote the whole (all-zero) Q6_K block; then each sub-block whose d
 * is not 0 takes the codes clamp(nearest((x + dm) / d), low, high) - low (dm: Q2_K only; high 3
 * for Q2_K, -low - 1 otherwise), and the packing writes them. The SIMD variants search and code
 * in vectors and call the head and the packing. */
int qd_ggml_sixteen_head(int32_t type, const float *scales, const float *neg_mins, uint8_t *out, float *d, float *dm);
void qd_ggml_sixteen_pack(int32_t type, const uint8_t *L, uint8_t *out);
/* Head, codes and packing in one; the tail: codes and packing once the scale bytes are written. */
void qd_ggml_sixteen_finish(int32_t type, const float *x, const float *scales, const float *neg_mins, uint8_t *L,
                            uint8_t *out);
void qd_ggml_sixteen_tail(int32_t type, const float *x, uint8_t *L, uint8_t *out);
static inline int32_t qd_ggml_sixteen_low(int32_t type) {
  return type == QD_GGML_Q6_K ? -32 : type == QD_GGML_Q3_K ? -4 : 0;
}
void qd_ggml_iq4_nl_block_ref(const float *x, uint8_t *out);
void qd_ggml_iq4_xs_block_ref(const float *x, uint8_t *out);
/* IQ4_NL / IQ4_XS's scale search for one group of 32 values (quantize_row_iq4_nl_impl, ntry 7),
 * weighted by w (an importance matrix's, qd_ggml_iq4_weights) or, NULL, by x². */
float qd_ggml_iq4_scale(const float *x, const float *w);
/* With an importance matrix (quantize_row_iq4_nl_impl's quant_weights path): the weights
 * qw·sqrt(σ² + x²) of a block of `size` values (32 for IQ4_NL, 256 for IQ4_XS; σ² = Σx²·2/size),
 * and one block quantized with its column weights qw. */
void qd_ggml_iq4_weights(const float *x, const float *qw, int size, float *w);
void qd_ggml_iq4_nl_weighted_ref(const float *x, const float *qw, uint8_t *out);
void qd_ggml_iq4_xs_weighted_ref(const float *x, const float *qw, uint8_t *out);
/* After the search, all but the codes: IQ4_NL's d from its scale, returning the reciprocal its
 * codes use; IQ4_XS's d and 6-bit scales from the 8 group scales, with each group's reciprocal
 * to ids[] (the SIMD variants search and code groups across lanes around these). */
float qd_ggml_iq4_nl_head(float d, uint8_t *out);
void qd_ggml_iq4_xs_head(const float *scales, uint8_t *out, float *ids);
/* The scalar block quantizer of a qd_ggml_type; NULL when unknown. */
qd_ggml_block_fn qd_ggml_block_ref(int32_t type);
qd_status qd_ggml_quantize_ref(int32_t type, const float *x, uint64_t blocks, uint8_t *out);
qd_status qd_ggml_quantize_weighted_ref(int32_t type, const float *x, uint64_t rows, uint64_t ne0, const float *qw,
                                        uint8_t *out);
/* With an importance matrix, one block of a K or IQ4 type (256 values; IQ4_NL: 32) with its
 * column weights qw. */
void qd_ggml_weighted_block_ref(int32_t type, const float *x, const float *qw, uint8_t *out);
/* Its parts, for the SIMD variants: each value's weight w[256] and the sub-blocks' sums sw (none
 * for Q6_K), then, after the sub-block fits (scales, negated mins for Q2_K / Q4_K / Q5_K, codes
 * L), the block's bytes. */
void qd_ggml_matrix_weights(int32_t type, const float *x, const float *qw, float *w, float *sw);
void qd_ggml_weighted_finish(int32_t type, const float *x, const float *scales, const float *mins, const float *sw,
                             uint8_t *L, uint8_t *out);
/* Q4_0, Q4_1, Q5_0 and Q5_1 with a matrix (qd_ggml_legacy_weighted): a row's σ² (a block's 32
 * weights are qd_matrix_weights'), the nmax of its fit (make_qx_quants for Q4_0 / Q5_0,
 * make_qkx3_quants for Q4_1 / Q5_1), one block with its weights, and a block's bytes after its
 * fit (scale, negated min for the affine types, codes L). */
int qd_ggml_legacy_weighted(int32_t type);
float qd_ggml_row_sigma2(const float *x, uint64_t ne0);
int32_t qd_ggml_legacy_nmax(int32_t type);
void qd_ggml_legacy_weighted_block_ref(int32_t type, const float *x, const float *w, uint8_t *out);
void qd_ggml_legacy_weighted_finish(int32_t type, float scale, float neg_min, const uint8_t *L, uint8_t *out);
qd_status qd_bnb_quantize_ref(int32_t type, const float *x, uint64_t n, uint64_t blocksize, uint8_t *packed,
                              float *absmax, uint64_t *bad);
/* The 4-bit code of one float32 (x·inv) in a qd_bnb_type code book; NaN gives 0. */
uint8_t qd_bnb_code(int32_t type, float v);
extern const float qd_nf4_thresholds[15];
extern const float qd_fp4_thresholds[7];

/* MatMulNBits: one block of `count` values → its stored scale, zero point and codes (two per
 * byte from out[0], low nibble first); 1 done, 0 if the scale's reciprocal overflows, -1 at a
 * non-finite value (its index in *bad). The driver runs `whole` on whole blocks, the reference on
 * a partial last one, and packs the rows as ORT does. */
typedef int (*qd_nbits_block_fn)(const float *x, uint64_t count, int32_t sym, int32_t f16, float *scale, uint8_t *zp,
                                 uint8_t *out, uint64_t *bad);
int qd_nbits_block_ref(const float *x, uint64_t count, int32_t sym, int32_t f16, float *scale, uint8_t *zp,
                       uint8_t *out, uint64_t *bad);
int qd_nbits_params(float min, float max, int32_t sym, int32_t f16, float *stored, uint8_t *zp, float *recip);
uint8_t qd_nbits_code(float v, float recip, uint8_t zp);
qd_status qd_nbits_quantize_with(qd_nbits_block_fn whole, const float *w, uint64_t n_cols, uint64_t k_len,
                                 uint64_t block_size, int32_t sym, int32_t f16, uint8_t *b, float *scales,
                                 uint8_t *zero_points, uint64_t *bad);
/* AWQ: the nibble of each output row within its word (AutoAWQ's order_map, inverted). */
extern const uint8_t qd_awq_slot[8];
/* AWQ: one value's code in a group of float16 `scale`, `zero`, zero · scale; -1 when the scale
 * cannot re-derive it. */
int32_t qd_awq_code(float x, float scale, float zero, float scale_zero);
/* A group's float16 scale, zero point and zero · scale from the float16 minimum and maximum. */
void qd_awq_params(float lo, float hi, float *scale, float *zero, float *scale_zero);
qd_status qd_awq_quantize_ref(const float *w, uint64_t out, uint64_t in, uint64_t group_size, uint32_t *qweight,
                              uint32_t *qzeros, uint16_t *scales, uint64_t *bad);
/* GPTQ: a group's parameters from its minimum and maximum (0: its float16 scale is 0 or infinite,
 * or its zero point out of range: nothing can be written). */
typedef struct {
  float maxq, scale, zero, half_scale, scale_zero;
  uint16_t half;
} qd_gptq_group_params;
int qd_gptq_params(float lo, float hi, uint32_t bits, int32_t sym, qd_gptq_group_params *p);
/* GPTQ: one value's code in a group (Q rounded to the layer's dtype `store`, the code re-derived
 * from the float16 scale, a code outside 0…maxq clamped and counted). */
uint32_t qd_gptq_code(float x, const qd_gptq_group_params *p, int32_t store, uint64_t *clamped);
/* GPTQ: the packed zero points (each field the zero point) made AutoGPTQ v1's, zero point - 1. */
void qd_gptq_v1_zeros(uint32_t *qzeros, uint64_t words, uint32_t bits);
qd_status qd_gptq_quantize_ref(const float *w, uint64_t out, uint64_t in, uint32_t bits, uint64_t group_size,
                               int32_t sym, int32_t store, uint32_t *qweight, uint32_t *qzeros, uint16_t *scales,
                               uint64_t *counts, uint64_t *bad);
qd_status qd_nbits_quantize_ref(const float *w, uint64_t n_cols, uint64_t k_len, uint64_t block_size, int32_t sym,
                                int32_t f16, uint8_t *b, float *scales, uint8_t *zero_points, uint64_t *bad);

#endif
