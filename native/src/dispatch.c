/* One dispatch table per instruction set; the best one the CPU supports is chosen at run time. */
#include "../include/quantd.h"

#if defined(__x86_64__) || defined(__i386__)
extern const qd_kernels qd_kernels_avx2;
extern const qd_kernels qd_kernels_avx512;
#define QD_X86 1
#endif
#if defined(__wasm_simd128__)
extern const qd_kernels qd_kernels_simd128;
#endif

/* String equality without libc: the WebAssembly build is freestanding. */
static int same(const char *a, const char *b) {
  while (*a && *a == *b) a++, b++;
  return *a == *b;
}

int qd_supported(const char *isa) {
  if (same(isa, "scalar")) return 1;
#ifdef QD_X86
  __builtin_cpu_init();
  if (same(isa, "avx2")) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  if (same(isa, "avx512"))
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#endif
#if defined(__wasm_simd128__)
  if (same(isa, "simd128")) return 1;
#endif
  return 0;
}

static const qd_kernels *table_of(const char *isa) {
#ifdef QD_X86
  if (same(isa, "avx2")) return &qd_kernels_avx2;
  if (same(isa, "avx512")) return &qd_kernels_avx512;
#endif
#if defined(__wasm_simd128__)
  if (same(isa, "simd128")) return &qd_kernels_simd128;
#endif
  if (same(isa, "scalar")) return &qd_kernels_ref;
  return 0;
}

const qd_kernels *qd_select(const char *isa) {
  if (isa != 0 && isa[0] != '\0') return qd_supported(isa) ? table_of(isa) : 0;
  static const char *const best_first[] = {"avx512", "avx2", "simd128", "scalar"};
  for (unsigned i = 0; i < sizeof best_first / sizeof best_first[0]; i++) {
    if (qd_supported(best_first[i])) return table_of(best_first[i]);
  }
  return &qd_kernels_ref;
}
