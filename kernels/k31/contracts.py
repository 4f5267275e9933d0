"""The op registry: every op of the decode step, its arguments by role, its reference, its
kernel, its test and its roofline. Protected — the gates read it to know what an op may write.

Calling convention (kernels and the dispatcher alike)::

    kernel(sh, **args)          # writes every ``outputs`` tensor fully, updates ``state`` in place
    reference(sh, **args_without_outputs) -> {name: tensor}   # outputs and new state values

Roles:
* ``inputs``: read only. A kernel writing an input is a defect the accuracy gate reports.
* ``outputs``: written fully on every call (the gate poisons them first); ``defined`` narrows
  that to a mask when part of an output is not this rank's work.
* ``state``: read and written in place (KDA state, conv window, caches, residual stream).
* ``static``: Python values fixed per call site.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable

from .dense import reference as dense_ref
from .kda import reference as kda_ref
from .lm_head import reference as lm_head_ref
from .mla import reference as mla_ref
from .moe import reference as moe_ref
from .residual import reference as residual_ref

DENSE_SITES = (
    "kda.in_proj", "kda.ab_proj", "kda.f_b", "kda.o_proj",
    "mla.in_proj", "mla.q_b", "mla.o_proj",
    "moe.router_proj", "moe.lat_down", "moe.lat_up", "moe.shared_up", "moe.shared_down",
    "dense.mlp_up", "dense.mlp_down",
)


@dataclass(frozen=True)
class OpSpec:
    name: str
    family: str
    summary: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    state: tuple[str, ...] = ()
    static: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()  # inputs that may be None
    reference: Callable = None
    kernel: str = ""  # "module:function", imported from the tree under test
    roofline: str = ""  # "module:function" (sh, args) -> Cost
    test: str = ""
    defined: Callable | None = None  # (sh, args) -> {output: bool mask over its first dim}
    sources: tuple[str, ...] = field(default=())  # tree files whose change touches this op

    def load_kernel(self) -> Callable:
        return _load(self.kernel)

    def load_roofline(self) -> Callable:
        return _load(self.roofline)


def _load(path: str) -> Callable:
    mod, fn = path.split(":")
    return getattr(importlib.import_module(mod), fn)


def _experts_defined(sh, args):
    return {"y": moe_ref.moe_experts_defined(sh, args["ids"])}


def _family_files(family: str, *names: str) -> tuple[str, ...]:
    return tuple(f"kernels/k31/{family}/{n}" for n in names)


_SPECS = [
    OpSpec(
        "residual.mix", "residual", "attention-residual mix over block snapshots + RMSNorm",
        inputs=("delta", "delta2", "sw", "norm_w"), outputs=("x",), state=("snaps", "partial"),
        static=("n_snap", "use_partial", "close_block"), optional=("delta", "delta2"),
        reference=residual_ref.residual_mix, kernel="kernels.k31.residual.mix:residual_mix",
        roofline="kernels.k31.residual.roofline:mix", test="tests/kernels/test_residual.py",
        sources=_family_files("residual", "mix.py")),
    OpSpec(
        "kda.conv", "kda", "short causal conv (4 taps) + SiLU, window shifted in place",
        inputs=("x", "w"), outputs=("y",), state=("window",),
        reference=kda_ref.kda_conv, kernel="kernels.k31.kda.conv:kda_conv",
        roofline="kernels.k31.kda.roofline:conv", test="tests/kernels/test_kda.py",
        sources=_family_files("kda", "conv.py")),
    OpSpec(
        "kda.core", "kda", "q/k L2 norm, beta, decay, delta-rule state update, out norm x gate",
        inputs=("qkv", "gate", "beta", "g", "dt_bias", "a_log", "gamma"), outputs=("o",),
        state=("state",), reference=kda_ref.kda_core, kernel="kernels.k31.kda.core:kda_core",
        roofline="kernels.k31.kda.roofline:core", test="tests/kernels/test_kda.py",
        sources=_family_files("kda", "core.py")),
    OpSpec(
        "mla.prep", "mla", "q/kv/index-key norms, RoPE, fp8 append to both caches",
        inputs=("q_a", "kv_a", "idx_k", "w_qa", "w_kv", "w_idxk", "pos", "block_table"),
        outputs=("q_n",), state=("kv_cache", "kv_scale", "idx_cache", "idx_scale"),
        reference=mla_ref.mla_prep, kernel="kernels.k31.mla.prep:mla_prep",
        roofline="kernels.k31.mla.roofline:prep", test="tests/kernels/test_mla.py",
        sources=_family_files("mla", "prep.py")),
    OpSpec(
        "mla.absorb", "mla", "q_nope . W_UK per head, RoPE on q_rope",
        inputs=("qb", "w_uk", "pos"), outputs=("q_full",),
        reference=mla_ref.mla_absorb, kernel="kernels.k31.mla.absorb:mla_absorb",
        roofline="kernels.k31.mla.roofline:absorb", test="tests/kernels/test_mla.py",
        sources=_family_files("mla", "absorb.py")),
    OpSpec(
        "mla.index_logits", "mla", "DSA indexer logits over fp8 keys (relu, head weights)",
        inputs=("q_idx", "w_idx", "idx_cache", "idx_scale", "block_table", "ctx_len"),
        outputs=("logits",), reference=mla_ref.mla_index_logits,
        kernel="kernels.k31.mla.indexer:mla_index_logits",
        roofline="kernels.k31.mla.roofline:index_logits", test="tests/kernels/test_mla_indexer.py",
        sources=_family_files("mla", "indexer.py")),
    OpSpec(
        "mla.topk", "mla", "exact top-2048 of the rank's context (ties: lower index)",
        inputs=("logits", "ctx_len"), outputs=("idx",), reference=mla_ref.mla_topk,
        kernel="kernels.k31.mla.topk:mla_topk", roofline="kernels.k31.mla.roofline:topk",
        test="tests/kernels/test_mla_indexer.py", sources=_family_files("mla", "topk.py")),
    OpSpec(
        "mla.sparse_decode", "mla", "sparse MLA decode over the chosen fp8 rows -> (o_lat, lse)",
        inputs=("q_full", "kv_cache", "kv_scale", "block_table", "idx"), outputs=("o_lat", "lse"),
        reference=mla_ref.mla_sparse_decode, kernel="kernels.k31.mla.decode:mla_sparse_decode",
        roofline="kernels.k31.mla.roofline:sparse_decode", test="tests/kernels/test_mla.py",
        sources=_family_files("mla", "decode.py")),
    OpSpec(
        "mla.vup_gate", "mla", "o_lat . W_UV per head x sigmoid(gate)",
        inputs=("o_lat", "w_uv", "gate"), outputs=("o",), reference=mla_ref.mla_vup_gate,
        kernel="kernels.k31.mla.vup:mla_vup_gate", roofline="kernels.k31.mla.roofline:vup_gate",
        test="tests/kernels/test_mla.py", sources=_family_files("mla", "vup.py")),
    OpSpec(
        "moe.router", "moe", "sigmoid + bias + top-k + normalize + scale in one kernel",
        inputs=("logits", "bias"), outputs=("ids", "w"), reference=moe_ref.moe_router,
        kernel="kernels.k31.moe.router:moe_router", roofline="kernels.k31.moe.roofline:router",
        test="tests/kernels/test_moe.py", sources=_family_files("moe", "router.py")),
    OpSpec(
        "moe.experts", "moe", "group (row, expert) pairs; FC1 -> SiTU -> FC2 on MXFP4 (w4a16)",
        inputs=("x", "ids", "w1", "s1", "w2", "s2"), outputs=("y",),
        reference=moe_ref.moe_experts, kernel="kernels.k31.moe.experts:moe_experts",
        roofline="kernels.k31.moe.roofline:experts", test="tests/kernels/test_moe.py",
        defined=_experts_defined, sources=_family_files("moe", "experts.py", "group.py")),
    OpSpec(
        "moe.combine", "moe", "weighted sum of a row's expert outputs (slot order)",
        inputs=("y", "ids", "w"), outputs=("out",), reference=moe_ref.moe_combine,
        kernel="kernels.k31.moe.combine:moe_combine", roofline="kernels.k31.moe.roofline:combine",
        test="tests/kernels/test_moe.py", sources=_family_files("moe", "combine.py")),
    OpSpec(
        "moe.latent_norm", "moe", "RMSNorm of the summed latent (gamma_lat)",
        inputs=("x", "w"), outputs=("out",), reference=moe_ref.rmsnorm,
        kernel="kernels.k31.moe.norm:rmsnorm", roofline="kernels.k31.moe.roofline:norm",
        test="tests/kernels/test_moe.py", sources=_family_files("moe", "norm.py")),
    OpSpec(
        "moe.situ", "moe", "SiTU activation of shared experts and the dense MLP",
        inputs=("gu",), outputs=("out",), reference=moe_ref.moe_situ,
        kernel="kernels.k31.moe.situ:moe_situ", roofline="kernels.k31.moe.roofline:situ",
        test="tests/kernels/test_moe.py", sources=_family_files("moe", "situ.py")),
    OpSpec(
        "lm_head.argmax", "lm_head", "logits of this rank's vocabulary share + argmax",
        inputs=("x", "w"), outputs=("logits", "top_val", "top_idx"), reference=lm_head_ref.lm_head,
        kernel="kernels.k31.lm_head.head:lm_head", roofline="kernels.k31.lm_head.roofline:head",
        test="tests/kernels/test_lm_head.py", sources=_family_files("lm_head", "head.py")),
] + [
    OpSpec(
        site, "dense", f"dense projection {site} (cuBLAS through torch.matmul)",
        inputs=("x", "w"), outputs=("y",), reference=dense_ref.linear,
        kernel="kernels.k31.dense.linear:linear", roofline="kernels.k31.dense.roofline:linear",
        test="tests/kernels/test_dense.py", sources=_family_files("dense", "linear.py"))
    for site in DENSE_SITES
]

OPS: dict[str, OpSpec] = {s.name: s for s in _SPECS}


def op(name: str) -> OpSpec:
    try:
        return OPS[name]
    except KeyError:
        raise KeyError(f"no op named {name!r}; known: {', '.join(sorted(OPS))}") from None


def ops_touched_by(paths: list[str]) -> set[str] | None:
    """Ops whose sources a change touches; ``None`` means 'cannot tell, assume all' (a change
    to a file that no single op owns, such as the step or a shared helper)."""
    touched: set[str] = set()
    for p in paths:
        owners = {s.name for s in _SPECS if p in s.sources}
        if not owners:
            if p.endswith("/roofline.py"):  # cost formulas change no output
                continue
            return None
        touched |= owners
    return touched
