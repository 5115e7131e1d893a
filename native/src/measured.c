/*
 * Quantize and measure in one pass over memory: each chunk is quantized, then its quality
 * statistics are taken while the chunk's floats and codes are still in cache. Measuring after a
 * whole tensor was quantized reads it from memory a second time and cost more than quantizing
 * (measured: 64 MiB int8 per_tensor 6.4 ms plain, 19 ms with a separate quality pass). Any
 * table's kernels work here: these wrappers only cut the range.
 */
#include "common.h"

/* 16 Ki elements: 64 KiB of float32 and its codes fit in L2 beside each other. */
#define QD_MEASURE_CHUNK 16384u

/* Bytes of the first n codes (n a multiple of the codes per byte). */
static uint64_t code_offset(int32_t kind, uint64_t n) {
  switch (kind) {
  case QD_CODES_I16:
    return n * 2;
  case QD_CODES_I32:
    return n * 4;
  default:
    return n / (uint64_t)qd_codes_per_byte(kind);
  }
}

qd_status qd_quantize_measured(const qd_kernels *k, const float *x, uint64_t start, uint64_t count,
                               const qd_layout *l, const float *scale, const float *zero_point, const qd_quant *q,
                               void *out, uint64_t *bad, qd_quality *stats) {
  for (uint64_t off = 0; off < count; off += QD_MEASURE_CHUNK) {
    const uint64_t n = count - off < QD_MEASURE_CHUNK ? count - off : QD_MEASURE_CHUNK;
    void *o = (uint8_t *)out + code_offset(q->codes, off);
    qd_status s = k->quantize(x + off, start + off, n, l, scale, zero_point, q, o, bad);
    if (s != QD_OK) return s;
    s = k->quality(x + off, o, start + off, n, l, scale, zero_point, q, stats);
    if (s != QD_OK) return s;
  }
  return QD_OK;
}

qd_status qd_choose_quantize_measured(const qd_kernels *k, const float *x, uint64_t first, uint64_t units,
                                      uint64_t unit_size, const qd_choose *c, const qd_quant *q, float *scale,
                                      double *zero_point, void *out, uint64_t *bad, qd_quality *stats) {
  /* Whole units per chunk, a multiple of 4 so that chunks of packed codes start on a byte
   * (4 codes per byte at most); the quality kernel takes float32 zero points. */
  uint64_t per_chunk = QD_MEASURE_CHUNK / unit_size / 4 * 4;
  if (per_chunk < 4) per_chunk = 4;
  if (per_chunk > 256) per_chunk = 256;
  float zp[256];
  for (uint64_t u = 0; u < units; u += per_chunk) {
    const uint64_t m = units - u < per_chunk ? units - u : per_chunk;
    const uint64_t at = u * unit_size;
    void *o = (uint8_t *)out + code_offset(q->codes, at);
    qd_status s = k->choose_quantize(x + at, first + u, m, unit_size, c, q, scale + u, zero_point + u, o, bad);
    if (s != QD_OK) return s;
    for (uint64_t j = 0; j < m; j++) zp[j] = (float)zero_point[u + j];
    const qd_layout unit_layout = {1, m, unit_size};
    s = k->quality(x + at, o, 0, m * unit_size, &unit_layout, scale + u, zp, q, stats);
    if (s != QD_OK) return s;
  }
  return QD_OK;
}
