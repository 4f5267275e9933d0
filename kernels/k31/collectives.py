"""Cross-rank operations of the decode step, behind one small interface.

The step calls exactly these (in place, no host sync, so a CUDA graph can hold them):

* ``all_reduce(*tensors)``: sum each tensor over ranks (o_proj outputs, MoE and dense sums);
* ``gather_heads(q, q_all)``: every rank's MLA queries ``[rows, heads_r, cache_row]`` side by
  side in ``q_all [rows, world * heads_r, cache_row]`` (rank order). Attention heads are split
  TP-wise and the MLA cache token-wise (DCP) over the same ranks, so a rank holds heads ``h_r``
  but only tokens ``t % cp == r``: it attends every rank's heads over its own tokens and
  ``merge_attention`` hands each head's partials back to the rank that owns the head;
* ``merge_attention(o_part, lse_part, o_lat, lse)``: the exact merge of the per-rank partials
  ``(o, log-sum-exp)`` of this rank's heads, written to ``o_lat [rows, heads_r, kv_lora]`` and
  ``lse [rows, heads_r]``;
* ``select_topk(idx, logits)``: the DSA choice made global from per-rank candidates; ``idx``
  keeps the chosen tokens this rank owns (local ids, ascending, -1 after);
* ``argmax(top_val, top_idx)``: the global argmax over the vocabulary shares.

:class:`Identity` (world 1): every operation is nothing. A process emulating rank r of a
larger layout computes r's shapes and its partial sums stand for the full sums; the step then
aliases ``q_all`` to ``q`` and ``o_part`` to ``o_lat``, so the 1-process step is the same
sequence of op calls as before these collectives existed.

:class:`Distributed` (world W > 1, over ``torch.distributed``: gloo on the CPU, NCCL on GPUs)
moves data with all-gathers and one all-to-all only; every sum, merge and choice is then made
by the pure functions below on identical gathered data, in rank order, so every rank computes
the same bytes whatever the backend's own reduction order (a backend all-reduce may sum in a
ring or tree order that differs between ranks' chunks and between backends, and sums bf16 in
bf16). Partial sums accumulate in f32 and round once to the tensor's dtype. This is also the
one-shot all-reduce's algorithm (each rank reads every peer's partial and sums in a fixed order),
so a custom one-shot kernel can be bit-identical to this fallback.
"""
from __future__ import annotations

import torch

# ------------------------------------------------------------------ pure math (tested directly)


def sum_in_rank_order(parts: torch.Tensor) -> torch.Tensor:
    """``parts [W, ...]`` summed over ranks 0, 1, ... in f32 (one rounding per add, fixed order)."""
    acc = parts[0].float().clone()
    for s in range(1, parts.shape[0]):
        acc += parts[s].float()
    return acc


def merge_partials(o: torch.Tensor, lse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact merge of attention partials over disjoint token sets, in f32, rank order.

    ``o [W, ...heads, L]`` is each part's softmax-weighted value (normalized within the part),
    ``lse [W, ...heads]`` its natural log-sum-exp of scores (``-inf`` for a part with no token).
    Returns ``(o, lse)`` of the attention over the union: ``lse = log sum_s exp(lse_s)``,
    ``o = sum_s exp(lse_s - lse) o_s``. No token anywhere: ``o = 0``, ``lse = -inf``."""
    lse = lse.float()
    m = lse[0].clone()
    for s in range(1, lse.shape[0]):
        m = torch.maximum(m, lse[s])
    m_safe = torch.where(m == float("-inf"), torch.zeros_like(m), m)  # exp(-inf - 0) = 0
    w = [torch.exp(lse[s] - m_safe) for s in range(lse.shape[0])]
    tot = w[0].clone()
    for s in range(1, len(w)):
        tot += w[s]
    has = tot > 0
    tot_safe = torch.where(has, tot, torch.ones_like(tot))
    out = torch.zeros_like(o[0], dtype=torch.float32)
    for s in range(len(w)):
        out += (w[s] / tot_safe).unsqueeze(-1) * o[s].float()
    lse_out = torch.where(has, m_safe + torch.log(tot_safe), torch.full_like(m, float("-inf")))
    return out, lse_out


_ID_BITS = 31  # global token ids < 2**31 (a context of two billion tokens)
_LOW = (1 << 32) - 1


def order_key(values: torch.Tensor, gids: torch.Tensor) -> torch.Tensor:
    """int64 keys whose descending order is (value descending, global id ascending), the DSA
    top-k's order; ``gids < 0`` (no candidate) get the smallest key.

    The f32 value becomes the order-preserving int32 of ``mla.topk`` (``-0.0`` counted as
    ``+0.0``) in the high half; ``2**31 - 1 - gid`` fills the low half. One integer compare
    then decides, identically on every device and sort implementation."""
    v = torch.where(values == 0, torch.zeros_like(values), values.float())
    b = v.view(torch.int32)
    signed = b ^ ((b >> 31) & 0x7FFFFFFF)
    key = (signed.long() << 32) | ((1 << _ID_BITS) - 1 - gids.long().clamp(min=0))
    return torch.where(gids >= 0, key, torch.full_like(key, torch.iinfo(torch.int64).min))


def choose_topk(values: torch.Tensor, gids: torch.Tensor, k: int) -> torch.Tensor:
    """The global top-``k`` from every rank's candidates.

    ``values [W, rows, n]`` f32 and ``gids [W, rows, n]`` int64 (global token ids, -1 where a
    rank has no candidate). Returns ``[rows, k]`` int64: the chosen global ids ascending, -1
    after. Equals the top-k over the whole context (ties: lower id) whenever each rank's
    candidates are its own top-k under the same order, as ``mla.topk`` chooses them."""
    W, rows, n = values.shape
    key = order_key(values, gids).permute(1, 0, 2).reshape(rows, W * n)
    top = torch.topk(key, min(k, W * n), dim=1).values  # keys are distinct where valid
    valid = top != torch.iinfo(torch.int64).min
    gid = (1 << _ID_BITS) - 1 - (top & _LOW)
    gid = torch.where(valid, gid, torch.full_like(gid, torch.iinfo(torch.int64).max))
    gid = torch.sort(gid, dim=1).values
    gid = torch.where(gid == torch.iinfo(torch.int64).max, torch.full_like(gid, -1), gid)
    if gid.shape[1] < k:
        gid = torch.cat([gid, gid.new_full((rows, k - gid.shape[1]), -1)], dim=1)
    return gid


def owned_local(gids: torch.Tensor, cp: int, cp_rank: int) -> torch.Tensor:
    """Of chosen global ids ``[rows, k]`` (-1 unused), those rank ``cp_rank`` holds
    (``t % cp == cp_rank``) as its local ids ``t // cp``: ascending, -1 after."""
    big = torch.iinfo(torch.int64).max
    mine = (gids >= 0) & (gids % cp == cp_rank)
    local = torch.where(mine, gids // cp, torch.full_like(gids, big))
    local = torch.sort(local, dim=1).values
    return torch.where(local == big, torch.full_like(local, -1), local)


def argmax_in_rank_order(values: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``values [W, rows]``, ``ids [W, rows]`` (each share's max and its lowest global id) ->
    the global max and its id. Shares cover increasing ids in rank order and only a strictly
    larger value replaces the best, so ties keep the lowest id, as ``lm_head.argmax`` does."""
    best_v, best_i = values[0].clone(), ids[0].clone()
    for s in range(1, values.shape[0]):
        take = values[s] > best_v
        best_v = torch.where(take, values[s], best_v)
        best_i = torch.where(take, ids[s], best_i)
    return best_v, best_i


# ------------------------------------------------------------------ implementations


class Identity:
    world = 1

    def all_reduce(self, *tensors: torch.Tensor) -> None:
        return None

    def gather_heads(self, q: torch.Tensor, q_all: torch.Tensor) -> None:
        return None  # the step passes q itself as q_all

    def merge_attention(self, o_part: torch.Tensor, lse_part: torch.Tensor, o_lat: torch.Tensor,
                        lse: torch.Tensor) -> None:
        return None  # the step passes o_lat / lse themselves as the partials

    def select_topk(self, idx: torch.Tensor, logits: torch.Tensor) -> None:
        return None

    def argmax(self, top_val: torch.Tensor, top_idx: torch.Tensor) -> None:
        return None


class Distributed:
    """The collectives over an initialized ``torch.distributed`` process group of ``world``
    processes; process ``p`` computes layout rank ``p``. With ``world`` below the layout's rank
    count (``--emulate``), each process computes its rank's share of the larger layout and the
    collectives span the processes that exist."""

    def __init__(self, layout, group=None):
        import torch.distributed as dist

        self.dist, self.group = dist, group
        # torch 2.13 renamed all_gather_into_tensor (deprecated there); the device's 2.11 has
        # only the old name
        self._all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.cp, self.cp_rank = layout.cp, layout.cp_rank
        if layout.rank != self.rank or self.world != layout.world:
            raise ValueError(
                f"collectives: process {self.rank} of {self.world} must compute layout rank "
                f"{self.rank} of world {self.world}; the caller built layout rank {layout.rank} "
                f"of world {layout.world}")

    def _gather(self, t: torch.Tensor) -> torch.Tensor:
        """``[W, *t.shape]``: every rank's ``t`` in rank order."""
        # flat: gloo wants the output as [W * n] of an [n] input
        out = torch.empty(self.world * t.numel(), dtype=t.dtype, device=t.device)
        self._all_gather(out, t.contiguous().view(-1), group=self.group)
        return out.view(self.world, *t.shape)

    def all_reduce(self, *tensors: torch.Tensor) -> None:
        for t in tensors:
            t.copy_(sum_in_rank_order(self._gather(t)))

    def gather_heads(self, q: torch.Tensor, q_all: torch.Tensor) -> None:
        rows, h = q.shape[0], q.shape[1]
        parts = self._gather(q)  # [W, rows, h, C]
        q_all.view(rows, self.world, h, *q.shape[2:]).copy_(parts.transpose(0, 1))

    def merge_attention(self, o_part: torch.Tensor, lse_part: torch.Tensor, o_lat: torch.Tensor,
                        lse: torch.Tensor) -> None:
        rows, h = o_lat.shape[0], o_lat.shape[1]
        W = self.world
        # chunk s of what this rank sends: its partials of rank s's heads
        send_o = o_part.view(rows, W, h, -1).transpose(0, 1).contiguous()
        send_l = lse_part.view(rows, W, h).transpose(0, 1).contiguous()
        recv_o, recv_l = torch.empty_like(send_o), torch.empty_like(send_l)
        self.dist.all_to_all_single(recv_o, send_o, group=self.group)
        self.dist.all_to_all_single(recv_l, send_l, group=self.group)
        o, l = merge_partials(recv_o, recv_l)  # recv[s]: rank s's partials of this rank's heads
        o_lat.copy_(o)
        lse.copy_(l)

    def select_topk(self, idx: torch.Tensor, logits: torch.Tensor) -> None:
        valid = idx >= 0
        local = idx.long().clamp(min=0)
        values = torch.gather(logits, 1, local)
        gids = torch.where(valid, local * self.cp + self.cp_rank, torch.full_like(local, -1))
        chosen = choose_topk(self._gather(values), self._gather(gids), idx.shape[1])
        idx.copy_(owned_local(chosen, self.cp, self.cp_rank))

    def argmax(self, top_val: torch.Tensor, top_idx: torch.Tensor) -> None:
        v, i = argmax_in_rank_order(self._gather(top_val), self._gather(top_idx))
        top_val.copy_(v)
        top_idx.copy_(i)

    def gather_shares(self, t: torch.Tensor) -> torch.Tensor:
        """Not a step operation: the vocabulary shares ``[rows, n_r]`` of every rank side by side
        (``[rows, W * n_r]``, rank order), for reports and tests."""
        parts = self._gather(t)
        return torch.cat(list(parts), dim=-1)
