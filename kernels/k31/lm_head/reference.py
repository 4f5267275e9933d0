"""The protected fp32 torch reference of lm_head.argmax, beside the kernels.

``kernels/k31/reference.py`` states the contract every reference keeps and holds the
primitives families share; ``contracts.py`` names each op's reference. Protected: the
gates judge kernels against it, so no candidate edits it and no kernel imports it (the
scope gate refuses both).
"""
from __future__ import annotations

from ..config import Shapes


def lm_head(sh: Shapes, *, x, w):
    """Logits over this rank's vocabulary share and their argmax (ties: lower id); ids are
    global (``vocab_first`` added)."""
    logits = x.float() @ w.float().t()
    top_val, top = logits.max(dim=-1)  # torch returns the first maximal index
    return {"logits": logits, "top_val": top_val, "top_idx": top.long() + sh.vocab_first}
