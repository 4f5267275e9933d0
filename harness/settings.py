"""``kern.yaml``: load it, and resolve it once into the typed settings of this machine.

The dataclasses below are the schema. A section of kern.yaml is a dataclass and a key is one
of its fields: the key's type is the field's annotation, its default the field's default (a
field without one is a required key), its allowed range and any further rule the field's
metadata (:func:`key`). :func:`resolve` reads the parsed file against them once and reports
every problem as ``key: expected X, found Y``, so the user knows what to fix; a key no field
holds is a problem too (a typo, or a setting that was removed: no code would read it).

The machine profile (``profiles.gpu`` when CUDA is available, ``profiles.cpu`` otherwise)
holds what depends on the machine: model, layout, buckets and weights, context, the tap's test
rows, context and steps, the scorer's rounds and replays and the GPU memory a run needs; those
live only there. Of the top-level sections a profile may set ``bench.noise_pct`` too, and the
profile's value wins (``gates.scorer.PROFILE_OVERRIDES`` names the same key). The harness reads
the typed :class:`Resolved`; the gates still take the parsed data and the profile as plain
dicts (``Settings.data``, ``Settings.profile``). Loading imports nothing of the gates.
"""
from __future__ import annotations

import dataclasses
import hashlib
import re
import types
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from collections.abc import Mapping
from typing import Literal, Union, get_args, get_origin, get_type_hints

import yaml


class SettingsError(ValueError):
    """kern.yaml is wrong; the user must edit it."""


# ----------------------------------------------------------------------- the field rules
_REQUIRED = dataclasses.MISSING


@dataclass(frozen=True)
class Range:
    """Where every number of a key's value must lie (the ends: ``lo``/``hi``, excluded when
    ``*_open``)."""
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def holds(self, v: float) -> bool:
        return ((self.lo is None or (v > self.lo if self.lo_open else v >= self.lo))
                and (self.hi is None or (v < self.hi if self.hi_open else v <= self.hi)))

    def text(self) -> str:
        parts = []
        if self.lo is not None:
            parts.append(f"{'>' if self.lo_open else '>='} {_num(self.lo)}")
        if self.hi is not None:
            parts.append(f"{'<' if self.hi_open else '<='} {_num(self.hi)}")
        return " and ".join(parts)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def key(default=_REQUIRED, *, ge=None, gt=None, le=None, lt=None, nonempty: bool = False,
        expect: str | None = None, check=None):
    """A field of kern.yaml: ``default`` (none: the key is required); every number the value
    holds within ``ge``/``gt``/``le``/``lt``; ``nonempty``: a list or mapping with at least one
    entry; ``expect``: the words the error uses for what is expected, where the type's own
    would not say it; ``check(value) -> None | str``: a further rule, returning what was
    expected when the value breaks it."""
    rng = None
    if (ge, gt, le, lt) != (None,) * 4:
        rng = Range(lo=gt if gt is not None else ge, hi=lt if lt is not None else le,
                    lo_open=gt is not None, hi_open=lt is not None)
    meta = {"range": rng, "nonempty": nonempty, "expect": expect, "check": check}
    if default is _REQUIRED:
        return field(metadata=meta)
    try:
        hash(default)
    except TypeError:  # a mapping: each instance gets its own (read-only) copy
        return field(default_factory=lambda: MappingProxyType(dict(default)), metadata=meta)
    return field(default=default, metadata=meta)


def derived():
    """A field resolve() sets itself; not a key of kern.yaml."""
    return field(default=None, metadata={"derived": True})


DURATION_FORMS = "90s, 20m, 1h or 1d (a whole number, then s, m, h or d)"
_DURATION = re.compile(r"(\d+)([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text) -> float | None:
    """Seconds of ``90s``, ``20m``, ``1h``, ``1d``; None for anything else."""
    m = _DURATION.fullmatch(text.strip()) if isinstance(text, str) else None
    return None if m is None else float(int(m.group(1)) * _UNIT_S[m.group(2)])


def _duration(v: str) -> str | None:
    return None if parse_duration(v) is not None else f"a duration: {DURATION_FORMS}"


# The longest time between two ticks: a loop idle for longer is a cron job (kern loop --tick).
MAX_EVERY_S = 30 * 86400


def _min_every(v: str) -> str | None:
    s = parse_duration(v)
    return None if s is not None and 1 <= s <= MAX_EVERY_S else \
        f"a duration from 1s to 30d ({DURATION_FORMS})"


def interval_problem(seconds: float, floor_s: float) -> str | None:
    """Pure: why ``seconds`` cannot be the time between ticks (below kern.yaml's
    ``loop.min_every``, ``floor_s``: a tick right after a tick is a busy loop; past 30 days),
    or None."""
    if seconds < floor_s:
        return (f"expected at least loop.min_every ({_num(floor_s)}s, kern.yaml) between ticks, "
                f"found {_num(seconds)}s: a shorter wait is a busy loop")
    if seconds > MAX_EVERY_S:
        return (f"expected at most 30d between ticks, found {_num(seconds / 86400)}d "
                f"(for rarer ticks, run `kern loop --tick` from cron)")
    return None


def _trial_parts(v: int) -> str | None:
    return None if v == 0 or v >= 2 else "0 (no trial merges) or at least 2 parts"


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _env_names(v: tuple) -> str | None:
    bad = [x for x in v if not _ENV_NAME.fullmatch(x)]
    return None if not bad else f"environment variable names such as ANTHROPIC_API_KEY (not {bad[0]!r})"


# ----------------------------------------------------------------------- the sections
@dataclass(frozen=True, kw_only=True)
class Target:
    """``target``: the tree the loop optimizes and the seeds of its model."""
    tree: str = key()
    seed: int = key(ge=0)
    weight_sets: int = key(ge=1)


@dataclass(frozen=True, kw_only=True)
class Profile:
    """One machine profile (``profiles.gpu`` or ``profiles.cpu``), the one this machine uses
    after :func:`resolve`."""
    name: str = derived()  # "gpu" or "cpu": which profile of kern.yaml this is
    model: Literal["full", "small"] = key()
    layout: str = key()
    buckets: tuple[int, ...] = key(ge=1, nonempty=True)
    weights: tuple[float, ...] = key(gt=0, nonempty=True)
    context: int = key(ge=1)
    test_rows: tuple[int, ...] = key(ge=1, nonempty=True)
    test_context: int = key(ge=1)
    test_steps: int = key(ge=1)
    rounds: int = key(ge=1)
    replays: int = key(ge=1)
    noise_pct: float | None = key(None, ge=0)  # overrides bench.noise_pct (see Bench.noise_pct)
    memory_gib: float | None = key(None, gt=0)
    # one side's accuracy recording on this profile, measured (kern doctor's disk need: A and
    # B, at most test.snapshot_budget_mb each); None: the budget itself
    recording_mb: float | None = key(None, gt=0)

    def problems(self) -> list[str]:
        if len(self.buckets) != len(self.weights):
            return [f"weights: expected one weight per bucket ({len(self.buckets)}), "
                    f"found {len(self.weights)}"]
        return []


@dataclass(frozen=True, kw_only=True)
class Tolerance:
    """One op's tolerance against the protected reference (``test.reference.<op>``)."""
    rel_rms: float | None = key(None, gt=0)
    exact: bool = False
    exact_output: str | None = None  # the one output that must match exactly
    max_differing_frac: float | None = key(None, ge=0, le=1)  # integer outputs (ids)


@dataclass(frozen=True, kw_only=True)
class TestGate:
    """``test``: the accuracy gate's thresholds and limits."""
    __test__ = False  # not a pytest class
    timeout_s: float = key(gt=0)
    hidden_rows: int = key(ge=0)
    snapshot_budget_mb: float = key(gt=0)
    reference_calls_per_op: int = key(ge=1)
    kl_pass: float = key(ge=0)
    kl_fail: float = key(gt=0)
    band_factor: float = key(gt=0)
    near_tie_factor: float = key(ge=0)
    max_near_tie_flips: float = key(ge=0, le=1)
    layout_kl_pass: float = key(ge=0)
    reference: Mapping[str, Tolerance] = key()  # op name (or "default") -> its tolerance

    def problems(self) -> list[str]:
        if self.kl_pass > self.kl_fail:
            return [f"kl_pass: expected 0 <= kl_pass <= kl_fail ({self.kl_fail}), found {self.kl_pass}"]
        return []


@dataclass(frozen=True, kw_only=True)
class Bench:
    """``bench``: the scorer's statistics and limits. ``noise_pct`` is resolved: the machine
    profile's own value when it sets one, else the section's."""
    bootstrap: int = key(ge=1)
    noise_pct: float = key(ge=0)
    guard_pct: float = key(ge=0)
    max_op_rel_rms: float = key(gt=0)
    max_hidden_pct: float = key(ge=0)
    state_sketch_rel: float = key(gt=0)
    timed_band_alpha: float = key(gt=0, lt=1)
    reverify_pct: float = key(gt=0)
    reverify_rounds: int = key(ge=1)
    reference_calls_per_op: int = key(ge=1)
    timeout_s: float = key(gt=0)
    eager_baseline_timeout_s: float = key(gt=0)
    compile_baseline_timeout_s: float = key(gt=0)


@dataclass(frozen=True, kw_only=True)
class Limit:
    """``step`` / ``profile``: how long one such run may take."""
    timeout_s: float = key(gt=0)


@dataclass(frozen=True, kw_only=True)
class Agent:
    """``agent``: the backend that proposes changes, and every setting a backend reads (each
    backend reads the ones its comment names; the others are left at their defaults)."""
    backend: Literal["anthropic", "claude-code", "command", "tuner", "replay"] = key()
    model: str = "claude-sonnet-4-5"  # anthropic, claude-code
    max_turns: int = key(40, ge=1, le=1000)  # anthropic: API calls; claude-code: turns
    # USD one attempt may cost: claude-code passes it to the CLI, anthropic stops there,
    # command exports it as KERN_MAX_BUDGET_USD for its command line; null: no cap per attempt
    max_budget_usd: float | None = key(5.0, gt=0)
    max_tokens: int = key(8192, ge=1, le=1_000_000)  # anthropic: per response
    # anthropic: USD per million tokens [input, output] by model-name prefix, over its table
    prices: Mapping[str, tuple[float, float]] = key({}, ge=0,
                                                     expect="a mapping of model-name prefixes to "
                                                            "[input, output] USD per million tokens, "
                                                            "each >= 0")
    base_url: str = ""  # anthropic: the Messages API's address ("": the SDK's default)
    max_retries: int = key(2, ge=0, le=20)  # anthropic: retries of a failed API call
    quick_timeout_s: float = key(600.0, gt=0)  # anthropic: one run of the quick test or bench
    command: str = ""  # command: the shell line (the brief on its stdin)
    pass_env: tuple[str, ...] = key((), check=_env_names)  # command: variables it may see
    timeout_s: float = key(3600.0, gt=0)  # every backend: wall-clock limit of one attempt
    replay_dir: str = ""  # replay: the folder of patches (relative to the repository root)
    tunables: tuple[str, ...] | None = key(None, nonempty=True)  # tuner: glob patterns, in order

    def problems(self) -> list[str]:
        if self.backend == "command" and not self.command.strip():
            return ["command: expected the shell command line the command backend runs, found ''"]
        if self.backend == "replay" and not self.replay_dir.strip():
            return ["replay_dir: expected the folder of patches the replay backend applies, found ''"]
        if self.tunables is not None and not all(x.strip() for x in self.tunables):
            return [f"tunables: expected a non-empty list of glob patterns (the tuner tries "
                    f"matching tunables in this order), found {list(self.tunables)!r}"]
        return []

    def options(self) -> dict:
        """The section as JSON data (what the agent process reads back: :func:`agent_section`)."""
        return _plain(self)


BACKENDS = get_args(get_type_hints(Agent)["backend"])


@dataclass(frozen=True, kw_only=True)
class Loop:
    """``loop``: how often it ticks, how many agents at once, when it stops by itself."""
    every: str = key(expect=f"a duration: {DURATION_FORMS}", check=_duration)
    # the shortest time between ticks kern loop --every and loop.every may ask for
    min_every: str = key("1s", check=_min_every)
    concurrency: int = key(ge=0, le=256)  # 0: judge what is queued, start no agent
    stop_after_idle_ticks: int = key(ge=1)
    trial_merge_parts: int = key(0, ge=0, check=_trial_parts)
    trial_merge_recent: int = key(12, ge=2)
    # profile rows the planner may brief (op names, or 'dense projections (cuBLAS)'); None: every row
    targets: tuple[str, ...] | None = key(None, nonempty=True)

    @property
    def every_s(self) -> float:
        return parse_duration(self.every)

    @property
    def min_every_s(self) -> float:
        return parse_duration(self.min_every)

    def problems(self) -> list[str]:
        if parse_duration(self.every) is None or parse_duration(self.min_every) is None:
            return []  # each key's own check said why
        bad = interval_problem(self.every_s, self.min_every_s)
        return [f"every: {bad}"] if bad else []


@dataclass(frozen=True, kw_only=True)
class Farm:
    """``farm``: where judgments run (harness/farm.py)."""
    slots: Union[Literal["auto"], tuple[Union[str, int], ...]] = key(
        "auto", ge=0, nonempty=True, expect="'auto' or a non-empty list of GPU ids (\"0\", \"2,3\", "
                                            "or integers >= 0) or CPU slot names (\"cpu0\")")
    gpus: int = key(1, ge=1)
    kind: Literal["local", "ray"] = "local"
    address: str = ""
    isolate: bool = False  # the scorer's rounds of judgments on one host take turns


FARM_KINDS = get_args(get_type_hints(Farm)["kind"])


@dataclass(frozen=True, kw_only=True)
class Budgets:
    """``budgets``: the loop stops when one is spent (attempts in flight finish first)."""
    attempts: int = key(ge=1)
    tokens: int = key(ge=1)
    wall_hours: float = key(gt=0)
    cost_usd: float = key(50.0, gt=0)  # the agents' recorded cost, summed over the ledger


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


# kern.yaml's top-level keys: the mapping sections, the two lists of globs, the profiles
_SECTIONS = {"target": Target, "test": TestGate, "bench": Bench, "step": Limit, "profile": Limit,
             "agent": Agent, "loop": Loop, "farm": Farm, "budgets": Budgets}
_LISTS = ("editable", "protected")
# how every gate side is confined (gates/sandbox.py MODES: the same names, a test holds them)
SANDBOX_MODES = ("auto", "namespaces", "landlock", "user", "off")
_SCALARS = {"sandbox": (Literal[SANDBOX_MODES], "auto")}
_MACHINES = ("gpu", "cpu")
TOP_LEVEL = (*_SECTIONS, *_LISTS, *_SCALARS, "profiles")


# ----------------------------------------------------------------------- reading
_UNIONS = (Union, types.UnionType)


class _Bad(Exception):
    """A value that is not of its field's type."""


def _describe(typ, rng: Range | None = None, nonempty: bool = False) -> str:
    """What a value of ``typ`` is, in words (every number within ``rng``)."""
    within = f" {rng.text()}" if rng is not None else ""
    origin, args = get_origin(typ), get_args(typ)
    if typ is bool:
        return "true or false"
    if typ is int:
        return "an integer" + within
    if typ is float:
        return "a number" + within
    if typ is str:
        return "a string"
    if typ is type(None):
        return "null"
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in args)
    if origin in _UNIONS:
        return " or ".join(_describe(a, rng, nonempty) for a in args)
    if origin is tuple:
        some = "a non-empty list" if nonempty else "a list"
        if len(args) == 2 and args[1] is Ellipsis:
            return f"{some}, each {_describe(args[0], rng)}"
        return f"a list of {len(args)} ({', '.join(_describe(a, rng) for a in args)})"
    if origin in (Mapping, dict) or dataclasses.is_dataclass(typ):
        return "a mapping"
    return getattr(typ, "__name__", str(typ))


def _convert(value, typ):
    """``value`` (parsed YAML) as ``typ``: lists become tuples, mappings read-only; :class:`_Bad`
    when it is not one. No coercion: ``"8"`` is not an integer, ``true`` not a number."""
    origin, args = get_origin(typ), get_args(typ)
    if origin in _UNIONS:
        for a in args:
            try:
                return _convert(value, a)
            except _Bad:
                pass
        raise _Bad
    if typ is type(None):
        if value is None:
            return None
        raise _Bad
    if origin is Literal:
        if isinstance(value, str) and value in args:
            return value
        raise _Bad
    if typ is bool:
        if isinstance(value, bool):
            return value
        raise _Bad
    if typ is int or typ is float:
        if isinstance(value, bool) or not isinstance(value, (int, float) if typ is float else int):
            raise _Bad
        return typ(value)
    if typ is str:
        if isinstance(value, str):
            return value
        raise _Bad
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise _Bad
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(v, args[0]) for v in value)
        if len(value) != len(args):
            raise _Bad
        return tuple(_convert(v, a) for v, a in zip(value, args))
    if origin in (Mapping, dict):
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise _Bad
        return MappingProxyType({k: _convert(v, args[1]) for k, v in value.items()})
    raise TypeError(f"harness/settings.py: no reader for the annotation {typ!r}")


def _numbers(value):
    """Every number a converted value holds (not booleans)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, (int, float)):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _numbers(v)
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _numbers(v)


def _keys(cls) -> list:
    return [f for f in fields(cls) if not f.metadata.get("derived")]


def _unread(path: str, known) -> str:
    return (f"{path}: expected one of {', '.join(sorted(known))}, found a key no code reads; "
            f"remove it or correct its spelling")


def _section(cls, raw, where: str, problems: list, **derived_values):
    """Section ``cls`` read from ``raw`` (kern.yaml's mapping at ``where``; None: absent),
    each problem appended to ``problems``; None when there were any."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        problems.append(f"{where}: expected a mapping of {', '.join(f.name for f in _keys(cls))}, "
                        f"found {raw!r}")
        return None
    before = len(problems)
    hints = get_type_hints(cls)
    values = {}
    for f in _keys(cls):
        path, typ, meta = f"{where}.{f.name}", hints[f.name], f.metadata
        rng, nonempty = meta.get("range"), meta.get("nonempty", False)
        expect = meta.get("expect") or _describe(typ, rng, nonempty)
        if f.name not in raw:
            if f.default is _REQUIRED and f.default_factory is _REQUIRED:
                problems.append(f"{path}: expected {expect}, found nothing (key missing)")
            continue
        value = raw[f.name]
        if get_origin(typ) in (Mapping, dict) and dataclasses.is_dataclass(get_args(typ)[1]):
            if not isinstance(value, dict):
                problems.append(f"{path}: expected a mapping of names to "
                                f"{', '.join(x.name for x in _keys(get_args(typ)[1]))}, found {value!r}")
                continue
            values[f.name] = MappingProxyType({k: _section(get_args(typ)[1], v, f"{path}.{k}", problems)
                                               for k, v in value.items()})
            continue
        try:
            got = _convert(value, typ)
        except _Bad:
            problems.append(f"{path}: expected {expect}, found {value!r}")
            continue
        if (rng is not None and not all(rng.holds(x) for x in _numbers(got))) \
                or (nonempty and isinstance(got, (tuple, Mapping)) and not got):
            problems.append(f"{path}: expected {expect}, found {value!r}")
            continue
        why = meta.get("check") and meta["check"](got)
        if why:
            problems.append(f"{path}: expected {why}, found {value!r}")
            continue
        values[f.name] = got
    known = {f.name for f in _keys(cls)}
    problems += [_unread(f"{where}.{k}", known) for k in raw if k not in known]
    if len(problems) > before:
        return None
    obj = cls(**values, **derived_values)
    more = obj.problems() if hasattr(obj, "problems") else []
    problems += [f"{where}.{p}" for p in more]
    return None if more else obj


def _plain(obj):
    """A typed section back as JSON data (tuples as lists, mappings as dicts)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: _plain(getattr(obj, f.name)) for f in _keys(type(obj))}
    if isinstance(obj, tuple):
        return [_plain(v) for v in obj]
    if isinstance(obj, Mapping):
        return {k: _plain(v) for k, v in obj.items()}
    return obj


def _read(data, cuda: bool, profile: dict | None = None) -> tuple[Resolved | None, list[str]]:
    """Pure: (the typed settings of this machine, []) or (None, every problem)."""
    if not isinstance(data, dict):
        return None, [f"kern.yaml: expected a mapping at the top level, found {type(data).__name__}"]
    problems: list[str] = []
    out = {}
    for name, cls in _SECTIONS.items():
        out[name] = _section(cls, data.get(name), name, problems)
    for name in _LISTS:
        value = data.get(name)
        try:
            out[name] = _convert(value, tuple[str, ...])
        except _Bad:
            problems.append(f"{name}: expected a list of glob patterns, found "
                            + ("nothing (key missing)" if name not in data else repr(value)))
    for name, (typ, default) in _SCALARS.items():
        value = data.get(name, default)
        try:
            out[name] = _convert(value, typ)
        except _Bad:
            problems.append(f"{name}: expected {_describe(typ)}, found {value!r}")
    profs = data.get("profiles")
    machines = {}
    if not isinstance(profs, dict):
        problems.append("profiles: expected a mapping with the profiles 'gpu' and 'cpu', found "
                        + ("nothing (key missing)" if "profiles" not in data else repr(profs)))
    else:
        problems += [f"profiles.{n}: expected only the profiles 'gpu' and 'cpu', found {n!r}; "
                     f"remove it" for n in profs if n not in _MACHINES]
        for n in _MACHINES:
            if n not in profs:
                problems.append(f"profiles.{n}: expected a machine profile, found nothing (key missing)")
                continue
            machines[n] = _section(Profile, profs[n], f"profiles.{n}", problems, name=n)
    name = "gpu" if cuda else "cpu"
    if profile is not None:
        machines[name] = _section(Profile, profile, f"profiles.{name} (as handed over)", problems,
                                  name=name)
    problems += [_unread(k, TOP_LEVEL) for k in data if k not in TOP_LEVEL]
    if problems:
        return None, problems
    machine = machines[name]
    bench = out["bench"]
    if machine.noise_pct is not None:  # the profile's value wins (gates.scorer.PROFILE_OVERRIDES)
        bench = dataclasses.replace(bench, noise_pct=machine.noise_pct)
    return Resolved(machine=machine, **{**out, "bench": bench}), []


def validate(data) -> list[str]:
    """Every problem of a parsed kern.yaml (both machine profiles), as 'key: expected X,
    found Y' sentences; [] when it is valid."""
    return _read(data, cuda=False)[1]


def resolve(data: dict, cuda: bool, profile: dict | None = None) -> Resolved:
    """Pure: the typed settings of this machine from parsed kern.yaml data (:class:`SettingsError`
    lists the problems). ``profile``: the machine profile as handed to the gates when a caller
    narrowed it (tests do); by default kern.yaml's ``profiles.gpu`` with CUDA, ``profiles.cpu``
    without. The profile's values win over the top-level sections' (of those only
    ``bench.noise_pct`` can be set in both)."""
    resolved, problems = _read(data, cuda, profile)
    if problems:
        raise SettingsError(f"kern.yaml has {len(problems)} problem(s) (edit it):\n  "
                            + "\n  ".join(problems))
    return resolved


def agent_section(raw: dict) -> Agent:
    """Pure: kern.yaml's ``agent`` mapping as the typed section (how the agent process reads
    the settings the loop handed it); :class:`SettingsError` names each problem."""
    problems: list[str] = []
    agent = _section(Agent, raw, "agent", problems)
    if problems:
        raise SettingsError("; ".join(problems))
    return agent


# ----------------------------------------------------------------------- the file
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


def apply_overrides(data: dict, overrides) -> dict:
    """Pure: a copy of parsed kern.yaml data with each ``KEY=VALUE`` of ``kern --set`` applied:
    KEY a dotted path (``loop.every``, ``profiles.cpu.rounds``; a key holding dots, such as
    ``test.reference.moe.router``, is found as written), VALUE read as YAML (``5m``, ``10``,
    ``[cpu0, cpu1]``, ``null``). What the result breaks, validation reports."""
    import copy

    out = copy.deepcopy(data) if isinstance(data, dict) else data
    for item in overrides:
        key, eq, text = item.partition("=")
        if not eq or not key.strip():
            raise SettingsError(f"--set {item}: expected KEY=VALUE (e.g. --set loop.every=5m), "
                                f"found no '='" if not eq else f"--set {item}: expected a key before '='")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            value = text  # not YAML: the text itself
        node, parts, walked = out, key.strip().split("."), []
        while True:
            if not isinstance(node, dict):
                raise SettingsError(f"--set {item}: expected a section at {'.'.join(walked)}, "
                                    f"found {node!r}")
            # the longest run of parts naming a key here (op names hold dots), else the first
            j = next((j for j in range(len(parts), 0, -1) if ".".join(parts[:j]) in node), 1)
            name, parts = ".".join(parts[:j]), parts[j:]
            walked.append(name)
            if not parts:
                node[name] = value
                break
            if node.get(name) is None:  # a section kern.yaml leaves out (farm): made here
                node[name] = {}
            node = node[name]
    return out


def duplicate_keys(node, where: str = "") -> list[tuple[str, int, int]]:
    """Pure over a composed YAML node: every key a mapping holds twice, as (dotted path, first
    line, second line), in document order."""
    out = []
    if isinstance(node, yaml.MappingNode):
        seen: dict = {}
        for k, v in node.value:
            name = k.value if isinstance(k, yaml.ScalarNode) else str(k.value)
            path = f"{where}.{name}" if where else name
            if name in seen:
                out.append((path, seen[name], k.start_mark.line + 1))
            else:
                seen[name] = k.start_mark.line + 1
            out += duplicate_keys(v, path)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            out += duplicate_keys(v, f"{where}[{i}]")
    return out


def load(path: str | Path, overrides=()) -> Settings:
    """kern.yaml at ``path``, with ``kern --set`` ``overrides`` (``KEY=VALUE`` each) applied for
    this run only, validated; the digest covers the file and the overrides."""
    path = Path(path)
    if not path.exists():
        raise SettingsError(f"kern.yaml: expected a file at {path}, found none "
                            f"(run from the repository root or pass --config)")
    if not path.is_file():
        raise SettingsError(f"kern.yaml: expected a file at {path}, found a "
                            f"{'folder' if path.is_dir() else 'special file'} "
                            f"(--config names the settings file itself)")
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise SettingsError(f"kern.yaml: cannot read {path}: {e.strerror} (expected a file this "
                            f"user can read)") from None
    try:
        twice = duplicate_keys(yaml.compose(raw, Loader=yaml.SafeLoader))
        data = yaml.safe_load(raw)
    except yaml.YAMLError as e:
        raise SettingsError(f"{path}: not valid YAML: {e}") from None
    if twice:
        raise SettingsError(f"{path}: every key once, found " + "; ".join(
            f"{k} on lines {a} and {b}" for k, a, b in twice)
            + " (YAML would keep the last silently): delete the one you did not mean")
    data = apply_overrides(data, overrides)
    problems = validate(data)
    if problems:
        where = f"{path} with {' '.join('--set ' + o for o in overrides)}" if overrides else str(path)
        raise SettingsError(f"{where} has {len(problems)} problem(s):\n  " + "\n  ".join(problems))
    digest = hashlib.sha256(raw + b"".join(b"\n--set " + o.encode() for o in overrides))
    return Settings(data, path, digest.hexdigest()[:16])
