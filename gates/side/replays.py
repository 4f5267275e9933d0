"""One side of the scorer, inside its own subprocess, driven by JSON lines on stdin.

Every timed replay is one CUDA-graph replay of the whole step. Before it (untimed) the step's
tokens and positions are set to an input set never used before in this process and the
recurrent state of its rows to its seeded initial values scaled by that set's factors (no row
sees a token, position or state twice: ``Workload.timed_inputs``), and the outputs are
poisoned; after it (untimed) the MLA cache slots it wrote are put back, and a device-side check
records whether the outputs were fully
written, finite and different from the previous replay's (reading the outputs' memory, not
what a tensor subclass of the candidate's says: its methods could do the work when the check
reads), and ``gates/side/timed.py`` keeps the replay's outputs and state digests, which main's side
compares with its own replay by replay (``judge_outputs``): the outputs of the replays that were
timed are the outputs judged. So a kernel that caches results across replays, leaves outputs
unwritten, or skips work only in the timed replays shows up as a failed check rather than a
faster score. On a GPU the L2 set aside for persisting accesses is zeroed before every series
of timed replays (an access policy window cannot keep data in L2 across replays) and a raise
beyond main's is reported. After each replay it also counts other Python threads still running the tree's code
(work carried out of the timed region) and asks the tamper seal whether the candidate
replaced the clocks or the checks (``gates/side/tamper.py``). ``verify`` re-runs one unseen input
set from its state through the graph and eagerly and compares them: the graph computes
what the step computes. With ``ops`` its eager run also checks op calls against the protected
reference (``gates/side/opcheck.py``) at every bucket: here, in the scorer's process and at its
shapes (all calls at the first bucket, a sample drawn afresh per run at the others).

The model comes from the side's own build, or from a store process through CUDA IPC when
both sides' protected model code agrees (``model_digest``), so two sides fit on one GPU.

Commands: one JSON line each on stdin, one JSON reply each on stdout after the driver's
``{"imported": true}``; what they are and hold is ``gates/protocol.py``'s ``BenchCommand`` and
its subclasses (``COMMANDS``).
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
from pathlib import Path

import torch

from .. import protocol
from ..protocol import BenchOptions
from .clock import clock
from .session import Side, Spec, environment, log
from .tamper import clear_persisting_l2, persisting_l2_bytes
from .timed import WrittenSlots

_stdout = sys.stdout
# The checks read what an output's memory holds, not what a tensor subclass the candidate gave
# it says: a subclass's __torch_function__ could run the work when the checker first reads the
# output, after the timed region (lazy outputs). Bound before the tree loads.
RAW_READS = torch._C.DisableTorchFunctionSubclass


def reply(obj) -> None:
    _stdout.write(json.dumps(obj, default=str) + "\n")
    _stdout.flush()


class CapturedSteps:
    """The step captured as a graph at every bucket, timed, checked and compared on the
    scorer's commands (:func:`side_main`)."""

    def __init__(self, opts: BenchOptions, device: str, seal=None, audit=None, rank: int = 0,
                 hidden=None, sketch_seed: int = 0, claim: str | None = None,
                 attach_sha256: str | None = None):
        import kernels

        from .timed import TimedRecord

        self.kernels_dir = str(Path(kernels.__file__).resolve().parent) + os.sep
        self.seal, self.audit = seal, audit
        self.opts = opts
        self.spec = Spec.of(opts)
        self.buckets = list(opts.rows)
        # the hidden input seed sets the tokens and positions only: an attached (shared)
        # model was built without it and is the same model
        self.side = Side(self.spec, device, attach=opts.attach, rank=rank,
                         input_seed=hidden.input_seed if hidden else None, attach_sha256=attach_sha256)
        self.dev = self.side.device
        self.steps, self.timers = {}, {}
        self.cursor = {}  # next unused input set per bucket
        self.l2_left = None  # the persisting-L2 set-aside the gates last left (None: not yet)
        self.sums = {}
        self.record = TimedRecord(self.side, sketch_seed, claim)
        self._written = None  # the MLA cache slots the coming run writes (timed.WrittenSlots)

    def prepare(self) -> dict:
        from .timing import Timer

        t0 = time.monotonic()
        # every timed replay starts from this copy (gates/side/timed.py)
        self.record.snapshot_initial(max(self.buckets))
        for b in self.buckets:
            step = self.side.step(b)
            self.steps[b] = step
            self.cursor[b] = 1
            self._next_inputs(b)  # input set 1
            step.run()  # compile every kernel specialization for this bucket
            timer = Timer(step.run, self.dev)
            timer.capture()
            self._put_back()
            self.timers[b] = timer
            log(f"bench: captured {b} rows")
        self.side.sync()
        # which path each cross-rank sum took (one count per captured call; none at world 1)
        paths = dict(getattr(self.side.comm, "paths", {}))
        return {"capture_s": time.monotonic() - t0, "build_s": self.side.build_s,
                "environment": environment(self.dev), "workload": self.side.workload.describe(),
                "all_reduce_paths": paths}

    def _next_inputs(self, b: int) -> int:
        """Untimed, before a replay: the next unused input set (tokens, positions, the
        recurrent rows' state scaled from their initial values), the MLA cache slots it will
        write copied (:meth:`_put_back` after it), outputs poisoned. Returns the input set."""
        step = self.steps[b]
        i = self.cursor[b]
        self.cursor[b] += 1
        if i >= self.side.workload.steps:
            raise RuntimeError(f"bench: bucket {b} used all {self.side.workload.steps} unique "
                               f"input sets; raise the workload's steps")
        self.replay_inputs(step, b, i)
        step.logits.fill_(float("nan"))
        step.next_token.fill_(-1)
        return i

    def _put_back(self) -> None:
        """Untimed, after a run: the MLA cache slots it wrote hold their prefilled values again
        (later sets sit at higher positions and read them as context)."""
        if self._written is not None:
            self._written.put_back()
            self._written = None

    def replay_inputs(self, step, b: int, i: int) -> None:
        """What the timed replay of input set ``i`` at ``b`` rows starts from, on ``step`` (the
        captured one, or an eager one: verify, the band pass): set ``i``'s tokens and positions,
        the recurrent rows' state scaled from their initial values by the set's factors, and
        the MLA cache slots the run will write copied (:meth:`_put_back` after the run)."""
        self.record.reset(b, self.side.set_timed_inputs(step, i))
        self._written = WrittenSlots(self.side.model.state, self.side.shapes, step.pos)

    def band(self, kept: dict, band: dict, near_tie_factor: float) -> dict:
        """Main's band at this context on the replays ``compare`` kept (``gates/side/timed.py``
        ``band_totals``), the touched ops (``band["ops"]``; None: every op) on the reference.
        -> band, band_s"""
        from .timed import band_totals

        t0 = time.monotonic()
        if band["ops"] is None:  # the gate could not tell which ops changed: all, as its band
            from kernels.k31 import contracts

            ops = set(contracts.OPS)
        else:
            ops = set(band["ops"])
        for b, k in kept.items():
            self.reproduces(b, k["sets"][0], k["a"][0])
        ref = {b: self.reference_replays(b, k["sets"], ops) for b, k in kept.items()}
        out = band_totals(kept, ref, near_tie_factor, float(band["kl_pass"]))
        return {"band": {**out, "ops": sorted(ops)}, "band_s": time.monotonic() - t0}

    def reproduces(self, b: int, i: int, logits: torch.Tensor) -> None:
        """Main's timed replay of input set ``i`` at ``b`` rows, run again eagerly from
        :meth:`replay_inputs`, must give the logits it kept (``logits``) byte for byte: else the
        band would weigh the reference on inputs other than the timed ones (a bench bug, e.g.
        timed inputs drawn where ``replay_inputs`` does not follow)."""
        step = self.steps[b]
        self.replay_inputs(step, b, i)
        step.logits.fill_(float("nan"))
        step.run()
        self._put_back()
        with RAW_READS():
            if not torch.equal(step.logits, logits.to(step.logits.device)):
                raise RuntimeError(f"timed band at {b} rows: main's replay of input set {i} run "
                                   f"again gave other logits than its timed replay (expected the "
                                   f"same inputs and state: a bench bug)")

    def reference_replays(self, b: int, sets: list[int], ops: set) -> torch.Tensor:
        """Untimed, after every timed round: the timed replays of input sets ``sets`` at ``b``
        rows again, eagerly, with the ops ``ops`` on the protected reference (main's band at the
        scorer's context, ``gates/side/timed.py`` ``band_totals``). -> [sets, b, vocab] logits."""
        from .tap import ReferenceOps

        step = self.side.step(b, hook=ReferenceOps(ops, self.side.shapes))
        out = []
        for i in sets:
            self.replay_inputs(step, b, i)
            step.logits.fill_(float("nan"))
            step.run()
            self._put_back()
            with RAW_READS():
                out.append(step.logits.clone())
        return torch.stack(out) if out else torch.empty(0, b, 0, device=self.dev)

    def time(self, b: int, n: int, first: int | None = None) -> dict:
        """``n`` timed replays on input sets ``first``, ``first + 1``, ... (the coordinator's
        count, so that a side in alternating processes continues where its last process
        stopped: both sides' n-th replay runs input set n). Never a set this process used."""
        if first is not None:
            if first < self.cursor[b]:
                raise RuntimeError(f"bench: asked to time input set {first} at {b} rows, but this "
                                   f"process already used sets up to {self.cursor[b] - 1} (a "
                                   f"coordinator bug: every timed replay needs an unused set)")
            self.cursor[b] = first
        step, timer = self.steps[b], self.timers[b]
        stats = torch.zeros(n, 3, dtype=torch.float64, device=self.dev)
        prev = torch.zeros((), dtype=torch.float64, device=self.dev)
        vocab = self.side.model.weights.embed.shape[0]

        strays = []
        # several ranks: every replay's replicated outputs, digested on the device (untimed),
        # so ranks that part ways on some replays only are seen, not just at the visit's end
        replicated = [] if self.spec.world > 1 else None
        sets = []
        from .timing import Spans

        spans = Spans(self.dev)  # what the judged outputs add between replays

        def after(j):
            """Untimed, on the device, after replay ``j``: its outputs checked and kept."""
            strays.append(self._stray_threads())
            if replicated is not None:
                replicated.append(_replicated_digest(step))
            with spans.span("record"):
                self.record.keep(b, sets[-1], step)
            with spans.span("reset"):
                self._put_back()
            s = step.logits.double().sum()
            stats[j, 0] = torch.isnan(step.logits).sum() + \
                ((step.next_token < 0) | (step.next_token >= vocab)).sum()
            stats[j, 1] = s
            stats[j, 2] = (s == prev).double()
            prev.copy_(s)

        def between(i):
            with RAW_READS():
                if i > 0:
                    after(i - 1)
                with spans.span("reset"):
                    sets.append(self._next_inputs(b))

        # the series' bounds in the side's log, so what the tree's code printed while it ran
        # can be told from what it printed in prepare or verify
        log(f"bench: timing input sets {self.cursor[b]}..{self.cursor[b] + n - 1} at {b} rows")
        held = clear_persisting_l2(self.dev)  # nothing set aside while timed (tamper.py)
        times = timer.measure(n, between)
        with RAW_READS():
            after(n - 1)
            st = stats.cpu()
        log(f"bench: timed {n} replays at {b} rows")
        checks = {"replays": n, "unwritten_or_invalid": int(st[:, 0].sum()),
                  "nonfinite": int((~torch.isfinite(st[:, 1])).sum()),
                  "repeated_outputs": int(st[:, 2].sum()),
                  "threads_left_running": sum(1 for x in strays if x),
                  "tampered": self._tampered(),
                  # L2 set aside for persisting accesses (an access policy window's need):
                  # found before the gates zeroed it for this series, what they had left it
                  # at before (None: the process's first series), and found after the series
                  "persisting_l2_bytes": held or 0, "persisting_l2_left": self.l2_left,
                  "persisting_l2_after": persisting_l2_bytes(self.dev) or 0}
        if held is not None:
            self.l2_left = 0
        out = {"times": times, "checks": checks, "untimed_ms": spans.totals_ms()}
        if self.spec.world > 1:  # the coordinator checks that every rank ended the same
            from .rank import rank_digests

            d = rank_digests(self.side, step)
            every = hashlib.sha256(torch.stack(replicated).cpu().numpy().tobytes()).hexdigest()[:16]
            out["replicated_sha"] = f"{d['replicated_sha']}-{d['logits_sha']}-{every}"
        return out

    def _stray_threads(self) -> int:
        """Threads other than this one that are running the tree's code right after a replay
        returned: work the candidate carried out of the timed region. (Idle pool workers and
        library threads run no tree code, so they do not count.)"""
        return stray_threads(sys._current_frames(), threading.get_ident(), self.kernels_dir)

    def _tampered(self) -> list[str]:
        from .tamper import verdict

        return verdict(self.seal, self.audit)

    def verify(self, b: int, ops: bool = False, sample: dict | None = None) -> dict:
        """Graph replay vs eager step on an unseen input, both from the initial state; with
        ``ops`` the eager step runs under a reference check of its op calls (every call, or
        for an op in ``sample`` the calls it lists)."""
        from .opcheck import ReferenceCheck

        step, timer = self.steps[b], self.timers[b]
        sh = self.side.shapes
        i = self._next_inputs(b)  # an unused input set and its state, outputs poisoned
        timer.once()
        with RAW_READS():  # (never around the candidate's code: it must not tell checked from timed)
            graph_logits = step.logits.clone()
        check = ReferenceCheck(sh, sample=sample) if ops else None
        eager_step = self.side.step(b, hook=check) if ops else step
        self.replay_inputs(eager_step, b, i)
        eager_step.logits.fill_(float("nan"))
        eager_step.run()
        self._put_back()  # both runs wrote the same slots
        with RAW_READS():
            eager = eager_step.logits
            equal = bool(torch.equal(graph_logits, eager))
            diff = float((graph_logits.double() - eager.double()).abs().max())
            out = {"equal": equal, "max_abs_diff": diff, "nan": int(torch.isnan(graph_logits).sum())}
        if check is not None:
            out["ops"] = check.table()
        return out

    def cost(self, b: int) -> dict:
        from .profile import OpClock

        clock = OpClock(self.side.shapes, self.dev)
        step = self.side.step(b, hook=clock)
        self.side.set_timed_inputs(step, self.cursor[b])
        written = WrittenSlots(self.side.model.state, self.side.shapes, step.pos)
        step.run()
        written.put_back()
        table = clock.table()
        return {"bytes": sum(r["bytes"] for r in table.values()),
                "flops": sum(r["flops"] for r in table.values()),
                "by_op": {k: {"bytes": v["bytes"], "flops": v["flops"]} for k, v in table.items()}}

    def baseline(self, kind: str, b: int, n: int) -> dict:
        """The step on the protected reference ops: eagerly, or with every reference op
        compiled by torch.compile (one compiled function per op; the 93-layer step as a single
        graph is not compiled: its trace alone would outlast any bench; loops over data-dependent
        counts that a reference's module names stay Python around compiled callees)."""
        from .timing import Timer

        hook = CompiledReference(self.side.shapes) if kind == "compile" else None
        step = self.side.step(b, mode="reference", hook=hook)
        self.side.set_timed_inputs(step, self.cursor[b])
        written = WrittenSlots(self.side.model.state, self.side.shapes, step.pos)
        graphs = compiled_graphs if hook else (lambda: 0)
        ran = [0]

        def run() -> None:  # an untimed step; the first ones take minutes when compiling
            t, g = time.monotonic(), graphs()
            step.run()
            self.side.sync()
            ran[0] += 1
            log(f"{kind} baseline, {b} rows: untimed step {ran[0]} took {time.monotonic() - t:.1f} s, "
                f"compiled {graphs() - g} graph(s)")

        def timed() -> list:
            return Timer(step.run, self.dev).measure(n)

        try:
            t0 = time.monotonic()
            run()  # compiles every op on first use
            first_s = time.monotonic() - t0
            if hook is None:
                timed_from, times, warm, while_timed = time.monotonic(), timed(), 0, 0
            else:
                times, warm, while_timed, timed_from = timed_once_stable(run, timed, f"{kind} baseline, {b} rows")
        except Exception as e:  # noqa: BLE001 - report any failure of a baseline as data
            if type(e).__name__ == "FailOnRecompileLimitHit":
                return {"error": f"{kind} baseline failed: a reference function was compiled more than "
                                 f"{RECOMPILE_LIMIT} times (expected fewer: past it, it would run eagerly "
                                 f"inside the compiled step); no times kept. {type(e).__name__}: {e}"[:500]}
            return {"error": f"{kind} baseline failed: {type(e).__name__}: {e}"[:500]}
        finally:
            written.put_back()
        if while_timed:  # its times hold compiles: no measurement of the compiled step
            return {"error": f"{kind} baseline: torch.compile compiled {while_timed} graph(s) during the "
                             f"last of {BASELINE_TRIES} timed series (expected none after {warm} warm-up step(s)); "
                             "no times kept"}
        return {"times": times, "first_call_s": first_s, "warmup_s": timed_from - t0 - first_s,
                "warmup_steps": warm, "compiled_ops": sorted(hook.compiled) if hook else None}


BASELINE_WARM_MAX = 8  # warm-up steps of the compile baseline before it gives up on a stable step
RECOMPILE_LIMIT = 256  # compiles of one function (rows' and experts' lengths) before dynamo gives up
BASELINE_TRIES = 4  # timed series of the compile baseline before it reports that it kept compiling


def compiled_graphs() -> int:
    """How many graphs torch.compile has compiled in this process."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def timed_once_stable(run, timed, what: str) -> tuple[list, int, int, float]:
    """The compiled step's timed series. Later steps meet new lengths (the references loop over
    rows and experts, and branch on them): ``timed`` runs once a whole ``run`` compiled nothing,
    and again, after more warm-up, while any of its steps compiled (a discarded series counts as
    warm-up). Returns the times, the warm-up steps, the graphs the kept series compiled (0 unless
    every try did) and when the kept series started."""
    warm = 0
    for _ in range(BASELINE_TRIES):
        warm += warm_until_stable(run, compiled_graphs, BASELINE_WARM_MAX)
        before, timed_from = compiled_graphs(), time.monotonic()
        times = timed()
        while_timed = compiled_graphs() - before
        log(f"{what}: {len(times)} timed step(s) after {warm} warm-up step(s), compiled {while_timed} graph(s)"
            + (" (timed again after more warm-up)" if while_timed else ""))
        if not while_timed:
            break
    return times, warm, while_timed, timed_from


def warm_until_stable(run, graphs, limit: int) -> int:
    """Call ``run`` until one call compiles nothing (``graphs()`` unchanged), at most ``limit``
    times; how many calls were made. A step still compiling after ``limit`` calls is left to the
    caller's check of its timed calls."""
    for i in range(1, limit + 1):
        before = graphs()
        run()
        if graphs() == before:
            return i
    return limit


class CompiledReference:
    """Step hook: each op runs its protected reference through ``torch.compile``."""

    def __init__(self, shapes):
        self.shapes, self.compiled = shapes, {}
        # the references' small helpers (e.g. one ``linear``) meet a dozen weight shapes per
        # step; past dynamo's default limit of 8 they would silently run eagerly
        import torch._dynamo as dynamo

        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(dynamo.config, name):
                setattr(dynamo.config, name, RECOMPILE_LIMIT)
        # past the limit dynamo would run that frame eagerly and say nothing: the baseline would
        # time a partly eager step as the compiled one; an error is reported instead
        if hasattr(dynamo.config, "fail_on_recompile_limit_hit"):
            dynamo.config.fail_on_recompile_limit_hit = True

    def __call__(self, spec, site, args, run):
        # compiled per reference function (dynamo caches by code object: one shared wrapper
        # would hit its recompile limit and silently fall back to eager); results are copied
        # into the step's buffers outside the compiled region, as the eager baseline does
        fn = self.compiled.get(spec.name)
        first = fn is None  # the timed steps' calls read no clock
        if first:
            t = time.monotonic()
            _keep_outside_graphs(spec.reference)
            # automatic dynamic shapes (dynamic=None): the references slice by data-dependent
            # lengths (rows' contexts, experts' rows), and dynamic=False recompiled the resumed
            # frame for every new length, inside the timed steps too (2026-12-07: no compile
            # baseline finished in 450 s on an H100; on the CPU at 16 rows, seconds a step)
            fn = self.compiled[spec.name] = torch.compile(spec.reference, dynamic=None)
            log(f"compile baseline: {spec.name} first used, compiling")
        result = fn(self.shapes, **{k: v for k, v in args.items() if k not in spec.outputs})
        if first:  # where a first step of minutes goes, op by op
            log(f"compile baseline: {spec.name} first call returned after {time.monotonic() - t:.1f} s "
                f"({compiled_graphs()} graph(s) compiled so far)")
        for name in spec.outputs + spec.state:
            dst, src = args[name], result[name]
            if isinstance(dst, torch.Tensor) and src is not dst:
                dst.copy_(src)


def _keep_outside_graphs(reference) -> None:
    """The functions a reference's module names in ``OUTSIDE_COMPILED_GRAPHS`` (loops over
    data-dependent counts) run as Python under torch.compile; what they call still compiles."""
    module = sys.modules[reference.__module__]
    for name in getattr(module, "OUTSIDE_COMPILED_GRAPHS", ()):
        fn = getattr(module, name)
        if not getattr(fn, "_kept_outside_graphs", False):
            kept = torch.compiler.disable(fn, recursive=False)
            kept._kept_outside_graphs = True
            setattr(module, name, kept)


def stray_threads(frames: dict, me: int, kernels_dir: str) -> int:
    """How many threads (``{ident: innermost frame}``, other than ``me``) have a frame of a file
    under ``kernels_dir`` on their stack."""
    n = 0
    for ident, f in frames.items():
        if ident == me:
            continue
        while f is not None:
            if f.f_code.co_filename.startswith(kernels_dir):
                n += 1
                break
            f = f.f_back
    return n


def side_main(opts: BenchOptions, device: str, seal=None, audit=None, rank: int = 0) -> dict:
    """Serve commands until 'quit'; the driver's JSON result is a summary. ``seal`` and
    ``audit`` (``gates/side/tamper.py``) were made before the tree's kernels were loaded."""
    bench = None
    served = 0
    sys.stdout = sys.stderr  # stray prints must not corrupt the reply channel
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            c = protocol.command(json.loads(line))
        except (ValueError, protocol.CommandError) as e:  # answered; the scorer's bug to fix
            reply({"ok": False, "error": str(e)})
            served += 1
            continue
        try:
            if isinstance(c, protocol.Quit):
                reply({"ok": True})
                break
            if isinstance(c, protocol.Prepare):
                hidden = None if c.hidden is None else \
                    protocol.Hidden.from_dict(c.hidden, "the prepare request")
                with clock().span("build"):
                    bench = CapturedSteps(opts, device, seal, audit, rank, hidden, int(c.sketch_seed),
                                          c.claim, c.attach_sha256)
                with clock().span("capture"):  # Triton's compiles inside it are their own phase
                    ready = bench.prepare()
                reply({"ok": True, **ready, "phases": clock().phases().to_dict()})
            elif isinstance(c, protocol.Time):
                reply({"ok": True, **bench.time(int(c.bucket), int(c.n),
                                                None if c.first is None else int(c.first))})
            elif isinstance(c, protocol.Verify):
                reply({"ok": True, **bench.verify(int(c.bucket), bool(c.ops), c.sample)})
            elif isinstance(c, protocol.SaveRecord):
                path = None if c.path is None else Path(c.path)
                if path is not None and bench.spec.world > 1:
                    path = path.with_name(f"{path.name}.rank{rank}")
                reply({"ok": True, **bench.record.save(path)})
            elif isinstance(c, protocol.JudgeOutputs):
                from .timed import compare

                def ranked(ps):
                    if ps == "memory":  # this process's own replays
                        return bench.record.kept
                    return [f"{p}.rank{rank}" for p in ps] if bench.spec.world > 1 else ps

                keep = {} if c.band is not None else None
                out = {"ok": True, "timed": compare(ranked(c.mine), ranked(c.theirs),
                                                    float(c.near_tie_factor), bench.dev, c.sample,
                                                    keep=keep)}
                if c.band is not None:
                    out.update(bench.band(keep, c.band, float(c.near_tie_factor)))
                reply(out)
            elif isinstance(c, protocol.Bandwidth):
                from .ceiling import read_ceiling

                r = read_ceiling(torch.device(device))
                reply({"ok": True, "Bps": r and r["ceiling_Bps"], "torch_sum_Bps": r and r["torch_sum_Bps"],
                       "shapes": r and r["shapes"], "best": r and r["best"]})
            elif isinstance(c, protocol.Peers):
                from .peers import kda_decode

                side = bench.side
                dt = torch.float32 if side.dims.kda_state_dtype == "f32" else torch.bfloat16
                reply({"ok": True, "kda_decode": kda_decode(side.shapes, bench.buckets, side.device, dt)})
            elif isinstance(c, protocol.RooflineCost):
                reply({"ok": True, **bench.cost(int(c.bucket))})
            elif isinstance(c, protocol.Baseline):
                reply({"ok": True, **bench.baseline(c.kind, int(c.bucket), int(c.n))})
            else:  # a command of protocol.COMMANDS this side does not serve: this module's bug
                raise protocol.CommandError(f"the bench side does not serve {c.CMD!r}")
            served += 1
        except Exception as e:  # noqa: BLE001 - the coordinator decides what an error means
            import traceback

            traceback.print_exc()
            reply({"ok": False, "error": f"{type(e).__name__}: {e}"[:2000]})
            break
    return {"served": served}


def _replicated_digest(step) -> torch.Tensor:
    """What every rank must hold alike after a replay (residual stream, top values, next
    tokens), as the fingerprint's int64 pair per tensor, on the device (no host sync)."""
    from .fingerprint import digest_on_device

    return torch.cat([digest_on_device(t) for t in (step.x, step.top_val, step.next_token)])
