"""K3.1 dimensions, the parallel layout, and the per-rank shapes they imply.

Protected: the gates, the weights and the workload are all derived from these objects, so a
candidate commit may not edit this file. Every number of K3.1's published description lives
here once (docs/architecture.md: "What is real and what is not"); values it did not give are marked
``(chosen)``.

Two objects:

* :class:`Dims` — the model (``Dims.full()`` is K3.1, ``Dims.small()`` a few-layer model with
  the same structure for CPU tests).
* :class:`Layout` — how the model is split over ranks and which rank this process is.
  ``Layout.unsharded()`` has every size 1; ``Layout.published(rank)`` is rank ``rank`` of the
  8-GPU deployment (attention TP8 + DCP8, experts EP2 x TP4).

:class:`Shapes` combines the two into the sizes one rank actually computes with.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field


class ConfigError(ValueError):
    """A configuration that cannot describe a runnable model. Raised for the user's config."""


@dataclass(frozen=True)
class Dims:
    name: str
    hidden: int
    vocab: int
    n_layers: int
    dense_layers: tuple[int, ...]  # layers whose MLP is dense; all others have the latent MoE
    mla_layers: tuple[int, ...]  # layers whose attention is MLA; all others are KDA
    eps: float
    # KDA
    kda_heads: int
    kda_head_dim: int
    conv_taps: int
    # MLA + DSA
    mla_heads: int
    q_lora: int
    kv_lora: int
    rope_dim: int
    nope_dim: int
    v_dim: int
    rope_theta: float  # (chosen)
    idx_heads: int  # (chosen)
    idx_dim: int  # (chosen)
    idx_topk: int
    page_size: int  # tokens per KV-cache page (chosen)
    # MoE
    n_experts: int
    top_k: int
    latent: int
    expert_inter: int
    shared_inter: int
    dense_inter: int
    routed_scale: float  # (chosen)
    mxfp4_group: int
    # residual: attention-residual mix
    attnres_block: int  # layers per block (chosen)
    # numerics
    kda_state_dtype: str  # "bf16" (published) or "f32"
    logit_std: float  # spread of the synthetic lm_head (chosen)
    # RMS of each sublayer's output (chosen). Random weights make a 93-layer model chaotic:
    # top-k choices (MoE routing, DSA) flip under rounding-level perturbations and the flips
    # compound; at 0.5 a 1e-3 perturbation decorrelates the logits (rel 0.8, measured on a
    # 93-layer narrow model), at 0.02 logits move <= ~5 % (KL <= 0.03) and argmax holds.
    branch_scale: float = 0.02

    @staticmethod
    def full(**overrides) -> "Dims":
        n = 93
        mla = tuple(range(3, n, 4)) + (n - 1,)
        d = Dims(
            name="full", hidden=7168, vocab=163840, n_layers=n, dense_layers=(0,), mla_layers=mla,
            eps=1e-5, kda_heads=96, kda_head_dim=128, conv_taps=4,
            mla_heads=96, q_lora=1536, kv_lora=512, rope_dim=64, nope_dim=128, v_dim=128,
            rope_theta=50000.0, idx_heads=64, idx_dim=128, idx_topk=2048, page_size=64,
            n_experts=896, top_k=16, latent=3584, expert_inter=3072, shared_inter=6144,
            dense_inter=33792, routed_scale=2.5, mxfp4_group=32, attnres_block=12,
            kda_state_dtype="bf16", logit_std=3.0,
        )
        return dataclasses.replace(d, **overrides).checked()

    @staticmethod
    def small(**overrides) -> "Dims":
        """Five layers: dense layer 0, KDA at 0..2, MLA at 3 and 4 (the last), 16 experts."""
        d = Dims(
            name="small", hidden=128, vocab=1024, n_layers=5, dense_layers=(0,), mla_layers=(3, 4),
            eps=1e-5, kda_heads=4, kda_head_dim=32, conv_taps=4,
            mla_heads=4, q_lora=64, kv_lora=64, rope_dim=16, nope_dim=32, v_dim=32,
            rope_theta=50000.0, idx_heads=4, idx_dim=32, idx_topk=32, page_size=16,
            n_experts=16, top_k=4, latent=64, expert_inter=64, shared_inter=64,
            dense_inter=192, routed_scale=2.5, mxfp4_group=32, attnres_block=2,
            kda_state_dtype="bf16", logit_std=3.0,
        )
        return dataclasses.replace(d, **overrides).checked()

    @staticmethod
    def named(name: str, **overrides) -> "Dims":
        if name == "full":
            return Dims.full(**overrides)
        if name == "small":
            return Dims.small(**overrides)
        raise ConfigError(f"config: model must be 'full' or 'small', got {name!r}")

    # -- derived ----------------------------------------------------------------------------
    @property
    def kda_layers(self) -> tuple[int, ...]:
        return tuple(l for l in range(self.n_layers) if l not in self.mla_layers)

    @property
    def moe_layers(self) -> tuple[int, ...]:
        return tuple(l for l in range(self.n_layers) if l not in self.dense_layers)

    @property
    def q_head_dim(self) -> int:
        return self.nope_dim + self.rope_dim

    @property
    def cache_row(self) -> int:
        """Values in one MLA cache row: the latent and the rope key (576 at full size)."""
        return self.kv_lora + self.rope_dim

    @property
    def n_blocks(self) -> int:
        return -(-self.n_layers // self.attnres_block)

    @property
    def max_snapshots(self) -> int:
        """Completed block snapshots the last layer mixes over, the embedding counted (8 at full)."""
        return 1 + (self.n_layers - 1) // self.attnres_block

    def checked(self) -> "Dims":
        problems = []
        if self.kda_state_dtype not in ("bf16", "f32"):
            problems.append(f"kda_state_dtype must be 'bf16' or 'f32', got {self.kda_state_dtype!r}")
        if not self.mla_layers or self.mla_layers[-1] != self.n_layers - 1:
            problems.append(f"the last layer must be MLA, got mla_layers={self.mla_layers}")
        if any(not 0 <= l < self.n_layers for l in self.mla_layers + self.dense_layers):
            problems.append("layer indices must lie in [0, n_layers)")
        for name in ("latent", "expert_inter"):
            if getattr(self, name) % self.mxfp4_group:
                problems.append(f"{name} must be a multiple of the MXFP4 group {self.mxfp4_group}")
        if self.top_k > self.n_experts:
            problems.append("top_k exceeds n_experts")
        if problems:
            raise ConfigError("config: " + "; ".join(problems))
        return self


@dataclass(frozen=True)
class Layout:
    """The split of the model over ranks, and which rank this process computes.

    ``tp``: attention heads, dense intermediates and vocabulary split by rank.
    ``cp``: decode context parallel; token ``t`` of every request lives on rank ``t % cp``.
    ``ep`` x ``etp``: experts split into ``ep`` groups, each expert's intermediate into ``etp``.
    ``world``: processes that really exist; process ``p`` computes rank ``p``. When ``world``
    equals the rank count the model is really split. When it is smaller (emulation), each
    process computes its rank's shapes of the larger layout, so per-rank cost matches that
    deployment, and the collectives span the ``world`` processes (at ``world == 1`` every
    cross-rank sum is the identity).
    """

    tp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    rank: int = 0
    world: int = 1

    @staticmethod
    def unsharded() -> "Layout":
        return Layout()

    @staticmethod
    def published(rank: int = 0, world: int = 1) -> "Layout":
        return Layout(tp=8, cp=8, ep=2, etp=4, rank=rank, world=world).checked()

    @property
    def ranks(self) -> int:
        return self.tp

    @property
    def ep_rank(self) -> int:
        return self.rank // self.etp

    @property
    def etp_rank(self) -> int:
        return self.rank % self.etp

    @property
    def cp_rank(self) -> int:
        return self.rank % self.cp

    def checked(self) -> "Layout":
        if self.tp != self.cp or self.tp != self.ep * self.etp:
            raise ConfigError(
                f"layout: tp, cp and ep*etp must all equal the rank count, got tp={self.tp} "
                f"cp={self.cp} ep={self.ep} etp={self.etp}")
        if not 0 <= self.rank < self.tp:
            raise ConfigError(f"layout: rank must lie in [0, {self.tp}), got {self.rank}")
        if self.world < 1 or self.tp % self.world:
            raise ConfigError(f"layout: world must divide the rank count {self.tp} (equal to it, "
                              f"or fewer processes emulating it), got {self.world}")
        if self.world > 1 and self.rank >= self.world:
            raise ConfigError(f"layout: process ranks lie in [0, {self.world}), got {self.rank}")
        return self

    @staticmethod
    def named(name: str, rank: int = 0, world: int = 1) -> "Layout":
        if name == "unsharded":
            return Layout.unsharded()
        if name == "published":
            return Layout.published(rank, world)
        if name.startswith("tp"):
            n = int(name[2:])
            ep = 2 if n % 2 == 0 and n > 1 else 1
            return Layout(tp=n, cp=n, ep=ep, etp=n // ep, rank=rank, world=world).checked()
        raise ConfigError(f"layout: must be 'unsharded', 'published' or 'tpN', got {name!r}")


@dataclass(frozen=True)
class Shapes:
    """What one rank computes: ``Dims`` divided by ``Layout``."""

    dims: Dims
    layout: Layout
    kda_heads: int = field(init=False)
    kda_inner: int = field(init=False)
    mla_heads: int = field(init=False)
    mla_inner: int = field(init=False)
    experts: int = field(init=False)
    expert_first: int = field(init=False)
    expert_inter: int = field(init=False)
    shared_inter: int = field(init=False)
    dense_inter: int = field(init=False)
    vocab: int = field(init=False)
    vocab_first: int = field(init=False)
    ab_width: int = field(init=False)
    mla_in_width: int = field(init=False)
    q_b_width: int = field(init=False)

    def __post_init__(self):
        d, lo = self.dims, self.layout

        def split(total: int, parts: int, what: str) -> int:
            if total % parts:
                raise ConfigError(f"layout: {what}={total} does not split into {parts} parts")
            return total // parts

        s = object.__setattr__
        s(self, "kda_heads", split(d.kda_heads, lo.tp, "kda_heads"))
        s(self, "kda_inner", self.kda_heads * d.kda_head_dim)
        s(self, "mla_heads", split(d.mla_heads, lo.tp, "mla_heads"))
        s(self, "mla_inner", self.mla_heads * d.v_dim)
        s(self, "experts", split(d.n_experts, lo.ep, "n_experts"))
        s(self, "expert_first", lo.ep_rank * self.experts)
        s(self, "expert_inter", split(d.expert_inter, lo.etp, "expert_inter"))
        if self.expert_inter % d.mxfp4_group:
            raise ConfigError("layout: per-rank expert_inter must be a multiple of the MXFP4 group")
        s(self, "shared_inter", split(d.shared_inter, lo.tp, "shared_inter"))
        s(self, "dense_inter", split(d.dense_inter, lo.tp, "dense_inter"))
        s(self, "vocab", split(d.vocab, lo.tp, "vocab"))
        s(self, "vocab_first", lo.rank * self.vocab)
        # beta (one per local head) | f_a (kda_head_dim) | padding to a multiple of 16
        s(self, "ab_width", -(-(self.kda_heads + d.kda_head_dim) // 16) * 16)
        # q_a | kv_a (latent + rope) | output gate | indexer key | indexer head weights
        s(self, "mla_in_width", d.q_lora + d.cache_row + self.mla_inner + d.idx_dim + d.idx_heads)
        # per-head q (nope + rope) | indexer queries (every index head, replicated)
        s(self, "q_b_width", self.mla_heads * d.q_head_dim + d.idx_heads * d.idx_dim)

    def context_on_rank(self, total_tokens: int) -> int:
        """Tokens of a ``total_tokens`` context that rank ``cp_rank`` holds (round robin)."""
        r, cp = self.layout.cp_rank, self.layout.cp
        return 0 if total_tokens <= r else (total_tokens - 1 - r) // cp + 1

    def describe(self) -> dict:
        out = {k: getattr(self, k) for k in (
            "kda_heads", "kda_inner", "mla_heads", "mla_inner", "experts", "expert_first",
            "expert_inter", "shared_inter", "dense_inter", "vocab", "vocab_first")}
        out["layout"] = dataclasses.asdict(self.layout)
        out["model"] = self.dims.name
        return out


def fingerprint(obj) -> str:
    """A stable short hash of a dataclass (used to name recordings and to compare layouts)."""
    blob = json.dumps(dataclasses.asdict(obj), sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
