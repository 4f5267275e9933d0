"""The loop's order contract (harness/orchestrator.py): a tick judges attempts in number order
and never one while an earlier one's agent still runs, so which agent process finishes first
decides no outcome.

The rule is the pure ``collectable``, tested over every in-flight set and finish order; then
the orchestrator itself with real agent processes (the command backend, each waiting for a
file the test writes, so the test picks the finish order) and the gate stand-ins of
test_faults.py (their A/B goes through the scorer's real analysis on injected timings).
"""
from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness import ledger as L
from harness.orchestrator import Orchestrator, attempt_dir, collectable
from tests.gates.candidates import context, make_repo
from tests.harness.test_faults import Gates, fake_profile


# --------------------------------------------------------------------------- the pure rule
@settings(deadline=None)  # no wall-clock limit: a loaded CI machine must not fail a pure test
@given(st.dictionaries(st.integers(1, 60), st.booleans(), max_size=12))
def test_collectable_is_the_ready_prefix_in_number_order(in_flight):
    got = collectable(in_flight)
    assert got == sorted(got) and all(in_flight[n] for n in got)
    # nothing judged while an earlier attempt is still running ...
    assert all(in_flight[m] for n in got for m in in_flight if m < n)
    # ... and nothing ready held back but for an earlier one still running
    rest = sorted(set(in_flight) - set(got))
    assert not rest or not in_flight[rest[0]]


def _judge(number: int, main: tuple) -> tuple[str, tuple]:
    """A toy judge whose verdict depends on main, as the real one does: an attempt merges
    unless it clashes with something merged before it (numbers sharing a residue mod 3)."""
    if any(m % 3 == number % 3 for m in main):
        return "conflict", main
    return "merged", main + (number,)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_outcomes_do_not_depend_on_the_order_agents_finish(data):
    numbers = data.draw(st.lists(st.integers(1, 40), min_size=1, max_size=9, unique=True))
    finish = data.draw(st.permutations(numbers))  # the order the agents' processes end
    # after how many of them each tick collects (a last tick after all have ended)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(numbers)), max_size=6))) + [len(numbers)]
    main, outcomes, judged, in_flight = (), {}, [], set(numbers)
    for cut in cuts:
        ended = set(finish[:cut])
        for n in collectable({m: m in ended for m in in_flight}):
            outcomes[n], main = _judge(n, main)
            judged.append(n)
            in_flight.discard(n)
    serial, main_serial = {}, ()
    for n in sorted(numbers):  # every agent finished before the first tick
        serial[n], main_serial = _judge(n, main_serial)
    assert judged == sorted(numbers) and outcomes == serial and main == main_serial


# --------------------------------------------------------------------------- the orchestrator
def agent_script(release) -> str:
    """Attempt n's agent waits for ``release/n``, then commits: 1 and 2 append to the same
    file's end (the later of them conflicts with the earlier once it merges), 3 to another."""
    return f"""
while [ ! -e {release}/$KERN_ATTEMPT ]; do sleep 0.05; done
case "$KERN_ATTEMPT" in
  1) echo "# first" >> kernels/k31/moe/situ.py ;;
  2) echo "# second" >> kernels/k31/moe/situ.py ;;
  3) echo "# third" >> kernels/k31/moe/combine.py ;;
esac
git commit -qam "attempt $KERN_ATTEMPT"
"""


@pytest.mark.parametrize("finish", [(1, 2, 3), (3, 2, 1), (2, 3, 1)], ids=lambda f: "-".join(map(str, f)))
def test_a_tick_judges_in_number_order_whichever_agent_finished_first(finish, tmp_path, monkeypatch):
    release = tmp_path / "release"
    release.mkdir()
    script = tmp_path / "agent.sh"
    script.write_text(agent_script(release))
    repo = make_repo(tmp_path, {"agent.backend": "command", "agent.command": f"exec sh {script}",
                                "agent.timeout_s": 120, "loop.concurrency": 3})
    fake_profile(repo, ["moe.situ", "moe.combine", "moe.router"])
    gates = Gates(monkeypatch)
    ctx, settings_ = context(repo)
    orch = Orchestrator(ctx)
    assert [n for n, _ in orch.tick().spawned] == [1, 2, 3]

    collected = []
    for i, n in enumerate(finish):
        (release / str(n)).touch()
        proposal = attempt_dir(ctx.runs, n) / "proposal.json"
        deadline = time.monotonic() + 60
        while not proposal.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proposal.exists(), (attempt_dir(ctx.runs, n) / "agent.log").read_text()
        rep = orch.tick(spawn=False)
        collected.append([c[0] for c in rep.collected])
        # an attempt finished before an earlier one waits for it, in the running state
        earliest_running = min(set(finish[i + 1:]), default=None)
        for m in finish[:i + 1]:
            if earliest_running is not None and m > earliest_running:
                assert ctx.ledger.attempt(m).state == L.RUNNING, (finish, i, m)

    outcomes = {a.number: (a.state, a.reason) for a in ctx.ledger.attempts()}
    assert outcomes == {1: (L.MERGED, None), 2: (L.ABANDONED, L.CONFLICT), 3: (L.MERGED, None)}
    assert [n for tick in collected for n in tick] == [1, 2, 3], collected
    # judged in number order: 1, then 2 against main before 1 (it wins, then fails to rebase),
    # then 3 against that same base and again after its rebase onto 1
    bases = [base for gate, _, base in gates.calls if gate == "bench"]
    first = ctx.ledger.attempt(1)
    assert bases == [first.base_sha, first.base_sha, first.base_sha, first.commit_sha], gates.calls
    third = ctx.ledger.attempt(3)
    assert third.base_sha == first.commit_sha and ctx.repo.main_sha() == third.commit_sha
