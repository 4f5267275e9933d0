"""One side's process: a revision's tree, its model on one device, the workload and steps.

Runs inside the side's subprocess (see ``gates/side/driver.py``) after ``tree.open_tree``; the
model, weights, caches and workload come from the tree's protected modules, the step and
kernels from the tree. Nothing here decides a verdict.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import torch


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Progress:
    """Rate-limited progress lines on stderr for long builds."""

    def __init__(self, every_s: float = 5.0):
        self.every_s, self.last = every_s, 0.0

    def __call__(self, what: str, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last >= self.every_s or done == total:
            self.last = now
            log(f"building {what}: {done}/{total}")


@dataclass
class Spec:
    """What a side builds, as plain data (from kern.yaml's machine profile and target)."""

    model: str  # "full" | "small"
    layout: str
    seed: int
    weight_sets: int
    context: int
    steps: int
    rows: list  # batch sizes this side will run
    state_dtype: str = "bf16"
    world: int = 1  # processes, one per rank (gates/launch/ranks.py starts them)

    @staticmethod
    def from_dict(d: dict) -> "Spec":
        return Spec(**{k: d[k] for k in Spec.__dataclass_fields__ if k in d})

    @staticmethod
    def of(options) -> "Spec":
        """The model part of a side's checked options (``gates.protocol.SideOptions``)."""
        return Spec(**{k: getattr(options, k) for k in Spec.__dataclass_fields__})


class Side:
    """The loaded tree + model. ``step(rows, mode)`` gives a DecodeStep on it."""

    def __init__(self, spec: Spec, device: str, hook=None, attach: str | None = None,
                 rank: int = 0, input_seed: int | None = None, attach_sha256: str | None = None,
                 attach_weights: str | None = None):
        from kernels.k31 import model as kmodel
        from kernels.k31.collectives import Distributed, Identity
        from kernels.k31.config import Dims, Layout
        from kernels.k31.workload import Workload

        self.spec, self.device = spec, torch.device(device)
        self.dims = Dims.named(spec.model, kda_state_dtype=spec.state_dtype)
        self.layout = Layout.named(spec.layout, rank=rank, world=spec.world)
        # world > 1: the process group is up (gates.side.rank.join) and this process is `rank`
        self.comm = Distributed(self.layout) if spec.world > 1 else Identity()
        self.max_rows = max(spec.rows)
        # the workload's tokens and positions follow the judgment's hidden input seed (None:
        # the target seed, as kern step uses); weights and caches always the target seed, and
        # the state's capacity is the seed-free bound, so a model built (or shared by a store
        # process) without the hidden seed serves every input seed
        self.workload = Workload(self.dims.vocab, self.max_rows, spec.context, spec.steps + 8,
                                 spec.seed if input_seed is None else input_seed)
        t0 = time.monotonic()
        if attach:
            log(f"attaching to the shared model of {attach}")
            self.model = load_shared(attach, attach_sha256)
        elif attach_weights:
            # the store's weights (CUDA IPC), and a decode state of this process's own, built
            # here from the target seed as build_model builds it: no other side shares it
            from kernels.k31.config import Shapes

            log(f"attaching to the shared weights of {attach_weights}; building its own state")
            self.model = model_with(load_shared(attach_weights, attach_sha256), Shapes(self.dims, self.layout),
                                    self.max_rows, self.workload.position_bound, spec.seed, self.device)
        else:
            log(f"building {spec.model} model, layout {spec.layout} rank {rank} of world "
                f"{spec.world}, {self.max_rows} rows, "
                f"context {spec.context} on {self.device}")
            self.model = kmodel.build_model(
                self.dims, self.layout, rows=self.max_rows, max_position=self.workload.position_bound,
                seed=spec.seed, weight_sets=spec.weight_sets, device=self.device, progress=Progress())
        self.build_s = time.monotonic() - t0
        self._inputs = None  # every workload step's (tokens, positions) on the device, once
        self._timed = None  # every timed input set's (tokens, positions, state scales), once
        log(f"ready in {self.build_s:.1f}s: weights {self.model.weights.nbytes() / 2**30:.2f} GiB, "
            f"state {self.model.state.nbytes() / 2**30:.2f} GiB")
        self.hook = hook

    def use_input_seed(self, input_seed: int | None) -> None:
        """The workload's tokens and positions from ``input_seed`` (None: the target seed),
        handed over after the model was built: weights, caches and the state's capacity follow
        the target seed and the seed-free position bound, so the model serves any input seed."""
        from kernels.k31.workload import Workload

        seed = self.spec.seed if input_seed is None else input_seed
        if seed == self.workload.seed:
            return
        w = Workload(self.dims.vocab, self.max_rows, self.spec.context, self.spec.steps + 8, seed)
        if w.position_bound != self.workload.position_bound:
            raise ValueError(f"workload: input seed {seed} needs positions up to {w.position_bound}, "
                             f"the model holds {self.workload.position_bound} (expected a seed-free "
                             f"bound: kernels/k31/workload's contract)")
        self.workload, self._inputs, self._timed = w, None, None

    @property
    def shapes(self):
        return self.model.shapes

    def step(self, rows: int, mode: str = "kernel", hook=None, comm=None):
        """A step on ``rows`` rows; ``comm`` replaces the side's collectives (a profile's
        clocked ones)."""
        from kernels.k31.dispatch import Ops
        from kernels.k31.step import DecodeStep

        return DecodeStep(self.model, rows, Ops(self.shapes, mode, hook), comm or self.comm)

    def set_inputs(self, step, index: int) -> None:
        """Workload step ``index`` for the first ``step.rows`` requests: a copy on the device
        from every step's inputs, built once (no host work or sync between timed replays)."""
        if self._inputs is None:
            per = [self.workload.step_inputs(i, "cpu") for i in range(self.workload.steps)]
            self._inputs = (torch.stack([t for t, _ in per]).to(self.device),
                            torch.stack([p for _, p in per]).to(self.device))
        if not 0 <= index < self.workload.steps:
            raise IndexError(f"workload step {index} asked for; the workload has steps "
                             f"0..{self.workload.steps - 1} (a gate bug)")
        step.tokens.copy_(self._inputs[0][index, :step.rows])
        step.pos.copy_(self._inputs[1][index, :step.rows])

    def set_timed_inputs(self, step, index: int) -> torch.Tensor:
        """The scorer's timed input set ``index`` (``Workload.timed_inputs``: no request decodes
        a token twice, positions advance with the set) for the first ``step.rows`` requests, a
        copy on the device (no host work or sync between timed replays); returns the set's
        recurrent-state scales of those requests (``[rows]`` f32 on the device)."""
        if self._timed is None:
            self._timed = self.workload.timed_inputs(self.device)
        if not 0 <= index < self.workload.steps:
            raise IndexError(f"timed input set {index} asked for; the workload has sets "
                             f"0..{self.workload.steps - 1} (a gate bug)")
        step.tokens.copy_(self._timed[0][index, :step.rows])
        step.pos.copy_(self._timed[1][index, :step.rows])
        return self._timed[2][index, :step.rows]

    def fresh_state(self) -> None:
        """Rebuild the decode state from its seed (bit-identical to the first build)."""
        from kernels.k31.state import build_state

        self.model.state = build_state(self.shapes, rows=self.max_rows,
                                       max_position=self.workload.position_bound,
                                       seed=self.spec.seed, device=self.device)

    def rows_snapshot(self, rows: int) -> dict:
        """The per-row recurrent state of the first ``rows`` requests (KDA state, conv window).
        With it restored, a step at the same position recomputes the same outputs: the caches
        are only read below each row's position and its own slot is rewritten."""
        st = self.model.state
        snap = {}
        for name in ("kda_state", "conv_window"):
            for layer, t in getattr(st, name).items():
                snap[(name, layer)] = t[:rows].clone()
        return snap

    def restore_rows(self, snap: dict) -> None:
        st = self.model.state
        for (name, layer), t in snap.items():
            getattr(st, name)[layer][:t.shape[0]].copy_(t)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def model_with(weights, shapes, rows: int, bound: int, seed: int, device):
    """The model on ``weights`` with a decode state built for it alone (``rows`` rows,
    positions up to ``bound``, from ``seed``): what ``kernels.k31.model.build_model`` builds
    around weights of its own (the store's lease and a tap side attached to the store's
    weights build it so)."""
    from kernels.k31.model import Model
    from kernels.k31.state import build_state

    state = build_state(shapes, rows=rows, max_position=bound, seed=seed, device=device, progress=Progress())
    return Model(shapes, weights, state, device, seed)


def save_shared(model, path) -> str:
    """Write the model's tensors as CUDA IPC handles (the writer must stay alive while
    readers use them); returns the sha256 of the bytes written."""
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # noqa: F401  registers the CUDA tensor reductions

    data = ForkingPickler.dumps(model, protocol=4)  # bytes; CUDA tensors become IPC handles
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        f.write(bytes(data))
    import os

    os.replace(tmp, path)
    import hashlib

    return hashlib.sha256(bytes(data)).hexdigest()


def load_shared(path, sha256: str | None = None):
    """The model :func:`save_shared` wrote at ``path``; with ``sha256`` (the store's hash of the
    bytes it wrote, sent over the scorer's pipe) only those bytes: the file lies in a run folder
    the candidate's side writes too, and unpickling runs whatever a pickle names."""
    import hashlib
    import pickle

    import torch.multiprocessing  # noqa: F401

    data = open(path, "rb").read()  # read once: what is checked is what is loaded
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise RuntimeError(f"tamper: the shared model's handles at {path} are not the bytes the "
                           f"store wrote (sha256 expected {sha256[:16]}, got "
                           f"{hashlib.sha256(data).hexdigest()[:16]}): a process sharing the run "
                           f"folder replaced them")
    return pickle.loads(data)


def environment(device) -> dict:
    """GPU, SM count, driver, clocks (when readable), torch and triton versions."""
    import platform
    import subprocess

    import triton

    env = {"torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
           "host": platform.node(), "device": str(device)}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        env.update(gpu=p.name, sm_count=p.multi_processor_count,
                   memory_gib=round(p.total_memory / 2**30, 1), cuda=torch.version.cuda)
        try:
            q = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.mem,clocks.max.sm,"
                 "power.draw,temperature.gpu", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=10)
            env["nvidia_smi"] = q.stdout.strip()
        except (OSError, subprocess.SubprocessError) as e:
            env["nvidia_smi"] = f"unreadable: {e}"
    else:
        env["gpu"] = None
        env["note"] = "CPU (Triton interpreter): times are mechanics only, not GPU scores"
    return env
