"""Facts about where the kernels run, read once at import.

``INTERPRET``: Triton runs in its CPU interpreter (``TRITON_INTERPRET=1``). Triton 3.9's
interpreter computes ``tl.dot`` on bf16 operands wrongly (fp16/fp32 are right), so kernels pass
``DOT_F32=INTERPRET`` and upcast dot operands to f32 under the interpreter only; on a GPU the
dot runs on bf16 operands with f32 accumulation.
"""
import os

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"

# The constexprs launchers set to INTERPRET (dots on f32 operands, round-to-nearest-even done by
# hand): on a GPU they are always False. bench/tools/compile_check.py compiles a recorded launch
# with that value, so what it reads is the GPU's code; a new such flag must be named here.
INTERPRETER_FLAGS = ("DOT_F32", "RNE")

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


def row_tiles(rows: int, width: int, block: int) -> tuple[int, int]:
    """(rows, columns) one program of an elementwise launch over ``[rows, width]`` covers: on a
    GPU one row and ``block`` columns (a tunable; at most the width's power of two), under the
    interpreter (``FEW_PROGRAMS``) the whole batch and width. The grid is
    ``(cdiv(rows, r), cdiv(width, c))``. A launcher that wants another shape stops calling this
    (its own file), rather than changing it: every launcher that calls it shares this file."""
    if FEW_PROGRAMS:
        return next_pow2(rows), next_pow2(width)
    return 1, min(block, next_pow2(width))
