"""bench/tools/compile_check.py: kernels a CPU test launches compile for sm_90 with the Triton
named, and a kernel the compiler rejects is reported and fails the check (the H200's triton
3.6 crash of 2026-12-03 was a reassigned constexpr that the interpreter accepts)."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "bench" / "tools" / "compile_check.py"

BAD_KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def twice(out_ptr, N: tl.constexpr):
    for p in tl.static_range(2):
        shift: tl.constexpr = N - p
        tl.store(out_ptr + p, shift)


@triton.jit
def once(out_ptr, n, N: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, N), tl.zeros([N], tl.float32) + n)


@triton.jit
def unit(out_ptr, stride):
    tl.static_assert(stride == 1)  # compiles only where the JIT made the integer 1 a constant
    tl.store(out_ptr + stride, 1.0)


@triton.jit
def unrolled(out_ptr, N: tl.constexpr):
    for p in tl.static_range(N):  # N stores traced one by one: seconds of lowering
        tl.store(out_ptr + p, p * 1.0)


@triton.jit(do_not_specialize=["stride"])
def unit_kept(out_ptr, stride):
    tl.static_assert(stride == 1)
    tl.store(out_ptr + stride, 1.0)
'''


def _compile(tmp_path, launches, *flags):
    (tmp_path / "cc_kernels.py").write_text(BAD_KERNEL)
    path = tmp_path / "launches.json"
    path.write_text(json.dumps(launches))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    return subprocess.run([sys.executable, str(TOOL), "--compile", str(path), *flags], env=env,
                          capture_output=True, text=True, timeout=300)


def _launch(name: str, n: int, **options) -> dict:
    """A recorded launch of BAD_KERNEL's ``name`` with constexpr ``N = n``."""
    signature = {"out_ptr": "*fp32", **({"n": "fp32"} if name == "once" else {}), "N": "constexpr"}
    return {"module": "cc_kernels", "name": name, "signature": signature, "constexprs": {"N": n},
            "options": options}


GOOD = _launch("once", 64, num_warps=2)


def test_a_rejected_kernel_fails_the_check_with_the_compilers_words(tmp_path):
    done = _compile(tmp_path, [GOOD, _launch("twice", 8)])
    assert done.returncode == 1, done.stdout + done.stderr
    assert "ok    cc_kernels.once" in done.stdout, done.stdout
    assert "FAIL  cc_kernels.twice" in done.stdout and "reassigned" in done.stdout, done.stdout
    assert "1 of 2 launches compiled for sm_90" in done.stdout, done.stdout


def test_the_residual_tests_kernels_are_recorded_and_compile(tmp_path):
    done = subprocess.run([sys.executable, str(TOOL), "--dump", str(tmp_path), "tests/kernels/test_residual.py", "-x"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "kernels.k31.residual.mix." in done.stdout
    last = done.stdout.strip().splitlines()[-1]
    n, of = last.split(": ")[1].split(" launches")[0].split(" of ")
    assert n == of and int(n) > 0, last
    ptx = sorted(tmp_path.glob("_mix_kernel-*.ptx"))
    assert len(ptx) == int(n) and ".target sm_90" in ptx[0].read_text()


def test_an_integer_one_compiles_as_the_gpus_jit_makes_it_a_constant_unless_kept(tmp_path):
    one = {"signature": {"out_ptr": "*fp32", "stride": "i32"}, "constexprs": {}, "ones": ["stride"],
           "options": {}}
    done = _compile(tmp_path, [{"module": "cc_kernels", "name": "unit", **one},
                               {"module": "cc_kernels", "name": "unit_kept", **one}])
    assert "ok    cc_kernels.unit " in done.stdout + " ", done.stdout + done.stderr
    assert "FAIL  cc_kernels.unit_kept" in done.stdout, done.stdout  # do_not_specialize: an i32
    assert done.returncode == 1 and "1 of 2 launches compiled" in done.stdout, done.stdout


def test_a_launch_whose_compile_outlasts_the_limit_fails_the_check_and_the_next_still_compiles(tmp_path):
    done = _compile(tmp_path, [_launch("unrolled", 20000), GOOD], "--launch-timeout", "2")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL  cc_kernels.unrolled" in done.stdout, done.stdout
    assert "compiling took longer than 2 s (--launch-timeout)" in done.stdout, done.stdout
    assert "ok    cc_kernels.once" in done.stdout and "1 of 2 launches compiled" in done.stdout, done.stdout


def test_every_interpreter_only_flag_a_launcher_passes_is_named():
    """A constexpr a launcher sets to INTERPRET must be in INTERPRETER_FLAGS, or compile_check
    compiles the interpreter's variant of that kernel instead of the GPU's."""
    import re

    from kernels.k31.platform import INTERPRETER_FLAGS

    passed = {m for f in (ROOT / "kernels" / "k31").rglob("*.py")
              for m in re.findall(r"\b([A-Z][A-Z0-9_]*)=INTERPRET\b", f.read_text())}
    assert passed and passed <= set(INTERPRETER_FLAGS), passed - set(INTERPRETER_FLAGS)


def test_the_experts_kernels_compile_as_the_gpu_runs_them(tmp_path):
    """The interpreter launches moe.experts with DOT_F32=True (f32 dot operands); the code compiled
    is the GPU's: bf16 weights from registers into the MMA (2026-12-06: the f32 variant had been
    compiled instead, 57 KB of shared memory against the GPU's 36 KB)."""
    import re

    done = subprocess.run([sys.executable, str(TOOL), "--dump", str(tmp_path), "tests/kernels/test_moe.py",
                           "-k", "experts_odd_dims"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    fc1 = [line for line in done.stdout.splitlines() if "moe.experts._fc1_kernel" in line]
    assert fc1 and all("compiled with DOT_F32=False RNE=False" in line for line in fc1), done.stdout[-2000:]
    for ttgir in tmp_path.glob("_fc*_kernel-*.ttgir"):
        dots = re.findall(r"(?:warp_group_dot|tt\.dot) [^\n]*", ttgir.read_text())
        assert dots and all("bf16" in d and "xf32, #ttg.dot_op" not in d for d in dots), (ttgir.name, dots[:2])
