"""The next judgment's start beside another judgment's scorer: the pure rule (gates/rules/overlap.py)."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from gates.rules import overlap as O


def test_the_hold_point_comes_before_anything_that_can_touch_the_gpu():
    names = [s.name for s in O.STEPS]
    assert O.HOLD == "compile_main"
    held = names[names.index(O.HOLD):]
    for step in ("compile_main", "store", "tree_import", "cuda", "model_build", "hand_over", "tap"):
        assert step in held and not O.allowed_beside(step)
    for step in ("scope", "room", "shape", "compiled_lookup", "checkout", "interpreter", "sandbox",
                 "torch_import", "gates_side_code"):
        assert O.allowed_beside(step)
    # nothing allowed comes after the first step that is not: one hold point
    assert all(not s.beside for s in O.STEPS[names.index(O.HOLD):])
    assert O.before_hold("side") == ("interpreter", "sandbox", "torch_import", "gates_side_code")
    assert O.before_hold("harness") == ("scope", "room", "shape", "compiled_lookup", "checkout")


def test_an_unknown_step_is_a_bug_never_allowed():
    with pytest.raises(ValueError, match="no judgment step 'warmup'"):
        O.allowed_beside("warmup")


@given(st.booleans(), st.booleans())
def test_go_needs_the_scorers_end_and_the_slot(done, slot):
    assert O.go_due(done, slot) == (done and slot)


@given(st.booleans(), st.sampled_from(["off", "namespaces", "landlock", "user"]), st.booleans(),
       st.booleans())
def test_which_sides_start_early(serves, sandbox, beside, compiled):
    e = O.early_sides(O.NextFacts(serves, sandbox, beside, compiled))
    if not compiled or sandbox == "off":
        assert e.sides == ()
    elif serves:
        assert e.sides == (O.B,)  # the batch's main side holds the recording: the replay alone
    else:
        assert e.sides == ((O.A, O.B) if beside else ())
    assert e.why


@given(st.booleans(), st.booleans(), st.booleans(), st.booleans(), st.booleans(),
       st.sampled_from([(O.B,), (O.A, O.B)]))
def test_what_ends_the_prepared_sides(halted, failed, merged, member, serves, prepared):
    keep, why = O.keep_prepared(O.EndFacts(halted, failed, merged, member, serves), prepared)
    if halted or failed or (merged and member):
        assert not keep and why
    elif prepared == (O.B,):
        assert keep == (member and serves)
    else:
        assert keep and why == ""


@given(st.lists(st.integers(1, 9), min_size=1, max_size=4, unique=True),
       st.one_of(st.none(), st.lists(st.integers(10, 19), min_size=1, max_size=4, unique=True)))
def test_the_next_judgment_is_the_next_member_or_the_next_batchs_first(pending, following):
    nxt = O.next_judged(tuple(pending), tuple(following) if following is not None else None)
    if len(pending) > 1:
        assert nxt == O.Next(pending[1], same_batch=True, batch=True)
    elif following:
        # across batches: the next batch's first member, a batch of one included
        assert nxt == O.Next(following[0], same_batch=False, batch=len(following) > 1)
    else:
        assert nxt is None


def test_none_pending_is_a_bug_of_the_caller():
    with pytest.raises(ValueError, match="got none pending"):
        O.next_judged((), (3,))


def test_a_merge_keeps_what_was_prepared_for_the_next_batch():
    # its first judgment is against its own base, which no merge moves
    facts = O.EndFacts(halted=False, failed=False, merged=True, batch_member=False, main_side_serves=False)
    assert O.keep_prepared(facts, (O.A, O.B)) == (True, "")
    # ... but a merge in the batch ends what was prepared for its next member
    member = O.EndFacts(halted=False, failed=False, merged=True, batch_member=True, main_side_serves=True)
    assert not O.keep_prepared(member, (O.B,))[0]


def test_no_store_work_runs_beside_another_judgments_scorer():
    # starting, leasing, verifying or releasing the model store builds or digests the weights
    # on the device: after the hold point, never before "go"
    names = [s.name for s in O.STEPS]
    assert not O.allowed_beside("store")
    assert names.index("store") > names.index(O.HOLD)
    assert "store" not in O.before_hold("harness") + O.before_hold("side")


@given(st.sampled_from([(), (O.B,), (O.A, O.B)]))
def test_sides_started_early_never_lease_the_model_store(early):
    leases, why = O.tap_lease(early)
    if early:
        # started before any lease (their spec and sandbox fixed then): the gate that adopts
        # them leases none, and says why
        assert not leases and "before any lease" in why and all(s in why for s in early)
    else:  # a gate that starts its own sides leases the store, inside its slot
        assert leases and why == ""


def test_an_unknown_tap_side_is_a_bug_of_the_caller():
    with pytest.raises(ValueError, match="no tap side 'A noise'"):
        O.tap_lease(("A noise",))
