#!/usr/bin/env bash
# Builds native/wasm/quantd.wasm from the same C sources as the native addon. Needs clang and
# wasm-ld (Debian: apt-get install clang lld). The output is committed, so machines without clang
# still get WebAssembly; CI rebuilds it and fails if it differs (`npm run check:wasm`).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-native/wasm/quantd.wasm}"
clang --target=wasm32 -msimd128 -O3 -std=c11 -ffp-contract=off -fno-fast-math \
  -nostdlib -fvisibility=hidden -Wall -Wextra -Wno-unused-parameter \
  -Wl,--no-entry -Wl,--strip-all -Wl,--export=__heap_base \
  -o "$out" \
  native/wasm/exports.c native/src/ref.c native/src/ggml_ref.c native/src/ggml_kquants.c native/src/ggml_weighted.c native/src/ggml_iquants.c native/src/bnb_ref.c native/src/nbits_ref.c native/src/awq_ref.c native/src/gptq_ref.c native/src/measured.c native/src/dispatch.c native/src/wasm_simd128.c
echo "built $out ($(wc -c < "$out") bytes) with $(clang --version | head -1)"
