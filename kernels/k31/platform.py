"""Facts about where the kernels run, read once at import.

``INTERPRET``: Triton runs in its CPU interpreter (``TRITON_INTERPRET=1``). Triton 3.9's
interpreter computes ``tl.dot`` on bf16 operands wrongly (fp16/fp32 are right), so kernels pass
``DOT_F32=INTERPRET`` and upcast dot operands to f32 under the interpreter only; on a GPU the
dot runs on bf16 operands with f32 accumulation.
"""
import os

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"

# Launch shapes under the interpreter. It pays per program instance and per tl op (numpy over a
# whole block), not per element, so there the launchers choose few programs with large blocks
# (many rows per program, whole dimensions per block, one split) instead of the tunables' GPU
# shapes. Results stay within every test's tolerance; on a GPU this is False and the launch
# configuration is the tunables' exactly. Tests clear it (the ``gpu_launch`` fixture) to run the
# GPU's launch configuration through the interpreter as well. Read it at call time
# (``platform.FEW_PROGRAMS``) so that the fixture takes effect.
FEW_PROGRAMS = INTERPRET


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def cdiv(a: int, b: int) -> int:
    return -(-a // b)
