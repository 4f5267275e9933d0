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

``all_reduce`` has three paths (:func:`choose_all_reduce` picks one per call; the mode comes
from the constructor's ``all_reduce`` or else the ``KERN_ALL_REDUCE`` variable, default auto):

* ``oneshot`` (``kernels/k31/comm/oneshot.py``): each rank copies its partial into a torch
  symmetric-memory buffer, and one Triton kernel reads all W ranks' buffers over NVLink and
  sums them in rank order in f32, rounding once: the same bytes as ``gather``, on every rank,
  with one kernel instead of an NCCL all-gather plus W - 1 adds. CUDA only, 2 to 8 ranks, a
  message no larger than the buffer sized at construction (``max_bytes``).
* ``gather``: the all-gather above; runs on any backend and any message size. The fallback.
* ``nccl``: the backend's own ``all_reduce`` (ring or tree order, bf16 adds), kept only as the
  comparison for benchmarks: its sums differ from the other two in the last bits, so it is
  never chosen unless asked for by name.

``auto`` takes ``oneshot`` where it is available and the call fits its buffer, else ``gather``
(never ``nccl``: the fallback must give the same bytes, so that which path ran never changes a
result). Asking for ``oneshot`` by name where it cannot run is an error that says why.
"""
from __future__ import annotations

import os
from collections import Counter

import torch

from .comm.oneshot import MAX_WORLD, SUMMABLE, pack_offsets

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


# ------------------------------------------------------------------ all-reduce path (pure)

ALL_REDUCE_MODES = ("auto", "oneshot", "gather", "nccl")
ALL_REDUCE_ENV = "KERN_ALL_REDUCE"


class CollectivesError(ValueError):
    """An all-reduce path was asked for that cannot run here (the user changes the setting or
    the environment)."""


def all_reduce_mode(requested: str | None, env: str | None) -> str:
    """The mode: the constructor's ``requested`` if given, else the ``KERN_ALL_REDUCE`` value
    ``env``, else ``auto``."""
    mode = requested if requested is not None else (env or "auto")
    if mode not in ALL_REDUCE_MODES:
        source = "the all_reduce argument" if requested is not None else ALL_REDUCE_ENV
        raise CollectivesError(f"collectives: {source} must be one of {', '.join(ALL_REDUCE_MODES)}, "
                               f"got {mode!r}")
    return mode


def oneshot_unavailable(backend: str, world: int, max_bytes: int, has_symmetric_memory: bool) -> str | None:
    """Why the one-shot path cannot be built in this environment, or None if it can be tried
    (torch's symmetric memory may still refuse at rendezvous, e.g. without peer access)."""
    if "nccl" not in backend:  # "nccl", or a per-device string like "cpu:gloo,cuda:nccl"
        return (f"the process group's backend is {backend}, not nccl: the one-shot all-reduce "
                f"maps peer GPU memory, which needs CUDA GPUs")
    if not has_symmetric_memory:
        return f"torch {torch.__version__} has no torch.distributed._symmetric_memory"
    if not 2 <= world <= MAX_WORLD:
        return f"the kernel sums 2 to {MAX_WORLD} ranks, the group has {world}"
    if max_bytes <= 0:
        return f"the buffer has {max_bytes} bytes (max_bytes must be positive)"
    return None


def oneshot_refusal(tensors, capacity: int) -> str | None:
    """Why one call's ``tensors`` cannot take the one-shot path, or None if they can: each must
    be a contiguous CUDA tensor of a summable dtype, and all of them packed must fit the
    symmetric buffer of ``capacity`` bytes."""
    if not tensors:
        return "the call names no tensor"
    for i, t in enumerate(tensors):
        if t.device.type != "cuda":
            return f"tensor {i} is on {t.device}, not a CUDA device"
        if t.dtype not in SUMMABLE:
            return f"tensor {i} is {t.dtype}, the kernel sums {', '.join(map(str, SUMMABLE))}"
        if not t.is_contiguous():
            return f"tensor {i} is not contiguous (shape {tuple(t.shape)}, stride {t.stride()})"
    need = pack_offsets([t.numel() * t.element_size() for t in tensors])[1]
    if need > capacity:
        return f"the call needs {need} bytes of symmetric buffer, it has {capacity}"
    return None


def choose_all_reduce(mode: str, unavailable: str | None, refusal: str | None) -> str:
    """The path one ``all_reduce`` call takes: ``oneshot``, ``gather`` or ``nccl``.

    ``unavailable``: why the one-shot path was not built (None: it was); ``refusal``: why this
    call cannot use it (None: it can). ``auto`` falls back to ``gather``, whose bytes are the
    one-shot's; an explicit ``oneshot`` that cannot be met raises."""
    if mode in ("gather", "nccl"):
        return mode
    reason = unavailable or refusal
    if mode == "oneshot" and reason:
        where = "here" if unavailable else "for this call"
        raise CollectivesError(
            f"collectives: all_reduce 'oneshot' was asked for but cannot run {where}: {reason}. "
            f"Set {ALL_REDUCE_ENV}=auto (oneshot where it can run, else gather) or gather, or run "
            f"2 to {MAX_WORLD} ranks on CUDA GPUs with torch symmetric memory")
    return "gather" if reason else "oneshot"


# The one-shot path's buffer unless the constructor is told otherwise: the step at the largest
# bucket (256 rows of the full model) needs 5.25 MiB (step_all_reduce_bytes, a test holds it);
# 8 MiB leaves room and is nothing beside an H200's memory. A fixed size keeps the sides'
# ``Distributed(layout)`` call the same for every revision of the tree.
ONESHOT_BUFFER_BYTES = 8 << 20


def step_all_reduce_bytes(hidden: int, latent: int, rows: int) -> int:
    """The largest symmetric buffer one decode-step ``all_reduce`` call needs: the step sums
    ``attn_out`` and ``mlp_out`` ``[rows, hidden]`` alone and ``lat_sum [rows, latent]`` with
    ``shared_out [rows, hidden]`` together, all bf16 (``step.py``). A call the step adds later
    that is larger takes the gather path under ``auto``."""
    return max(pack_offsets([rows * hidden * 2])[1], pack_offsets([rows * latent * 2, rows * hidden * 2])[1])


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

    def __init__(self, layout, group=None, *, all_reduce: str | None = None,
                 max_bytes: int = ONESHOT_BUFFER_BYTES):
        """``all_reduce``: ``auto`` | ``oneshot`` | ``gather`` | ``nccl`` (None: the
        ``KERN_ALL_REDUCE`` variable, else ``auto``); ``max_bytes``: the symmetric buffer of
        the one-shot path, the largest call it takes. Collective: every rank constructs it with
        the same arguments."""
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
        self.all_reduce_mode = all_reduce_mode(all_reduce, os.environ.get(ALL_REDUCE_ENV))
        self.oneshot, self.oneshot_unavailable = None, "not asked for"
        if self.all_reduce_mode in ("auto", "oneshot"):
            self.oneshot, self.oneshot_unavailable = self._build_oneshot(int(max_bytes))
            choose_all_reduce(self.all_reduce_mode, self.oneshot_unavailable, None)  # raises if unmet
        self.paths = Counter()  # all_reduce calls issued per path (a captured call counts once)

    def _build_oneshot(self, max_bytes: int):
        """(the one-shot all-reduce, None), or (None, why not); the same answer on every rank."""
        try:
            import torch.distributed._symmetric_memory  # noqa: F401
            has_symm = True
        except ImportError:
            has_symm = False
        backend = str(self.dist.get_backend(self.group))
        reason = oneshot_unavailable(backend, self.world, max_bytes, has_symm)
        if reason:  # decided from what every rank shares: no rank goes further
            return None, reason
        from .comm.oneshot import OneShotAllReduce

        group = self.group or self.dist.group.WORLD
        device = torch.device("cuda", torch.cuda.current_device())
        built = None
        try:
            built = OneShotAllReduce(group.group_name, self.rank, self.world, device, max_bytes)
        except Exception as e:  # torch's own refusal (no peer access, no IPC, old driver)
            reason = f"torch symmetric memory failed on rank {self.rank}: {type(e).__name__}: {e}"
        # every rank must take the same path, or one waits in a barrier kernel while another
        # waits in an NCCL all-gather: the one-shot path is used only if every rank built it
        ok = torch.tensor([0 if reason else 1], dtype=torch.int32, device=device)
        self.dist.all_reduce(ok, op=self.dist.ReduceOp.MIN, group=self.group)
        if int(ok.item()) == 0:
            return None, reason or "torch symmetric memory failed on another rank (its log says why)"
        return built, None

    def _gather(self, t: torch.Tensor) -> torch.Tensor:
        """``[W, *t.shape]``: every rank's ``t`` in rank order."""
        # flat: gloo wants the output as [W * n] of an [n] input
        out = torch.empty(self.world * t.numel(), dtype=t.dtype, device=t.device)
        self._all_gather(out, t.contiguous().view(-1), group=self.group)
        return out.view(self.world, *t.shape)

    def all_reduce(self, *tensors: torch.Tensor) -> None:
        refusal = oneshot_refusal(tensors, self.oneshot.capacity) if self.oneshot else None
        path = choose_all_reduce(self.all_reduce_mode, self.oneshot_unavailable, refusal)
        self.paths[path] += 1
        if path == "oneshot":
            self.oneshot.reduce(*tensors)
        elif path == "nccl":
            for t in tensors:
                self.dist.all_reduce(t, group=self.group)
        else:
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
