/*
 * ONNX Runtime's MatMulNBits 4-bit blockwise quantizer (MlasQuantizeBlockwise: range2scalezp,
 * range2scale), the scalar reference: byte for byte src/core/interop/onnx.ts, whose comment
 * holds the rules. Every step is one float32 operation in the order ORT's x86-64 build does it.
 */
#include "common.h"
#include "ref.h"

int qd_nbits_params(float min, float max, int32_t sym, int32_t f16, float *stored, uint8_t *zp, float *recip) {
  float scale;
  if (sym) {
    float m = qd_fabs(max) > qd_fabs(min) ? max : min;
    scale = -m / 8.0f;
    *zp = 8;
  } else {
    if (0.0f < min) min = 0.0f; /* std::min(min, 0.0f), keeping a -0 */
    if (max < 0.0f) max = 0.0f;
    scale = (max - min) / 15.0f;
    float zpf = scale != 0.0f ? 0.0f - min / scale : min;
    *zp = zpf < 0.0f ? 0 : zpf > 15.0f ? 15 : (uint8_t)qd_roundf(zpf);
  }
  *stored = f16 ? qd_f16_round(scale) : scale;
  *recip = *stored != 0.0f ? 1.0f / *stored : 0.0f;
  return qd_is_finite(*recip);
}

uint8_t qd_nbits_code(float v, float recip, uint8_t zp) {
  float r = qd_roundf(v * recip + (float)zp); /* two float32 operations: -ffp-contract=off */
  return r < 0.0f ? 0 : r > 15.0f ? 15 : (uint8_t)r;
}

int qd_nbits_block_ref(const float *x, uint64_t count, int32_t sym, int32_t f16, float *scale, uint8_t *zp,
                       uint8_t *out, uint64_t *bad) {
  float min = qd_float(0x7f7fffffu), max = -min; /* scanned from ±FLT_MAX, strict comparisons */
  for (uint64_t k = 0; k < count; k++) {
    float v = x[k];
    if (!qd_is_finite(v)) {
      *bad = k;
      return -1;
    }
    if (v < min) min = v;
    if (v > max) max = v;
  }
  float recip;
  if (!qd_nbits_params(min, max, sym, f16, scale, zp, &recip)) return 0;
  for (uint64_t k = 0; k < count; k++) {
    uint8_t c = qd_nbits_code(x[k], recip, *zp);
    if (k & 1)
      out[k >> 1] |= (uint8_t)(c << 4);
    else
      out[k >> 1] = c;
  }
  return 1;
}

qd_status qd_nbits_quantize_with(qd_nbits_block_fn whole, const float *w, uint64_t n_cols, uint64_t k_len,
                                 uint64_t block_size, int32_t sym, int32_t f16, uint8_t *b, float *scales,
                                 uint8_t *zero_points, uint64_t *bad) {
  if (n_cols == 0 || k_len == 0 || block_size < 16 || (block_size & (block_size - 1)) != 0) return QD_BAD_ARGUMENT;
  const uint64_t k_blocks = (k_len + block_size - 1) / block_size, row_bytes = k_blocks * (block_size / 2);
  const uint64_t zp_bytes = (k_blocks + 1) / 2;
  for (uint64_t n = 0; n < n_cols; n++) {
    const float *row = w + n * k_len;
    uint8_t *codes = b + n * row_bytes, *zps = sym ? 0 : zero_points + n * zp_bytes;
    for (uint64_t i = 0; i < row_bytes; i++) codes[i] = 0; /* padding past K is 0 */
    for (uint64_t i = 0; zps && i < zp_bytes; i++) zps[i] = 0;
    for (uint64_t blk = 0; blk < k_blocks; blk++) {
      const uint64_t start = blk * block_size, count = k_len - start < block_size ? k_len - start : block_size;
      uint8_t zp;
      uint64_t at = 0;
      int ok = (count == block_size ? whole : qd_nbits_block_ref)(row + start, count, sym, f16,
                                                                 scales + n * k_blocks + blk, &zp, codes + start / 2, &at);
      if (ok < 0) {
        *bad = n * k_len + start + at;
        return QD_NOT_FINITE;
      }
      if (ok == 0) {
        *bad = n * k_blocks + blk;
        return QD_RANGE_OVERFLOW;
      }
      if (zps) zps[blk >> 1] |= (uint8_t)(zp << ((blk & 1) * 4));
    }
    if (k_len % 2 == 1 && k_len > 1) {
      /* ORT's packing loop leaves the previous pair's high nibble beside the last odd code, unless
       * that pair lies in another thread block (2 · block_size values) */
      const uint64_t last = k_len - 1, thread_start = last / (2 * block_size) * 2 * block_size;
      if (last - thread_start >= 2) codes[last >> 1] |= codes[(last - 2) >> 1] & 0xf0;
    }
    if (zps && k_blocks % 2 == 1) zps[zp_bytes - 1] |= 8 << 4; /* the absent block's default */
  }
  return QD_OK;
}

qd_status qd_nbits_quantize_ref(const float *w, uint64_t n_cols, uint64_t k_len, uint64_t block_size, int32_t sym,
                                int32_t f16, uint8_t *b, float *scales, uint8_t *zero_points, uint64_t *bad) {
  return qd_nbits_quantize_with(qd_nbits_block_ref, w, n_cols, k_len, block_size, sym, f16, b, scales, zero_points,
                                bad);
}
