"""Triton's CPU interpreter for a process without a GPU, chosen before triton is imported:
by the loop's process (``kern profile``/``kern try``/``kern loop``) and by each side's; and, in
the processes that run kernels on it (sides, the test session), its language patched once,
the overflow checks whose outcome it discards skipped and its numpy dtypes remembered."""
from __future__ import annotations

import inspect
import os


def prepare_interpreter() -> None:
    """Without a GPU the Triton kernels run in the interpreter; set before triton imports."""
    try:
        import torch

        if not torch.cuda.is_available():
            os.environ.setdefault("TRITON_INTERPRET", "1")
    except ImportError:
        pass


def run_interpreted_kernels_fast() -> None:
    """In a process that runs kernels on the interpreter (a side, the test session), before
    any kernel: the three changes below, none of which changes a value a kernel computes."""
    keep_language_patched()
    skip_discarded_overflow_checks()
    remember_numpy_dtypes()


def _running_interpreter():
    """triton's interpreter module where it runs the kernels (``TRITON_INTERPRET=1``), else None."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return None
    try:
        from triton.runtime import interpreter
    except ImportError:
        return None
    return interpreter


def _replace_once(interpreter, name: str, mark: str, make) -> bool:
    """Replace the interpreter's function ``name`` with ``make(original)``, marked ``mark`` so a
    second call keeps the first replacement; False (left as it is) where triton lacks it."""
    original = getattr(interpreter, name, None)
    if original is None or not callable(original):
        return False
    if getattr(original, mark, False):
        return True
    replacement = make(original)
    setattr(replacement, mark, True)
    setattr(interpreter, name, replacement)
    return True


class _Kept:
    """The scope a launch gets back once the language stays patched: nothing to restore."""

    def restore(self) -> None:
        pass


def keep_language_patched() -> bool:
    """Make the interpreter patch ``triton.language`` once per process instead of at every
    launch and every device-function call; True when it now does.

    Why: triton's interpreter (3.6 to 3.9) re-binds every builtin of ``triton.language`` to
    its numpy semantics on each kernel launch (``inspect.getmembers`` over the module) and
    again on each call of a ``@triton.jit`` helper inside a kernel, then undoes it after the
    launch. On the small step that bookkeeping is about a quarter of the interpreter's time
    (py-spy, ``kern step --rows 2``, 2026-12-03), and the side processes of the gates spend
    nearly all their time there. What a kernel computes does not change: the same functions
    are bound, only no longer unbound between launches (the whole small step's logits are
    bit-identical with and without it: tests/gates/test_interpreter.py).

    Contract: only where the interpreter runs the kernels (``TRITON_INTERPRET=1``); a
    process that also uses ``triton.language`` objects outside kernels (none here: launchers
    compute grids with plain Python) would see the interpreter's bindings there. A triton
    whose interpreter lacks the hook this relies on is left as it is (slower, same results)."""
    interpreter = _running_interpreter()
    if interpreter is None:
        return False
    import triton.language as tl

    def make(original):
        langs = (tl, tl.core)
        every = {id(m) for m in langs}
        patched: set[int] = set()

        def patch_lang(fn):
            if patched == every:  # both patched: no kernel can want more (its globals not walked)
                return _Kept()
            # the language modules a kernel sees, as triton's own _patch_lang picks them
            wanted = {id(v) for v in fn.__globals__.values() if inspect.ismodule(v) and v in langs}
            if not wanted <= patched:
                original(fn)  # its scope is dropped: the binding stays for the process
                patched.update(wanted)
            return _Kept()
        return patch_lang

    return _replace_once(interpreter, "_patch_lang", "kern_keeps_patched", make)


def skip_discarded_overflow_checks() -> bool:
    """Stop the interpreter computing integer-overflow checks whose outcome it throws away;
    True when it now does.

    Why: triton's interpreter (3.6 to 3.9) builds with ``sanitize_overflow`` on and ``debug``
    off. For every int32 add, sub and mul it then casts both operands to int64, redoes the op
    and compares the result with the type's bounds, and hands that to ``device_assert``, which
    returns at once without ``debug`` (a compiled kernel without debug never emits the check
    either). On the small step that discarded work is about a quarter of the interpreter's
    time (cProfile, 2 rows: 1.19 s of CPU a step, 0.90 s without it, 2026-12-05). What a
    kernel computes does not change: the check never fed a value (the whole small step's
    logits are bit-identical with and without it: tests/gates/test_interpreter.py).

    Contract: only where the interpreter runs the kernels (``TRITON_INTERPRET=1``) and its
    options have ``debug`` off (with it on the check would assert, so it is left on). A triton
    whose interpreter lacks the options this relies on is left as it is (slower, same
    results)."""
    import dataclasses

    interpreter = _running_interpreter()
    if interpreter is None:
        return False
    builder = getattr(interpreter, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if not dataclasses.is_dataclass(options) or not hasattr(options, "sanitize_overflow") \
            or getattr(options, "debug", True):
        return False
    if options.sanitize_overflow:
        builder.options = dataclasses.replace(options, sanitize_overflow=False)
    return True


def remember_numpy_dtypes() -> bool:
    """Make the interpreter look up a Triton type's numpy dtype once per type instead of
    building its whole table at every lookup; True when it now does.

    Why: triton's interpreter (3.6 to 3.9) maps a type to numpy in ``_get_np_dtype``, which
    builds a dict of every scalar type at each call: tens of thousands of calls a small step,
    about 7 % of its CPU once the overflow checks are skipped (cProfile, 2 rows, 2026-12-05).
    The answer depends on the type alone: a pointer or a block of pointers is uint64 (asked of
    triton each time, as cheap), any other block its element's, a scalar its table entry; the
    scalar's answer is kept, keyed as triton's own table keys it (by the type's name). A type
    the table lacks raises as before and is not kept.

    Contract: as :func:`keep_language_patched`. A triton without that function is left as it
    is (slower, same results)."""
    interpreter = _running_interpreter()
    if interpreter is None:
        return False
    import triton.language as tl

    def make(original):
        known: dict = {}

        def np_dtype(tt_dtype):
            scalar = tt_dtype.element_ty if isinstance(tt_dtype, tl.block_type) else tt_dtype
            if isinstance(scalar, tl.pointer_type):
                return original(tt_dtype)
            try:
                return known[scalar]
            except KeyError:
                found = known[scalar] = original(scalar)
                return found
            except TypeError:  # a type that hashes to no key: asked of triton each time
                return original(tt_dtype)
        np_dtype.__wrapped__ = original  # triton's own, for the test that holds the two equal
        return np_dtype

    return _replace_once(interpreter, "_get_np_dtype", "kern_remembers", make)
