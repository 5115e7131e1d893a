/*
 * Quantize and measure in one pass over memory: each chunk is quantized, then its quality
 * statistics are taken while the chunk's floats and codes are still in cache (the SIMD tables'
 * choose_quantize_from does this inside one loop where it can: simd_choose.h). Measuring after a
 * whole tensor was quantized reads it from memory a second time and cost more than quantizing
 * (measured: 64 MiB int8 per_tensor 6.4 ms plain, 19 ms with a separate quality pass). Any
 * table's kernels work here: these wrappers only cut the range.
 */
#include "common.h"

/* 16 Ki elements: 64 KiB of float32 and its codes fit in L2 beside each other. */
#define QD_MEASURE_CHUNK 16384u

qd_status qd_quantize_measured(const qd_kernels *k, const float *x, uint64_t start, uint64_t count,
                               const qd_layout *l, const float *scale, const float *zero_point, const qd_quant *q,
                               void *out, uint64_t *bad, qd_quality *stats) {
  for (uint64_t off = 0; off < count; off += QD_MEASURE_CHUNK) {
    const uint64_t n = count - off < QD_MEASURE_CHUNK ? count - off : QD_MEASURE_CHUNK;
    void *o = (uint8_t *)out + qd_code_bytes(q->codes, off);
    qd_status s = k->quantize(x + off, start + off, n, l, scale, zero_point, q, o, bad);
    if (s != QD_OK) return s;
    s = k->quality(x + off, o, start + off, n, l, scale, zero_point, q, stats);
    if (s != QD_OK) return s;
  }
  return QD_OK;
}

uint64_t qd_measured_chunk_units(uint64_t unit_size) {
  uint64_t units = QD_MEASURE_CHUNK / unit_size / 4 * 4;
  return units < 4 ? 4 : units > 256 ? 256 : units;
}

qd_status qd_choose_quantize_chunked(const qd_kernels *k, const void *x, int32_t input, uint64_t first,
                                     uint64_t units, uint64_t unit_size, const qd_choose *c, const qd_quant *q,
                                     float *scale, double *zero_point, void *out, uint64_t *bad, qd_quality *stats,
                                     float *scratch) {
  if (input < QD_INPUT_F32 || input > QD_INPUT_BF16 || unit_size == 0 || (input != QD_INPUT_F32 && !scratch))
    return QD_BAD_ARGUMENT;
  const uint64_t per_chunk = qd_measured_chunk_units(unit_size);
  const qd_convert_fn widen = input == QD_INPUT_F16 ? k->f16_to_f32 : k->bf16_to_f32;
  float zp[256]; /* the quality kernel takes float32 zero points */
  for (uint64_t u = 0; u < units; u += per_chunk) {
    const uint64_t m = units - u < per_chunk ? units - u : per_chunk;
    const uint64_t at = u * unit_size;
    const float *values = (const float *)x + at;
    if (input != QD_INPUT_F32) {
      widen((const uint16_t *)x + at, m * unit_size, scratch);
      values = scratch;
    }
    void *o = (uint8_t *)out + qd_code_bytes(q->codes, at);
    qd_status s = k->choose_quantize(values, first + u, m, unit_size, c, q, scale + u, zero_point + u, o, bad);
    if (s != QD_OK) return s;
    if (!stats) continue;
    for (uint64_t j = 0; j < m; j++) zp[j] = (float)zero_point[u + j];
    const qd_layout unit_layout = {1, m, unit_size};
    s = k->quality(values, o, 0, m * unit_size, &unit_layout, scale + u, zp, q, stats);
    if (s != QD_OK) return s;
  }
  return QD_OK;
}

qd_status qd_choose_quantize_from_ref(const void *x, int32_t input, uint64_t first, uint64_t units,
                                      uint64_t unit_size, const qd_choose *c, const qd_quant *q, float *scale,
                                      double *zero_point, void *out, uint64_t *bad, qd_quality *stats,
                                      float *scratch) {
  return qd_choose_quantize_chunked(&qd_kernels_ref, x, input, first, units, unit_size, c, q, scale, zero_point,
                                    out, bad, stats, scratch);
}
