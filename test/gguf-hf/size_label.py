"""Vectors for general.size_label: the parameter count spelled as llama.cpp's converter spells it.

The rule restated from gguf-py's model_weight_count_rounded_notation: M, B or T when the count is
strictly above 1e6, 1e9 or 1e12 (K otherwise), at least two significant digits, Python's
fixed-point formatting. Plain python3, no packages:
    python3 test/gguf-hf/size_label.py > test/gguf-hf/size-label.json
    npx prettier --write test/gguf-hf/size-label.json
"""
import json
import random


def size_label(count: int) -> str:
    if count > 1e12:
        scaled, suffix = count * 1e-12, "T"
    elif count > 1e9:
        scaled, suffix = count * 1e-9, "B"
    elif count > 1e6:
        scaled, suffix = count * 1e-6, "M"
    else:
        scaled, suffix = count * 1e-3, "K"
    decimals = max(2 - len(str(round(scaled)).lstrip("0")), 0)
    return f"{scaled:.{decimals}f}{suffix}"


random.seed(20261124)
counts = [1, 5, 12, 499, 500, 1500, 2500, 9500, 10500, 999_999, 1_000_000, 1_000_001, 1_250_000,
          1_350_000, 2_500_000, 9_500_000, 9_950_000, 135_000_000, 494_032_768, 1_235_814_400,
          8_030_261_248, 70_553_706_496, 10**12 + 1]
counts += [random.randint(1, 10**13) for _ in range(200)]
counts += [random.randint(1, 10**4) * k for k in (5, 50, 1000, 10**5, 10**6) for _ in range(60)]
print(json.dumps([[c, size_label(c)] for c in counts]))
