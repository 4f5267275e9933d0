"""The decode step over W processes, decided (``kern step --gpus W [--emulate N]``; the processes
themselves are started, watched and killed by gates/launch/ranks.py). Pure and tested
directly: :func:`layout_name` (which layout W processes compute) and the flags' checks
(:func:`side_ranks`, :func:`base_ranks`), :func:`rank_env`, and one result from W:
:func:`combine` (a bucket's time is the slowest rank's; the ranks must agree byte for byte on
everything replicated), :func:`merge_digests` (the tap's), :func:`merge_replies` (a scorer
side's)."""
from __future__ import annotations

from .stats import worst_ops


WORLDS = (1, 2, 4, 8)


class RanksError(ValueError):
    """A rank count the user asked for cannot run (the user must change the flags)."""


def layout_name(gpus: int, emulate: int | None = None) -> str:
    """The layout ``gpus`` processes compute: ``tp{gpus}`` (the model really split over them),
    or with ``emulate`` N each process's share of the N-rank layout (``tpN``; ``tp8`` is the
    published EP2 x TP4 deployment) while the collectives span the ``gpus`` processes."""
    if gpus not in WORLDS:
        raise RanksError(f"--gpus must be one of {', '.join(map(str, WORLDS))}, got {gpus}")
    n = gpus if emulate is None else emulate
    if n not in WORLDS or n % gpus:
        raise RanksError(f"--emulate must be one of {', '.join(map(str, WORLDS))} and a multiple "
                         f"of --gpus {gpus}, got {emulate}")
    return f"tp{n}"


def side_ranks(gpus: int | None, emulate: int | None, cuda: bool,
               devices: int, model: str | None = None) -> tuple[int, str | None]:
    """(processes, layout) of a side from ``--gpus`` / ``--emulate``: one process on the
    profile's layout (None) when neither is given. ``devices``: GPUs this machine has;
    ``model``: the profile's model, whose dimensions the layout must divide."""
    if gpus is None and emulate is None:
        return 1, None
    world = gpus or 1
    layout = layout_name(world, emulate)
    if cuda and devices < world:
        raise RanksError(f"--gpus {world} needs {world} GPUs, this machine has {devices}")
    if model is not None:
        splits(model, layout)
    return world, layout


def splits(model: str, layout: str) -> None:
    """Refuse, before any process starts, a layout the model's dimensions do not divide into
    (the small CPU model has 4 KDA heads: it splits 1, 2 or 4 ways, not 8)."""
    from kernels.k31.config import ConfigError, Dims, Layout, Shapes

    try:
        Shapes(Dims.named(model), Layout.named(layout))
    except ConfigError as e:
        raise RanksError(f"the {model} model does not split into layout {layout} ({e}); ask for "
                         f"fewer ranks, or run the profile with model: full") from None


def base_ranks(base_gpus: int | None, gpus: int | None, emulate: int | None,
               model: str | None = None) -> tuple[int | None, str | None]:
    """(processes, layout) of the base side from ``kern test --base-gpus M``: M processes with
    the model split over them (``tpM``), or (None, None) when A runs like B."""
    if base_gpus is None:
        return None, None
    if gpus is None:
        raise RanksError("--base-gpus M needs --gpus W: the candidate's processes, the model "
                         "split over them (without --gpus it computes one rank's share only)")
    if emulate is not None:
        raise RanksError("--base-gpus compares the whole model split two ways; with --emulate N "
                         "each process computes only its share of the N-rank layout, which no "
                         "other process count reproduces: drop --emulate")
    layout = layout_name(base_gpus)
    if model is not None:
        splits(model, layout)
    return base_gpus, layout


def rank_env(base: dict, rank: int, world: int, port: int) -> dict:
    """A rank's environment: the side's, plus torchrun's variables."""
    return {**base, "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}


def describe(world: int, layout: str, backend: str) -> dict:
    """What ``world`` processes computing ``layout`` are, for reports and JSON."""
    n = int(layout[2:]) if layout.startswith("tp") else world
    if world == 1:
        note = (f"one process computes rank 0's share of the {n}-rank layout; the collectives "
                f"are the identity") if n > 1 else "one process computes the whole model"
    elif n > world:
        note = (f"each of {world} processes computes its rank's share of the {n}-rank layout; "
                f"the collectives span the {world} processes")
    else:
        note = f"the model split over {world} processes"
    return {"world": world, "layout": layout, "backend": backend, "emulated": n > world,
            "note": note}


def slowest_per_replay(times_by_rank: list[list[float]]) -> list[float]:
    """One time per replay from every rank's: the slowest rank's. The ranks of one replay meet
    in its collectives, so the step is done when its last rank is; taking the maximum per
    replay (then the median over replays) is the TPOT a deployment sees, where the slowest
    rank's own median could pair one rank's fast replays with another's slow ones."""
    n = {len(t) for t in times_by_rank}
    if len(n) != 1:
        raise ValueError(f"ranks: every rank must time the same replays, got counts {sorted(n)}")
    return [max(col) for col in zip(*times_by_rank)]


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def combine(results: list[dict], layout: str, backend: str) -> dict:
    """One ``run`` result from every rank's: rank 0's document, where each bucket's times are
    the slowest rank's per replay (:func:`slowest_per_replay`) and ``median_ms`` their median,
    NaN counts are summed, and ``ranks_agree`` says whether every rank ended with the same bytes
    of everything replicated (residual stream, top values, next tokens) and of the gathered
    logits."""
    world = len(results)
    out = dict(results[0])
    out["ranks"] = describe(world, layout, backend)
    buckets = {}
    for b, e0 in results[0]["buckets"].items():
        entries = [r["buckets"][b] for r in results]
        medians = [e["median_ms"] for e in entries]
        times = slowest_per_replay([e["times_ms"] for e in entries])
        buckets[b] = {**e0, "median_ms": _median(times), "times_ms": times,
                      "slowest_rank": max(range(world), key=lambda r: medians[r]),
                      "rank_medians_ms": medians,
                      "nan_or_inf_logits": sum(e["nan_or_inf_logits"] for e in entries),
                      "ranks_agree": agree(entries, ("replicated_sha", "logits_sha"))}
    out["buckets"] = buckets
    return out


def agree(per_rank: list[dict], keys) -> bool:
    """Whether every rank's ``keys`` hold rank 0's values."""
    return all(r.get(k) == per_rank[0].get(k) for r in per_rank for k in keys)


def disagreements(digests_by_rank: list[dict]) -> list[str]:
    """The keys (rank 0's order) at which some rank's digest is missing or differs from rank
    0's: ``[{"rows:step": sha}, ...]`` one per rank."""
    first = digests_by_rank[0]
    keys = list(first) + [k for d in digests_by_rank[1:] for k in d if k not in first]
    return [k for k in dict.fromkeys(keys)
            if any(d.get(k) != first.get(k) for d in digests_by_rank)]


def merge_digests(results: list[dict], layout: str, backend: str) -> dict:
    """One tap result from every rank's: rank 0's (the accuracy gate judges rank 0's op calls
    and the gathered logits), with ``ranks`` and ``rank_disagreements``: the steps after which
    some rank held other replicated bytes or other gathered logits than rank 0."""
    digests = [r.get("rank_digests") or {} for r in results]
    if not digests[0] and results[0].get("role") in ("record", "replay"):
        # an empty comparison would read as agreement: no digest is a failure to measure
        raise ValueError("ranks: rank 0's tap recorded no per-step digests to compare")
    out = dict(results[0])
    out["ranks"] = describe(len(results), layout, backend)
    out["rank_disagreements"] = disagreements(digests)
    return out


def merge_checks(per_rank: list[dict]) -> dict:
    """The output checks of one timed visit over every rank: counts summed (a failure on any
    rank is a failure), tamper signs listed with their rank."""
    out = dict(per_rank[0])
    for k, v in per_rank[0].items():
        if k == "tampered":
            out[k] = [f"rank {r}: {x}" for r, c in enumerate(per_rank) for x in c.get(k, [])]
        elif k != "replays" and isinstance(v, (int, float)):
            out[k] = sum(c.get(k, 0) for c in per_rank)
    return out


def merge_replies(cmd: str, replies: list[dict]) -> dict:
    """One scorer-side reply from every rank's reply to ``cmd``: timed replays take the
    slowest rank per replay (``rank_times`` keeps each rank's), checks add up, ``verify`` holds
    only if it holds on every rank, ``ranks_agree`` compares the replicated bytes each rank
    ended with; anything else is rank 0's (roofline cost, bandwidth: rank 0's share)."""
    out = dict(replies[0])
    if cmd == "time":
        out["times"] = slowest_per_replay([r["times"] for r in replies])
        out["rank_times"] = [r["times"] for r in replies]
        out["checks"] = merge_checks([r["checks"] for r in replies])
        out["replicated_sha"] = [r.get("replicated_sha") for r in replies]
        out["ranks_agree"] = agree(replies, ("replicated_sha",))
    elif cmd == "verify":
        out["equal"] = all(r["equal"] for r in replies)
        out["max_abs_diff"] = max(r["max_abs_diff"] for r in replies)
        out["nan"] = sum(r["nan"] for r in replies)
        if all("ops" in r for r in replies):
            out["ops"] = worst_ops([r["ops"] for r in replies])
    elif cmd == "prepare":
        for k in ("build_s", "capture_s"):
            out[k] = max(r[k] for r in replies)
    return out
