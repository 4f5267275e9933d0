"""``kern.yaml``: load, validate, and resolve it once into typed settings for this machine.

Validation is a pure function over the parsed data (:func:`validate`); every problem names
the key, what was expected and what was found, so the user knows what to fix. A key no code
reads is a problem too: every key of kern.yaml is a field of one of the dataclasses below.

:func:`resolve` is the one place where the machine profile (``profiles.gpu`` when CUDA is
available, ``profiles.cpu`` otherwise) meets the top-level sections. A profile holds what
depends on the machine: model, layout, buckets and weights, context, the tap's test rows,
context and steps, the scorer's rounds and replays and the GPU memory a run needs; those live
only there. Of the top-level sections a profile may override ``bench.noise_pct``
(``gates.bench.PROFILE_OVERRIDES``): the profile's value wins. The harness reads the typed
:class:`Resolved`; the gates still take the parsed data and the profile as plain dicts
(``Settings.data``, ``Settings.profile``).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields
from pathlib import Path
from types import MappingProxyType

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
    "step.timeout_s": (_NUM, True),
    "profile.timeout_s": (_NUM, True),
    "agent.backend": (str, True),
    "agent.model": (str, False),
    "agent.command": (str, False),
    "agent.replay_dir": (str, False),
    "agent.max_turns": (int, False),
    "agent.tunables": (list, False),
    "agent.timeout_s": (_NUM, False),
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
    "sandbox": (str, False),
}
_PROFILE_SCHEMA = {
    "model": str, "layout": str, "buckets": list, "weights": list, "context": int,
    "test_rows": list, "test_context": int, "test_steps": int, "rounds": int, "replays": int,
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
        if isinstance(prof, dict):
            problems += profile_problems(prof, f"profiles.{name}")
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
    sandbox = _get(data, "sandbox")
    if isinstance(sandbox, str):
        from gates.sandbox import MODES

        if sandbox not in MODES:
            problems.append(f"sandbox: expected one of {', '.join(MODES)}, found {sandbox!r}")
    kind = _get(data, "farm.kind")
    if isinstance(kind, str) and kind not in FARM_KINDS:
        problems.append(f"farm.kind: expected one of {', '.join(FARM_KINDS)}, found {kind!r}")
    for path in ("test.timeout_s", "bench.timeout_s", "step.timeout_s", "profile.timeout_s",
                 "agent.timeout_s"):
        v = _get(data, path)
        if isinstance(v, _NUM) and not isinstance(v, bool) and v <= 0:
            problems.append(f"{path}: expected a positive number of seconds, found {v}")
    problems += unread_keys(data)
    every = _get(data, "loop.every")
    if isinstance(every, str) and parse_duration(every) is None:
        problems.append(f"loop.every: expected a duration such as 20m, 1h, 90s, found {every!r}")
    return problems


def profile_problems(prof: dict, where: str) -> list[str]:
    """Every problem of one machine profile (``where``: its key path, for the messages)."""
    problems = []
    for key, typ in _PROFILE_SCHEMA.items():
        v = prof.get(key, _MISSING)
        if v is _MISSING:
            problems.append(f"{where}.{key}: expected {typ.__name__}, found nothing")
        elif isinstance(v, bool) or not isinstance(v, typ):
            problems.append(f"{where}.{key}: expected {typ.__name__}, found {v!r}")
    b, w = prof.get("buckets"), prof.get("weights")
    if isinstance(b, list) and isinstance(w, list):
        if len(b) != len(w) or not b:
            problems.append(f"{where}.weights: expected one weight per bucket "
                            f"({len(b)}), found {len(w)}")
        if any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in b):
            problems.append(f"{where}.buckets: expected positive integers, found {b}")
        if any(not isinstance(x, _NUM) or x <= 0 for x in w):
            problems.append(f"{where}.weights: expected positive numbers, found {w}")
    floor = prof.get("noise_pct", 0.0)
    if isinstance(floor, bool) or not isinstance(floor, (int, float)) or floor < 0:
        problems.append(f"{where}.noise_pct: expected a percentage >= 0, found {floor!r}")
    mem = prof.get("memory_gib")
    if mem is not None and (isinstance(mem, bool) or not isinstance(mem, _NUM) or mem <= 0):
        problems.append(f"{where}.memory_gib: expected a positive number of GiB, found {mem!r}")
    for key in ("rounds", "replays", "context", "test_context", "test_steps"):
        v = prof.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v < 1:
            problems.append(f"{where}.{key}: expected a positive integer, found {v}")
    rows = prof.get("test_rows")
    if isinstance(rows, list) and any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in rows):
        problems.append(f"{where}.test_rows: expected positive integers, found {rows}")
    if prof.get("model") not in (None, "full", "small"):
        problems.append(f"{where}.model: expected 'full' or 'small', found {prof.get('model')!r}")
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


# ----------------------------------------------------------------------- typed settings
# One dataclass per section of kern.yaml; a field per key. validate() reports a key that is no
# field (nothing would read it), resolve() builds them. Optional keys default here; the
# defaults are the ones the readers used before (farm.py, trials, the agent backends).


@dataclass(frozen=True)
class Target:
    tree: str
    seed: int
    weight_sets: int


@dataclass(frozen=True)
class Profile:
    """One machine profile (``profiles.gpu`` or ``profiles.cpu``), the one this machine uses
    after :func:`resolve`."""
    name: str  # "gpu" or "cpu": which profile of kern.yaml this is
    model: str
    layout: str
    buckets: tuple[int, ...]
    weights: tuple[float, ...]
    context: int
    test_rows: tuple[int, ...]
    test_context: int
    test_steps: int
    rounds: int
    replays: int
    noise_pct: float | None = None  # overrides bench.noise_pct (see Bench.noise_pct)
    memory_gib: float | None = None


@dataclass(frozen=True)
class TestGate:
    """``test``: the accuracy gate's thresholds and limits."""
    timeout_s: float
    hidden_rows: int
    snapshot_budget_mb: float
    reference_calls_per_op: int
    kl_pass: float
    kl_fail: float
    band_factor: float
    near_tie_factor: float
    max_near_tie_flips: float
    layout_kl_pass: float
    reference: MappingProxyType  # op name (or "default") -> its tolerance, read by gates


@dataclass(frozen=True)
class Bench:
    """``bench``: the scorer's statistics and limits. ``noise_pct`` is resolved: the machine
    profile's own value when it sets one, else the section's."""
    bootstrap: int
    noise_pct: float
    guard_pct: float
    max_op_rel_rms: float
    max_hidden_pct: float
    state_sketch_rel: float
    reverify_pct: float
    reverify_rounds: int
    reference_calls_per_op: int
    timeout_s: float


@dataclass(frozen=True)
class Limit:
    """``step`` / ``profile``: how long one such run may take."""
    timeout_s: float


@dataclass(frozen=True)
class Agent:
    """``agent``; an optional key left out is None: the backend's own default applies."""
    backend: str
    model: str | None = None
    command: str | None = None
    replay_dir: str | None = None
    max_turns: int | None = None
    tunables: tuple[str, ...] | None = None
    timeout_s: float | None = None

    def options(self) -> dict:
        """The section as the backends read it (the keys kern.yaml sets)."""
        return {f.name: (list(v) if isinstance(v, tuple) else v)
                for f in fields(self) if (v := getattr(self, f.name)) is not None}


@dataclass(frozen=True)
class Loop:
    every: str
    concurrency: int
    stop_after_idle_ticks: int
    trial_merge_parts: int = 0
    trial_merge_recent: int = 12

    @property
    def every_s(self) -> float:
        return parse_duration(self.every) or 0.0


@dataclass(frozen=True)
class Farm:
    slots: str | tuple = "auto"
    gpus: int = 1
    kind: str = "local"
    address: str = ""
    isolate: bool = False  # the scorer's rounds of judgments on one host take turns


@dataclass(frozen=True)
class Budgets:
    attempts: int
    tokens: int
    wall_hours: float


@dataclass(frozen=True)
class Resolved:
    """kern.yaml for this machine: each section typed, the machine's profile applied."""
    machine: Profile
    target: Target
    editable: tuple[str, ...]
    protected: tuple[str, ...]
    test: TestGate
    bench: Bench
    step: Limit
    profile: Limit
    agent: Agent
    loop: Loop
    farm: Farm
    budgets: Budgets
    sandbox: str = "auto"  # how candidate code is confined (gates/sandbox.py MODES)


# kern.yaml's top-level keys and what each becomes; a mapping section's keys are the fields of
# its dataclass (profiles: each profile's keys, the fields of Profile but its name)
_SECTIONS = {"target": Target, "test": TestGate, "bench": Bench, "step": Limit, "profile": Limit,
             "agent": Agent, "loop": Loop, "farm": Farm, "budgets": Budgets}
_LISTS = ("editable", "protected")
_SCALARS = ("sandbox",)


def _names(cls) -> set[str]:
    return {f.name for f in fields(cls)}


def unread_keys(data: dict) -> list[str]:
    """Pure: a problem for every key of a parsed kern.yaml that no typed field holds, so no
    code reads it (a typo, or a setting that was removed)."""
    out = []

    def unread(path: str, known) -> None:
        out.append(f"{path}: expected one of {', '.join(sorted(known))}, found a key no code reads; "
                   f"remove it or correct its spelling")

    for key, val in data.items():
        if key == "profiles":
            if isinstance(val, dict):
                out += [f"profiles.{name}: expected only the profiles 'gpu' and 'cpu', found {name!r}; "
                        f"remove it" for name in val if name not in ("gpu", "cpu")]
                for name in ("gpu", "cpu"):
                    prof = val.get(name)
                    if isinstance(prof, dict):
                        for k in prof:
                            if k not in _names(Profile) - {"name"}:
                                unread(f"profiles.{name}.{k}", _names(Profile) - {"name"})
        elif key in _SECTIONS:
            if isinstance(val, dict):
                for k in val:
                    if k not in _names(_SECTIONS[key]):
                        unread(f"{key}.{k}", _names(_SECTIONS[key]))
        elif key not in _LISTS + _SCALARS:
            unread(key, {*_SECTIONS, *_LISTS, *_SCALARS, "profiles"})
    return out


def _section(cls, raw: dict, **resolved):
    return cls(**{**{k: v for k, v in raw.items() if k in _names(cls)}, **resolved})


def resolve(data: dict, cuda: bool, profile: dict | None = None) -> Resolved:
    """Pure: the typed settings of this machine from parsed kern.yaml data, validated here
    (:class:`SettingsError` lists the problems). ``profile``: the machine profile as handed to
    the gates when a caller narrowed it (tests do); by default kern.yaml's ``profiles.gpu``
    with CUDA, ``profiles.cpu`` without. The profile's values win over the top-level
    sections' (of those only ``bench.noise_pct`` can be set in both)."""
    name = "gpu" if cuda else "cpu"
    problems = validate(data)
    if profile is not None:
        problems += profile_problems(profile, f"profiles.{name} (as handed over)")
        problems += unread_keys({"profiles": {name: profile}})
    if problems:
        raise SettingsError(f"kern.yaml has {len(problems)} problem(s) (edit it):\n  "
                            + "\n  ".join(problems))
    from gates.bench import bench_settings  # the override rule the scorer applies itself

    prof = data["profiles"][name] if profile is None else profile
    machine = _section(Profile, prof, name=name, buckets=tuple(prof["buckets"]),
                       weights=tuple(prof["weights"]), test_rows=tuple(prof["test_rows"]))
    agent = data["agent"]
    farm = data.get("farm") or {}
    return Resolved(
        machine=machine, target=_section(Target, data["target"]),
        editable=tuple(data["editable"]), protected=tuple(data["protected"]),
        test=_section(TestGate, data["test"], reference=MappingProxyType(dict(data["test"]["reference"]))),
        bench=_section(Bench, bench_settings(data["bench"], prof)),
        step=_section(Limit, data["step"]), profile=_section(Limit, data["profile"]),
        agent=_section(Agent, agent, **({"tunables": tuple(agent["tunables"])} if "tunables" in agent else {})),
        loop=_section(Loop, data["loop"]),
        farm=_section(Farm, farm, **({"slots": tuple(farm["slots"])} if isinstance(farm.get("slots"), list) else {})),
        budgets=_section(Budgets, data["budgets"]), sandbox=data.get("sandbox", "auto"))


@dataclass(frozen=True)
class Settings:
    data: dict  # the parsed file, as the gates take it
    path: Path
    digest: str  # sha256 of the file's bytes (goes into every result JSON)

    def profile(self, cuda: bool) -> dict:
        """The machine profile as the gates take it (a copy of the parsed mapping)."""
        return dict(self.data["profiles"]["gpu" if cuda else "cpu"])

    def resolve(self, cuda: bool) -> Resolved:
        return resolve(self.data, cuda)

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
