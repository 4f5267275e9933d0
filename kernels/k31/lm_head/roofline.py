"""lm_head cost: the weight share and activations read once, logits and the argmax written once."""
from ..roofline import Cost, nbytes


def head(sh, args) -> Cost:
    """bytes = |x| + |w| + |logits| + |top_val| + |top_idx|; flops = 2 * rows * vocab_local * hidden."""
    x, w = args["x"], args["w"]
    return Cost(nbytes(x, w, args["logits"], args["top_val"], args["top_idx"]),
                2.0 * x.shape[0] * w.shape[0] * w.shape[1])
