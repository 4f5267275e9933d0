"""Compile every Triton kernel a CPU test launches for Hopper (sm_90) with another Triton,
without a GPU: the kernels' launches are recorded under the interpreter, then each distinct
(kernel, argument types, constexprs) is compiled by the Triton found first on --triton-path,
down to a cubin (ptxas included), with the 16-divisibility hints the GPU's JIT would give
(pointers and integers that are multiples of 16), an integer argument of 1 made a constant as the
JIT makes it (unless the kernel's ``do_not_specialize`` names it), ``maxnreg`` kept, and the
interpreter-only constexprs (``kernels/k31/platform.py`` ``INTERPRETER_FLAGS``: f32 dot operands,
hand-made rounding) set to False as on a GPU, so the code read is the code the GPU runs. Launch
shapes are the tests' own: under the interpreter most launchers pick few large programs, so a
GPU's block sizes are compiled only by tests that use the ``gpu_launch`` fixture.

Why: the H200 runs triton 3.6 while this machine interprets with 3.9; a kernel that is right
on the interpreter can still fail to compile there (a reassigned constexpr, an op the older
frontend lacks, too much shared memory), and the loop then records a crash that cost device
time. This catches those failures on the CPU. It compiles the small config's shapes, so a
failure that needs the full model's constexprs is not caught.

    pip install --target /opt/tri36 --no-deps triton==3.6.0
    python bench/tools/compile_check.py --triton-path /opt/tri36 tests/kernels/test_moe.py
    python bench/tools/compile_check.py --triton-path /opt/tri36 tests/kernels/test_mla.py -k topk
    python bench/tools/compile_check.py --dump /tmp/asm tests/kernels/test_kda.py -k core

Exit status: 0 every recorded kernel compiled, 1 one did not (each failure printed with its
error), 2 nothing was recorded or the arguments were wrong.
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAUNCH_OPTIONS = {"num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion",
                  "launch_cooperative_grid", "launch_pdl"}
TYPE_OF_DTYPE = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64",
                 "int64": "i64", "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8",
                 "uint16": "u16", "uint32": "u32", "uint64": "u64", "bool": "i1",
                 "float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5"}


def _arg_type(value) -> tuple[str, object]:
    """(kind, what) of one runtime argument: ("ptr", triton type), ("scalar", type) or
    ("const", value) for what Triton treats as a constant (None)."""
    if value is None:
        return "const", None
    dtype = getattr(value, "dtype", None)
    if dtype is not None and hasattr(value, "data_ptr"):
        name = str(dtype).replace("torch.", "")
        if name not in TYPE_OF_DTYPE:
            raise TypeError(f"a tensor of dtype {name}: add it to TYPE_OF_DTYPE")
        return "ptr", "*" + TYPE_OF_DTYPE[name]
    if isinstance(value, bool):
        return "scalar", "i1"
    if isinstance(value, int):
        return "scalar", "i32" if -2**31 <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "scalar", "fp32"
    raise TypeError(f"an argument of type {type(value).__name__}")


def _plain_const(value):
    """A constexpr as JSON holds it (triton dtypes by name)."""
    value = getattr(value, "value", value)  # tl.constexpr
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return {"dtype": str(value)}


def record(pytest_args: list[str], out: Path) -> int:
    """Run pytest on the interpreter in this process, writing each distinct launch to ``out``."""
    os.environ["TRITON_INTERPRET"] = "1"
    import pytest
    from triton.runtime.interpreter import InterpretedFunction

    seen: dict[str, dict] = {}
    original = InterpretedFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        fn = self.fn
        params = inspect.signature(fn).parameters
        bound = dict(zip(params, args))
        bound.update({k: v for k, v in kwargs.items() if k not in LAUNCH_OPTIONS})
        signature, constexprs, aligned, ones = {}, {}, [], []
        for name, p in params.items():
            if name not in bound:
                if p.default is inspect.Parameter.empty:
                    continue
                bound[name] = p.default
            value = bound[name]
            if "constexpr" in str(p.annotation):
                signature[name] = "constexpr"
                constexprs[name] = _plain_const(value)
                continue
            kind, what = _arg_type(value)
            if kind == "const":
                signature[name] = "constexpr"
                constexprs[name] = what
            elif what in ("i32", "i64") and value == 1:
                # the GPU's JIT makes an integer 1 a constant (a unit stride folds away), unless
                # the kernel says do_not_specialize: compile_all decides with the JITFunction
                signature[name] = what
                ones.append(name)
            else:
                signature[name] = what
                # the GPU's JIT specializes these as 16-divisible (vector loads follow from it)
                if (kind == "ptr" and value.data_ptr() % 16 == 0) or \
                        (what in ("i32", "i64") and value % 16 == 0):
                    aligned.append(name)
        entry = {"module": fn.__module__, "name": fn.__name__, "signature": signature,
                 "constexprs": constexprs, "aligned": aligned, "ones": ones,
                 "options": {k: kwargs[k] for k in ("num_warps", "num_stages", "maxnreg") if k in kwargs}}
        seen.setdefault(json.dumps(entry, sort_keys=True), entry)
        return original(self, *args, grid=grid, warmup=warmup, **kwargs)

    InterpretedFunction.run = run
    try:
        status = pytest.main(["-q", "-p", "no:cacheprovider", *pytest_args])
    finally:
        InterpretedFunction.run = original
    out.write_text(json.dumps(list(seen.values()), indent=1))
    return int(status)


def _jit_function(module: str, name: str):
    import importlib

    obj = getattr(importlib.import_module(module), name)
    while not hasattr(obj, "arg_names") or not hasattr(obj, "cache_key"):
        obj = obj.fn  # autotune / heuristics wrappers hold the JITFunction
    return obj


def _constexpr_value(v):
    if isinstance(v, dict) and "dtype" in v:
        import triton.language as tl

        return getattr(tl, v["dtype"])
    return v


class CompileTimeout(Exception):
    """A launch's compile outlasted ``--launch-timeout`` (Triton's frontend may wrap it in
    its own error: :func:`_timed_out` looks down the chain)."""


def _alarm(signum, frame):
    raise CompileTimeout


def _timed_out(ex: BaseException | None) -> bool:
    while ex is not None:
        if isinstance(ex, CompileTimeout):
            return True
        ex = ex.__cause__ or ex.__context__
    return False


def compile_all(launches: Path, dump: Path | None = None, limit_s: float = 300.0) -> int:
    """In the process whose Triton is the one to check: compile every recorded launch for
    sm_90 and print one line each; a launch whose compile outlasts ``limit_s`` (Triton's
    lowering or ptxas, killed) is reported and counted as failed."""
    import signal

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from kernels.k31.platform import INTERPRETER_FLAGS

    target = GPUTarget("cuda", 90, 32)
    entries = json.loads(launches.read_text())
    failed = 0
    signal.signal(signal.SIGALRM, _alarm)
    for e in entries:
        label = f"{e['module']}.{e['name']} {e['options'] or ''}".rstrip()
        try:
            fn = _jit_function(e["module"], e["name"])
            consts = {k: _constexpr_value(v) for k, v in e["constexprs"].items()}
            for flag in INTERPRETER_FLAGS:  # the interpreter's workarounds: a GPU runs without them
                if consts.get(flag) is True:
                    consts[flag] = False
            signature = dict(e["signature"])
            keep = {fn.arg_names[i] if isinstance(i, int) else i
                    for i in (getattr(fn, "do_not_specialize", None) or ())}
            for n in e.get("ones", ()):
                if n not in keep:  # as the GPU's JIT specializes an integer 1
                    signature[n], consts[n] = "constexpr", 1
            attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in e.get("aligned", ())}
            src = ASTSource(fn, signature, constexprs=consts, attrs=attrs)
            signal.setitimer(signal.ITIMER_REAL, limit_s)
            try:  # (subprocess.run kills ptxas when the alarm's exception reaches it)
                kernel = triton.compile(src, target=target, options=e["options"])
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            smem = kernel.metadata.shared
            if dump is not None:
                dump.mkdir(parents=True, exist_ok=True)
                stem = f"{e['name']}-{len(list(dump.glob(e['name'] + '-*.ttgir')))}"
                for kind in ("ttgir", "ptx", "sass"):
                    if kind in kernel.asm:
                        (dump / f"{stem}.{kind}").write_text(kernel.asm[kind])
            flags = " ".join(f"{f}=False" for f in INTERPRETER_FLAGS if e["constexprs"].get(f) is True)
            print(f"ok    {label}  (shared memory {smem} B{', compiled with ' + flags if flags else ''})")
        except Exception as ex:  # noqa: BLE001 - every failure is reported, then counted
            failed += 1
            if not _timed_out(ex):
                text = str(ex).strip().splitlines()
                print(f"FAIL  {label}\n      constexprs {e['constexprs']}\n      "
                      + "\n      ".join(text[-12:] or [type(ex).__name__]))
                continue
            print(f"FAIL  {label}\n      constexprs {e['constexprs']}\n      compiling took longer than "
                  f"{limit_s:g} s (--launch-timeout): a GPU's first call of this launch would stall as "
                  "long. If the shape is the interpreter's whole-batch tile (kernels/k31/platform.py "
                  "row_tiles), compile the GPU's shape instead: a test with the gpu_launch fixture")
    print(f"triton {triton.__version__}: {len(entries) - failed} of {len(entries)} launches "
          "compiled for sm_90")
    return 1 if failed else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--triton-path", required=False,
                    help="a folder holding the Triton to compile with (pip install --target); "
                         "default: this Python's Triton")
    ap.add_argument("--dump", metavar="DIR", help="write each compiled launch's ttgir, ptx and sass "
                                                  "there (NAME-K.ptx ...)")
    ap.add_argument("--launch-timeout", type=float, default=300.0, metavar="S",
                    help="seconds one launch's compile may take before it is reported as failed "
                         "(default 300; an interpreter-only tile can keep ptxas busy for an hour)")
    ap.add_argument("--compile", metavar="LAUNCHES", help=argparse.SUPPRESS)
    ap.add_argument("pytest_args", nargs="*", help="what pytest runs to launch the kernels")
    a, rest = ap.parse_known_args(argv)
    a.pytest_args += rest  # pytest's own options (-k, -x) pass through
    if a.compile:
        return compile_all(Path(a.compile), Path(a.dump).resolve() if a.dump else None, a.launch_timeout)
    if not a.pytest_args:
        ap.error("name the tests whose kernel launches to compile, e.g. tests/kernels/test_moe.py")
    with tempfile.TemporaryDirectory() as tmp:
        launches = Path(tmp) / "launches.json"
        rc = subprocess.run([sys.executable, "-c",
                             "import sys; sys.path.insert(0, sys.argv[1]); "
                             "from bench.tools.compile_check import record; "
                             "from pathlib import Path; "
                             "sys.exit(record(sys.argv[3:], Path(sys.argv[2])))",
                             str(ROOT), str(launches), *a.pytest_args], cwd=ROOT).returncode
        if not launches.exists() or not json.loads(launches.read_text()):
            print(f"compile_check: the tests launched no Triton kernel (pytest exit {rc}): "
                  "name tests that run the kernels", file=sys.stderr)
            return 2
        if rc != 0:
            print(f"compile_check: pytest exit {rc}; compiling what it launched anyway",
                  file=sys.stderr)
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (a.triton_path, str(ROOT),
                                                        env.get("PYTHONPATH")) if p)
        dump = ["--dump", str(Path(a.dump).resolve())] if a.dump else []
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--compile",
                               str(launches), "--launch-timeout", str(a.launch_timeout), *dump],
                              cwd=ROOT, env=env).returncode
        return done or (1 if rc not in (0, 5) else 0)


if __name__ == "__main__":
    sys.exit(main())
