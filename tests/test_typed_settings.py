"""kern.yaml reaches every consumer typed: no function, method or dataclass field of harness/
or gates/ takes the settings, a section of them or the machine profile as a plain mapping
(``settings: dict``, ``profile: dict``, ``th: dict``), or untyped. Each gate's entry points take
their sections (gates/settings.py), and the one rule across sections lives in one place.

Read from the sources with ``ast`` (as tests/test_layers.py reads imports): every def and every
annotated class attribute counts, public or not, at any depth."""
from __future__ import annotations

import ast
from pathlib import Path

from tests.test_layers import ROOT, modules

# names that hold kern.yaml, a section of it or the machine profile wherever they appear
SETTINGS_NAMES = {"settings", "profile", "prof", "machine", "th", "thresholds", "cfg", "config",
                  "tolerances", "scorer", "bench_cfg", "test_cfg", "b_cfg"}
# annotations that say nothing of what a setting is
UNTYPED = ("dict", "Dict", "Mapping", "MutableMapping", "Any", "object")


def untyped(annotation: ast.expr | None) -> bool:
    """Whether ``annotation`` is missing, or is (or is a union with) a bare mapping / Any."""
    if annotation is None:
        return True
    text = ast.unparse(annotation).replace('"', "").replace("'", "")
    parts = [p.strip() for p in text.split("|")]
    return any(p.split("[")[0].split(".")[-1] in UNTYPED for p in parts if p != "None")


def offenders(root: Path = ROOT) -> list[str]:
    out = []
    for name, path in modules(root).items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                for arg in a.posonlyargs + a.args + a.kwonlyargs:
                    if arg.arg in SETTINGS_NAMES and untyped(arg.annotation):
                        out.append(f"{name}.{node.name}({arg.arg}: "
                                   f"{ast.unparse(arg.annotation) if arg.annotation else 'untyped'})")
            elif isinstance(node, ast.ClassDef):
                for stmt in node.body:
                    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) \
                            and stmt.target.id in SETTINGS_NAMES and untyped(stmt.annotation):
                        out.append(f"{name}.{node.name}.{stmt.target.id}: {ast.unparse(stmt.annotation)}")
    return sorted(out)


def test_no_settings_cross_a_signature_as_a_mapping_or_untyped():
    found = offenders()
    assert found == [], ("kern.yaml's settings travel typed (gates/settings.py, harness/settings.py "
                         "Resolved): annotate these with their section, never a dict: "
                         + "; ".join(found))


def test_the_rule_finds_what_it_forbids(tmp_path):
    """The check above can fail: planted mappings and an untyped parameter are each found."""
    pkg = tmp_path / "gates"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "bad.py").write_text(
        "from dataclasses import dataclass\n"
        "def judge(ev: dict, th: dict) -> None: ...\n"
        "def spec(settings, profile: 'dict | None' = None): ...\n"
        "@dataclass\nclass Req:\n    settings: Mapping[str, object]\n    machine: 'MachineProfile'\n")
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "__init__.py").write_text("")
    assert offenders(tmp_path) == ["gates.bad.Req.settings: Mapping[str, object]",
                                   "gates.bad.judge(th: dict)", "gates.bad.spec(profile: 'dict | None')",
                                   "gates.bad.spec(settings: untyped)"]


def annotation(module: str, owner: str, name: str) -> str:
    """The annotation text of parameter or field ``name`` of ``owner`` (a def or a class) in
    ``module``."""
    tree = ast.parse(modules(ROOT)[module].read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == owner:
            if isinstance(node, ast.FunctionDef):
                for arg in node.args.args + node.args.kwonlyargs:
                    if arg.arg == name:
                        return ast.unparse(arg.annotation)
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and getattr(stmt.target, "id", None) == name:
                    return ast.unparse(stmt.annotation)
    raise AssertionError(f"{module}.{owner} has no {name}")


def test_each_gate_receives_its_section():
    want = {
        ("gates.requests", "AccuracyRequest", "accuracy"): "AccuracySettings",
        ("gates.requests", "AccuracyRequest", "machine"): "MachineProfile",
        ("gates.requests", "AccuracyRequest", "target"): "Target",
        ("gates.requests", "BenchRequest", "scorer"): "ScorerSettings",
        ("gates.requests", "BenchRequest", "thresholds"): "Thresholds",
        ("gates.requests", "BenchRequest", "machine"): "MachineProfile",
        ("gates.scorer", "analyse", "cfg"): "ScorerSettings",
        ("gates.rules.verdict", "judge", "th"): "Thresholds",
        ("gates.rules.verdict", "judge_timed", "th"): "Thresholds",
        ("gates.spec", "side_spec", "machine"): "MachineProfile",
        ("gates.rules.footprint", "judgment_bytes", "accuracy"): "AccuracySettings",
        ("harness.pipeline", "Context", "cfg"): "Resolved",
    }
    got = {k: annotation(*k) for k in want}
    assert got == want


def test_the_profile_noise_floor_rule_lives_in_resolve_alone():
    """The one rule across sections (a machine profile's noise_pct over bench.noise_pct) is
    applied where kern.yaml is resolved; everything else reads the resolved bench section."""
    applying = sorted(name for name, path in modules(ROOT).items()
                      if "machine.noise_pct" in path.read_text())
    assert applying == ["harness.settings"]
