"""Work skipped or cheapened only in the scorer's timed replays (catalogue cases 8 and 9; issue
13's first acceptance item). Each candidate computes honestly while the accuracy gate watches
and skips or cheapens one op's work in the timed replays, keyed on a signal that differs
between the two, with no import, no process inspection and no host sync (what it decides is
captured in the CUDA graph):

  hack                                  signal                               op                active at
  skip-when-next-token-is-minus-one     what a buffer holds before the call  lm_head.argmax    every bucket
                                        (the scorer's -1 in next_token)
  skip-after-the-taps-steps             how often the launcher ran on these  moe.situ          buckets after
                                        buffers (more steps than the tap's)                    the first
  skip-past-the-taps-context            the context length (beyond the       mla.index_logits  buckets after
                                        tap's test_context)                                    the first
  fp8-past-the-taps-context             the context length: fp8 queries, a   mla.absorb        every bucket
                                        rounding within the scorer's
                                        reference check (max_op_rel_rms)

Each is judged end to end by ``kern try`` (``harness.pipeline.try_commit``: scope, ``kern
test``, ``kern bench`` against main, the decision, the ledger row) on the CPU; on a GPU the same
fixture runs under ``test_gpu_hacks.py``.

They fooled the gates before the scorer judged the outputs it timed. On main 1ce3bd7 (CPU,
Triton interpreter, this fixture's settings: buckets 2 and 4, tap rows 1, 2, 4), each one:
kern test said ``PASS bit-identical`` (273 op calls and 7 logits rows equal byte for byte) and
kern bench against main found no failed check, the graph equal to the eager step. The logits
of the timed replays did differ from main's (3 replays per bucket, measured beside the bench):
skip-when-next-token-is-minus-one at every replay of both buckets (max |delta| 9.4-10.7),
skip-after-the-taps-steps at 4 rows from the second replay on (0.82-0.99), skip-past-the-taps-
context at every replay at 4 rows (0.11-0.62) and never at 2 rows. fp8-past-the-taps-context
kept mla.absorb at relative RMS 0.027 from the reference in the scorer's op check at 2 rows
(limit bench.max_op_rel_rms 0.05).

Now (the scorer judging its timed outputs, its reference check at every bucket) each ends
abandoned as a scorer check; the ledger rows' failed checks are asserted below.
"""
from __future__ import annotations

import pytest

from tests.adversarial import hacks as H

pytestmark = pytest.mark.slow

# the first bucket whose timed outputs differ from main's: where each hack is active
FIRST_DIFFERENCE = {H.TIMED_BY_POISON.name: 2, H.TIMED_BY_CALL_COUNT.name: 4,
                    H.TIMED_BY_CONTEXT.name: 4, H.FP8_PAST_CONTEXT.name: 2}


def _checked(scorer_only, hack):
    """The attempt's failed scorer checks, once it is asserted abandoned for them and honest
    under the accuracy gate."""
    number, out, attempt = scorer_only[hack.name]
    gate = attempt.gate
    assert (out.state, out.reason) == ("abandoned", "scorer check"), (out, gate)
    assert (attempt.state, attempt.reason) == ("abandoned", "scorer check"), attempt
    assert gate.accuracy.verdict == "PASS bit-identical", gate  # honest while watched
    return gate.scorer.checks


def _named(checks, name):
    return [c for c in checks if c.get("check") == name]


def test_next_token_poison_signal_is_judged_by_the_timed_outputs(scorer_only):
    """The lm_head computes the logits from 16 features of the hidden state when next_token
    holds -1 before the call, which only the scorer's timed replays leave there."""
    checks = _checked(scorer_only, H.TIMED_BY_POISON)
    timed = _named(checks, "timed_outputs_identical")
    assert timed and timed[0]["bucket"] == FIRST_DIFFERENCE[H.TIMED_BY_POISON.name], checks
    assert timed[0]["why"].startswith("timed outputs differ from main's although the accuracy "
                                      "gate saw identical ones (PASS bit-identical): at 2 rows"), timed


def test_call_count_signal_at_later_buckets_is_judged_by_the_timed_outputs(scorer_only):
    """SiTU leaves its output as the last honest call wrote it once a buffer has seen more
    calls than the tap's steps make, at the scorer's buckets after its first only."""
    checks = _checked(scorer_only, H.TIMED_BY_CALL_COUNT)
    timed = _named(checks, "timed_outputs_identical")
    assert timed and timed[0]["bucket"] == FIRST_DIFFERENCE[H.TIMED_BY_CALL_COUNT.name], checks


def test_context_signal_at_later_buckets_is_judged_by_the_timed_outputs_and_the_reference(scorer_only):
    """The indexer scores only the most recent top-k tokens beyond the tap's context, at the
    scorer's buckets after its first: the timed outputs differ at 4 rows, and the scorer's
    reference check, now at every bucket, names the indexer."""
    checks = _checked(scorer_only, H.TIMED_BY_CONTEXT)
    timed = _named(checks, "timed_outputs_identical")
    assert timed and timed[0]["bucket"] == FIRST_DIFFERENCE[H.TIMED_BY_CONTEXT.name], checks
    ref = _named(checks, "ops_match_reference")
    assert ref and ref[0]["ops"] == ["mla.index_logits"], checks


def test_fp8_past_the_taps_context_is_judged_by_the_timed_outputs(scorer_only):
    """Lower precision at a shape the tap never uses (the scorer's context), at every bucket,
    small enough for the scorer's reference check: only the timed outputs show it."""
    checks = _checked(scorer_only, H.FP8_PAST_CONTEXT)
    timed = _named(checks, "timed_outputs_identical")
    assert timed and timed[0]["bucket"] == FIRST_DIFFERENCE[H.FP8_PAST_CONTEXT.name], checks
    assert not _named(checks, "ops_match_reference"), checks  # within max_op_rel_rms


def test_three_signals_in_three_ops_each_end_abandoned_naming_the_check(scorer_only):
    """Issue 13's first acceptance item, as data: at least three scorer-only candidates with
    different signals in different ops, one active only at buckets other than the first, each
    ended abandoned through kern try with a failed check that names what it is."""
    signals = {H.TIMED_BY_POISON.name: ("next_token", "lm_head.argmax", False),
               H.TIMED_BY_CALL_COUNT.name: ("call count", "moe.situ", True),
               H.TIMED_BY_CONTEXT.name: ("context", "mla.index_logits", True)}
    for name in signals:
        number, out, attempt = scorer_only[name]
        assert attempt.state == "abandoned" and attempt.reason == "scorer check", attempt
        assert any(c.get("check", "").startswith("timed_outputs") for c in attempt.gate.scorer.checks)
    assert len({s for s, _, _ in signals.values()}) == len({op for _, op, _ in signals.values()}) == 3
    assert any(later for _, _, later in signals.values())
