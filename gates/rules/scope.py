"""The scope gate: what a candidate commit may touch. Pure functions over plain data.

A candidate must be exactly one commit on top of its base; every changed path must match an
editable glob and no protected glob; the change must stay under a size limit and add no
dependency (dependency files are protected). Globs follow :func:`match` (``*`` crosses ``/``),
the one rule the accuracy gate's protected check and the agents' edit tools apply too.

The changed files' contents are checked too (``source_problems``), because a commit can stay
inside the editable globs and still bring in what the gates cannot judge:

* only sources: ``.py`` and ``.md`` files of at most ``MAX_FILE_BYTES`` (no compiled
  extension, no pickled table of precomputed answers, no blob that the line count misses);
* imports: the standard library, torch, triton, numpy and the tree itself (``KERNEL_IMPORTS``:
  a kernel that imports another package brings in a dependency that does the work, whether
  or not it happens to be installed), never the modules whose only use in a kernel is to
  reach outside it (``ESCAPES``: dynamic import, native calls, processes, threads, frames);
* no reach into the process: ``__import__``, ``sys.modules`` / ``sys.argv`` / frames (how code
  finds out that the scorer is running), ``sys``'s attributes by a computed name or through
  ``getattr``/``vars``/``__dict__`` (under any name ``sys`` is bound to), a frame's or
  traceback's links (``f_back``, ``tb_frame``, ...: how code reaches the gates' variables),
  assignments to another module's attributes (monkeypatching ``time.perf_counter`` or torch's
  settings);
* not the workload: the protected ``kernels/k31/workload`` module is the gates' input; a
  kernel that imports it can precompute answers;
* not the oracle: the protected reference (each family's ``kernels/k31/<family>/reference``
  beside its kernels, their shared ``kernels/k31/reference``, and ``contracts``, which hands
  them out) is what the gates judge kernels against; a kernel that calls it is judged against
  itself, whatever fast path it shows.

These are static checks of what the commit says; the sides check at run time what the code
does (``gates/side/tamper.py``).
"""
from __future__ import annotations

import ast
import fnmatch
import sys
import threading
from dataclasses import dataclass, field

MAX_CHANGED_LINES = 4000
MAX_FILES = 40
MAX_FILE_BYTES = 128 * 1024  # the largest source of the tree is ~15 KB
SOURCE_SUFFIXES = (".py", ".md")
KERNEL_IMPORTS = ("torch", "triton", "numpy", "kernels")
ESCAPES = ("importlib", "imp", "ctypes", "subprocess", "multiprocessing", "threading", "_thread",
           "concurrent", "asyncio", "socket", "signal", "inspect", "gc", "builtins", "code",
           "runpy", "pickle", "marshal")
SYS_ESCAPES = ("modules", "path", "argv", "orig_argv", "_getframe", "_current_frames", "settrace",
               "setprofile", "addaudithook", "meta_path", "path_hooks", "stdin", "__stdin__",
               "_current_exceptions", "exc_info", "exception", "last_traceback", "__dict__")
# a frame's, traceback's, generator's or coroutine's links to frames (read on any object)
FRAME_LINKS = ("f_back", "f_locals", "f_globals", "tb_frame", "gi_frame", "cr_frame", "ag_frame")
# a module's import state: extending a package's __path__ makes the gates import a file of the
# candidate's as a protected module
IMPORT_STATE = ("__path__", "__spec__", "__loader__")
REFLECTION = ("getattr", "setattr", "delattr", "hasattr", "vars")  # attributes by a name or all
WORKLOAD = "kernels.k31.workload"
# the protected reference's modules (patterns as kern.yaml's protected globs: ``*`` crosses dots)
ORACLES = ("kernels.k31.reference", "kernels.k31.*.reference", "kernels.k31.contracts")


@dataclass(frozen=True)
class ScopeResult:
    ok: bool
    problems: list = field(default_factory=list)

    def reason(self) -> str:
        return "; ".join(self.problems[:4])


def match(path: str, globs) -> str | None:
    """The first of ``globs`` that ``path`` (repository-relative, POSIX) matches, or None.

    kern-loop's one glob rule, used by this gate, the accuracy gate's protected check and the
    agents' edit tools: ``fnmatch.fnmatchcase``, where ``*`` also crosses ``/`` and case
    counts on every platform (``fnmatch.fnmatch``, which the gates used before, is the same on
    POSIX and folds case on Windows)."""
    return next((g for g in globs if fnmatch.fnmatchcase(path, g)), None)


def matches(path: str, globs: list[str]) -> bool:
    return match(path, globs) is not None


def check(*, commits: int, paths: list[str], changed_lines: int, editable: list[str],
          protected: list[str], sources: dict | None = None) -> ScopeResult:
    """``sources``: ``{path: (base content, candidate content)}`` (bytes; None where the file
    does not exist) of changed paths; the editable ones are checked with ``source_problems``."""
    problems = []
    if commits == 0:
        problems.append("no commit: the agent finished without committing")
    elif commits > 1:
        problems.append(f"{commits} commits: an attempt must be exactly one commit")
    if not paths and commits:
        problems.append("the commit changes no file")
    for p in paths:
        if matches(p, protected):
            problems.append(f"{p} is protected")
        elif not matches(p, editable):
            problems.append(f"{p} is outside the editable globs {editable}")
    if len(paths) > MAX_FILES:
        problems.append(f"{len(paths)} files changed (limit {MAX_FILES})")
    if changed_lines > MAX_CHANGED_LINES:
        problems.append(f"{changed_lines} lines changed (limit {MAX_CHANGED_LINES})")
    for p, (before, after) in sorted((sources or {}).items()):
        if after is not None and matches(p, editable) and not matches(p, protected):
            problems += source_problems(p, after, before)
    return ScopeResult(not problems, problems)


def source_problems(path: str, content: bytes, before: bytes | None = None) -> list[str]:
    """What an editable file of the tree may not be or do, one sentence each; only what the
    change adds (a finding the base version ``before`` has too is not the candidate's)."""
    found = _findings(path, content)
    if before is not None:
        old = [m for _, m in _findings(path, before)]
        kept = []
        for line, m in found:
            if m in old:
                old.remove(m)
            else:
                kept.append((line, m))
        found = kept
    return [f"{path}:{line} {m}" if line else f"{path} {m}" for line, m in found]


# CPython 3.11's ast constructor keeps per-interpreter recursion state: two threads parsing at
# once (two judging slots of one loop, harness/farm.py) fail with "SystemError: AST
# constructor recursion depth mismatch" (seen 2026-12-01). Every parse of the gates goes
# through this lock.
_PARSE = threading.Lock()


def parse(source, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse``, one thread at a time (see ``_PARSE``)."""
    with _PARSE:
        return ast.parse(source, filename=filename)


def _findings(path: str, content: bytes) -> list[tuple[int | None, str]]:
    if not path.endswith(SOURCE_SUFFIXES):
        return [(None, f"is not a source file (expected {', '.join(SOURCE_SUFFIXES)}: a binary or "
                       f"data file can hold work the gates cannot read)")]
    if len(content) > MAX_FILE_BYTES:
        return [(None, f"has {len(content)} bytes (limit {MAX_FILE_BYTES}: a table this large "
                       f"is precomputed work, not a kernel)")]
    if not path.endswith(".py"):
        return []
    try:
        tree = parse(content, filename=path)
    except (SyntaxError, ValueError):
        return []  # the build gate reports it with the interpreter's own message
    package = path[:-3].replace("/", ".").rsplit(".", 1)[0]
    if path.endswith("/__init__.py"):
        package = path[:-len("/__init__.py")].replace("/", ".")
    out = []
    imported = set()  # names bound to modules (or their members) outside the tree
    sys_names = {"sys"} | {a.asname for n in ast.walk(tree) if isinstance(n, ast.Import)
                           for a in n.names if a.name == "sys" and a.asname}
    for node in ast.walk(tree):
        line = getattr(node, "lineno", None)
        flagged = set()
        for module, bound in _imports(node, package):
            top = module.split(".")[0]
            if module.rsplit(".", 1)[0] in flagged:
                continue  # 'from X import y' where X itself is reported
            flagged.add(module)
            if module == WORKLOAD or module.startswith(WORKLOAD + "."):
                out.append((line, f"imports {module}: the workload is the gates' input, and a "
                                  f"kernel that reads it can precompute the answers"))
            elif any(fnmatch.fnmatchcase(module, o) or fnmatch.fnmatchcase(module, o + ".*")
                     for o in ORACLES):
                out.append((line, f"imports {module}: the reference is what the gates judge "
                                  f"kernels against; a kernel that calls it is judged against "
                                  f"itself"))
            elif top in ESCAPES:
                out.append((line, f"imports {module}: kernels may not use {top} (it reaches "
                                  f"outside the kernel: dynamic imports, native code, processes, "
                                  f"threads or frames)"))
            elif top not in KERNEL_IMPORTS and top not in sys.stdlib_module_names:
                out.append((line, f"imports {module}, which is not a kernel dependency "
                                  f"(expected {', '.join(KERNEL_IMPORTS[:-1])}, the tree or the "
                                  f"standard library; a new dependency needs the harness's "
                                  f"pyproject)"))
            else:
                flagged.discard(module)
                if top != "kernels" and bound:
                    imported.add(bound)
        if isinstance(node, ast.Name) and node.id == "__import__":
            out.append((line, "calls __import__: kernels import statically"))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                node.value.id in sys_names and node.attr in SYS_ESCAPES:
            out.append((line, f"reads sys.{node.attr}: kernel code may not inspect the process "
                              f"it runs in"))
        if isinstance(node, ast.ImportFrom) and node.module == "sys" and not node.level:
            for a in node.names:
                if a.name in SYS_ESCAPES or a.name == "*":
                    out.append((line, f"reads sys.{a.name}: kernel code may not inspect the "
                                      f"process it runs in"))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in REFLECTION and node.args and \
                isinstance(node.args[0], ast.Name) and node.args[0].id in sys_names:
            out.append((line, f"calls {node.func.id}(sys, ...): kernel code may not reach sys's "
                              f"attributes by a computed name (how it would find the process's "
                              f"modules, frames or arguments)"))
        if (isinstance(node, ast.Name) and node.id in IMPORT_STATE) or \
                (isinstance(node, ast.Attribute) and node.attr in IMPORT_STATE):
            name = node.id if isinstance(node, ast.Name) else node.attr
            out.append((line, f"reads {name}: kernel code may not change where modules are "
                              f"imported from (a package's search path decides which file is "
                              f"the protected reference, contracts or workload)"))
        if isinstance(node, ast.Attribute) and node.attr in FRAME_LINKS:
            out.append((line, f"reads .{node.attr}: kernel code may not walk Python's frames "
                              f"(they lead to the gates' variables)"))
    for node in ast.walk(tree):  # second pass: the imported names are known now
        for target in _assigned(node):
            root = target
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in imported and target is not root:
                what = ast.unparse(node if isinstance(node, ast.Call) else target)
                out.append((node.lineno, f"assigns {what}: kernels may not replace another "
                                         f"module's attributes (monkeypatching)"))
    return sorted(dict.fromkeys(out), key=lambda f: f[0] or 0)


def _imports(node, package: str):
    """(absolute module, name bound in this file or None) for each module an import names."""
    if isinstance(node, ast.Import):
        for a in node.names:
            yield a.name, (a.asname or a.name.split(".")[0])
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            parts = package.split(".")
            base = ".".join(parts[:len(parts) - node.level + 1])
            module = f"{base}.{node.module}" if node.module else base
        else:
            module = node.module or ""
        yield module, None
        for a in node.names:  # 'from kernels.k31 import workload' names a module too
            yield f"{module}.{a.name}", (a.asname or a.name)


def _assigned(node):
    if isinstance(node, ast.Assign):
        yield from node.targets
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        yield node.target
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
            node.func.id == "setattr" and node.args:
        yield ast.Attribute(value=node.args[0], attr="?", ctx=ast.Store())
