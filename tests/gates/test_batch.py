"""Main recorded once per batch of frozen candidates (gates/rules/batch.py): which candidates share
a draw and a recording, when the draw is made, written down and dropped, over any tick."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gates.rules.batch import (Batch, BatchState, Frozen, draw_due, judged, next_member, plan,
                               recording_needed, recording_serves_on, rest, settled, share_allowed,
                               written_down)

# a tick's frozen candidates in judging order: few mains and shapes, so runs of equal ones occur
ticks = st.lists(st.tuples(st.sampled_from("ab"), st.sampled_from("xy")), max_size=9).map(
    lambda cs: [Frozen(n + 1, f"rev{n + 1}", base, shape) for n, (base, shape) in enumerate(cs)])


@given(ticks, st.booleans())
def test_batches_partition_the_tick_in_order(frozen, share):
    batches = plan(frozen, share)
    assert [n for b in batches for n in b.members] == [c.number for c in frozen]
    by = {c.number: c for c in frozen}
    for b in batches:
        assert {(by[n].base, by[n].shape) for n in b.members} == {(b.base, b.shape)}
    if share:  # maximal runs: two neighbours never could have shared
        for x, y in zip(batches, batches[1:]):
            assert (x.base, x.shape) != (y.base, y.shape)
    else:
        assert all(len(b.members) == 1 for b in batches)


def test_a_run_of_one_main_and_shape_shares_one_recording():
    frozen = [Frozen(3, "r3", "m0", "s"), Frozen(4, "r4", "m0", "s"), Frozen(5, "r5", "m0", "t"),
              Frozen(6, "r6", "m0", "s"), Frozen(7, "r7", "m1", "s")]
    assert plan(frozen) == [Batch("m0", "s", (3, 4)), Batch("m0", "t", (5,)),
                            Batch("m0", "s", (6,)), Batch("m1", "s", (7,))]


def test_no_sandbox_no_shared_draw():
    assert not share_allowed("off")
    assert all(share_allowed(m) for m in ("namespaces", "landlock", "user"))


@given(st.lists(st.integers(1, 20), min_size=1, max_size=6, unique=True), st.sets(st.integers(1, 20)))
def test_the_draw_waits_for_every_member_to_freeze(members, frozen):
    b = Batch("m", "s", tuple(sorted(members)))
    assert draw_due(b, frozen) == set(members).issubset(frozen)


@given(st.integers(1, 6), st.lists(st.booleans(), max_size=6))
def test_one_recording_until_the_last_verdict_or_a_merge(size, merges):
    """Judging a batch member by member: the recording is needed exactly while a member is still
    to be judged on it and main has not changed; the draw is written down only then; after a
    merge the rest get a batch (a draw, a recording) of their own, never this one."""
    b = Batch("m", "s", tuple(range(10, 10 + size)))
    s = BatchState(b)
    for merged in merges:
        n = next_member(s)
        if n is None:
            break
        assert recording_needed(s) and written_down(s) == ()
        s = judged(s, n, merged)
    assert settled(s) == (not recording_needed(s))
    assert settled(s) == (s.merged is not None or len(s.judged) == size)
    if settled(s):
        assert written_down(s) == s.judged and next_member(s) is None
    else:
        assert written_down(s) == () and written_down(s, closing=True) == s.judged
    left = rest(s)
    if s.merged is not None and s.judged[-1] != b.members[-1]:
        assert left == Batch("m", "s", b.members[len(s.judged):])
        assert s.merged not in left.members
    else:
        assert left is None
    assert s.judged == b.members[:len(s.judged)]  # in order, none twice


def test_verdicts_come_in_order():
    s = BatchState(Batch("m", "s", (1, 2)))
    with pytest.raises(ValueError, match="expected the verdict of #1, got #2"):
        judged(s, 2, False)
    s = judged(s, 1, True)
    with pytest.raises(ValueError, match="expected the verdict of #None"):
        judged(s, 2, False)  # the batch ended at the merge: #2 is the rest's


def test_only_a_live_unchanged_recording_serves_the_next_member():
    cases = [(alive, ok, changed) for alive in (False, True) for ok in (False, True)
             for changed in (False, True)]
    assert [c for c in cases if recording_serves_on(*c)] == [(True, True, False)]
