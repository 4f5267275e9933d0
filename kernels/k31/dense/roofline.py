"""Dense projection cost: the weight is read once, activations in and out, 2*M*N*K FLOPs."""
from ..roofline import Cost, nbytes


def linear(sh, args) -> Cost:
    """bytes = w + x + y (the weight read once, activations in and out); flops = 2 * rows * out * in."""
    x, w, y = args["x"], args["w"], args["y"]
    return Cost(nbytes(w, x, y), 2.0 * x.shape[0] * w.shape[0] * w.shape[1])
