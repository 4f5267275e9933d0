"""The defenses the catalogue needed, one by one: pure decisions on made-up evidence, and the
few process-level effects (a hook, a torch mode) in a subprocess or restored afterwards."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from gates.accuracy import tap_spec
from gates.launch import filemarks
from gates.protocol import tap_rows
from gates.rules import scope, stats
from gates.side import tamper
from gates.side.replays import stray_threads
from harness.pipeline import accuracy_request
from harness.settings import resolve, validate
from tests.gates.candidates import ROOT


# ------------------------------------------------------------------ the tap's batch sizes
def test_tap_rows_add_every_bucket_not_already_tested():
    assert tap_rows([1, 3, 17, 8], [2, 4]) == [1, 3, 17, 8, 2, 4]
    assert tap_rows([1, 3, 17, 16, 32], [16, 32, 64, 32]) == [1, 3, 17, 16, 32, 64]
    assert tap_rows([1], [1]) == [1]


def test_the_tap_runs_the_bench_buckets_whatever_the_profile_says(tmp_path):
    cfg = resolve(yaml.safe_load((ROOT / "kern.yaml").read_text()), False)
    machine = dataclasses.replace(cfg.machine, test_rows=(1, 3), buckets=(2, 4))
    req = accuracy_request(dataclasses.replace(cfg, machine=machine), tmp_path, "HEAD", "main",
                           tmp_path / "runs", False)
    assert tap_spec(req)["rows"] == [1, 3, 2, 4]


# ------------------------------------------------------------------ the bench's checks
def _visit(bucket, replays, wall_ms, sum_ms, **checks):
    return {"bucket": bucket, "replays": replays, "wall_ms": wall_ms, "sum_ms": sum_ms,
            "unwritten_or_invalid": 0, "nonfinite": 0, "repeated_outputs": 0,
            "threads_left_running": 0, "tampered": [], **checks}


@pytest.mark.parametrize("bad", [{"repeated_outputs": 1}, {"threads_left_running": 2},
                                 {"tampered": ["time.perf_counter was replaced"]},
                                 {"unwritten_or_invalid": 5}])
def test_any_failed_check_fails_the_visit(bad):
    good, worse = _visit(2, 3, 10, 9), _visit(2, 3, 10, 9, **bad)
    assert stats.failed_checks([good, worse]) == [worse]


def test_persisting_l2_flags_any_change_the_candidate_made():
    """The driver sets some L2 aside by itself (11.8 MB on the H200); the side zeroes it before
    every timed series. The candidate's doing: a first series finding an amount main's never
    found (raised, or lowered to a window's size), a later series finding other than the
    side left (0), a series ending with any set aside."""
    def visit(held, left=None, after=0):
        return _visit(2, 3, 10, 9, persisting_l2_bytes=held, persisting_l2_left=left,
                      persisting_l2_after=after)

    main = [visit(11796480), visit(0, left=0), visit(11796480), visit(0, left=0)]
    assert stats.persisting_l2(main, main) is None
    for bad, says in (([visit(50 << 20), visit(0, left=0)], "[52428800] bytes at the candidate's process start"),
                      ([visit(262144), visit(0, left=0)], "[262144] bytes at the candidate's process start"),
                      ([visit(11796480), visit(262144, left=0)], "262144 bytes found before a series"),
                      ([visit(11796480), visit(0, left=0, after=262144)], "262144 bytes set aside after")):
        got = stats.persisting_l2(main, bad)
        assert got["check"] == "persisting_l2" and says in got["why"], (bad, got)
    # B alone (kern bench REV): a change within its own process is still seen
    assert stats.persisting_l2([], [visit(11796480), visit(4096, left=0)])["check"] == "persisting_l2"
    assert stats.persisting_l2([], [visit(11796480), visit(0, left=0)]) is None
    cpu = [_visit(2, 3, 10, 9, persisting_l2_bytes=0, persisting_l2_left=None, persisting_l2_after=0)]
    assert stats.persisting_l2(cpu, cpu) is None and stats.persisting_l2([], []) is None


def test_hidden_time_passes_a_faster_candidate_and_catches_a_slow_clock():
    a = [_visit(16, 30, 30 * 80.5, 30 * 80.0), _visit(16, 30, 30 * 80.6, 30 * 80.0)]
    faster = [_visit(16, 30, 30 * 60.5, 30 * 60.0), _visit(16, 30, 30 * 60.4, 30 * 60.0)]
    assert stats.hidden_time(a, faster, 25.0) is None
    # the candidate's clock runs at half speed: it reports 40 ms of an 80 ms replay
    slow_clock = [_visit(16, 30, 30 * 80.5, 30 * 40.0)]
    bad = stats.hidden_time(a, slow_clock, 25.0)
    assert bad["check"] == "hidden_time" and bad["buckets"] == [16]
    assert "39.950 ms per replay at 16 rows" in bad["why"] and "expected at most 25 %" in bad["why"]
    # work pushed between the replays (a thread that finishes after the clock stopped)
    assert stats.hidden_time(a, [_visit(16, 30, 30 * (60 + 30), 30 * 60.0)], 25.0)
    # a bucket main did not time is not compared, nor a visit the coordinator did not time
    assert stats.hidden_time(a, [_visit(32, 30, 30 * 90, 30 * 10)], 25.0) is None
    assert stats.hidden_time(a, [{"bucket": 16, "replays": 30}], 25.0) is None


def test_an_op_far_from_the_reference_fails_the_bench():
    ops = {"moe.situ": {"rel_rms": 1.0, "nan": 0, "at": "L1.moe.situ.out"},
           "residual.mix": {"rel_rms": 1e-4, "nan": 0, "at": "S3.mix.x"},
           "mla.topk": {"rel_rms": 0.0, "nan": 0, "at": None}}
    bad = stats.far_from_reference(ops, 0.05)
    assert bad["check"] == "ops_match_reference" and bad["ops"] == ["moe.situ"]
    assert bad["why"].startswith("moe.situ at L1.moe.situ.out: rel RMS 1 against the reference")
    assert stats.far_from_reference({k: v for k, v in ops.items() if k != "moe.situ"}, 0.05) is None
    nan = {"kda.core": {"rel_rms": float("nan"), "nan": 3, "at": "L0.kda.core.o"}}
    assert stats.far_from_reference(nan, 0.05)["ops"] == ["kda.core"]


def test_persisting_l2_is_asked_of_the_driver_on_a_gpu_only():
    """Case 15: the set-aside is asked of (and zeroed through) the CUDA driver; the CPU has
    none, and nothing is called there."""
    assert tamper.persisting_l2_bytes(torch.device("cpu")) is None
    assert tamper.persisting_l2_bytes("cpu") is None
    assert tamper.clear_persisting_l2(torch.device("cpu")) is None


def test_the_checks_read_an_outputs_memory_not_what_a_subclass_says():
    """Case 16 (lazy outputs): a tensor subclass whose ``__torch_function__`` does the op's work
    when the output is first read would have the checker trigger the work after the timed
    region; the scorer's and the tap's reads see the memory (still the poison)."""
    from gates.side import replays, tap

    work = []

    class Later(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            while work:
                work.pop()()
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **(kwargs or {}))

    out = torch.full((2, 3), float("nan"))
    out.__class__ = Later
    work.append(lambda: out.copy_(torch.ones(2, 3)))
    assert replays.RAW_READS is tap.RAW_READS is torch._C.DisableTorchFunctionSubclass
    with replays.RAW_READS():
        assert torch.isnan(out).all()  # what the replay left
    assert work and not torch.isnan(out).any() and not work  # a plain read runs the work


def _frames(*files):
    f = None
    for name in reversed(files):  # outermost first, so the innermost ends up on top
        f = SimpleNamespace(f_code=SimpleNamespace(co_filename=name), f_back=f)
    return f


def test_stray_threads_are_those_running_tree_code():
    k = "/runs/worktrees/abc/kernels/"
    frames = {1: _frames(k + "k31/moe/situ.py", "/lib/threading.py"),  # the main thread
              2: _frames("/lib/time.py", k + "k31/moe/situ.py", "/lib/threading.py"),
              3: _frames("/lib/queue.py", "/lib/concurrent/futures/thread.py"),  # an idle worker
              4: _frames("/site/triton/compiler.py")}
    assert stray_threads(frames, 1, k) == 1
    assert stray_threads({1: frames[1], 3: frames[3]}, 1, k) == 0


def test_whole_input_sets_never_repeat_so_a_cache_keyed_on_them_cannot_hit():
    """Case 1, keyed on the inputs: no whole token set of the workload's plain stream repeats
    (the tap's steps). One row's token does: at the gpu profile's bench (256 rows, 104 sets, the
    full vocabulary) 8329 of 26112 (row, token) pairs of sets 2.. had come before in the same
    row (measured), so the scorer's timed sets use ``Workload.timed_inputs`` instead, where no
    row's token, position or state repeats (tests/gates/test_timed.py; the per-row cache of the
    catalogue finds no hit: test_runtime_hacks.py)."""
    from kernels.k31.config import Dims
    from kernels.k31.workload import Workload

    for dims, rows, steps in ((Dims.small(), 4, 40), (Dims.full(), 256, 104)):
        w = Workload(vocab=dims.vocab, rows=rows, context=96, steps=steps, seed=0)
        sets = [tuple(w.step_tokens(i)) for i in range(w.steps)]
        assert len(set(sets)) == len(sets)


# ------------------------------------------------------------------ tamper evidence
def test_seal_names_a_replaced_clock_and_nothing_else(monkeypatch):
    seal = tamper.Seal()
    assert seal.replaced() == []
    real = time.perf_counter
    monkeypatch.setattr(time, "perf_counter", lambda: real() * 0.5)
    monkeypatch.setattr(torch.cuda.Event, "elapsed_time", lambda self, end: 0.0)
    assert seal.replaced() == ["time.perf_counter", "torch.cuda.Event.elapsed_time"]
    assert tamper.verdict(seal, None)[0] == ("time.perf_counter was replaced by the candidate's "
                                            "code (expected the one sealed before the tree loaded)")
    monkeypatch.undo()
    assert seal.replaced() == []


def test_seal_names_another_class_bound_to_the_event_name(monkeypatch):
    """Case 14: a subclass of torch.cuda.Event bound in its place (events that keep no time)
    inherits record and elapsed_time, so only the seal of the name itself sees it; the
    scorer's timer keeps the class bound before the tree loaded."""
    from gates.side import timing

    seal = tamper.Seal()
    real = torch.cuda.Event

    class Untimed(real):
        def __new__(cls, *args, **kwargs):
            return super().__new__(cls, enable_timing=False)

    monkeypatch.setattr(torch.cuda, "Event", Untimed)
    assert seal.replaced() == ["torch.cuda.Event"]
    assert timing.EVENT is real


def test_seal_fails_loudly_on_a_name_that_no_longer_exists():
    with pytest.raises(RuntimeError, match="gates.side.timing.Timer.gone is sealed but does not exist"):
        tamper.Seal(names=(("gates.side.timing", "Timer.gone"),))


def test_workload_reader_is_the_tree_code_on_the_stack():
    tree = Path("/runs/worktrees/abc")
    corpus = "/runs/worktrees/abc/kernels/k31/workload/corpus/austen.txt"
    gate = ["/work/kern/gates/side/session.py", "/work/kern/gates/side/replays.py"]
    protected = ["/runs/worktrees/abc/kernels/k31/workload/__init__.py"]
    kernel = ["/runs/worktrees/abc/kernels/k31/moe/situ.py"]
    assert tamper.workload_reader(corpus, protected + gate, tree) is None  # the gates' own read
    assert tamper.workload_reader(corpus, kernel + gate, tree) == "kernels/k31/moe/situ.py"
    assert tamper.workload_reader(corpus, protected + kernel + gate, tree) == "kernels/k31/moe/situ.py"
    assert tamper.workload_reader("/runs/worktrees/abc/kernels/k31/moe/x.py", kernel, tree) is None


def test_workload_audit_refuses_and_remembers_a_kernels_read(tmp_path):
    """In a subprocess: an audit hook cannot be removed once installed."""
    (tmp_path / "kernels/k31/workload/corpus").mkdir(parents=True)
    (tmp_path / "kernels/k31/workload/corpus/text.txt").write_text("It is a truth")
    (tmp_path / "kernels/k31/workload/__init__.py").write_text(
        "from pathlib import Path\ndef text():\n"
        "    return (Path(__file__).parent / 'corpus' / 'text.txt').read_text()\n")
    (tmp_path / "kernels/k31/moe").mkdir()
    (tmp_path / "kernels/k31/moe/situ.py").write_text(
        "from ..workload import text\ndef peek():\n    return text()\n"
        "def reopen(path):\n    return open(path, 'rb').read()\n")
    for d in ("kernels", "kernels/k31", "kernels/k31/moe"):
        (tmp_path / d / "__init__.py").touch()
    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / "logits_a.pt").write_bytes(b"main's logits")
    script = f"""
import sys
sys.path.insert(0, {str(ROOT)!r}); sys.path.insert(0, {str(tmp_path)!r})
from gates.side.tamper import WorkloadAudit
audit = WorkloadAudit({str(tmp_path)!r}, {{{str(tmp_path / "rec")!r}: "main's recording"}}).install()
from kernels.k31 import workload
from kernels.k31.moe import situ
assert workload.text() == "It is a truth"  # the gates may read it
assert open({str(tmp_path / "rec" / "logits_a.pt")!r}, "rb").read() == b"main's logits"  # and this
for attempt in (situ.peek, lambda: situ.reopen({str(tmp_path / "rec" / "logits_a.pt")!r}),
                lambda: situ.reopen("/proc/self/fd/0"), lambda: situ.reopen("/dev/stdin")):
    try:
        attempt()
        print("allowed")
    except PermissionError as e:
        print("refused:", e)
print("reads:", len(audit.reads))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    refused = [ln for ln in out.stdout.splitlines() if ln.startswith("refused: tamper: ")]
    assert len(refused) == 4 and "allowed" not in out.stdout and "reads: 4" in out.stdout, out.stdout
    assert refused[0].startswith("refused: tamper: kernels/k31/moe/situ.py opened "
                                 "kernels/k31/workload/corpus/text.txt: kernel code may not read the workload")
    assert f"opened main's recording {tmp_path / 'rec' / 'logits_a.pt'}: kernel code may not read " \
           f"main's recording" in refused[1]
    assert "opened /proc/self/fd/0: kernel code may not open a process's file descriptors" in refused[2]
    assert "opened /dev/stdin: kernel code may not open" in refused[3]


def test_guarded_paths_are_named_and_the_rest_left_alone():
    tree, rec = Path("/r/worktrees/abc"), {"/r/tap/main-1": "main's recording"}
    assert tamper.guarded_kind("/r/worktrees/abc/kernels/k31/workload/corpus/a.txt", tree, rec) == "workload"
    assert tamper.guarded_kind("/r/tap/main-1/logits_a.pt", tree, rec) == "main's recording"
    assert tamper.guarded_kind("/r/tap/main-1", tree, rec) == "main's recording"
    assert tamper.guarded_kind("/r/tap/main-10/logits_a.pt", tree, rec) is None  # another folder
    for fd in ("/proc/self/fd/0", "/proc/4242/fd/7", "/proc/thread-self/fd/0", "/proc/1/task/9/fd/0",
               "/dev/stdin", "/dev/fd/0"):
        assert tamper.guarded_kind(fd, tree, rec) == "fd", fd
    for free in ("/proc/self/maps", "/proc/self/fdinfo/0", "/dev/null", "/r/worktrees/abc/kernels/k31/moe/situ.py"):
        assert tamper.guarded_kind(free, tree, rec) is None, free


def test_a_replaced_stdin_is_named():
    assert tamper.stdin_replaced((5, 77), (5, 77)) is None
    why = tamper.stdin_replaced((5, 77), (5, 91))
    assert why.startswith("fd 0 (stdin) is no longer the pipe the gates opened for this side "
                          "(expected device:inode 5:77, found 5:91)")
    assert "found closed" in tamper.stdin_replaced((5, 77), None)


def test_tree_frame_is_the_innermost_frame_of_the_trees_own_code():
    tree = Path("/runs/worktrees/abc")
    kernel = "/runs/worktrees/abc/kernels/k31/moe/situ.py"
    gate = "/work/kern/gates/side/tap.py"
    workload = "/runs/worktrees/abc/kernels/k31/workload/__init__.py"
    assert tamper.tree_frame([gate], tree) is None
    assert tamper.tree_frame([workload, gate], tree) is None  # the protected workload's own code
    assert tamper.tree_frame(["/lib/gc.py", kernel, gate], tree) == "kernels/k31/moe/situ.py"


def test_frame_events_are_the_ways_to_a_frame():
    """Every way Python code gets a frame raises one of these events (CPython 3.10-3.13);
    ``f_back`` and ``f_locals`` raise none but need a frame first."""
    tb = SimpleNamespace()
    assert tamper.frame_event("sys._getframe", (None,)) == "sys._getframe"
    assert tamper.frame_event("sys._current_frames", ()) == "sys._current_frames"
    assert tamper.frame_event("sys.settrace", ()) == "sys.settrace"
    for name in ("tb_frame", "gi_frame", "cr_frame", "ag_frame"):
        assert tamper.frame_event("object.__getattr__", (tb, name)) == name
    assert tamper.frame_event("object.__getattr__", (tb, "__code__")) is None  # triton reads it
    assert tamper.frame_event("object.__getattr__", (tb, "f_code")) is None
    assert tamper.frame_event("ctypes.dlsym", (None, "PyEval_GetFrame")) == "ctypes PyEval_GetFrame"
    assert tamper.frame_event("ctypes.dlsym", (None, "_PyThreadState_GetFrame")) is not None
    assert tamper.frame_event("ctypes.dlsym", (None, "cuMemAlloc")) is None
    assert tamper.frame_event("sys._getframemodulename", (1,)) is None  # a module's name only
    assert tamper.frame_event("open", ("/x", "r", 0)) is None


def test_frame_asker_is_the_trees_code_below_the_gates_unless_a_bookkeeping_library_asked():
    tree = Path("/runs/worktrees/abc")
    gates = "/work/kern/gates/"
    kernel = "/runs/worktrees/abc/kernels/k31/moe/situ.py"
    step = "/runs/worktrees/abc/kernels/k31/step.py"
    hook = "/work/kern/gates/side/tap.py"
    typing_py = "/usr/lib/python3.11/typing.py"
    readers = frozenset({typing_py})
    inspect_py = "/usr/lib/python3.11/inspect.py"
    # the kernel itself, or through inspect / traceback, during the pinned pass
    assert tamper.frame_asker([kernel, hook, step, hook], tree, gates, readers) == "kernels/k31/moe/situ.py"
    assert tamper.frame_asker([inspect_py, kernel, hook], tree, gates, readers) == "kernels/k31/moe/situ.py"
    # a library the kernel called, that is no bookkeeping reader (torch.compile's dynamo)
    assert tamper.frame_asker(["/site/torch/_dynamo/x.py", kernel, hook], tree, gates, readers) \
        == "kernels/k31/moe/situ.py"
    # the gates' own hook asking, with the tree's step further out: not the tree
    assert tamper.frame_asker([inspect_py, hook, step, hook], tree, gates, readers) is None
    # typing naming the module of a TypeVar the tree defines at import
    assert tamper.frame_asker([typing_py, kernel, "/lib/importlib/_bootstrap.py", hook], tree, gates,
                              readers) is None
    # a tree file that merely has a reader's name is no reader
    assert tamper.frame_asker(["/runs/worktrees/abc/kernels/k31/typing.py", hook], tree, gates,
                              readers) == "kernels/k31/typing.py"
    assert tamper.frame_asker([hook, "/work/kern/gates/side/driver.py"], tree, gates, readers) is None
    assert tamper.frame_asker([], tree, gates, readers) is None


def test_the_frame_readers_resolve_to_installed_files():
    files = tamper.reader_files()
    import typing

    assert str(Path(typing.__file__).resolve()) in {str(Path(f).resolve()) for f in files}
    assert all(Path(f).is_file() for f in files)


# Each spelling a kernel module might use to reach the frame that called it; the last two need
# no sys at all. Every one must be refused while the tree's code asks, and none while the
# gates' own code does.
FRAME_WALKS = {
    "sys._getframe": "import sys\ndef walk():\n    return sys._getframe(1)\n",
    "getattr(sys, computed)": "import sys\ndef walk():\n    return getattr(sys, '_get' + 'frame')(1)\n",
    "inspect.currentframe": "import inspect\ndef walk():\n    return inspect.currentframe().f_back\n",
    "traceback's tb_frame": ("def walk():\n    try:\n        raise ValueError\n    except ValueError as e:\n"
                             "        return e.__traceback__.tb_frame.f_back\n"),
    "a generator's gi_frame": ("def walk():\n    def here():\n        me = yield\n"
                               "        yield getattr(me, 'gi_' + 'frame').f_back\n"
                               "    g = here()\n    next(g)\n    return g.send(g)\n"),
    "sys._current_frames": "import sys\ndef walk():\n    return list(sys._current_frames().values())[0]\n",
    "a profiler": ("import sys\ndef walk():\n    seen = []\n    sys.setprofile(lambda f, e, a: seen.append(f))\n"
                   "    sys.setprofile(None)\n    return seen\n"),
    "ctypes PyEval_GetFrame": ("import ctypes\ndef walk():\n    f = ctypes.pythonapi.PyEval_GetFrame\n"
                               "    f.restype = ctypes.py_object\n    return f()\n"),
}


def test_frame_walks_from_tree_code_are_refused_by_any_spelling(tmp_path):
    """Issue 35 item 3, in a subprocess (an audit hook cannot be removed): a kernel module that
    reaches for the frame that called it is refused at run time whatever it calls; the gates'
    own frame access (a traceback printed, sys._getframe) and typing's at the tree's import
    are not."""
    (tmp_path / "kernels/k31/moe").mkdir(parents=True)
    for d in ("kernels", "kernels/k31", "kernels/k31/moe"):
        (tmp_path / d / "__init__.py").touch()
    for i, src in enumerate(FRAME_WALKS.values()):
        (tmp_path / f"kernels/k31/moe/walk{i}.py").write_text(
            "import typing\nT = typing.TypeVar('T')  # typing names this module through a frame\n" + src)
    script = f"""
import importlib, sys, traceback
sys.path.insert(0, {str(ROOT)!r}); sys.path.insert(0, {str(tmp_path)!r})
from gates.side.tamper import WorkloadAudit, verdict
audit = WorkloadAudit({str(tmp_path)!r}).install()
assert sys._getframe(0) is not None  # the gates may
try:
    raise KeyError
except KeyError:
    traceback.format_exc()
for i in range({len(FRAME_WALKS)}):
    m = importlib.import_module(f"kernels.k31.moe.walk{{i}}")
    try:
        got = m.walk()
        print(i, "walked:", type(got).__name__)
    except PermissionError as e:
        print(i, "refused:", e)
print("verdicts:", len(verdict(None, audit)))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if line[:1].isdigit())
    for i, (name, _) in enumerate(FRAME_WALKS.items()):
        assert lines[str(i)].startswith(f"refused: tamper: kernels/k31/moe/walk{i}.py reached for "
                                        f"Python's frames ("), (name, lines[str(i)])
        assert "kernel code may not walk the stack" in lines[str(i)], name
    assert f"verdicts: {len(FRAME_WALKS)}" in out.stdout


def test_gc_searches_from_tree_code_are_refused_and_remembered(tmp_path):
    """Case 19, in a subprocess (an audit hook cannot be removed): a kernel that searches the
    process's objects (main's recorded outputs in the tap's pinned pass) is refused, however
    it reached gc; the gates' own use of gc is not."""
    (tmp_path / "kernels/k31/moe").mkdir(parents=True)
    (tmp_path / "kernels/k31/moe/situ.py").write_text(
        "import sys\n_gc = getattr(sys, 'modules')['gc']\n"
        "def search():\n    return len(_gc.get_objects())\n")
    for d in ("kernels", "kernels/k31", "kernels/k31/moe"):
        (tmp_path / d / "__init__.py").touch()
    script = f"""
import gc, sys
sys.path.insert(0, {str(ROOT)!r}); sys.path.insert(0, {str(tmp_path)!r})
from gates.side.tamper import WorkloadAudit, verdict
audit = WorkloadAudit({str(tmp_path)!r}).install()
from kernels.k31.moe import situ
assert gc.get_objects() and gc.get_referrers(audit) is not None  # the gates may
try:
    situ.search()
except PermissionError as e:
    print("refused:", e)
print("verdict:", verdict(None, audit))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert ("refused: tamper: kernels/k31/moe/situ.py called gc.get_objects: kernel code may not "
            "search the process's objects") in out.stdout
    assert ("verdict: [\"kernels/k31/moe/situ.py called gc.get_objects: kernel code may not "
            "search the process's objects (main's recorded outputs, the gates' tensors)\"]") in out.stdout


def _reachable_tensors(roots) -> list:
    """Every tensor reachable from ``roots`` through ``gc.get_referents``, transitively (modules
    and functions' globals included: the whole graph a frame walk could follow)."""
    import gc
    import warnings

    seen, out, todo = set(), [], list(roots)
    with warnings.catch_warnings():  # isinstance on torch's deprecated aliases warns
        warnings.simplefilter("ignore")
        while todo:
            o = todo.pop()
            if id(o) in seen:
                continue
            seen.add(id(o))
            if isinstance(o, torch.Tensor):
                out.append(o)
            todo.extend(gc.get_referents(o))
    return out


def test_mains_recording_is_in_no_frame_the_trees_code_reaches_during_the_pinned_pass(tmp_path, monkeypatch):
    """Issue 35 item 3, the structure: from inside B's kernel during the tap's pinned pass, walk
    every frame of the stack and everything reachable from their locals (transitively, through
    modules too): no tensor there holds main's recorded output of that call or of a later one.
    The same walk from inside the pass's comparison, once the kernel returned, finds main's
    output of the call (so the walk would see it if it were there). In process, no audit hook:
    this is what a frame walk finds if one got past the audit."""
    import gc
    import importlib

    from gates.side import tap
    from gates.side.fingerprint import raw_hash
    from gates.side.session import Side, Spec

    # the walk matches main's outputs by content, and reaches every module of the process: a seed
    # no other test uses, so what an earlier test in the same worker left in a module cannot
    # match them (under xdist, 2026-12-06, it once found a tensor equal to call 2's at call 0)
    side = Side(Spec(model="small", layout="tp2", seed=35_003, weight_sets=1, context=80, steps=1, rows=[2]), "cpu")
    snap = side.model.state.snapshot()
    store: dict = {}
    record = tap.free_pass(side, [2], 1, snap, {"moe.situ"}, float(2**40), store)
    calls = sorted(store, key=lambda k: k[1])  # the pass's order (one run, one step)
    assert len(calls) >= 3 and all(k[0] == "r2s0" for k in calls)
    digests = [raw_hash(store[k]["outputs"]["out"]) for k in calls]
    shapes = [store[k]["outputs"]["out"].shape for k in calls]  # the dense MLP's, the experts'
    torch.save(store, tmp_path / "kept_a.pt")
    del store
    gc.collect()

    situ = importlib.import_module("kernels.k31.moe.situ")
    real_kernel, real_compare = situ.moe_situ, tap.compare
    seen = {"calls": 0, "during": [], "after": []}

    def mains_outputs_reachable(frame, first: int) -> list[int]:
        """Which of main's recorded outputs of calls ``first``.. some tensor reachable from
        the locals of ``frame`` and every frame outside it holds."""
        roots = []
        while frame is not None:
            roots.append(dict(frame.f_locals))
            frame = frame.f_back
        wanted = {(shapes[n], d): n for n, d in enumerate(digests) if n >= first}
        found = {wanted[k] for t in _reachable_tensors(roots)
                 if t.shape in shapes[first:] and t.dtype == torch.bfloat16
                 and (k := (t.shape, raw_hash(t.detach().contiguous()))) in wanted}
        return sorted(found)

    def walking_kernel(sh, **args):
        n = seen["calls"]
        seen["calls"] += 1
        if n in (0, len(calls) - 1):  # the first and the last recorded call
            seen["during"].append((n, mains_outputs_reachable(sys._getframe(1), n)))
        return real_kernel(sh, **args)

    def walking_compare(a, b, mask=None):
        n = seen["calls"] - 1
        if n in (0, len(calls) - 1) and len(seen["after"]) == (n > 0):  # its first comparison
            seen["after"].append((n, mains_outputs_reachable(sys._getframe(1), n)))
        return real_compare(a, b, mask)

    monkeypatch.setattr(situ, "moe_situ", walking_kernel)
    monkeypatch.setattr(tap, "compare", walking_compare)
    kept = tap.KeptCalls(tmp_path / "kept_a.pt", "cpu")
    try:
        pinned = tap.pinned_pass(side, [2], 1, snap, record, kept, SimpleNamespace(reference_calls_per_op=1))
    finally:
        kept.close()
    assert seen["calls"] == len(calls) == len(pinned["calls"])
    last = len(calls) - 1
    assert seen["during"] == [(0, []), (last, [])]  # nothing of main's, this call or later
    assert seen["after"] == [(0, [0]), (last, [last])]  # once the kernel returned: that call's


def test_kept_calls_hand_each_part_once():
    """A part asked for twice means something took main's recording before the pinned pass."""
    import tempfile

    from gates.side.tamper import TamperError
    from gates.side.tap import KeptCalls

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "kept_a.pt"
        rec = {"inputs": {"gu": torch.ones(2)}, "outputs": {"out": torch.zeros(2)}, "state": {},
               "big_state": {}}
        torch.save({("r1s0", 3): rec}, path)
        kept = KeptCalls(path, "cpu")
        try:
            assert kept.keys == frozenset({("r1s0", 3)})
            assert torch.equal(kept.inputs(("r1s0", 3))["gu"], torch.ones(2))
            assert torch.equal(kept.after(("r1s0", 3))["outputs"]["out"], torch.zeros(2))
            with pytest.raises(TamperError, match=r"main's recording of op call \('r1s0', 3\) \(after\) "
                                                   r"was asked for twice"):
                kept.after(("r1s0", 3))
        finally:
            kept.close()


def test_file_marks_see_a_rewrite_with_the_same_bytes_and_ignore_new_files(tmp_path):
    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / "logits_a.pt").write_bytes(b"A's logits")
    (tmp_path / "tree" / "__pycache__").mkdir(parents=True)
    (tmp_path / "tree" / "situ.py").write_text("x = 1\n")
    roots = [tmp_path / "rec" / "logits_a.pt", tmp_path / "rec" / "absent.json", tmp_path / "tree"]
    before = filemarks.file_marks(roots)
    assert sorted(Path(p).name for p in before) == ["logits_a.pt", "situ.py"]
    (tmp_path / "tree" / "__pycache__" / "situ.pyc").write_bytes(b"")  # Python's, on import
    (tmp_path / "rec" / "noise.json").write_text("{}")  # main's noise passes, beside it
    assert filemarks.changed_files(before, filemarks.file_marks(roots)) == []
    time.sleep(0.01)
    p = tmp_path / "rec" / "logits_a.pt"
    p.write_bytes(p.read_bytes())
    (tmp_path / "tree" / "situ.py").unlink()
    assert filemarks.changed_files(before, filemarks.file_marks(roots)) == [str(p), str(tmp_path / "tree" / "situ.py")]


def test_a_side_that_was_caught_tampering_is_rejected_not_crashed():
    from gates.launch import process as launch
    from gates.rules.scope import ScopeResult
    from harness.pipeline import decide_outcome

    tail = "Traceback ...\nPermissionError: tamper: kernels/k31/moe/situ.py opened kernels/k31/workload/x"
    assert launch.classify(1, False, tail) == "tampered"
    assert launch.reply_kind("TamperError: tamper: time.perf_counter was replaced") == "tampered"
    test = {"verdict": "FAIL", "reasons": ["candidate side ended: tampered"],
            "evidence": {"outcome_a": "ok", "outcome_b": "tampered"}}
    out = decide_outcome(ScopeResult(True), test, None)
    assert (out.state, out.reason) == ("abandoned", "accuracy")
    passed = {"verdict": "PASS bit-identical", "reasons": [], "evidence": {"outcome_b": "ok"}}
    out = decide_outcome(ScopeResult(True), passed, {"outcome": "tampered", "error": "sideB: tamper: ..."})
    assert (out.state, out.reason) == ("abandoned", "scorer check")


def test_fresh_memory_reads_as_poison_in_a_tap_side():
    from gates.side.numerics import poison_fresh_memory

    was = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    try:
        poison_fresh_memory()
        assert torch.isnan(torch.empty(1 << 20)).all()  # a fresh page would read as zeros
        assert (torch.empty(3, dtype=torch.int32) == torch.iinfo(torch.int32).max).all()
    finally:
        torch.use_deterministic_algorithms(was[0], warn_only=was[1])


# ------------------------------------------------------------------ what a commit contains
def test_source_checks_judge_only_what_the_change_adds():
    before = b"import importlib\n\ndef get():\n    return importlib\n"
    after = before + b"import threading\n"
    assert scope.source_problems("kernels/k31/tunables.py", before, before) == []
    assert scope.source_problems("kernels/k31/tunables.py", after, before) == [
        "kernels/k31/tunables.py:5 imports threading: kernels may not use threading (it reaches "
        "outside the kernel: dynamic imports, native code, processes, threads or frames)"]


def test_source_checks_resolve_relative_imports_and_leave_broken_files_to_the_build():
    init = b"from .workload import Workload\n"
    assert "imports kernels.k31.workload" in scope.source_problems("kernels/k31/__init__.py", init)[0]
    assert scope.source_problems("kernels/k31/moe/situ.py", b"def broken(:\n") == []
    honest = b"import math\nimport torch\nimport triton.language as tl\nfrom ..platform import cdiv\n"
    assert scope.source_problems("kernels/k31/moe/situ.py", honest) == []


def test_source_checks_refuse_the_reference_as_a_kernel():
    """Case 21 (a ghost fast path): a kernel that calls the protected reference (its family's
    beside it, another family's, or their shared primitives), directly or through the contracts
    that hand it out, is judged against itself."""
    for line in (b"from .reference import moe_situ\n", b"from . import reference\n",
                 b"from ..mla.reference import rope\n", b"import kernels.k31.moe.reference as ref\n",
                 b"from kernels.k31.lm_head import reference\n",
                 b"from ..reference import rms_norm\n", b"from .. import reference\n",
                 b"from .. import contracts\n", b"import kernels.k31.reference as ref\n"):
        problems = scope.source_problems("kernels/k31/moe/situ.py", line)
        assert len(problems) == 1 and "the reference is what the gates judge kernels against" in problems[0], line
    assert scope.source_problems("kernels/k31/moe/situ.py", b"from ..platform import cdiv\n") == []
    assert scope.source_problems("kernels/k31/moe/situ.py", b"from .reference_tiles import T\n") == []


def test_every_ops_reference_is_protected_and_no_kernel_may_import_it():
    """Each op's reference stands beside its kernels (kernels/k31/<family>/reference.py): the
    file contracts.py names for it is one kern.yaml protects, and its module is one the scope
    gate refuses in a kernel, as are the shared primitives those files import."""
    from kernels.k31 import contracts

    cfg = yaml.safe_load((ROOT / "kern.yaml").read_text())
    modules = {s.reference.__module__ for s in contracts.OPS.values()}
    assert {m.split(".")[2] for m in modules} == {"residual", "dense", "kda", "mla", "moe", "lm_head"}
    for m in modules | {"kernels.k31.reference"}:
        path = m.replace(".", "/") + ".py"
        assert (ROOT / path).is_file() and scope.match(path, cfg["protected"]), path
        assert scope.source_problems("kernels/k31/moe/situ.py", f"import {m}\n".encode()), m
    for s in contracts.OPS.values():  # beside its kernels: the family folder the kernel is in
        assert s.reference.__module__.rsplit(".", 1)[0] == s.kernel.split(":")[0].rsplit(".", 1)[0], s.name


def test_source_checks_refuse_sys_by_a_computed_name_and_frame_links():
    """Issue 35 item 3 (statically; the audit refuses it at run time): sys's attributes through
    getattr, vars or __dict__ (a computed name), under any name sys is bound to, and the links
    a frame walk follows."""
    flagged = {
        b"import sys\nf = getattr(sys, '_get' + 'frame')\n": "calls getattr(sys, ...)",
        b"import sys\nm = getattr(sys, 'modules')\n": "calls getattr(sys, ...)",
        b"import sys\nok = hasattr(sys, 'x')\n": "calls hasattr(sys, ...)",
        b"import sys\nm = vars(sys)['modules']\n": "calls vars(sys, ...)",
        b"import sys\nm = sys.__dict__['modules']\n": "reads sys.__dict__",
        b"import sys as _s\nm = _s.modules\n": "reads sys.modules",
        b"import sys as _s\nf = getattr(_s, name)\n": "calls getattr(sys, ...)",
        b"from sys import _getframe\n": "reads sys._getframe",
        b"def f(e):\n    return e.__traceback__.tb_frame\n": "reads .tb_frame",
        b"def f(fr):\n    return fr.f_back.f_locals\n": "reads .f_back",
        b"def f(g):\n    return g.gi_frame\n": "reads .gi_frame",
    }
    for src, why in flagged.items():
        problems = scope.source_problems("kernels/k31/moe/situ.py", src)
        assert any(why in p for p in problems), (src, problems)
    honest = b"import sys\nimport torch\nprint('x', file=sys.stderr)\nv = getattr(torch, 'float32')\n"
    assert scope.source_problems("kernels/k31/moe/situ.py", honest) == []


def test_scope_names_a_file_moved_out_of_a_protected_path():
    sc = scope.check(commits=1, paths=["kernels/k31/moe/naive.py", "kernels/k31/moe/reference.py"],
                     changed_lines=0, editable=["kernels/k31/**"], protected=["kernels/k31/*/reference.py"])
    assert sc.problems == ["kernels/k31/moe/reference.py is protected"]


def test_kern_yaml_names_the_new_bench_limits():
    data = yaml.safe_load((ROOT / "kern.yaml").read_text())
    assert validate(data) == []
    del data["bench"]["max_op_rel_rms"]
    assert validate(data) == ["bench.max_op_rel_rms: expected a number > 0, found nothing (key missing)"]
