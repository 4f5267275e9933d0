"""The K3.1 decode step of one rank: all layers in the published order, one token per row.

``DecodeStep(model, rows, ops, comm)`` owns static buffers for ``rows`` rows, so ``run()``
never syncs with the host and can be captured as one CUDA graph (its ops allocate nothing; the
multi-process collectives take temporaries from torch's caching allocator, which a graph keeps).
``comm`` is ``collectives.Identity`` (one process) or ``collectives.Distributed`` (one process per
rank); every rank ends the step with the same residual stream and the same ``next_token``.
Inputs (filled by the caller before each run): ``tokens [rows] int64``, ``pos [rows] int32``
(the absolute position of the token being decoded; the caches hold positions ``< pos``).
Outputs: ``logits [rows, vocab_r] f32``, ``top_val``, ``next_token [rows] int64`` and
``routing [moe_layers, rows, top_k] int32`` (the experts every row chose, for reports).

Order of one layer ``l`` (sublayers share the attention-residual stream)::

    x = mix(...)                 # residual.mix: add the previous sublayer, mix, RMSNorm
    attention(l, x)              # KDA or MLA -> o_proj -> all_reduce
                                 # (MLA: gather_heads -> sparse_decode -> merge_attention)
    x = mix(...)
    mlp(l, x)                    # dense MLP (layer 0) or latent MoE + shared experts
then ``x = mix(final)`` -> ``lm_head.argmax`` -> ``comm.argmax``.
"""
from __future__ import annotations

import torch

from .collectives import Identity
from .config import Shapes
from .dispatch import Ops

BF16 = torch.bfloat16


class DecodeStep:
    def __init__(self, model, rows: int, ops: Ops | None = None, comm=None):
        sh: Shapes = model.shapes
        d = sh.dims
        if rows > model.state.rows:
            raise ValueError(f"step: {rows} rows exceed the state's {model.state.rows} rows")
        self.model, self.sh, self.rows = model, sh, rows
        self.ops = ops or Ops(sh)
        self.comm = comm or Identity()
        dev = model.device
        H = d.hidden

        def buf(*shape, dtype=BF16):
            return torch.empty(*shape, dtype=dtype, device=dev)

        # inputs and outputs
        self.tokens = torch.zeros(rows, dtype=torch.int64, device=dev)
        self.pos = torch.ones(rows, dtype=torch.int32, device=dev)
        self.ctx_len = buf(rows, dtype=torch.int32)
        self.logits = buf(rows, sh.vocab, dtype=torch.float32)
        self.top_val = buf(rows, dtype=torch.float32)
        self.next_token = buf(rows, dtype=torch.int64)
        self.routing = buf(max(1, len(d.moe_layers)), rows, d.top_k, dtype=torch.int32)
        self.route_w = buf(rows, d.top_k, dtype=torch.float32)
        # residual stream; snapshot slots are zeroed once so a slot not yet written this step
        # holds the same bytes on every run (the gates hash whole state tensors)
        self.snaps = torch.zeros(d.max_snapshots, rows, H, dtype=BF16, device=dev)
        self.partial = buf(rows, H, dtype=torch.float32)
        self.x = buf(rows, H)
        self.attn_out = buf(rows, H)
        self.mlp_out = buf(rows, H)
        self.shared_out = buf(rows, H)
        # KDA
        I = sh.kda_inner
        self.kda_in = buf(rows, 4 * I)
        self.kda_ab = buf(rows, sh.ab_width)
        self.kda_qkv = buf(rows, 3 * I)
        self.kda_g = buf(rows, I)
        self.kda_o = buf(rows, I)
        # MLA
        self.mla_in = buf(rows, sh.mla_in_width)
        self.q_n = buf(rows, d.q_lora)
        self.q_b = buf(rows, sh.q_b_width)
        self.q_full = buf(rows, sh.mla_heads, d.cache_row)
        cap = model.state.capacity
        self.idx_logits = buf(rows, cap, dtype=torch.float32)
        self.idx = buf(rows, d.idx_topk, dtype=torch.int32)
        self.o_lat = buf(rows, sh.mla_heads, d.kv_lora, dtype=torch.float32)
        self.lse = buf(rows, sh.mla_heads, dtype=torch.float32)
        # the decode attends every rank's heads over this rank's tokens (see collectives.py);
        # in one process those are its own heads, and the buffers are the same tensors
        if self.comm.world == 1:
            self.q_all, self.o_part, self.lse_part = self.q_full, self.o_lat, self.lse
        else:
            heads = self.comm.world * sh.mla_heads
            self.q_all = buf(rows, heads, d.cache_row)
            self.o_part = buf(rows, heads, d.kv_lora, dtype=torch.float32)
            self.lse_part = buf(rows, heads, dtype=torch.float32)
        self.mla_o = buf(rows, sh.mla_inner)
        # MoE and the dense MLP
        self.router_logits = buf(rows, d.n_experts)
        self.lat = buf(rows, d.latent)
        self.pair_y = buf(rows * d.top_k, d.latent)
        self.lat_sum = buf(rows, d.latent)
        self.lat_n = buf(rows, d.latent)
        self.shared_gu = buf(rows, 2 * sh.shared_inter)
        self.shared_h = buf(rows, sh.shared_inter)
        self.dense_gu = buf(rows, 2 * sh.dense_inter)
        self.dense_h = buf(rows, sh.dense_inter)
        self._moe_index = {l: i for i, l in enumerate(d.moe_layers)}

    # ------------------------------------------------------------------ the step
    def run(self) -> None:
        sh, d, st, w = self.sh, self.sh.dims, self.model.state, self.model.weights
        rows = self.rows
        cp, r = sh.layout.cp, sh.layout.cp_rank
        # tokens this rank holds of each context, the new token included: #{t <= pos: t % cp == r}
        torch.sub(self.pos, r - cp, out=self.ctx_len)
        self.ctx_len.div_(cp, rounding_mode="floor")
        torch.index_select(w.embed, 0, self.tokens, out=self.snaps[0])
        self.partial.zero_()
        n_snap = 1
        delta, delta2 = None, None
        for layer in range(d.n_layers):
            close = layer > 0 and layer % d.attnres_block == 0
            self._mix(2 * layer, delta, delta2, n_snap, use_partial=layer > 0 and not close,
                      close=close)
            n_snap += int(close)
            if layer in d.mla_layers:
                self._mla(layer, st, w.attn[layer], rows)
            else:
                self._kda(layer, st, w.attn[layer], rows)
            self._mix(2 * layer + 1, self.attn_out, None, n_snap, use_partial=True, close=False)
            if layer in d.dense_layers:
                self._dense_mlp(layer, w.mlp[layer])
                delta, delta2 = self.mlp_out, None
            else:
                self._moe(layer, w.mlp[layer])
                delta, delta2 = self.mlp_out, self.shared_out
        self._mix(2 * d.n_layers, delta, delta2, n_snap, use_partial=True, close=False)
        self.ops("lm_head.argmax", "final.lm_head", x=self.x, w=w.lm_head, logits=self.logits,
                 top_val=self.top_val, top_idx=self.next_token)
        self.comm.argmax(self.top_val, self.next_token)

    # ------------------------------------------------------------------ sublayers
    def _mix(self, sub: int, delta, delta2, n_snap: int, *, use_partial: bool, close: bool):
        mw = self.model.weights.mix[sub]
        self.ops("residual.mix", f"S{sub}.mix", delta=delta, delta2=delta2, sw=mw.sw,
                 norm_w=mw.norm_w, snaps=self.snaps, partial=self.partial, x=self.x,
                 n_snap=n_snap, use_partial=use_partial, close_block=close)

    def _linear(self, site: str, x, w, y):
        self.ops(site, site_name(site, self._layer), x=x, w=w, y=y)

    def _kda(self, layer: int, st, kw, rows: int):
        self._layer = layer
        sh, d = self.sh, self.sh.dims
        I, h, D = sh.kda_inner, sh.kda_heads, d.kda_head_dim
        self._linear("kda.in_proj", self.x, kw.in_proj, self.kda_in)
        self._linear("kda.ab_proj", self.x, kw.ab_proj, self.kda_ab)
        self.ops("kda.conv", f"L{layer}.kda.conv", x=self.kda_in[:, :3 * I], w=kw.conv_w,
                 window=st.conv_window[layer][:rows], y=self.kda_qkv)
        self._linear("kda.f_b", self.kda_ab[:, h:h + D], kw.f_b, self.kda_g)
        self.ops("kda.core", f"L{layer}.kda.core", qkv=self.kda_qkv, gate=self.kda_in[:, 3 * I:],
                 beta=self.kda_ab[:, :h], g=self.kda_g, dt_bias=kw.dt_bias, a_log=kw.a_log,
                 gamma=kw.gamma, state=st.kda_state[layer][:rows], o=self.kda_o)
        self._linear("kda.o_proj", self.kda_o, kw.o_proj, self.attn_out)
        self.comm.all_reduce(self.attn_out)

    def _mla(self, layer: int, st, mw, rows: int):
        self._layer = layer
        sh, d = self.sh, self.sh.dims
        self._linear("mla.in_proj", self.x, mw.in_proj, self.mla_in)
        a = d.q_lora
        b = a + d.cache_row
        c = b + sh.mla_inner
        e = c + d.idx_dim
        bt = st.block_table[:rows]
        self.ops("mla.prep", f"L{layer}.mla.prep", q_a=self.mla_in[:, :a], kv_a=self.mla_in[:, a:b],
                 idx_k=self.mla_in[:, c:e], w_qa=mw.w_qa, w_kv=mw.w_kv, w_idxk=mw.w_idxk,
                 pos=self.pos, block_table=bt, q_n=self.q_n, kv_cache=st.kv_cache[layer],
                 kv_scale=st.kv_scale[layer], idx_cache=st.idx_cache[layer],
                 idx_scale=st.idx_scale[layer])
        self._linear("mla.q_b", self.q_n, mw.q_b, self.q_b)
        nq = sh.mla_heads * d.q_head_dim
        qb = self.q_b[:, :nq].view(rows, sh.mla_heads, d.q_head_dim)
        q_idx = self.q_b[:, nq:].view(rows, d.idx_heads, d.idx_dim)
        self.ops("mla.absorb", f"L{layer}.mla.absorb", qb=qb, w_uk=mw.w_uk, pos=self.pos,
                 q_full=self.q_full)
        self.comm.gather_heads(self.q_full, self.q_all)
        self.ops("mla.index_logits", f"L{layer}.mla.index_logits", q_idx=q_idx,
                 w_idx=self.mla_in[:, e:e + d.idx_heads], idx_cache=st.idx_cache[layer],
                 idx_scale=st.idx_scale[layer], block_table=bt, ctx_len=self.ctx_len,
                 logits=self.idx_logits)
        self.ops("mla.topk", f"L{layer}.mla.topk", logits=self.idx_logits, ctx_len=self.ctx_len,
                 idx=self.idx)
        self.comm.select_topk(self.idx, self.idx_logits)
        self.ops("mla.sparse_decode", f"L{layer}.mla.sparse_decode", q_full=self.q_all,
                 kv_cache=st.kv_cache[layer], kv_scale=st.kv_scale[layer], block_table=bt,
                 idx=self.idx, o_lat=self.o_part, lse=self.lse_part)
        self.comm.merge_attention(self.o_part, self.lse_part, self.o_lat, self.lse)
        self.ops("mla.vup_gate", f"L{layer}.mla.vup_gate", o_lat=self.o_lat, w_uv=mw.w_uv,
                 gate=self.mla_in[:, b:c], o=self.mla_o)
        self._linear("mla.o_proj", self.mla_o, mw.o_proj, self.attn_out)
        self.comm.all_reduce(self.attn_out)

    def _dense_mlp(self, layer: int, dw):
        self._layer = layer
        self._linear("dense.mlp_up", self.x, dw.up, self.dense_gu)
        self.ops("moe.situ", f"L{layer}.dense.situ", gu=self.dense_gu, out=self.dense_h)
        self._linear("dense.mlp_down", self.dense_h, dw.down, self.mlp_out)
        self.comm.all_reduce(self.mlp_out)

    def _moe(self, layer: int, mw):
        self._layer = layer
        ids = self.routing[self._moe_index[layer]]
        self._linear("moe.router_proj", self.x, mw.router, self.router_logits)
        self.ops("moe.router", f"L{layer}.moe.router", logits=self.router_logits, bias=mw.bias,
                 ids=ids, w=self.route_w)
        self._linear("moe.lat_down", self.x, mw.lat_down, self.lat)
        self.ops("moe.experts", f"L{layer}.moe.experts", x=self.lat, ids=ids, w1=mw.w1, s1=mw.s1,
                 w2=mw.w2, s2=mw.s2, y=self.pair_y)
        self.ops("moe.combine", f"L{layer}.moe.combine", y=self.pair_y, ids=ids, w=self.route_w,
                 out=self.lat_sum)
        self._linear("moe.shared_up", self.x, mw.shared_up, self.shared_gu)
        self.ops("moe.situ", f"L{layer}.moe.situ", gu=self.shared_gu, out=self.shared_h)
        self._linear("moe.shared_down", self.shared_h, mw.shared_down, self.shared_out)
        self.comm.all_reduce(self.lat_sum, self.shared_out)
        self.ops("moe.latent_norm", f"L{layer}.moe.latent_norm", x=self.lat_sum, w=mw.gamma_lat,
                 out=self.lat_n)
        self._linear("moe.lat_up", self.lat_n, mw.lat_up, self.mlp_out)


def site_name(op: str, layer: int) -> str:
    return f"L{layer}.{op}"
