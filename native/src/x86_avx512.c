/* The AVX-512 kernels: simd_kernels.h over the AVX-512 primitives. x86 only. */
#if defined(__x86_64__) || defined(__i386__)
#include "simd_avx512.h"
#include "simd_kernels.h"
#endif
