"""kern.yaml resolved once: every key a typed field, the machine profile's values applied in one
place, the profiles' values validated with errors that name the key."""
from __future__ import annotations

import copy
from dataclasses import fields, is_dataclass
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings as hsettings, strategies as st

from harness.settings import SettingsError, load, resolve, validate

KERN_YAML = Path(__file__).resolve().parents[2] / "kern.yaml"
DATA = yaml.safe_load(KERN_YAML.read_text())


def walk(value, path=""):
    """Every key path of a parsed YAML mapping, down to the leaves (lists are leaves)."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from walk(v, f"{path}.{k}" if path else k)
    else:
        yield path


def held(resolved, path: str) -> bool:
    """Whether ``path`` of kern.yaml reaches a field of the typed settings: sections are
    dataclasses, ``profiles.<this machine>`` is ``machine``, mappings inside a field (the
    per-op reference tolerances) are data of that field."""
    parts = path.split(".")
    if parts[0] == "profiles":
        if len(parts) < 3 or parts[1] != resolved.machine.name:
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
    unread = [p for p in walk(DATA) if not held(resolved, p)]
    assert unread == [], f"kern.yaml keys no code reads (remove them or add a field): {unread}"
    assert resolved.machine.name == ("gpu" if cuda else "cpu")


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
    handed = {**DATA["profiles"]["cpu"], "noise_pct": 3.0, "buckets": [2], "weights": [1]}
    r = resolve(DATA, False, handed)
    assert r.bench.noise_pct == 3.0 and r.machine.buckets == (2,)


def test_each_command_has_its_own_timeout():
    r = resolve(DATA, False)
    assert (r.test.timeout_s, r.bench.timeout_s, r.step.timeout_s, r.profile.timeout_s) == \
        (DATA["test"]["timeout_s"], DATA["bench"]["timeout_s"], DATA["step"]["timeout_s"],
         DATA["profile"]["timeout_s"])
    for section in ("step", "profile"):
        data = copy.deepcopy(DATA)
        del data[section]["timeout_s"]
        assert validate(data) == [f"{section}.timeout_s: expected int or float, found nothing (key missing)"]
        data[section]["timeout_s"] = 0
        assert validate(data) == [f"{section}.timeout_s: expected a positive number of seconds, found 0"]


@hsettings(max_examples=40, deadline=None)
@given(key=st.sampled_from(["rounds", "replays", "context", "test_context", "test_steps"]),
       value=st.integers(-3, 0), name=st.sampled_from(["gpu", "cpu"]))
def test_a_profile_count_below_one_names_its_key(key, value, name):
    data = copy.deepcopy(DATA)
    data["profiles"][name][key] = value
    assert validate(data) == [f"profiles.{name}.{key}: expected a positive integer, found {value}"]
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


def test_a_handed_profile_is_validated_too():
    with pytest.raises(SettingsError, match=r"profiles\.cpu \(as handed over\)\.rounds"):
        resolve(DATA, False, {**DATA["profiles"]["cpu"], "rounds": 0})


def test_the_schema_checks_exactly_the_keys_the_typed_sections_hold():
    """validate()'s key table and the dataclasses name the same keys: a key added to one of
    them alone is either read unchecked or checked and never read."""
    from harness import settings as S

    for section, cls in S._SECTIONS.items():
        checked = {k.split(".", 1)[1] for k in S._SCHEMA if k.split(".", 1)[0] == section}
        assert checked == {f.name for f in fields(cls)}, section
    optional = {"noise_pct", "memory_gib"}  # checked on their own in profile_problems
    assert set(S._PROFILE_SCHEMA) | optional == {f.name for f in fields(S.Profile)} - {"name"}


@pytest.mark.parametrize("value,problem", [
    ("auto", None), ("off", None), ("namespaces", None), ("landlock", None),
    ("bubblewrap", "sandbox: expected one of auto, namespaces, landlock, off, found 'bubblewrap'"),
    (True, "sandbox: expected str, found True"),
])
def test_the_sandbox_key_names_its_modes(value, problem):
    data = {**copy.deepcopy(DATA), "sandbox": value}
    assert validate(data) == ([problem] if problem else [])
    if problem is None:
        assert resolve(data, False).sandbox == value


def test_the_sandbox_defaults_to_auto_when_kern_yaml_says_nothing():
    data = copy.deepcopy(DATA)
    data.pop("sandbox", None)
    assert validate(data) == [] and resolve(data, False).sandbox == "auto"
