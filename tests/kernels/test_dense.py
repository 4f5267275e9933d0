"""Dense projections (torch.matmul) against the reference, on strided inputs and awkward rows."""
import os

import pytest
import torch

from tests.kernels.support import AWKWARD_ROWS, run_and_compare, shapes


@pytest.mark.parametrize("rows", AWKWARD_ROWS)
@pytest.mark.parametrize("seed", [0, int(os.environ["KERN_TEST_SEED"])])
def test_linear_matches_reference(rows, seed, device):
    sh = shapes()
    g = torch.Generator().manual_seed(seed)
    wide = torch.randn(rows, 3 * sh.dims.hidden, generator=g).to(torch.bfloat16).to(device)
    x = wide[:, 64:64 + sh.dims.hidden]  # a slice of a fused projection's output
    w = (torch.randn(96, sh.dims.hidden, generator=g) / sh.dims.hidden ** 0.5).to(torch.bfloat16).to(device)
    y = torch.empty(rows, 96, dtype=torch.bfloat16, device=device)
    # cuBLAS/CPU bf16 GEMMs accumulate in f32 and round once: within a few ulp of the reference
    run_and_compare("kda.in_proj", sh, {"x": x, "w": w, "y": y}, rel_rms=5e-3)
