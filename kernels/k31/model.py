"""One rank's model instance: shapes, weights and decode state on a device. Protected.

This is the tree's entry point for the gates: ``build_model`` makes the seeded model,
``kernels.k31.step.DecodeStep(model, rows, ops, comm)`` runs it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .config import Dims, Layout, Shapes
from .state import DecodeState, build_state
from .weights import Weights, build_weights


@dataclass
class Model:
    shapes: Shapes
    weights: Weights
    state: DecodeState
    device: torch.device
    seed: int


def build_model(dims: Dims, layout: Layout, *, rows: int, max_position: int, seed: int = 0,
                weight_sets: int = 4, device="cpu", progress=None) -> Model:
    sh = Shapes(dims, layout)
    device = torch.device(device)
    weights = build_weights(sh, seed=seed, weight_sets=weight_sets, device=device, progress=progress)
    state = build_state(sh, rows=rows, max_position=max_position, seed=seed, device=device,
                        progress=progress)
    return Model(sh, weights, state, device, seed)
