"""What a side builds and taps, as plain data made in the loop's process from kern.yaml.

The side parses it back into its mode's options (``gates/protocol.py``, checked: a key no
mode defines is an error), whose model part is ``gates.side.session.Spec``; nothing here
imports torch or the kernel tree.
"""
from __future__ import annotations


def side_spec(settings: dict, profile: dict, **fields) -> dict:
    """A side's spec from kern.yaml: the profile's model and layout, the target's seed and
    weight sets, the profile's context; ``fields`` add or override (rows, steps, ...)."""
    tgt = settings["target"]
    return {"model": profile["model"], "layout": profile["layout"], "seed": tgt["seed"],
            "weight_sets": tgt["weight_sets"], "context": profile["context"], **fields}


def tap_rows(test_rows: list[int], buckets: list[int], extra=()) -> list[int]:
    """The accuracy gate's batch sizes: the profile's test rows, the judgment's hidden extra
    ones (``extra``), then every bucket the scorer times that is not among them. A kernel
    special-cased to the bench's batch sizes must meet the gate at exactly those sizes,
    whatever a profile's test rows say; one special-cased to the visible sizes meets sizes
    it could not know. The spec a side gets holds the visible ones (``tap_rows(t, b)``); the
    side adds the hidden ones it is handed as ``tap_rows(spec_rows, [], extra)``."""
    out = list(dict.fromkeys(test_rows))
    out += [r for r in dict.fromkeys(extra) if r not in out]
    return out + [b for b in dict.fromkeys(buckets) if b not in out]
