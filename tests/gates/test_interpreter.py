"""The interpreter's language patched once per process, its discarded overflow checks skipped
and its numpy dtypes remembered (gates/interpreter.py) change no bit of what the kernels
compute, and do stop the re-patching at every launch and helper call and the checks at every
integer op.

Each side runs in its own process, as the gates' sides do: one with triton's own per-launch
patching and checks, one with the language kept patched, one as the gates' sides run (kept,
unchecked, dtypes remembered), on the same seeded small step."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from tests.gates.candidates import ROOT

# One small step at an awkward batch size (3 rows, odd context) on a fresh seed, in a fresh
# process; prints the logits, the next tokens, how often triton's _patch_lang really ran and
# how often an overflow check reached device_assert (which drops it: debug is off).
STEP = r"""
import json, os, sys
import torch
os.environ["TRITON_INTERPRET"] = "1"
from triton.runtime import interpreter
calls, asserts = [0], [0]
original = interpreter._patch_lang
def counted(fn):
    calls[0] += 1
    return original(fn)
interpreter._patch_lang = counted
semantic = type(interpreter.interpreter_semantic)
original_assert = semantic.device_assert
def counted_assert(self, cond, msg, mask):
    asserts[0] += "overflow" in msg
    return original_assert(self, cond, msg, mask)
semantic.device_assert = counted_assert
from gates.interpreter import keep_language_patched, remember_numpy_dtypes, skip_discarded_overflow_checks
kept = keep_language_patched() if sys.argv[1] in ("kept", "unchecked") else False
unchecked = skip_discarded_overflow_checks() if sys.argv[1] == "unchecked" else False
remembered = remember_numpy_dtypes() if sys.argv[1] == "unchecked" else False
from kernels.k31.config import Dims, Layout
from kernels.k31.dispatch import Ops
from kernels.k31.model import build_model
from kernels.k31.step import DecodeStep
from kernels.k31.workload import Workload
seed, rows = int(sys.argv[2]), 3
dims = Dims.small()
wl = Workload(dims.vocab, rows, 74, 4, seed=seed)
model = build_model(dims, Layout.named("tp2"), rows=rows, max_position=wl.max_position,
                    seed=seed, weight_sets=2, device="cpu")
step = DecodeStep(model, rows, Ops(model.shapes, "kernel"))
tok, pos = wl.step_inputs(0, "cpu")
step.tokens.copy_(tok[:rows]); step.pos.copy_(pos[:rows])
step.logits.fill_(float("nan"))
step.run()
print(json.dumps({"kept": kept, "unchecked": unchecked, "remembered": remembered,
                  "np_dtype": interpreter._get_np_dtype.__qualname__, "calls": calls[0], "asserts": asserts[0],
                  "logits": step.logits.float().view(-1).tolist(),
                  "bytes": step.logits.contiguous().view(-1).view(torch.uint8).tolist(),
                  "next": step.next_token.view(-1).tolist()}))
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter runs only without a GPU")
def test_kept_language_and_skipped_checks_compute_the_same_bits_patch_once_and_check_nothing():
    from tests.conftest import FRESH_SEED

    seed = FRESH_SEED % 1000
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT)
    out = {}
    for mode in ("per-launch", "kept", "unchecked"):
        run = subprocess.run([sys.executable, "-c", STEP, mode, str(seed)], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        out[mode] = json.loads(run.stdout.strip().splitlines()[-1])
    per, kept, fast = out["per-launch"], out["kept"], out["unchecked"]
    assert not per["kept"] and kept["kept"] and fast["kept"]
    assert not per["unchecked"] and not kept["unchecked"] and fast["unchecked"]
    # the side's way (gates/side/driver.py) also remembers the numpy dtypes: triton's own
    # function is wrapped there only
    assert fast["remembered"] and "remember_numpy_dtypes" in fast["np_dtype"]
    assert per["np_dtype"] == kept["np_dtype"] == "_get_np_dtype"
    assert per["logits"] and all(x == x for x in kept["logits"]), "the step left NaN in its logits"
    assert kept["bytes"] == per["bytes"] == fast["bytes"]  # bit for bit
    assert kept["next"] == per["next"] == fast["next"]
    # triton's own patching runs at every launch and helper call (hundreds in a step); kept,
    # once per set of language modules a kernel sees (tl, tl.core: at most two)
    assert per["calls"] > 100, per["calls"]
    assert 1 <= kept["calls"] <= 2 and 1 <= fast["calls"] <= 2, (kept["calls"], fast["calls"])
    # triton's checks reach device_assert at every int32 add, sub and mul (thousands in a
    # step), each dropped there; skipped, none is built
    assert per["asserts"] > 1000 and kept["asserts"] == per["asserts"], (per["asserts"], kept["asserts"])
    assert fast["asserts"] == 0, fast["asserts"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter runs only without a GPU")
def test_remembered_numpy_dtypes_answer_as_triton_does_for_every_type():
    """Every scalar type of triton.language, a pointer to it, a block of it and a block of
    pointers, each asked twice (the second answer comes from what was remembered): the
    dtype triton's own function gives, or the same exception."""
    import triton.language as tl
    from triton.runtime import interpreter

    from gates.interpreter import remember_numpy_dtypes

    assert remember_numpy_dtypes()  # the test session's interpreter (tests/conftest.py) too
    mine = interpreter._get_np_dtype
    theirs = mine.__wrapped__
    scalars = [v for v in vars(tl).values() if isinstance(v, tl.dtype) and not v.is_block()]
    assert tl.bfloat16 in scalars and tl.float8e4nv in scalars and tl.int1 in scalars
    types = [t for s in scalars for t in (s, tl.pointer_type(s), tl.block_type(s, [2, 4]),
                                          tl.block_type(tl.pointer_type(s), [4]))]

    def answer(fn, t):
        try:
            return fn(t)
        except Exception as e:  # noqa: BLE001 - the type of what triton raises is the answer
            return type(e)

    for t in types + types:
        assert answer(mine, t) == answer(theirs, t), t

