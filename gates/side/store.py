"""The model store's process (``python -m gates.side.driver store``): the weights built once,
leased to the scorer's runs one at a time (``gates/protocol.py``: :class:`StoreLease`,
:class:`StoreRelease`; the shell is gates/launch/store.py, the lifecycle gates/rules/store.py).

It imports the tree's model code and nothing else of it (:func:`loaded_files` says what it
imported; the shell refuses a store that ran code its digest does not cover), and never the
candidate's: it is started on main's tree. Each lease gets a decode state built from the target
seed for that lease alone, dropped when it ends. The weights are verified before every lease
and after it by a keyed digest whose key this process draws and keeps (a side attached to the
weights can write them, CUDA IPC has no read-only mapping; it cannot know the key, so it
cannot make a changed weight keep its digest).
"""
from __future__ import annotations

import gc
import json
import os
import sys
import time
from pathlib import Path

import torch

from .. import protocol
from .clock import clock
from .fingerprint import Pending
from .session import Progress, log, model_with, save_shared

FREED_SLACK = 64 << 20  # bytes beyond the weights' a released store may hold (allocator slack)


def weight_tensors(weights) -> list:
    """Every tensor of ``weights`` (``kernels.k31.weights.Weights``) once, in a fixed order
    (the weight sets are shared across layers: one tensor each)."""
    seen, out = set(), []
    for obj in [weights.embed, weights.lm_head, *weights.mix, *weights.attn, *weights.mlp]:
        for t in ([obj] if isinstance(obj, torch.Tensor) else list(vars(obj).values())):
            if isinstance(t, torch.Tensor) and (t.data_ptr(), t.dtype, tuple(t.shape)) not in seen:
                seen.add((t.data_ptr(), t.dtype, tuple(t.shape)))
                out.append(t)
    return out


def cache_tensors(state) -> list:
    """The caches of a decode state (``kernels.k31.state.DecodeState``) a step reads and never
    keeps: the page table, the MLA latent and indexer caches and their scales (not the
    recurrent KDA state and conv window, which every timed replay sets)."""
    return [t for name, t in state.tensors() if not name.startswith(("kda_state.", "conv_window."))]


class WeightDigest:
    """The weights' keyed digest at build (``fingerprint.Pending``'s raw hash of every tensor,
    a key drawn here from os.urandom and never sent), and :meth:`intact`: whether they still
    hash the same."""

    def __init__(self, weights, device):
        self.weights = weights
        key = (int.from_bytes(os.urandom(4), "little"), int.from_bytes(os.urandom(4), "little"))
        self._pending = Pending(device, key)
        self._built = self._digest()

    def of(self, tensors) -> list[str]:
        """The keyed raw hash of each of ``tensors`` (the same key: the weights' and a lease's
        caches')."""
        for t in tensors:
            self._pending.check(t, values=False, counts=False)
        return [c.raw for c in self._pending.resolve()]

    def _digest(self) -> list[str]:
        return self.of(weight_tensors(self.weights))

    def intact(self) -> bool:
        return self._digest() == self._built


def shm_maps() -> list[str] | None:
    """The lines of this process's /proc/self/maps that map a file under /dev/shm (torch's
    CUDA IPC consumer counts it keeps for the next lease's sides), as the kernel wrote them;
    None where that cannot be read. The harness reads them (gates/rules/shm.py's
    ``mapped``: the parsing stays on its side of the trust boundary), keeps those files and
    sweeps the rest of the group's /dev/shm after each lease."""
    try:
        text = os.fsdecode(Path("/proc/self/maps").read_bytes())
    except OSError:
        return None
    return [line for line in text.split("\n") if " /dev/shm/" in line]


def loaded_files() -> list[str]:
    """The files of ``kernels`` this process imported, relative to kernels/ (a module without
    a file: its name)."""
    import kernels

    root = Path(kernels.__file__).resolve().parent
    out = []
    for name, m in sorted(sys.modules.items()):
        if name == "kernels" or name.startswith("kernels."):
            f = getattr(m, "__file__", None)
            try:
                out.append(Path(f).resolve().relative_to(root).as_posix() if f else name)
            except ValueError:
                out.append(str(f))
    return out


class Store:
    """The weights on ``device`` (built at construction) and at most one lease's model."""

    def __init__(self, opts: "protocol.StoreOptions", device: str):
        from kernels.k31.config import Dims, Layout, Shapes
        from kernels.k31.weights import build_weights

        self.opts, self.device = opts, torch.device(device)
        self.dims = Dims.named(opts.model, kda_state_dtype=opts.state_dtype)
        self.shapes = Shapes(self.dims, Layout.named(opts.layout, rank=0, world=1))
        t0 = time.monotonic()
        log(f"store: building the {opts.model} model's weights, layout {opts.layout} on {self.device}")
        self.weights = build_weights(self.shapes, seed=opts.seed, weight_sets=opts.weight_sets,
                                     device=self.device, progress=Progress())
        self.digest = WeightDigest(self.weights, self.device)
        self.build_s = time.monotonic() - t0
        # what the device holds for the weights alone (their digests' buffers included): a
        # lease's state must be gone again when it ends
        self.baseline = self._allocated()
        self.model = None  # the open lease's (weights and its own state; None: the weights alone)
        self.open = False  # a lease is open
        self.leases = 0
        self.handed = 0  # handle files written for the open lease
        self.caches = None  # the open lease's caches' digest when it was built

    def lease_model(self, lease: "protocol.StoreLease"):
        """The model of ``lease``: the weights held and a decode state built for it from the
        target seed, as ``kernels.k31.model.build_model`` makes it at the lease's size (the
        capacity a side's workload needs: ``gates/side/session.Side``'s)."""
        from kernels.k31.workload import Workload

        rows = max(lease.rows)
        bound = Workload(self.dims.vocab, rows, lease.context, lease.steps + 8, self.opts.seed).position_bound
        return model_with(self.weights, self.shapes, rows, bound, self.opts.seed, self.device)

    def lease(self, lease: "protocol.StoreLease", out: Path) -> dict:
        if self.open:
            return {"error": "a lease is open (expected a release first): a bug of the scorer"}
        self.leases += 1
        intact = self.digest.intact()
        if not intact:
            log("store: the weights differ from their build's digest: no lease")
            return {"lease": self.leases, "weights_intact": False, "state_s": 0.0}
        t0 = time.monotonic()
        self.open, self.handed = True, 0
        if lease.state:
            self.model = self.lease_model(lease)
            self.caches = self.digest.of(cache_tensors(self.model.state))
        state_s = time.monotonic() - t0
        log(f"store: lease {self.leases}: " + (f"state for {max(lease.rows)} rows at context "
            f"{lease.context} in {state_s:.1f}s" if lease.state else "the weights alone (each side "
            f"builds its own state)"))
        return {"lease": self.leases, "weights_intact": True, "state_s": state_s}

    def _handle_path(self, out: Path, k: int) -> Path:
        return out.with_suffix(f".lease{self.leases}-{k}.ipc")

    def handles(self, out: Path, weights: bool = False) -> dict:
        """The open lease's model (``weights``: the weights alone) as handles for one more
        process (a file each: torch counts one consumer per handle sent)."""
        if not self.open:
            return {"error": "no lease is open (expected a lease first): a bug of the scorer"}
        if not weights and self.model is None:
            return {"error": "the lease holds the weights alone (expected handles of the weights): "
                             "a bug of the gate"}
        if self.device.type != "cuda":  # the CPU has no CUDA IPC: its sides build their own
            return {"ready": None, "sha256": None}
        self.handed += 1
        path = self._handle_path(out, self.handed)
        return {"ready": str(path), "sha256": save_shared(self.weights if weights else self.model, path)}

    def _allocated(self) -> int:
        if self.device.type != "cuda":
            return 0
        torch.cuda.synchronize(self.device)
        return torch.cuda.memory_allocated(self.device)

    def release(self, out: Path) -> dict:
        # whether the lease's sides left its caches as built (their replays put back the slots
        # they write; the recurrent state is theirs to set): reported, decides nothing yet
        restored = None if self.model is None else \
            self.digest.of(cache_tensors(self.model.state)) == self.caches
        self.model, self.open = None, False
        gc.collect()
        if self.device.type == "cuda":
            # blocks sent over CUDA IPC stay in torch's limbo until every consumer released
            # them: collected here where they were; what is left is reported, not hidden
            torch.cuda.ipc_collect()
            torch.cuda.empty_cache()
        for k in range(1, self.handed + 1):
            self._handle_path(out, k).unlink(missing_ok=True)
        intact = self.digest.intact()
        held = max(0, self._allocated() - self.baseline)
        freed = held <= FREED_SLACK
        log(f"store: lease {self.leases} released; weights {'unchanged' if intact else 'CHANGED'}; "
            f"{held / 2**20:.0f} MiB of its state still on the device")
        return {"released": self.leases, "weights_intact": intact, "freed": freed, "held_bytes": held,
                "caches_restored": restored, "shm": shm_maps()}


def serve(opts: "protocol.StoreOptions", device: str, out: Path, channel) -> dict:
    """Build the weights, say so on ``channel`` (``{"store": true, "build_s", "loaded",
    "phases"}``), then answer each request on stdin until :data:`protocol.STORE_QUIT` or its
    end. A line that is no request ends the store with an error (the scorer's bug)."""
    with clock().span("build"):
        store = Store(opts, device)

    def say(obj: dict) -> None:
        channel.write(json.dumps(obj) + "\n")
        channel.flush()

    say({"store": True, "build_s": store.build_s, "loaded": loaded_files(),
         "weights_gib": sum(t.numel() * t.element_size() for t in weight_tensors(store.weights)) / 2**30,
         "phases": clock().phases().to_dict()})
    for line in sys.stdin:
        req = protocol.store_request(line)
        if req is None:
            break
        if isinstance(req, protocol.StoreLease):
            say(store.lease(req, out))
        elif isinstance(req, protocol.StoreHandles):
            say(store.handles(out, req.weights))
        else:
            say(store.release(out))
    log("store: done")
    return {"build_s": store.build_s, "leases": store.leases, "loaded": loaded_files()}
