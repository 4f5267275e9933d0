"""``farm.kind: ray``: each judgment a Ray task, for more than one host.

The orchestrator submits a judgment as a task that asks for the slot's GPUs (``num_gpus`` =
``farm.gpus``; 0 on a CPU machine) and one CPU; the candidate travels as a git bundle of
base..candidate, the base once per base commit as a bundle of its history (put in Ray's object
store once, then referenced by every task against it). The node clones the base, fetches the
candidate, and runs the same gates as a local slot (``pipeline.judgment``) in a folder of its
own (``$KERN_FARM_DIR``, default ``<tmp>/kern-farm``, kept: the sides' logs stay on the node).
The task returns the same :class:`pipeline.Judgment` the local path returns; the ledger is
written only by the orchestrator's process.

A node or worker that dies mid-judgment surfaces as :class:`NodeLost` (the orchestrator
records the attempt ``crashed`` with reason ``node lost: ...`` and judges its commit once more
as a new attempt); a cluster that cannot be reached at start is a :class:`farm.FarmError`
naming ``farm.address``. Ray is an optional extra (``pip install 'kern-loop[farm]'``): nothing
imports it unless ``farm.kind`` is ``ray``.

The pure parts: :func:`parse_address`, :func:`local_resources`, :func:`task_options`,
:func:`node_slot`; the rest is the shell around Ray and git.
"""
from __future__ import annotations

import os
import socket
import tempfile
import uuid
from pathlib import Path

from .farm import FarmError, Slot
from .gitcmd import git
from .settings import Farm, Resolved

HARNESS_ROOT = Path(__file__).resolve().parent.parent
FARM_DIR_VARIABLE = "KERN_FARM_DIR"  # where a node keeps its judgments' folders


class NodeLost(RuntimeError):
    """The Ray node (or the worker process) judging an attempt died before it answered."""


def parse_address(address: str) -> tuple[str, int] | None:
    """Pure: (host, port) of ``farm.address``, or None for "" (start a local Ray instance).
    Accepts ``host:port`` (a cluster's GCS, as ``ray start --head`` prints it) and
    ``ray://host:port`` (Ray Client)."""
    if address == "":
        return None
    rest = address[len("ray://"):] if address.startswith("ray://") else address
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise FarmError(f"farm.address: expected host:port or ray://host:port of a Ray cluster, "
                        f"or \"\" to start a local Ray instance, found {address!r}")
    return host.strip("[]"), int(port)


def local_resources(slots: list[Slot], cuda: bool) -> dict:
    """Pure: the resources of a Ray instance started here: one CPU per slot (each judgment
    task asks for one, so at most one task per slot runs at once) and the slots' GPUs."""
    gpus = sum(len(s.devices) for s in slots) if cuda else 0
    return {"num_cpus": max(1, len(slots)), "num_gpus": gpus}


def task_options(cuda: bool, gpus_per_slot: int) -> dict:
    """Pure: what one judgment task asks of Ray. No automatic retry: a lost node is the
    orchestrator's to record (crashed, node lost) and to re-queue once."""
    return {"num_cpus": 1, "num_gpus": gpus_per_slot if cuda else 0, "max_retries": 0}


def node_slot(host: str, gpu_ids: list, visible: str | None, pid: int) -> Slot:
    """Pure: the slot a task ran on, as the ledger names it: the node's GPUs Ray assigned it
    (``visible``: the CUDA_VISIBLE_DEVICES Ray set), or on a CPU node its worker process."""
    if gpu_ids:
        ids = tuple(x for x in (visible or ",".join(map(str, gpu_ids))).split(",") if x)
        return Slot(host, "gpu" + "-".join(ids), ids)
    return Slot(host, f"cpu-pid{pid}")


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Refuse an unreachable ``farm.address`` up front (Ray itself retries for minutes)."""
    hp = parse_address(address)
    if hp is None:
        return
    try:
        socket.create_connection(hp, timeout=timeout_s).close()
    except OSError as e:
        raise FarmError(f"farm.address {address!r}: no Ray cluster answers at {hp[0]}:{hp[1]} "
                        f"({e}); start one there (ray start --head --port {hp[1]}), or set "
                        f"farm.address to \"\" to start a local Ray instance") from None


def _ray():
    try:
        import ray
    except ImportError:
        raise FarmError("farm.kind is 'ray' but Ray is not installed here: pip install "
                        "'kern-loop[farm]' (or set farm.kind to local)") from None
    return ray


def farm_dir() -> Path:
    return Path(os.environ.get(FARM_DIR_VARIABLE) or Path(tempfile.gettempdir()) / "kern-farm")


def make_bundle(repo: Path, tip: str, exclude: str | None) -> bytes | None:
    """A git bundle of ``exclude``..``tip`` (``exclude`` None: ``tip``'s whole history); None
    when there is nothing between them (a tip that is its base)."""
    if exclude is not None and git(repo, "rev-list", "--count", f"{exclude}..{tip}").strip() == "0":
        return None
    ref = f"refs/kern-farm/{uuid.uuid4().hex}"
    git(repo, "update-ref", ref, tip)
    try:
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "b.bundle"
            git(repo, "bundle", "create", str(path), ref, *([f"^{exclude}"] if exclude else []))
            return path.read_bytes()
    finally:
        git(repo, "update-ref", "-d", ref)


def _unbundle(repo: Path, data: bytes, name: str) -> None:
    path = repo.parent / f"{name}.bundle"
    path.write_bytes(data)
    git(repo, "fetch", "-q", str(path), "+refs/kern-farm/*:refs/kern-farm/*")


def judge_task(base_bundle: bytes, delta: bytes | None, rev: str, base: str, cfg: Resolved,
               cuda: bool, hidden: dict, label: str):
    """What runs on the node (inside a Ray worker): the base and the candidate from their
    bundles, then ``pipeline.judgment`` on the slot Ray gave this task (``cfg``: kern.yaml
    resolved by the orchestrator, typed sections pickled as they are)."""
    import ray

    from gates.protocol import Hidden

    from . import farm, pipeline
    from .worktrees import Repo

    d = farm_dir() / f"{label}-{uuid.uuid4().hex[:8]}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "worker.pid").write_text(f"{os.getpid()}\n")
    repo = d / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    _unbundle(repo, base_bundle, "base")
    if delta is not None:
        _unbundle(repo, delta, "candidate")
    log = open(d / "judgment.log", "a", buffering=1)
    slot = node_slot(socket.gethostname(), ray.get_gpu_ids(), os.environ.get("CUDA_VISIBLE_DEVICES"),
                     os.getpid())
    ctx = pipeline.Context(Repo(repo), cfg, d / "runs", cuda, None,
                           progress=lambda m: log.write(f"{m}\n"))
    # the slot is Ray's: the task holds it while it runs; its sides end if this worker dies
    ctx.pool = farm.Pool(ctx.runs, [slot], die_with_parent=True)
    try:
        return pipeline.judgment(ctx, rev, base, Hidden.from_dict(hidden, "the orchestrator's task"))
    finally:
        log.close()


class RayFarm:
    """The orchestrator's handle on a Ray cluster (``farm.address``; "" starts a local Ray
    instance with one CPU per local slot and the slots' GPUs)."""

    def __init__(self, repo: Path, farm: Farm, cuda: bool, local_slots: list[Slot]):
        self.address = farm.address
        self.repo, self.cuda = Path(repo), cuda
        self.gpus = farm.gpus
        check_reachable(self.address)
        ray = _ray()
        env = {"PYTHONPATH": os.pathsep.join([str(HARNESS_ROOT)] + [
            p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
        if os.environ.get(FARM_DIR_VARIABLE):
            env[FARM_DIR_VARIABLE] = os.environ[FARM_DIR_VARIABLE]
        kwargs = {"runtime_env": {"env_vars": env}, "log_to_driver": False,
                  "include_dashboard": False, "ignore_reinit_error": True}
        try:
            if self.address:
                ray.init(address=self.address, **kwargs)
            else:
                ray.init(**local_resources(local_slots, cuda), **kwargs)
        except Exception as e:  # noqa: BLE001 - Ray's own words, with who acts
            raise FarmError(f"farm.address {self.address or '(local)'!r}: Ray did not start or "
                            f"connect: {type(e).__name__}: {e}") from None
        self._ray = ray
        self._task = ray.remote(judge_task).options(**task_options(cuda, self.gpus))
        self._bases: dict = {}  # base sha -> the object reference of its history bundle

    def submit(self, ctx, rev: str, base: str, hidden, label: str):
        """Start judging ``rev`` against ``base`` on the cluster; returns a callable that
        waits for the :class:`pipeline.Judgment` (raises :class:`NodeLost`, or what judging
        raised on the node)."""
        if base not in self._bases:
            self._bases[base] = self._ray.put(make_bundle(self.repo, base, None))
        ref = self._task.remote(self._bases[base], make_bundle(self.repo, rev, base), rev, base,
                                ctx.cfg, self.cuda, hidden.to_dict(), label)
        return lambda: self._result(ref)

    def _result(self, ref):
        ex = self._ray.exceptions
        lost = tuple(getattr(ex, n) for n in ("WorkerCrashedError", "NodeDiedError",
                                              "LocalRayletDiedError", "ObjectLostError",
                                              "OwnerDiedError") if hasattr(ex, n))
        try:
            return self._ray.get(ref)
        except lost as e:
            raise NodeLost(f"{type(e).__name__}: {str(e).splitlines()[0][:200]}") from None
        except ex.RayTaskError as e:  # judging itself raised on the node: the same as locally
            raise e.as_instanceof_cause() from None

    def shutdown(self) -> None:
        self._ray.shutdown()
