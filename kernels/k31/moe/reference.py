"""The protected fp32 torch reference of the MoE ops (moe.router, moe.experts, moe.combine,
moe.latent_norm, moe.situ), beside the kernels.

``kernels/k31/reference.py`` states the contract every reference keeps and holds the
primitives families share; ``contracts.py`` names each op's reference. Protected: the
gates judge kernels against it, so no candidate edits it and no kernel imports it (the
scope gate refuses both).
"""
from __future__ import annotations

import torch

from ..config import Shapes
from ..formats import mxfp4_decode
from ..reference import BF16, F32, rms_norm


def situ(g: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """SiTU: ``4 tanh(g/4) * sigmoid(g) * 25 tanh(u/25)`` (f32)."""
    g, u = g.float(), u.float()
    return 4.0 * torch.tanh(g / 4.0) * torch.sigmoid(g) * 25.0 * torch.tanh(u / 25.0)


def moe_router(sh: Shapes, *, logits, bias):
    """``s = sigmoid(logits)``; top-k of ``s + bias`` (ties: lower expert id; order: by that
    key, best first); weights ``s[chosen] / sum(s[chosen]) * routed_scale``."""
    dims = sh.dims
    s = torch.sigmoid(logits.float())
    key = (s + bias.float()).double()
    # stable sort on -key: equal keys keep ascending expert order
    ids = torch.sort(-key, dim=-1, stable=True).indices[:, :dims.top_k]
    chosen = torch.gather(s, 1, ids)
    w = chosen / chosen.sum(-1, keepdim=True) * dims.routed_scale
    return {"ids": ids.to(torch.int32), "w": w.to(F32)}


def moe_experts_defined(sh: Shapes, ids: torch.Tensor) -> torch.Tensor:
    """Mask over the ``[rows * top_k]`` pairs that this rank's experts compute."""
    e = ids.reshape(-1).long()
    return (e >= sh.expert_first) & (e < sh.expert_first + sh.experts)


def moe_experts(sh: Shapes, *, x, ids, w1, s1, w2, s2, decoded: "DecodedExperts | None" = None):
    """Routed experts on this rank: for every (row, slot) pair whose expert is local,
    ``h = situ(x W1_gate, x W1_up)`` (bf16) and ``y = h W2`` (bf16), stored at pair index
    ``row * top_k + slot``. Other pairs are not this rank's work and are left undefined.

    Each expert's pairs (in pair order) are one f32 product per weight; the weights of
    ``EXPERT_CHUNK`` experts are decoded at once and the pairs found with one sort, so the
    reference costs no host sync per expert (at full size it runs for hundreds of experts per
    call in the accuracy gate's band and pinned passes).

    ``decoded``: a :class:`DecodedExperts` that keeps decoded weights across calls (the band
    pass of main's side passes its own; the values are the same bit for bit)."""
    dims = sh.dims
    rows, k = ids.shape
    y = torch.zeros(rows * k, dims.latent, dtype=BF16, device=x.device)
    local = moe_experts_defined(sh, ids)
    le = torch.where(local, ids.reshape(-1).long() - sh.expert_first, torch.full_like(local, -1, dtype=torch.long))
    order = torch.sort(le, stable=True).indices  # pair order kept within each expert
    order = order[le[order] >= 0]
    counts = torch.bincount(le[local], minlength=sh.experts)
    experts = counts.nonzero().flatten()
    sizes = counts[experts].tolist()
    experts = experts.tolist()
    _each_expert(sh, x, y, order, k, experts, sizes, w1, s1, w2, s2, decoded)
    return {"y": y}


# Functions the compile baseline (gates/side/replays.py) keeps out of traced graphs while their
# callees still compile: traced, the expert loop unrolls over this call's experts, and every new
# routing (their number and sizes) recompiles it (2026-12-07, CPU: 448 experts, one recompile of
# ~40 s a call, never stable).
OUTSIDE_COMPILED_GRAPHS = ("_each_expert",)


def _each_expert(sh: Shapes, x, y, order, k: int, experts: list, sizes: list, w1, s1, w2, s2, decoded):
    """``moe_experts``' loop: the experts' weights decoded a chunk at a time, each expert's
    pairs (``order``, grouped by expert in ``experts``' order; pair ``i`` is row ``i // k``)
    written into ``y``."""
    dims = sh.dims
    start = 0
    for c0 in range(0, len(experts), EXPERT_CHUNK):
        chunk = experts[c0:c0 + EXPERT_CHUNK]
        if decoded is None:
            sel = torch.tensor(chunk, device=w1.device)
            W1 = mxfp4_decode(w1[sel], s1[sel], dims.mxfp4_group)  # [c, 2I, latent] f32
            W2 = mxfp4_decode(w2[sel], s2[sel], dims.mxfp4_group)  # [c, latent, I] f32
        else:
            W1 = decoded.weights(w1, s1, chunk, dims.mxfp4_group)
            W2 = decoded.weights(w2, s2, chunk, dims.mxfp4_group)
        for j, n in enumerate(sizes[c0:c0 + EXPERT_CHUNK]):
            pairs = order[start:start + n]
            start += n
            y[pairs] = _expert_ffn(x, pairs, k, W1[j], W2[j], sh.expert_inter)


def _expert_ffn(x, pairs, k: int, w1, w2, inter: int) -> torch.Tensor:
    """One expert on its pairs' rows: ``situ(x W1_gate, x W1_up)`` (bf16), then ``h W2`` (bf16)."""
    xr = x[pairs // k].float()
    gu = xr @ w1.t()
    h = situ(gu[:, :inter], gu[:, inter:]).to(BF16)
    return (h.float() @ w2.t()).to(BF16)


class DecodedExperts:
    """Decoded copies of MXFP4 expert weights, each expert decoded once and kept while its
    weight tensor lives unchanged (its ``_version``), so the accuracy gate's band pass, which
    runs every moe.experts call of the tap on this reference, does not decode hundreds of
    experts per call (at full size the decode, not the products, took its minutes on the H200).

    Exact: an MXFP4 value is an e2m1 magnitude (at most 3 significant bits) times a power of
    two within f32's exponent range; bf16 has f32's exponent range and 8 significant bits, so it
    holds every decoded value (subnormals down to 2**-133 included), and its ``.float()`` is
    ``mxfp4_decode``'s value bit for bit (tested). Kept in bf16, half of f32's memory, and only
    while the device keeps ``headroom`` free beside it (else decoded per call, as before).

    Only the gates hold one, and only in main's side process (the band pass): a cache a
    candidate's process could reach is a cache it could fill with the values it wants the
    reference to give."""

    def __init__(self, headroom_gib: float = 12.0, cpu_limit_gib: float = 4.0):
        self.headroom = int(headroom_gib * 2**30)
        self.cpu_limit = int(cpu_limit_gib * 2**30)
        self._kept: dict = {}  # id(packed) -> (weakref, versions, bf16 [E, N, K], decoded mask)

    def weights(self, packed: torch.Tensor, scales: torch.Tensor, chunk: list[int],
                group: int) -> torch.Tensor:
        sel = torch.tensor(chunk, device=packed.device)
        entry = self._entry(packed, scales, group)
        if entry is None:
            return mxfp4_decode(packed[sel], scales[sel], group)
        buf, done = entry[2], entry[3]
        missing = [e for e in chunk if not done[e]]
        if missing:
            m = torch.tensor(missing, device=packed.device)
            buf[m] = mxfp4_decode(packed[m], scales[m], group).to(BF16)
            for e in missing:
                done[e] = True
        return buf[sel].float()

    def _entry(self, packed, scales, group):
        import weakref

        key = id(packed)
        versions = (packed._version, id(scales), scales._version, group)
        entry = self._kept.get(key)
        if entry is not None and entry[0]() is packed and entry[1] == versions:
            return entry
        self._kept.pop(key, None)
        shape = (*packed.shape[:-1], packed.shape[-1] * 2)
        need = 2 * shape[0] * shape[1] * shape[2]
        if packed.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(packed.device)
            if free < need + self.headroom:
                return None
        elif need + sum(e[2].numel() * 2 for e in self._kept.values()) > self.cpu_limit:
            return None
        entry = (weakref.ref(packed, lambda _r, k=key: self._kept.pop(k, None)), versions,
                 torch.empty(shape, dtype=BF16, device=packed.device), [False] * shape[0])
        self._kept[key] = entry
        return entry


EXPERT_CHUNK = 16  # experts whose weights the reference decodes at once (~2 GB f32 at full size)


def moe_combine(sh: Shapes, *, y, ids, w):
    """``out[row] = sum over local slots of w[row, slot] * y[row * top_k + slot]``."""
    rows, k = ids.shape
    local = moe_experts_defined(sh, ids).reshape(rows, k)
    yy = y.float().reshape(rows, k, -1)
    ww = torch.where(local, w.float(), torch.zeros_like(w.float()))
    yy = torch.where(local.unsqueeze(-1), yy, torch.zeros_like(yy))  # undefined pairs
    return {"out": (ww.unsqueeze(-1) * yy).sum(1).to(BF16)}


def rmsnorm(sh: Shapes, *, x, w):
    return {"out": rms_norm(x, w, sh.dims.eps).to(BF16)}


def moe_situ(sh: Shapes, *, gu):
    inter = gu.shape[1] // 2
    return {"out": situ(gu[:, :inter], gu[:, inter:]).to(BF16)}
