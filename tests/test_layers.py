"""The layers as the imports draw them: no import cycle among the modules of harness/ and
gates/, and nothing in harness/ imports gates/side/ (the code that shares its process with
the candidate's kernels; the loop reaches it only by starting a side process).

Every import counts, at the top of a module or inside a function: a function-level import is
an edge too (the driver <-> tap <-> bench_side <-> opcheck cycle was made of them). Read from
the sources with ``ast``; nothing is imported."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("harness", "gates")
SIDE = "gates.side"


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


def test_the_walk_sees_the_real_edges():
    """The checks above read the real tree: edges of every kind are found (absolute, relative
    one and two levels up, inside a function, ``from package import module``)."""
    g = graph()
    assert {"gates.side.tap", "gates.side.bench_side", "gates.side.rank", "gates.interpreter",
            "gates.sides"} <= g["gates.side.driver"]  # function-level, '.x' and '..x'
    assert "gates.scope" in g["harness.pipeline"]  # from gates import scope
    assert "gates.scope" in g["harness.agents.rules"]
    assert "harness.cli_shared" in g["harness.loop_cmd"] and "harness.ledger" in g["harness.loop_cmd"]
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
    g = graph(tmp_path)
    assert cycles(g) == [["gates.c", "gates.side.a", "gates.side.b"]]
    assert g["harness.h"] == {"gates.side.b"}


def test_the_architecture_map_names_every_module_on_its_side():
    """docs/architecture.md's "Processes and layers" map and the folders agree: each module of
    gates/ is named in the loop process's part, each of gates/side/ in the side process's part."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("## Processes and layers", 1)[1].split("```")[1]
    loop, side = block.split("python -m gates.side.driver", 1)
    for folder, part in ((ROOT / "gates", loop), (ROOT / "gates" / "side", side)):
        missing = sorted(p.name for p in folder.glob("*.py") if p.name != "__init__.py"
                         and not re.search(rf"(?<![\w/]){re.escape(p.name)}", part))
        assert missing == [], (f"docs/architecture.md's map does not name {missing} of "
                               f"{folder.relative_to(ROOT)}/")
