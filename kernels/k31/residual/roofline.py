"""Residual-mix cost formula: the bytes that must move and the FLOPs that must be done."""
from ..roofline import Cost, nbytes


def mix(sh, args) -> Cost:
    """With ``n = n_snap`` completed snapshots before the call and ``c`` candidates
    (``n + 1`` when ``close_block`` or ``use_partial``, else ``n``):

    bytes = 2 * partial (read, written) + delta + delta2 (when given) + snaps[:n] (read)
            + snaps[n] (written, only when ``close_block``) + sw + norm_w + x;
    FLOPs = rows * H * (5 c + 6 + deltas): per candidate a square-accumulate, a dot with ``sw``
            (2 each) and the weighted add (1 counted); the final norm, gamma and the adds of
            the deltas.
    """
    snaps, partial, x = args["snaps"], args["partial"], args["x"]
    n, close, use_p = int(args["n_snap"]), bool(args["close_block"]), bool(args["use_partial"])
    rows, H = partial.shape
    deltas = [t for t in (args.get("delta"), args.get("delta2")) if t is not None]
    b = 2.0 * nbytes(partial) + nbytes(*deltas) + nbytes(snaps[:n]) + nbytes(args["sw"], args["norm_w"], x)
    if close:
        b += nbytes(snaps[n])
    c = n + 1 if (close or use_p) else n
    return Cost(b, float(rows * H * (5 * c + 6 + len(deltas))))
