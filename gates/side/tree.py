"""Load a revision's kernel tree into this process (the subprocess of one side).

The gate driver's own modules come from the harness installation; only ``kernels`` comes
from the tree under test. ``open_tree`` must run before anything imports ``kernels``.
"""
from __future__ import annotations

import sys
from pathlib import Path


class TreeError(RuntimeError):
    """The revision's tree cannot be loaded (the candidate commit must fix it)."""


def open_tree(root: str | Path):
    root = Path(root).resolve()
    if not (root / "kernels" / "k31" / "__init__.py").exists():
        raise TreeError(f"tree: expected kernels/k31/ under {root}, found none")
    if "kernels" in sys.modules:
        loaded = Path(sys.modules["kernels"].__file__).resolve().parent.parent
        if loaded != root:
            raise TreeError(f"tree: kernels already imported from {loaded}, wanted {root}")
    sys.path.insert(0, str(root))
    import kernels  # noqa: F401  (resolved from root now)

    got = Path(kernels.__file__).resolve().parent.parent
    if got != root:
        raise TreeError(f"tree: kernels resolved to {got}, expected {root}")
    return root


def import_tree() -> None:
    """Import every module of the tree a side runs: the model, the step and each op's kernel
    (the dispatcher would load a kernel at its first call). The gates hand a side its hidden
    inputs only after this, so the candidate's import-time code runs before they exist in
    the process. A module that fails to import fails the side here, as its first call would."""
    import importlib

    for name in ("kernels.k31.model", "kernels.k31.step", "kernels.k31.dispatch",
                 "kernels.k31.collectives", "kernels.k31.state", "kernels.k31.workload"):
        importlib.import_module(name)
    from kernels.k31 import contracts

    for spec in contracts.OPS.values():
        spec.load_kernel()
    check_sources()


def check_sources() -> None:
    """:class:`TreeError` unless every module of ``kernels`` this process imported came from
    the file its name puts it in (:func:`misplaced`): after the tree's import, and again when a
    side's work is done (a module imported later counts too)."""
    if "kernels" not in sys.modules:
        return
    root = Path(sys.modules["kernels"].__file__).resolve().parent.parent
    moved = misplaced({n: getattr(m, "__file__", None) for n, m in list(sys.modules.items())
                       if n == "kernels" or n.startswith("kernels.")}, root)
    if moved:
        raise TreeError(f"tree: {len(moved)} module(s) of kernels/ loaded from another file than "
                        f"their name's: {'; '.join(moved[:3])} (a package's __path__ or the "
                        f"import system changed: the candidate commit must import its modules "
                        f"from where their names put them)")


def misplaced(modules: dict, root: Path) -> list[str]:
    """Pure: each module of ``modules`` (``{dotted name: __file__}``, the tree's) whose file is
    not the one its name puts under ``root`` (``kernels/k31/x.py`` or ``kernels/k31/x/__init__.py``).
    A package whose ``__path__`` a candidate extended could otherwise have the gates import its
    own file as the protected contracts, reference or workload."""
    out = []
    for name, file in sorted(modules.items()):
        want = root.joinpath(*name.split("."))
        ok = (want.with_suffix(".py"), want / "__init__.py")
        if file is None or Path(file).resolve() not in ok:
            out.append(f"{name} from {file} (expected {ok[0]} or {ok[1]})")
    return out
