"""The scorer's judged outputs: what every timed replay produced, kept and compared with main's.

Runs inside a bench side's process (``gates/side/replays.py``); the decision on what it measured
is ``verdict.judge_timed``, in the loop's process.

Why: a candidate can compute honestly while the accuracy gate watches and skip work in the
scorer's timed replays (a signal that differs between the two always exists: what a buffer
holds before a call, the context length, how often a launcher ran, ...). Closing the signals
one by one never ends; judging the outputs of the very replays that were timed does.

Contract (the coordinator, ``gates/scorer.py``, relies on it):

* **Every timed replay starts from a state of its own input set, and no input repeats.**
  Before it, untimed, the recurrent state of its rows (KDA state and conv window) is set to
  their seeded initial values scaled per row by the set's factor, and the set's tokens and
  positions are written (``Workload.timed_inputs``: a row never decodes a token twice, its
  position advances with the set). So no (row, token, position, state) comes twice within a
  judgment, as in real decode: a cache of one row's outputs keyed on that row's inputs never
  hits (issue 35). And a replay's outputs are a function of (tree, bucket, input set) alone, so
  A's n-th replay and B's n-th replay (the same input set, see ``gates/rules/stats.py``) are
  comparable one step from one state — as the accuracy gate's own first step is. Without the
  reset they would not be: the two sides share one model over CUDA IPC and run their visits
  interleaved, so B's n-th replay would start from whatever A's and B's earlier replays left.
  Likewise the MLA caches: a replay writes its own token's slot at its position (and attention
  reads it), and later sets sit at higher positions, whose context holds that slot; so the
  slots a replay wrote are put back to their prefilled values after it, untimed
  (:class:`WrittenSlots`), and every replay reads the prefilled context alone.
* **After each timed replay**, untimed and on the device: the logits, top values and next
  tokens are copied; the recurrent rows the replay wrote are digested (raw bytes and values,
  ``fingerprint.digest_on_device``) and sketched: per layer and row, two projections on random
  weights drawn from the run's hidden ``sketch_seed``, so a state written only in part or
  not at all shows against main's although the candidate's outputs differ by rounding.
* **What is kept depends on what the accuracy gate claimed** (the coordinator says it in
  ``prepare``): for ``bit``/``value`` (an identical claim, which every timed replay must then
  meet exactly) a digest per logits row (raw or value) with the top values, next tokens and the
  state's digests; otherwise the full logits rows (the accuracy rule needs them), the state's
  raw digests and its sketches.
* ``save(path)`` writes the replays kept since the last save (one file per visit; a side in
  alternating processes keeps nothing across them), or with no path keeps them in the process
  (main's side when its process lives through the run); ``compare(mine, theirs)`` pairs the
  two sides' replays bucket by bucket and returns plain statistics (JSON): for each bucket the
  first replay whose bytes or values differ, the worst state sketch distance, and
  ``logits.logit_stats`` of the logits (argmax agreement, A's margin, KL(A||B), max |delta|)
  over every row and over a sample of rows as large as the accuracy gate's own evidence, drawn
  per run (the gate's rule and band were measured on that many rows; over 30x more rows the maxima of an honest change grow: H200, 2026-12-01). Main's side
  runs it: the candidate's process never sees main's outputs.
* **Main's band at the scorer's context** (``band_totals``; only without an identical claim):
  main's side runs a few timed replays per bucket again (``band_replays``: half where the
  candidate is furthest from main, half drawn), eagerly, with the touched ops on the protected
  reference, and measures main and the candidate against that, per request
  (``verdict.judge_band`` decides). The candidate's process never sees the reference's outputs.
"""
from __future__ import annotations

from pathlib import Path

import torch

from .fingerprint import _mix, digest_on_device, value_view

SKETCHES = 2  # random projections per row and layer
CLAIMS = ("bit", "value", None)  # an identical claim of the accuracy gate, or none
_M = 0xFFFFFFFF


def row_digests(t: torch.Tensor) -> torch.Tensor:
    """Per row of a 2-D tensor, a position-keyed sum of its mixed 32-bit words ([rows, 2] int64,
    on ``t``'s device, no host sync): equal rows give equal digests; a changed word changes
    them with overwhelming probability."""
    rows = t.shape[0]
    w = t.contiguous().view(torch.int32).reshape(rows, -1).to(torch.int64) & _M
    idx = torch.arange(w.shape[1], device=t.device, dtype=torch.int64)
    a = _mix(w ^ _mix(idx & _M))
    b = _mix(a ^ 0x5BD1E995 ^ (idx >> 3))
    return torch.stack([a.sum(1), b.sum(1)], dim=1) & 0x7FFFFFFFFFFF


class TimedRecord:
    """The kept outputs of one side's timed replays (``bucket -> list of replays``)."""

    def __init__(self, side, sketch_seed: int, claim: str | None = None):
        if claim not in CLAIMS:
            raise ValueError(f"timed record: claim must be one of {CLAIMS}, got {claim!r} (a bench bug)")
        self.side, self.claim = side, claim
        self.pending: dict = {}
        self.kept: list = []  # visits kept in this process (save without a path)
        self.seed = int(sketch_seed)
        self._weights: dict = {}
        self._initial: list | None = None

    def _projection(self, width: int, dtype: torch.dtype) -> torch.Tensor:
        key = (width, dtype)
        if key not in self._weights:
            dev = self.side.device
            g = torch.Generator(device=dev)
            g.manual_seed(self.seed * 1000003 + width)
            self._weights[key] = torch.randn(width, SKETCHES, generator=g, device=dev).to(dtype)
        return self._weights[key]

    def recurrent(self, rows: int) -> list[torch.Tensor]:
        """The recurrent state of the first ``rows`` requests, layer by layer (the tensors the
        step writes in place), in one fixed order."""
        st = self.side.model.state
        out = []
        for name in ("kda_state", "conv_window"):
            for _, t in sorted(getattr(st, name).items()):
                out.append(t[:rows])
        return out

    def snapshot_initial(self, rows: int) -> None:
        """Keep a copy of the seeded initial recurrent state of ``rows`` requests (refilled
        first: a side sharing the model may find it moved by the other side's steps)."""
        from kernels.k31.state import refill_recurrent

        refill_recurrent(self.side.model.state, self.side.shapes, rows, self.side.spec.seed)
        self._initial = [t.clone() for t in self.recurrent(rows)]

    def reset(self, rows: int, scale: torch.Tensor) -> None:
        """The first ``rows`` requests' recurrent state set to its seeded initial values scaled
        per request by ``scale`` (``[rows]``, the input set's: ``Side.set_timed_inputs``), from
        the snapshot, on the device (no host work)."""
        for t, init in zip(self.recurrent(rows), self._initial):
            factor = scale.to(t.dtype).reshape(rows, *([1] * (t.dim() - 1)))
            torch.mul(init[:rows], factor, out=t)

    def keep(self, bucket: int, input_set: int, step) -> None:
        """Record what the replay that just ran on input set ``input_set`` produced."""
        tensors = self.recurrent(bucket)
        rep = {"set": input_set, "top_val": step.top_val.clone(), "next_token": step.next_token.clone()}
        if self.claim == "value":
            rep["logits_rows"] = row_digests(value_view(step.logits))
            rep["state"] = torch.stack([digest_on_device(value_view(t)) for t in tensors])
        elif self.claim == "bit":
            rep["logits_rows"] = row_digests(step.logits)
            rep["state"] = torch.stack([digest_on_device(t) for t in tensors])
        else:
            rep["logits"] = step.logits.clone()
            rep["state"] = torch.stack([digest_on_device(t) for t in tensors])
            rep["sketch"] = torch.stack([(t.reshape(t.shape[0], -1)
                                          @ self._projection(t[0].numel(), t.dtype)).float()
                                         for t in tensors])
        self.pending.setdefault(bucket, []).append(rep)

    def save(self, path: Path | None) -> dict:
        """Write what was kept since the last save to ``path`` (CPU tensors), or keep it in
        this process when ``path`` is None; either way start afresh."""
        data = {b: stacked(reps) for b, reps in self.pending.items()}
        self.pending = {}
        if path is None:
            self.kept.append(data)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            torch.save({b: {k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in d.items()}
                        for b, d in data.items()}, path)
        return {"buckets": {str(b): len(v["set"]) for b, v in data.items()}, "claim": self.claim}


class WrittenSlots:
    """The MLA cache slots a step at ``pos`` writes (each row's new token, in every MLA
    layer's latent and indexer caches and their scales), copied before the step runs;
    :meth:`put_back` restores them after it, on the device (no host sync: a row whose token
    another rank holds saves and restores a slot nobody writes)."""

    def __init__(self, state, sh, pos: torch.Tensor):
        from kernels.k31.reference import cache_slot

        _, page, off = cache_slot(sh, pos, state.block_table)
        self.slots = page * sh.dims.page_size + off
        self.saved = []
        for name in ("kv_cache", "kv_scale", "idx_cache", "idx_scale"):
            for _, t in sorted(getattr(state, name).items()):
                flat = t.view(torch.uint8).view(t.shape[0] * t.shape[1], -1)  # a slot's bytes a row
                self.saved.append((flat, flat.index_select(0, self.slots)))

    def put_back(self) -> None:
        for flat, saved in self.saved:
            flat.index_copy_(0, self.slots, saved)


def stacked(reps: list[dict]) -> dict:
    out = {"set": [r["set"] for r in reps]}
    for k in reps[0]:
        if k != "set":
            out[k] = torch.stack([r[k] for r in reps])
    return out


def joined(visits: list[dict]) -> dict:
    """Visits of one side, in order -> ``bucket -> {key: tensor over all replays}``."""
    parts: dict = {}
    for v in visits:
        for b, d in v.items():
            parts.setdefault(int(b), []).append(d)
    out = {}
    for b, ds in parts.items():
        out[b] = {"set": [s for d in ds for s in d["set"]]}
        for k in ds[0]:
            if k != "set":
                out[b][k] = torch.cat([d[k] for d in ds])
    return out


def load(paths: list[str], device="cpu") -> dict:
    """Files of one side, in visit order (see :func:`joined`), their tensors on ``device``."""
    return joined([torch.load(p, map_location=device) for p in paths])


def on(side: dict, device) -> dict:
    """One side's joined replays with every tensor on ``device`` (main's, kept in its own
    process, live on its GPU; the candidate's come from files)."""
    return {b: {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in d.items()}
            for b, d in side.items()}


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The stored bytes as integers of the element's width (for byte equality, NaN included)."""
    view = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}[t.element_size()]
    return t.view(view)


def _first(flags: torch.Tensor) -> int | None:
    idx = torch.nonzero(flags).flatten()
    return int(idx[0]) if idx.numel() else None


def sample_quota(rows_per_bucket: dict, total: int) -> dict:
    """Pure: how many rows of each bucket's timed rows a sample of ``total`` takes
    (proportional, at least one per bucket, never more than a bucket has)."""
    n = sum(rows_per_bucket.values())
    if n == 0:
        return {b: 0 for b in rows_per_bucket}
    return {b: min(r, max(1, round(total * r / n))) for b, r in rows_per_bucket.items()}


def band_replays(kl_by_replay: list[float], k: int, seed: int) -> list[int]:
    """Pure given ``seed``: the ``k`` replays of a bucket main's band pass runs again: the
    ``ceil(k / 2)`` where the candidate's logits are furthest from main's (sum of KL(A||B) over
    the replay's rows; ties: the earlier replay), so that work the candidate skipped in a few
    timed replays is where the band looks, and the rest drawn at random, so that the sample
    also holds replays like any other. The choice is symmetric in main and the candidate: it
    does not favour either's distance to the reference. Sorted."""
    n = len(kl_by_replay)
    k = min(k, n)
    worst = sorted(range(n), key=lambda j: (-kl_by_replay[j], j))[:-(-k // 2)] if k else []
    rest = [j for j in range(n) if j not in set(worst)]
    g = torch.Generator().manual_seed(seed)
    drawn = [rest[int(i)] for i in torch.randperm(len(rest), generator=g)[:k - len(worst)]]
    return sorted(worst + drawn)


def band_totals(kept: dict, reference: dict, near_tie_factor: float, kl_pass: float) -> dict:
    """Main's band at the scorer's context on the replays ``compare`` kept (its ``keep``):
    ``reference[bucket]`` holds main's logits with the touched ops on the protected reference
    for each kept replay (``[replays, rows, vocab]``, in ``kept``'s order). Per cluster (a
    request: row ``r`` of every bucket and replay is request ``r``, the same context, so its
    rows are not independent) ``logits.cluster_totals`` of three pairs: ``main`` KL(R||A),
    ``candidate`` KL(R||B) (main's side measures both: the candidate's process never sees R),
    ``candidate_vs_main`` KL(A||B). The decision is ``verdict.judge_band``."""
    from ..logits import cluster_totals

    if not kept:
        raise RuntimeError("timed band: no replays were kept to measure it on (the timed outputs "
                           "hold no logits, or no sample was asked for: a bench bug)")
    parts = {"a": [], "b": [], "r": [], "cluster": []}
    for bucket in sorted(kept):
        k = kept[bucket]
        ref = reference[bucket]
        if ref.shape != k["a"].shape:
            raise RuntimeError(f"timed band at {bucket} rows: the reference pass gave logits of "
                               f"shape {tuple(ref.shape)}, the kept replays {tuple(k['a'].shape)}")
        dev = k["a"].device
        for name, t in (("a", k["a"]), ("b", k["b"]), ("r", ref)):
            parts[name].append(t.reshape(-1, t.shape[-1]).to(dev))
        parts["cluster"].append(torch.arange(bucket, device=dev).repeat(k["a"].shape[0]))
    a, b, r = (torch.cat(parts[x]) for x in ("a", "b", "r"))
    cluster = torch.cat(parts["cluster"])
    n = max(kept)
    return {"clusters": n, "rows": int(a.shape[0]),
            "replays": {str(bk): kept[bk]["replays"] for bk in sorted(kept)},
            "main": cluster_totals(r, a, cluster, n, near_tie_factor, kl_pass),
            "candidate": cluster_totals(r, b, cluster, n, near_tie_factor, kl_pass),
            "candidate_vs_main": cluster_totals(a, b, cluster, n, near_tie_factor, kl_pass)}


def compare(a, b, near_tie_factor: float, device, sample: dict | None = None,
            keep: dict | None = None) -> dict:
    """Main's replays (A) against the candidate's (B): each a list of files or of visits
    already in memory (:func:`joined`), replay by replay, bucket by bucket.

    Per bucket: ``replays``; ``first_raw_difference`` / ``first_value_difference`` (the
    earliest replay whose logits, top values, next tokens or recurrent-state digests differ in
    bytes / in value, None when none does, with ``what`` differed there); ``sketch_rel_max``
    (over replays and layers, ``|sketch_B - sketch_A| / |sketch_A|``) and where; ``logits``:
    ``logits.logit_stats`` of B's rows against A's (key ``rows:replay``), and with ``sample``
    (``{"rows": N, "seed": S}``) ``logits_sample``: the same over N rows of all buckets drawn
    with S. ``keep`` (a dict), when given with ``sample``, receives for each bucket the
    replays main's band pass runs again (``band_replays``: as many rows as the bucket's part of
    the sample, in whole replays) with both sides' logits there (``band_totals``); each
    bucket's entry names them (``band_replays``). With an identical claim only digests are
    kept: no logits statistics."""
    from ..logits import logit_stats, row_stats

    # both sides on one device, whichever way each arrived (H200, 2026-12-01: main's in-memory
    # replays on the GPU against the candidate's files on the CPU crashed the comparison)
    a = on(joined(a), device) if a and isinstance(a[0], dict) else load(a, device)
    b = on(joined(b), device) if b and isinstance(b[0], dict) else load(b, device)
    if sorted(a) != sorted(b):
        raise RuntimeError(f"judged outputs: main's side kept buckets {sorted(a)}, the "
                           f"candidate's {sorted(b)}; expected the same (a bench bug)")
    quota = None
    if sample and all("logits" in a[k] for k in a):
        quota = sample_quota({k: a[k]["logits"].shape[0] * a[k]["logits"].shape[1] for k in a},
                             int(sample["rows"]))
    out = {}
    for bucket in sorted(a):
        x, y = a[bucket], b[bucket]
        if x["set"] != y["set"]:
            raise RuntimeError(f"judged outputs at {bucket} rows: the sides ran input sets "
                               f"{x['set'][:6]}... and {y['set'][:6]}...; expected the same "
                               f"sequence (a bench bug)")
        if sorted(x) != sorted(y):
            raise RuntimeError(f"judged outputs at {bucket} rows: the sides kept {sorted(x)} and "
                               f"{sorted(y)}; expected the same (told the same claim)")
        n = len(x["set"])
        full = "logits" in x

        def differs(p, q):
            return (p != q).reshape(n, -1).any(1)

        raw = {"top values": differs(_bits(x["top_val"]), _bits(y["top_val"])),
               "next tokens": differs(x["next_token"], y["next_token"]),
               "recurrent state": differs(x["state"], y["state"])}
        value = {"top values": differs_value(x["top_val"], y["top_val"]).reshape(n, -1).any(1),
                 "next tokens": raw["next tokens"], "recurrent state": raw["recurrent state"]}
        if full:
            raw["logits"] = differs(_bits(x["logits"]), _bits(y["logits"]))
            value["logits"] = differs_value(x["logits"], y["logits"]).reshape(n, -1).any(1)
        else:  # the digests are of the claim's kind: bytes for bit, values for value
            raw["logits"] = value["logits"] = differs(x["logits_rows"], y["logits_rows"])
        entry = {"replays": n, "kept": "logits" if full else "digests",
                 "first_raw_difference": _first_of(raw), "first_value_difference": _first_of(value),
                 "sketch_rel_max": 0.0, "sketch_worst": None}
        if full:
            sa, sb = x["sketch"].double(), y["sketch"].double()  # [n, tensors, rows, SKETCHES]
            num = (sb - sa).pow(2).sum((2, 3)).sqrt()
            den = sa.pow(2).sum((2, 3)).sqrt().clamp_min(1e-30)
            rel = torch.where(torch.isfinite(num), num / den, torch.full_like(num, float("inf")))
            if rel.numel():
                worst = int(rel.argmax())
                entry["sketch_rel_max"] = float(rel.max())
                entry["sketch_worst"] = {"replay": worst // rel.shape[1], "tensor": worst % rel.shape[1]}
            la = {f"{bucket}:{i}": x["logits"][i].to(device) for i in range(n)}
            lb = {f"{bucket}:{i}": y["logits"][i].to(device) for i in range(n)}
            entry["logits"] = logit_stats(la, lb, near_tie_factor)
            if quota is not None:
                g = torch.Generator().manual_seed(int(sample["seed"]) * 7919 + bucket)
                rows = x["logits"].shape[1]
                pick = torch.randperm(n * rows, generator=g)[:quota[bucket]].sort().values
                flat_a = x["logits"].reshape(n * rows, -1)[pick.to(x["logits"].device)].to(device)
                flat_b = y["logits"].reshape(n * rows, -1)[pick.to(y["logits"].device)].to(device)
                entry["logits_sample"] = logit_stats({f"{bucket}:0": flat_a}, {f"{bucket}:0": flat_b},
                                                     near_tie_factor)
                if keep is not None:  # main's band pass runs these replays again (band_totals)
                    per = [float(row_stats(la[f"{bucket}:{i}"], lb[f"{bucket}:{i}"], near_tie_factor)[0]
                                 .clamp(max=1e30).sum()) for i in range(n)]
                    chosen = band_replays(per, -(-quota[bucket] // rows), int(sample["seed"]) * 7919 + bucket)
                    entry["band_replays"] = chosen
                    idx = torch.tensor(chosen, dtype=torch.int64)
                    keep[bucket] = {"replays": chosen, "sets": [x["set"][j] for j in chosen],
                                    "a": x["logits"][idx.to(x["logits"].device)].to(device),
                                    "b": y["logits"][idx.to(y["logits"].device)].to(device)}
        out[str(bucket)] = entry
    return out


def differs_value(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Elements whose values differ (-0 equals +0; NaN equals NaN: both sides poison alike)."""
    both_nan = torch.isnan(x) & torch.isnan(y)
    return (x != y) & ~both_nan


def _first_of(parts: dict) -> dict | None:
    """The earliest replay at which any part differs, and which parts differ there."""
    firsts = {k: _first(v) for k, v in parts.items()}
    hits = [i for i in firsts.values() if i is not None]
    if not hits:
        return None
    i = min(hits)
    return {"replay": i, "what": [k for k, f in firsts.items() if f == i]}
