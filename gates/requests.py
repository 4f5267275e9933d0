"""What the coordinators are asked, typed: ``kern test``'s :class:`AccuracyRequest`, ``kern
bench``'s :class:`BenchRequest`, and the :class:`Placement` both carry to every launcher (where
a judgment's sides run and how they are confined). harness/ builds them from kern.yaml's
sections (harness/pipeline.py) and hands them in; what comes back is gates/results.py's.
Nothing reaches a launcher beside them: no module-level context holds a slot or a mode."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from .protocol import Hidden
from .rules.scope import ScopeResult
from .settings import AccuracySettings, MachineProfile, ScorerSettings, Target, Thresholds


@dataclass(frozen=True)
class Placement:
    """Where a judgment's sides run and how they start, handed to every launcher
    (gates/launch/): the judging slot's GPUs as ``CUDA_VISIBLE_DEVICES`` names them (None: the
    caller's own, outside a slot; '' a CPU slot), how many judgments share this machine (each
    side's share of its memory), whether a side dies with the process that started it (a Ray
    worker killed mid-judgment leaves none running), kern.yaml's ``sandbox``, and main's
    compiled cache every side's private Triton cache is copied from (None: it starts empty;
    gates/launch/compiled.py sets it once main is compiled)."""

    sandbox: str = "auto"
    gpus: str | None = None
    judgments: int = 1
    die_with_parent: bool = False
    seed: str | None = None

    def seeded(self, cache) -> "Placement":
        """This placement with sides started on a copy of ``cache`` (None: an empty one)."""
        return replace(self, seed=str(cache) if cache else None)


@dataclass
class AccuracyRequest:
    """``kern test REV --vs BASE``: what the accuracy gate is asked to judge."""

    repo: Path
    rev: str
    base: str
    target: Target  # kern.yaml's target: the seeds of the model both sides build
    machine: MachineProfile  # this machine's profile
    accuracy: AccuracySettings  # kern.yaml's test section: the gate's limits and thresholds
    protected: tuple[str, ...]  # kern.yaml's protected globs: a change to one FAILs the gate
    runs_dir: Path
    cuda: bool
    placement: Placement = Placement()  # its slot's GPUs and kern.yaml's sandbox, for every side
    world: int = 1  # processes of each side, one per rank (kern test --gpus)
    layout: str | None = None  # None: the machine profile's
    base_world: int | None = None  # --base-gpus: A on this many ranks of its own layout
    base_layout: str | None = None
    # the judgment's hidden inputs (gates/rules/hidden.py), the same for A and B; None: none (the
    # target seed, the visible rows). The pipeline and the CLI draw one per judgment.
    hidden: Hidden | None = None


@dataclass
class BenchRequest:
    """``kern bench REV [--vs BASE]``: what the scorer is asked to measure."""

    repo: Path
    rev: str
    base: str | None  # None: score REV alone
    target: Target  # kern.yaml's target: the seeds of the model both sides build
    machine: MachineProfile  # this machine's profile: buckets, weights, rounds, replays
    scorer: ScorerSettings  # kern.yaml's bench section (its noise_pct resolved)
    thresholds: Thresholds  # the accuracy verdict's (test): the timed replays' outputs are judged on them
    runs_dir: Path
    cuda: bool
    placement: Placement = Placement()  # its slot's GPUs and kern.yaml's sandbox, for every side
    baselines: tuple = ()  # "eager", "compile"
    rounds: int | None = None
    replays: int | None = None
    peers: bool = False
    alternate: bool | None = None  # sides in alternating processes; None: when they cannot share
    world: int = 1  # processes per side, one per rank (kern bench --gpus)
    layout: str | None = None  # None: the machine profile's
    # the accuracy gate's verdict on this commit and the evidence it weighed (verdict, band,
    # noise, noise_tap): the bar the timed replays' outputs are held to; None: scored alone
    accuracy: dict | None = None
    # the judgment's hidden inputs (gates/rules/hidden.py): both sides decode the workload of its
    # input seed (replay n of each side on input set n); None: the target seed
    hidden: Hidden | None = None


@dataclass
class JudgmentRequest:
    """One judgment of a commit (``kern try``, each of ``kern loop``'s): the accuracy gate's
    request, then the scorer's, both on one commit, base, placement and hidden draw
    (gates/judging.py checks they agree). The scorer's ``accuracy`` is filled in from the
    accuracy gate's verdict; ``bench.scorer``'s reverify_pct and reverify_rounds say when and
    how the scorer measures a large gain again. Hidden inputs None on both: drawn by the gates
    for this judgment (``gates.rules.hidden.for_machine``)."""

    scope: ScopeResult  # the scope gate's answer on the commit (passed: the gates run after it)
    test: AccuracyRequest
    bench: BenchRequest
    isolate: bool = False  # kern.yaml's farm.isolate: the scorer rounds take turns on this host
    # when the judgment began (time.monotonic() of this process, before its scope gate): its
    # total seconds run from there (None: not measured)
    started_s: float | None = None
