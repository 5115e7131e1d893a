/*
 * The WebAssembly module's exports: the same kernels as the native addon, with pointers as
 * offsets into the module's memory and 64-bit counts as float64 (exact below 2^53; JavaScript
 * numbers, no BigInt). src/kernels/wasm.ts lays out the buffers in the memory.
 */
#include "../include/quantd.h"

#define EXPORT(name) __attribute__((export_name(name), visibility("default")))

extern unsigned char __heap_base;

static const qd_kernels *kernels = &qd_kernels_ref;
static uint64_t bad;

EXPORT("heap_base") uint32_t qdw_heap_base(void) { return (uint32_t)(uintptr_t)&__heap_base; }

/* The module links no libc (-nostdlib), but clang lowers the zeroing of a struct to memset, and a
 * copy loop of a length it cannot see (make_qkx2_quants' codes) to memcpy. The volatile accesses
 * keep it from turning these loops back into calls to themselves. */
void *memset(void *dst, int c, __SIZE_TYPE__ n) {
  volatile unsigned char *p = (volatile unsigned char *)dst;
  while (n--) *p++ = (unsigned char)c;
  return dst;
}

void *memcpy(void *dst, const void *src, __SIZE_TYPE__ n) {
  volatile unsigned char *p = (volatile unsigned char *)dst;
  const volatile unsigned char *q = (const volatile unsigned char *)src;
  while (n--) *p++ = *q++;
  return dst;
}

/* 1: the SIMD128 kernels, 0: the scalar reference. */
EXPORT("select") int32_t qdw_select(int32_t simd) {
  kernels = qd_select(simd ? "simd128" : "scalar");
  return kernels != 0;
}

EXPORT("last_bad") double qdw_last_bad(void) { return (double)bad; }

static qd_layout layout(double outer, double channels, double inner) {
  qd_layout l = {(uint64_t)outer, (uint64_t)channels, (uint64_t)inner};
  return l;
}

EXPORT("minmax")
int32_t qdw_minmax(const float *x, double start, double count, double outer, double channels, double inner,
                   float *mins, float *maxs) {
  qd_layout l = layout(outer, channels, inner);
  return kernels->minmax(x, (uint64_t)start, (uint64_t)count, &l, mins, maxs, &bad);
}

/* stats (5 float64: sum_sq_error, sum_sq_value, max_abs_error, clipped, count) <-> qd_quality */
static qd_quality stats_in(const double *st) {
  qd_quality acc = {st[0], st[1], st[2], (uint64_t)st[3], (uint64_t)st[4]};
  return acc;
}

static void stats_out(const qd_quality *acc, double *st) {
  st[0] = acc->sum_sq_error;
  st[1] = acc->sum_sq_value;
  st[2] = acc->max_abs_error;
  st[3] = (double)acc->clipped;
  st[4] = (double)acc->count;
}

/* stats == 0 (NULL): plain quantize; else quantize and add the codes' quality statistics */
EXPORT("quantize")
int32_t qdw_quantize(const float *x, double start, double count, double outer, double channels, double inner,
                     const float *scale, const float *zero_point, int32_t codes, int32_t qmin, int32_t qmax,
                     int32_t add_first, int32_t reject_inf, void *out, double *stats) {
  qd_layout l = layout(outer, channels, inner);
  qd_quant q = {codes, qmin, qmax, add_first, reject_inf};
  if (!stats) return kernels->quantize(x, (uint64_t)start, (uint64_t)count, &l, scale, zero_point, &q, out, &bad);
  qd_quality acc = stats_in(stats);
  qd_status s =
      qd_quantize_measured(kernels, x, (uint64_t)start, (uint64_t)count, &l, scale, zero_point, &q, out, &bad, &acc);
  stats_out(&acc, stats);
  return s;
}

EXPORT("dequantize")
int32_t qdw_dequantize(const void *codes, int32_t kind, double start, double count, double outer, double channels,
                       double inner, const float *scale, const float *zero_point, float *out) {
  qd_layout l = layout(outer, channels, inner);
  return kernels->dequantize(codes, kind, (uint64_t)start, (uint64_t)count, &l, scale, zero_point, out);
}

EXPORT("fake_quantize")
int32_t qdw_fake_quantize(const float *x, double start, double count, double outer, double channels, double inner,
                          const float *scale, const float *zero_point, int32_t qmin, int32_t qmax, int32_t float_zp,
                          float *out, uint8_t *mask) {
  qd_layout l = layout(outer, channels, inner);
  return kernels->fake_quantize(x, (uint64_t)start, (uint64_t)count, &l, scale, zero_point, qmin, qmax, float_zp,
                                out, mask, &bad);
}

/* x: `input` values (qd_input); scratch: floats for the units of a measured chunk (half input) */
EXPORT("choose_quantize")
int32_t qdw_choose_quantize(const void *x, int32_t input, double first, double units, double unit_size,
                            int32_t mode, int32_t cqmin, int32_t cqmax, float eps, int32_t symmetric_zero_point,
                            int32_t codes, int32_t qmin, int32_t qmax, int32_t add_first, int32_t reject_inf,
                            float *scale, double *zero_point, void *out, double *stats, float *scratch) {
  qd_choose c = {mode, cqmin, cqmax, eps, symmetric_zero_point};
  qd_quant q = {codes, qmin, qmax, add_first, reject_inf};
  qd_quality acc = stats ? stats_in(stats) : (qd_quality){0};
  qd_status s = kernels->choose_quantize_from(x, input, (uint64_t)first, (uint64_t)units, (uint64_t)unit_size, &c,
                                              &q, scale, zero_point, out, &bad, stats ? &acc : 0, scratch);
  if (stats) stats_out(&acc, stats);
  return s;
}

EXPORT("determine")
int32_t qdw_determine(const float *mins, const float *maxs, double n, int32_t mode, int32_t qmin, int32_t qmax,
                      float eps, int32_t symmetric_zero_point, float *scale, double *zero_point) {
  qd_choose c = {mode, qmin, qmax, eps, symmetric_zero_point};
  return qd_determine(mins, maxs, (uint64_t)n, &c, scale, zero_point, &bad);
}

EXPORT("histc")
int32_t qdw_histc(const float *x, double count, float left, float right, int32_t bins, float *hist) {
  return qd_histc(x, (uint64_t)count, left, right, (uint32_t)bins, hist);
}

/* 0 f16→f32, 1 bf16→f32, 2 f32→f16, 3 f32→bf16 */
EXPORT("convert") void qdw_convert(int32_t kind, const void *in, double n, void *out) {
  qd_convert_fn fns[4] = {kernels->f16_to_f32, kernels->bf16_to_f32, kernels->f32_to_f16, kernels->f32_to_bf16};
  if (kind >= 0 && kind < 4) fns[kind](in, (uint64_t)n, out);
}

/* stats: 5 float64 [sum_sq_error, sum_sq_value, max_abs_error, clipped, count], accumulated */
EXPORT("quality")
int32_t qdw_quality(const float *x, const void *codes, double start, double count, double outer, double channels,
                    double inner, const float *scale, const float *zero_point, int32_t kind, int32_t qmin, int32_t qmax,
                    int32_t add_first, int32_t reject_inf, double *stats) {
  qd_layout l = layout(outer, channels, inner);
  qd_quant q = {kind, qmin, qmax, add_first, reject_inf};
  qd_quality acc = stats_in(stats);
  qd_status s = kernels->quality(x, codes, (uint64_t)start, (uint64_t)count, &l, scale, zero_point, &q, &acc);
  stats_out(&acc, stats);
  return s;
}

/* x: `blocks` × qd_ggml_block_values(type) floats → ggml blocks (qd_ggml_type) at out */
EXPORT("ggml_quantize")
int32_t qdw_ggml_quantize(int32_t type, const float *x, double blocks, uint8_t *out) {
  return kernels->ggml_quantize(type, x, (uint64_t)blocks, out);
}

/* rows × ne0 floats, each row against the column weights qw[ne0] → ggml blocks at out */
EXPORT("ggml_quantize_weighted")
int32_t qdw_ggml_quantize_weighted(int32_t type, const float *x, double rows, double ne0, const float *qw,
                                   uint8_t *out) {
  return kernels->ggml_quantize_weighted(type, x, (uint64_t)rows, (uint64_t)ne0, qw, out);
}

/* n floats in blocks of `blocksize` → ceil(n / 2) packed bytes and ceil(n / blocksize) absmax */
EXPORT("bnb_quantize")
int32_t qdw_bnb_quantize(int32_t type, const float *x, double n, double blocksize, uint8_t *packed, float *absmax) {
  return kernels->bnb_quantize(type, x, (uint64_t)n, (uint64_t)blocksize, packed, absmax, &bad);
}

/* MatMulNBits: w [n_cols, k_len] → b, float32 scales as stored, zero points unless sym */
EXPORT("nbits_quantize")
int32_t qdw_nbits_quantize(const float *w, double n_cols, double k_len, double block_size, int32_t sym, int32_t f16,
                           uint8_t *b, float *scales, uint8_t *zero_points) {
  return kernels->nbits_quantize(w, (uint64_t)n_cols, (uint64_t)k_len, (uint64_t)block_size, sym, f16, b, scales,
                                 zero_points, &bad);
}

/* AutoAWQ's GEMM tensors of w [out, in] */
EXPORT("awq_quantize")
int32_t qdw_awq_quantize(const float *w, double out, double in, double group_size, uint32_t *qweight, uint32_t *qzeros,
                         uint16_t *scales) {
  return kernels->awq_quantize(w, (uint64_t)out, (uint64_t)in, (uint64_t)group_size, qweight, qzeros, scales, &bad);
}

/* AutoGPTQ's v1 tensors of w [out, in]; counts_out: groups with zero point 0, clamped codes */
EXPORT("gptq_quantize")
int32_t qdw_gptq_quantize(const float *w, double out, double in, int32_t bits, double group_size, int32_t sym,
                          int32_t store, uint32_t *qweight, uint32_t *qzeros, uint16_t *scales, double *counts_out) {
  uint64_t n[2] = {0, 0};
  int32_t s = kernels->gptq_quantize(w, (uint64_t)out, (uint64_t)in, (uint32_t)bits, (uint64_t)group_size, sym, store,
                                     qweight, qzeros, scales, n, &bad);
  counts_out[0] = (double)n[0];
  counts_out[1] = (double)n[1];
  return s;
}
