"""Each judgment draws its own hidden inputs, the ledger records them with the decision, and
``kern test --replay-attempt N`` runs the gate on attempt N's again.

Pure: what a replay reads from an attempt's row, and the refusals that say who acts. Real
(slow): the same candidate judged twice through ``kern try``'s pipeline on the CPU, then
replayed through the CLI: the replay gets attempt 1's values and the verdict's evidence is
attempt 1's, field for field.
"""
from __future__ import annotations

import dataclasses
import json

import pytest

from gates import accuracy
from gates.protocol import Hidden
from gates.summary import GateSummary
from harness import cli
from harness import ledger as L
from harness.cli.judge import ReplayError, hidden_inputs, recorded_hidden
from harness.pipeline import Outcome, try_commit, with_hidden
from harness.settings import load
from tests.gates.candidates import ROOT, candidate, context, make_repo

WHERE = "runs/ledger.sqlite"


# --------------------------------------------------------------------------- pure
def test_a_replay_reads_the_recorded_values():
    a = L.Attempt(3, state="abandoned", reason="accuracy", hidden={"input_seed": 9, "extra_rows": [2, 5]})
    assert recorded_hidden(a, 3, WHERE, [6], [1]) == Hidden(9, (2, 5))


@pytest.mark.parametrize("attempt,buckets,words", [
    (None, [6], "attempt #3 is not in the ledger runs/ledger.sqlite; name an attempt that `kern status`"),
    (L.Attempt(3, state="abandoned", reason="scope"), [6],
     "attempt #3 (abandoned, scope) has no hidden inputs recorded: no gate ran on it"),
    (L.Attempt(3, state="judging"), [6], "attempt #3 (judging) has no hidden inputs recorded"),
    (L.Attempt(3, state="merged", hidden={"input_seed": 9, "extra_rows": [2, 5]}), [4],
     "attempt #3's extra batch size(s) 5 are not hidden sizes of this profile (1 .. 4, neither a "
     "bucket [4] nor a test row [1]): it was judged on another profile"),
    (L.Attempt(3, state="merged", hidden={"input_seed": "9"}), [6], "the ledger row was edited by hand"),
])
def test_a_replay_without_values_says_who_acts(attempt, buckets, words):
    with pytest.raises(ReplayError, match="^--replay-attempt 3: ") as e:
        recorded_hidden(attempt, 3, WHERE, buckets, [1])
    assert words in str(e.value)


def test_hand_runs_draw_afresh_and_the_decision_carries_the_values():
    class Args:
        replay_attempt = None

    cfg = load(ROOT / "kern.yaml").resolve(False)
    cfg = dataclasses.replace(cfg, test=dataclasses.replace(cfg.test, hidden_rows=2),
                              machine=dataclasses.replace(cfg.machine, buckets=(64,), weights=(1,),
                                                          test_rows=(1, 3)))
    (a, ra), (b, rb) = (hidden_inputs(Args, "/nonexistent", cfg) for _ in range(2))
    assert ra is rb is None and a != b and len(a.extra_rows) == 2
    out = Outcome("abandoned", "accuracy", {"gate": GateSummary(scope_problems=())})
    assert with_hidden(out, None) == out
    assert with_hidden(out, Hidden(4, (7,))).fields == {"gate": GateSummary(scope_problems=()),
                                                      "hidden": {"input_seed": 4, "extra_rows": [7]}}


# --------------------------------------------------------------------------- real
# one visible size and one bucket: 2..5 are left for the two hidden ones (6 pairs)
SETTINGS = {"profiles.cpu.test_rows": [1], "profiles.cpu.test_steps": 1, "profiles.cpu.buckets": [6],
            "profiles.cpu.weights": [1], "test.timeout_s": 600}
# values change at every size (KL, flips depend on the tokens and sizes), all finite
DROPPED_DECAY = [("kernels/k31/kda/core.py", "s = s * decay[:, None, :]", "s = s  # decay dropped")]


@pytest.mark.slow
def test_two_judgments_draw_apart_and_a_replay_reproduces_the_first(tmp_path, monkeypatch, capsys):
    repo = make_repo(tmp_path, SETTINGS)
    sha = candidate(repo, "dropped-decay", DROPPED_DECAY)
    ctx, _ = context(repo)
    seen = []
    real = accuracy.run_test

    def recording(req, progress=None):
        res = real(req, progress)
        seen.append(res.report)
        return res

    monkeypatch.setattr(accuracy, "run_test", recording)  # the pipeline's own call, kept
    (n1, out1), (n2, out2) = try_commit(ctx, sha), try_commit(ctx, sha)
    monkeypatch.undo()
    a1, a2 = ctx.ledger.attempt(n1), ctx.ledger.attempt(n2)
    assert (out1.state, out1.reason, seen[0]["verdict"]) == ("abandoned", "accuracy", "FAIL"), seen[0]["reasons"]
    assert [a1.hidden, a2.hidden] == [seen[0]["hidden"], seen[1]["hidden"]]
    assert a1.hidden["input_seed"] != a2.hidden["input_seed"]
    assert seen[0]["rows"] == [1, 6, *a1.hidden["extra_rows"]]
    # recorded with the decision, never before it (while judging they live in this process)
    events = ctx.ledger.events(n1)
    assert [e.kind for e in events if "hidden" in json.dumps(e.data)] == ["transition"]
    assert events[-1].data["to"] == "abandoned"

    out = tmp_path / "replay.json"
    rc = cli.main(["--repo", str(repo), "test", sha, "--vs", a1.base_sha, "--replay-attempt", str(n1),
                   "--json", "--out", str(out)])
    res = json.loads(out.read_text())
    assert rc == 1 and res["verdict"] == "FAIL"
    assert res["hidden"] == a1.hidden and res["replayed_from"] == n1 and res["rows"] == seen[0]["rows"]
    assert res["evidence"] == json.loads(json.dumps(seen[0]["evidence"], default=str))
    assert res["reasons"] == seen[0]["reasons"]

    # an attempt the gates never judged has nothing to replay; the user is told so
    n3 = ctx.ledger.new_attempt(title="idea", hypothesis="", target="", backend="manual",
                                base_sha=a1.base_sha, phase_id=None)
    capsys.readouterr()
    for n, words in ((n3, f"attempt #{n3} (queued) has no hidden inputs recorded"),
                     (99, "attempt #99 is not in the ledger")):
        assert cli.main(["--repo", str(repo), "test", sha, "--replay-attempt", str(n)]) == 2
        assert words in " ".join(capsys.readouterr().err.split())  # rich wraps the line
