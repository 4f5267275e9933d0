"""The layers as the imports draw them: no import cycle among the modules of harness/ and
gates/, nothing in harness/ imports gates/side/ (the code that shares its process with
the candidate's kernels; the loop reaches it only by starting a side process), and gates/side/
imports from the rest of gates/ only the trust boundary (:data:`SIDE_MAY_IMPORT`), which
itself imports nothing of gates/ or harness/: the candidate's process holds no coordinator code.

Every import counts, at the top of a module or inside a function: a function-level import is
an edge too (the driver <-> tap <-> replays <-> opcheck cycle was made of them). Read from
the sources with ``ast``; nothing is imported."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("harness", "gates")
SIDE = "gates.side"
# What gates/side/ may import from gates/: the names both processes share (protocol.py), the
# interpreter patch both processes apply (interpreter.py), the logit statistics both compute
# (logits.py). Each imports nothing of harness/ or gates/, so nothing else arrives with them.
SIDE_MAY_IMPORT = ("gates.protocol", "gates.interpreter", "gates.logits")


def modules(root: Path, packages=PACKAGES) -> dict[str, Path]:
    """Dotted name -> file of every module under ``packages`` (a package is its __init__)."""
    out = {}
    for pkg in packages:
        for p in sorted((root / pkg).rglob("*.py")):
            parts = p.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = p
    return out


def imports(name: str, path: Path, known) -> set[str]:
    """The modules of ``known`` that module ``name`` (at ``path``) imports anywhere in it;
    ``from X import y`` names ``X.y`` where that is a module, else ``X``."""
    is_pkg = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base if is_pkg else base[:-1]
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:  # 'import gates.side.tap' of a submodule we do not know
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def graph(root: Path = ROOT, packages=PACKAGES) -> dict[str, set[str]]:
    known = modules(root, packages)
    return {n: imports(n, p, known) for n, p in known.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return sorted(out)


def test_no_import_cycle_among_harness_and_gates():
    found = cycles(graph())
    assert found == [], "import cycles (move the shared helper into the module that owns it): " + \
        "; ".join(" <-> ".join(c) for c in found)


def test_harness_never_imports_the_side_package():
    bad = sorted(f"{m} imports {t}" for m, ts in graph().items() if m.startswith("harness")
                 for t in ts if t == SIDE or t.startswith(SIDE + "."))
    assert bad == [], "harness/ reaches gates/side/ only by starting a side process: " + "; ".join(bad)


def side_leaks(g: dict[str, set[str]]) -> list[str]:
    """Imports that bring coordinator code into the candidate's process: a module of gates/side/
    importing a module of gates/ outside it other than :data:`SIDE_MAY_IMPORT`, or one of those
    importing any module of harness/ or gates/."""
    def inside(t):
        return t == SIDE or t.startswith(SIDE + ".")

    bad = [f"{m} imports {t}" for m, ts in g.items() if inside(m) for t in ts
           if not inside(t) and t not in SIDE_MAY_IMPORT]
    bad += [f"{m} (which gates/side/ may import) imports {t}" for m in SIDE_MAY_IMPORT
            for t in g.get(m, ())]
    return sorted(bad)


def test_the_side_imports_from_gates_only_the_trust_boundary():
    bad = side_leaks(graph())
    assert bad == [], ("gates/side/ runs beside the candidate's code: it imports from gates/ only "
                       f"{', '.join(SIDE_MAY_IMPORT)} (move a name both processes share into "
                       "gates/protocol.py): " + "; ".join(bad))
    assert set(SIDE_MAY_IMPORT) <= set(graph()), "a module of SIDE_MAY_IMPORT no longer exists"


def class_names(root: Path = ROOT, packages=("harness", "gates", "kernels")) -> dict[str, list[str]]:
    """Each top-level class name -> the files under ``packages`` that define it."""
    out: dict[str, list[str]] = {}
    for pkg in packages:
        for p in sorted((root / pkg).rglob("*.py")):
            for node in ast.parse(p.read_text(), filename=str(p)).body:
                if isinstance(node, ast.ClassDef):
                    out.setdefault(node.name, []).append(str(p.relative_to(root)))
    return out


def test_each_class_name_is_defined_once():
    """A class name says what one thing is: two classes of one name in harness/, gates/ and
    kernels/ (``Outcome`` of a side and of an attempt) make every reader ask which."""
    twice = sorted(f"{n} ({', '.join(fs)})" for n, fs in class_names().items() if len(fs) > 1)
    assert twice == [], "class names defined more than once (name each for what it is): " + \
        "; ".join(twice)


def test_the_walk_sees_the_real_edges():
    """The checks above read the real tree: edges of every kind are found (absolute, relative
    one and two levels up, inside a function, ``from package import module``)."""
    g = graph()
    assert {"gates.side.tap", "gates.side.replays", "gates.side.rank", "gates.interpreter",
            "gates.protocol"} <= g["gates.side.driver"]  # function-level, '.x', '..x', 'from .. import x'
    assert "gates.rules.scope" in g["harness.pipeline"]  # from gates import scope
    assert "gates.rules.scope" in g["harness.agents.rules"]
    assert "harness.cli.shared" in g["harness.cli.loop"] and "harness.ledger" in g["harness.cli.loop"]
    assert len(g) > 40 and sum(map(len, g.values())) > 80


def test_a_planted_cycle_and_side_import_are_caught(tmp_path):
    (tmp_path / "gates" / "side").mkdir(parents=True)
    (tmp_path / "harness").mkdir()
    for f in ("gates/__init__.py", "gates/side/__init__.py", "harness/__init__.py"):
        (tmp_path / f).write_text("")
    (tmp_path / "gates" / "side" / "a.py").write_text("def f():\n    from . import b\n")
    (tmp_path / "gates" / "side" / "b.py").write_text("from ..c import x\n")
    (tmp_path / "gates" / "c.py").write_text("import gates.side.a\nx = 1\n")
    (tmp_path / "harness" / "h.py").write_text("from gates.side.b import y\n")
    (tmp_path / "gates" / "protocol.py").write_text("from . import c\n")
    g = graph(tmp_path)
    assert cycles(g) == [["gates.c", "gates.side.a", "gates.side.b"]]
    assert g["harness.h"] == {"gates.side.b"}
    assert side_leaks(g) == ["gates.protocol (which gates/side/ may import) imports gates.c",
                             "gates.side.b imports gates.c"]
    (tmp_path / "gates" / "side" / "b.py").write_text("class Outcome:\n    pass\n")
    (tmp_path / "harness" / "h.py").write_text("class Outcome:\n    pass\nclass Other:\n    pass\n")
    (tmp_path / "kernels").mkdir()
    assert class_names(tmp_path) == {"Outcome": ["harness/h.py", "gates/side/b.py"], "Other": ["harness/h.py"]}


def test_the_architecture_map_names_every_module_on_its_side():
    """docs/architecture.md's "Processes and layers" map and the folders agree: each module of
    gates/ and of harness/cli/ (kern's verbs) is named in the loop process's part, each of
    gates/side/ in the side process's part."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("## Processes and layers", 1)[1].split("```")[1]
    loop, side = block.split("python -m gates.side.driver", 1)
    for folder, part in ((ROOT / "gates", loop), (ROOT / "harness" / "cli", loop),
                         (ROOT / "gates" / "side", side)):
        missing = sorted(p.name for p in folder.glob("*.py") if p.name not in ("__init__.py", "__main__.py")
                         and not re.search(rf"(?<![\w/]){re.escape(p.name)}", part))
        assert missing == [], (f"docs/architecture.md's map does not name {missing} of "
                               f"{folder.relative_to(ROOT)}/")
