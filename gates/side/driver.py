"""The entry point of one side's subprocess: ``python -m gates.side.driver MODE --tree T --spec J``.

The harness starts it with a minimal environment in the harness root; it loads the revision's
kernel tree from ``--tree``, builds the seeded model on the device and does one job, writing
one JSON document to ``--out`` (and tensors next to it where the mode records them). It
decides nothing: verdicts and statistics are computed by the harness from what it writes.

Before a mode's work the driver imports the whole tree, says so on stdout and only then
receives the judgment's hidden inputs on stdin (``gates/launch/process.py``: the hand-over; bench sides
get them in their ``prepare`` request, tap sides once their model is built, which follows the
target seed alone): the candidate's import-time code finds nothing there.

Modes:
  run      every batch size: one eager step (NaN and poison checks), graph capture and timed
           replays, peak memory; the per-op profile at --profile-rows; the whole step's error
           against the reference ops at --ref-rows.
  tap      (gates/side/tap.py) record or replay the accuracy gate's tap.
  bench    (gates/side/replays.py) timed rounds for the scorer, driven over stdin.
  store    (gates/side/store.py) the weights built once, leased to the scorer's runs over
           CUDA IPC with a decode state built per lease; main's model code only.
  compile  main's kernels compiled into the side's Triton cache (gates/launch/compiled.py): the model
           built and one eager step per batch size, nothing measured or kept.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

from .. import protocol
from ..interpreter import prepare_interpreter, run_interpreted_kernels_fast
from . import clock as phase_clock
from .clock import CompileClock, PhaseClock
from .rank import rank_digests
from .tree import open_tree


HIDDEN_MODES = ("run", "tap", "bench")  # the modes whose inputs a judgment's hidden values set


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gates.side.driver")
    ap.add_argument("mode", choices=("run", "tap", "bench", "store", "compile"))
    ap.add_argument("--tree", required=True)
    ap.add_argument("--spec", required=True, help="JSON: the mode's options (gates/protocol.py)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default=None)
    ap.add_argument("--hold", action="store_true",
                    help="start early: wait at the hold point for the coordinator's go line")
    args = ap.parse_args(argv)
    phase_clock.CLOCK = PhaseClock(CompileClock())  # this process's phases, from here
    limit_memory()
    if args.hold:
        hold_for_go(args.mode)
    prepare_interpreter()
    run_interpreted_kernels_fast()  # before the tree: its kernels run on the interpreter so
    phase_clock.CLOCK.compiler.install()  # once triton may be imported, before any kernel
    root = open_tree(args.tree)
    import torch

    from . import tamper

    spec = json.loads(Path(args.spec).read_text()) if args.spec.endswith(".json") else json.loads(args.spec)
    opts = protocol.parse(args.mode, spec)  # a key the mode does not define: the gate's bug
    # before any of the tree's kernel modules is imported: what they must not replace (fd 0
    # included), and the hook that stops them reading the workload, main's recording (the
    # replay side is told where it lies) or a process's file descriptors
    seal = tamper.Seal()
    record = getattr(opts, "record", None)
    guarded = {record: "main's recording"} if record else {}
    audit = tamper.WorkloadAudit(root, guarded).install()
    # the coordinator's pipe (the hand-over; a bench side's replies and the store's): the
    # tree's prints go to the log instead, so no line on it is the candidate's
    channel = sys.stdout
    sys.stdout = sys.stderr
    if args.mode == "tap":
        from .numerics import poison_fresh_memory

        # the accuracy gate judges values: memory nobody wrote must read as poison there (the
        # scorer keeps PyTorch's default mode, so its timed kernels are the production ones)
        poison_fresh_memory()
    hidden = None
    if args.mode in HIDDEN_MODES:
        from .tree import import_tree

        import_tree()
        channel.write(protocol.IMPORTED + "\n")
        channel.flush()
        if args.mode == "run":  # a bench side reads its hidden inputs in 'prepare', a tap side
            hidden = receive_hidden(seal)  # once its model is built (tap.side_main)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu" and os.environ.get(protocol.EXPECTS_CUDA) == "1":
        raise SystemExit("gates.side.driver: environment: the gates see a GPU but this side sees "
                         "none (expected CUDA, got CPU): the sandbox or the environment hides the "
                         "GPU; run bench/tools/sandbox_probe.py to see why (the operator's fix)")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rank = 0
    if opts.world > 1:
        if args.mode == "store":
            raise SystemExit(f"gates.side.driver: the model store serves one process, not a rank "
                             f"group (world {opts.world}): each rank builds its own share")
        from .rank import join

        rank, device = join(device, float(opts.collective_timeout_s))
    if args.mode == "run":
        result = run_mode(opts, device, out, rank, hidden)
    elif args.mode == "tap":
        from . import tap
        from .channel import Channel

        def publish(doc: dict) -> None:  # main's record side: its document before it waits
            check_tamper(seal, audit)  # (its phases so far: a batch's gate reads them then)
            out.write_text(json.dumps({**doc, "phases": phase_clock.CLOCK.phases().to_dict(),
                                       "device_memory": device_memory(device)}, indent=1, default=str))

        result = tap.side_main(opts, device, out.parent, rank, lambda: receive_hidden(seal),
                               Channel(channel, seal), publish)
    elif args.mode == "store":
        result = store_mode(opts, device, out, channel)
    elif args.mode == "compile":
        from .tree import import_tree

        import_tree()  # what a side's import compiles, this one's does too
        result = compile_mode(opts, device, rank, os.environ.get("TRITON_INTERPRET") == "1")
    else:
        from . import replays

        result = replays.side_main(opts, device, seal=seal, audit=audit, rank=rank)
    from .tree import check_sources

    check_sources()  # whatever it imported while it worked came from where its name says
    check_tamper(seal, audit)
    result["phases"] = phase_clock.CLOCK.phases().to_dict()
    result["device_memory"] = device_memory(device)
    out.write_text(json.dumps(result, indent=1, default=str))
    if rank or opts.world > 1:
        from .rank import leave

        leave()
    return 0


def device_memory(device) -> dict | None:
    """What this process held on its GPU at most (its own allocations: a store's weights it
    attached count in the store's process) and what the device had free as it ended: whether
    more sides could run at once. None off CUDA, or where this process never used it (no
    context is made to answer)."""
    import torch

    dev = torch.device(device)
    if dev.type != "cuda" or not torch.cuda.is_initialized():
        return None
    free, total = torch.cuda.mem_get_info(dev)
    return {"peak_allocated_gib": torch.cuda.max_memory_allocated(dev) / 2**30,
            "peak_reserved_gib": torch.cuda.max_memory_reserved(dev) / 2**30,
            "device_free_gib": free / 2**30, "device_total_gib": total / 2**30}


def hold_for_go(mode: str) -> None:
    """The hold point of a side started beside another judgment's scorer (gates/rules/overlap.py):
    what may run before it (torch and the gates' own side code imported; no CUDA call, no
    tree's code) runs, then the side says :data:`~gates.protocol.HELD` with what it imported
    and waits for the coordinator's go line on fd 0. Its end of input means it is not needed
    (the coordinator ended what it prepared): the side exits quietly."""
    import importlib

    import torch

    from .channel import read_line

    # which Triton runs is decided without asking CUDA where the environment says it already
    # (the CPU's interpreter, or the gates' word that there is a GPU); else it waits for go
    known = os.environ.get("TRITON_INTERPRET") == "1" or os.environ.get(protocol.EXPECTS_CUDA) == "1"
    for name in EARLY_MODULES.get(mode, ()) if known else ():
        importlib.import_module(name)
    report = protocol.held_line(kernels="kernels" in sys.modules or any(
        m.startswith("kernels.") for m in sys.modules), cuda=torch.cuda.is_initialized(),
        triton="triton" in sys.modules)
    sys.stdout.write(report)
    sys.stdout.flush()
    line = read_line(None, "the gates' go line", eof_ok=True)
    if not line:
        raise SystemExit(0)
    if not protocol.is_go(line):
        raise SystemExit(f"gates.side.driver: expected the gates' go line after {protocol.HELD_KEY}, "
                         f"got {line[:80]!r} (a bug of the coordinator, gates/launch/process.py)")


# the gates' own side code a held side imports before its hold point (none imports a tree,
# none calls CUDA at import): what its mode imports anyway once it goes on
EARLY_MODULES = {"tap": ("gates.side.tap", "gates.side.numerics", "gates.side.channel",
                         "gates.side.tamper", "gates.side.session", "gates.side.fingerprint")}


def check_tamper(seal, audit) -> None:
    """Raise if the tree tampered with this process: a side that was tampered with has
    measured nothing the harness may use."""
    from . import tamper

    signs = tamper.verdict(seal, audit)
    if signs:
        raise tamper.TamperError("tamper: " + "; ".join(signs[:6]))


def receive_hidden(seal):
    """The coordinator's one line on fd 0, read after the tree was imported: this side's
    hidden inputs (a ``Hidden``, or None when the caller judges with none). A line that is
    gone, or a stdin that is no longer the gates' pipe, means the candidate's code read it
    first (``gates/side/channel.py``)."""
    from .channel import read_line

    return protocol.read_handover(read_line(seal, "the gates' hidden inputs"))


def limit_memory() -> None:
    """Cap this side's address space before the candidate's code loads (hard limit too, so
    the candidate cannot lift it): see ``gates/launch/process.py``'s ``memory_limit``."""
    import os
    import resource

    want = int(os.environ.get(protocol.MEMORY_VARIABLE) or 0)
    if want <= 0:
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        want = min(want, hard)
    resource.setrlimit(resource.RLIMIT_AS, (want, want))


def store_mode(opts: "protocol.StoreOptions", device: str, out: Path, channel) -> dict:
    """The model store (gates/side/store.py): the weights built once and leased to the scorer's
    runs over CUDA IPC, each lease with a decode state of its own; it serves until stdin closes
    or says 'quit'. The model needs no hidden input: its weights and caches follow the target
    seed and its state's capacity a bound no input seed moves."""
    from .store import serve

    return serve(opts, device, out, channel)


def compile_mode(opts: "protocol.CompileOptions", device: str, rank: int = 0,
                 interpreted: bool = False) -> dict:
    """Launch every kernel of the tree once for each build the gates' sides make (the tap's
    and the scorer's context and batch sizes; no hidden input), so Triton compiles them into
    this side's cache: each batch size's step runs through the tap's own hooks
    (``tap.compile_checks``: the fused check kernel at every variant a tap of the build
    launches, keyed by no judgment); and the harness's digest kernel at the shapes a tap's
    hooks give it. ``interpreted``: Triton's interpreter runs the kernels, from source,
    compiling nothing: no model is built."""
    import dataclasses

    import torch

    from .fingerprint import digest_on_device
    from .session import Side, Spec, environment, log
    from .tap import compile_checks, variants_doc

    dev = torch.device(device)
    result = {"environment": environment(dev), "spec": opts.sent, "builds": []}
    if interpreted:
        result["interpreted"] = True
        log("compile: the interpreter compiles nothing; no model built")
        return result
    base = Spec.of(opts)
    builds = [(base.context, list(base.rows))] + [(int(c), list(r)) for c, r in opts.more]
    for context, rows in builds:
        t0 = time.monotonic()
        side = Side(dataclasses.replace(base, context=context, rows=rows, steps=1), device, rank=rank)
        variants = set()
        for n in rows:
            launched, step = compile_checks(side, n)  # the step's kernels, and the tap's checks
            variants |= launched
            digest_on_device(step.logits)
            side.sync()
            del step
        # the digest kernel's other specializations: a size not a multiple of 16 words, and
        # a tensor of odd bytes (hashed byte by byte)
        for t in (torch.zeros(17, dtype=torch.int32, device=dev), torch.zeros(3, dtype=torch.uint8, device=dev)):
            digest_on_device(t)
        side.sync()
        result["builds"].append({"context": context, "rows": rows, "build_s": side.build_s,
                                 "wall_s": time.monotonic() - t0,
                                 "check_variants": variants_doc(variants)})
        log(f"compile: context {context}, rows {rows}: {time.monotonic() - t0:.1f}s")
        del side
        if dev.type == "cuda":  # the next build needs the memory this one held
            import gc

            gc.collect()
            torch.cuda.empty_cache()
    return result


def run_mode(opts: "protocol.RunOptions", device: str, out: Path | None = None, rank: int = 0,
             hidden=None) -> dict:
    import torch

    from .numerics import unwritten
    from .session import Side, Spec, environment, log
    from .ceiling import read_ceiling
    from .timing import Timer

    spec = Spec.of(opts)
    with phase_clock.clock().span("build"):
        side = Side(spec, device, rank=rank, input_seed=hidden.input_seed if hidden else None)
    dev = side.device
    result = {"environment": environment(dev), "spec": opts.sent, "build_s": side.build_s,
              "weights_gib": side.model.weights.nbytes() / 2**30,
              "state_gib": side.model.state.nbytes() / 2**30,
              "workload": side.workload.describe(), "buckets": {}}
    # the card's read ceiling (floors divide by it) and torch's sum beside it; measured before
    # the first step, so its 4 GiB are free again for the buckets
    ceiling = read_ceiling(dev)
    bw = ceiling["ceiling_Bps"] if ceiling else None
    result["read_ceiling_Bps"] = bw
    result["torch_sum_Bps"] = ceiling["torch_sum_Bps"] if ceiling else None
    result["read_ceiling"] = ceiling
    replays = int(opts.replays)
    for rows in spec.rows:
        step = side.step(rows)
        side.set_inputs(step, 0)
        for t in (step.logits, step.top_val):
            t.fill_(float("nan"))
        t0 = time.monotonic()
        step.run()
        side.sync()
        first_s = time.monotonic() - t0
        nan = int(torch.isnan(step.logits).sum()) + int(torch.isinf(step.logits).sum())
        entry = {"first_run_s": first_s, "nan_or_inf_logits": nan,
                 "unwritten_logits": unwritten(step.logits),
                 "logits_std": float(step.logits.float().std()),
                 "residual_rms": float(step.x.float().pow(2).mean().sqrt())}
        entry["routing"] = routing_summary(step, side.shapes)
        if spec.world > 1:
            entry.update(rank_digests(side, step))
        timer = Timer(step.run, dev)
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
            timer.capture()
        n_sets = 4

        def between(i, step=step):
            side.set_inputs(step, 1 + i % n_sets)

        times = timer.measure(replays if dev.type == "cuda" else 2, between)
        entry["times_ms"] = times
        entry["median_ms"] = sorted(times)[len(times) // 2]
        if dev.type == "cuda":
            entry["peak_memory_gib"] = torch.cuda.max_memory_allocated(dev) / 2**30
        if spec.world > 1:  # which path the cross-rank sums took, so far (captures count once)
            entry["all_reduce_paths"] = dict(getattr(side.comm, "paths", {}))
        log(f"rows {rows}: median {entry['median_ms']:.3f} ms, NaN/Inf {nan}")
        result["buckets"][str(rows)] = entry
        _save(out, result)  # a later phase failing must not lose what was measured
        del timer, step
    prow = int(opts.profile_rows)
    if prow:
        result["profile"] = profile(side, prow, bw, leave_one_out=bool(opts.free))
        _save(out, result)
    rrow = int(opts.ref_rows)
    if rrow:
        result["reference_error"] = reference_error(side, rrow)
        _save(out, result)
        result["op_error"] = op_error(side, rrow)
    return result


def _save(out: Path | None, result: dict) -> None:
    if out is not None:
        tmp = out.with_suffix(".partial.json")
        tmp.write_text(json.dumps(result, indent=1, default=str))


def op_error(side, rows: int) -> dict:
    """Every op call of one step: the tree's kernel against the protected reference on the
    same inputs and state (worst relative RMS and max ulp per op, and where)."""
    from .opcheck import ReferenceCheck

    check = ReferenceCheck(side.shapes)
    snap = side.rows_snapshot(rows)
    step = side.step(rows, hook=check)
    side.set_inputs(step, 0)
    step.run()
    side.restore_rows(snap)
    return check.table()


def routing_summary(step, sh) -> dict:
    """Experts this rank touched per MoE layer, and load per expert (max and mean over the
    touched ones), so a workload whose routing collapses is visible."""
    import torch

    ids = step.routing.long()
    e0, n = sh.expert_first, sh.experts
    touched, max_load, mean_load = [], [], []
    for layer_ids in ids:
        loc = layer_ids[(layer_ids >= e0) & (layer_ids < e0 + n)] - e0
        counts = torch.bincount(loc.flatten(), minlength=n) if loc.numel() else torch.zeros(n)
        nz = counts[counts > 0].float()
        touched.append(int((counts > 0).sum()))
        max_load.append(int(counts.max()) if counts.numel() else 0)
        mean_load.append(float(nz.mean()) if nz.numel() else 0.0)
    return {"experts_on_rank": n, "touched_per_layer": touched,
            "touched_mean": sum(touched) / max(1, len(touched)),
            "max_load_per_layer": max_load, "mean_load_per_layer": mean_load}


def profile(side, rows: int, bandwidth, leave_one_out=True) -> dict:
    """Per op row: events around each op in one eager step, roofline floor, and the time saved
    by re-capturing the step without that row."""
    from .profile import Collectives, Omit, OpClock
    from .session import log
    from .timing import Timer

    def routed(around):  # several ranks: the collectives become rows of their own
        return Collectives(side.comm, around) if side.spec.world > 1 else None

    snap = side.rows_snapshot(rows)
    clock = OpClock(side.shapes, side.device)
    step = side.step(rows, hook=clock, comm=routed(clock))
    side.set_inputs(step, 0)
    step.run()  # compile everything first
    side.restore_rows(snap)
    clock.calls.clear()
    step.run()
    table = clock.table()
    side.restore_rows(snap)
    plain = side.step(rows)
    side.set_inputs(plain, 0)
    timer = Timer(plain.run, side.device)
    timer.capture()
    n = 10 if side.device.type == "cuda" else 1
    full = sorted(timer.measure(n))[n // 2]
    del timer
    out = {"rows": rows, "step_ms": full, "ops": {}}
    for row, r in sorted(table.items(), key=lambda kv: -kv[1]["ms"]):
        # a collective has no floor: it moves data between GPUs, not through HBM alone
        floor_ms = r["bytes"] / bandwidth * 1e3 if bandwidth and r["bytes"] else None
        out["ops"][row] = {**r, "floor_ms": floor_ms,
                           "pct_of_floor": (floor_ms / r["ms"] * 100) if floor_ms and r["ms"] else None}
    if leave_one_out:
        # by name, not by this rank's times: every rank must leave the same row out at once,
        # or their collectives pair different calls
        for row in sorted(out["ops"]):
            omit = Omit(row)
            st = side.step(rows, hook=omit, comm=routed(omit))
            side.set_inputs(st, 0)
            st.run()  # every buffer written once by the full step
            omit.active = True
            timer = Timer(st.run, side.device)
            timer.capture()
            without = sorted(timer.measure(n))[n // 2]
            out["ops"][row]["free_ms"] = full - without
            del timer, st
            log(f"profile: without {row}: {without:.3f} ms (full {full:.3f})")
    side.restore_rows(snap)
    return out


def reference_error(side, rows: int) -> dict:
    """The whole step on the tree's kernels vs on the reference ops, from the same state."""
    import torch

    snap = side.rows_snapshot(rows)
    k = side.step(rows, "kernel")
    side.set_inputs(k, 0)
    k.run()
    side.restore_rows(snap)
    r = side.step(rows, "reference")
    side.set_inputs(r, 0)
    r.run()
    side.restore_rows(snap)
    a, b = r.logits.double(), k.logits.double()
    rel = float((a - b).pow(2).mean().sqrt() / a.pow(2).mean().sqrt())
    pa, lb = torch.log_softmax(a, -1), torch.log_softmax(b, -1)
    kl = (pa.exp() * (pa - lb)).sum(-1)
    agree = float((a.argmax(-1) == b.argmax(-1)).double().mean())
    return {"rows": rows, "logits_rel_rms": rel, "kl_max": float(kl.max()),
            "kl_mean": float(kl.mean()), "argmax_agreement": agree,
            "max_abs_diff": float((a - b).abs().max()),
            "finite": bool(torch.isfinite(b).all()) and not math.isnan(rel)}


if __name__ == "__main__":
    sys.exit(main())
