"""``kern.yaml``: load it, and resolve it once into the typed settings of this machine.

Two steps, two types. :func:`load` reads the file into a :class:`SettingsFile`: its parsed
data with this run's ``kern --set`` applied, validated for both machines, its path and digest.
``SettingsFile.resolve(cuda)`` gives the :class:`Resolved` settings of one machine: every
section typed, the machine profile of this machine chosen (``profiles.gpu`` when CUDA is
available, ``profiles.cpu`` otherwise) and applied. Each consumer takes its own typed section
of ``Resolved``: the gates theirs (gates/settings.py: ``AccuracySettings``, ``ScorerSettings``,
``MachineProfile``, ``Target``), the loop, the agents and the farm the ones defined here.

The sections are pydantic dataclasses: their annotations are the schema (gates/settings.py
says how a key, its type, range and further rules are written), pydantic converts and checks
the parsed YAML against them, and this module turns what pydantic found into one sentence per
key, ``key: expected X, found Y``, the words of X made from the same annotations
(:func:`describe`). A key no field holds is a problem too (a typo, or a setting that was
removed: no code would read it). The machine profile holds what depends on the machine; of the
top-level sections it may set ``bench.noise_pct`` too, and the profile's value wins
(:func:`resolve`: the one place of that rule). Loading imports nothing of the gates but their
sections (gates/settings.py, which imports nothing of gates/, torch or the kernels).
"""
from __future__ import annotations

import dataclasses
import hashlib
import re
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal, Union, get_args, get_origin, get_type_hints

import yaml
from annotated_types import Ge, Gt, Le, Lt, MinLen
from pydantic import AfterValidator, TypeAdapter, ValidationError

from gates.settings import (LISTED, AccuracySettings, Bool, Expect, Float, Int, MachineProfile,
                            ScorerSettings, SectionProblem, Str, Target, section)


class SettingsError(ValueError):
    """kern.yaml is wrong; the user must edit it."""


# ----------------------------------------------------------------------- the field rules
@dataclass(frozen=True)
class Range:
    """Where the numbers of a key's value must lie (the ends: ``lo``/``hi``, excluded when
    ``*_open``), as annotated_types' ``Ge``/``Gt``/``Le``/``Lt`` on the number say: pydantic
    checks them, this says them in words."""
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    @staticmethod
    def of(metadata) -> Range | None:
        """The range the annotated_types bounds among ``metadata`` draw, or None."""
        r = {}
        for m in metadata:
            if isinstance(m, (Ge, Gt)):
                r.update(lo=m.ge if isinstance(m, Ge) else m.gt, lo_open=isinstance(m, Gt))
            elif isinstance(m, (Le, Lt)):
                r.update(hi=m.le if isinstance(m, Le) else m.lt, hi_open=isinstance(m, Lt))
        return Range(**r) if r else None

    def text(self) -> str:
        parts = []
        if self.lo is not None:
            parts.append(f"{'>' if self.lo_open else '>='} {_num(self.lo)}")
        if self.hi is not None:
            parts.append(f"{'<' if self.hi_open else '<='} {_num(self.hi)}")
        return " and ".join(parts)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def rule(check):
    """Annotated metadata: a further rule on a key's value, ``check(value) -> None | str``
    (what was expected, when the value breaks it)."""
    def run(value):
        why = check(value)
        if why:
            raise ValueError(why)
        return value

    return AfterValidator(run)


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


# ----------------------------------------------------------------------- the harness's sections
# (the gates' sections, and the rules of writing one, are gates/settings.py's)
Seconds = Annotated[Float, Gt(0)]


@section
class Limit:
    """``step`` / ``profile``: how long one such run may take (``profile``: kern profile's, the
    op-time profile of a step)."""
    timeout_s: Seconds


@section
class Agent:
    """``agent``: the backend that proposes changes, and every setting a backend reads (each
    backend reads the ones its comment names; the others are left at their defaults)."""
    backend: Literal["anthropic", "claude-code", "command", "tuner", "replay"]
    model: Str = "claude-sonnet-4-5"  # anthropic, claude-code
    max_turns: Annotated[Int, Ge(1), Le(1000)] = 40  # anthropic: API calls; claude-code: turns
    # USD one attempt may cost: claude-code passes it to the CLI, anthropic stops there,
    # command exports it as KERN_MAX_BUDGET_USD for its command line; null: no cap per attempt
    max_budget_usd: Annotated[Float, Gt(0)] | None = 5.0
    max_tokens: Annotated[Int, Ge(1), Le(1_000_000)] = 8192  # anthropic: per response
    # anthropic: USD per million tokens [input, output] by model-name prefix, over its table
    prices: Annotated[Mapping[str, Annotated[tuple[Annotated[Float, Ge(0)], Annotated[Float, Ge(0)]],
                                             LISTED]],
                      Expect("a mapping of model-name prefixes to [input, output] USD per "
                             "million tokens, each >= 0")] = field(default_factory=dict)
    base_url: Str = ""  # anthropic: the Messages API's address ("": the SDK's default)
    max_retries: Annotated[Int, Ge(0), Le(20)] = 2  # anthropic: retries of a failed API call
    quick_timeout_s: Seconds = 600.0  # anthropic: one run of the quick test or bench
    command: Str = ""  # command: the shell line (the brief on its stdin)
    pass_env: Annotated[tuple[Str, ...], LISTED, rule(_env_names)] = ()  # command: variables it may see
    timeout_s: Seconds = 3600.0  # every backend: wall-clock limit of one attempt
    replay_dir: Str = ""  # replay: the folder of patches (relative to the repository root)
    # tuner: glob patterns, in order
    tunables: Annotated[tuple[Str, ...], MinLen(1), LISTED] | None = None

    def __post_init__(self):
        if self.backend == "command" and not self.command.strip():
            raise SectionProblem("command: expected the shell command line the command backend "
                                 "runs, found ''")
        if self.backend == "replay" and not self.replay_dir.strip():
            raise SectionProblem("replay_dir: expected the folder of patches the replay backend "
                                 "applies, found ''")
        if self.tunables is not None and not all(x.strip() for x in self.tunables):
            raise SectionProblem(f"tunables: expected a non-empty list of glob patterns (the tuner "
                                 f"tries matching tunables in this order), found {list(self.tunables)!r}")

    def options(self) -> dict:
        """The section as JSON data (what the agent process reads back: :func:`agent_section`)."""
        return TypeAdapter(Agent).dump_python(self, mode="json")


BACKENDS = get_args(get_type_hints(Agent)["backend"])


@section
class Loop:
    """``loop``: how often it ticks, how many agents at once, when it stops by itself."""
    every: Annotated[Str, Expect(f"a duration: {DURATION_FORMS}"), rule(_duration)]
    # the shortest time between ticks kern loop --every and loop.every may ask for
    min_every: Annotated[Str, rule(_min_every)] = "1s"
    concurrency: Annotated[Int, Ge(0), Le(256)]  # 0: judge what is queued, start no agent
    stop_after_idle_ticks: Annotated[Int, Ge(1)]
    # agents in a row that end without a proposal before the loop stops (0: never)
    stop_after_agent_crashes: Annotated[Int, Ge(0)] = 3
    trial_merge_parts: Annotated[Int, Ge(0), rule(_trial_parts)] = 0
    trial_merge_recent: Annotated[Int, Ge(2)] = 12
    # seconds the wall budget's deadline counts for a judgment before this loop has made one
    # (later: its longest so far); 0: the loop's first judgment always starts
    first_judgment_s: Annotated[Float, Ge(0)] = 0.0
    # profile rows the planner may brief (op names, or 'dense projections (cuBLAS)'); None: every row
    targets: Annotated[tuple[Str, ...], MinLen(1), LISTED] | None = None

    @property
    def every_s(self) -> float:
        return parse_duration(self.every)

    @property
    def min_every_s(self) -> float:
        return parse_duration(self.min_every)

    def __post_init__(self):
        bad = interval_problem(self.every_s, self.min_every_s)
        if bad:
            raise SectionProblem(f"every: {bad}")


@section
class Farm:
    """``farm``: where judgments run (harness/farm.py)."""
    slots: Annotated[Union[Literal["auto"],
                           Annotated[tuple[Union[Str, Annotated[Int, Ge(0)]], ...], MinLen(1), LISTED]],
                     Expect("'auto' or a non-empty list of GPU ids (\"0\", \"2,3\", or integers "
                            ">= 0) or CPU slot names (\"cpu0\")")] = "auto"
    gpus: Annotated[Int, Ge(1)] = 1
    kind: Literal["local", "ray"] = "local"
    address: Str = ""
    isolate: Bool = False  # the scorer's rounds of judgments on one host take turns


FARM_KINDS = get_args(get_type_hints(Farm)["kind"])


@section
class Budgets:
    """``budgets``: the loop stops when one is spent (attempts in flight finish first; past
    ``wall_hours`` less its longest judgment, none starts: they wait queued)."""
    attempts: Annotated[Int, Ge(1)]
    tokens: Annotated[Int, Ge(1)]
    wall_hours: Annotated[Float, Gt(0)]
    cost_usd: Annotated[Float, Gt(0)] = 50.0  # the agents' recorded cost, summed over the ledger


@dataclass(frozen=True)
class Resolved:
    """kern.yaml resolved for one machine (:func:`resolve`): each section typed, the machine
    profile of this machine chosen and its ``noise_pct`` applied to ``bench``. Each consumer
    takes its section: the accuracy gate ``test``, the scorer ``bench`` (with ``test`` as its
    thresholds), both ``machine`` and ``target``; the loop, the agents, the farm theirs."""
    machine: MachineProfile
    target: Target
    editable: tuple[str, ...]
    protected: tuple[str, ...]
    test: AccuracySettings
    bench: ScorerSettings
    step: Limit
    profile: Limit  # kern profile's limit (the op-time profile), not the machine profile
    agent: Agent
    loop: Loop
    farm: Farm
    budgets: Budgets
    sandbox: str = "auto"  # how candidate code is confined (gates/launch/sandbox.py MODES)


# kern.yaml's top-level keys: the mapping sections, the two lists of globs, the profiles
_SECTIONS = {"target": Target, "test": AccuracySettings, "bench": ScorerSettings, "step": Limit,
             "profile": Limit, "agent": Agent, "loop": Loop, "farm": Farm, "budgets": Budgets}
_LISTS = ("editable", "protected")
# how every gate side is confined (gates/launch/sandbox.py MODES: the same names, a test holds them)
SANDBOX_MODES = ("auto", "namespaces", "landlock", "user", "off")
_SCALARS = {"sandbox": (Literal[SANDBOX_MODES], "auto")}
_MACHINES = ("gpu", "cpu")
TOP_LEVEL = (*_SECTIONS, *_LISTS, *_SCALARS, "profiles")


# ----------------------------------------------------------------------- reading
_UNIONS = (Union, types.UnionType)


def unwrap(typ) -> tuple[object, list]:
    """(the type under any ``Annotated``, the metadata it carried)."""
    if get_origin(typ) is Annotated:
        base, *meta = get_args(typ)
        return base, meta
    return typ, []


def describe(typ) -> str:
    """What a value of the annotation ``typ`` is, in words: its :class:`Expect` text, else its
    type's with the range of its numbers (``an integer >= 1``, ``a non-empty list, each a
    number > 0``, ``a number > 0 or null``)."""
    typ, meta = unwrap(typ)
    said = [m.text for m in meta if isinstance(m, Expect)]
    if said:
        return said[0]
    rng = Range.of(meta)
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
        return " or ".join(describe(a) for a in args)
    if origin is tuple:
        some = "a non-empty list" if any(isinstance(m, MinLen) and m.min_length for m in meta) \
            else "a list"
        if len(args) == 2 and args[1] is Ellipsis:
            return f"{some}, each {describe(args[0])}"
        return f"a list of {len(args)} ({', '.join(describe(a) for a in args)})"
    if origin in (Mapping, dict) or dataclasses.is_dataclass(typ):
        return "a mapping"
    return getattr(typ, "__name__", str(typ))


def keys(cls) -> list[str]:
    """The keys of section ``cls`` (its fields), in order."""
    return [f.name for f in dataclasses.fields(cls)]


def _entries(typ):
    """The section each entry of a ``Mapping[str, <section>]`` key is (``test.reference``'s
    :class:`~gates.settings.Tolerance`), else None."""
    typ, _ = unwrap(typ)
    if get_origin(typ) in (Mapping, dict) and dataclasses.is_dataclass(get_args(typ)[1]):
        return get_args(typ)[1]
    return None


def _unread(path: str, known) -> str:
    return (f"{path}: expected one of {', '.join(sorted(known))}, found a key no code reads; "
            f"remove it or correct its spelling")


def _section(cls, raw, where: str, problems: list):
    """Section ``cls`` read from ``raw`` (kern.yaml's mapping at ``where``; None: absent),
    each problem appended to ``problems`` as one sentence per key; None when there were any."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        problems.append(f"{where}: expected a mapping of {', '.join(keys(cls))}, found {raw!r}")
        return None
    strange = [k for k in raw if not isinstance(k, str)]
    if strange:  # a key YAML read as a number or a list names no field
        problems += [_unread(f"{where}.{k}", keys(cls)) for k in strange]
        return None
    try:
        return TypeAdapter(cls).validate_python(raw)
    except ValidationError as e:
        problems += _explain(cls, raw, where, e.errors())
        return None


def _explain(cls, raw: dict, where: str, errors: list) -> list[str]:
    """Pydantic's errors on section ``cls`` as one ``key: expected X, found Y`` per key (a key
    that fails several ways, once per member of a union, gets one sentence: X names them all)."""
    hints = get_type_hints(cls, include_extras=True)
    out, said = [], set()
    for er in errors:
        loc, kind = er["loc"], er["type"]
        why = (er.get("ctx") or {}).get("error")
        if not loc:  # a rule across the section's keys (its __post_init__)
            out.append(f"{where}.{why}" if isinstance(why, SectionProblem) else
                       f"{where}: expected a mapping of {', '.join(keys(cls))}, found {raw!r}")
            continue
        name, path = loc[0], f"{where}.{loc[0]}"
        if name not in hints or (kind in ("unexpected_keyword_argument", "extra_forbidden")
                                 and len(loc) == 1):
            out.append(_unread(path, keys(cls)))
            continue
        entry = _entries(hints[name])
        if entry is not None and len(loc) > 1 and isinstance(raw.get(name), dict):
            if (name, loc[1]) not in said:  # each entry a section of its own
                said.add((name, loc[1]))
                _section(entry, raw[name][loc[1]], f"{path}.{loc[1]}", out)
            continue
        if name in said:
            continue
        said.add(name)
        if kind == "missing" and len(loc) == 1:
            out.append(f"{path}: expected {describe(hints[name])}, found nothing (key missing)")
        elif entry is not None:
            out.append(f"{path}: expected a mapping of names to {', '.join(keys(entry))}, "
                       f"found {raw[name]!r}")
        elif kind == "value_error" and isinstance(why, ValueError):  # a rule()'s own words
            out.append(f"{path}: expected {why}, found {raw[name]!r}")
        else:
            out.append(f"{path}: expected {describe(hints[name])}, found {raw[name]!r}")
    return out


def _value(typ, value, where: str, problems: list):
    """A top-level value that is no section (the lists of globs, ``sandbox``), read as ``typ``."""
    try:
        return TypeAdapter(typ).validate_python(value)
    except ValidationError:
        problems.append(f"{where}: expected {describe(typ)}, found {value!r}")
        return None


def _read(data, cuda: bool) -> tuple[Resolved | None, list[str]]:
    """Pure: (the typed settings of this machine, []) or (None, every problem)."""
    if not isinstance(data, dict):
        return None, [f"kern.yaml: expected a mapping at the top level, found {type(data).__name__}"]
    problems: list[str] = []
    out = {}
    for name, cls in _SECTIONS.items():
        out[name] = _section(cls, data.get(name), name, problems)
    for name in _LISTS:
        if name not in data:
            problems.append(f"{name}: expected a list of glob patterns, found nothing (key missing)")
            continue
        before = len(problems)
        out[name] = _value(Annotated[tuple[Str, ...], LISTED], data[name], name, problems)
        if len(problems) > before:
            problems[-1] = f"{name}: expected a list of glob patterns, found {data[name]!r}"
    for name, (typ, default) in _SCALARS.items():
        out[name] = _value(typ, data.get(name, default), name, problems)
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
            machines[n] = _section(MachineProfile, profs[n], f"profiles.{n}", problems)
    problems += [_unread(k, TOP_LEVEL) for k in data if k not in TOP_LEVEL]
    if problems:
        return None, problems
    machine = machines["gpu" if cuda else "cpu"]
    bench = out["bench"]
    if machine.noise_pct is not None:  # the profile's value wins: the one rule across sections
        bench = dataclasses.replace(bench, noise_pct=machine.noise_pct)
    return Resolved(machine=machine, **{**out, "bench": bench}), []


def validate(data) -> list[str]:
    """Every problem of a parsed kern.yaml (both machine profiles), as 'key: expected X,
    found Y' sentences; [] when it is valid."""
    return _read(data, cuda=False)[1]


def resolve(data: dict, cuda: bool) -> Resolved:
    """Pure: the typed settings of this machine from parsed kern.yaml data (:class:`SettingsError`
    lists the problems): kern.yaml's ``profiles.gpu`` with CUDA, ``profiles.cpu`` without. The
    profile's values win over the top-level sections' (of those only ``bench.noise_pct`` can be
    set in both)."""
    resolved, problems = _read(data, cuda)
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
class SettingsFile:
    """kern.yaml as loaded (:func:`load`): the parsed file with this run's ``--set`` applied
    (``data``, validated for both machine profiles), its path and digest. What a consumer
    reads is :meth:`resolve`'s :class:`Resolved`, never ``data``."""
    data: dict
    path: Path
    digest: str  # sha256 of the file's bytes and the --set overrides (goes into every result JSON)

    def resolve(self, cuda: bool) -> Resolved:
        """The typed settings of this machine (``cuda``: the gpu profile, else the cpu one)."""
        return resolve(self.data, cuda)


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


def load(path: str | Path, overrides=()) -> SettingsFile:
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
    return SettingsFile(data, path, digest.hexdigest()[:16])
