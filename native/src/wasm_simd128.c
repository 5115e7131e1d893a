/* The WebAssembly SIMD128 kernels: simd_kernels.h over the wasm primitives. */
#if defined(__wasm_simd128__)
#include "simd_wasm.h"
#include "simd_kernels.h"
#endif
