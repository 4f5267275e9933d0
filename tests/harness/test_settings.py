"""kern.yaml resolved once: every key a typed field, the machine profile's values applied in one
place, the profiles' values validated with errors that name the key."""
from __future__ import annotations

import copy
from dataclasses import fields, is_dataclass
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings as hsettings, strategies as st

from harness.settings import SettingsError, apply_overrides, load, resolve, validate

KERN_YAML = Path(__file__).resolve().parents[2] / "kern.yaml"
DATA = yaml.safe_load(KERN_YAML.read_text())


def walk(value, path=""):
    """Every key path of a parsed YAML mapping, down to the leaves (lists are leaves)."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from walk(v, f"{path}.{k}" if path else k)
    else:
        yield path


def held(resolved, path: str, machine: str = "cpu") -> bool:
    """Whether ``path`` of kern.yaml reaches a field of the typed settings resolved for
    ``machine``: sections are dataclasses, ``profiles.<machine>`` is ``machine``, mappings
    inside a field (the per-op reference tolerances) are data of that field."""
    parts = path.split(".")
    if parts[0] == "profiles":
        if len(parts) < 3 or parts[1] != machine:
            return True  # the other machine's profile: checked by resolving for that machine
        obj, parts = resolved.machine, parts[2:]
    else:
        obj = resolved
    for part in parts:
        if not is_dataclass(obj):
            return True  # inside a mapping-valued field (test.reference)
        if part not in {f.name for f in fields(obj)}:
            return False
        obj = getattr(obj, part)
    return True


@pytest.mark.parametrize("cuda", [False, True])
def test_every_key_of_kern_yaml_is_a_field_of_the_typed_settings(cuda):
    resolved = resolve(DATA, cuda)
    unread = [p for p in walk(DATA) if not held(resolved, p, "gpu" if cuda else "cpu")]
    assert unread == [], f"kern.yaml keys no code reads (remove them or add a field): {unread}"
    assert resolved.machine == resolve(DATA, cuda).machine
    assert (resolved.machine.model, resolved.machine.buckets) == \
        (DATA["profiles"]["gpu" if cuda else "cpu"]["model"],
         tuple(DATA["profiles"]["gpu" if cuda else "cpu"]["buckets"]))


@pytest.mark.parametrize("where", ["bench.warmup", "profiles.cpu.warmup", "step.retries", "timeouts"])
def test_a_key_no_code_reads_is_a_configuration_error(where, tmp_path):
    data = copy.deepcopy(DATA)
    *parents, last = where.split(".")
    node = data
    for p in parents:
        node = node[p]
    node[last] = 5
    assert not held(resolve(DATA, False), where)  # the walk above would catch it too
    problems = validate(data)
    assert len(problems) == 1 and problems[0].startswith(f"{where}: expected one of ")
    assert "remove it" in problems[0]
    path = tmp_path / "kern.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SettingsError, match=where.replace(".", r"\.")):
        load(path)


def test_the_removed_bench_keys_are_gone_and_the_profiles_hold_rounds_and_replays():
    assert not {"warmup", "rounds", "replays"} & set(DATA["bench"])
    for cuda in (False, True):
        m = resolve(DATA, cuda).machine
        raw = DATA["profiles"]["gpu" if cuda else "cpu"]
        assert (m.rounds, m.replays, list(m.buckets), list(m.weights)) == \
            (raw["rounds"], raw["replays"], raw["buckets"], raw["weights"])


def test_the_profile_noise_floor_wins_over_the_bench_section():
    cpu, gpu = resolve(DATA, False), resolve(DATA, True)
    assert cpu.bench.noise_pct == DATA["profiles"]["cpu"]["noise_pct"] != DATA["bench"]["noise_pct"]
    assert "noise_pct" not in DATA["profiles"]["gpu"] and gpu.bench.noise_pct == DATA["bench"]["noise_pct"]
    data = apply_overrides(DATA, ["profiles.cpu.noise_pct=3.0", "profiles.cpu.buckets=[2]",
                                  "profiles.cpu.weights=[1]"])
    r = resolve(data, False)
    assert r.bench.noise_pct == 3.0 and r.machine.buckets == (2,)
    assert resolve(data, True).bench.noise_pct == DATA["bench"]["noise_pct"]


def test_each_command_has_its_own_timeout():
    r = resolve(DATA, False)
    assert (r.test.timeout_s, r.bench.timeout_s, r.step.timeout_s, r.profile.timeout_s) == \
        (DATA["test"]["timeout_s"], DATA["bench"]["timeout_s"], DATA["step"]["timeout_s"],
         DATA["profile"]["timeout_s"])
    for section in ("step", "profile"):
        data = copy.deepcopy(DATA)
        del data[section]["timeout_s"]
        assert validate(data) == [f"{section}.timeout_s: expected a number > 0, found nothing (key missing)"]
        data[section]["timeout_s"] = 0
        assert validate(data) == [f"{section}.timeout_s: expected a number > 0, found 0"]


@hsettings(max_examples=40, deadline=None)
@given(key=st.sampled_from(["rounds", "replays", "context", "test_context", "test_steps"]),
       value=st.integers(-3, 0), name=st.sampled_from(["gpu", "cpu"]))
def test_a_profile_count_below_one_names_its_key(key, value, name):
    data = copy.deepcopy(DATA)
    data["profiles"][name][key] = value
    assert validate(data) == [f"profiles.{name}.{key}: expected an integer >= 1, found {value}"]
    with pytest.raises(SettingsError, match=f"profiles.{name}.{key}"):
        resolve(data, name == "gpu")


@hsettings(max_examples=40, deadline=None)
@given(n=st.integers(1, 6), m=st.integers(1, 6), name=st.sampled_from(["gpu", "cpu"]))
def test_buckets_and_weights_must_pair_up(n, m, name):
    data = copy.deepcopy(DATA)
    data["profiles"][name].update(buckets=list(range(1, n + 1)), weights=[1] * m)
    want = [] if n == m else [f"profiles.{name}.weights: expected one weight per bucket ({n}), found {m}"]
    assert validate(data) == want


@pytest.mark.parametrize("key,bad", [("test_rows", [1, 0]), ("test_rows", [1, True]), ("buckets", [2, 0]),
                                     ("rounds", 2.5), ("replays", "8")])
def test_a_profile_value_of_the_wrong_kind_names_key_expected_and_found(key, bad):
    data = copy.deepcopy(DATA)
    data["profiles"]["cpu"][key] = bad
    if key == "buckets":
        data["profiles"]["cpu"]["weights"] = [1] * len(bad)
    problems = validate(data)
    assert len(problems) == 1 and problems[0].startswith(f"profiles.cpu.{key}: expected ")
    assert repr(bad) in problems[0] or str(bad) in problems[0]


def test_a_hand_made_section_is_validated_too():
    """A section built in code (a test's narrowed profile) is checked as kern.yaml's is."""
    import dataclasses

    from pydantic import ValidationError

    m = resolve(DATA, False).machine
    with pytest.raises(ValidationError, match="rounds"):
        dataclasses.replace(m, rounds=0)
    with pytest.raises(ValidationError, match="one weight per bucket"):
        dataclasses.replace(m, buckets=(2, 4, 8))
    assert dataclasses.replace(m, buckets=[2], weights=[1]).buckets == (2,)


# ---- the dataclasses are the schema ------------------------------------------------------------

def sections():
    """(key path of the section, its dataclass) for every mapping of kern.yaml with fields."""
    from harness import settings as S

    out = [(name, cls) for name, cls in S._SECTIONS.items()]
    out += [(f"profiles.{m}", S.MachineProfile) for m in ("gpu", "cpu")]
    return out


def number_range(typ):
    """The range of the numbers an annotation holds (the first bound found), or None."""
    import typing

    from harness import settings as S

    base, meta = S.unwrap(typ)
    if base in (int, float):
        return S.Range.of(meta)
    for arg in typing.get_args(base):
        found = number_range(arg)
        if found is not None:
            return found
    return None


def holds_numbers(typ) -> bool:
    import typing

    from harness import settings as S

    base, _ = S.unwrap(typ)
    if base in (int, float):
        return True
    if typing.get_origin(base) in (typing.Literal,) or is_dataclass(base):
        return False
    return any(holds_numbers(a) for a in typing.get_args(base) if a is not Ellipsis)


def numeric_fields():
    """(section path, field, its range) of every key whose value is or holds numbers."""
    import typing

    out = []
    for where, cls in sections():
        hints = typing.get_type_hints(cls, include_extras=True)
        for f in fields(cls):
            if holds_numbers(hints[f.name]):
                out.append((where, f, number_range(hints[f.name])))
    return out


def test_every_numeric_key_has_a_range():
    missing = [f"{w}.{f.name}" for w, f, rng in numeric_fields() if rng is None]
    assert missing == [], f"numeric keys without a range (Ge/Gt/Le/Lt on the number): {missing}"
    assert len(numeric_fields()) > 40  # the walk finds them (every section holds some)


def outside(rng, is_int: bool):
    """A value just outside ``rng``: below its low end, else above its high end."""
    if rng.lo is not None:
        return (int(rng.lo) - 1 if is_int else rng.lo - 1) if not rng.lo_open else rng.lo
    return int(rng.hi) + 1 if is_int else rng.hi + 1


@pytest.mark.parametrize("where,f,rng", numeric_fields(), ids=lambda x: getattr(x, "name", None))
def test_a_value_outside_its_range_names_the_key_and_states_the_range(where, f, rng):
    import typing

    from harness import settings as S

    cls = dict(sections())[where]
    typ = str(typing.get_type_hints(cls)[f.name])
    bad = outside(rng, "int" in typ and "float" not in typ)
    if "tuple" in typ and "Mapping" not in typ:
        bad = [bad, bad]
    data = copy.deepcopy(DATA)
    node = data
    for part in where.split("."):
        node = node.setdefault(part, {})
    node[f.name] = bad if f.name != "prices" else {"claude": [bad, 1.0]}
    if where.startswith("profiles") and f.name in ("buckets", "weights"):
        node["weights" if f.name == "buckets" else "buckets"] = [1, 2]
    problems = validate(data)
    assert len(problems) == 1 and problems[0].startswith(f"{where}.{f.name}: expected "), problems
    assert rng.text() in problems[0] and problems[0].endswith(f"found {node[f.name]!r}"), problems


@pytest.mark.parametrize("path,value,message", [
    ("budgets.attempts", -5, "budgets.attempts: expected an integer >= 1, found -5"),
    ("loop.concurrency", -1, "loop.concurrency: expected an integer >= 0 and <= 256, found -1"),
    ("budgets.wall_hours", 0, "budgets.wall_hours: expected a number > 0, found 0"),
    ("budgets.cost_usd", -1, "budgets.cost_usd: expected a number > 0, found -1"),
    ("loop.every", 20, "loop.every: expected a duration: 90s, 20m, 1h or 1d (a whole number, then "
                       "s, m, h or d), found 20"),
    ("loop.every", "20min", "loop.every: expected a duration: 90s, 20m, 1h or 1d (a whole number, "
                            "then s, m, h or d), found '20min'"),
    ("agent.max_budget_usd", 0, "agent.max_budget_usd: expected a number > 0 or null, found 0"),
    ("agent.pass_env", "ANTHROPIC_API_KEY",
     "agent.pass_env: expected a list, each a string, found 'ANTHROPIC_API_KEY'"),
    ("agent.pass_env", ["MY KEY"], "agent.pass_env: expected environment variable names such as "
                                   "ANTHROPIC_API_KEY (not 'MY KEY'), found ['MY KEY']"),
    ("agent.prices", {"claude-x": [3.0]}, "agent.prices: expected a mapping of model-name prefixes to "
                                          "[input, output] USD per million tokens, each >= 0, found "
                                          "{'claude-x': [3.0]}"),
    ("agent.max_turns", "40", "agent.max_turns: expected an integer >= 1 and <= 1000, found '40'"),
    ("agent.quick_timeout_s", True, "agent.quick_timeout_s: expected a number > 0, found True"),
    # YAML's !!set: pydantic would take it for a list, in an order that is not the file's
    ("profiles.cpu.test_rows", {1, 3}, "profiles.cpu.test_rows: expected a list, not a set, found {1, 3}"),
    ("loop.targets", {"moe.experts"}, "loop.targets: expected a list, not a set, found {'moe.experts'}"),
])
def test_nonsense_values_are_refused_with_the_accepted_range(path, value, message):
    data = copy.deepcopy(DATA)
    *head, last = path.split(".")
    node = data
    for h in head:
        node = node[h]
    node[last] = value
    assert validate(data) == [message]


@pytest.mark.parametrize("backend,key", [("command", "command"), ("replay", "replay_dir")])
def test_a_backend_without_what_it_runs_is_refused_at_load(backend, key):
    data = copy.deepcopy(DATA)
    data["agent"]["backend"] = backend
    (problem,) = validate(data)
    assert problem.startswith(f"agent.{key}: expected ") and problem.endswith("found ''")


def test_agent_keys_left_out_take_their_defaults():
    data = copy.deepcopy(DATA)
    data["agent"] = {"backend": "anthropic"}
    del data["budgets"]["cost_usd"]
    r = resolve(data, False)
    assert (r.agent.model, r.agent.max_turns, r.agent.max_tokens, r.agent.max_budget_usd,
            r.agent.quick_timeout_s, r.agent.timeout_s, r.agent.pass_env, dict(r.agent.prices)) == \
        ("claude-sonnet-4-5", 40, 8192, 5.0, 600.0, 3600.0, (), {})
    assert r.budgets.cost_usd == 50.0


def test_every_key_of_every_section_is_written_and_commented_in_kern_yaml():
    """kern.yaml is where a user reads what can be set: every key of the sections (the machine
    profiles' optional keys aside) is there, each with a comment on its line or the lines
    right below it."""
    from harness import settings as S

    lines = KERN_YAML.read_text().splitlines()
    for name, cls in S._SECTIONS.items():
        assert set(DATA[name]) == set(S.keys(cls)), name
    at = {}
    section = None
    for i, line in enumerate(lines):
        if line and not line.startswith((" ", "#", "-")):
            section = line.split(":")[0]
        elif section in ("agent", "budgets", "loop") and line.startswith("  ") and not line.lstrip().startswith("#"):
            at[(section, line.split(":")[0].strip())] = i
    for (section, k), i in at.items():
        assert "#" in lines[i] or lines[i - 1].strip().startswith("#"), f"{section}.{k} has no comment"


def test_loading_kern_yaml_imports_no_gate_but_their_sections():
    """Loading is cheap: of gates/ only the sections they take (gates/settings.py), no torch,
    no kernel tree."""
    import subprocess
    import sys

    code = ("import sys; from harness.settings import load; "
            f"load({str(KERN_YAML)!r}).resolve(True); load({str(KERN_YAML)!r}).resolve(False); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('gates', 'torch', 'kernels')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=KERN_YAML.parent, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "['gates', 'gates.settings']", out.stderr


def test_the_one_key_a_profile_shares_with_a_section_is_the_scorer_s_noise_floor():
    """resolve applies a machine profile's value over a gate section's for ``noise_pct`` alone:
    no other key of a profile is also a key of the gates' sections (it would need a rule of its
    own; ``agent.model`` names the agent's model, another thing than the profile's)."""
    from harness import settings as S

    shared = {(name, k) for name in ("target", "test", "bench")
              for k in set(S.keys(S.MachineProfile)) & set(S.keys(S._SECTIONS[name]))}
    assert shared == {("bench", "noise_pct")}


@hsettings(max_examples=60, deadline=None)
@given(n=st.integers(0, 10_000), unit=st.sampled_from("smhd"))
def test_durations_are_a_whole_number_and_a_unit(n, unit):
    from harness.settings import parse_duration

    assert parse_duration(f"{n}{unit}") == n * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]


@pytest.mark.parametrize("text", ["20", "banana", "20min", "1.5h", "-5m", "m", "", " 1 h", "1w"])
def test_anything_else_is_not_a_duration(text):
    from harness.settings import parse_duration

    assert parse_duration(text) is None
