{
  "targets": [
    {
      "target_name": "quantd",
      "sources": [
        "native/addon/addon.c",
        "native/addon/sockets.c",
        "native/src/ref.c",
        "native/src/ggml_ref.c",
        "native/src/ggml_kquants.c",
        "native/src/ggml_weighted.c",
        "native/src/ggml_iquants.c",
        "native/src/bnb_ref.c",
        "native/src/nbits_ref.c",
        "native/src/awq_ref.c",
        "native/src/gptq_ref.c",
        "native/src/gptq_solve.c",
        "native/src/linear_stats.c",
        "native/src/quadratic.c",
        "native/src/linear_out.c",
        "native/src/measured.c",
        "native/src/dispatch.c",
        "native/src/x86_avx2.c",
        "native/src/x86_avx512.c"
      ],
      "cflags_c": ["-std=c11"],
      "cflags": ["-O3", "-ffp-contract=off", "-fno-fast-math", "-Wall", "-Wextra", "-Wno-unused-parameter"],
      "xcode_settings": {
        "OTHER_CFLAGS": ["-O3", "-ffp-contract=off", "-fno-fast-math"]
      }
    }
  ]
}
