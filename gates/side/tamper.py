"""Tamper evidence inside a side's process: what the candidate's code must leave alone.

A side runs the candidate's kernels in the same Python process as the gate code that times
and checks them, so a kernel module can reach that code: replace ``time.perf_counter`` or
``torch.cuda.Event.elapsed_time`` at import to make every replay look faster, patch a check
to pass, or read the workload's corpus to precompute answers. Two records catch the plain
forms of this:

* ``Seal``: the identity of every callable the timing and checking path uses, captured after
  torch is imported and before the tree's kernels are; ``replaced()`` names what changed.
* ``WorkloadAudit``: an audit hook (``sys.addaudithook``; Python offers no way to remove one)
  that refuses, and records, any file open made while the tree's own code (anything under
  ``kernels/`` outside the protected workload module) is on the stack of: the tree's
  ``kernels/k31/workload/``; a folder the side names as guarded (main's recording, for the
  replay side: it holds the batch sizes and tokens this judgment drew); or a process's file
  descriptors by path (``/proc/*/fd/*``, ``/dev/stdin``, ``/dev/fd/*``: the way back into the
  side's own stdin pipe, or into another side's); and any search of the process's objects
  through ``gc`` (``get_objects``, ``get_referrers``, ``get_referents``) made from the tree's
  code: how a kernel finds main's recorded outputs in the accuracy gate's process, or the
  gates' tensors; and any reach for Python's frames from the tree's code (``FRAME_EVENTS``:
  ``sys._getframe`` and what calls it, a traceback's ``tb_frame``, a generator's or
  coroutine's frame, other threads' frames, a tracer or profiler, the C API's frame
  functions through ctypes): a frame's ``f_back`` leads to the gates' frames and their
  variables (the tap's pinned pass, main's recording). ``f_back``, ``f_locals`` and
  ``f_globals`` raise no event in CPython 3.10-3.13, but each needs a frame first, and every
  way to get one does raise one.
* the side's stdin: the gates hand a side its hidden inputs (``gates/rules/hidden.py``) as one line
  on fd 0 after the tree is imported, so nothing is there to read at import. ``Seal`` records
  which pipe fd 0 is before the tree loads, and ``sys.stdin``; a candidate that puts its own
  pipe in their place (to read the line and pass it on) is named.

This is evidence, not a sandbox: code that runs in the process can defeat any check made in
the process (ctypes, patching this module). The coordinator's own wall clock is the check the
candidate cannot reach (``stats.hidden_time``); protected paths and the scope gate's source
checks stop what can be seen in the commit.
"""
from __future__ import annotations

import ctypes
import os
import re
import sys
import threading
from pathlib import Path


class TamperError(RuntimeError):
    """The candidate's code replaced gate code or read the workload; the candidate must stop."""


# (module name, attribute path) of everything the timed and checked path calls. A kernel
# module has no reason to replace any of them.
SEALED = (
    ("time", "perf_counter"), ("time", "perf_counter_ns"), ("time", "monotonic"),
    ("time", "monotonic_ns"), ("time", "time"), ("time", "time_ns"),
    ("torch", "isnan"), ("torch", "isfinite"), ("torch", "equal"), ("torch", "zeros"),
    ("torch", "Tensor.fill_"), ("torch", "Tensor.copy_"), ("torch", "Tensor.sum"),
    ("torch", "Tensor.clone"), ("torch", "Tensor.double"), ("torch", "Tensor.cpu"),
    ("torch.cuda", "synchronize"), ("torch.cuda", "Event"), ("torch.cuda", "Event.record"),
    ("torch.cuda", "Event.elapsed_time"), ("torch.cuda", "Event.synchronize"),
    ("torch.cuda", "CUDAGraph.replay"), ("torch.cuda", "CUDAGraph.capture_begin"),
    ("torch.cuda", "CUDAGraph.capture_end"), ("torch.cuda", "graph"),
    ("json", "dumps"), ("json", "loads"), ("sys", "stdin"),
    ("gates.side.timing", "Timer.measure"), ("gates.side.timing", "Timer.once"),
    ("gates.side.timing", "Timer.capture"), ("gates.side.numerics", "poison"),
    ("gates.side.numerics", "unwritten"), ("gates.side.numerics", "compare"),
    ("gates.side.fingerprint", "digest_on_device"), ("gates.side.fingerprint", "raw_hash"),
    ("gates.side.fingerprint", "Pending.check"), ("gates.side.fingerprint", "Pending.now"),
    ("gates.side.fingerprint", "Pending.resolve"), ("gates.side.fingerprint", "_check_triton"),
    ("gates.side.fingerprint", "_check_torch"),
    ("gates.side.replays", "CapturedSteps.time"), ("gates.side.replays", "CapturedSteps.verify"),
    ("gates.side.replays", "CapturedSteps._next_inputs"), ("gates.side.replays", "reply"),
    ("gates.side.tap", "TapHook.__call__"), ("gates.side.tap", "TapHook._before"),
    ("gates.side.tap", "TapHook._after"), ("gates.side.tap", "TapHook.settle"),
    ("gates.side.tap", "free_pass"), ("gates.side.tap", "pinned_pass"),
    ("gates.side.tamper", "Seal.replaced"), ("gates.side.tamper", "WorkloadAudit.__call__"),
)


def _lookup(module: str, path: str):
    obj = sys.modules[module]
    for part in path.split("."):
        # a class attribute as stored (a function, not a bound method made per access)
        obj = vars(obj)[part] if isinstance(obj, type) and part in vars(obj) else getattr(obj, part)
    return obj


def replaced(sealed: dict, lookup=_lookup) -> list[str]:
    """Pure over ``lookup``: the names whose current object is not the sealed one."""
    out = []
    for (module, path), original in sealed.items():
        try:
            now = lookup(module, path)
        except (KeyError, AttributeError):
            now = None
        if now is not original:
            out.append(f"{module}.{path}")
    return out


def fd_identity(fd: int) -> tuple[int, int] | None:
    """(device, inode) of what ``fd`` refers to, or None when it is closed."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def stdin_replaced(before: tuple | None, now: tuple | None) -> str | None:
    """Pure: why fd 0 is not the pipe it was (None: it is)."""
    if before == now:
        return None
    return (f"fd 0 (stdin) is no longer the pipe the gates opened for this side (expected "
            f"device:inode {_ident(before)}, found {_ident(now)}): the candidate's code replaced "
            f"it, as it would to read the gates' hidden inputs and pass them on")


def _ident(x) -> str:
    return "closed" if x is None else f"{x[0]}:{x[1]}"


class Seal:
    """Identities of ``SEALED`` (and of fd 0) at one moment; ``replaced()`` lists what
    differs now."""

    def __init__(self, names=SEALED):
        import importlib

        self.stdin = fd_identity(0)
        self.sealed = {}
        for module, path in names:
            importlib.import_module(module)  # the gate modules the mode will use, loaded now
            try:
                self.sealed[(module, path)] = _lookup(module, path)
            except (KeyError, AttributeError):
                raise RuntimeError(f"tamper: {module}.{path} is sealed but does not exist; whoever "
                                   f"renamed it updates SEALED in gates/side/tamper.py") from None

    def replaced(self) -> list[str]:
        return replaced(self.sealed)

    def stdin_replaced(self) -> str | None:
        return stdin_replaced(self.stdin, fd_identity(0))


def tree_frame(frames: list[str], tree: Path) -> str | None:
    """Pure: the innermost frame of the tree's own code, relative to the tree, or None.

    ``frames``: the files of the stack, innermost first. The tree's own code is anything
    under ``<tree>/kernels/`` outside the protected workload module (that module reading its
    corpus for the gate is fine; a kernel doing it, directly or through that module, is not)."""
    workload = os.path.join(str(tree), "kernels", "k31", "workload") + os.sep
    kernels = os.path.join(str(tree), "kernels") + os.sep
    for f in frames:
        if f.startswith(kernels) and not f.startswith(workload):
            return f[len(str(tree)) + 1:]
    return None


def workload_reader(path: str, frames: list[str], tree: Path) -> str | None:
    """Pure: the tree file that reads ``path`` from the workload folder, or None.

    An open under ``<tree>/kernels/k31/workload/`` is a read of the workload; it is the tree's
    own read when :func:`tree_frame` finds the tree's code on the stack."""
    workload = os.path.join(str(tree), "kernels", "k31", "workload") + os.sep
    if not path.startswith(workload):
        return None
    return tree_frame(frames, tree)


# a process's file descriptors opened by path: on Linux opening /proc/self/fd/0 for writing
# gives the write end of the side's own stdin pipe, so a line read from it could be put back
FD_PATH = re.compile(r"^/(proc/[^/]+(/task/[^/]+)?/fd/\d+|dev/fd/\d+|dev/stdin)$")


def guarded_kind(path: str, tree: Path, guarded: dict) -> str | None:
    """Pure: what ``path`` is, when the tree's code may not open it: ``"workload"``, the name
    of a guarded folder it lies in (``guarded``: folder -> name), or ``"fd"``; else None."""
    workload = os.path.join(str(tree), "kernels", "k31", "workload") + os.sep
    if path.startswith(workload):
        return "workload"
    for folder, name in guarded.items():
        if path == folder or path.startswith(folder.rstrip(os.sep) + os.sep):
            return name
    if FD_PATH.match(path):
        return "fd"
    return None


def refusal(who: str, path: str, kind: str, tree: Path) -> str:
    """The sentence a refused open raises and the tamper verdict repeats."""
    if kind == "workload":
        return (f"{who} opened {path[len(str(tree)) + 1:]}: kernel code may not read the "
                f"workload (the gates choose the inputs; the candidate must not depend on them)")
    if kind == "fd":
        return (f"{who} opened {path}: kernel code may not open a process's file descriptors "
                f"(a side's stdin carries the gates' hidden inputs)")
    return (f"{who} opened {kind} {path}: kernel code may not read {kind} (it holds the inputs "
            f"this judgment drew; the candidate must not depend on them)")


GC_SEARCHES = ("gc.get_objects", "gc.get_referrers", "gc.get_referents")  # audit event names

# Audit events that hand Python code a frame (CPython 3.10-3.13; the 3.12 names never fire
# on older versions): sys._getframe (inspect.currentframe, inspect.stack, traceback's and
# logging's stack walks call it), other threads' frames and exceptions, a tracer or profiler
# (its callback gets every frame), and the reads of a traceback's, generator's, coroutine's
# or async generator's frame (``object.__getattr__`` with the attribute's name).
FRAME_EVENTS = ("sys._getframe", "sys._current_frames", "sys._current_exceptions",
                "sys.settrace", "sys.setprofile", "sys._settraceallthreads",
                "sys._setprofileallthreads", "sys.monitoring.register_callback")
FRAME_ATTRS = ("tb_frame", "gi_frame", "cr_frame", "ag_frame")
# Libraries that read frames for their own bookkeeping when the tree's code calls them and
# hand none back (the module name of a class typing or collections builds, a custom op's
# source line, triton filtering a compile error's traceback): when one of them is the code
# that asked, the tree's code did not. Module names, found without importing them.
FRAME_READERS = ("typing", "typing_extensions", "collections", "enum", "torch.library",
                 "torch._library.utils", "triton.compiler.compiler")


def frame_event(event: str, args) -> str | None:
    """Pure: what a frame-handing audit event reaches (``event``'s name, or the attribute read),
    or None when ``event`` hands out no frame. ``ctypes.dlsym`` of a name of CPython's C API
    (``PyEval_GetFrame``, ``PyThreadState_GetFrame``, ...) counts: the native way to the same."""
    if event in FRAME_EVENTS:
        return event
    if event == "object.__getattr__" and len(args) > 1 and args[1] in FRAME_ATTRS:
        return str(args[1])
    if event == "ctypes.dlsym" and len(args) > 1 and isinstance(args[1], str) and \
            args[1].lstrip("_").startswith("Py"):
        return f"ctypes {args[1]}"
    return None


def frame_asker(frames: list[str], tree: Path, gates: str, readers: frozenset) -> str | None:
    """Pure: the tree file that asked for a frame, or None when the tree's code did not.

    ``frames``: the files of the stack, innermost (the code that raised the event) first. The
    tree asked when its own code lies on the stack below the innermost frame of the gates
    (``gates``: their folder; the gates' hook calls kernels, and kernels may call back nothing
    of the gates that hands out frames), unless the innermost frame is one of ``readers``
    (files of ``FRAME_READERS``)."""
    if frames and frames[0] in readers:
        return None
    for f in frames:
        if f.startswith(gates):
            return None
        who = tree_frame([f], tree)
        if who is not None:
            return who
    return None


def reader_files(names=FRAME_READERS) -> frozenset:
    """The source files of ``names`` (absolute; those not installed are left out)."""
    import importlib.util

    out = set()
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.origin:
            out.add(os.path.abspath(spec.origin))
    return frozenset(out)


def frame_refusal(who: str, what: str) -> str:
    return (f"{who} reached for Python's frames ({what}): kernel code may not walk the stack "
            f"(it leads to the gates' variables: main's recorded outputs in the pinned pass)")


class WorkloadAudit:
    """An audit hook that refuses the tree's opens of the workload, of the ``guarded`` folders
    (``{folder: name}``) and of file descriptors by path, its searches of the process's
    objects and its reach for Python's frames, and remembers them."""

    def __init__(self, tree: Path, guarded: dict | None = None):
        self.tree = Path(tree).resolve()
        self.guarded = {os.path.abspath(str(k)): v for k, v in (guarded or {}).items()}
        self.reads: list[str] = []
        self.gates = str(Path(__file__).resolve().parents[1]) + os.sep
        self.readers = reader_files()
        self._busy = threading.local()  # this hook's own frame walk raises events too

    @staticmethod
    def _frames() -> list[str]:
        """The stack's files below this hook (``_frames``, ``_check``, ``__call__``), innermost
        first."""
        frames, f = [], sys._getframe(3)
        while f is not None:
            frames.append(os.path.abspath(f.f_code.co_filename))
            f = f.f_back
        return frames

    def __call__(self, event: str, args) -> None:
        if getattr(self._busy, "on", False):
            return
        self._busy.on = True
        try:
            self._check(event, args)
        finally:
            self._busy.on = False

    def _check(self, event: str, args) -> None:
        what = frame_event(event, args)
        if what is not None:
            who = frame_asker(self._frames(), self.tree, self.gates, self.readers)
            if who is not None:
                refused = frame_refusal(who, what)
                self.reads.append(refused)
                raise PermissionError(f"tamper: {refused}")
            return
        if event in GC_SEARCHES:
            who = tree_frame(self._frames(), self.tree)
            if who is not None:
                what = (f"{who} called {event}: kernel code may not search the process's "
                        f"objects (main's recorded outputs, the gates' tensors)")
                self.reads.append(what)
                raise PermissionError(f"tamper: {what}")
            return
        if event != "open" or not args or not isinstance(args[0], (str, bytes, os.PathLike)):
            return
        path = os.path.abspath(os.fsdecode(args[0]))
        kind = guarded_kind(path, self.tree, self.guarded)
        if kind is None:
            return
        who = tree_frame(self._frames(), self.tree)
        if who is None:
            return
        what = refusal(who, path, kind, self.tree)
        self.reads.append(what)
        raise PermissionError(f"tamper: {what}")

    def install(self) -> "WorkloadAudit":
        sys.addaudithook(self)
        return self


def verdict(seal: Seal | None, audit: WorkloadAudit | None) -> list[str]:
    """Every sign of tampering so far, one sentence each (empty: none)."""
    out = []
    if seal is not None:
        out += [f"{name} was replaced by the candidate's code (expected the one sealed "
                f"before the tree loaded)" for name in seal.replaced()]
        moved = seal.stdin_replaced()
        if moved:
            out.append(moved)
    if audit is not None:
        out += audit.reads
    return out


CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06  # cuda.h's CUlimit
_CDLL = ctypes.CDLL  # bound before the tree loads (a tree may reach ctypes through sys.modules)


def persisting_l2_bytes(device) -> int | None:
    """The L2 set aside for persisting accesses in this process's CUDA context (None on the
    CPU). Nothing of the gates' or torch's sets it, and an access policy window that keeps data
    in L2 across replays (``cuStreamSetAttribute``) needs it above 0: the candidate set it."""
    if getattr(device, "type", device) != "cuda":
        return None
    value = ctypes.c_size_t(0)
    rc = _CDLL("libcuda.so.1").cuCtxGetLimit(ctypes.byref(value),
                                             ctypes.c_int(CU_LIMIT_PERSISTING_L2_CACHE_SIZE))
    if rc != 0:
        raise RuntimeError(f"tamper: cuCtxGetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE) returned "
                           f"{rc} (expected 0, CUDA_SUCCESS): the environment's driver cannot "
                           f"be asked what L2 is set aside")
    return int(value.value)


def clear_persisting_l2(device) -> int | None:
    """Set this process's persisting-L2 set-aside to zero and return every persisting line to
    normal; returns what was set aside before (None on the CPU). Called before each series of
    timed replays on both sides: with nothing set aside, an access policy window (on a stream,
    or baked into the captured graph's kernels) cannot keep data in L2 from one replay to the
    next, whatever window the candidate set and however it found the driver, so the defense
    does not rest on seeing the window. What was set aside before is still reported (a raise
    beyond main's is a failed check, ``stats.persisting_l2``)."""
    held = persisting_l2_bytes(device)
    if held is None:
        return None
    cu = _CDLL("libcuda.so.1")
    rc = cu.cuCtxSetLimit(ctypes.c_int(CU_LIMIT_PERSISTING_L2_CACHE_SIZE), ctypes.c_size_t(0))
    if rc == 0:
        rc = cu.cuCtxResetPersistingL2Cache()
    if rc != 0:
        raise RuntimeError(f"tamper: setting the persisting-L2 set-aside to 0 returned {rc} "
                           f"(expected 0, CUDA_SUCCESS): the environment's driver refuses "
                           f"cuCtxSetLimit/cuCtxResetPersistingL2Cache")
    return held
