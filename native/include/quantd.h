/*
 * quantd kernels: the numerics of docs/numerics.md in C11, bit for bit equal to the TypeScript
 * reference in src/core. One portable scalar implementation per op family (*_ref, ref.c) and
 * SIMD variants beside it (x86 AVX2 and AVX-512, WebAssembly SIMD128), chosen through one
 * dispatch table. Kernels never abort and never allocate: they return a status.
 *
 * Ranges: every kernel works on elements [start, start + count) of a tensor laid out as
 * (outer, channels, inner) — element i uses qparam floor(i / inner) % channels — so a tensor can
 * be split across threads or streamed through a small buffer. Pointers point at element `start`
 * (for packed sub-byte codes, at the byte holding it: `start` must then be a multiple of the
 * codes per byte).
 */
#ifndef QUANTD_H
#define QUANTD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  QD_OK = 0,
  /* NaN, or ±Infinity where the op rejects it; *bad is the element index. */
  QD_NOT_FINITE = 1,
  /* A chosen scale is not a finite positive float32; *bad is the unit index. */
  QD_RANGE_OVERFLOW = 2,
  /* A parameter outside its domain: a caller bug, never data. */
  QD_BAD_ARGUMENT = 3,
} qd_status;

typedef enum {
  QD_CODES_I8 = 0,
  QD_CODES_U8 = 1,
  QD_CODES_I16 = 2,
  QD_CODES_I32 = 3,
  QD_CODES_I4 = 4,
  QD_CODES_U4 = 5,
  QD_CODES_I2 = 6,
  QD_CODES_U2 = 7,
  QD_CODES_E4M3 = 8,
  QD_CODES_E5M2 = 9,
} qd_codes;

typedef struct {
  uint64_t outer, channels, inner;
} qd_layout;

typedef struct {
  int32_t codes; /* qd_codes */
  int32_t qmin, qmax;
  /* round(x·inv + zp) (float_qparams, per_token, per_group) instead of round(x·inv) + zp. */
  int32_t add_zero_point_first;
  /* ±Infinity is an error (per_group) instead of saturating. */
  int32_t reject_infinity;
} qd_quant;

typedef enum {
  QD_AFFINE = 0,
  QD_SYMMETRIC = 1,
  QD_FLOAT_QPARAMS = 2,
  QD_TOKEN_SYMMETRIC = 3,
  QD_TOKEN_AFFINE = 4,
} qd_mode;

typedef struct {
  int32_t mode; /* qd_mode */
  int32_t qmin, qmax;
  float eps;
  int32_t symmetric_zero_point;
} qd_choose;

/* Per-unit minimum and maximum, accumulated into mins/maxs (length `channels`; start them at
 * +Inf / -Inf). Zeros order -0 < +0. NaN and ±Infinity are QD_NOT_FINITE. */
typedef qd_status (*qd_minmax_fn)(const float *x, uint64_t start, uint64_t count, const qd_layout *l,
                                  float *mins, float *maxs, uint64_t *bad);
/* Codes of x with per-unit scale and zero point (zero points as float32, as torch adds them). */
typedef qd_status (*qd_quantize_fn)(const float *x, uint64_t start, uint64_t count, const qd_layout *l,
                                    const float *scale, const float *zero_point, const qd_quant *q, void *out,
                                    uint64_t *bad);
/* (float32(code) - zp) · scale. */
typedef qd_status (*qd_dequantize_fn)(const void *codes, int32_t kind, uint64_t start, uint64_t count,
                                      const qd_layout *l, const float *scale, const float *zero_point,
                                      float *out);
/* Quantize-dequantize with its mask (1 = inside [qmin, qmax] before clamping). */
typedef qd_status (*qd_fake_quantize_fn)(const float *x, uint64_t start, uint64_t count, const qd_layout *l,
                                         const float *scale, const float *zero_point, int32_t qmin,
                                         int32_t qmax, int32_t float_zero_point, float *out, uint8_t *mask,
                                         uint64_t *bad);
/* For contiguous units (outer = 1: per_tensor, per_token, per_group): choose each unit's qparams
 * from its min/max and quantize it, in one pass. Units [first, first + units). */
typedef qd_status (*qd_choose_quantize_fn)(const float *x, uint64_t first, uint64_t units, uint64_t unit_size,
                                           const qd_choose *c, const qd_quant *q, float *scale,
                                           double *zero_point, void *out, uint64_t *bad);
typedef void (*qd_convert_fn)(const void *in, uint64_t n, void *out);

/* How input values are stored. */
typedef enum {
  QD_INPUT_F32 = 0,
  QD_INPUT_F16 = 1,
  QD_INPUT_BF16 = 2,
} qd_input;

/* How far codes are from the values they stand for, accumulated over calls. */
typedef struct {
  double sum_sq_error; /* Σ (x - dequantized)^2 */
  double sum_sq_value; /* Σ x^2 */
  double max_abs_error;
  uint64_t clipped; /* elements whose unclamped code fell outside [qmin, qmax] */
  uint64_t count;
} qd_quality;

/* Adds the error statistics of codes (of x, with these qparams) to `stats`. Sums are float64;
 * their order differs between variants, so they agree to rounding, not bit for bit (they are
 * statistics for people, not outputs). */
typedef qd_status (*qd_quality_fn)(const float *x, const void *codes, uint64_t start, uint64_t count,
                                   const qd_layout *l, const float *scale, const float *zero_point, const qd_quant *q,
                                   qd_quality *stats);

/* choose_quantize of units stored as `input` (qd_input), adding the codes' quality statistics to
 * `stats` unless it is NULL: one pass over memory, half-precision values widened as they are read.
 * Codes, qparams and status are choose_quantize's on the float32 values, bit for bit; the
 * statistics agree with quality's to rounding, and are the same however a caller cuts the units
 * into calls of whole measured chunks (qd_measured_chunk_units). `scratch` (unused for float32)
 * holds qd_measured_chunk_units(unit_size) · unit_size floats, for units the one-pass loop does not
 * take. */
typedef qd_status (*qd_choose_quantize_from_fn)(const void *x, int32_t input, uint64_t first, uint64_t units,
                                                uint64_t unit_size, const qd_choose *c, const qd_quant *q,
                                                float *scale, double *zero_point, void *out, uint64_t *bad,
                                                qd_quality *stats, float *scratch);

/* ggml's block types that have kernels (the others are quantized in TypeScript); they match
 * src/core/interop/ggml-legacy.ts, ggml-kquants.ts and ggml-iquants.ts byte for byte. */
typedef enum {
  QD_GGML_Q8_0 = 0, /* 32 values: d:f16, qs:int8[32]; 34 bytes */
  QD_GGML_Q4_0 = 1, /* 32 values: d:f16, qs:u8[16]; 18 bytes */
  QD_GGML_Q4_1 = 2, /* 32 values: d:f16, m:f16, qs:u8[16]; 20 bytes */
  QD_GGML_Q5_0 = 3, /* 32 values: d:f16, qh:u32, qs:u8[16]; 22 bytes */
  QD_GGML_Q5_1 = 4, /* 32 values: d:f16, m:f16, qh:u32, qs:u8[16]; 24 bytes */
  QD_GGML_Q4_K = 5, /* 256 values: d:f16, dmin:f16, scales:u8[12], qs:u8[128]; 144 bytes */
  QD_GGML_Q6_K = 6, /* 256 values: ql:u8[128], qh:u8[64], scales:int8[16], d:f16; 210 bytes */
  QD_GGML_Q5_K = 7, /* 256 values: d:f16, dmin:f16, scales:u8[12], qh:u8[32], qs:u8[128]; 176 bytes */
  QD_GGML_Q2_K = 8, /* 256 values: scales:u8[16], qs:u8[64], d:f16, dmin:f16; 84 bytes */
  QD_GGML_Q3_K = 9, /* 256 values: hmask:u8[32], qs:u8[64], scales:u8[12], d:f16; 110 bytes */
  QD_GGML_IQ4_NL = 10, /* 32 values: d:f16, qs:u8[16]; 18 bytes */
  QD_GGML_IQ4_XS = 11, /* 256 values: d:f16, scales_h:u16, scales_l:u8[4], qs:u8[128]; 136 bytes */
} qd_ggml_type;

/* Values and bytes of one block of a qd_ggml_type; 0 for an unknown type. */
uint32_t qd_ggml_block_values(int32_t type);
uint32_t qd_ggml_block_bytes(int32_t type);

/* `blocks` consecutive blocks (qd_ggml_block_values floats each) → ggml blocks, with the
 * rounding of ggml's reference quantizers (quantize_row_*_ref, compiled without contraction):
 * never fails but for an unknown type (QD_BAD_ARGUMENT); NaN and Infinity give the bytes the
 * reference gives. */
typedef qd_status (*qd_ggml_quantize_fn)(int32_t type, const float *x, uint64_t blocks, uint8_t *out);

/* `rows` rows of ne0 values (whole blocks of the type) → ggml blocks with an importance matrix,
 * as llama-quantize's quant_weights paths (quantize_row_*_impl, quantize_iq4_*): every row
 * against the same column weights qw[ne0]; Q8_0 ignores them. An unknown type or an ne0 that is
 * not whole blocks is QD_BAD_ARGUMENT. */
typedef qd_status (*qd_ggml_quantize_weighted_fn)(int32_t type, const float *x, uint64_t rows, uint64_t ne0,
                                                  const float *qw, uint8_t *out);

/* bitsandbytes' 4-bit code books (src/core/interop/bnb.ts). */
typedef enum {
  QD_BNB_NF4 = 0,
  QD_BNB_FP4 = 1,
} qd_bnb_type;

/* n floats in blocks of `blocksize` (the last may be partial) → absmax[ceil(n / blocksize)] and
 * ceil(n / 2) bytes of 4-bit codes, high nibble first, as bitsandbytes' quantize_4bit (its CUDA
 * kernel's decision trees). NaN and ±Infinity are QD_NOT_FINITE at the first such index. */
typedef qd_status (*qd_bnb_quantize_fn)(int32_t type, const float *x, uint64_t n, uint64_t blocksize,
                                        uint8_t *packed, float *absmax, uint64_t *bad);

/* ONNX Runtime's MatMulNBits 4-bit quantizer (src/core/interop/onnx.ts): the weight [n_cols, k_len]
 * (nn.Linear's [out, in]) in blocks of block_size (a power of two ≥ 16) along k → codes
 * b[n_cols][k_blocks][block_size / 2] (low nibble first), float32 scales[n_cols · k_blocks] as the
 * scale type stores them (f16: rounded through float16), and unless sym the zero points
 * zero_points[n_cols][(k_blocks + 1) / 2]. NaN and ±Infinity: QD_NOT_FINITE at the element's
 * index; a scale whose reciprocal overflows: QD_RANGE_OVERFLOW at its index (n · k_blocks + block). */
typedef qd_status (*qd_nbits_quantize_fn)(const float *w, uint64_t n_cols, uint64_t k_len, uint64_t block_size,
                                          int32_t sym, int32_t f16, uint8_t *b, float *scales, uint8_t *zero_points,
                                          uint64_t *bad);

/* AutoAWQ's GEMM packing of round-to-nearest 4-bit groups (src/core/interop/awq.ts): weight
 * [out, in] (out a multiple of 8, group_size dividing in) → qweight uint32[in][out / 8],
 * qzeros uint32[in / group_size][out / 8] (nibble order 0 2 4 6 1 3 5 7), float16 scales
 * [in / group_size][out]. NaN and ±Infinity: QD_NOT_FINITE at the element's index; a group whose
 * float16 scale cannot re-derive its codes: QD_RANGE_OVERFLOW at r · groups + g. */
typedef qd_status (*qd_awq_quantize_fn)(const float *w, uint64_t out, uint64_t in, uint64_t group_size,
                                        uint32_t *qweight, uint32_t *qzeros, uint16_t *scales, uint64_t *bad);

/* AutoGPTQ's v1 packing of round-to-nearest groups (src/core/interop/gptq.ts): weight [out, in]
 * (both positive multiples of 32; bits 2, 4 or 8; groups of group_size input columns, the last
 * possibly shorter; Q stored as `store`: 0 float32, 1 float16, 2 bfloat16, before its code is
 * re-derived) → qweight uint32[in·bits/32][out], qzeros uint32[groups][out·bits/32] (the true
 * zero points packed, minus a 1 in every field with wrap-around), float16 scales[groups][out];
 * counts[0]: groups whose zero point is 0, counts[1]: re-derived codes clamped to [0, 2^bits − 1].
 * NaN and ±Infinity: QD_NOT_FINITE at the element's index; a group whose float16 scale is 0 or
 * infinite: QD_RANGE_OVERFLOW at r · groups + g. */
typedef qd_status (*qd_gptq_quantize_fn)(const float *w, uint64_t out, uint64_t in, uint32_t bits, uint64_t group_size,
                                         int32_t sym, int32_t store, uint32_t *qweight, uint32_t *qzeros,
                                         uint16_t *scales, uint64_t *counts, uint64_t *bad);

typedef struct {
  const char *isa;
  qd_minmax_fn minmax;
  qd_quantize_fn quantize;
  qd_dequantize_fn dequantize;
  qd_fake_quantize_fn fake_quantize;
  qd_choose_quantize_fn choose_quantize;
  qd_convert_fn f16_to_f32, bf16_to_f32, f32_to_f16, f32_to_bf16;
  qd_quality_fn quality;
  qd_choose_quantize_from_fn choose_quantize_from;
  qd_ggml_quantize_fn ggml_quantize;
  qd_ggml_quantize_weighted_fn ggml_quantize_weighted;
  qd_bnb_quantize_fn bnb_quantize;
  qd_nbits_quantize_fn nbits_quantize;
  qd_awq_quantize_fn awq_quantize;
  qd_gptq_quantize_fn gptq_quantize;
} qd_kernels;

/* Qparams of each unit from its min and max (torch determine_qparams and the per_token rules).
 * Integer zero points come back exact in `zero_point` (double holds every int32). */
qd_status qd_determine(const float *mins, const float *maxs, uint64_t n, const qd_choose *c, float *scale,
                       double *zero_point, uint64_t *bad);

/* torch.histc's counting (the histogram observer): each x in [left, right] adds 1.0f to bin
 * trunc((x - left) · bins / (right - left)), every step in float32, the last bin closed on the
 * right; values outside (NaN included) and those whose bin overflows float32 are not counted.
 * Sequential, so the float32 counts round as the TypeScript reference rounds them. */
qd_status qd_histc(const float *x, uint64_t count, float left, float right, uint32_t bins, float *hist);

/* The GPTQ algorithm's costly steps (native/src/gptq_solve.c; src/core/interop/gptq-solve.ts is
 * the oracle, float64, every sum in its order). inverse_cholesky: u (n×n) = the upper factor U of
 * H⁻¹ = UᵀU from the damped Hessian h (n×n, overwritten; lit: n×n scratch); returns -1, or the
 * column at which a factor is not positive definite. columns: the column loop on wp (W permuted,
 * [out, n], updated in place) writing codes [out, n], scale and zero [groups, out]; scratch holds
 * 2·out·(block + 1) doubles. */
int64_t qd_gptq_inverse_cholesky(double *h, uint64_t n, double *u, double *lit);
/* A calibration batch x [tokens, k] added to a layer's statistics (native/src/linear_stats.c;
 * src/core/linear-stats.ts): Σ xᵀx into hessian (k×k) and Σ |x| into abs_sum, each entry's terms
 * in token order; scratch holds qd_linear_stats_scratch(k) doubles; isa: 0 portable, 1 AVX2 (with
 * FMA, where the CPU has it), 2 AVX-512 — the same bits either way. A NaN or ±Infinity (*bad: its
 * index) changes nothing. */
qd_status qd_linear_stats_add(double *hessian, double *abs_sum, uint64_t k, const float *x, uint64_t tokens,
                              double *scratch, uint64_t *bad, int32_t isa);
uint64_t qd_linear_stats_scratch(uint64_t k);
void qd_gptq_columns(double *wp, uint64_t out, uint64_t n, const double *u, double maxq, uint64_t group_size,
                     int32_t grouped, int32_t sym, uint64_t block, uint8_t *codes, double *scale, double *zero,
                     double *scratch);
/* δ H δᵀ of each of `rows` rows of d [rows, n] (H: n×n, symmetric) into out (src/core/
 * stats-error.ts's quadraticForm, to the bit); scratch holds 32·n doubles; avx2: the CPU has it
 * (the same bits either way). */
void qd_quadratic_forms(const double *h, const double *d, uint64_t rows, uint64_t n, double *out,
                        double *scratch, int32_t avx2);
/* Y [n, out] = X [n, k] · W [out, k]ᵀ + bias (NULL: none) in float64, each output's sum in the
 * order of src/core/linear-eval.ts's linearOutput (to the bit); scratch holds 32·k doubles. */
void qd_linear_outputs(const float *x, const float *w, const float *bias, uint64_t n, uint64_t k, uint64_t out,
                       double *y, double *scratch, int32_t avx2);

/* quantize / choose_quantize on `k`'s kernels, adding the codes' quality statistics to `stats`
 * chunk by chunk, while the chunk is in cache (measured.c). */
qd_status qd_quantize_measured(const qd_kernels *k, const float *x, uint64_t start, uint64_t count,
                               const qd_layout *l, const float *scale, const float *zero_point, const qd_quant *q,
                               void *out, uint64_t *bad, qd_quality *stats);
/* choose_quantize_from composed of `k`'s plain kernels: each measured chunk of units widened into
 * scratch (half precision), chosen and quantized, then measured. */
qd_status qd_choose_quantize_chunked(const qd_kernels *k, const void *x, int32_t input, uint64_t first,
                                     uint64_t units, uint64_t unit_size, const qd_choose *c, const qd_quant *q,
                                     float *scale, double *zero_point, void *out, uint64_t *bad, qd_quality *stats,
                                     float *scratch);
/* Units per measured chunk: whole units of about 16 Ki elements, a multiple of 4 (so that packed
 * codes start on a byte), from 4 to 256. */
uint64_t qd_measured_chunk_units(uint64_t unit_size);

/* The portable scalar reference of every op family. */
extern const qd_kernels qd_kernels_ref;

/* The best table this CPU supports, or the one named ("scalar", "avx2", "avx512", "simd128");
 * NULL when the named one is not built in or not supported. */
const qd_kernels *qd_select(const char *isa);

/* Whether this build and CPU can run the named table. */
int qd_supported(const char *isa);

#ifdef __cplusplus
}
#endif

#endif
