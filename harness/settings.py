"""``kern.yaml``: load, validate, and pick the profile for this machine.

Validation is a pure function over the parsed data (:func:`validate`); every problem names
the key, what was expected and what was found, so the user knows what to fix. The loaded
settings are plain dicts handed to the gates as data.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import yaml


class SettingsError(ValueError):
    """kern.yaml is wrong; the user must edit it."""


_NUM = (int, float)
# key path -> (type or tuple of types, required)
_SCHEMA: dict[str, tuple] = {
    "target.tree": (str, True),
    "target.seed": (int, True),
    "target.weight_sets": (int, True),
    "profiles.gpu": (dict, True),
    "profiles.cpu": (dict, True),
    "editable": (list, True),
    "protected": (list, True),
    "test.timeout_s": (_NUM, True),
    "test.hidden_rows": (int, True),
    "test.snapshot_budget_mb": (_NUM, True),
    "test.reference_calls_per_op": (int, True),
    "test.kl_pass": (_NUM, True),
    "test.kl_fail": (_NUM, True),
    "test.near_tie_factor": (_NUM, True),
    "test.band_factor": (_NUM, True),
    "test.max_near_tie_flips": (_NUM, True),
    "test.layout_kl_pass": (_NUM, True),
    "test.reference": (dict, True),
    "bench.warmup": (int, True),
    "bench.replays": (int, True),
    "bench.rounds": (int, True),
    "bench.bootstrap": (int, True),
    "bench.noise_pct": (_NUM, True),
    "bench.guard_pct": (_NUM, True),
    "bench.max_op_rel_rms": (_NUM, True),
    "bench.max_hidden_pct": (_NUM, True),
    "bench.state_sketch_rel": (_NUM, True),
    "bench.reverify_pct": (_NUM, True),
    "bench.reverify_rounds": (int, True),
    "bench.reference_calls_per_op": (int, True),
    "bench.timeout_s": (_NUM, True),
    "agent.backend": (str, True),
    "agent.model": (str, False),
    "agent.command": (str, False),
    "agent.replay_dir": (str, False),
    "agent.max_turns": (int, False),
    "agent.tunables": (list, False),
    "loop.every": (str, True),
    "loop.concurrency": (int, True),
    "loop.stop_after_idle_ticks": (int, True),
    "loop.trial_merge_parts": (int, False),
    "loop.trial_merge_recent": (int, False),
    "farm.slots": ((str, list), False),
    "farm.gpus": (int, False),
    "farm.kind": (str, False),
    "farm.address": (str, False),
    "farm.isolate": (bool, False),
    "budgets.attempts": (int, True),
    "budgets.tokens": (int, True),
    "budgets.wall_hours": (_NUM, True),
}
_PROFILE_SCHEMA = {
    "model": str, "layout": str, "buckets": list, "weights": list, "context": int,
    "test_rows": list, "test_context": int, "test_steps": int,
}
BACKENDS = ("anthropic", "claude-code", "command", "tuner", "replay")
FARM_KINDS = ("local", "ray")


def _get(data: dict, path: str):
    cur = data
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return _MISSING
        cur = cur[part]
    return cur


_MISSING = object()


def _tname(t) -> str:
    if isinstance(t, tuple):
        return " or ".join(x.__name__ for x in t)
    return t.__name__


def validate(data) -> list[str]:
    """Every problem of a parsed kern.yaml, as 'key: expected X, found Y' sentences."""
    if not isinstance(data, dict):
        return [f"kern.yaml: expected a mapping at the top level, found {type(data).__name__}"]
    problems = []
    for path, (typ, required) in _SCHEMA.items():
        val = _get(data, path)
        if val is _MISSING:
            if required:
                problems.append(f"{path}: expected {_tname(typ)}, found nothing (key missing)")
            continue
        if (isinstance(val, bool) and typ is not bool) or not isinstance(val, typ):
            problems.append(f"{path}: expected {_tname(typ)}, found {val!r}")
    for name in ("gpu", "cpu"):
        prof = _get(data, f"profiles.{name}")
        if not isinstance(prof, dict):
            continue
        for key, typ in _PROFILE_SCHEMA.items():
            v = prof.get(key, _MISSING)
            if v is _MISSING:
                problems.append(f"profiles.{name}.{key}: expected {typ.__name__}, found nothing")
            elif isinstance(v, bool) or not isinstance(v, typ):
                problems.append(f"profiles.{name}.{key}: expected {typ.__name__}, found {v!r}")
        b, w = prof.get("buckets"), prof.get("weights")
        if isinstance(b, list) and isinstance(w, list):
            if len(b) != len(w) or not b:
                problems.append(f"profiles.{name}.weights: expected one weight per bucket "
                                f"({len(b)}), found {len(w)}")
            if any(not isinstance(x, int) or x < 1 for x in b):
                problems.append(f"profiles.{name}.buckets: expected positive integers, found {b}")
            if any(not isinstance(x, _NUM) or x <= 0 for x in w):
                problems.append(f"profiles.{name}.weights: expected positive numbers, found {w}")
        floor = prof.get("noise_pct", 0.0)
        if isinstance(floor, bool) or not isinstance(floor, (int, float)) or floor < 0:
            problems.append(f"profiles.{name}.noise_pct: expected a percentage >= 0, found {floor!r}")
        mem = prof.get("memory_gib")
        if mem is not None and (isinstance(mem, bool) or not isinstance(mem, _NUM) or mem <= 0):
            problems.append(f"profiles.{name}.memory_gib: expected a positive number of GiB, found {mem!r}")
        rows = prof.get("test_rows")
        if isinstance(rows, list) and any(not isinstance(x, int) or x < 1 for x in rows):
            problems.append(f"profiles.{name}.test_rows: expected positive integers, found {rows}")
        if prof.get("model") not in (None, "full", "small"):
            problems.append(f"profiles.{name}.model: expected 'full' or 'small', found {prof.get('model')!r}")
    backend = _get(data, "agent.backend")
    if isinstance(backend, str) and backend not in BACKENDS:
        problems.append(f"agent.backend: expected one of {', '.join(BACKENDS)}, found {backend!r}")
    pats = _get(data, "agent.tunables")
    if isinstance(pats, list) and (not pats or not all(isinstance(x, str) and x for x in pats)):
        problems.append(f"agent.tunables: expected a non-empty list of glob patterns (the tuner "
                        f"tries matching tunables in this order), found {pats!r}")
    hr = _get(data, "test.hidden_rows")
    if isinstance(hr, int) and not isinstance(hr, bool) and hr < 0:
        problems.append(f"test.hidden_rows: expected a count >= 0, found {hr}")
    kp, kf = _get(data, "test.kl_pass"), _get(data, "test.kl_fail")
    if isinstance(kp, _NUM) and isinstance(kf, _NUM) and not 0 <= kp <= kf:
        problems.append(f"test.kl_pass: expected 0 <= kl_pass <= kl_fail ({kf}), found {kp}")
    slots = _get(data, "farm.slots")
    if isinstance(slots, str) and slots != "auto":
        problems.append(f"farm.slots: expected 'auto' or a list of slots, found {slots!r}")
    if isinstance(slots, list) and (not slots or any(isinstance(x, bool) or not isinstance(x, (str, int))
                                                     for x in slots)):
        problems.append(f"farm.slots: expected a non-empty list of GPU ids (\"0\", \"2,3\") or CPU "
                        f"slot names (\"cpu0\"), found {slots!r}")
    gpus = _get(data, "farm.gpus")
    if isinstance(gpus, int) and not isinstance(gpus, bool) and gpus < 1:
        problems.append(f"farm.gpus: expected a number of GPUs per slot >= 1, found {gpus}")
    tp = _get(data, "loop.trial_merge_parts")
    if isinstance(tp, int) and not isinstance(tp, bool) and tp not in (0,) and tp < 2:
        problems.append(f"loop.trial_merge_parts: expected 0 (no trial merges) or at least 2 parts, found {tp}")
    tr = _get(data, "loop.trial_merge_recent")
    if isinstance(tr, int) and not isinstance(tr, bool) and tr < 2:
        problems.append(f"loop.trial_merge_recent: expected at least 2 attempts to look back on, found {tr}")
    kind = _get(data, "farm.kind")
    if isinstance(kind, str) and kind not in FARM_KINDS:
        problems.append(f"farm.kind: expected one of {', '.join(FARM_KINDS)}, found {kind!r}")
    every = _get(data, "loop.every")
    if isinstance(every, str) and parse_duration(every) is None:
        problems.append(f"loop.every: expected a duration such as 20m, 1h, 90s, found {every!r}")
    return problems


def parse_duration(text: str) -> float | None:
    text = text.strip()
    units = {"s": 1, "m": 60, "h": 3600}
    if len(text) < 2 or text[-1] not in units:
        return None
    try:
        return float(text[:-1]) * units[text[-1]]
    except ValueError:
        return None


@dataclass(frozen=True)
class Settings:
    data: dict
    path: Path
    digest: str  # sha256 of the file's bytes (goes into every result JSON)

    def profile(self, cuda: bool) -> dict:
        return dict(self.data["profiles"]["gpu" if cuda else "cpu"])

    def __getitem__(self, key):
        return self.data[key]


def load(path: str | Path) -> Settings:
    path = Path(path)
    if not path.exists():
        raise SettingsError(f"kern.yaml: expected a file at {path}, found none "
                            f"(run from the repository root or pass --config)")
    raw = path.read_bytes()
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as e:
        raise SettingsError(f"{path}: not valid YAML: {e}") from None
    problems = validate(data)
    if problems:
        raise SettingsError(f"{path} has {len(problems)} problem(s):\n  " + "\n  ".join(problems))
    return Settings(data, path, hashlib.sha256(raw).hexdigest()[:16])
