/*
 * bitsandbytes' 4-bit blockwise quantization (NF4, FP4), the scalar reference: byte for byte
 * src/core/interop/bnb.ts, which follows bitsandbytes' CUDA kernel (kQuantizeBlockwise):
 * absmax per block, inv = 1.0f / absmax, and each x·inv through the kernel's decision tree of
 * float32 thresholds with strict comparisons.
 */
#include "common.h"
#include "ref.h"

/* The thresholds of dQuantizeNF4, ascending: the tree is a binary search over them, so a value's
 * code is the number it exceeds. Each is the float32 of the double literal, as bnb.ts's fround. */
const float qd_nf4_thresholds[15] = {
    (float)-0.8480964004993439,  (float)-0.6106329262256622,  (float)-0.4599952697753906,
    (float)-0.33967943489551544, (float)-0.23460740596055984, (float)-0.13791173323988914,
    (float)-0.045525018125772476, (float)0.03979014977812767, (float)0.1202552504837513,
    (float)0.2035212516784668,   (float)0.2920137718319893,   (float)0.3893125355243683,
    (float)0.5016634166240692,   (float)0.6427869200706482,   (float)0.8614784181118011,
};

/* dQuantizeFP4's thresholds on |x|, as its tree tests them (bnb.ts FP4_T a … g). */
const float qd_fp4_thresholds[7] = {
    (float)0.29166667, (float)0.583333,   (float)0.8333333, (float)0.4166667,
    (float)0.0859375,  (float)0.20833333, (float)0.00260417,
};

QD_INLINE uint8_t nf4_code(float v) {
  uint8_t c = 0;
  for (int k = 0; k < 15; k++) c += v > qd_nf4_thresholds[k];
  return c; /* NaN exceeds none: 0 */
}

QD_INLINE uint8_t fp4_code(float v) {
  const float *t = qd_fp4_thresholds;
  uint8_t sign = v < 0.0f ? 8 : 0; /* -0 is positive */
  float a = __builtin_fabsf(v);
  if (a > t[0]) {
    if (a > t[1]) return (a > t[2] ? 3 : 2) + sign;
    return (a > t[3] ? 5 : 4) + sign;
  }
  if (a > t[4]) return (a > t[5] ? 7 : 6) + sign;
  return (a > t[6] ? 1 : 0) + sign;
}

uint8_t qd_bnb_code(int32_t type, float v) { return type == QD_BNB_NF4 ? nf4_code(v) : fp4_code(v); }

qd_status qd_bnb_quantize_ref(int32_t type, const float *x, uint64_t n, uint64_t blocksize, uint8_t *packed,
                              float *absmax, uint64_t *bad) {
  if ((type != QD_BNB_NF4 && type != QD_BNB_FP4) || blocksize == 0) return QD_BAD_ARGUMENT;
  for (uint64_t i = 0; i < n; i++) {
    if (!qd_is_finite(x[i])) {
      *bad = i;
      return QD_NOT_FINITE;
    }
  }
  float inv = 0.0f;
  for (uint64_t begin = 0, b = 0; begin < n; begin += blocksize, b++) {
    uint64_t end = begin + blocksize < n ? begin + blocksize : n;
    float m = 0.0f;
    for (uint64_t i = begin; i < end; i++) {
      float a = __builtin_fabsf(x[i]);
      if (a > m) m = a;
    }
    absmax[b] = m;
    inv = 1.0f / m; /* +Infinity for an all-zero block: every x·inv is then NaN or 0·∞, code 0 */
    for (uint64_t i = begin; i < end; i++) {
      uint8_t c = qd_bnb_code(type, x[i] * inv);
      if (i & 1)
        packed[i >> 1] |= c;
      else
        packed[i >> 1] = (uint8_t)(c << 4);
    }
  }
  /* the kernel loads the missing last element of an odd count as 0 and quantizes it too */
  if (n & 1) packed[n >> 1] |= qd_bnb_code(type, 0.0f * inv);
  return QD_OK;
}
