/* The AVX2 kernels: simd_kernels.h over the AVX2 primitives. x86 only. */
#if defined(__x86_64__) || defined(__i386__)
#include "simd_avx2.h"
#include "simd_kernels.h"
#endif
