"""Seeded synthetic weights in the real formats, for one rank. Protected.

* Dense weights are bf16 ``[out, in]`` (``y = x @ w.T``); routed experts are MXFP4 (see
  ``formats.py``); biases and decay parameters f32.
* Scales keep activations at unit-order RMS through all layers: projections draw from
  ``N(0, 1/fan_in)`` so a unit-RMS input gives a unit-RMS output; sublayer outputs are scaled
  to ``Dims.branch_scale`` RMS (the full model's sum over ranks); ``lm_head`` gives logits with standard deviation ``Dims.logit_std``.
* Every value comes from ``synthetic.draw`` by global index, so rank r holds exactly its slice
  of the one global model (heads, experts, intermediate columns, vocabulary rows).
* To fit one GPU, layers of one kind share weights cyclically from ``weight_sets`` distinct
  sets (``set = ordinal of the layer among its kind % weight_sets``); each set is far larger
  than L2 and consecutive layers never share one, so no layer finds its weights in cache.
  Residual-mix vectors are small and always per layer.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from . import formats
from .config import Shapes
from .synthetic import UNIFORM, draw, draw_rows

BF16 = torch.bfloat16


@dataclass
class ResidualWeights:
    sw: torch.Tensor  # [H] bf16: the mix's pseudo-query
    norm_w: torch.Tensor  # [H] bf16


@dataclass
class KdaWeights:
    in_proj: torch.Tensor  # [4*I, H]: q | k | v | output gate (local heads)
    ab_proj: torch.Tensor  # [ab_width, H]: beta (local heads) | f_a (D) | zero padding
    conv_w: torch.Tensor  # [3*I, taps]
    f_b: torch.Tensor  # [I, D]
    dt_bias: torch.Tensor  # [I] f32
    a_log: torch.Tensor  # [heads] f32
    gamma: torch.Tensor  # [D]
    o_proj: torch.Tensor  # [H, I]


@dataclass
class MlaWeights:
    in_proj: torch.Tensor  # [q_lora + 576 + mla_inner + idx_dim + idx_heads, H]
    w_qa: torch.Tensor  # [q_lora]
    w_kv: torch.Tensor  # [kv_lora]
    w_idxk: torch.Tensor  # [idx_dim]
    q_b: torch.Tensor  # [heads*192 + idx_heads*idx_dim, q_lora]
    w_uk: torch.Tensor  # [heads, nope, kv_lora]
    w_uv: torch.Tensor  # [heads, kv_lora, v_dim]
    o_proj: torch.Tensor  # [H, mla_inner]


@dataclass
class MoeWeights:
    router: torch.Tensor  # [E, H]
    bias: torch.Tensor  # [E] f32
    lat_down: torch.Tensor  # [latent, H]
    w1: torch.Tensor  # [E_r, 2*I_r, latent/2] uint8 (MXFP4: gate rows, then up rows)
    s1: torch.Tensor  # [E_r, 2*I_r, latent/32] uint8 (e8m0)
    w2: torch.Tensor  # [E_r, latent, I_r/2] uint8
    s2: torch.Tensor  # [E_r, latent, I_r/32] uint8
    gamma_lat: torch.Tensor  # [latent]
    lat_up: torch.Tensor  # [H, latent]
    shared_up: torch.Tensor  # [2*S_r, H]: gate | up
    shared_down: torch.Tensor  # [H, S_r]


@dataclass
class DenseMlpWeights:
    up: torch.Tensor  # [2*D_r, H]: gate | up
    down: torch.Tensor  # [H, D_r]


@dataclass
class Weights:
    embed: torch.Tensor  # [vocab, H] (replicated: a lookup is cheap)
    lm_head: torch.Tensor  # [vocab_r, H]
    mix: list  # ResidualWeights per sublayer (2 per layer) + the final norm's
    attn: list  # per layer: KdaWeights or MlaWeights (shared across layers by set)
    mlp: list  # per layer: DenseMlpWeights or MoeWeights

    def nbytes(self) -> int:
        seen, total = set(), 0
        for obj in [self.embed, self.lm_head, *self.mix, *self.attn, *self.mlp]:
            tensors = [obj] if isinstance(obj, torch.Tensor) else list(vars(obj).values())
            for t in tensors:
                if isinstance(t, torch.Tensor) and t.data_ptr() not in seen:
                    seen.add(t.data_ptr())
                    total += t.numel() * t.element_size()
        return total


class _Draw:
    """Draws slices of the named global tensors of one weight set on one device."""

    def __init__(self, seed: int, device):
        self.seed, self.device = seed, device

    def rows(self, name, rows, cols, *, std, row_len=None, col0=0, kind=0, dtype=BF16):
        t = draw_rows((self.seed, *name), rows, cols, row_len, std=std, col0=col0, kind=kind,
                      device=self.device)
        return t.to(dtype)

    def vector(self, name, n, *, mean=0.0, std=1.0, first=0, kind=0, dtype=BF16):
        t = draw((self.seed, *name), torch.tensor([first], device=self.device), n, std=std,
                 kind=kind)[0]
        return (t + mean).to(dtype)


def _head_rows(heads: range, width: int) -> range:
    return range(heads.start * width, heads.stop * width)


def build_weights(sh: Shapes, *, seed: int, weight_sets: int, device,
                  progress=None) -> Weights:
    d, lo = sh.dims, sh.layout
    dr = _Draw(seed, device)
    H = d.hidden
    inv = lambda n: 1.0 / math.sqrt(n)  # noqa: E731
    kda_heads = range(lo.rank * sh.kda_heads, (lo.rank + 1) * sh.kda_heads)
    mla_heads = range(lo.rank * sh.mla_heads, (lo.rank + 1) * sh.mla_heads)

    def kda(s: int) -> KdaWeights:
        D, I = d.kda_head_dim, sh.kda_inner
        parts = [dr.rows(("kda", s, p), _head_rows(kda_heads, D), H, std=inv(H))
                 for p in ("q", "k", "v", "gate")]
        ab = torch.zeros(sh.ab_width, H, dtype=BF16, device=device)
        ab[:sh.kda_heads] = dr.rows(("kda", s, "beta"), kda_heads, H, std=inv(H))
        ab[sh.kda_heads:sh.kda_heads + D] = dr.rows(("kda", s, "f_a"), range(D), H, std=inv(H))
        conv = torch.cat([dr.rows(("kda", s, "conv", p), _head_rows(kda_heads, D), d.conv_taps,
                                  std=0.5) for p in ("q", "k", "v")])
        # exp(a_log) uniform on [1, 4] (a gentle decay rate per head)
        a = dr.vector(("kda", s, "a"), sh.kda_heads, mean=2.5, std=1.5 / math.sqrt(3.0),
                      first=kda_heads.start, kind=UNIFORM, dtype=torch.float32)
        a_log = torch.log(a)
        return KdaWeights(
            in_proj=torch.cat(parts),
            ab_proj=ab,
            conv_w=conv,
            f_b=dr.rows(("kda", s, "f_b"), _head_rows(kda_heads, D), D, std=inv(D)),
            dt_bias=dr.vector(("kda", s, "dt"), I, mean=-3.0, std=0.5, first=kda_heads.start * D,
                              dtype=torch.float32),
            a_log=a_log,
            gamma=dr.vector(("kda", s, "gamma"), D, mean=1.0, std=0.1),
            # generated as [I_global, H] (contiguous per head), stored transposed
            o_proj=dr.rows(("kda", s, "o"), _head_rows(kda_heads, D), H,
                           std=d.branch_scale * inv(d.kda_heads * D)).t().contiguous(),
        )

    def mla(s: int) -> MlaWeights:
        qd = d.q_head_dim
        in_proj = torch.cat([
            dr.rows(("mla", s, "q_a"), range(d.q_lora), H, std=inv(H)),
            dr.rows(("mla", s, "kv_a"), range(d.cache_row), H, std=inv(H)),
            dr.rows(("mla", s, "gate"), _head_rows(mla_heads, d.v_dim), H, std=inv(H)),
            dr.rows(("mla", s, "idx_k"), range(d.idx_dim), H, std=inv(H)),
            dr.rows(("mla", s, "idx_w"), range(d.idx_heads), H, std=inv(H)),
        ])
        q_b = torch.cat([
            dr.rows(("mla", s, "q_b"), _head_rows(mla_heads, qd), d.q_lora, std=inv(d.q_lora)),
            dr.rows(("mla", s, "q_idx"), range(d.idx_heads * d.idx_dim), d.q_lora,
                    std=inv(d.q_lora)),
        ])
        w_uk = dr.rows(("mla", s, "uk"), _head_rows(mla_heads, d.nope_dim), d.kv_lora,
                       std=inv(d.nope_dim)).reshape(sh.mla_heads, d.nope_dim, d.kv_lora)
        w_uv = dr.rows(("mla", s, "uv"), _head_rows(mla_heads, d.kv_lora), d.v_dim,
                       std=inv(d.kv_lora)).reshape(sh.mla_heads, d.kv_lora, d.v_dim)
        return MlaWeights(
            in_proj=in_proj,
            w_qa=dr.vector(("mla", s, "w_qa"), d.q_lora, mean=1.0, std=0.1),
            w_kv=dr.vector(("mla", s, "w_kv"), d.kv_lora, mean=1.0, std=0.1),
            w_idxk=dr.vector(("mla", s, "w_idxk"), d.idx_dim, mean=1.0, std=0.1),
            q_b=q_b, w_uk=w_uk, w_uv=w_uv,
            o_proj=dr.rows(("mla", s, "o"), _head_rows(mla_heads, d.v_dim), H,
                           std=d.branch_scale * inv(d.mla_heads * d.v_dim)).t().contiguous(),
        )

    def experts(s: int, which: str) -> tuple[torch.Tensor, torch.Tensor]:
        """MXFP4 FC1 ([gate; up] rows of this rank's intermediate slice) or FC2 (its columns)."""
        Ir, G = sh.expert_inter, d.mxfp4_group
        i0 = lo.etp_rank * Ir
        packs, scales = [], []
        chunk = 8
        for e0 in range(sh.expert_first, sh.expert_first + sh.experts, chunk):
            es = range(e0, min(e0 + chunk, sh.expert_first + sh.experts))
            if which == "fc1":
                # global FC1 of expert e: [2*inter, latent]; rows [0, inter) gate, [inter, 2*inter) up
                rows = [e * 2 * d.expert_inter + off + i for e in es
                        for off in (0, d.expert_inter) for i in range(i0, i0 + Ir)]
                w = dr.rows(("moe", s, "w1"), rows, d.latent, std=inv(d.latent), dtype=torch.float32)
                w = w.reshape(len(es), 2 * Ir, d.latent)
            else:
                # global FC2 generated as [E, inter, latent] (contiguous per intermediate row)
                rows = [e * d.expert_inter + i for e in es for i in range(i0, i0 + Ir)]
                w = dr.rows(("moe", s, "w2"), rows, d.latent, std=inv(d.expert_inter),
                            dtype=torch.float32)
                w = w.reshape(len(es), Ir, d.latent).transpose(1, 2)
            p, sc = formats.mxfp4_encode(w.contiguous(), G)
            packs.append(p)
            scales.append(sc)
            if progress:
                progress(f"experts set {s} {which}", es.stop - sh.expert_first, sh.experts)
        return torch.cat(packs), torch.cat(scales)

    def moe(s: int) -> MoeWeights:
        Sr, S = sh.shared_inter, d.shared_inter
        s_rows = range(lo.rank * Sr, (lo.rank + 1) * Sr)
        w1, s1 = experts(s, "fc1")
        w2, s2 = experts(s, "fc2")
        return MoeWeights(
            router=dr.rows(("moe", s, "router"), range(d.n_experts), H, std=inv(H)),
            bias=dr.vector(("moe", s, "bias"), d.n_experts, std=0.02, dtype=torch.float32),
            lat_down=dr.rows(("moe", s, "down"), range(d.latent), H, std=inv(H)),
            w1=w1, s1=s1, w2=w2, s2=s2,
            gamma_lat=dr.vector(("moe", s, "gamma"), d.latent, mean=1.0, std=0.1),
            lat_up=dr.rows(("moe", s, "up"), range(H), d.latent, std=d.branch_scale * inv(d.latent)),
            shared_up=torch.cat([
                dr.rows(("moe", s, "sh_gate"), s_rows, H, std=inv(H)),
                dr.rows(("moe", s, "sh_up"), s_rows, H, std=inv(H))]),
            shared_down=dr.rows(("moe", s, "sh_down"), s_rows, H, std=d.branch_scale * inv(S)).t().contiguous(),
        )

    def dense_mlp(s: int) -> DenseMlpWeights:
        Dr = sh.dense_inter
        rows = range(lo.rank * Dr, (lo.rank + 1) * Dr)
        return DenseMlpWeights(
            up=torch.cat([dr.rows(("mlp", s, "gate"), rows, H, std=inv(H)),
                          dr.rows(("mlp", s, "up"), rows, H, std=inv(H))]),
            down=dr.rows(("mlp", s, "down"), rows, H, std=d.branch_scale * inv(d.dense_inter)).t().contiguous(),
        )

    def cyclic(layers, make) -> dict[int, object]:
        built: dict[int, object] = {}
        out = {}
        for ordinal, layer in enumerate(layers):
            s = ordinal % max(1, weight_sets)
            if s not in built:
                built[s] = make(s)
            out[layer] = built[s]
        return out

    if progress:
        progress("dense weights", 0, 1)
    attn = {**cyclic(d.kda_layers, kda), **cyclic(d.mla_layers, mla)}
    mlp = {**cyclic(d.dense_layers, dense_mlp), **cyclic(d.moe_layers, moe)}
    mix = [ResidualWeights(
        sw=dr.vector(("mix", i, "sw"), H, std=inv(H)),
        norm_w=dr.vector(("mix", i, "norm"), H, mean=1.0, std=0.1))
        for i in range(2 * d.n_layers + 1)]
    v0 = sh.vocab_first
    return Weights(
        embed=dr.rows(("embed",), range(d.vocab), H, std=1.0),
        lm_head=dr.rows(("lm_head",), range(v0, v0 + sh.vocab), H, std=d.logit_std * inv(H)),
        mix=mix,
        attn=[attn[l] for l in range(d.n_layers)],
        mlp=[mlp[l] for l in range(d.n_layers)],
    )
