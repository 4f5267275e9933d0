"""``kern bench [REV] [--vs BASE]``: the scorer.

Shell: check out the revisions, start one side process per revision (and, on a GPU when
both sides' protected model code agrees, lease the model from a store process that builds the
weights once and shares them over CUDA IPC with a decode state built for this run: the
caller's ``stores`` when it holds one across runs, gates/launch/store.py), drive interleaved
rounds A B B A, collect replay times and their output checks. Core: ``stats`` turns the
samples into medians, the score, a bootstrap interval, the A-vs-A noise band, a
classification and the guard.
"""
from __future__ import annotations

import hashlib
import random
import time
from dataclasses import dataclass
from pathlib import Path

from .events import JudgingTimedOutputs, SideReady, StoreReady, VisitDone
from .launch import checkout, compiled, disk, sandbox
from .launch.process import Interactive, SideError
from .launch.ranks import RankGroup, RanksDisagree
from .launch.store import ModelStore, ModelStores, store_digest
from .protocol import (Bandwidth, Baseline, JudgeOutputs, Peers, Prepare, RooflineCost,
                       SaveRecord, StoreLease, Time, Verify)
from .requests import BenchRequest, Placement
from .results import BenchResult, LastWords
from .rules import ranks, stats, verdict
from .rules.phases import Span, rest, side_spans
from .rules.store import NONE, REPLACE, REUSE, Need, Plan, StoreKey
from .settings import ScorerSettings, Thresholds
from .spec import side_spec

# per request (one bucket): the reference step is slow, and compiling it slower still; a
# baseline that runs past its kern.yaml limit (bench.<kind>_baseline_timeout_s) is reported as
# stopped, never a failed bench
MODEL_FILES = ("config.py", "formats.py", "synthetic.py", "weights.py", "state.py", "model.py",
               "workload/__init__.py")


def model_digest(tree: Path) -> str:
    """Hash of the protected code that lays out weights, caches and the workload: two trees
    with the same digest build the same model and may share one copy of it."""
    h = hashlib.sha256()
    for name in MODEL_FILES:
        p = tree / "kernels" / "k31" / name
        h.update(name.encode())
        h.update(p.read_bytes() if p.exists() else b"missing")
    return h.hexdigest()[:16]


def draw_secrets(rng) -> dict:
    """What each run of the scorer draws for itself and tells the sides only when it runs
    (never in kern.yaml or a spec file): the seed of the state sketches' projections
    (``gates/side/timed.py``) and the seed of the reference check's sample of calls."""
    return {"sketch_seed": rng.randrange(1, 2**31), "sample_seed": rng.randrange(1, 2**31)}


def reference_sample(calls: dict, per_op: int, rng) -> dict:
    """Pure given ``rng``: for each op with more than ``per_op`` calls per step, the indices of
    ``per_op`` of them (sorted); ops with fewer are checked whole (not listed)."""
    return {op: sorted(rng.sample(range(n), per_op)) for op, n in sorted(calls.items())
            if n > per_op}


def processes(cuda: bool, same_model: bool, world: int, forced: bool | None,
              sides: int) -> tuple[bool, bool]:
    """(shared, alternate): whether one store process builds the model and shares it over CUDA
    IPC, and whether the sides' processes alternate, one side alive at a time.

    Sharing needs one GPU and two sides that build the same model; a rank group builds one
    share per rank instead (a store serves one process). Sides that cannot share would each
    need most of the GPU, and two rank groups alive at once would double every GPU's memory and
    (on the CPU) the processes per core: they alternate, unless the user says otherwise."""
    shared = cuda and same_model and world == 1
    alternate = forced if forced is not None else ((cuda and not shared) or world > 1)
    return shared, bool(alternate) and sides > 1


def pattern(rounds: int) -> list[str]:
    """A B B A per round: each side equally often first, so drift cancels."""
    return ["A", "B", "B", "A"] * rounds


FIRST_SET = 2  # the first input set a timed replay runs (prepare compiled on set 1)


def run_bench(req: BenchRequest, progress=None, stores: ModelStores | None = None) -> BenchResult:
    """The scorer on ``req``: its outcome and measurements typed, the full report (every
    sample, check and timing) as ``.report``. ``progress`` is called with each
    ``gates.events.ScorerEvent`` as it happens (None: none is told; harness/ shows them).
    ``stores``: the model store the caller holds across its scorer runs (None: this run starts
    its own where it shares the model, and ends it)."""
    # main's kernels compiled from main alone (the accuracy gate's, when it ran first);
    # without a base the revision scored is main here
    main = compiled.prepare(req.repo, req.base or req.rev, req.runs_dir, req.target, req.machine,
                            req.cuda, req.scorer.timeout_s, req.placement, layout=req.layout, world=req.world)
    return _run_bench(req, req.placement.seeded(main.path), progress, main, stores)


def store_key(trees: dict, spec: dict, place: Placement) -> StoreKey:
    """The key of the store a run on ``trees`` (``{"A": base, "B": rev}``) with ``spec`` at
    ``place`` leases: main's tree builds it (the base; the revision where there is none)."""
    first = "A" if "A" in trees else "B"
    return StoreKey(store_digest(trees[first]), spec["model"], spec["layout"], spec["seed"],
                    spec["weight_sets"], spec.get("state_dtype"), place.gpus, place.sandbox)


def new_store(key: StoreKey, tree: Path, spec: dict, runs_dir: Path, place: Placement,
                timeout_s: float) -> ModelStore:
    """A store on main's ``tree`` in a run folder of its own (``runs/store/<stamp>-<digest>``)
    and a sandbox group of its own, which every side that leases it joins in its own root."""
    folder = runs_dir / "store" / f"{time.strftime('%Y%m%d-%H%M%S')}-{key.digest}"
    box = sandbox.side_group("store", tree, folder / "store.json", peers=False)
    return ModelStore(key, tree, spec, folder, place, box, timeout_s)


def _run_bench(req: BenchRequest, place: Placement, progress=None,
               main: compiled.CompiledCache | None = None,
               stores: ModelStores | None = None) -> BenchResult:
    progress = progress or (lambda event: None)
    t0 = time.monotonic()
    m = req.machine
    rounds = req.rounds or m.rounds  # rounds and replays: the machine profile's (kern.yaml)
    replays = req.replays or m.replays
    buckets, weights = list(m.buckets), list(m.weights)
    timeout = req.scorer.timeout_s
    revs = {"B": checkout.resolve(req.repo, req.rev)}
    if req.base:
        revs["A"] = checkout.resolve(req.repo, req.base)
    trees = {k: checkout.checkout(req.repo, sha, req.runs_dir) for k, sha in revs.items()}
    per_side = pattern(rounds).count("A") if req.base else rounds
    spec = side_spec(req.target, m, rows=buckets, steps=per_side * replays + 8 * len(buckets) + 16,
                     layout=req.layout or m.layout, world=req.world)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    work = req.runs_dir / "bench" / f"{stamp}-{revs['B'][:12] if revs['B'] != checkout.WORKTREE else 'worktree'}"
    digests = {k: model_digest(t) for k, t in trees.items()}
    shared, alternate = processes(req.cuda, len(set(digests.values())) == 1, req.world,
                                  req.alternate, len(trees))
    own_stores = stores is None
    stores = ModelStores() if own_stores else stores
    plan = stores.plan(Need(store_key(trees, spec, place), req.cuda, req.world,
                            len(set(digests.values())) == 1)) if shared else Plan(NONE, "")
    order = pattern(rounds) if req.base else ["B"] * rounds
    last_visit = {k: max(i for i, x in enumerate(order) if x == k) for k in set(order)}
    extra_key = "A" if "A" in trees else "B"  # main's tree when there is one
    store, sides = None, {}
    opened = {k: 0 for k in trees}
    secrets = draw_secrets(random.SystemRandom())
    # what the sides keep of each timed replay: digests where the gate claimed identity
    claim = verdict.CLAIM_KIND.get((req.accuracy or {}).get("verdict"))
    result = {"revs": revs, "digests": digests, "shared_model": shared, "spec": spec,
              "store": {"plan": plan.action, "why": plan.reason} if shared else None,
              "alternating": alternate, "rounds": rounds, "replays": replays, "buckets": buckets,
              "weights": weights, "verify": {}, "prepare": {}, "secrets": secrets,
              "accuracy_claim": (req.accuracy or {}).get("verdict"), "timed_files": {},
              "hidden": req.hidden.to_dict() if req.hidden else None,
              "cpu_note": None if req.cuda else "CPU interpreter: times are mechanics only, never GPU scores",
              "compiled": main.to_dict() if main else None}
    if req.world > 1:
        result["ranks"] = ranks.describe(req.world, spec["layout"], "nccl" if req.cuda else "gloo")
    attach_spec = dict(spec)

    now = {"side": None}  # the side being asked, for errors that name who acts
    # where the run's time goes (gates/rules/phases.py): each process's start and own phases, and
    # the coordinator's requests by kind
    spans: list = []
    spent = {"rounds": 0.0, "save": 0.0, "verify": 0.0, "extras": 0.0, "judge": 0.0}

    def open_side(k: str) -> Interactive:
        now["side"] = k
        if k in sides:
            return sides[k]
        if alternate:
            for other in list(sides):
                sides.pop(other).close()
        label = f"side{k}" + (f"-{opened[k]}" if opened[k] else "")
        part = k + (f"-{opened[k] + 1}" if opened[k] else "")
        opened[k] += 1
        t_open = time.monotonic()
        # the lease's model for this process: its own handles (torch counts one consumer per
        # handle sent), copied into its run folder, loaded only as the bytes the store wrote
        handles = stores.store.handles(timeout, work / f"{label}.attach.ipc") if leased else \
            {"ready": None, "sha256": None}
        spec_k = {**attach_spec, "attach": handles["ready"]} if handles["ready"] else attach_spec
        s = sides[k] = RankGroup("bench", trees[k], spec_k, work, label, req.world, place) \
            if req.world > 1 else Interactive("bench", trees[k], spec_k, work, label, place, group=box)
        # the hidden inputs only once the side has imported the candidate's tree
        s.wait_imported(timeout)
        r = s.request(Prepare(hidden=result["hidden"], sketch_seed=secrets["sketch_seed"], claim=claim,
                              attach_sha256=handles["sha256"]), timeout)
        result["prepare"].setdefault(k, []).append(
            {x: r.get(x) for x in ("capture_s", "build_s", "all_reduce_paths")})
        result["environment"] = r["environment"]
        result["workload"] = r["workload"]
        spans.extend(side_spans("scorer", part, time.monotonic() - t_open, r.get("phases")))
        progress(SideReady(k, r["build_s"], r["capture_s"], opened[k] if alternate else None))
        return s

    def start_store() -> ModelStore:
        # the store and the sides attached to it (CUDA IPC) share one sandbox's namespaces
        return new_store(plan_key, trees["A" if "A" in trees else "B"], spec, req.runs_dir,
                            place, timeout)

    plan_key = store_key(trees, spec, place)
    box = None
    leased = False
    try:
        if shared:
            now["side"] = None
            t_store = time.monotonic()
            store = stores.open(plan, start_store)
            box = store.group
            lease = store.lease(StoreLease(spec["context"], list(spec["rows"]), spec["steps"]), timeout)
            if not lease["weights_intact"]:  # changed since their build: a new store, once
                store = stores.open(Plan(REPLACE, "the weights held changed"), start_store)
                box = store.group
                lease = store.lease(StoreLease(spec["context"], list(spec["rows"]), spec["steps"]), timeout)
            leased = bool(lease["weights_intact"])
            if not leased:
                raise SideError("error", "store: the weights of a store just built differ from "
                                "their own build's digest (expected equal): the environment's "
                                "GPU memory or the store's code", store.log_path)
            # the store's spans: its weights' build (a store started for this run) and the
            # lease's state, as 'build'; the rest of the wait (its start, the digests) 'start'
            wall = time.monotonic() - t_store
            ph = {"driver_s": wall} if plan.action == REUSE else dict(store.ready.get("phases") or {})
            ph["build_s"] = (ph.get("build_s") or 0.0) + lease["state_s"]
            spans.extend(side_spans("scorer", "store", wall, ph))
            result["store"].update(lease=store.leases, started=stores.started, state_s=lease["state_s"],
                                   build_s=store.ready.get("build_s"))
            progress(StoreReady(store.ready["build_s"], plan.action == REUSE, lease["state_s"]))
        if not alternate:
            for k in sorted(trees):
                open_side(k)
        if req.cuda:  # the read ceiling (floors divide by it), measured on this card at the start
            side = open_side(order[0])
            t_x = time.monotonic()
            r = side.request(Bandwidth(), timeout)
            spent["extras"] += time.monotonic() - t_x
            result["bandwidth"] = {k: r.get(k) for k in ("Bps", "torch_sum_Bps", "best", "shapes")}
        samples = {k: {b: [] for b in buckets} for k in trees}
        rank_samples = {k: {b: [[] for _ in range(req.world)] for b in buckets} for k in trees}
        blocks = {k: [] for k in trees}  # per visit: {bucket: [ms]}
        checks = {k: [] for k in trees}
        for i, k in enumerate(order):
            side = open_side(k)
            visit = {}
            for b in buckets:
                t_req = time.monotonic()  # this process's clock: the candidate cannot reach it
                # input sets 2, 3, ... per side and bucket across its visits (set 1 compiled
                # and captured the step): both sides' n-th replay runs set n
                first = FIRST_SET + len(samples[k][b])
                r = side.request(Time(bucket=b, n=replays, first=first), timeout)
                wall_ms = (time.monotonic() - t_req) * 1e3
                spent["rounds"] += wall_ms / 1e3
                samples[k][b] += r["times"]
                for rank, times in enumerate(r.get("rank_times") or [r["times"]]):
                    rank_samples[k][b][rank] += times
                visit[b] = r["times"]
                checks[k].append({"bucket": b, **r["checks"], "wall_ms": wall_ms,
                                  "sum_ms": sum(r["times"]), "untimed_ms": r.get("untimed_ms")})
            blocks[k].append(visit)
            # the visit's timed outputs, before its process may go (sides that alternate)
            t_s = time.monotonic()
            if k == "A" and not alternate and req.base:  # main's process lives to compare them
                side.request(SaveRecord(path=None), timeout)
                result["timed_files"]["A"] = "memory"
            else:
                path = work / f"timed-{k}-{i:02d}.pt"
                side.request(SaveRecord(path=str(path)), timeout)
                result["timed_files"].setdefault(k, []).append(str(path))
            result.setdefault("timed_save_s", []).append(time.monotonic() - t_s)
            spent["save"] += time.monotonic() - t_s
            progress(VisitDone(i // 4 + 1 if req.base else i + 1, k))
            if i == last_visit[k]:  # the side's untimed work, while its process still lives
                t_v = time.monotonic()
                result["verify"][k] = _verify(side, k, buckets, timeout,
                                              req.scorer.reference_calls_per_op,
                                              random.Random(secrets["sample_seed"]))
                verify_s = time.monotonic() - t_v
                spent["verify"] += verify_s
                result.setdefault("verify_s", {})[k] = verify_s  # main's vs the candidate's
                if k == extra_key:
                    t_x = time.monotonic()
                    _extras(req, side, buckets, timeout, result)
                    spent["extras"] += time.monotonic() - t_x
                if k == "A" and "B" in result["timed_files"]:
                    # main's process compares (the candidate's never sees main's outputs); B's
                    # last visit came before A's (A B B A)
                    progress(JudgingTimedOutputs())
                    t_j = time.monotonic()
                    gate_rows = (req.accuracy or {}).get("rows")
                    # main's band at this context (a few replays per bucket again, the touched
                    # ops on the reference), after every timed round: verdict.judge_band
                    band = {"ops": band_ops(req.accuracy), "kl_pass": req.thresholds.kl_pass} \
                        if needs_timed_band(req.accuracy, gate_rows) else None
                    r = side.request(
                        JudgeOutputs(mine=result["timed_files"]["A"], theirs=result["timed_files"]["B"],
                                     near_tie_factor=req.thresholds.near_tie_factor,
                                     sample={"rows": gate_rows, "seed": secrets["sample_seed"]}
                                     if gate_rows else None, band=band), timeout)
                    result["timed"] = r["timed"]
                    if band is not None:
                        result["timed_band"], result["timed_band_s"] = r["band"], r["band_s"]
                    result["timed_judge_s"] = time.monotonic() - t_j - (r.get("band_s") or 0.0)
                    spent["judge"] += time.monotonic() - t_j  # main's band at this context with it
        result["outcome"] = "ok"
    except SideError as e:
        tail = _log_tail(e.log_path)
        kind, tail = disk.classified(e.kind, f"{tail}\n{e}", work)  # its timed outputs' folder
        result["outcome"] = kind
        result["error"] = str(e)
        result["log"] = str(e.log_path)
        words = LastWords.of(f"side {now['side']}" if now["side"] else "store", kind, tail, e.log_path)
        result["last_words"] = words.to_dict() if words else None
        if isinstance(e, RanksDisagree):
            side = now["side"]
            result["error"] += (f"; {'the candidate' if side == 'B' else 'the base'} "
                                f"{revs[side][:12]} (side {side}) is not deterministic across ranks: "
                                f"its collectives or kernels must give every rank the same bytes")
    except BaseException:  # Ctrl-C or SIGTERM: the sides end now, not after their request
        for s in sides.values():
            s.kill()
        stores.close()  # and the store: no lease is released, no process outlives the run
        raise
    finally:
        for s in sides.values():
            s.close()
        for f in work.glob("*.attach.ipc"):  # the sides' copies of the lease's handles
            f.unlink(missing_ok=True)
        rel = stores.released(tuple(sorted(trees)), timeout) if leased else None
        if rel is not None:  # the weights verified again: a side that wrote them is named (analyse)
            result["store"].update(kept=rel.keep, released=rel.reason, weights_check=rel.failed_check,
                                   shm_swept=stores.last_sweep.record() if stores.last_sweep else None,
                                   **{k: (stores.last_release or {}).get(k)
                                      for k in ("freed", "held_bytes", "caches_restored")})
        if own_stores:
            stores.close()
        _remove_timed_files(result["timed_files"], req.world)
    result["processes"] = opened
    result["wall_s"] = time.monotonic() - t0
    spans += [Span("scorer", "coordinator", k, v) for k, v in spent.items() if v > 0]
    result["phases"] = [x.to_dict() for x in spans + rest("scorer", result["wall_s"], spans)]
    result["judged_cost"] = judged_cost(result, checks if result.get("outcome") == "ok" else {})
    if result["outcome"] == "ok":
        result["samples"] = samples
        result["checks"] = checks
        if req.world > 1:
            result["rank_samples"] = rank_samples
            result["rank_medians"] = {k: {b: [stats.median(t) for t in per] for b, per in sb.items()}
                                      for k, sb in rank_samples.items()}
        result["analysis"] = analyse(samples, blocks, checks, result, req.scorer, buckets, weights,
                                     judging=Judging(req.accuracy, req.thresholds))
    result["work_dir"] = str(work)
    return BenchResult.of(result)


def needs_timed_band(accuracy: dict | None, gate_rows: int | None) -> bool:
    """Pure: whether main's side measures its band at the scorer's context: the accuracy gate
    passed the candidate without an identical claim (whose timed outputs must then be equal,
    and are kept as digests only) and said on how many rows (the band's replays hold as many)."""
    claim = (accuracy or {}).get("verdict")
    return bool(claim) and claim.startswith("PASS") and claim not in verdict.CLAIM_KIND \
        and bool(gate_rows)


def band_ops(accuracy: dict) -> list | None:
    """The ops main's band pass puts on the reference: those the change touched (None: every
    op, where the accuracy gate could not tell, as its own band does)."""
    ops = accuracy.get("touched_ops")
    return sorted(ops) if isinstance(ops, (list, tuple)) else None


def judged_cost(result: dict, checks: dict) -> dict:
    """Pure: what judging the timed outputs cost in this run, in seconds of its wall time: the
    untimed device work between replays (resetting the state, keeping the outputs), writing
    each visit's outputs, main's side comparing them and measuring its band (when it did)."""
    spans = [c.get("untimed_ms") or {} for cs in checks.values() for c in cs]
    reset = sum(x.get("reset", 0.0) for x in spans) / 1e3
    record = sum(x.get("record", 0.0) for x in spans) / 1e3
    save = sum(result.get("timed_save_s") or [])
    judge = result.get("timed_judge_s") or 0.0
    band = result.get("timed_band_s") or 0.0
    total = reset + record + save + judge + band
    wall = result.get("wall_s") or 0.0
    return {"reset_s": reset, "record_s": record, "save_s": save, "judge_s": judge,
            "band_s": band, "total_s": total, "share_of_wall": total / wall if wall else None}


def _log_tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-4000:]
    except OSError:
        return ""


def _verify(side, k: str, buckets: list, timeout: float, per_op: int, rng) -> dict:
    """Graph against eager at every bucket; for the candidate also its op calls against the
    protected reference at every bucket the scorer times: every call at the first bucket, and
    at the others ``per_op`` calls of each op drawn per run (the reference at 256 rows costs
    more than the whole A/B otherwise). Main's ops were judged when they merged."""
    out = {}
    sample = None
    for b in buckets:
        drawn = reference_sample(sample, per_op, rng) if k == "B" and sample is not None else None
        out[b] = side.request(Verify(bucket=b, ops=k == "B", sample=drawn), timeout)
        if k == "B" and sample is None:
            sample = {op: o["calls"] for op, o in (out[b].get("ops") or {}).items()}
    return out


def _remove_timed_files(files: dict, world: int) -> None:
    """The replays' outputs are GBs at full size: their statistics stay in the result."""
    for paths in files.values():
        for p in ([] if paths == "memory" else paths):
            for q in ([Path(p)] if world == 1 else [Path(f"{p}.rank{r}") for r in range(world)]):
                q.unlink(missing_ok=True)


def _extras(req: BenchRequest, side: Interactive, buckets, timeout, result) -> None:
    """Roofline cost, peers and baselines, on main's side (untimed by the A/B)."""
    if req.cuda:
        result["cost"] = {b: side.request(RooflineCost(bucket=b), timeout) for b in buckets}
    try:
        if req.peers and req.cuda:
            result["peers"] = side.request(Peers(), timeout)
        base_buckets = [buckets[0], buckets[len(buckets) // 2]] if len(buckets) > 2 else buckets
        for kind in req.baselines:  # the reference step is slow: the smallest and middle buckets
            per = result.setdefault("baselines", {}).setdefault(kind, {})
            for b in base_buckets:
                per[b] = side.request(Baseline(kind=kind, bucket=b, n=3 if req.cuda else 1),
                                      req.scorer.baseline_timeout_s(kind))
    except SideError as e:  # a baseline or peer that fails or hangs is a result, not a failed bench
        result["extras_error"] = str(e)


@dataclass(frozen=True)
class Judging:
    """The bar for the timed replays' outputs (``verdict.judge_timed``): the accuracy gate's
    verdict on this commit and the evidence it weighed (None: scored alone), and the
    thresholds of kern.yaml's test section."""
    accuracy: dict | None
    thresholds: Thresholds


def analyse(samples, blocks, checks, result, cfg: ScorerSettings, buckets, weights,
            judging: Judging | None = None) -> dict:
    """Pure: medians, score, checks, and (with two sides) the A/B decision inputs, on the
    scorer's settings ``cfg``. ``judging``: the bar for the timed replays' outputs; without it
    they are not judged."""
    out = {"sides": {}}
    cost, bw = result.get("cost") or {}, (result.get("bandwidth") or {}).get("Bps")
    for k, sm in samples.items():
        summ = {b: stats.bucket_summary(sm[b]) for b in buckets}
        bad = stats.failed_checks(checks[k])
        ops = [v["ops"] for v in result.get("verify", {}).get(k, {}).values() if "ops" in v]
        far = stats.far_from_reference(stats.worst_ops(ops), cfg.max_op_rel_rms) if ops else None
        if far:
            bad.append(far)
        floor = stats.below_floor({b: summ[b]["median"] for b in buckets},
                                  {b: cost[b]["bytes"] for b in buckets if b in cost}, bw)
        if floor:
            bad.append(floor)
        written = (result.get("store") or {}).get("weights_check")
        if k == "B" and written:  # the shared weights changed while this side was attached
            bad.append(written)
        if k == "B" and judging is not None and result.get("timed"):
            band = result.get("timed_band")
            alpha = cfg.timed_band_alpha if band is not None else None
            timed = verdict.judge_timed(result["timed"], judging.accuracy, judging.thresholds,
                                        cfg.state_sketch_rel, band=band, alpha=alpha,
                                        iters=cfg.bootstrap)
            if timed:
                bad.append(timed)
            if band is not None:  # the band rule's own outcome, whichever rule decided
                tb = verdict.TimedBand.of(band)
                out["timed_band"] = verdict.band_summary(tb, verdict.judge_band(
                    tb, alpha, judging.thresholds.band_factor, judging.thresholds.kl_pass,
                    cfg.bootstrap))
        ver = result.get("verify", {}).get(k, {})
        visit_scores = [stats.score({b: stats.median(v[b]) for b in buckets}, buckets, weights)
                        for v in blocks[k]]
        out["sides"][k] = {
            "buckets": summ, "score": stats.score({b: summ[b]["median"] for b in buckets}, buckets, weights),
            "visit_scores": visit_scores, "score_cv": stats.cv(visit_scores) if len(visit_scores) > 1 else None,
            "failed_checks": bad, "graph_matches_eager": all(v.get("equal") for v in ver.values()),
        }
    if "A" in samples:
        a, b = samples["A"], samples["B"]
        # the scorer's contract: a side's n-th replay of a bucket ran input set n (see stats)
        d = stats.paired_delta(a, b, buckets, weights, iters=cfg.bootstrap, seed=0)
        visits = {bk: [j for j, v in enumerate(blocks["A"]) for _ in v[bk]] for bk in buckets}
        band = stats.paired_noise_band(a, b, visits, buckets, weights, floor_pct=cfg.noise_pct,
                                       iters=cfg.bootstrap, seed=1)
        cls = stats.classify(d["low"], d["high"], band)
        g = stats.guard(a, b, buckets, cfg.guard_pct, d["buckets"])
        a_score = out["sides"]["A"]["score"]
        out["ab"] = {"delta": d, "band": band, "classification": cls, "guard_ok": g.ok,
                     "guard": g.text(), "delta_pct": d["delta"] / a_score * 100, "paired": True}
        # no time may pass that B's clock did not see (beyond main's untimed work)
        hidden = stats.hidden_time(checks["A"], checks["B"], cfg.max_hidden_pct)
        if hidden:
            out["sides"]["B"]["failed_checks"].append(hidden)
        l2 = stats.persisting_l2(checks["A"], checks["B"])
        if l2:
            out["sides"]["B"]["failed_checks"].append(l2)
    return out
