"""Cross-rank operations of the decode step, behind one small interface.

At world size 1 every operation is the identity: a process emulating rank r of a larger
layout computes r's shapes and its partial sums stand for the full sums (the multi-GPU step
makes these real without touching any op). The step calls exactly these:

* ``all_reduce(*tensors)``: sum each tensor over ranks, in place (o_proj outputs, MoE sums);
* ``merge_attention(o_lat, lse)``: merge context-parallel partial attention in place;
* ``select_topk(idx, logits)``: make the DSA choice global from per-rank candidates;
* ``argmax(top_val, top_idx)``: the global argmax over the vocabulary shares, in place.
"""
from __future__ import annotations

import torch


class Identity:
    world = 1

    def all_reduce(self, *tensors: torch.Tensor) -> None:
        return None

    def merge_attention(self, o_lat: torch.Tensor, lse: torch.Tensor) -> None:
        return None

    def select_topk(self, idx: torch.Tensor, logits: torch.Tensor) -> None:
        return None

    def argmax(self, top_val: torch.Tensor, top_idx: torch.Tensor) -> None:
        return None
