"""Tunables the kernels read: block sizes, warps, stages, split counts, per-bucket choices.

Each op family declares its own in ``kernels/k31/<family>/tunables.py`` as one literal dict::

    TUNABLES = {
        "kda.core.num_warps": (4, (1, 2, 4, 8)),   # name: (value, allowed choices)
    }

The dict must stay a literal (the ``tuner`` agent backend rewrites exactly one value per
attempt by editing it). Kernels read values with :func:`get`, which fails loudly on an unknown
name so a typo cannot silently fall back to a default.
"""
from __future__ import annotations

import importlib

FAMILIES = ("residual", "dense", "kda", "mla", "moe", "lm_head")
_TABLE: dict[str, tuple[object, tuple]] | None = None


def table() -> dict[str, tuple[object, tuple]]:
    global _TABLE
    if _TABLE is None:
        merged: dict[str, tuple[object, tuple]] = {}
        for fam in FAMILIES:
            try:
                mod = importlib.import_module(f"kernels.k31.{fam}.tunables")
            except ModuleNotFoundError:
                continue
            for name, (value, choices) in mod.TUNABLES.items():
                if value not in choices:
                    raise ValueError(f"tunable {name} in {fam}/tunables.py: value {value!r} "
                                     f"is not one of its choices {choices}")
                merged[name] = (value, tuple(choices))
        _TABLE = merged
    return _TABLE


def get(name: str):
    try:
        return table()[name][0]
    except KeyError:
        raise KeyError(f"tunable {name!r} is not declared in any kernels/k31/*/tunables.py") from None
