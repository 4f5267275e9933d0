"""The sections of kern.yaml the gates take, typed: each gate receives its own.

- :class:`AccuracySettings` (kern.yaml's ``test``): the accuracy gate's limits and the
  verdict's :class:`Thresholds`, with each op's :class:`Tolerance` against the reference;
- :class:`ScorerSettings` (``bench``): the scorer's statistics and limits;
- :class:`MachineProfile` (``profiles.gpu`` or ``profiles.cpu``): what depends on the machine
  (model, layout, buckets, the tap's rows, rounds and replays);
- :class:`Target` (``target``): the tree and the seeds of its model.

harness/settings.py reads kern.yaml into them once (``resolve``, where the one rule across
sections lives: a machine profile's ``noise_pct`` wins over ``bench.noise_pct``) and reports
every problem as ``key: expected X, found Y``; nothing here reads a file. What crosses into a
side process stays the JSON spec made from them (gates/spec.py).

Each section is a pydantic dataclass (pydantic validates; the annotations are the schema): a
key is a field, its type the annotation, with no coercion (:data:`Int`, :data:`Float`: ``"8"``
is no integer, ``true`` no number; a list becomes a tuple), the range of every number it holds
annotated_types' ``Ge``/``Gt``/``Le``/``Lt`` on that number, ``MinLen(1)`` a non-empty list
(:data:`LISTED` on every list: a YAML set is refused), :class:`Expect` the words an error uses
where the type's own would not say it. A key no field holds is refused, and building a section
validates it (a test's hand-made profile too).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Annotated, Literal

from annotated_types import Ge, Gt, Le, Lt, MinLen
from pydantic import BeforeValidator, ConfigDict, Strict
from pydantic.dataclasses import dataclass as _pydantic_dataclass

# scalars as YAML writes them, never converted from another kind (a float field takes an int)
Int = Annotated[int, Strict()]
Float = Annotated[float, Strict()]
Str = Annotated[str, Strict()]
Bool = Annotated[bool, Strict()]


def _not_a_set(value):
    # YAML can write a set (!!set): pydantic would take it for a list, in no order of the file's
    if isinstance(value, (set, frozenset)):
        raise ValueError("a list, not a set")
    return value


LISTED = BeforeValidator(_not_a_set)  # on every list key: a list (or tuple), never a set


@dataclasses.dataclass(frozen=True)
class Expect:
    """Annotated metadata: what an error says the key expects, where the words of its type
    would not say it (``key: expected <text>, found ...``)."""
    text: str


def section(cls):
    """A section of kern.yaml: a frozen, keyword-only pydantic dataclass refusing unknown keys."""
    return _pydantic_dataclass(frozen=True, kw_only=True, config=ConfigDict(extra="forbid"))(cls)


class SectionProblem(ValueError):
    """A rule across a section's keys is broken (raised in ``__post_init__``): the message is
    ``key: expected X, found Y`` of the key it names, relative to the section."""


@section
class Target:
    """``target``: the tree the loop optimizes and the seeds of its model."""
    tree: Str
    seed: Annotated[Int, Ge(0)]
    weight_sets: Annotated[Int, Ge(1)]


@section
class MachineProfile:
    """One machine profile of kern.yaml (``profiles.gpu`` with CUDA, ``profiles.cpu`` without):
    what depends on the machine; its keys live only there. ``noise_pct`` is the one key a
    profile shares with a section (``bench``): where it is set, it wins (harness/settings.py
    ``resolve`` applies it; the scorer reads :attr:`ScorerSettings.noise_pct`)."""
    model: Literal["full", "small"]
    layout: Str
    buckets: Annotated[tuple[Annotated[Int, Ge(1)], ...], MinLen(1), LISTED]
    weights: Annotated[tuple[Annotated[Float, Gt(0)], ...], MinLen(1), LISTED]
    context: Annotated[Int, Ge(1)]
    test_rows: Annotated[tuple[Annotated[Int, Ge(1)], ...], MinLen(1), LISTED]
    test_context: Annotated[Int, Ge(1)]
    test_steps: Annotated[Int, Ge(1)]
    rounds: Annotated[Int, Ge(1)]
    replays: Annotated[Int, Ge(1)]
    noise_pct: Annotated[Float, Ge(0)] | None = None  # overrides bench.noise_pct
    memory_gib: Annotated[Float, Gt(0)] | None = None
    # one side's accuracy recording on this profile, measured (kern doctor's disk need: A and
    # B, at most test.snapshot_budget_mb each); None: the budget itself
    recording_mb: Annotated[Float, Gt(0)] | None = None

    def __post_init__(self):
        if len(self.buckets) != len(self.weights):
            raise SectionProblem(f"weights: expected one weight per bucket ({len(self.buckets)}), "
                                 f"found {len(self.weights)}")


@section
class Tolerance:
    """One op's tolerance against the protected reference (``test.reference.<op>``); a key
    left out (None) is the ``default`` entry's (:meth:`Thresholds.tolerance`)."""
    rel_rms: Annotated[Float, Gt(0)] | None = None
    exact: Bool | None = None  # every output must match exactly
    exact_output: Str | None = None  # the one output that must match exactly
    max_differing_frac: Annotated[Float, Ge(0), Le(1)] | None = None  # integer outputs (ids)

    def over(self, default: Tolerance) -> Tolerance:
        """Pure: this op's keys over ``default``'s (each key this one leaves out, the default's)."""
        mine = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return Tolerance(**{k: getattr(default, k) if v is None else v for k, v in mine.items()})


@section
class Thresholds:
    """What the accuracy verdict weighs the evidence against (``gates/rules/verdict.py``): KL limits,
    the band and near-tie rules, each op's tolerance against the reference. Part of kern.yaml's
    ``test`` (:class:`AccuracySettings`); the scorer judges its timed outputs on them too."""
    kl_pass: Annotated[Float, Ge(0)]  # max KL(A||B) per row for 'PASS logit evidence'
    kl_fail: Annotated[Float, Gt(0)]  # above max(kl_fail, band_factor x band): FAIL
    band_factor: Annotated[Float, Gt(0)]
    near_tie_factor: Annotated[Float, Ge(0)]
    max_near_tie_flips: Annotated[Float, Ge(0), Le(1)]
    layout_kl_pass: Annotated[Float, Ge(0)]
    reference: Mapping[str, Tolerance]  # op name (or "default") -> its tolerance

    def __post_init__(self):
        if self.kl_pass > self.kl_fail:
            raise SectionProblem(f"kl_pass: expected 0 <= kl_pass <= kl_fail ({self.kl_fail}), "
                                 f"found {self.kl_pass}")

    def tolerance(self, op: str) -> Tolerance:
        """Pure: ``op``'s tolerance, the ``default`` entry's keys where its own leaves them out."""
        default = self.reference.get("default") or Tolerance()
        own = self.reference.get(op)
        return default if own is None else own.over(default)


@section
class AccuracySettings(Thresholds):
    """kern.yaml's ``test``: the accuracy gate's limits, and the verdict's :class:`Thresholds`
    (an ``AccuracySettings`` is the ``Thresholds`` the gate judges on)."""
    __test__ = False  # not a pytest class
    timeout_s: Annotated[Float, Gt(0)]  # one side's whole tap
    hidden_rows: Annotated[Int, Ge(0)]
    snapshot_budget_mb: Annotated[Float, Gt(0)]
    reference_calls_per_op: Annotated[Int, Ge(1)]
    # the candidate's replay side starts beside main's record side (both models on the device
    # at once while main records); false: it starts once main has recorded
    replay_beside: Bool = True
    # a loop tick on one slot records main once for a run of candidates against one main that
    # touch the same ops (gates/rules/batch.py); false: every candidate records main itself (main's
    # idle record side holds its model beside the scorer's until the batch ends)
    record_once_per_batch: Bool = True
    # on one slot, the next judgment's tap sides start held (no tree, no CUDA) beside the
    # current one's scorer and go on once its GPU work ended (gates/rules/overlap.py); such
    # sides build their own model (no store lease); false: they start after the judgment
    start_beside_scorer: Bool = True


@section
class ScorerSettings:
    """kern.yaml's ``bench``: the scorer's statistics and limits (its rounds and replays are the
    machine profile's). ``noise_pct`` as resolved: the machine profile's where it sets one."""
    bootstrap: Annotated[Int, Ge(1)]
    noise_pct: Annotated[Float, Ge(0)]
    guard_pct: Annotated[Float, Ge(0)]
    max_op_rel_rms: Annotated[Float, Gt(0)]
    max_hidden_pct: Annotated[Float, Ge(0)]
    state_sketch_rel: Annotated[Float, Gt(0)]
    timed_band_alpha: Annotated[Float, Gt(0), Lt(1)]
    reverify_pct: Annotated[Float, Gt(0)]
    reverify_rounds: Annotated[Int, Ge(1)]
    reference_calls_per_op: Annotated[Int, Ge(1)]
    timeout_s: Annotated[Float, Gt(0)]
    eager_baseline_timeout_s: Annotated[Float, Gt(0)]
    compile_baseline_timeout_s: Annotated[Float, Gt(0)]

    def baseline_timeout_s(self, kind: str) -> float:
        """``kern bench --baseline KIND``'s limit per request (``eager`` or ``compile``)."""
        return {"eager": self.eager_baseline_timeout_s, "compile": self.compile_baseline_timeout_s}[kind]

