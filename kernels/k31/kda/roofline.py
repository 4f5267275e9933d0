"""KDA cost formulas: the bytes that must move and the FLOPs that must be done."""
from ..roofline import Cost, nbytes


def conv(sh, args) -> Cost:
    """bytes = x + w + y + 2 * window (read and written);
    FLOPs = rows * C * (2 * taps + 4)  (multiply-add per tap; SiLU counted as 4)."""
    x, w, y, win = args["x"], args["w"], args["y"], args["window"]
    rows, C = x.shape
    taps = w.shape[1]
    return Cost(nbytes(x, w, y) + 2.0 * nbytes(win), float(rows * C * (2 * taps + 4)))


def core(sh, args) -> Cost:
    """bytes = qkv + gate + beta[:, :heads] + g + dt_bias + a_log + gamma + o + 2 * state;
    FLOPs = rows * heads * (7 D^2 + 30 D): per state element one decay multiply, a multiply-add
    for S k, one for the rank-1 update (delta k^T), one for S q, plus O(D) norms and gates."""
    heads, D = sh.kda_heads, sh.dims.kda_head_dim
    qkv, state = args["qkv"], args["state"]
    rows = qkv.shape[0]
    b = nbytes(qkv, args["gate"], args["beta"][:, :heads], args["g"], args["dt_bias"],
               args["a_log"], args["gamma"], args["o"]) + 2.0 * nbytes(state)
    return Cost(b, float(rows * heads * (7 * D * D + 30 * D)))
