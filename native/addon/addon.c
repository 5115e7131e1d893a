/*
 * The N-API addon: one JavaScript function per kernel op, each a thin wrapper that reads typed
 * arrays (no copies: the kernels work in the arrays' own memory) and numbers, calls the selected
 * dispatch table and returns the kernel's status. The index of a rejected element is kept per
 * thread and read with lastBad(). Shapes of the arguments are checked in src/kernels/native.ts;
 * here only what could corrupt memory is checked again (array lengths against the counts).
 */
#define NAPI_VERSION 8
#include <node_api.h>
#include <string.h>
#include <stdint.h>

#include "../include/quantd.h"
#include "../src/common.h"

/* Each bound object carries its own table (the functions' data pointer), so modules of
 * different ISAs can live side by side in one thread; the rejected index is per thread. */
static _Thread_local double last_bad = -1;

#define CHECK_NAPI(call)                                                                                          \
  do {                                                                                                          \
    if ((call) != napi_ok) return throw_error(env, "quantd addon: bad argument");                               \
  } while (0)

static napi_value throw_error(napi_env env, const char *message) {
  napi_throw_type_error(env, NULL, message);
  return NULL;
}

static napi_value number(napi_env env, double v) {
  napi_value out;
  napi_create_double(env, v, &out);
  return out;
}

typedef struct {
  void *data;
  size_t bytes;
} view;

static int get_view(napi_env env, napi_value v, view *out) {
  napi_typedarray_type type;
  size_t length, offset;
  napi_value buffer;
  void *data;
  if (napi_get_typedarray_info(env, v, &type, &length, &data, &buffer, &offset) != napi_ok) return 0;
  size_t size = 1;
  switch (type) {
  case napi_int16_array:
  case napi_uint16_array:
    size = 2;
    break;
  case napi_int32_array:
  case napi_uint32_array:
  case napi_float32_array:
    size = 4;
    break;
  case napi_float64_array:
  case napi_bigint64_array:
  case napi_biguint64_array:
    size = 8;
    break;
  default:
    size = 1;
  }
  out->data = data;
  out->bytes = length * size;
  return 1;
}

static int get_u64(napi_env env, napi_value v, uint64_t *out) {
  double d;
  if (napi_get_value_double(env, v, &d) != napi_ok || !(d >= 0) || d > 9007199254740992.0) return 0;
  *out = (uint64_t)d;
  return 1;
}

static int get_i32(napi_env env, napi_value v, int32_t *out) { return napi_get_value_int32(env, v, out) == napi_ok; }

static int get_f32(napi_env env, napi_value v, float *out) {
  double d;
  if (napi_get_value_double(env, v, &d) != napi_ok) return 0;
  *out = (float)d;
  return 1;
}

/* Up to n arguments (argc says how many came), and the kernel table the function is bound to. */
#define ARGS_UPTO(n)                                                                                            \
  size_t argc = n;                                                                                              \
  napi_value argv[n];                                                                                           \
  void *data = NULL;                                                                                            \
  CHECK_NAPI(napi_get_cb_info(env, info, &argc, argv, NULL, &data));                                            \
  const qd_kernels *kernels = data ? (const qd_kernels *)data : &qd_kernels_ref;                                \
  (void)kernels

/* Exactly n arguments. */
#define ARGS(n)                                                                                                 \
  ARGS_UPTO(n);                                                                                                 \
  if (argc != n) return throw_error(env, "quantd addon: wrong number of arguments")

static int layout_of(napi_env env, napi_value *argv, qd_layout *l) {
  return get_u64(env, argv[0], &l->outer) && get_u64(env, argv[1], &l->channels) &&
         get_u64(env, argv[2], &l->inner);
}

static napi_value status_of(napi_env env, qd_status s, uint64_t bad) {
  last_bad = s == QD_OK ? -1 : (double)bad;
  return number(env, (double)s);
}

static napi_value js_last_bad(napi_env env, napi_callback_info info) {
  (void)info;
  return number(env, last_bad);
}

/* minmax(x, start, outer, channels, inner, mins, maxs) */
static napi_value js_minmax(napi_env env, napi_callback_info info) {
  ARGS(7);
  view x, mins, maxs;
  uint64_t start, bad = 0;
  qd_layout l;
  if (!get_view(env, argv[0], &x) || !get_u64(env, argv[1], &start) || !layout_of(env, argv + 2, &l) ||
      !get_view(env, argv[5], &mins) || !get_view(env, argv[6], &maxs))
    return throw_error(env, "quantd addon: minmax arguments");
  if (mins.bytes < l.channels * 4 || maxs.bytes < l.channels * 4) return throw_error(env, "quantd addon: minmax sizes");
  qd_status s = kernels->minmax(x.data, start, x.bytes / 4, &l, mins.data, maxs.data, &bad);
  return status_of(env, s, bad); /* after the call: argument order is unspecified */
}

static int quant_of(napi_env env, napi_value *argv, qd_quant *q) {
  return get_i32(env, argv[0], &q->codes) && get_i32(env, argv[1], &q->qmin) && get_i32(env, argv[2], &q->qmax) &&
         get_i32(env, argv[3], &q->add_zero_point_first) && get_i32(env, argv[4], &q->reject_infinity);
}

/* quantize(x, start, outer, channels, inner, scale, zp, codes, qmin, qmax, addFirst, rejectInf, out) */
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

/* quantize(x, start, outer, channels, inner, scale, zp, codes, qmin, qmax, addFirst, rejectInf, out)
 * quantizeMeasured(... out, stats): the same, adding the codes' quality statistics to stats */
static napi_value quantize_with(napi_env env, napi_callback_info info, int measured) {
  ARGS_UPTO(14);
  view x, scale, zp, out, stats = {0};
  uint64_t start, bad = 0;
  qd_layout l;
  qd_quant q;
  if (argc != (size_t)(13 + measured) || !get_view(env, argv[0], &x) || !get_u64(env, argv[1], &start) ||
      !layout_of(env, argv + 2, &l) || !get_view(env, argv[5], &scale) || !get_view(env, argv[6], &zp) ||
      !quant_of(env, argv + 7, &q) || !get_view(env, argv[12], &out) ||
      (measured && (!get_view(env, argv[13], &stats) || stats.bytes < 5 * 8)))
    return throw_error(env, "quantd addon: quantize arguments");
  uint64_t count = x.bytes / 4;
  if (scale.bytes < l.channels * 4 || zp.bytes < l.channels * 4 || out.bytes < qd_code_bytes(q.codes, count))
    return throw_error(env, "quantd addon: quantize sizes");
  if (!measured) {
    qd_status s = kernels->quantize(x.data, start, count, &l, scale.data, zp.data, &q, out.data, &bad);
    return status_of(env, s, bad); /* after the call: argument order is unspecified */
  }
  qd_quality acc = stats_in(stats.data);
  qd_status s = qd_quantize_measured(kernels, x.data, start, count, &l, scale.data, zp.data, &q, out.data, &bad, &acc);
  stats_out(&acc, stats.data);
  return status_of(env, s, bad);
}

static napi_value js_quantize(napi_env env, napi_callback_info info) { return quantize_with(env, info, 0); }
static napi_value js_quantize_measured(napi_env env, napi_callback_info info) { return quantize_with(env, info, 1); }

/* dequantize(codes, kind, start, count, outer, channels, inner, scale, zp, out) */
static napi_value js_dequantize(napi_env env, napi_callback_info info) {
  ARGS(10);
  view codes, scale, zp, out;
  int32_t kind;
  uint64_t start, count;
  qd_layout l;
  if (!get_view(env, argv[0], &codes) || !get_i32(env, argv[1], &kind) || !get_u64(env, argv[2], &start) ||
      !get_u64(env, argv[3], &count) || !layout_of(env, argv + 4, &l) || !get_view(env, argv[7], &scale) ||
      !get_view(env, argv[8], &zp) || !get_view(env, argv[9], &out))
    return throw_error(env, "quantd addon: dequantize arguments");
  if (scale.bytes < l.channels * 4 || zp.bytes < l.channels * 4 || out.bytes < count * 4 ||
      codes.bytes < qd_code_bytes(kind, count))
    return throw_error(env, "quantd addon: dequantize sizes");
  return status_of(env, kernels->dequantize(codes.data, kind, start, count, &l, scale.data, zp.data, out.data), 0);
}

/* fakeQuantize(x, start, outer, channels, inner, scale, zp, qmin, qmax, floatZp, out, mask) */
static napi_value js_fake_quantize(napi_env env, napi_callback_info info) {
  ARGS(12);
  view x, scale, zp, out, mask;
  uint64_t start, bad = 0;
  int32_t qmin, qmax, float_zp;
  qd_layout l;
  if (!get_view(env, argv[0], &x) || !get_u64(env, argv[1], &start) || !layout_of(env, argv + 2, &l) ||
      !get_view(env, argv[5], &scale) || !get_view(env, argv[6], &zp) || !get_i32(env, argv[7], &qmin) ||
      !get_i32(env, argv[8], &qmax) || !get_i32(env, argv[9], &float_zp) || !get_view(env, argv[10], &out) ||
      !get_view(env, argv[11], &mask))
    return throw_error(env, "quantd addon: fakeQuantize arguments");
  uint64_t count = x.bytes / 4;
  if (scale.bytes < l.channels * 4 || zp.bytes < l.channels * 4 || out.bytes < count * 4 || mask.bytes < count)
    return throw_error(env, "quantd addon: fakeQuantize sizes");
  qd_status s = kernels->fake_quantize(x.data, start, count, &l, scale.data, zp.data, qmin, qmax, float_zp, out.data,
                                       mask.data, &bad);
  return status_of(env, s, bad); /* after the call: argument order is unspecified */
}

static int choose_of(napi_env env, napi_value *argv, qd_choose *c) {
  return get_i32(env, argv[0], &c->mode) && get_i32(env, argv[1], &c->qmin) && get_i32(env, argv[2], &c->qmax) &&
         get_f32(env, argv[3], &c->eps) && get_i32(env, argv[4], &c->symmetric_zero_point);
}

/* A typed array, or null (data NULL, no bytes). */
static int get_optional_view(napi_env env, napi_value v, view *out) {
  napi_valuetype type;
  if (napi_typeof(env, v, &type) != napi_ok) return 0;
  if (type == napi_null) {
    out->data = NULL;
    out->bytes = 0;
    return 1;
  }
  return get_view(env, v, out);
}

/* chooseQuantize(x, input, first, unitSize, mode, qmin, qmax, eps, symZp, codes, qmin, qmax, addFirst,
 *                rejectInf, scale, zp, out, stats, scratch): x holds `input` values (qd_input); stats
 *                (5 float64, added to) and scratch (floats for a measured chunk of half-precision
 *                units) may be null */
static napi_value js_choose_quantize(napi_env env, napi_callback_info info) {
  ARGS_UPTO(19);
  view x, scale, zp, out, stats = {0}, scratch = {0};
  uint64_t first, unit, bad = 0;
  int32_t input;
  qd_choose c;
  qd_quant q;
  if (argc != 19 || !get_view(env, argv[0], &x) || !get_i32(env, argv[1], &input) || !get_u64(env, argv[2], &first) ||
      !get_u64(env, argv[3], &unit) || !choose_of(env, argv + 4, &c) || !quant_of(env, argv + 9, &q) ||
      !get_view(env, argv[14], &scale) || !get_view(env, argv[15], &zp) || !get_view(env, argv[16], &out) ||
      !get_optional_view(env, argv[17], &stats) || !get_optional_view(env, argv[18], &scratch) || unit == 0 ||
      input < QD_INPUT_F32 || input > QD_INPUT_BF16)
    return throw_error(env, "quantd addon: chooseQuantize arguments");
  const uint64_t units = x.bytes / (input == QD_INPUT_F32 ? 4 : 2) / unit;
  if (scale.bytes < units * 4 || zp.bytes < units * 8 || out.bytes < qd_code_bytes(q.codes, units * unit) ||
      (stats.data && stats.bytes < 5 * 8) ||
      (input != QD_INPUT_F32 && scratch.bytes < qd_measured_chunk_units(unit) * unit * 4))
    return throw_error(env, "quantd addon: chooseQuantize sizes");
  qd_quality acc = stats.data ? stats_in(stats.data) : (qd_quality){0};
  qd_status s = kernels->choose_quantize_from(x.data, input, first, units, unit, &c, &q, scale.data, zp.data,
                                              out.data, &bad, stats.data ? &acc : NULL, scratch.data);
  if (stats.data) stats_out(&acc, stats.data);
  return status_of(env, s, bad); /* after the call: argument order is unspecified */
}

/* determine(mins, maxs, mode, qmin, qmax, eps, symZp, scale, zp) */
static napi_value js_determine(napi_env env, napi_callback_info info) {
  ARGS(9);
  view mins, maxs, scale, zp;
  qd_choose c;
  uint64_t bad = 0;
  if (!get_view(env, argv[0], &mins) || !get_view(env, argv[1], &maxs) || !choose_of(env, argv + 2, &c) ||
      !get_view(env, argv[7], &scale) || !get_view(env, argv[8], &zp))
    return throw_error(env, "quantd addon: determine arguments");
  uint64_t n = mins.bytes / 4;
  if (maxs.bytes < n * 4 || scale.bytes < n * 4 || zp.bytes < n * 8) return throw_error(env, "quantd addon: determine sizes");
  qd_status s = qd_determine(mins.data, maxs.data, n, &c, scale.data, zp.data, &bad);
  return status_of(env, s, bad); /* after the call: argument order is unspecified */
}

/* histc(x, left, right, hist): torch.histc's counting into hist (its length is the bins) */
static napi_value js_histc(napi_env env, napi_callback_info info) {
  ARGS(4);
  view x, hist;
  float left, right;
  if (!get_view(env, argv[0], &x) || !get_f32(env, argv[1], &left) || !get_f32(env, argv[2], &right) ||
      !get_view(env, argv[3], &hist) || hist.bytes < 4 || hist.bytes / 4 > 0xffffffffu)
    return throw_error(env, "quantd addon: histc arguments");
  return status_of(env, qd_histc(x.data, x.bytes / 4, left, right, (uint32_t)(hist.bytes / 4), hist.data), 0);
}

/* convert(kind, in, out): 0 f16→f32, 1 bf16→f32, 2 f32→f16, 3 f32→bf16; n from the input */
static napi_value js_convert(napi_env env, napi_callback_info info) {
  ARGS(3);
  int32_t kind;
  view in, out;
  if (!get_i32(env, argv[0], &kind) || !get_view(env, argv[1], &in) || !get_view(env, argv[2], &out) || kind < 0 ||
      kind > 3)
    return throw_error(env, "quantd addon: convert arguments");
  uint64_t n = kind < 2 ? in.bytes / 2 : in.bytes / 4;
  if (out.bytes < (kind < 2 ? n * 4 : n * 2)) return throw_error(env, "quantd addon: convert sizes");
  qd_convert_fn fns[4] = {kernels->f16_to_f32, kernels->bf16_to_f32, kernels->f32_to_f16, kernels->f32_to_bf16};
  fns[kind](in.data, n, out.data);
  return number(env, 0);
}

/* quality(x, codes, start, outer, channels, inner, scale, zp, codes, qmin, qmax, addFirst, rejectInf, stats)
 * stats: Float64Array(5) [sum_sq_error, sum_sq_value, max_abs_error, clipped, count], accumulated */
static napi_value js_quality(napi_env env, napi_callback_info info) {
  ARGS(14);
  view x, codes, scale, zp, stats;
  uint64_t start;
  qd_layout l;
  qd_quant q;
  if (!get_view(env, argv[0], &x) || !get_view(env, argv[1], &codes) || !get_u64(env, argv[2], &start) ||
      !layout_of(env, argv + 3, &l) || !get_view(env, argv[6], &scale) || !get_view(env, argv[7], &zp) ||
      !quant_of(env, argv + 8, &q) || !get_view(env, argv[13], &stats))
    return throw_error(env, "quantd addon: quality arguments");
  uint64_t count = x.bytes / 4;
  if (scale.bytes < l.channels * 4 || zp.bytes < l.channels * 4 || codes.bytes < qd_code_bytes(q.codes, count) ||
      stats.bytes < 5 * 8)
    return throw_error(env, "quantd addon: quality sizes");
  qd_quality acc = stats_in(stats.data);
  qd_status s = kernels->quality(x.data, codes.data, start, count, &l, scale.data, zp.data, &q, &acc);
  stats_out(&acc, stats.data);
  return status_of(env, s, 0);
}

/* ggmlQuantize(type, x, out): x.length / qd_ggml_block_values(type) ggml blocks of
 * qd_ggml_block_bytes(type) bytes each */
static napi_value js_ggml_quantize(napi_env env, napi_callback_info info) {
  ARGS(3);
  int32_t type;
  view x, out;
  if (!get_i32(env, argv[0], &type) || !get_view(env, argv[1], &x) || !get_view(env, argv[2], &out))
    return throw_error(env, "quantd addon: ggmlQuantize arguments");
  if (qd_ggml_block_values(type) == 0) return status_of(env, QD_BAD_ARGUMENT, 0); /* as the kernel says */
  const uint64_t values = qd_ggml_block_values(type), blocks = x.bytes / (4 * values);
  if (x.bytes % (4 * values) != 0 || out.bytes < blocks * qd_ggml_block_bytes(type))
    return throw_error(env, "quantd addon: ggmlQuantize sizes");
  return status_of(env, kernels->ggml_quantize(type, x.data, blocks, out.data), 0);
}

/* ggmlQuantizeWeighted(type, x, ne0, qw, out): rows of ne0 floats, each against the column
 * weights qw[ne0] (an importance matrix), → ggml blocks of qd_ggml_block_bytes(type) */
static napi_value js_ggml_quantize_weighted(napi_env env, napi_callback_info info) {
  ARGS(5);
  int32_t type;
  uint64_t ne0;
  view x, qw, out;
  if (!get_i32(env, argv[0], &type) || !get_view(env, argv[1], &x) || !get_u64(env, argv[2], &ne0) ||
      !get_view(env, argv[3], &qw) || !get_view(env, argv[4], &out))
    return throw_error(env, "quantd addon: ggmlQuantizeWeighted arguments");
  if (qd_ggml_block_bytes(type) == 0 || ne0 == 0 || ne0 % qd_ggml_block_values(type) != 0)
    return status_of(env, QD_BAD_ARGUMENT, 0); /* as the kernel says */
  const uint64_t rows = x.bytes / (4 * ne0), blocks = ne0 / qd_ggml_block_values(type);
  if (x.bytes % (4 * ne0) != 0 || qw.bytes < 4 * ne0 || out.bytes < rows * blocks * qd_ggml_block_bytes(type))
    return throw_error(env, "quantd addon: ggmlQuantizeWeighted sizes");
  return status_of(env, kernels->ggml_quantize_weighted(type, x.data, rows, ne0, qw.data, out.data), 0);
}

/* bnbQuantize(type, x, blocksize, packed, absmax): x.length floats → ceil(n / 2) packed bytes and
 * ceil(n / blocksize) float32 absmax */
static napi_value js_bnb_quantize(napi_env env, napi_callback_info info) {
  ARGS(5);
  int32_t type;
  view x, packed, absmax;
  uint64_t blocksize, bad = 0;
  if (!get_i32(env, argv[0], &type) || !get_view(env, argv[1], &x) || !get_u64(env, argv[2], &blocksize) ||
      !get_view(env, argv[3], &packed) || !get_view(env, argv[4], &absmax))
    return throw_error(env, "quantd addon: bnbQuantize arguments");
  const uint64_t n = x.bytes / 4;
  if (blocksize == 0) return status_of(env, QD_BAD_ARGUMENT, 0); /* as the kernel says */
  if (packed.bytes < (n + 1) / 2 || absmax.bytes < 4 * ((n + blocksize - 1) / blocksize))
    return throw_error(env, "quantd addon: bnbQuantize sizes");
  qd_status s = kernels->bnb_quantize(type, x.data, n, blocksize, packed.data, absmax.data, &bad);
  return status_of(env, s, bad); /* after the call: argument order is unspecified */
}

/* nbitsQuantize(w, nCols, kLen, blockSize, sym, f16, b, scales, zeroPoints): MatMulNBits' B, the
 * float32 scales as stored, and (unless sym) the zero points of w [nCols, kLen] */
static napi_value js_nbits_quantize(napi_env env, napi_callback_info info) {
  ARGS(9);
  view w, b, scales, zps;
  uint64_t n_cols, k_len, block_size, bad = 0;
  int32_t sym, f16;
  if (!get_view(env, argv[0], &w) || !get_u64(env, argv[1], &n_cols) || !get_u64(env, argv[2], &k_len) ||
      !get_u64(env, argv[3], &block_size) || !get_i32(env, argv[4], &sym) || !get_i32(env, argv[5], &f16) ||
      !get_view(env, argv[6], &b) || !get_view(env, argv[7], &scales) || !get_view(env, argv[8], &zps))
    return throw_error(env, "quantd addon: nbitsQuantize arguments");
  if (block_size < 16 || (block_size & (block_size - 1)) != 0) return status_of(env, QD_BAD_ARGUMENT, 0);
  const uint64_t k_blocks = (k_len + block_size - 1) / block_size;
  if (w.bytes < 4 * n_cols * k_len || b.bytes < n_cols * k_blocks * (block_size / 2) ||
      scales.bytes < 4 * n_cols * k_blocks || (!sym && zps.bytes < n_cols * ((k_blocks + 1) / 2)))
    return throw_error(env, "quantd addon: nbitsQuantize sizes");
  qd_status s = kernels->nbits_quantize(w.data, n_cols, k_len, block_size, sym, f16, b.data, scales.data, zps.data, &bad);
  return status_of(env, s, bad); /* after the call: argument order is unspecified */
}

/* awqQuantize(w, out, in, groupSize, qweight, qzeros, scales): AutoAWQ's GEMM tensors of w [out, in] */
static napi_value js_awq_quantize(napi_env env, napi_callback_info info) {
  ARGS(7);
  view w, qweight, qzeros, scales;
  uint64_t out, in, group_size, bad = 0;
  if (!get_view(env, argv[0], &w) || !get_u64(env, argv[1], &out) || !get_u64(env, argv[2], &in) ||
      !get_u64(env, argv[3], &group_size) || !get_view(env, argv[4], &qweight) || !get_view(env, argv[5], &qzeros) ||
      !get_view(env, argv[6], &scales))
    return throw_error(env, "quantd addon: awqQuantize arguments");
  if (out == 0 || in == 0 || out % 8 != 0 || group_size == 0 || in % group_size != 0)
    return status_of(env, QD_BAD_ARGUMENT, 0);
  const uint64_t groups = in / group_size;
  if (w.bytes < 4 * out * in || qweight.bytes < in * (out / 8) * 4 || qzeros.bytes < groups * (out / 8) * 4 ||
      scales.bytes < groups * out * 2)
    return throw_error(env, "quantd addon: awqQuantize sizes");
  qd_status s = kernels->awq_quantize(w.data, out, in, group_size, qweight.data, qzeros.data, scales.data, &bad);
  return status_of(env, s, bad); /* after the call: argument order is unspecified */
}

/* gptqQuantize(w, out, in, bits, groupSize, sym, store, qweight, qzeros, scales, counts): AutoGPTQ's
 * v1 tensors of w [out, in]; counts (Float64Array of 2) gets groups with zero point 0, clamped codes */
static napi_value js_gptq_quantize(napi_env env, napi_callback_info info) {
  ARGS(11);
  view w, qweight, qzeros, scales, counts;
  uint64_t out, in, bits, group_size, bad = 0, n[2] = {0, 0};
  int32_t sym, store;
  if (!get_view(env, argv[0], &w) || !get_u64(env, argv[1], &out) || !get_u64(env, argv[2], &in) ||
      !get_u64(env, argv[3], &bits) || !get_u64(env, argv[4], &group_size) || !get_i32(env, argv[5], &sym) ||
      !get_i32(env, argv[6], &store) || !get_view(env, argv[7], &qweight) || !get_view(env, argv[8], &qzeros) ||
      !get_view(env, argv[9], &scales) || !get_view(env, argv[10], &counts))
    return throw_error(env, "quantd addon: gptqQuantize arguments");
  if (out == 0 || in == 0 || out % 32 != 0 || in % 32 != 0 || group_size == 0 || (bits != 2 && bits != 4 && bits != 8))
    return status_of(env, QD_BAD_ARGUMENT, 0);
  const uint64_t groups = (in + group_size - 1) / group_size;
  if (w.bytes < 4 * out * in || qweight.bytes < in * bits / 32 * out * 4 || qzeros.bytes < groups * (out * bits / 32) * 4 ||
      scales.bytes < groups * out * 2 || counts.bytes < 2 * sizeof(double))
    return throw_error(env, "quantd addon: gptqQuantize sizes");
  qd_status s = kernels->gptq_quantize(w.data, out, in, (uint32_t)bits, group_size, sym, store, qweight.data,
                                       qzeros.data, scales.data, n, &bad);
  ((double *)counts.data)[0] = (double)n[0];
  ((double *)counts.data)[1] = (double)n[1];
  return status_of(env, s, bad); /* after the call: argument order is unspecified */
}

/* gptqInverseCholesky(h, n, u, lit) -> -1, or the column where a factor failed (qd_gptq_inverse_cholesky) */
static napi_value js_gptq_inverse_cholesky(napi_env env, napi_callback_info info) {
  ARGS(4);
  view h, u, lit;
  uint64_t n;
  if (!get_view(env, argv[0], &h) || !get_u64(env, argv[1], &n) || !get_view(env, argv[2], &u) ||
      !get_view(env, argv[3], &lit) || n == 0 || h.bytes < n * n * 8 || u.bytes < n * n * 8 || lit.bytes < n * n * 8)
    return throw_error(env, "quantd addon: gptqInverseCholesky arguments");
  napi_value result;
  CHECK_NAPI(napi_create_double(env, (double)qd_gptq_inverse_cholesky(h.data, n, u.data, lit.data), &result));
  return result;
}

/* The float64 kernels' vector paths the bound table allows: 2 AVX-512, 1 AVX2, 0 portable. */
static int32_t vector_level(const qd_kernels *k) {
  return strcmp(k->isa, "avx512") == 0 ? 2 : strcmp(k->isa, "avx2") == 0 ? 1 : 0;
}

/* linearStatsAdd(hessian, absSum, k, x, scratch): qd_linear_stats_add, in place, on the bound
 * table's vector path */
static napi_value js_linear_stats_add(napi_env env, napi_callback_info info) {
  ARGS(5);
  view h, a, x, scratch;
  uint64_t k, bad = 0;
  if (!get_view(env, argv[0], &h) || !get_view(env, argv[1], &a) || !get_u64(env, argv[2], &k) ||
      !get_view(env, argv[3], &x) || !get_view(env, argv[4], &scratch) || k == 0 || k > (1u << 20) ||
      h.bytes / 8 / k < k || a.bytes < k * 8 || (x.bytes / 4) % k != 0 ||
      scratch.bytes / 8 < qd_linear_stats_scratch(k))
    return throw_error(env, "quantd addon: linearStatsAdd arguments");
  qd_status s =
      qd_linear_stats_add(h.data, a.data, k, x.data, x.bytes / 4 / k, scratch.data, &bad, vector_level(kernels));
  return status_of(env, s, bad);
}

/* linearStatsScratch(k) -> the doubles of scratch linearStatsAdd needs */
static napi_value js_linear_stats_scratch(napi_env env, napi_callback_info info) {
  ARGS(1);
  uint64_t k;
  if (!get_u64(env, argv[0], &k) || k == 0 || k > (1u << 20))
    return throw_error(env, "quantd addon: linearStatsScratch arguments");
  napi_value result;
  CHECK_NAPI(napi_create_double(env, (double)qd_linear_stats_scratch(k), &result));
  return result;
}

/* gptqColumns(wp, out, n, u, maxq, groupSize, grouped, sym, block, codes, scale, zero, scratch) */
static napi_value js_gptq_columns(napi_env env, napi_callback_info info) {
  ARGS(13);
  view wp, u, codes, scale, zero, scratch;
  uint64_t out, n, maxq, group_size, block;
  int32_t grouped, sym;
  if (!get_view(env, argv[0], &wp) || !get_u64(env, argv[1], &out) || !get_u64(env, argv[2], &n) ||
      !get_view(env, argv[3], &u) || !get_u64(env, argv[4], &maxq) || !get_u64(env, argv[5], &group_size) ||
      !get_i32(env, argv[6], &grouped) || !get_i32(env, argv[7], &sym) || !get_u64(env, argv[8], &block) ||
      !get_view(env, argv[9], &codes) || !get_view(env, argv[10], &scale) || !get_view(env, argv[11], &zero) ||
      !get_view(env, argv[12], &scratch))
    return throw_error(env, "quantd addon: gptqColumns arguments");
  const uint64_t groups = group_size == 0 ? 0 : (n + group_size - 1) / group_size;
  if (out == 0 || n == 0 || block == 0 || group_size == 0 || maxq == 0 || maxq > 255 || wp.bytes < out * n * 8 ||
      u.bytes < n * n * 8 || codes.bytes < out * n || scale.bytes < groups * out * 8 || zero.bytes < groups * out * 8 ||
      scratch.bytes < 2 * out * (block + 1) * 8)
    return throw_error(env, "quantd addon: gptqColumns sizes");
  qd_gptq_columns(wp.data, out, n, u.data, (double)maxq, group_size, grouped, sym, block, codes.data, scale.data,
                  zero.data, scratch.data);
  return NULL;
}

/* Whether the bound table is an AVX2 or AVX-512 one: the float64 kernels' AVX2 paths may run. */
static int32_t has_avx2(const qd_kernels *k) {
  return strcmp(k->isa, "avx2") == 0 || strcmp(k->isa, "avx512") == 0;
}

/* quadraticForms(h, d, rows, n, out, scratch): qd_quadratic_forms, δ H δᵀ of each row of d, with
 * AVX2 where the bound table is an AVX2 or AVX-512 one */
static napi_value js_quadratic_forms(napi_env env, napi_callback_info info) {
  ARGS(6);
  const int32_t avx2 = has_avx2(kernels);
  view h, d, out, scratch;
  uint64_t rows, n;
  if (!get_view(env, argv[0], &h) || !get_view(env, argv[1], &d) || !get_u64(env, argv[2], &rows) ||
      !get_u64(env, argv[3], &n) || !get_view(env, argv[4], &out) || !get_view(env, argv[5], &scratch) || n == 0 ||
      h.bytes < n * n * 8 || d.bytes < rows * n * 8 || out.bytes < rows * 8 || scratch.bytes < 32 * n * 8)
    return throw_error(env, "quantd addon: quadraticForms arguments");
  qd_quadratic_forms(h.data, d.data, rows, n, out.data, scratch.data, avx2);
  return NULL;
}

/* linearOutputs(x, w, bias | null, n, k, out, y, scratch): qd_linear_outputs, Y = X·Wᵀ + b */
static napi_value js_linear_outputs(napi_env env, napi_callback_info info) {
  ARGS(8);
  const int32_t avx2 = has_avx2(kernels);
  view x, w, bias = {NULL, 0}, y, scratch;
  uint64_t n, k, out;
  napi_valuetype bias_type;
  CHECK_NAPI(napi_typeof(env, argv[2], &bias_type));
  if (!get_view(env, argv[0], &x) || !get_view(env, argv[1], &w) ||
      (bias_type != napi_null && !get_view(env, argv[2], &bias)) || !get_u64(env, argv[3], &n) ||
      !get_u64(env, argv[4], &k) || !get_u64(env, argv[5], &out) || !get_view(env, argv[6], &y) ||
      !get_view(env, argv[7], &scratch) || k == 0 || x.bytes < n * k * 4 || w.bytes < out * k * 4 ||
      (bias.data != NULL && bias.bytes < out * 4) || y.bytes < n * out * 8 || scratch.bytes < 32 * k * 8)
    return throw_error(env, "quantd addon: linearOutputs arguments");
  qd_linear_outputs(x.data, w.data, bias.data, n, k, out, y.data, scratch.data, avx2);
  return NULL;
}

typedef napi_value (*js_fn)(napi_env, napi_callback_info);

#ifdef __linux__
/* sockets.c */
napi_value qd_js_discard_received(napi_env env, napi_callback_info info);
napi_value qd_js_duplicate_descriptor(napi_env env, napi_callback_info info);
#endif

/* bind(isa: string) -> an object of kernel functions on that ISA's table, or null when the CPU
 * lacks it ("" = the best one); its `isa` property names the table. */
static napi_value js_bind(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  CHECK_NAPI(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  char isa[32] = "";
  size_t len;
  if (argc >= 1) CHECK_NAPI(napi_get_value_string_utf8(env, argv[0], isa, sizeof isa, &len));
  const qd_kernels *k = qd_select(isa);
  napi_value out;
  if (k == NULL) {
    napi_get_null(env, &out);
    return out;
  }
  static const struct {
    const char *name;
    js_fn fn;
  } fns[] = {
      {"minmax", js_minmax},       {"quantize", js_quantize},     {"dequantize", js_dequantize},
      {"fakeQuantize", js_fake_quantize}, {"chooseQuantize", js_choose_quantize}, {"determine", js_determine}, {"histc", js_histc},
      {"convert", js_convert}, {"quality", js_quality}, {"quantizeMeasured", js_quantize_measured},
      {"ggmlQuantize", js_ggml_quantize},
      {"ggmlQuantizeWeighted", js_ggml_quantize_weighted},
      {"bnbQuantize", js_bnb_quantize}, {"nbitsQuantize", js_nbits_quantize},
      {"awqQuantize", js_awq_quantize}, {"gptqQuantize", js_gptq_quantize},
      {"gptqInverseCholesky", js_gptq_inverse_cholesky}, {"gptqColumns", js_gptq_columns},
      {"linearStatsAdd", js_linear_stats_add}, {"linearStatsScratch", js_linear_stats_scratch},
      {"quadraticForms", js_quadratic_forms},
      {"linearOutputs", js_linear_outputs},
  };
  napi_create_object(env, &out);
  for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
    napi_value f;
    napi_create_function(env, fns[i].name, NAPI_AUTO_LENGTH, fns[i].fn, (void *)k, &f);
    napi_set_named_property(env, out, fns[i].name, f);
  }
  napi_value name;
  napi_create_string_utf8(env, k->isa, NAPI_AUTO_LENGTH, &name);
  napi_set_named_property(env, out, "isa", name);
  return out;
}

NAPI_MODULE_INIT() {
  napi_property_descriptor props[] = {
      {"bind", NULL, js_bind, NULL, NULL, NULL, napi_default, NULL},
      {"lastBad", NULL, js_last_bad, NULL, NULL, NULL, napi_default, NULL},
#ifdef __linux__
      {"discardReceived", NULL, qd_js_discard_received, NULL, NULL, NULL, napi_default, NULL},
      {"duplicateDescriptor", NULL, qd_js_duplicate_descriptor, NULL, NULL, NULL, napi_default, NULL},
#endif
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  return exports;
}
