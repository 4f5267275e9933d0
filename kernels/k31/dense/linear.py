"""Dense projections: ``y = x @ w.T`` through torch.matmul (cuBLAS on a GPU), as the published
tree does. ``x`` may be a strided view (a slice of a fused projection's output)."""
import torch


def linear(sh, *, x: torch.Tensor, w: torch.Tensor, y: torch.Tensor) -> None:
    torch.matmul(x, w.t(), out=y)
