"""``kern test REV --vs BASE``: the accuracy gate, end to end.

Shell: check the disk has room for the tap (``gates/launch/disk.py``), have main's kernels compiled
from main alone (``gates/launch/compiled.py``), resolve revisions, check protected paths, check out
worktrees, run side A (record; named by the base commit, the tap definition and the hidden draw;
kept alive while B replays, writing its kept op calls only when B's pass differs:
:class:`MainKeeper`) and side B (replay; started beside A, released once A recorded:
:func:`_sides`) in their own subprocesses, then, when the verdict
needs them, main's repeat and band passes (once per main, touched ops and spec: :func:`_band`);
load what they measured; the recordings' tensors are deleted once the verdict is made. Core:
``verdict.judge`` over that evidence. Output: the typed result and its report (one JSON object;
harness/terminal.py prints it as lines by section, the last starting with the verdict); its
``phases`` are where the judgment's time went (gates/rules/phases.py).
"""
from __future__ import annotations

import ast
import fcntl
import hashlib
import json
import os
import shutil
import signal
import threading
import time
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from pathlib import Path

import torch

from . import logits
from .events import PassTick, SideEnded
from .launch import checkout, compiled, disk, filemarks, ranks, sandbox
from .launch.after_import import AfterImport, Dialogue
from .protocol import (KEEP_DROP, KEEP_SAVE, KEPT_MISSING, KEPT_READY, RECORDED, SAVED, WANT_KEPT,
                       Hidden, TapFiles, handover_line, tap_rows)
from .requests import AccuracyRequest, Placement
from .results import AccuracyResult, LastWords
from .launch.held import Hold
from .launch.process import SideError
from .protocol import StoreLease, StoreOptions
from .rules import footprint, overlap, phases, scope, verdict
from .rules.store import NONE, REPLACE, REUSE, Need, Plan
from .rules.phases import Span, rest, side_spans, split_at_hand_over
from .settings import AccuracySettings, MachineProfile, Target
from .spec import side_spec


def protected_changed(paths: list[str], protected) -> list[str]:
    return [p for p in paths if scope.matches(p, protected)]


def tunables_changed(old: str | None, new: str | None) -> set[str] | None:
    """Pure: the tunable names whose (default, choices) differ between two versions of a
    ``tunables.py``, or None (cannot tell) unless both are the same module around a literal
    ``TUNABLES`` dict (its contract): any other statement that changed could do anything."""
    def parts(src):
        try:
            tree = scope.parse(src)
        except SyntaxError:
            return None
        table = None
        for node in tree.body:
            if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["TUNABLES"]:
                try:
                    table = ast.literal_eval(node.value)
                except ValueError:
                    return None
                node.value = ast.Constant(None)  # the rest of the module must not change
        if not isinstance(table, dict):
            return None
        return ast.dump(tree), table
    if old is None or new is None:  # a new or deleted module: nothing to compare it with
        return None
    a, b = parts(old), parts(new)
    if a is None or b is None or a[0] != b[0]:
        return None
    return {k for k in set(a[1]) | set(b[1]) if a[1].get(k) != b[1].get(k)}


def touched_ops(paths: list[str], sources) -> set[str] | None:
    """The ops a change touches (``contracts.ops_touched_by``), except that a family's
    ``tunables.py``, which no single op owns, touches only the ops whose tunables changed
    (``moe.experts.fc1_block_n`` -> ``moe.experts``): the offline tuner edits nothing else,
    and 'all ops' makes the tap keep every call. ``sources(path)`` -> (base text, rev text).
    Anything that cannot be told apart this way stays 'all' (None)."""
    from kernels.k31 import contracts

    rest, touched = [], set()
    for p in paths:
        if not p.endswith("/tunables.py"):
            rest.append(p)
            continue
        names = tunables_changed(*sources(p))
        if names is None:
            return None
        for name in names:
            owner = max((op for op in contracts.OPS if name.startswith(op + ".")), key=len, default=None)
            if owner is None:
                return None
            touched.add(owner)
    others = contracts.ops_touched_by(rest)
    return None if others is None else touched | others


def tap_spec(req: AccuracyRequest) -> dict:
    """B's tap (and A's, unless A runs on another layout: :func:`base_spec`)."""
    m = req.machine
    return side_spec(req.target, m, context=m.test_context, steps=m.test_steps,
                     rows=tap_rows(m.test_rows, m.buckets),
                     budget_mb=req.accuracy.snapshot_budget_mb,
                     reference_calls_per_op=req.accuracy.reference_calls_per_op,
                     layout=req.layout or m.layout, world=req.world)


def base_spec(spec: dict, base_world: int | None, base_layout: str | None) -> dict:
    """A's tap: B's, or with ``--base-gpus`` the same workload on A's own ranks and layout.
    Sides on different layouts are marked ``cross_layout`` (pure)."""
    if base_world is None:
        return spec
    a = {**spec, "world": base_world, "layout": base_layout}
    cross = (a["world"], a["layout"]) != (spec["world"], spec["layout"])
    return {**a, "cross_layout": cross}


def cross_note(a_spec: dict, b_spec: dict) -> str | None:
    """Why op digests cannot be compared, when A and B run different layouts (pure)."""
    if not a_spec.get("cross_layout"):
        return None
    return (f"A runs layout {a_spec['layout']} on {a_spec['world']} process(es), B layout "
            f"{b_spec['layout']} on {b_spec['world']}: every op sees other shapes and every sum "
            f"another order, so no op call of B corresponds to one of A's; judged by the "
            f"gathered logits alone (test.layout_kl_pass, else the band of A with every op on "
            f"the reference)")


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:10]


def recording_key(spec: dict, touched: set | None, cuda: bool, hidden: dict | None) -> str:
    """Pure: the name of main's recording (``runs/tap/<base>-<key>``) beside the base commit:
    everything that decides its content. The tap's spec and device; the ops the candidate
    touches (only their calls are kept whole); and the judgment's hidden inputs, which set
    every row's tokens and positions and add the extra batch sizes.

    So a recording serves one judgment (B's replay), or the judgments of one batch of
    candidates frozen before its draw (:class:`MainRecording`, gates/rules/batch.py), and never
    a later judgment against the same main, although recording main is half the gate's time
    (issue 17 asked for it once per main commit): each judgment (or batch) draws its hidden
    inputs afresh so that no agent or candidate can know them, and a recording kept for the
    next judgments would put them on disk (the record names the input seed and the extra
    sizes, ``kept_a.pt`` holds the inputs) before the next agent writes its commit. Reusing it
    means one draw for every judgment against that main: the gate's defence against inputs a
    candidate knows would hold for the first judgment only. What is reused per main commit
    is what the hidden inputs do not decide: the checkout (``checkout.checkout``), Triton's
    compiled kernels, the loop's profile of main (harness/orchestrator.py), and main's repeat
    and band passes (:func:`band_inputs`, :func:`band_key`)."""
    return _digest({"spec": spec, "touched": sorted(touched) if touched is not None else None,
                    "cuda": cuda, "hidden": hidden})


def run_test(req: AccuracyRequest, progress=None, recording: "MainRecording | None" = None,
             early: "EarlySides | None" = None, stores=None) -> AccuracyResult:
    """The gate on ``req``: its verdict and facts typed, the full report as ``.report``.
    ``progress`` (or None) is called with a ``gates.events.PassTick`` every few seconds of a
    side's pass, and a ``SideEnded`` for each side that ended badly. Raises
    ``gates.rules.footprint.DiskShort`` before any side starts when runs/tap lacks the room; when it
    returns, no tensor of this judgment's recordings is left (unless another judgment still
    holds the same recording: then that one deletes it). ``recording``: a batch's shared
    recording of main (:class:`MainRecording`; ``req.hidden`` is its draw): recorded by its
    first member's gate, replayed against by every member's, kept until its ``close()``.
    ``early``: this judgment's tap sides started beside another judgment's scorer and held
    (:func:`prepare_early`): they go on here when they are the sides this gate would start
    now, else they are ended and the gate starts its own.
    ``stores``: the slot's model store (``gates.launch.store.ModelStores``, the caller's): on a
    GPU the tap sides whose trees build the store's weights attach to them (:class:`_TapLease`),
    each building a decode state of its own; None, on the CPU, or with a batch's recording:
    each side builds its own model. A gate that adopts ``early`` sides leases no store: they
    were started before any lease (gates/rules/overlap.py ``tap_lease``)."""
    try:
        with disk.Recordings(req.runs_dir / "tap") as held:
            room_for(req)
            # main's kernels compiled from main alone (once per main); each side starts on a copy
            main = compiled.prepare(req.repo, req.base, req.runs_dir, req.target, req.machine, req.cuda,
                                    req.accuracy.timeout_s, req.placement, _tagged(progress, "main compile"),
                                    req.base_layout or req.layout, req.base_world or req.world)
            return _run_test(req, req.placement.seeded(main.path), progress, held, main, recording,
                             early, None if recording is not None else stores)
    finally:
        if early is not None:  # what it did not use goes now; what it did, its holds let go
            early.close()


def tap_bytes(req: AccuracyRequest) -> int:
    """What this gate's tap writes under runs/tap at most (``gates.rules.footprint.judgment_bytes``)."""
    return footprint.judgment_bytes(req.machine, req.accuracy, world=req.world, layout=req.layout,
                                    base_world=req.base_world, base_layout=req.base_layout,
                                    copies=disk.copied(req.placement.sandbox)).tap


def room_for(req: AccuracyRequest) -> None:
    """Before any side starts: what a killed earlier run left in runs/tap deleted, then
    :class:`~gates.rules.footprint.DiskShort` unless the disk has room for this tap."""
    disk.sweep(req.runs_dir / "tap")
    disk.check({req.runs_dir / "tap": tap_bytes(req)}, "this accuracy gate")


@dataclass(frozen=True)
class _Taps:
    """What the two sides' taps are, from the request and its commits: the changed paths, the
    protected ones among them, the ops touched (None: all), B's and A's specs, and why their
    op calls cannot be compared (another layout), if so."""

    base: str
    rev: str
    paths: list
    protected: list
    touched: set | None
    b_spec: dict
    spec: dict
    cross: str | None


def _taps(req: AccuracyRequest) -> _Taps:
    base_sha = checkout.resolve(req.repo, req.base)
    rev_sha = checkout.resolve(req.repo, req.rev)
    paths = checkout.changed_paths(req.repo, base_sha, rev_sha)
    prot = protected_changed(paths, req.protected)
    tree_paths = [p for p in paths if p.startswith("kernels/")]
    touched = touched_ops(tree_paths, lambda p: (checkout.blob(req.repo, base_sha, p),
                                                 checkout.blob(req.repo, rev_sha, p)))
    b_spec = tap_spec(req)
    spec = base_spec(b_spec, req.base_world, req.base_layout)  # A's
    cross = cross_note(spec, b_spec)
    if cross:
        b_spec = {**b_spec, "cross_layout": True}
        touched = None  # another layout changes every op's rounding: the band covers every op
    return _Taps(base_sha, rev_sha, paths, prot, touched, b_spec, spec, cross)


def recording_shape(req: AccuracyRequest) -> str:
    """What decides main's recording for ``req`` besides its hidden draw (the tap's spec, the
    touched ops, the device): candidates against one main with one shape can share a recording
    (gates/rules/batch.py's ``Frozen.shape``). Reads the commits (git), runs no side."""
    t = _taps(req)
    return recording_key(t.spec, t.touched, req.cuda, None)


def _run_test(req: AccuracyRequest, place: Placement, progress, held: disk.Recordings,
              main: compiled.CompiledCache | None = None,
              shared: "MainRecording | None" = None, early: "EarlySides | None" = None,
              stores=None) -> AccuracyResult:
    t0 = time.monotonic()
    taps = _taps(req)
    base_sha, rev_sha, paths, prot = taps.base, taps.rev, taps.paths, taps.protected
    touched, b_spec, spec, cross = taps.touched, taps.b_spec, taps.spec, taps.cross
    timeout = req.accuracy.timeout_s
    t_checkout = time.monotonic()
    a_tree = checkout.checkout(req.repo, base_sha, req.runs_dir)
    b_tree = checkout.checkout(req.repo, rev_sha, req.runs_dir)
    spans = [Span("accuracy", "coordinator", "checkout", time.monotonic() - t_checkout)]
    hidden = req.hidden.to_dict() if req.hidden else None
    key = recording_key(spec, touched, req.cuda, hidden)
    a_dir = req.runs_dir / "tap" / f"{base_sha[:12]}-{key}"
    a_dir.parent.mkdir(parents=True, exist_ok=True)
    held.hold(a_dir)  # its tensors go when the verdict is made (run_test), unless another holds it
    if shared is not None:  # a batch's: held (and locked) until its last verdict
        shared.adopt(a_dir, req.hidden, place)
    live, batch = shared is not None and shared.keeper is not None, shared is not None
    if early is not None and not early.serves(_launches(req, place, taps, a_tree, b_tree, a_dir,
                                                        early.b_dir, live, batch)):
        early.close()  # not the sides this gate starts now: ended, its folders gone
    early = early if early is not None and early.usable else None
    # sides started early were started before any lease (their spec and sandbox are fixed at
    # their start): a gate that adopts them leases no store (gates/rules/overlap.py tap_lease)
    leases, why_not = overlap.tap_lease(early.sides if early is not None else ())
    t_store = time.monotonic()
    lease = _TapLease(stores, req, place, a_tree, spec, b_spec, timeout,
                      refused=None if leases else why_not)
    if lease.leased:  # a store started for this gate built its weights; one held is attached to
        wall = time.monotonic() - t_store
        spans += side_spans("accuracy", "store", wall, lease.store.ready.get("phases")) \
            if lease.plan.action != REUSE else [Span("accuracy", "store", "attach", wall)]
    try:
        return _leased_test(req, place, progress, held, main, shared, lease, t0, taps, a_tree,
                            b_tree, spans, a_dir, live, batch, early)
    except BaseException:
        lease.abandon()
        raise


def _leased_test(req, place, progress, held, main, shared, lease: "_TapLease", t0, taps, a_tree,
                 b_tree, spans, a_dir: Path, live: bool, batch: bool,
                 early: "EarlySides | None") -> AccuracyResult:
    base_sha, rev_sha, paths, prot = taps.base, taps.rev, taps.paths, taps.protected
    touched, b_spec, spec, cross = taps.touched, taps.b_spec, taps.spec, taps.cross
    timeout = req.accuracy.timeout_s
    hidden = req.hidden.to_dict() if req.hidden else None
    stamp = early.stamp if early is not None else time.strftime("%Y%m%d-%H%M%S")
    b_dir = req.runs_dir / "tap" / f"{_short(rev_sha)}-vs-{base_sha[:12]}-{stamp}"
    held.hold(b_dir)
    b_dir.mkdir(parents=True, exist_ok=True)
    launches = _launches(req, place, taps, a_tree, b_tree, a_dir, b_dir, live, batch)
    if shared is not None:
        sides = _record_and_replay(req, place, a_dir, a_tree, spec, touched, b_tree, b_dir, b_spec,
                                   timeout, progress, hidden, stamp, shared, launches=launches,
                                   early=early)
    else:
        with open(a_dir.parent / f"{a_dir.name}.lock", "w") as lock:
            # one recording per base and tap, however many callers; main's side records, then
            # stays alive (holding its kept op calls) while the candidate's replays against it
            fcntl.flock(lock, fcntl.LOCK_EX)
            sides = _record_and_replay(req, place, a_dir, a_tree, spec, touched, b_tree, b_dir,
                                       b_spec, timeout, progress, hidden, stamp, None,
                                       launches=launches, early=early, lease=lease)
    a_kind, a_wall, a_tail, a_dir = sides.a_kind, sides.a_wall, sides.a_tail, sides.a_dir
    b_kind, b_wall, b_res, b_tail = sides.b_kind, sides.b_wall, sides.b_res, sides.b_tail
    a_res = json.loads(TapFiles(a_dir).record.read_text()) if a_kind == "ok" else None
    th = req.accuracy
    n_kind, n_wall = "not needed", 0.0
    t_verdict = time.monotonic()
    a_log = sides.a_dir / sides.a_out.log_path.name if sides.a_out is not None and sides.a_out.log_path else None
    b_log = sides.b_out.log_path if sides.b_out is not None else None
    n_tail, n_log = "", None
    ev, v = _weigh(a_res, b_res, a_dir, b_dir, a_kind, b_kind, n_kind, prot, cross, th)
    verdict_s = time.monotonic() - t_verdict
    # A's repeat and band passes cost a full pass each (at full size the band runs every
    # moe.experts call on the protected reference: minutes on the H200); they only raise
    # limits, so they run when the verdict without them is not already a PASS
    band = None
    if a_res and b_res and verdict.needs_noise(ev, th):
        band = _band(req, place, base_sha, a_tree, spec, touched, timeout, progress, held, lease)
        n_kind, n_wall = band.kind, band.wall_s
        if n_kind != "ok":
            n_tail, n_log = band.tail, band.out.log_path if band.out is not None else None
        t_verdict = time.monotonic()
        ev, v = _weigh(a_res, b_res, a_dir, b_dir, a_kind, b_kind, n_kind, prot, cross, th, band.evidence)
        verdict_s += time.monotonic() - t_verdict
    # the store's weights verified after the gate's sides: changed while the candidate's side
    # was attached, its replay is tampered (main's side runs the code main merged)
    written = lease.release()
    if written is not None and b_kind not in ("not run", "tampered"):
        b_kind, b_res = "tampered", None
        b_tail += f"\ntamper: {written['why']} ({written['check']})"
        t_verdict = time.monotonic()
        ev, v = _weigh(a_res, b_res, a_dir, b_dir, a_kind, b_kind, n_kind, prot, cross, th,
                       band.evidence if band else None)
        verdict_s += time.monotonic() - t_verdict
    words = [w for w in (LastWords.of("A record", a_kind, a_tail, a_log),
                         LastWords.of("B replay", b_kind, b_tail, b_log),
                         LastWords.of("A noise", n_kind, n_tail, n_log)) if w]
    for w in words if progress else ():
        progress(SideEnded("accuracy gate", w.side, w.kind, w.last, w.log))
    beside = []  # what the replay did beside main's recording (not on the gate's path)
    # each side's GPU memory (None off CUDA): whether more of them fit at once. Self-reported,
    # as its phases are: the candidate's is a figure for the operator, never a verdict's input
    memory = {}
    for part, ran in (("A record", sides.a_out), ("B replay", sides.b_out), ("A noise", band and band.out)):
        if ran is None and part == "A record" and a_wall > 0 and a_res is not None:
            # main recorded for this judgment and its side lives on for the batch's next
            # members: its spans up to RECORDED, from the document it published then
            spans += side_spans("accuracy", part, a_wall, a_res.get("phases"))
            memory[part] = a_res.get("device_memory")
        if ran is None:  # cached, or never started
            continue
        doc = ran.result or {}
        memory[part] = doc.get("device_memory")
        if part == "B replay" and sides.beside:  # its start and build ran beside main's record
            path, aside = split_at_hand_over("accuracy", part, ran.wall_s, doc.get("phases"),
                                             doc.get("hand_over"), sides.b_released_s)
            spans, beside = spans + path, beside + aside
        else:  # each process's own spans
            spans += side_spans("accuracy", part, ran.wall_s, doc.get("phases"))
    if sides.b_ran is not None:  # ended for main's failure before its release
        beside += split_at_hand_over("accuracy", "B replay", sides.b_ran.wall_s, None, None, None)[1]
    if early is not None:  # its sides' start, before their hold point, beside another's scorer
        beside += early.spans()
    spans.append(Span("accuracy", "coordinator", "verdict", verdict_s))
    wall = time.monotonic() - t0
    spans += rest("accuracy", wall, spans)
    if main is not None and main.wall_s > 0:  # main's compile side ran for this judgment (before t0)
        spans.append(Span("accuracy", "coordinator", "compile_main", main.wall_s))
        wall += main.wall_s
    return AccuracyResult.of({
        "verdict": v.name, "exit_code": v.exit_code, "reasons": v.reasons,
        "base": base_sha, "rev": rev_sha, "changed": paths, "touched_ops": sorted(touched) if touched is not None else "all",
        "spec": b_spec, "base_spec": spec, "hidden": hidden,
        "rows": tap_rows(b_spec["rows"], [], req.hidden.extra_rows if req.hidden else ()),
        "wall_s": wall, "a_wall_s": a_wall, "b_wall_s": b_wall,
        "phases": [x.to_dict() for x in spans], "beside": [x.to_dict() for x in beside],
        # seconds from the gate's start: main's side started and recorded, the candidate's
        # started and was released (None: did not happen, or a cached recording)
        "timeline": {k: None if v is None else v - t0 for k, v in
                     {**(sides.at or {}), **(early.at() if early is not None else {})}.items()},
        # the early sides: what each had done at its hold point, and whose scorer they ran beside
        "early": early.to_dict() if early is not None else None,
        "noise_wall_s": n_wall, "noise_cached": bool(band and band.kind == "ok" and band.wall_s == 0.0),
        # each of the noise side's passes, where this judgment ran them (None: cached or not run)
        "noise_passes_s": band.evidence.get("passes_s") if band and band.evidence and band.wall_s else None,
        "band_dir": str(band.folder) if band else None,
        "device_memory": memory,
        "a_cached": a_wall == 0.0 and a_kind == "ok", "evidence": ev,
        "b_log_tail": b_tail[-2000:] if b_kind not in ("ok", "not run") else "",
        "a_log_tail": a_tail[-2000:] if a_kind != "ok" else "",
        "a_dir": str(a_dir), "b_dir": str(b_dir),
        "last_words": [w.to_dict() for w in words],
        "environment": (b_res or a_res or {}).get("environment"),
        "compiled": main.to_dict() if main else None,
        "store": lease.report(),
    })


def _weigh(a_res, b_res, a_dir, b_dir, a_kind, b_kind, n_kind, prot, cross, th: AccuracySettings,
           band=None):
    """The evidence of both sides as the verdict reads it, and the verdict; ``band``: A's
    repeat and band passes' evidence (:func:`band_evidence`), when they ran."""
    ev = {"outcome_a": a_kind, "outcome_b": b_kind, "outcome_noise": n_kind, "protected_changed": prot,
          "same_setup": (b_res or {}).get("same_setup", True), "cross_layout": cross,
          "ranks": {"a": (a_res or {}).get("ranks"), "b": (b_res or {}).get("ranks"),
                    "a_disagree": (a_res or {}).get("rank_disagreements") or [],
                    "b_disagree": (b_res or {}).get("rank_disagreements") or []}}
    if not (a_res and b_res):
        ev["tap"] = ev["logits"] = None
        return ev, verdict.judge({**ev, "tap": verdict.tap_diff({"runs": {}}, {"runs": {}}),
                                  "logits": logits.logit_stats({}, {}, 1.0)}, th)
    a_files, b_files = TapFiles(a_dir), TapFiles(b_dir)
    la = torch.load(a_files / TapFiles.LOGITS_A)
    lb = torch.load(b_files / TapFiles.LOGITS_B)
    ev["tap"] = verdict.own_defects(b_res["pass"]) if cross else \
        verdict.tap_diff(a_res["pass"], b_res["pass"])
    ev["logits"] = logits.logit_stats(la, lb, th.near_tie_factor)
    if band is not None:
        ev["noise"], ev["noise_tap"] = band["noise"], band["noise_tap"]
        if band.get("band") is not None:
            ev["band"] = band["band"]
    ev["local"] = verdict.local_summary(b_res.get("pinned"), th)
    return ev, verdict.judge(ev, th)


def show_recording(a_dir: Path, seen: Path, link: bool, leave=(), only=None) -> None:
    """Every file of main's recording in ``a_dir`` (its ranks' too, logs aside; none named in
    ``leave``; with ``only``, only those named there) at the same place under ``seen``: hard
    links (``link``, where the file system allows) or copies."""
    for src in sorted(a_dir.rglob("*")):
        if not src.is_file() or src.suffix == ".log" or src.name in leave \
                or (only is not None and src.name not in only) or \
                any(p.startswith(".sandbox-") for p in src.relative_to(a_dir).parts):
            continue  # (a side's private home, /tmp, Triton cache: never shown to another)
        dst = seen / src.relative_to(a_dir)
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            if not link:
                raise OSError("copies asked for")
            os.link(src, dst)
        except OSError:
            shutil.copyfile(src, dst)


@dataclass
class _Sides:
    """How main's recording and the candidate's replay ended (``b_kind`` "not run" when A
    failed); ``a_out``/``b_out``: their launchers' outcomes (None: not started)."""

    a_kind: str
    a_wall: float
    a_tail: str
    a_dir: Path
    b_kind: str = "not run"
    b_wall: float = 0.0
    b_res: dict | None = None
    b_tail: str = ""
    a_out: object = None
    b_out: object = None
    beside: bool = False  # B started beside main's record side (its spans split at its hand-over)
    b_released_s: float | None = None  # from B's start to its release (None: not released)
    b_ran: object = None  # B's outcome when it was ended for main's failure (counted beside)
    # time.monotonic() of: main's side started, said RECORDED (every rank), B started, B released
    at: dict | None = None


class MainKeeper(Dialogue):
    """Main's record side, every rank of it, kept alive after its free pass: it publishes its
    document and logits, says RECORDED and holds its kept op calls (those of the touched ops,
    in host memory) until told KEEP_SAVE (write them, say SAVED) or KEEP_DROP. So main's
    keep-copies (13 GB and ~15 s at full size) are written only when the candidate's free
    pass differs from main's and its pinned pass will read them; a bit-identical candidate's
    judgment never writes them (gates/protocol.py's lines; gates/side/tap.py's side)."""

    def __init__(self, hidden: dict | None, world: int):
        self.hidden, self.world = hidden, max(1, int(world))
        self.procs: list = []
        self.recorded = self.saved = 0
        self.asked: dict | None = None  # KEEP_SAVE or KEEP_DROP, once told
        self.stop = threading.Event()  # set: its launcher ends it as timed out
        self.outcome = None  # its launcher's SideOutcome, once every rank ended
        self.started = time.monotonic()
        self.recorded_s: float | None = None  # from its start to every rank's RECORDED
        self.raised: BaseException | None = None  # what its launcher raised (finish raises it)
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def line(self, proc) -> str:
        with self._cond:
            self.procs.append(proc)
        return handover_line(self.hidden)

    def heard(self, proc, msg: dict) -> str | None:
        with self._cond:
            if msg == RECORDED:
                self.recorded += 1
                if self.recorded >= self.world and self.recorded_s is None:
                    self.recorded_s = time.monotonic() - self.started
            elif msg == SAVED:
                self.saved += 1
            self._cond.notify_all()
        return None

    def start(self, run) -> None:
        """Run ``run(self)`` (the launcher, returning its SideOutcome) in a thread. The slot's
        GPUs, the sandbox mode and main's compiled cache travel in ``run``'s Placement (a
        context variable would not reach the new thread)."""
        def go():
            try:
                self.outcome = run(self)
            except BaseException as e:  # noqa: BLE001 - raised again in the caller's thread
                self.raised = e
            finally:
                with self._cond:
                    self._cond.notify_all()

        self._thread = threading.Thread(target=go, daemon=True)
        self._thread.start()

    def _ended(self) -> bool:
        return self._thread is None or not self._thread.is_alive()

    def _wait(self, done, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not done():
                left = deadline - time.monotonic()
                if self._ended() or left <= 0:
                    return done()
                self._cond.wait(min(left, 0.5))
        return True

    def wait_recorded(self, timeout_s: float) -> bool:
        """Every rank published its recording within ``timeout_s``; else the side is ended."""
        if self._wait(lambda: self.recorded >= self.world, timeout_s):
            return True
        self.stop.set()
        return False

    def _tell(self, msg: dict) -> None:
        with self._cond:
            if self.asked is not None:
                return
            self.asked = msg
            procs = list(self.procs)
        for p in procs:
            try:
                p.stdin.write(json.dumps(msg) + "\n")
                p.stdin.flush()
            except (BrokenPipeError, OSError, ValueError):
                pass  # that rank ended; its exit status says how

    def save(self, timeout_s: float) -> bool:
        """Ask every rank to write its kept op calls; True once all said SAVED in time."""
        self._tell(KEEP_SAVE)
        return self.asked == KEEP_SAVE and self._wait(lambda: self.saved >= self.world, timeout_s)

    def kill(self) -> None:
        """End every rank now (the judgment was interrupted: no rank may outlive it). A rank
        that has not said it imported its tree is not among ``procs`` yet: its launcher ends
        it on ``stop`` (within 0.2 s), which this waits for."""
        self.stop.set()
        with self._cond:
            procs = list(self.procs)
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        # a rank its launcher starts after this (or never told this object of) is ended by
        # the launcher itself once it sees ``stop`` (it polls it every 0.2 s): wait for that
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5.0)

    def finish(self, timeout_s: float):
        """Let the side end (KEEP_DROP unless it was asked to save) and return its outcome
        (or raise what its launcher raised)."""
        self._tell(KEEP_DROP)
        for p in list(self.procs):
            try:
                p.stdin.close()
            except (OSError, ValueError):
                pass
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                self.stop.set()
                self._thread.join()
        if self.raised is not None:  # the launcher's own error (no sandbox, ...): the caller's
            raise self.raised
        return self.outcome


class MainRecording:
    """Main's recording shared by a batch of frozen candidates (gates/rules/batch.py; docs/gates.md,
    "main recorded once per batch"): one hidden draw (``hidden``, made after every member froze;
    each member's request carries it), one recording of the batch's main, made by the first
    member's gate. Its record side (:class:`MainKeeper`) stays alive across the members'
    judgments, their scorers included (it has given its device back; it holds the kept op
    calls in host memory and writes them at most once, for the first member whose pass
    differs); the recording's folder is locked and held from the first member on, so no other
    judgment records there or sweeps it. :meth:`close` (the batch settled: its last verdict,
    or a merge) ends the side and deletes the recording's tensors. Each member's replay is
    released (its hidden inputs, main's recording shown) only after its own imports, as alone."""

    def __init__(self, hidden: Hidden, runs_dir: Path):
        self.hidden = hidden
        self.keeper: MainKeeper | None = None  # main's side while it serves the batch
        self.a_dir: Path | None = None
        self.place: Placement | None = None
        self.members = 0  # gates that used it
        self._held = disk.Recordings(runs_dir / "tap")
        self._lock = None

    def adopt(self, a_dir: Path, hidden: Hidden | None, place: Placement) -> None:
        """A member's gate, before its sides: its recording's folder and placement must be the
        batch's (one main, shape, draw and slot); the first takes the folder's lock and hold."""
        if hidden != self.hidden:
            raise ValueError(f"accuracy gate: a batch member's hidden inputs ({hidden}) are not the "
                             f"batch's ({self.hidden}): a bug of the caller (harness/orchestrator.py)")
        if self.members and sandbox.chosen(place.sandbox) == "off":
            raise ValueError("accuracy gate: candidates share a hidden draw only under a sandbox "
                             "(gates.rules.batch.share_allowed); kern.yaml's sandbox is off: a bug "
                             "of the caller, which must judge each on a draw of its own")
        if self.a_dir is None:
            self._held.hold(a_dir)
            self._lock = open(a_dir.parent / f"{a_dir.name}.lock", "w")
            fcntl.flock(self._lock, fcntl.LOCK_EX)  # as a judgment of its own holds it
            self.a_dir, self.place = a_dir, place
        elif (a_dir, place) != (self.a_dir, self.place):
            raise ValueError(f"accuracy gate: a batch member's recording would be {a_dir.name} on "
                             f"GPUs {place.gpus!r}, the batch's is {self.a_dir.name} on "
                             f"{self.place.gpus!r}: members share one main, shape and slot (a bug "
                             f"of the batch's planning, harness/orchestrator.py)")
        self.members += 1

    def close(self, timeout_s: float, kill: bool = False):
        """The batch is settled (or interrupted: ``kill``): main's side told to go and waited
        for (``timeout_s``; ended past it), the folder's lock let go and the recording's tensors
        deleted. Returns main's side's outcome (None: none served the batch at the end)."""
        keeper, self.keeper = self.keeper, None
        try:
            if keeper is None:
                return None
            if kill:
                keeper.kill()
                return None
            return keeper.finish(timeout_s)
        finally:
            if self._lock is not None:
                self._lock.close()
                self._lock = None
            self._held.release()


class KeptOnDemand(AfterImport, Dialogue):
    """The replay's hand-over (:class:`~gates.launch.after_import.AfterImport`: its hidden inputs
    once every process imported the tree, main's recording shown then, main's kept op calls
    never among it), which goes on: when its free pass differs from main's it says WANT_KEPT,
    and ``fetch()`` (once, for every rank) has main's kept calls written and shown to it."""

    def __init__(self, hidden, processes: int, release, fetch):
        super().__init__(hidden, processes, release)
        self.fetch = fetch
        self.kept: bool | None = None
        self.fetch_error: BaseException | None = None
        self._fetching = threading.Lock()

    def heard(self, proc, msg: dict) -> str | None:
        if msg != WANT_KEPT:
            return None
        with self._fetching:
            if self.kept is None:
                try:
                    self.kept = bool(self.fetch())
                except Exception as e:  # noqa: BLE001 - kept for the gate, which reports it
                    self.fetch_error, self.kept = e, False
        return json.dumps(KEPT_READY if self.kept else KEPT_MISSING) + "\n"


def _record_and_replay(req, place: Placement, a_dir, a_tree, spec, touched, b_tree, b_dir, b_spec,
                       timeout, progress, hidden, stamp, shared: "MainRecording | None" = None,
                       launches: dict | None = None, early: "EarlySides | None" = None,
                       lease: "_TapLease | None" = None) -> _Sides:
    """Main's recording (or the one cached in ``a_dir``) and the candidate's replay against
    it, started beside it and released once main recorded, main's side alive until the replay
    ends (:class:`MainKeeper`); the caller holds ``a_dir``'s lock.
    Whatever ends it early (Ctrl-C, a gate error) ends main's side too: it runs in a thread
    that an exception in this one would never reach. With a batch's ``shared`` recording,
    main's side is the batch's: started by its first member, left alive for the next ones
    while it serves this recording, ended by ``shared.close()``."""
    live = shared.keeper if shared is not None else None
    keeper = live or (early.keeper if early is not None and early.keeper is not None else
                      MainKeeper(hidden, int(spec.get("world", 1))))
    try:
        out = _sides(req, place, a_dir, a_tree, spec, touched, b_tree, b_dir, b_spec, timeout,
                     progress, stamp, keeper, live=live is not None, batch=shared is not None,
                     launches=launches, early=early, lease=lease)
    except BaseException:
        keeper.kill()
        if shared is not None:
            shared.keeper = None
        raise
    if shared is not None:
        from .rules.batch import recording_serves_on

        serving = recording_serves_on(keeper._thread is not None and not keeper._ended(),
                                      out.a_kind == "ok", out.a_dir != a_dir)  # renamed: changed
        if not serving:
            keeper.kill()  # its recording goes (the next member records on the batch's draw)
        shared.keeper = keeper if serving else None
    return out


def _sides(req, place: Placement, a_dir, a_tree, spec, touched, b_tree, b_dir, b_spec, timeout,
           progress, stamp, main_side: MainKeeper, live: bool = False, batch: bool = False,
           launches: dict | None = None, early: "EarlySides | None" = None,
           lease: "_TapLease | None" = None) -> _Sides:
    """``live``: ``main_side`` recorded for an earlier member of a batch and still serves
    (the replay starts now, as after a cached recording, and may ask for its kept calls);
    ``batch``: main's side is the batch's (not ended here; its limit is the batch's life);
    ``launches``: the sides' launcher arguments (:func:`_launches`); ``early``: those of them
    started before and held (:class:`EarlySides`), which go on here instead."""
    files = TapFiles(a_dir)
    a_world = main_side.world
    hidden = main_side.hidden
    mech = sandbox.chosen(place.sandbox)
    keeper = None
    if live:  # a batch's main recorded for an earlier member: its side waits, holding its calls
        keeper = main_side
        a_kind, a_wall, a_tail = "ok", 0.0, ""
    elif files.recorded:  # cached with its kept calls (a replayed judgment, another caller's)
        a_kind, a_wall, a_tail = "ok", 0.0, ""
    else:
        a_dir.mkdir(parents=True, exist_ok=True)
        keeper = main_side
        ticks = _tagged(progress, "A record")
        quiet = None if ticks is None else (
            lambda line, t: None if keeper.recorded_s is not None else ticks(line, t))
        # its own limit is the recording's (wait_recorded); then it waits out the replay (a
        # batch's: every member's judgment, until MainRecording.close() ends it; it has given
        # its device back, and it ends by itself when this process goes: its stdin closes)
        if early is not None and early.keeper is keeper:  # started early, held: it goes on now
            early.go_a(quiet)
        else:
            a_args, a_group = _leased(launches[overlap.A], lease, "A", a_tree, a_dir, spec)
            keeper.start(lambda k: ranks.run(*a_args, quiet, k, k.stop, a_group))
        a_kind, a_wall, a_tail = "ok", 0.0, ""
        if (mech == "off" or not req.accuracy.replay_beside) and not keeper.wait_recorded(timeout):
            return _unrecorded(keeper, a_dir, timeout)
    # The candidate's side starts beside main's record side (its process start, tree import
    # and model build overlap main's recording) under every sandbox that hides main's folder
    # from it until its release; with sandbox: off nothing does, so it starts once main has
    # recorded and the marks below are taken (else its import-time code could change main's
    # files before they are marked)
    beside = keeper is not None and not live and mech != "off" and req.accuracy.replay_beside
    # what B reads of main must be unchanged when it ends (else it could record its own
    # results there): main's recording and tree, and B's copies of the recording
    recording = files.recording() + [
        p for r in range(1, a_world) for p in files.recording(r, a_world)]
    guarded = recording + [a_tree / "kernels"]
    kept_files = [files.rank(r) / TapFiles.KEPT_A for r in range(a_world)]
    marks: dict = {}
    seen = b_dir / "main" if mech != "off" else a_dir
    copies = mech in ("landlock", "user")  # B owns or can write its copies: they are marked

    # Sandboxed, B sees main's recording only once every process of it has imported its
    # tree AND main's side said RECORDED (every rank), in its own folder (no sandbox of B
    # shows main's): hard links under namespaces (mounted read-only there; marked by mtime,
    # since another judgment's links change ctimes; the recording's marks taken at the
    # release, before anything is shown: until then B's sandbox holds none of it), copies
    # under landlock alone (B could write through a link; the copies are marked; likewise
    # under user, where B owns the folder the copies are in). With sandbox: off nothing
    # hides main's folder: B is told where it lies. Main's kept op calls are shown only when
    # B asks for them (its free pass differs from main's). B's hidden inputs come with the
    # release, never before it.
    if mech in ("off", "namespaces"):
        marks.update(filemarks.file_marks(guarded if not beside else [a_tree / "kernels"],
                                          ctime=mech == "off"))
    showing = threading.Lock()  # a release runs whole before B's end is handled, or never
    watch = _MainWatch(keeper, timeout, early.b_stop if early is not None else None) if beside else None

    def release() -> None:
        if watch is not None and not watch.released():  # (b): main's side recorded
            raise _NotRecorded("main's side did not record; the replay is not released")
        with showing:
            if watch is not None and watch.b_ended.is_set():
                raise _NotRecorded("the replay ended before its release")
            if mech == "off":
                return
            if beside and mech == "namespaces":
                marks.update(filemarks.file_marks(recording, ctime=False))
            show_recording(a_dir, seen, link=mech == "namespaces", leave=(TapFiles.KEPT_A,))
            if copies:
                marks.update(filemarks.file_marks(guarded + [seen]))

    def fetch() -> bool:
        if keeper is not None and not keeper.save(timeout):
            return False
        if mech != "off":
            show_recording(a_dir, seen, link=mech == "namespaces", only=(TapFiles.KEPT_A,))
        shown = [seen / f.relative_to(a_dir) for f in kept_files] if copies else []
        marks.update(filemarks.file_marks(kept_files + shown, ctime=mech != "namespaces"))
        return True

    if mech != "off":
        seen.mkdir(exist_ok=True)
    handed = KeptOnDemand(hidden, int(b_spec.get("world", 1)), release, fetch)
    b_ticks = _tagged(progress, "B replay")
    if beside and b_ticks is not None:  # main's side speaks until it has recorded
        b_ticks = (lambda line, t, inner=b_ticks: None if handed.released_at is None else inner(line, t))
    b_started = time.monotonic()
    if watch is not None:
        watch.start()
    try:
        # beside main's: its limit is main's recording's and then its own (``_MainWatch``)
        if early is not None:  # started early, held: it goes on now, with this hand-over
            b = early.run_b(handed, b_ticks)
        else:
            b_args, b_group = _leased(launches[overlap.B], lease, "B", b_tree, b_dir, b_spec)
            b = ranks.run(*b_args, b_ticks, handed, watch.b_stop if watch is not None else None,
                          b_group)
    except BaseException:
        if watch is not None:  # (Ctrl-C, a gate error: the caller kills main's side)
            watch.b_ended.set()
        raise
    if watch is not None:
        with showing:
            watch.b_ended.set()
        # main's recording decided: a replay that ended early waits for it, since the verdict
        # reads main's outcome first (as when the replay started after main had recorded)
        watch.join()
    released_s = None if handed.released_at is None else handed.released_at - b_started
    fresh = keeper is not None and not live  # main's side started for this judgment
    at = {"a_started": keeper.started if fresh else None,
          "a_recorded": keeper.started + keeper.recorded_s if fresh and
          keeper.recorded_s is not None else None, "b_started": b_started, "b_released": handed.released_at}
    if watch is not None and not watch.recorded:  # main's side failed: the replay was ended
        if mech != "off":
            shutil.rmtree(seen, ignore_errors=True)
        out = _unrecorded(keeper, a_dir, timeout)
        out.beside, out.b_ran, out.at = True, b, at  # its time counts beside main's; no verdict
        return out
    a_wall = (keeper.recorded_s or 0.0) if fresh else 0.0
    out = _Sides(a_kind, a_wall, a_tail, a_dir, b.kind, b.wall_s, b.result, b.log_tail, b_out=b,
                 beside=beside, b_released_s=released_s, at=at)
    moved = filemarks.changed_files(marks, filemarks.file_marks(
        guarded + ([seen] if copies else []), ctime=mech != "namespaces"))
    # the replay has ended: main's side may go (and write its document); a batch's stays for
    # the next member, unless it ended meanwhile (failed after recording, or could not save)
    if keeper is not None and (not batch or keeper._ended()):
        a = out.a_out = keeper.finish(timeout)
        if a is None or not a.ok:  # main's side failed after recording (or could not save)
            out.a_kind, out.a_tail = (a.kind, a.log_tail) if a is not None else ("error", "")
    if mech != "off":
        shutil.rmtree(seen, ignore_errors=True)  # links or copies: main's stays in a_dir
        if handed.error is not None and not isinstance(handed.error, _NotRecorded):
            raise RuntimeError(f"accuracy gate: main's recording could not be shown to the "
                               f"replay ({handed.error}): the environment must allow links or "
                               f"copies in {b_dir}") from handed.error
    if handed.fetch_error is not None:
        raise RuntimeError(f"accuracy gate: main's kept op calls could not be shown to the replay "
                           f"({handed.fetch_error}): the environment must allow links or copies in "
                           f"{b_dir}") from handed.fetch_error
    if moved:
        out.b_kind, out.b_res = "tampered", None
        out.b_tail += (f"\ntamper: the candidate's side changed main's recording or tree: "
                       f"{', '.join(os.path.relpath(m, req.runs_dir) for m in moved[:4])}")
        out.a_dir = a_dir.rename(a_dir.with_name(f"{a_dir.name}-tampered-{stamp}"))  # never reused
    return out


def _leased(args: tuple, lease: "_TapLease | None", side: str, tree: Path, folder: Path,
            spec: dict) -> tuple:
    """A launch of :func:`_launches` with what attaches ``side`` to ``lease``'s store (its
    spec's ``attach`` keys, added as it starts: the handles are copied for it then), and the
    store's sandbox it joins (None: it builds its own model)."""
    extra = lease.attach(side, tree, folder, spec) if lease is not None else {}
    return (*args[:2], {**args[2], **extra}, *args[3:]), (lease.group if extra else None)


def _launches(req: AccuracyRequest, place: Placement, taps: _Taps, a_tree: Path, b_tree: Path,
              a_dir: Path, b_dir: Path, live: bool, batch: bool) -> dict:
    """The launcher arguments (``ranks.run``'s first six) of the tap sides this gate starts:
    main's record side (:data:`overlap.A`; none when a batch's main side serves, ``live``, or
    the recording is cached) and the candidate's replay (:data:`overlap.B`). The one place
    they are made: a side started early (:class:`EarlySides`) goes on only when its arguments
    are these. ``batch``: main's side serves a batch (its limit is the batch's life)."""
    timeout = req.accuracy.timeout_s
    mech = sandbox.chosen(place.sandbox)
    files = TapFiles(a_dir)
    fresh = not live and not files.recorded
    beside = fresh and mech != "off" and req.accuracy.replay_beside
    seen = b_dir / "main" if mech != "off" else a_dir
    out = {}
    if fresh:
        a_spec = {**taps.spec, "role": "record",
                  "touched": sorted(taps.touched) if taps.touched is not None else None}
        out[overlap.A] = ("tap", a_tree, a_spec, files.record,
                          float("inf") if batch else 3 * timeout, place)
    out[overlap.B] = ("tap", b_tree, {**taps.b_spec, "role": "replay", "record": str(seen)},
                      TapFiles(b_dir) / TapFiles.RESULT, 2 * timeout if beside else timeout, place)
    return out


class _Relay:
    """A launcher's progress callback whose receiver is named later (a side started early
    speaks only once it goes on)."""

    def __init__(self):
        self.to = None

    def __call__(self, line, t) -> None:
        if self.to is not None:
            self.to(line, t)


class EarlySides:
    """A judgment's tap sides started beside another judgment's scorer (gates/rules/overlap.py):
    the harness's work done (checkouts, the recording's folder named, the replay's folder
    made), each side's process started with ``--hold`` and waiting at its hold point (no tree
    imported, no CUDA call: :func:`gates.side.driver.hold_for_go`). The accuracy gate that
    adopts them (:func:`run_test`'s ``early``) lets each go on in its place (:meth:`go_a`,
    :meth:`run_b`); :meth:`close` ends whatever was not used (its processes, its folders in
    runs/tap) and lets the folders' holds go. Made by :func:`prepare_early`. They never lease
    the slot's model store (started before any lease: ``overlap.tap_lease``): each builds its
    own model after its go."""

    def __init__(self, runs_dir: Path, a_dir: Path, b_dir: Path, stamp: str, launches: dict,
                 hidden: dict | None):
        self.a_dir, self.b_dir, self.stamp, self.launches = a_dir, b_dir, stamp, launches
        self.keeper: MainKeeper | None = None
        self.b_stop = threading.Event()
        self._holds: dict = {}
        self._relays = {k: _Relay() for k in launches}
        self._b_thread: threading.Thread | None = None
        self._b_out, self._b_raised = None, None
        self._used: set = set()
        self._held = disk.Recordings(runs_dir / "tap")
        self._made: list = []  # folders made here: gone unless a gate used them
        self._closed = False
        self.of: str | None = None  # whose scorer they started beside ("#7 scorer")
        self.of_started: float | None = None  # time.monotonic() of that scorer's start, its end
        self.of_done: float | None = None
        self.hidden = hidden

    def start(self) -> "EarlySides":
        """Hold the folders, make them and start every side held."""
        for k in self.launches:
            folder = self.a_dir if k == overlap.A else self.b_dir
            self._held.hold(folder)
            if not folder.exists():
                folder.mkdir(parents=True)
                self._made.append(folder)
        seen = Path(self.launches[overlap.B][2]["record"])
        if seen.parent == self.b_dir:
            seen.mkdir(exist_ok=True)
        if overlap.A in self.launches:
            args = self.launches[overlap.A]
            self.keeper = MainKeeper(self.hidden, int(args[2].get("world", 1)))
            hold = self._holds[overlap.A] = Hold(self.keeper)
            relay = self._relays[overlap.A]
            self.keeper.start(lambda k: ranks.run(*args, relay, hold, k.stop))
        hold_b = self._holds[overlap.B] = Hold()
        args_b, relay_b = self.launches[overlap.B], self._relays[overlap.B]

        def run_b():
            try:
                self._b_out = ranks.run(*args_b, relay_b, hold_b, self.b_stop)
            except BaseException as e:  # noqa: BLE001 - raised again in the gate's thread
                self._b_raised = e

        self._b_thread = threading.Thread(target=run_b, daemon=True)
        self._b_thread.start()
        return self

    @property
    def sides(self) -> tuple:
        return tuple(k for k in (overlap.A, overlap.B) if k in self.launches)

    @property
    def usable(self) -> bool:
        return not self._closed

    def serves(self, launches: dict) -> bool:
        """Whether these are the sides a gate starts with ``launches`` (:func:`_launches`)."""
        return self.usable and launches == self.launches

    def beside(self, of: str, started: float | None, done: float | None) -> None:
        """Whose scorer they started beside, and when it ran (time.monotonic())."""
        self.of, self.of_started, self.of_done = of, started, done

    def _may_go(self) -> None:
        """The gate adopting these sides holds its slot (it runs inside it); the scorer they
        started beside must have ended its GPU work (``overlap.go_due``)."""
        if not overlap.go_due(self.of is None or self.of_done is not None, holds_slot=True):
            raise RuntimeError(f"accuracy gate: sides started beside {self.of} would go on before "
                               f"its scorer ended (a bug of the caller, harness/orchestrator.py)")

    def go_a(self, progress) -> None:
        """Main's record side goes on (its limits from now: ``MainKeeper.started``)."""
        self._may_go()
        self._used.add(overlap.A)
        self._relays[overlap.A].to = progress
        self.keeper.started = time.monotonic()
        self._holds[overlap.A].go()

    def run_b(self, handed, progress):
        """The replay goes on with its hand-over ``handed``; its outcome once it ended."""
        self._may_go()
        self._used.add(overlap.B)
        hold = self._holds[overlap.B]
        hold.attach(handed)
        self._relays[overlap.B].to = progress
        hold.go()
        self._b_thread.join()
        if self._b_raised is not None:
            raise self._b_raised
        return self._b_out

    def close(self) -> None:
        """End every side not gone on (its process, its thread) and remove the folders made
        here that no gate used; let the folders' holds go. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for k, hold in self._holds.items():
            if k not in self._used:
                hold.cancel()
        if overlap.A in self._holds and overlap.A not in self._used:
            self.keeper.kill()
        if overlap.B not in self._used:
            self.b_stop.set()
        if self._b_thread is not None and overlap.B not in self._used:
            self._b_thread.join(30)
        for folder in self._made:
            if (overlap.A if folder == self.a_dir else overlap.B) not in self._used:
                shutil.rmtree(folder, ignore_errors=True)
        self._held.release()

    def spans(self) -> list:
        """The seconds each side worked before its hold point (process start, sandbox, imports),
        kept apart as ``beside`` (part ``A early``/``B early``): off every gate's path."""
        out = []
        for k, hold in self._holds.items():
            if k in self._used and hold.held_at is not None:
                out.append(Span("accuracy", EARLY_PARTS[k], "start", hold.held_at - hold.started))
        return out

    def at(self) -> dict:
        """time.monotonic() of each used side's start, hold and go, and of the other scorer
        (the report's ``timeline``: :data:`gates.rules.phases.BESIDE_PAIRS`)."""
        out = {}
        for k, hold in self._holds.items():
            if k in self._used:
                x = "a" if k == overlap.A else "b"
                out.update({f"{x}_early": hold.started, f"{x}_held": hold.held_at, f"{x}_go": hold.went_at})
        if out:
            out.update(scorer_started=self.of_started, scorer_done=self.of_done)
        return out

    def to_dict(self) -> dict:
        return {"sides": [k for k in self.sides if k in self._used], "of": self.of,
                "held": {EARLY_PARTS[k]: h.report for k, h in self._holds.items() if k in self._used}}


EARLY_PARTS = dict(zip((overlap.A, overlap.B), phases.EARLY_PARTS))  # their parts in the report's beside


def prepare_early(req: AccuracyRequest, live: bool, batch: bool, sides: tuple) -> EarlySides | None:
    """The accuracy gate's tap sides of ``req`` (its hidden draw in it) started now and held
    (:class:`EarlySides`): ``sides`` (``overlap.early_sides``); ``live``: a batch's main side
    serves its recording, ``batch``: ``req`` is a batch member. Only harness work runs here
    (git, the disk, main's compiled cache looked up, never made): None where main's compiled
    cache is not made yet, or ``sides`` are not the sides the gate would start."""
    found = compiled.existing(req.repo, req.base, req.runs_dir, req.target, req.machine, req.cuda,
                              req.base_layout or req.layout, req.base_world or req.world)
    if found is None or not sides:
        return None
    place = req.placement.seeded(found)
    taps = _taps(req)
    a_tree = checkout.checkout(req.repo, taps.base, req.runs_dir)
    b_tree = checkout.checkout(req.repo, taps.rev, req.runs_dir)
    hidden = req.hidden.to_dict() if req.hidden else None
    a_dir = req.runs_dir / "tap" / f"{taps.base[:12]}-{recording_key(taps.spec, taps.touched, req.cuda, hidden)}"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    b_dir = req.runs_dir / "tap" / f"{_short(taps.rev)}-vs-{taps.base[:12]}-{stamp}"
    launches = _launches(req, place, taps, a_tree, b_tree, a_dir, b_dir, live, batch)
    if tuple(k for k in (overlap.A, overlap.B) if k in launches) != tuple(sides):
        return None
    return EarlySides(req.runs_dir, a_dir, b_dir, stamp, launches, hidden).start()


class _NotRecorded(RuntimeError):
    """The replay's release did not happen: main's side failed to record, or the replay ended
    first (the gate reports the side that failed, not this)."""


class _MainWatch(threading.Thread):
    """Beside the replay, in a thread: waits for main's side to record (``keeper.wait_recorded``,
    its limit) and holds the replay to today's limits: ended (``b_stop``) when main's side
    fails to record, and ``timeout_s`` after main's RECORDED, as when the replay started then.
    ``released()`` (the replay's release, in its hand-over thread) waits for the first."""

    def __init__(self, keeper: MainKeeper, timeout_s: float, b_stop: threading.Event | None = None):
        super().__init__(daemon=True)
        self.keeper, self.timeout_s = keeper, timeout_s
        # ``b_stop``: the replay's own stop where it was started before (EarlySides)
        self.b_stop = b_stop if b_stop is not None else threading.Event()
        self.b_ended, self.decided = threading.Event(), threading.Event()
        self.recorded = False

    def run(self) -> None:
        try:
            self.recorded = self.keeper.wait_recorded(self.timeout_s)
        finally:
            self.decided.set()
        if not self.recorded:
            self.b_stop.set()
            return
        if not self.b_ended.wait(self.timeout_s):
            self.b_stop.set()  # the replay's own limit, from main's RECORDED

    def released(self) -> bool:
        """Main's side recorded (False: it failed, or the replay ended first)."""
        while not self.decided.wait(0.2):
            if self.b_ended.is_set():
                return False
        return self.recorded


def _unrecorded(keeper: MainKeeper, a_dir: Path, timeout: float) -> "_Sides":
    """Main's side did not record in time: its outcome, its folder renamed (its log kept, never
    taken for a cached recording); the replay is not judged ("not run")."""
    a = keeper.finish(timeout)
    failed = a_dir.with_name(a_dir.name + "-failed-" + _stamp())
    a_dir.rename(failed)
    return _Sides(a.kind if a is not None else "error", a.wall_s if a else 0.0,
                  a.log_tail if a else "", failed, a_out=a)


BAND = "band.json"  # the band folder's evidence (band_evidence), once its passes ran


def band_inputs(target: Target, machine: MachineProfile, accuracy: AccuracySettings) -> Hidden:
    """The inputs of main's repeat and band passes: the target's visible seed, and as many
    extra batch sizes as a judgment draws (``test.hidden_rows``), drawn from that seed. The
    same for every judgment, so the passes are made once per main commit, touched ops and
    spec (:func:`band_key`) and serve every judgment against that main.

    Why the judgment's hidden draw is not needed here: the hidden inputs keep a candidate from
    special-casing what the gates run, and no candidate code runs in these passes (main's tree
    in main's process, the touched ops on the protected reference: the band is main against
    the reference), so no candidate can influence them. What the verdict reads of them are
    statistics (the band's KL max, its flips per row, whether A is reproducible), held against
    the candidate's statistics on its own inputs, never compared row by row: they need inputs
    like the candidate's (the same workload generator, as many batch sizes), not the same
    ones. Nor did the hidden draw keep main's own code (an earlier candidate, merged) from
    telling these passes apart: their spec names the role ``noise``, readable by any code in
    the process; the band trusts main's code, as it did. Knowing the band's inputs gives an
    agent the band itself, which it could estimate from the visible seed before."""
    import random

    from .rules import hidden as draws

    seed = target.seed
    extra = draws.draw(random.Random(f"band/{seed}"), machine.buckets, machine.test_rows,
                       accuracy.hidden_rows).extra_rows
    return Hidden(seed, extra)


def band_key(spec: dict, touched: set | None, cuda: bool, inputs: dict) -> str:
    """Pure: the name of main's band passes (``runs/tap/<base>-band-<key>``) beside the base
    commit: what decides them (A's tap spec, the touched ops, the device, their inputs)."""
    return _digest({"band": True, "spec": spec, "cuda": cuda, "inputs": inputs,
                    "touched": sorted(touched) if touched is not None else None})


def band_evidence(doc: dict, files: TapFiles, near_tie_factor: float) -> dict:
    """What the verdict reads of main's noise passes (``doc``: their side's document; the
    logits in ``files``): A against A again (``noise``, ``noise_tap``: is main reproducible?)
    and against A with the touched ops on the reference (``band``)."""
    la = torch.load(files / TapFiles.LOGITS_A)
    out = {"noise": logits.logit_stats(la, torch.load(files / TapFiles.LOGITS_A2), near_tie_factor),
           "noise_tap": verdict.tap_diff(doc["pass"], doc["repeat"]), "band": None,
           "band_ops": doc.get("band_ops") or [], "rows": doc.get("rows"),
           "passes_s": doc.get("passes_s")}  # each pass's wall: where the band's time goes
    if doc.get("band_ops") and (files / TapFiles.LOGITS_AREF).exists():
        out["band"] = logits.logit_stats(la, torch.load(files / TapFiles.LOGITS_AREF), near_tie_factor)
    return out


@dataclass
class _Band:
    """Main's repeat and band passes for a judgment: how they ended, their evidence (None
    unless ok), their folder; ``out`` the launcher's outcome (None: cached)."""

    kind: str
    wall_s: float
    tail: str
    folder: Path
    evidence: dict | None = None
    out: object = None


def _band(req, place: Placement, base_sha, a_tree, spec, touched, timeout, progress,
          held: disk.Recordings, lease: "_TapLease | None" = None) -> _Band:
    """Main's repeat and band passes on :func:`band_inputs`, made once per (main, touched
    ops, spec) and kept as their evidence (``band.json``; their logits go once it is made)."""
    inputs = band_inputs(req.target, req.machine, req.accuracy).to_dict()
    folder = req.runs_dir / "tap" / f"{base_sha[:12]}-band-{band_key(spec, touched, req.cuda, inputs)}"
    held.hold(folder)  # no other judgment's sweep takes its logits while they are read
    folder.parent.mkdir(parents=True, exist_ok=True)
    files = TapFiles(folder)
    with open(folder.parent / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one measurement per main, however many judgments
        if (folder / BAND).exists():
            return _Band("ok", 0.0, "", folder, json.loads((folder / BAND).read_text()))
        folder.mkdir(exist_ok=True)
        n_spec = {**spec, "role": "noise", "touched": sorted(touched) if touched is not None else None}
        n_attach = lease.attach("A", a_tree, folder, spec) if lease is not None else {}
        n = ranks.run("tap", a_tree, {**n_spec, **n_attach}, files / TapFiles.NOISE, timeout, place,
                      _tagged(progress, "A noise"), inputs, group=lease.group if n_attach else None)
        if not n.ok:
            (files / TapFiles.NOISE).unlink(missing_ok=True)
            return _Band(n.kind, n.wall_s, n.log_tail, folder, out=n)
        evidence = band_evidence(json.loads((files / TapFiles.NOISE).read_text()), files,
                                 req.accuracy.near_tie_factor)
        tmp = folder / f"{BAND}.tmp"
        tmp.write_text(json.dumps({**evidence, "inputs": inputs}, indent=1))
        os.replace(tmp, folder / BAND)
        for pt in folder.rglob("*.pt"):  # the statistics are what later judgments read
            pt.unlink()
        return _Band("ok", n.wall_s, n.log_tail, folder, evidence, n)


class _TapLease:
    """The accuracy gate's lease of the slot's model store (GPU only, one process per side, as
    the scorer's: gates/rules/store.py's ``decide``; on the CPU it says none, no CUDA IPC): the
    weights alone (no state is built in the store). :meth:`attach` gives a tap side of a tree
    whose STORE_FILES digest is the store's the weights' handles, copied into its run folder
    (the sha256 of the store's bytes in its spec, read before its tree is imported): it joins
    the store's sandbox in its own root and builds a decode state of its own in its process,
    never the store's or another side's. A side of a tree whose digest differs builds its own
    model. :meth:`release` verifies the weights after the gate's sides; the sides are named
    ("A" main's, "B" the candidate's), so only the candidate's side is blamed."""

    def __init__(self, stores, req: AccuracyRequest, place: Placement, a_tree: Path, spec: dict,
                 b_spec: dict, timeout: float, refused: str | None = None):
        """``refused``: why this gate leases no store although one is held (its tap sides were
        started early, before any lease: gates/rules/overlap.py ``tap_lease``); the store is
        then neither started, leased nor verified here, and each side builds its own model."""
        from .scorer import new_store, store_key  # (the scorer's store, its key; imports this module's peers)

        self.stores, self.timeout, self.store, self.plan = stores, timeout, None, None
        self.sides: list[str] = []
        self.files: list[Path] = []
        self.leased = False
        self.ended = None  # the release's Release, once made
        self.swept = None  # the store group's /dev/shm swept after the release (ShmSweep)
        if stores is None:
            return
        if refused is not None:
            self.plan = Plan(NONE, refused)
            return
        key = store_key({"A": a_tree}, spec, place)
        world = max(int(spec.get("world", 1)), int(b_spec.get("world", 1)))
        self.plan = stores.plan(Need(key, req.cuda, world, True))
        if self.plan.action == NONE:
            return
        lease = StoreLease(spec["context"], list(spec["rows"]), spec["steps"], state=False)

        # the store's options: the model part of the tap's spec (a tap's own keys are no store's)
        fields = {f.name for f in dataclass_fields(StoreOptions)} - {"sent"}
        store_spec = {k: v for k, v in spec.items() if k in fields}

        def start():
            return new_store(key, a_tree, store_spec, req.runs_dir, place, timeout)

        try:
            self.store = stores.open(self.plan, start)
            if not self.store.lease(lease, timeout)["weights_intact"]:  # changed since: a new one, once
                self.store = stores.open(Plan(REPLACE, "the weights held changed"), start)
                if not self.store.lease(lease, timeout)["weights_intact"]:
                    raise SideError("error", "store: the weights of a store just built differ from "
                                    "their own build's digest (expected equal): the environment's "
                                    "GPU memory or the store's code", self.store.log_path)
        except SideError as e:  # the store is a saving, not a gate: each side builds its own model
            stores.close()
            self.plan = Plan(NONE, f"the store failed ({e}; its log: {e.log_path}): each side "
                                   f"builds its own model")
            return
        self.leased = True

    @property
    def group(self):
        return self.store.group if self.leased else None

    def attach(self, side: str, tree: Path, folder: Path, spec: dict) -> dict:
        """What ``side``'s ``spec`` adds to attach to the store's weights (``{}``: it builds its
        own model: no lease, another STORE_FILES digest, another layout (``kern test
        --base-gpus``), ranks, or the CPU)."""
        from .launch.store import store_digest

        k = self.store.key if self.leased else None
        if k is None or store_digest(tree) != k.digest or int(spec.get("world", 1)) != 1 or \
                (spec["model"], spec["layout"], spec["seed"], spec["weight_sets"], spec.get("state_dtype")) != \
                (k.model, k.layout, k.seed, k.weight_sets, k.state_dtype):
            return {}
        into = folder / f".sandbox-attach-{side}-{len(self.files) + 1}.ipc"  # shown to no other side
        h = self.store.handles(self.timeout, into, weights=True)
        if not h.get("ready"):
            return {}
        self.files.append(into)
        if side not in self.sides:
            self.sides.append(side)
        return {"attach": h["ready"], "attach_sha256": h["sha256"]}

    def release(self) -> dict | None:
        """End the lease (once): the failed check of the candidate's side where the weights
        changed while it was attached (None: unchanged, or no lease)."""
        if not self.leased:
            return None
        self.leased = False
        for f in self.files:
            f.unlink(missing_ok=True)
        rel = self.ended = self.stores.released(tuple(self.sides), self.timeout)
        self.swept = self.stores.last_sweep  # its group's /dev/shm after the lease: recorded
        return rel.failed_check if rel is not None else None

    def abandon(self) -> None:
        """Ctrl-C or an error mid-gate: the store ends (no lease is released, no process of it
        outlives the gate's sides)."""
        if self.leased:
            self.leased = False
            for f in self.files:
                f.unlink(missing_ok=True)
            self.stores.close()

    def report(self) -> dict | None:
        if self.plan is None:
            return None
        rel = self.ended
        return {"plan": self.plan.action, "why": self.plan.reason, "attached": list(self.sides),
                "kept": rel.keep if rel is not None else None,
                "released": rel.reason if rel is not None else None,
                "shm_swept": self.swept.record() if self.swept is not None else None}


def _stamp() -> str:
    """Now, to the microsecond, for a folder's name (``time.strftime`` has no ``%f``)."""
    from datetime import datetime

    return datetime.now().strftime("%Y%m%d-%H%M%S-%f")


def _short(sha: str) -> str:
    return sha[:12] if sha != checkout.WORKTREE else "worktree"


def _tagged(progress, tag):
    """A launcher's ``(last log line, elapsed s)`` as the gate's :class:`~gates.events.PassTick`."""
    if progress is None:
        return None
    return lambda line, t: progress(PassTick(tag, t, line))
