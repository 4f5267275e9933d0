"""One-shot all-reduce cost formula: the bytes that must move and the FLOPs that must be done."""
from ..roofline import Cost, nbytes


def oneshot(sh, args) -> Cost:
    """``args``: ``tensors`` (the tensors of one ``all_reduce`` call, summed in place) and
    ``world`` (W ranks).

    bytes = (W + 1) x message: each rank reads every rank's partial (its own and the W - 1
            peers' over NVLink, W x message) and writes the sum once (message);
    FLOPs = (W - 1) x elements: one add per peer after the first.

    Not counted: the copy of the partial into the symmetric buffer (2 x message, read and
    written), an artifact of the producers writing elsewhere, not a cost the sum must pay.
    Of the bytes, (W - 1) x message cross NVLink (:func:`nvlink_bytes`), whose bandwidth, not
    HBM's, bounds the call at decode sizes."""
    world, tensors = int(args["world"]), list(args["tensors"])
    message = nbytes(*tensors)
    elements = float(sum(t.numel() for t in tensors))
    return Cost((world + 1) * message, (world - 1) * elements)


def nvlink_bytes(world: int, message_bytes: float) -> float:
    """Bytes one rank reads from its peers over NVLink in one call: (W - 1) x message."""
    return (world - 1) * float(message_bytes)
