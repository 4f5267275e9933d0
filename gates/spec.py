"""What a side builds and taps, as plain data made in the loop's process from kern.yaml.

The side parses it back into its mode's options (``gates/protocol.py``, checked: a key no
mode defines is an error), whose model part is ``gates.side.session.Spec``; nothing here
imports torch or the kernel tree. The batch sizes a tap runs, which the side computes too,
are ``gates/protocol.py``'s ``tap_rows``.
"""
from __future__ import annotations


def side_spec(settings: dict, profile: dict, **fields) -> dict:
    """A side's spec from kern.yaml: the profile's model and layout, the target's seed and
    weight sets, the profile's context; ``fields`` add or override (rows, steps, ...)."""
    tgt = settings["target"]
    return {"model": profile["model"], "layout": profile["layout"], "seed": tgt["seed"],
            "weight_sets": tgt["weight_sets"], "context": profile["context"], **fields}

