"""Logit statistics: what the accuracy gate (``gates/accuracy.py``, in the coordinator) and the
scorer's bench side (``gates/side/timed.py``, in the candidate's process) both compute, A's
logits against B's, row by row.

Pure: tensors in, plain values out; it imports nothing of gates/ (the side may import it:
tests/test_layers.py). The rules that judge these numbers are ``gates/rules/verdict.py``'s.
"""
from __future__ import annotations

import torch


def logit_stats(a_logits: dict, b_logits: dict, near_tie_factor: float) -> dict:
    """Row-by-row comparison of ``{"rows:step": [rows, vocab] f32}`` logits, A vs B.

    Works where the tensors are (the scorer compares tens of thousands of rows on the GPU):
    the per-row quantities stay tensors and only the 64 worst rows become Python values."""
    rows_total = flips_near = flips_real = 0
    kl_max = kl_sum = 0.0
    ulp_max = 0.0
    nonfinite = 0
    per_key = []  # (key, kl, flip, near, margin, rms, ulps) per compared key, in key order
    missing = sorted(set(a_logits) - set(b_logits))
    for key in sorted(a_logits, key=_key_order):
        if key not in b_logits:
            continue
        a, b = a_logits[key], b_logits[key]
        if a.shape != b.shape:
            missing.append(key)
            continue
        kl, flip, near, margin, rms, ulps, fin = row_stats(a, b, near_tie_factor)
        nonfinite += int((~fin).sum())
        rows_total += a.shape[0]
        flips_near += int(near.sum())
        flips_real += int((flip & ~near).sum())
        kl_max = max(kl_max, float(kl.max()))
        kl_sum += float(kl.clamp(max=1e30).sum())
        ulp_max = max(ulp_max, float(ulps.max()))
        per_key.append((key, kl, flip, near, margin, rms, ulps))
    return {"rows": rows_total, "flips_near_tie": flips_near, "flips_confident": flips_real,
            "kl_max": kl_max, "kl_mean": kl_sum / max(1, rows_total), "max_ulps": ulp_max,
            "nonfinite_rows": nonfinite, "missing": missing,
            "identical": ulp_max == 0.0 and flips_near + flips_real == 0 and not missing,
            "worst": _worst_rows(per_key, 64)}


def row_stats(a: torch.Tensor, b: torch.Tensor, near_tie_factor: float) -> tuple:
    """Per row of ``[rows, vocab]`` logits, B against A: (KL(A||B), argmax flip, near-tie
    flip, A's top-2 margin, rms(B - A), max |B - A| in ulps of A's top value, B finite), each a
    tensor over the rows. A flip is a near-tie when A's margin <= ``near_tie_factor`` x rms."""
    a, b = a.double(), b.double()
    fin = torch.isfinite(b).all(dim=-1)
    top2 = a.topk(2, dim=-1)
    margin = top2.values[:, 0] - top2.values[:, 1]
    delta = torch.where(torch.isfinite(b), b - a, torch.full_like(a, float("inf")))
    rms = delta.pow(2).mean(-1).sqrt()
    la, lb = torch.log_softmax(a, -1), torch.log_softmax(b, -1)
    kl = (la.exp() * (la - lb)).sum(-1)
    kl = torch.where(fin, kl, torch.full_like(kl, float("inf")))
    ulps = delta.abs().max(-1).values / _f32_ulp(top2.values[:, 0])
    flip = a.argmax(-1) != b.argmax(-1)
    near = flip & (margin <= near_tie_factor * rms)
    return kl, flip, near, margin, rms, ulps, fin


def cluster_totals(a: torch.Tensor, b: torch.Tensor, clusters: torch.Tensor, n_clusters: int,
                   near_tie_factor: float, kl_pass: float) -> dict:
    """B against A over rows grouped in clusters (``clusters[i]`` in ``0 .. n_clusters - 1``):
    per cluster the rows, the sum of KL(A||B), the rows with KL(A||B) > ``kl_pass`` and the
    confident argmax flips (lists of ``n_clusters`` numbers), and the largest KL. The form a
    cluster bootstrap resamples (``gates/rules/verdict.py``); a non-finite row counts as KL inf."""
    kl, flip, near, *_ = row_stats(a, b, near_tie_factor)
    idx = clusters.to(kl.device, torch.int64)

    def per(x):
        return torch.zeros(n_clusters, dtype=torch.float64, device=kl.device) \
            .index_add_(0, idx, x.double()).tolist()

    return {"rows": per(torch.ones_like(kl)), "kl_sum": per(kl.clamp(max=1e30)),
            "above": per(kl > kl_pass), "flips": per(flip & ~near),
            "kl_max": float(kl.max()) if kl.numel() else 0.0}


def _worst_rows(per_key: list, limit: int) -> list[dict]:
    """The ``limit`` worst rows: confident flips first, then by KL, ties in (key, row) order."""
    if not per_key:
        return []
    kl = torch.cat([k[1] for k in per_key])
    confident = torch.cat([(k[2] & ~k[3]) for k in per_key])
    # two stable sorts: by KL (descending), then confident flips first
    order = torch.sort(kl, descending=True, stable=True).indices
    order = order[torch.sort(confident[order].to(torch.int8), descending=True, stable=True).indices]
    order = order[:limit].tolist()
    starts, pos = [], 0
    for k in per_key:
        starts.append(pos)
        pos += k[1].numel()
    cols = [torch.cat([k[j] for k in per_key]) for j in range(1, 7)]
    picked = [c[order].tolist() for c in cols]
    out = []
    for n, i in enumerate(order):
        which = max(j for j, s in enumerate(starts) if s <= i)
        key, r = per_key[which][0], i - starts[which]
        kl_v, flip, near, margin, rms, ulps = (p[n] for p in picked)
        out.append({"at": f"rows {key.split(':')[0]} step {key.split(':')[1]} row {r}",
                    "kl": float(kl_v), "flip": bool(flip), "near_tie": bool(near),
                    "margin": float(margin), "rms_delta": float(rms), "max_ulps": float(ulps)})
    return out


def _f32_ulp(x: torch.Tensor) -> torch.Tensor:
    mag = x.abs().clamp_min(2.0 ** -126)
    return torch.exp2(torch.floor(torch.log2(mag)) - 23)


def _key_order(k: str):
    r, s = k.split(":")
    return int(r), int(s)

def merge_logit_stats(parts: list[dict]) -> dict:
    """Several :func:`logit_stats` results as one (disjoint rows)."""
    rows = sum(p["rows"] for p in parts)
    worst = sorted((w for p in parts for w in p["worst"]),
                   key=lambda w: (not (w["flip"] and not w["near_tie"]), -w["kl"]))
    return {"rows": rows, "flips_near_tie": sum(p["flips_near_tie"] for p in parts),
            "flips_confident": sum(p["flips_confident"] for p in parts),
            "kl_max": max((p["kl_max"] for p in parts), default=0.0),
            "kl_mean": sum(p["kl_mean"] * p["rows"] for p in parts) / max(1, rows),
            "max_ulps": max((p["max_ulps"] for p in parts), default=0.0),
            "nonfinite_rows": sum(p["nonfinite_rows"] for p in parts),
            "missing": [m for p in parts for m in p["missing"]],
            "identical": all(p["identical"] for p in parts), "worst": worst[:64]}
