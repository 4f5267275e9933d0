"""The one-shot all-reduce (kernels/k31/comm/oneshot.py) and how Distributed chooses its path.

* The sum kernel (the Triton interpreter on a CPU, the kernel on a GPU) against
  ``collectives.sum_in_rank_order`` rounded once, as the gather path computes it: bit for bit,
  for W in 2, 3, 4, 8 ranks, awkward row counts, bf16 and f32, into poisoned outputs. The
  values span 2^-20..2^20 so that another add order or bf16 accumulation changes some bits;
  the test checks that it does, so a kernel that sums differently cannot pass.
* The choice of path (pure functions) and Distributed's use of it over a 1-process gloo group.
* On 2 GPUs (skipped otherwise): the device tool ``bench/tools/allreduce_latency.py`` at small
  settings, whose checks are the one-shot path over real symmetric memory equal to the gather
  path on every rank, the ranks agreeing, and CUDA-graph replays giving the eager bytes.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from gates.side.numerics import bitwise_equal, poison, unwritten
from kernels.k31.collectives import (ALL_REDUCE_ENV, ONESHOT_BUFFER_BYTES, CollectivesError,
                                     all_reduce_mode, choose_all_reduce, oneshot_refusal,
                                     oneshot_unavailable, step_all_reduce_bytes, sum_in_rank_order)
from kernels.k31.comm import roofline
from kernels.k31.comm.oneshot import ALIGN, MAX_WORLD, oneshot_sum, pack_offsets
from kernels.k31.config import Dims
from tests.kernels.support import AWKWARD_ROWS

FRESH_SEED = int(os.environ["KERN_TEST_SEED"])
ROOT = Path(__file__).resolve().parents[2]


def rank_parts(world: int, n: int, dtype, seed: int) -> torch.Tensor:
    """``[world, n]`` partial sums: random signs, magnitudes 2^-20..2^20, and on a third of the
    elements rank 1 holding exactly minus rank 0 (a cancellation): summed in rank order those
    elements are the other ranks' small sum, in another order that sum is partly lost. So
    another add order, or a bf16 accumulator, changes bits even after the final rounding."""
    g = torch.Generator().manual_seed(seed)
    mant = torch.randn(world, n, generator=g)
    exp = torch.randint(-20, 21, (world, n), generator=g).float()
    parts = (mant * torch.exp2(exp)).to(dtype)
    cancel = torch.rand(n, generator=g) < 1 / 3
    if world > 1:
        parts[1] = torch.where(cancel, -parts[0], parts[1])
    return parts


def gather_path(parts: torch.Tensor) -> torch.Tensor:
    """What ``Distributed``'s gather path leaves in the tensor: the f32 rank-order sum, copied
    (rounded once, to nearest even) into the tensor's dtype."""
    out = torch.empty(parts.shape[1:], dtype=parts.dtype)
    out.copy_(sum_in_rank_order(parts))
    return out


def run_kernel(parts: torch.Tensor, device, tail: int = 5) -> torch.Tensor:
    """The kernel's sum of ``parts`` into a poisoned output followed by ``tail`` poisoned
    elements it must not touch; returns the output (on the CPU), tail checked here."""
    W, n = parts.shape
    # each rank's part in its own buffer with junk after it (a symmetric buffer holds other
    # tensors there), so reading past n would show
    bufs = [torch.cat([parts[r], torch.full((7,), 1e4, dtype=parts.dtype)]).to(device) for r in range(W)]
    big = poison(torch.empty(n + tail, dtype=parts.dtype, device=device))
    oneshot_sum(big[:n], [b[:n] for b in bufs])
    big = big.cpu()
    assert unwritten(big[n:]) == tail, "oneshot_sum wrote past the end of its output"
    return big[:n]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("world", [2, 3, 4, 8])
@pytest.mark.parametrize("rows", AWKWARD_ROWS)
def test_sum_is_bit_identical_to_the_gather_path(device, rows, world, dtype):
    hidden = 7168
    for seed in (world * 100 + rows, FRESH_SEED):
        parts = rank_parts(world, rows * hidden, dtype, seed)
        got = run_kernel(parts, device)
        assert unwritten(got) == 0, f"{unwritten(got)} outputs unwritten"
        want = gather_path(parts)
        diff = int((got.view(torch.int16 if dtype == torch.bfloat16 else torch.int32) !=
                    want.view(torch.int16 if dtype == torch.bfloat16 else torch.int32)).sum())
        assert bitwise_equal(got, want), f"W={world} rows={rows} {dtype}: {diff} elements differ"
        if world >= 3:  # the data tells orders apart: reversed ranks give other bits
            assert not bitwise_equal(gather_path(parts.flip(0)), want)


def test_sum_with_the_gpu_launch_shape(device, gpu_launch):
    """The GPU's block size (several programs, a partial last block) through the interpreter."""
    parts = rank_parts(4, 3 * 7168 + 5, torch.bfloat16, FRESH_SEED)
    assert bitwise_equal(run_kernel(parts, device), gather_path(parts))


def test_bf16_accumulation_would_be_caught(device):
    """The data make a bf16 running sum (what a plain bf16 all-reduce does) differ from the
    f32 one, so the bit-identity above would reject such a kernel."""
    parts = rank_parts(4, 17 * 7168, torch.bfloat16, FRESH_SEED)
    acc = parts[0].clone()
    for r in range(1, 4):
        acc = acc + parts[r]
    assert not bitwise_equal(acc, gather_path(parts))


def test_sum_refuses_mismatched_parts():
    out = torch.empty(8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="part 1 must be a contiguous"):
        oneshot_sum(out, [torch.zeros(8, dtype=torch.bfloat16), torch.zeros(8, dtype=torch.float32)])
    with pytest.raises(ValueError, match=f"1 to {MAX_WORLD}"):
        oneshot_sum(out, [torch.zeros(8, dtype=torch.bfloat16)] * (MAX_WORLD + 1))


# ------------------------------------------------------------------ packing and cost
def test_pack_offsets_align_every_tensor():
    offsets, end = pack_offsets([10, 300, 1])
    assert offsets == [0, ALIGN, 3 * ALIGN] and end == 3 * ALIGN + 1
    assert pack_offsets([]) == ([], 0)


def test_the_default_buffer_holds_the_steps_largest_call():
    d = Dims.named("full")
    need = step_all_reduce_bytes(d.hidden, d.latent, 256)  # the largest bucket of kern.yaml
    assert need == pack_offsets([256 * d.latent * 2, 256 * d.hidden * 2])[1]
    assert need <= ONESHOT_BUFFER_BYTES < 2 * need + (1 << 20)


def test_roofline_counts_every_ranks_partial_read_once():
    t = torch.empty(128, 7168, dtype=torch.bfloat16)
    cost = roofline.oneshot(None, {"tensors": [t], "world": 2})
    assert cost.bytes == 3 * 128 * 7168 * 2 and cost.flops == 128 * 7168
    assert roofline.nvlink_bytes(8, 1000) == 7000


# ------------------------------------------------------------------ the choice of path
def test_mode_comes_from_the_argument_then_the_variable():
    assert all_reduce_mode(None, None) == "auto"
    assert all_reduce_mode(None, "") == "auto"
    assert all_reduce_mode(None, "gather") == "gather"
    assert all_reduce_mode("oneshot", "gather") == "oneshot"
    with pytest.raises(CollectivesError, match=f"{ALL_REDUCE_ENV} must be one of .*got 'fast'"):
        all_reduce_mode(None, "fast")
    with pytest.raises(CollectivesError, match="all_reduce argument"):
        all_reduce_mode("ring", None)


def test_oneshot_is_unavailable_without_nccl_symmetric_memory_or_a_buffer():
    assert oneshot_unavailable("nccl", 2, 1 << 20, True) is None
    assert oneshot_unavailable("cpu:gloo,cuda:nccl", 8, 1 << 20, True) is None
    assert "gloo" in oneshot_unavailable("gloo", 2, 1 << 20, True)
    assert "_symmetric_memory" in oneshot_unavailable("nccl", 2, 1 << 20, False)
    assert "2 to 8 ranks" in oneshot_unavailable("nccl", 16, 1 << 20, True)
    assert "2 to 8 ranks" in oneshot_unavailable("nccl", 1, 1 << 20, True)
    assert "max_bytes" in oneshot_unavailable("nccl", 2, 0, True)


def _meta(*shape, dtype=torch.bfloat16, device="cuda", contiguous=True):
    """What oneshot_refusal reads of a tensor, without a GPU."""
    n = 1
    for s in shape:
        n *= s
    return SimpleNamespace(device=torch.device(device), dtype=dtype, shape=shape,
                           is_contiguous=lambda: contiguous, stride=lambda: (), numel=lambda: n,
                           element_size=lambda: torch.empty(0, dtype=dtype).element_size())


def test_a_call_is_refused_unless_contiguous_cuda_summable_and_small_enough():
    cap = pack_offsets([256 * 3584 * 2, 256 * 7168 * 2])[1]
    assert oneshot_refusal([_meta(256, 3584), _meta(256, 7168)], cap) is None
    assert "needs" in oneshot_refusal([_meta(256, 3584), _meta(257, 7168)], cap)
    assert "not a CUDA device" in oneshot_refusal([_meta(4, 8, device="cpu")], cap)
    assert "int32" in oneshot_refusal([_meta(4, 8, dtype=torch.int32)], cap)
    assert "not contiguous" in oneshot_refusal([_meta(4, 8, contiguous=False)], cap)
    assert "no tensor" in oneshot_refusal([], cap)


@pytest.mark.parametrize("mode,unavailable,refusal,path", [
    ("auto", None, None, "oneshot"),
    ("auto", "no nccl", None, "gather"),
    ("auto", None, "too large", "gather"),
    ("oneshot", None, None, "oneshot"),
    ("gather", None, None, "gather"),
    ("nccl", None, None, "nccl"),
    ("gather", "no nccl", "too large", "gather"),
])
def test_choose_all_reduce(mode, unavailable, refusal, path):
    assert choose_all_reduce(mode, unavailable, refusal) == path


def test_an_explicit_oneshot_that_cannot_run_says_why():
    with pytest.raises(CollectivesError, match="cannot run here: backend is gloo.*KERN_ALL_REDUCE=auto"):
        choose_all_reduce("oneshot", "backend is gloo", None)
    with pytest.raises(CollectivesError, match="for this call: needs 9 bytes"):
        choose_all_reduce("oneshot", None, "needs 9 bytes")


@pytest.fixture
def gloo_world_of_one(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_distributed_falls_back_to_gather_on_gloo_and_refuses_an_explicit_oneshot(gloo_world_of_one):
    from kernels.k31.collectives import Distributed
    from kernels.k31.config import Layout

    comm = Distributed(Layout(), all_reduce="auto")
    assert comm.oneshot is None and "gloo" in comm.oneshot_unavailable
    t = torch.randn(3, 16).to(torch.bfloat16)
    want = t.clone()
    comm.all_reduce(t)
    assert bitwise_equal(t, want) and comm.paths == {"gather": 1}
    with pytest.raises(CollectivesError, match="'oneshot' was asked for but cannot run here"):
        Distributed(Layout(), all_reduce="oneshot")


# ------------------------------------------------------------------ 2 GPUs
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                    reason="needs 2 CUDA GPUs")
def test_oneshot_over_symmetric_memory_matches_gather_on_every_rank_and_in_graphs(tmp_path):
    out = tmp_path / "allreduce.json"
    proc = subprocess.run(
        [sys.executable, "bench/tools/allreduce_latency.py", "--out", str(out), "--world", "2",
         "--rows", "1,3,17,128,256", "--calls", "4", "--replays", "5"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.exists(), f"the tool wrote no result:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    doc = json.loads(out.read_text())
    assert doc["failures"] == [], doc["failures"]
    for rows, res in doc["results"].items():
        one = res["paths"]["oneshot"]
        assert one["equals_gather"] and one["ranks_agree"] and one["graph_matches_eager"], rows
        assert one["graph_us"] is not None
        assert all(r["paths_taken"] == {"oneshot": r["paths_taken"]["oneshot"]} for r in one["per_rank"])
    assert proc.returncode == 0, proc.stderr[-3000:]
