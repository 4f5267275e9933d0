"""What a side builds and taps, as plain data made in the loop's process from kern.yaml's
typed sections (gates/settings.py): what crosses into the side is this JSON, never a section.

The side parses it back into its mode's options (``gates/protocol.py``, checked: a key no
mode defines is an error), whose model part is ``gates.side.session.Spec``; nothing here
imports torch or the kernel tree. The batch sizes a tap runs, which the side computes too,
are ``gates/protocol.py``'s ``tap_rows``.
"""
from __future__ import annotations

from .settings import MachineProfile, Target


def side_spec(target: Target, machine: MachineProfile, **fields) -> dict:
    """A side's spec from kern.yaml: the machine profile's model and layout, the target's seed
    and weight sets, the profile's context; ``fields`` add or override (rows, steps, ...)."""
    return {"model": machine.model, "layout": machine.layout, "seed": target.seed,
            "weight_sets": target.weight_sets, "context": machine.context, **fields}

