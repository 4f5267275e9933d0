"""The cross-rank all-reduce kernels: ``oneshot`` (every rank reads every peer's partial from
torch symmetric memory and sums them in rank order). ``collectives.Distributed`` chooses when to
use it (see ``collectives.choose_all_reduce``)."""
