"""The scorer's judged outputs: what every timed replay produced, kept and compared with main's.

Runs inside a bench side's process (``gates/bench_side.py``); the decision on what it measured
is ``verdict.judge_timed``, in the loop's process.

Why: a candidate can compute honestly while the accuracy gate watches and skip work in the
scorer's timed replays (a signal that differs between the two always exists: what a buffer
holds before a call, the context length, how often a launcher ran, ...). Closing the signals
one by one never ends; judging the outputs of the very replays that were timed does.

Contract (the coordinator, ``gates/bench.py``, relies on it):

* **Every timed replay starts from the same state.** Before it, untimed, the recurrent state of
  its rows (KDA state and conv window) is refilled with its seeded initial values, and the
  positions are the workload's step-1 positions whatever the input set. So a replay's outputs
  are a function of (tree, bucket, input set) alone, and A's n-th replay and B's n-th replay
  (the same input set, see ``gates/stats.py``) are comparable one step from one state — as
  the accuracy gate's own first step is. Without the reset they would not be: the two sides
  share one model over CUDA IPC and run their visits interleaved, so B's n-th replay would
  start from whatever A's and B's earlier replays left in the state. The MLA caches need no
  reset: every replay writes its own token's slot at that fixed position before attention
  reads it, and reads only the prefilled context below it, which no replay writes.
* **After each timed replay**, untimed and on the device: the logits, top values and next
  tokens are copied; the recurrent rows the replay wrote are digested (raw bytes and values,
  ``fingerprint.digest_on_device``) and sketched: per layer and row, two projections on random
  weights drawn from the run's hidden ``sketch_seed``, so a state written only in part or
  not at all shows against main's although the candidate's outputs differ by rounding.
* ``save(path)`` writes the replays kept since the last save (one file per visit; a side in
  alternating processes keeps nothing across them); ``compare(mine, theirs)`` pairs two sides'
  files replay by replay, bucket by bucket, and returns plain statistics (JSON): for each
  bucket the first replay whose bytes or values differ, the worst state sketch distance, and
  ``verdict.logit_stats`` of the logits (argmax agreement, A's margin, KL(A||B), max |delta|).
  Main's side runs it: the candidate's process never sees main's outputs.
"""
from __future__ import annotations

from pathlib import Path

import torch

from .fingerprint import digest_on_device, value_view

SKETCHES = 2  # random projections per row and layer


class TimedRecord:
    """The kept outputs of one side's timed replays (``bucket -> list of replays``)."""

    def __init__(self, side, sketch_seed: int):
        self.side = side
        self.pending: dict = {}
        self.seed = int(sketch_seed)
        self._weights: dict = {}

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

    def keep(self, bucket: int, input_set: int, step) -> None:
        """Record what the replay that just ran on input set ``input_set`` produced."""
        tensors = self.recurrent(bucket)
        raw = torch.stack([digest_on_device(t) for t in tensors])
        val = torch.stack([digest_on_device(value_view(t)) for t in tensors])
        sketch = torch.stack([(t.reshape(t.shape[0], -1)
                               @ self._projection(t[0].numel(), t.dtype)).float() for t in tensors])
        self.pending.setdefault(bucket, []).append({
            "set": input_set, "logits": step.logits.clone(), "top_val": step.top_val.clone(),
            "next_token": step.next_token.clone(), "state_raw": raw, "state_value": val,
            "sketch": sketch})

    def save(self, path: Path) -> dict:
        """Write what was kept since the last save to ``path`` (CPU tensors) and forget it."""
        data = {}
        for b, reps in self.pending.items():
            data[b] = {"set": [r["set"] for r in reps]}
            for k in ("logits", "top_val", "next_token", "state_raw", "state_value", "sketch"):
                data[b][k] = torch.stack([r[k] for r in reps]).cpu()
        self.pending = {}
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(data, path)
        return {"buckets": {str(b): len(v["set"]) for b, v in data.items()}}


def load(paths: list[str]) -> dict:
    """Files of one side, in visit order -> ``bucket -> {key: tensor over all replays}``."""
    parts: dict = {}
    for p in paths:
        for b, v in torch.load(p).items():
            parts.setdefault(int(b), []).append(v)
    out = {}
    for b, vs in parts.items():
        out[b] = {"set": [s for v in vs for s in v["set"]]}
        for k in ("logits", "top_val", "next_token", "state_raw", "state_value", "sketch"):
            out[b][k] = torch.cat([v[k] for v in vs])
    return out


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The stored bytes as integers of the element's width (for byte equality, NaN included)."""
    view = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}[t.element_size()]
    return t.view(view)


def _first(flags: torch.Tensor) -> int | None:
    idx = torch.nonzero(flags).flatten()
    return int(idx[0]) if idx.numel() else None


def compare(mine: list[str], theirs: list[str], near_tie_factor: float, device) -> dict:
    """``mine`` (main's files, A) against ``theirs`` (the candidate's, B), replay by replay.

    Per bucket: ``replays``; ``first_raw_difference`` / ``first_value_difference`` (the index
    of the first replay whose logits, top values, next tokens or recurrent-state digests differ
    in bytes / in value, None when none does, with ``what`` differed first); ``sketch_rel_max``
    (over replays and layers, ``|sketch_B - sketch_A| / |sketch_A|``) and where; ``logits``:
    ``verdict.logit_stats`` of B's against A's (key ``rows:replay``)."""
    from .verdict import logit_stats

    a, b = load(mine), load(theirs)
    if sorted(a) != sorted(b):
        raise RuntimeError(f"judged outputs: main's side kept buckets {sorted(a)}, the "
                           f"candidate's {sorted(b)}; expected the same (a bench bug)")
    out = {}
    for bucket in sorted(a):
        x, y = a[bucket], b[bucket]
        if x["set"] != y["set"]:
            raise RuntimeError(f"judged outputs at {bucket} rows: the sides ran input sets "
                               f"{x['set'][:6]}... and {y['set'][:6]}...; expected the same "
                               f"sequence (a bench bug)")
        n = len(x["set"])
        parts_raw = {
            "logits": (_bits(x["logits"]) != _bits(y["logits"])).reshape(n, -1).any(1),
            "top values": (_bits(x["top_val"]) != _bits(y["top_val"])).reshape(n, -1).any(1),
            "next tokens": (x["next_token"] != y["next_token"]).reshape(n, -1).any(1),
            "recurrent state": (x["state_raw"] != y["state_raw"]).reshape(n, -1).any(1),
        }
        parts_value = {
            "logits": _value_differs(x["logits"], y["logits"]).reshape(n, -1).any(1),
            "top values": _value_differs(x["top_val"], y["top_val"]).reshape(n, -1).any(1),
            "next tokens": parts_raw["next tokens"],
            "recurrent state": (x["state_value"] != y["state_value"]).reshape(n, -1).any(1),
        }
        first_raw = _first_of(parts_raw)
        first_value = _first_of(parts_value)
        sa, sb = x["sketch"].double(), y["sketch"].double()  # [n, tensors, rows, SKETCHES]
        num = (sb - sa).pow(2).sum((2, 3)).sqrt()
        den = sa.pow(2).sum((2, 3)).sqrt().clamp_min(1e-30)
        rel = torch.where(torch.isfinite(num), num / den, torch.full_like(num, float("inf")))
        worst = int(rel.argmax())
        la = {f"{bucket}:{i}": x["logits"][i].to(device) for i in range(n)}
        lb = {f"{bucket}:{i}": y["logits"][i].to(device) for i in range(n)}
        out[str(bucket)] = {
            "replays": n,
            "first_raw_difference": first_raw,
            "first_value_difference": first_value,
            "sketch_rel_max": float(rel.max()) if rel.numel() else 0.0,
            "sketch_worst": {"replay": worst // rel.shape[1], "tensor": worst % rel.shape[1]}
            if rel.numel() else None,
            "logits": logit_stats(la, lb, near_tie_factor),
        }
    return out


def _value_differs(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
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
