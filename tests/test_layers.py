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


# --------------------------------------------------------------- the layers and the folders' roles
# top to bottom: a module imports modules of its own layer or of a layer below it
LAYERS = ("bench", "harness", "gates", "kernels")
RULES, LAUNCH = "gates.rules", "gates.launch"
COORDINATORS = ("gates.judging", "gates.accuracy", "gates.scorer")
# what gates/rules/ may import of gates/ beside itself: typed data and pure statistics
RULES_MAY_IMPORT = ("gates.protocol", "gates.settings", "gates.results", "gates.logits")
# modules that start processes, touch files or devices, read a clock or git: never in gates/rules/
NOT_PURE = ("subprocess", "shutil", "socket", "signal", "fcntl", "tempfile", "glob", "time",
            "datetime", "git", "ctypes", "resource", "multiprocessing", "pwd", "torch", "io")
# os.path functions that read the file system (gates/rules/ may join and normalize paths)
READS_FILES = ("exists", "lexists", "isdir", "isfile", "islink", "ismount", "realpath", "getsize",
               "getmtime", "getctime", "getatime", "samefile", "expanduser")


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def upward(g: dict[str, set[str]]) -> list[str]:
    """Imports of a module of a layer above the importer's (:data:`LAYERS`)."""
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    return sorted(f"{m} imports {t}" for m, ts in g.items() for t in ts
                  if rank[t.split(".")[0]] < rank[m.split(".")[0]])


def role_breaches(g: dict[str, set[str]]) -> list[str]:
    """gates/rules/ imports only itself and :data:`RULES_MAY_IMPORT` of gates/; gates/launch/
    imports no coordinator (it is their mechanism, below them)."""
    bad = [f"{m} (pure rules) imports {t}" for m, ts in g.items() if _inside(m, RULES) for t in ts
           if _inside(t, "gates") and not _inside(t, RULES) and t not in RULES_MAY_IMPORT]
    bad += [f"{m} (a launcher) imports the coordinator {t}" for m, ts in g.items()
            if _inside(m, LAUNCH) for t in ts if t in COORDINATORS]
    return sorted(bad)


def impurities(path: Path) -> list[str]:
    """What in one module of gates/rules/ is not pure: an import of :data:`NOT_PURE`, an
    ``os`` call other than ``os.path``'s, an ``os.path`` function that reads files."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
        out += [f"imports {n}" for n in names if n.split(".")[0] in NOT_PURE]
        if isinstance(node, ast.ImportFrom) and node.module in ("os", "os.path"):
            out += [f"imports {a.name} from {node.module}" for a in node.names
                    if node.module == "os" and a.name != "path" or a.name in READS_FILES]
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os" \
                and node.attr not in ("path", "sep", "pathsep"):
            out.append(f"calls os.{node.attr}")
        if isinstance(node, ast.Attribute) and node.attr in READS_FILES and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "path" and isinstance(node.value.value, ast.Name) and node.value.value.id == "os":
            out.append(f"calls os.path.{node.attr}")
    return out


def module_names(path: Path) -> set[str]:
    """Every module ``path`` imports by absolute name (the standard library's too), top level."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out


def renders(path: Path) -> list[str]:
    """Where a module prints or draws terminal text: ``print`` named (called, or a default
    callback), ``rich`` imported."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = [f"line {n.lineno}: print" for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == "print"]
    return out + (["imports rich"] if "rich" in module_names(path) else [])


def test_no_layer_imports_one_above_it():
    g = graph(ROOT, LAYERS)
    bad = upward(g)
    assert bad == [], f"the layers stand {' -> '.join(LAYERS)}; upward imports: " + "; ".join(bad)
    assert any(_inside(t, "gates") for m, ts in g.items() if m.startswith("bench") for t in ts)  # bench/ is read


def test_each_folder_of_gates_keeps_its_role():
    bad = role_breaches(graph())
    files = modules(ROOT)
    bad += [f"{m} {why}" for m, p in files.items() if _inside(m, RULES) for why in impurities(p)]
    bad += [f"{m} imports contextvars: what a side needs travels on the request (Placement)"
            for m, p in files.items() if "contextvars" in module_names(p)]
    bad += [f"{m} renders terminal text ({why}): harness/ renders the gates' typed results"
            for m, p in files.items() if _inside(m, "gates") and not _inside(m, SIDE) for why in renders(p)]
    assert bad == [], "; ".join(bad)
    assert {RULES, LAUNCH} <= set(files) and all(c in files for c in COORDINATORS)


def test_a_planted_breach_of_each_role_is_caught(tmp_path):
    for pkg in ("bench", "harness", "gates", "gates/rules", "gates/launch", "kernels"):
        (tmp_path / pkg).mkdir(parents=True, exist_ok=True)
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "kernels" / "k.py").write_text("from harness import h\n")
    (tmp_path / "harness" / "h.py").write_text("import contextvars\n")
    (tmp_path / "gates" / "scorer.py").write_text("x = 1\n")
    (tmp_path / "gates" / "rules" / "r.py").write_text(
        "import os, time\nfrom ..launch import l\nfrom ..results import y\n"
        "def f(p):\n    return os.path.join(p, 'a'), os.path.realpath(p), os.stat(p)\n")
    (tmp_path / "gates" / "results.py").write_text("y = 1\n")
    (tmp_path / "gates" / "launch" / "l.py").write_text("from .. import scorer\ndef f(say=print):\n    say('x')\n")
    g = graph(tmp_path, LAYERS)
    assert upward(g) == ["kernels.k imports harness.h"]
    assert role_breaches(g) == ["gates.launch.l (a launcher) imports the coordinator gates.scorer",
                                "gates.rules.r (pure rules) imports gates.launch.l"]
    assert impurities(tmp_path / "gates" / "rules" / "r.py") == ["imports time", "calls os.path.realpath",
                                                               "calls os.stat"]
    assert "contextvars" in module_names(tmp_path / "harness" / "h.py")
    assert renders(tmp_path / "gates" / "launch" / "l.py") == ["line 2: print"]
