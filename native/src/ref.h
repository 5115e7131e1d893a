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
qd_status qd_quality_ref(const float *x, const void *codes, uint64_t start, uint64_t count, const qd_layout *l,
                         const float *scale, const float *zero_point, const qd_quant *q, qd_quality *stats);

/* ggml block quantizers (ggml_ref.c, ggml_kquants.c): one block (32 floats, or 256 for the
 * K-quants), and the table entry. */
typedef void (*qd_ggml_block_fn)(const float *x, uint8_t *out);
void qd_ggml_q8_0_block_ref(const float *x, uint8_t *out);
void qd_ggml_q4_0_block_ref(const float *x, uint8_t *out);
void qd_ggml_q4_1_block_ref(const float *x, uint8_t *out);
void qd_ggml_q5_0_block_ref(const float *x, uint8_t *out);
void qd_ggml_q5_1_block_ref(const float *x, uint8_t *out);
void qd_ggml_q4_k_block_ref(const float *x, uint8_t *out);
void qd_ggml_q6_k_block_ref(const float *x, uint8_t *out);
/* Q4_K after the sub-block search: the 8 scales, 8 negated mins and codes L → the block's bytes. */
void qd_ggml_q4_k_finish(const float *x, const float *scales, const float *mins, uint8_t *L, uint8_t *out);
/* Q6_K after the sub-block search: the block's 16 scales and codes L (nmax + code) → its bytes
 * (the SIMD variants search sub-blocks across lanes, then finish here). */
void qd_ggml_q6_k_finish(const float *x, const float *scales, int8_t *L, uint8_t *out);
/* The scalar block quantizer of a qd_ggml_type; NULL when unknown. */
qd_ggml_block_fn qd_ggml_block_ref(int32_t type);
qd_status qd_ggml_quantize_ref(int32_t type, const float *x, uint64_t blocks, uint8_t *out);

#endif
