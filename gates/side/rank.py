"""One rank of a multi-process side (``kern step --gpus W``), from inside its process: join the
process group the launcher (``gates/launch/ranks.py``) described, leave it, and the digests every
rank of a step must share (``gates/launch/ranks.py`` merges and compares them)."""
from __future__ import annotations

import os


def join(device: str, timeout_s: float = 600.0) -> tuple[int, str]:
    """Join the process group the launcher's variables describe; returns (rank, device)."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    if device.startswith("cuda"):
        torch.cuda.set_device(local)
        device, backend = f"cuda:{local}", "nccl"
    else:
        backend = "gloo"
    dist.init_process_group(
        backend, init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
        rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s))
    return rank, device


def leave() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def rank_digests(side, step, logits=None) -> dict:
    """Hashes that every rank of a multi-process step must share: what is replicated (final
    hidden state, residual snapshots and partial, top values, next tokens) and the gathered
    logits (``logits``: already gathered; else gathered here, a collective)."""
    import hashlib

    import torch

    def sha(*tensors) -> str:
        h = hashlib.sha256()
        for t in tensors:
            h.update(t.detach().contiguous().cpu().view(-1).view(torch.uint8).numpy().tobytes())
        return h.hexdigest()[:16]

    if logits is None:
        logits = side.comm.gather_shares(step.logits)
    return {"replicated_sha": sha(step.x, step.snaps, step.partial, step.top_val, step.next_token),
            "logits_sha": sha(logits)}
