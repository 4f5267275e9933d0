"""``kern test REV --vs BASE``: the accuracy gate, end to end.

Shell: check the disk has room for the tap (``gates/disk.py``), resolve revisions, check
protected paths, check out worktrees, run side A (record; named by the base commit, the tap
definition and the hidden draw) and side B (replay) in their own subprocesses, load what they
measured; the recordings' tensors are deleted once the verdict is made. Core: ``verdict.judge`` over that evidence. Output: the report as
lines by section (the last starts with the verdict) or one JSON object.
"""
from __future__ import annotations

import ast
import fcntl
import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from . import checkout, compiled, disk, filemarks, launch_ranks, logits, sandbox, scope, verdict
from .after_import import AfterImport
from .events import PassTick, SideEnded
from .protocol import Hidden, TapFiles, tap_rows
from .results import AccuracyResult, LastWords
from .spec import side_spec


@dataclass
class AccuracyRequest:
    """``kern test REV --vs BASE``: what the accuracy gate is asked to judge."""

    repo: Path
    rev: str
    base: str
    settings: dict  # the parsed kern.yaml
    profile: dict  # the profile for this machine
    runs_dir: Path
    cuda: bool
    world: int = 1  # processes of each side, one per rank (kern test --gpus)
    layout: str | None = None  # None: the profile's
    base_world: int | None = None  # --base-gpus: A on this many ranks of its own layout
    base_layout: str | None = None
    # the judgment's hidden inputs (gates/hidden.py), the same for A and B; None: none (the
    # target seed, the visible rows). The pipeline and the CLI draw one per judgment.
    hidden: Hidden | None = None


def protected_changed(paths: list[str], protected: list[str]) -> list[str]:
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
    prof = req.profile
    return side_spec(req.settings, prof, context=prof["test_context"], steps=prof["test_steps"],
                     rows=tap_rows(prof["test_rows"], prof["buckets"]),
                     budget_mb=req.settings["test"]["snapshot_budget_mb"],
                     reference_calls_per_op=req.settings["test"]["reference_calls_per_op"],
                     layout=req.layout or prof["layout"], world=req.world)


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

    So a recording serves the passes of one judgment (B's replay, A's noise and band passes)
    and never a second judgment against the same main, although recording main is half the
    gate's time (issue 17 asked for it once per main commit): each judgment draws its hidden
    inputs afresh so that no agent or candidate can know them, and a recording kept for the
    next judgments would put them on disk (the record names the input seed and the extra
    sizes, ``kept_a.pt`` holds the inputs) before the next agent writes its commit. Reusing it
    means one draw for every judgment against that main: the gate's defence against inputs a
    candidate knows would hold for the first judgment only. What is reused per main commit
    is what the hidden inputs do not decide: the checkout (``checkout.checkout``), Triton's
    compiled kernels, and the loop's profile of main (harness/orchestrator.py)."""
    return _digest({"spec": spec, "touched": sorted(touched) if touched is not None else None,
                    "cuda": cuda, "hidden": hidden})


def run_test(req: AccuracyRequest, progress=None) -> AccuracyResult:
    """The gate on ``req``: its verdict and facts typed, the full report as ``.report``.
    ``progress`` (or None) is called with a ``gates.events.PassTick`` every few seconds of a
    side's pass, and a ``SideEnded`` for each side that ended badly. Raises
    ``gates.disk.DiskShort`` before any side starts when runs/tap lacks the room; when it
    returns, no tensor of this judgment's recordings is left (unless another judgment still
    holds the same recording: then that one deletes it)."""
    with sandbox.configured(sandbox.settings_mode(req.settings)), \
            disk.Recordings(req.runs_dir / "tap") as held:
        room_for(req)
        # main's kernels compiled from main alone (once per main); each side starts on a copy
        main = compiled.prepare(req.repo, req.base, req.runs_dir, req.settings, req.profile, req.cuda,
                                float(req.settings["test"]["timeout_s"]), _tagged(progress, "main compile"),
                                req.base_layout or req.layout, req.base_world or req.world)
        with sandbox.seeded(main.path):
            return _run_test(req, progress, held, main)


def tap_bytes(req: AccuracyRequest) -> int:
    """What this gate's tap writes under runs/tap at most (``gates.disk.judgment_bytes``)."""
    return disk.judgment_bytes(req.settings, req.profile, world=req.world, layout=req.layout,
                               base_world=req.base_world, base_layout=req.base_layout,
                               copies=disk.copied()).tap


def room_for(req: AccuracyRequest) -> None:
    """Before any side starts: what a killed earlier run left in runs/tap deleted, then
    :class:`~gates.disk.DiskShort` unless the disk has room for this tap."""
    disk.sweep(req.runs_dir / "tap")
    disk.check({req.runs_dir / "tap": tap_bytes(req)}, "this accuracy gate")


def _run_test(req: AccuracyRequest, progress, held: disk.Recordings,
              main: compiled.CompiledCache | None = None) -> AccuracyResult:
    t0 = time.monotonic()
    base_sha = checkout.resolve(req.repo, req.base)
    rev_sha = checkout.resolve(req.repo, req.rev)
    paths = checkout.changed_paths(req.repo, base_sha, rev_sha)
    prot = protected_changed(paths, req.settings["protected"])
    tree_paths = [p for p in paths if p.startswith("kernels/")]
    touched = touched_ops(tree_paths, lambda p: (checkout.blob(req.repo, base_sha, p),
                                                 checkout.blob(req.repo, rev_sha, p)))
    b_spec = tap_spec(req)
    spec = base_spec(b_spec, req.base_world, req.base_layout)  # A's
    cross = cross_note(spec, b_spec)
    if cross:
        b_spec = {**b_spec, "cross_layout": True}
        touched = None  # another layout changes every op's rounding: the band covers every op
    timeout = float(req.settings["test"]["timeout_s"])
    a_tree = checkout.checkout(req.repo, base_sha, req.runs_dir)
    b_tree = checkout.checkout(req.repo, rev_sha, req.runs_dir)
    hidden = req.hidden.to_dict() if req.hidden else None
    key = recording_key(spec, touched, req.cuda, hidden)
    a_dir = req.runs_dir / "tap" / f"{base_sha[:12]}-{key}"
    a_dir.parent.mkdir(parents=True, exist_ok=True)
    held.hold(a_dir)  # its tensors go when the verdict is made (run_test), unless another holds it
    with open(a_dir.parent / f"{a_dir.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one recording per base and tap, however many callers
        a_kind, a_wall, a_tail, a_dir, a_log = _record_a(req, a_dir, a_tree, spec, touched, timeout,
                                                         progress, hidden)
    stamp = time.strftime("%Y%m%d-%H%M%S")

    b_dir = req.runs_dir / "tap" / f"{_short(rev_sha)}-vs-{base_sha[:12]}-{stamp}"
    held.hold(b_dir)
    b_dir.mkdir(parents=True, exist_ok=True)
    if a_kind == "ok":
        # what B reads of main must be unchanged when it ends (else it could record its own
        # results there): main's recording and tree, and B's copies of the recording
        a_world = int(spec.get("world", 1))
        a_files = TapFiles(a_dir)
        guarded = a_files.recording() + [a_tree / "kernels"] + [
            p for r in range(1, a_world) for p in a_files.recording(r, a_world)]
        marks: dict = {}
        mech = sandbox.chosen()
        seen = b_dir / "main" if mech != "off" else a_dir

        def mark(roots, ctime=True) -> None:
            with open(a_dir.parent / f"{a_dir.name}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # a noise pass of main writing beside it ends first
                marks.update(filemarks.file_marks(roots, ctime))

        # Sandboxed, B sees main's recording only once every process of it has imported its
        # tree, in its own folder (no sandbox of B shows main's): hard links under namespaces
        # (mounted read-only there; marked by mtime, since another judgment's links change
        # ctimes), copies under landlock alone (B could write through a link; the copies are
        # marked; likewise under user, where B owns the folder the copies are in). With
        # sandbox: off nothing hides main's folder: B is told where it lies.
        if mech == "off":
            mark(guarded)
            handed = hidden
        else:
            seen.mkdir(exist_ok=True)
            if mech == "namespaces":
                mark(guarded, ctime=False)
            handed = AfterImport(hidden, int(b_spec.get("world", 1)), lambda: (
                show_recording(a_dir, seen, link=mech == "namespaces"),
                None if mech == "namespaces" else mark(guarded + [seen])))
        b = launch_ranks.run("tap", b_tree, {**b_spec, "role": "replay", "record": str(seen)},
                             TapFiles(b_dir) / TapFiles.RESULT, timeout, _tagged(progress, "B replay"), handed)
        b_kind, b_wall, b_res, b_tail, b_log = b.kind, b.wall_s, b.result, b.log_tail, b.log_path
        moved = filemarks.changed_files(marks, filemarks.file_marks(
            guarded + ([seen] if mech in ("landlock", "user") else []), ctime=mech != "namespaces"))
        if mech != "off":
            shutil.rmtree(seen, ignore_errors=True)  # links or copies: main's stays in a_dir
            if handed.error is not None:
                raise RuntimeError(f"accuracy gate: main's recording could not be shown to the "
                                   f"replay ({handed.error}): the environment must allow links or "
                                   f"copies in {b_dir}") from handed.error
        if moved:
            b_kind, b_res = "tampered", None
            b_tail += (f"\ntamper: the candidate's side changed main's recording or tree: "
                       f"{', '.join(os.path.relpath(m, req.runs_dir) for m in moved[:4])}")
            a_dir = a_dir.rename(a_dir.with_name(f"{a_dir.name}-tampered-{stamp}"))  # never reused
    else:
        b_kind, b_wall, b_res, b_tail, b_log = "not run", 0.0, None, "", None
    a_res = json.loads(TapFiles(a_dir).record.read_text()) if a_kind == "ok" else None
    th = req.settings["test"]
    n_kind, n_wall, n_tail, n_log = "not needed", 0.0, "", None
    ev, v = _weigh(a_res, b_res, a_dir, b_dir, a_kind, b_kind, n_kind, prot, cross, th)
    # A's repeat and band passes cost a full pass each (at full size the band runs every
    # moe.experts call on the protected reference: minutes on the H200); they only raise
    # limits, so they run when the verdict without them is not already a PASS
    if a_res and b_res and verdict.needs_noise(ev, th):
        with open(a_dir.parent / f"{a_dir.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            n_kind, n_wall, n_tail, n_log = _noise_a(a_dir, a_tree, spec, touched, timeout, progress, hidden)
        if n_kind == "ok":
            a_res = {**a_res, **json.loads((TapFiles(a_dir) / TapFiles.NOISE).read_text())}
        else:
            a_tail = n_tail
        ev, v = _weigh(a_res, b_res, a_dir, b_dir, a_kind, b_kind, n_kind, prot, cross, th)
    words = [w for w in (LastWords.of("A record", a_kind, a_tail, a_log),
                         LastWords.of("B replay", b_kind, b_tail, b_log),
                         LastWords.of("A noise", n_kind, n_tail, n_log)) if w]
    for w in words if progress else ():
        progress(SideEnded("accuracy gate", w.side, w.kind, w.last, w.log))
    return AccuracyResult.of({
        "verdict": v.name, "exit_code": v.exit_code, "reasons": v.reasons,
        "base": base_sha, "rev": rev_sha, "changed": paths, "touched_ops": sorted(touched) if touched is not None else "all",
        "spec": b_spec, "base_spec": spec, "hidden": hidden,
        "rows": tap_rows(b_spec["rows"], [], req.hidden.extra_rows if req.hidden else ()),
        "wall_s": time.monotonic() - t0, "a_wall_s": a_wall, "b_wall_s": b_wall,
        "noise_wall_s": n_wall,
        "a_cached": a_wall == 0.0 and a_kind == "ok", "evidence": ev,
        "b_log_tail": b_tail[-2000:] if b_kind not in ("ok", "not run") else "",
        "a_log_tail": a_tail[-2000:] if a_kind != "ok" else "",
        "a_dir": str(a_dir), "b_dir": str(b_dir),
        "last_words": [w.to_dict() for w in words],
        "environment": (b_res or a_res or {}).get("environment"),
        "compiled": main.to_dict() if main else None,
    })


def _weigh(a_res, b_res, a_dir, b_dir, a_kind, b_kind, n_kind, prot, cross, th):
    """The evidence of both sides as the verdict reads it, and the verdict."""
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
    ev["logits"] = logits.logit_stats(la, lb, th["near_tie_factor"])
    if "repeat" in a_res:
        ev["noise"] = logits.logit_stats(la, torch.load(a_files / TapFiles.LOGITS_A2), th["near_tie_factor"])
        ev["noise_tap"] = verdict.tap_diff(a_res["pass"], a_res["repeat"])
    if "band_ops" in a_res and (a_files / TapFiles.LOGITS_AREF).exists():
        ev["band"] = logits.logit_stats(la, torch.load(a_files / TapFiles.LOGITS_AREF), th["near_tie_factor"])
    ev["local"] = verdict.local_summary(b_res.get("pinned"), th["reference"])
    return ev, verdict.judge(ev, th)


def show_recording(a_dir: Path, seen: Path, link: bool) -> None:
    """Every file of main's recording in ``a_dir`` (its ranks' too, logs aside) at the same
    place under ``seen``: hard links (``link``, where the file system allows) or copies."""
    for src in sorted(a_dir.rglob("*")):
        if not src.is_file() or src.suffix == ".log" or \
                any(p.startswith(".sandbox-") for p in src.relative_to(a_dir).parts):
            continue  # a side's private home, /tmp, Triton cache: never shown to another
        dst = seen / src.relative_to(a_dir)
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            if not link:
                raise OSError("copies asked for")
            os.link(src, dst)
        except OSError:
            shutil.copyfile(src, dst)


def _record_a(req, a_dir, a_tree, spec, touched, timeout, progress, hidden):
    if TapFiles(a_dir).recorded:
        return "ok", 0.0, "", a_dir, None
    a_dir.mkdir(parents=True, exist_ok=True)
    a_spec = {**spec, "role": "record", "touched": sorted(touched) if touched is not None else None}
    a = launch_ranks.run("tap", a_tree, a_spec, TapFiles(a_dir).record, timeout,
                         _tagged(progress, "A record"), hidden)
    if not a.ok:  # keep its log, but never let a failed recording look cached
        failed = a_dir.with_name(a_dir.name + "-failed-" + _stamp())
        a_dir.rename(failed)
        a_dir = failed
    return a.kind, a.wall_s, a.log_tail, a_dir, a_dir / a.log_path.name  # every rank logs in a_dir


def _noise_a(a_dir, a_tree, spec, touched, timeout, progress, hidden):
    """A's repeat and band passes (cached beside the recording, like it)."""
    out = TapFiles(a_dir) / TapFiles.NOISE
    if out.exists() and (TapFiles(a_dir) / TapFiles.LOGITS_A2).exists():
        return "ok", 0.0, "", None
    n_spec = {**spec, "role": "noise", "touched": sorted(touched) if touched is not None else None}
    n = launch_ranks.run("tap", a_tree, n_spec, out, timeout, _tagged(progress, "A noise"), hidden)
    if not n.ok:
        out.unlink(missing_ok=True)
    return n.kind, n.wall_s, n.log_tail, n.log_path


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


# ------------------------------------------------------------------ report
def rank_lines(res: dict) -> list[str]:
    """Each side's processes and layout, and whether its ranks agreed (only when a side ran
    on several ranks or on its own layout)."""
    ev = res["evidence"]
    rk = ev.get("ranks") or {}
    if not (rk.get("a") or rk.get("b") or ev.get("cross_layout")):
        return []
    out = []
    for side, spec in (("A", res.get("base_spec") or res["spec"]), ("B", res["spec"])):
        info = rk.get(side.lower())
        how = (f"{info['world']} processes ({info['backend']}): {info['note']}" if info else
               "1 process")
        bad = rk.get(f"{side.lower()}_disagree") or []
        agree = "" if not info else (f"; ranks DISAGREE after {len(bad)} step(s)" if bad else
                                     "; every rank identical at every step")
        out.append(f"ranks      {side}: layout {spec.get('layout')}, {how}{agree}")
    return out


def report_lines(res: dict, limit: int = 8) -> list[str]:
    """One fact per line by section; equal things counted, different things worst first."""
    ev = res["evidence"]
    touched = (", ".join(res["touched_ops"]) or "none") if isinstance(res["touched_ops"], list) \
        else "all (a file no single op owns changed)"
    out = [f"diff       {_short(res['base'])} → {_short(res['rev'])}: {len(res['changed'])} file(s) changed; "
           f"ops touched: {touched}"]
    if ev.get("protected_changed"):
        out.append(f"diff       protected: {', '.join(ev['protected_changed'])}")
    a_time = " (cached)" if res["a_cached"] else f" {res['a_wall_s']:.0f}s"
    noise = ev.get("outcome_noise", "not needed")
    noise = f"{noise} {res.get('noise_wall_s', 0):.0f}s" if noise not in ("not needed",) else noise
    out.append(f"diff       sides: A {ev['outcome_a']}{a_time}, B {ev['outcome_b']} {res['b_wall_s']:.0f}s, "
               f"A's noise passes {noise}")
    for side in ("a", "b"):
        if res.get(f"{side}_log_tail"):
            last = [ln for ln in res[f"{side}_log_tail"].strip().splitlines() if ln.strip()][-1:]
            out.append(f"diff       {side.upper()}'s last words: {last[0][:160] if last else '(none)'} "
                       f"(log in {res[f'{side}_dir']})")
    out += rank_lines(res)
    tap = ev.get("tap")
    if tap:
        spec = res["spec"]
        rows = res.get("rows") or spec["rows"]
        out.append(f"tap        {len(rows)} batch sizes {rows} x {spec['steps']} steps, "
                   f"context {spec['context']}: {tap['calls']} op calls")
        if not tap.get("compared", True):
            out.append("tap        not compared with A's op calls (another layout); B's own "
                       "defects checked")
        elif tap["differ_raw"] == 0 and not tap["sequence"]:
            out.append(f"tap        {tap['calls']} op calls bit-identical")
        else:
            out.append(f"tap        {tap['calls'] - tap['differ_raw']} equal, {tap['differ_raw']} differ "
                       f"({tap['differ_value']} in value); first at {tap['first_difference']}")
            worst = sorted(tap["by_op"].items(), key=lambda kv: -kv[1]["raw"])
            for op, c in [w for w in worst if w[1]["raw"]][:limit]:
                out.append(f"tap        {op}: {c['raw']} of {c['calls']} calls differ")
        for s in tap["sequence"][:limit]:
            out.append(f"tap        sequence: {s}")
        for s in (tap["unwritten"] + tap["nonfinite"] + tap["outside"])[:limit]:
            out.append(f"tap        defect: {s}")
    local = ev.get("local")
    if local and local["ops"]:
        ops = sorted(local["ops"].items(), key=lambda kv: -kv[1]["rel_rms"])
        for op, o in ops[:limit]:
            at = f", worst at {o['worst_site']}" if o["worst_site"] else ""
            out.append(f"local      {op}: {o['calls']} calls, {o['differing']} elements differ, max ulp "
                       f"{verdict.fmt(o['max_ulp'])}, rel RMS {verdict.fmt(o['rel_rms'])}, NaN/Inf {o['nan']}{at}")
        for d in (local["defects"] + local["diverged"])[:limit]:
            out.append(f"local      {d}")
    elif tap and tap["differ_raw"]:
        out.append("local      not run (no recorded call to pin)")
    lg = ev.get("logits")
    if lg:
        out.append(f"logits     {lg['rows']} rows: argmax flips {lg['flips_confident']} confident, "
                   f"{lg['flips_near_tie']} near-tie; KL max {verdict.fmt(lg['kl_max'])}, mean "
                   f"{verdict.fmt(lg['kl_mean'])}; max |Δ| {verdict.fmt(lg['max_ulps'])} ulp of A's top logit")
        for w in [w for w in lg["worst"] if w["kl"] > 0 or w["flip"]][:min(limit, 3)]:
            flip = (", FLIP (near-tie)" if w["near_tie"] else ", FLIP (confident)") if w["flip"] else ""
            out.append(f"logits     {w['at']}: KL {verdict.fmt(w['kl'])}, margin {w['margin']:.3g}, "
                       f"rms Δ {w['rms_delta']:.3g}{flip}")
    bd = ev.get("band")
    if bd:
        out.append(f"noise      A vs A with the touched ops on the reference (the band): KL max "
                   f"{verdict.fmt(bd['kl_max'])}, flips {bd['flips_near_tie'] + bd['flips_confident']}")
    nz = ev.get("noise")
    if nz:
        nt = ev["noise_tap"]
        if nt["differ_raw"] == 0 and nz["identical"]:
            out.append("noise      A re-run from restored state: bit-reproducible")
        else:
            out.append(f"noise      A vs A: {nt['differ_raw']} op calls differ, KL max {verdict.fmt(nz['kl_max'])}, "
                       f"flips {nz['flips_near_tie'] + nz['flips_confident']}")
    if local and local["ops"]:
        breaks = local["reference_breaks"]
        worst = sorted(local["ops"].items(), key=lambda kv: -kv[1]["ref_rel_rms"])
        for op, o in worst[:limit]:
            out.append(f"reference  {op}: rel RMS {verdict.fmt(o['ref_rel_rms'])}, max ulp {verdict.fmt(o['ref_max_ulp'])}")
        for b in breaks[:limit]:
            out.append(f"reference  exceeded: {b}")
        if not breaks:
            out.append(f"reference  {len(local['ops'])} op(s) within tolerance")
    elif tap and tap["differ_raw"] == 0:
        out.append("reference  unchanged ops: nothing to check")
    for r in res["reasons"][1:]:
        out.append(f"why        {r}")
    out.append(hidden_line(res.get("hidden"), res.get("replayed_from")))
    out.append(f"{res['verdict']}" + (f": {res['reasons'][0]}" if res["reasons"] else "")
               + f"  ({res['wall_s']:.0f}s)")
    return out


def hidden_line(hidden: dict | None, replayed: int | None = None) -> str:
    """The judgment's hidden inputs, shown once it is over (one line)."""
    if hidden is None:
        return "hidden     none: the target seed and the visible batch sizes only"
    how = f"attempt #{replayed}'s, replayed" if replayed is not None else "drawn for this judgment"
    return f"hidden     {Hidden.from_dict(hidden).describe()} ({how})"
