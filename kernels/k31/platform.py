"""Facts about where the kernels run, read once at import.

``INTERPRET``: Triton runs in its CPU interpreter (``TRITON_INTERPRET=1``). Triton 3.9's
interpreter computes ``tl.dot`` on bf16 operands wrongly (fp16/fp32 are right), so kernels pass
``DOT_F32=INTERPRET`` and upcast dot operands to f32 under the interpreter only; on a GPU the
dot runs on bf16 operands with f32 accumulation.
"""
import os

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def cdiv(a: int, b: int) -> int:
    return -(-a // b)
