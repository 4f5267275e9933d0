"""``kern show N`` through the CLI: a real attempt judged on the H200 (its ledger and judgment
file as kept in bench/), and an agent's attempt with the transcript the anthropic backend wrote
against a local Messages API."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from gates.summary import AccuracySummary, GateSummary
from harness import cli
from harness import ledger as L
from harness.agents.base import Brief
from harness.agents.registry import agent_settings, make_agent
from harness.cli.show import transcript_summary
from tests.harness.messages_api import MessagesAPI, Script
from tests.harness.test_agents import EDITABLE, PROTECTED, repo  # noqa: F401 - repo is a fixture

ROOT = Path(__file__).resolve().parents[2]
# attempt 4 of bench/journey/ledger.sqlite: kern try of the moe.experts rewrite on the H200
LEDGER = ROOT / "bench/journey/ledger.sqlite"
JUDGMENT = ROOT / "bench/results/2026-12-01-h200-kern-try-experts-judgment.json"
BASE, COMMIT = "80620185eef516f779e0ecefe7a359a6ba162faa", "c9c5684c042dfbafefc547c15c879283ede234a0"


def kern(capsys, *args) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def h200(tmp_path) -> Path:
    """This repository's history (shared, not copied) with the H200 run's ledger and judgment."""
    repo = tmp_path / "h200"
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(ROOT), str(repo)], check=True)
    (repo / "runs/attempts/4").mkdir(parents=True)
    shutil.copy(LEDGER, repo / "runs/ledger.sqlite")
    shutil.copy(JUDGMENT, repo / "runs/attempts/4/judgment-1.json")
    return repo


def test_show_a_judged_attempt_per_bucket(h200, capsys):
    code, out, err = kern(capsys, "--repo", h200, "show", 4)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == ("attempt    #4 merged: kernels: moe.experts streams MXFP4 weights straight into "
                        "the wgmma A operand, 3.1-3.2x faster")
    assert "backend manual · target - · phase 1 · judged on vm gpu0" in lines[1]
    assert "final 2026-12-01T19:00:54+00:00 (10 min 43 s)" in lines[2]
    assert f"commit     {COMMIT[:12]} on base {BASE[:12]}" in lines
    assert any("kernels/k31/moe/experts.py" in ln for ln in lines)
    assert any("2 files changed, 306 insertions(+), 137 deletions(-)" in ln for ln in lines)
    assert "accuracy   PASS within noise floor (460 s)" in lines
    # every bucket: both medians, B - A with its interval, B's share of its roofline floor
    judged = json.loads(JUDGMENT.read_text())["bench"]
    sides, per = judged["analysis"]["sides"], judged["analysis"]["ab"]["delta"]["buckets"]
    for b in judged["buckets"]:
        a, bb, d = sides["A"]["buckets"][str(b)]["median"], sides["B"]["buckets"][str(b)]["median"], per[str(b)]
        floor = judged["cost"][str(b)]["bytes"] / judged["bandwidth"]["Bps"] * 1e3
        interval, pct = f"[{d['low']:+.3f}, {d['high']:+.3f}]", f"{floor / bb * 100:.0f} %"
        row = f"{b:>5} {a:>9.3f} {bb:>9.3f} {d['delta']:>+9.3f}  {interval:<20} {pct:>8}"
        assert sum(ln.endswith(row) for ln in lines) == 1, (row, out)
    assert lines[lines.index(next(ln for ln in lines if ln.startswith("again")))].split()[1] == "rows"
    assert "           checks B: all passed" in lines
    assert any(ln.startswith("           score 192.584 → 80.269 ms: -112.255 ms (-58.3 %)") and "faster" in ln
               for ln in lines)
    assert lines[-1] == (f"hidden     input seed 1384936183, extra batch sizes 142, 172 (replay: kern test "
                         f"{COMMIT[:12]} --vs {BASE[:12]} --replay-attempt 4)")

    code, out, _ = kern(capsys, "--repo", h200, "show", 4, "--json")
    v = json.loads(out)
    assert code == 0 and v["bench"]["buckets"][0]["rows"] == 16
    assert v["bench"]["buckets"][0]["ci_ms"] == [per["16"]["low"], per["16"]["high"]]
    assert v["bench"]["reverify"]["classification"] == "faster" and v["hidden"]["input_seed"] == 1384936183
    code, out, _ = kern(capsys, "--repo", h200, "show", 4, "--diff")
    assert code == 0 and "diff --git a/kernels/k31/moe/experts.py b/kernels/k31/moe/experts.py" in out


def test_show_prints_where_the_judgments_time_went(h200, capsys):
    """Its phases: each gate's seconds, then per gate each part's. Attempt 4 was judged
    before phases were recorded: each side's wall shows as unmeasured, and the scorer's
    builds, captures and rounds as its report kept them (gates/rules/phases.py)."""
    code, out, err = kern(capsys, "--repo", h200, "show", 4)
    lines = out.splitlines()
    assert code == 0, err
    assert "phases     accuracy 460 s · scorer 111 s · re-measure 72 s (kept before phases were " \
           "recorded: each side's wall)" in lines
    assert "           accuracy   A record     unmeasured 122 s" in lines
    assert "                      A noise      unmeasured 264 s" in lines
    assert any(ln.startswith("           scorer     A            build ") for ln in lines), out
    assert any(ln.startswith("           re-measure ") for ln in lines), out
    code, out, _ = kern(capsys, "--repo", h200, "show", 4, "--json")
    ph = json.loads(out)["phases"]
    assert ph["recorded"] is False and ph["total_s"] is None and round(ph["accuracy_s"]) == 460
    assert ph["gates"]["accuracy"]["B replay"] == {"unmeasured": pytest.approx(70.773, abs=1e-3)}
    assert ph["beside"] == [] and ph["overlap_s"] is None  # its replay started after main recorded

    # a judgment that kept its phases (gates/rules/phases.py's form): shown as kept, total included
    doc = json.loads(JUDGMENT.read_text())
    doc["times"] = {"accuracy_s": 52.0, "scorer_s": 96.0, "remeasure_s": None, "total_s": 151.0,
                    "spans": [{"gate": "accuracy", "part": "A record", "phase": p, "seconds": s}
                              for p, s in (("start", 10.0), ("build", 12.0), ("compile", 40.0), ("tap", 28.0))]
                    + [{"gate": "scorer", "part": "coordinator", "phase": "rounds", "seconds": 80.0}]}
    (h200 / "runs/attempts/4/judgment-1.json").write_text(json.dumps(doc))
    code, out, _ = kern(capsys, "--repo", h200, "show", 4)
    lines = out.splitlines()
    assert "phases     accuracy 52 s · scorer 96 s · total 151 s" in lines
    assert "           accuracy   A record     start 10 s · build 12 s · compile 40 s · tap 28 s" in lines
    assert "           scorer     coordinator  rounds 80 s" in lines


def test_show_prints_what_ran_beside_main_recording(h200, capsys):
    """The candidate's replay starts beside main's record side: its start and build are off
    the accuracy gate's path (its phases still add up to its wall). ``kern show`` prints them
    under the gate's parts, when each side ran and how much of them main's recording covered;
    times kept before they carried it take it from the accuracy report."""
    doc = json.loads(JUDGMENT.read_text())
    path = [("A record", "start", 8.0), ("A record", "build", 12.0), ("A record", "tap", 25.0),
            ("B replay", "tap", 4.0), ("coordinator", "verdict", 0.5), ("coordinator", "other", 2.5)]
    doc["times"] = {"accuracy_s": 52.0, "scorer_s": 96.0, "remeasure_s": None, "total_s": 151.0,
                    "spans": [{"gate": "accuracy", "part": a, "phase": p, "seconds": x} for a, p, x in path]
                    + [{"gate": "scorer", "part": "rounds", "phase": "rounds", "seconds": 80.0}],
                    "beside": [{"gate": "accuracy", "part": "B replay", "of": "A record",
                                "spans": [{"gate": "accuracy", "part": "B replay", "phase": p, "seconds": x}
                                          for p, x in (("start", 7.0), ("build", 11.0))],
                                "started_s": 0.3, "released_s": 45.2, "of_started_s": 0.2, "of_done_s": 45.2}]}
    (h200 / "runs/attempts/4/judgment-1.json").write_text(json.dumps(doc))
    code, out, err = kern(capsys, "--repo", h200, "show", 4)
    lines = out.splitlines()
    assert code == 0, err
    at = lines.index("           accuracy   A record     start 8.0 s · build 12 s · tap 25 s")
    assert lines[at + 1:at + 6] == [
        "                      B replay     tap 4.0 s",
        "                      coordinator  verdict 0.5 s · other 2.5 s",
        "           beside     B replay     start 7.0 s · build 11 s (off the path: not in accuracy 52 s)",
        "                      timeline     A record 0.2 s → 45 s (done) · B replay 0.3 s → 45 s (released)",
        "                      overlap      18 s of main's recording overlapped the candidate's start · build; "
        "none after it"], out
    assert lines[at + 6] == "           scorer     rounds       rounds 80 s"
    code, out, _ = kern(capsys, "--repo", h200, "show", 4, "--json")
    ph = json.loads(out)["phases"]
    assert "beside" not in ph["gates"]["accuracy"] and ph["overlap_s"] == 18.0
    (b,) = ph["beside"]
    assert (b["part"], b["of"], b["phases"], b["seconds"], b["overlap_s"], b["after_s"]) == (
        "B replay", "A record", {"start": 7.0, "build": 11.0}, 18.0, 18.0, 0.0)
    assert sum(sum(p.values()) for p in ph["gates"]["accuracy"].values()) == ph["accuracy_s"]

    # kept before times carried it: from the accuracy report; its build ran past main's RECORDED
    del doc["times"]["beside"]
    doc["test"]["beside"] = [{"gate": "accuracy", "part": "B replay", "phase": p, "seconds": x}
                             for p, x in (("start", 4.0), ("build", 9.0))]
    doc["test"]["timeline"] = {"a_started": 0.2, "a_recorded": 10.0, "b_started": 0.3, "b_released": 13.3}
    (h200 / "runs/attempts/4/judgment-1.json").write_text(json.dumps(doc))
    code, out, _ = kern(capsys, "--repo", h200, "show", 4)
    lines = out.splitlines()
    assert "                      overlap      9.7 s of main's recording overlapped the candidate's start · " \
           "build; 3.3 s after it (on the path, in the coordinator's other)" in lines, out
    code, out, _ = kern(capsys, "--repo", h200, "show", 4, "--json")
    (b,) = json.loads(out)["phases"]["beside"]
    assert b["overlap_s"] == pytest.approx(9.7) and b["after_s"] == pytest.approx(3.3)


def test_show_falls_back_to_the_ledger_without_the_judgment_file(h200, capsys):
    (h200 / "runs/attempts/4/judgment-1.json").unlink()
    code, out, _ = kern(capsys, "--repo", h200, "show", 4)
    assert code == 0 and "scorer     -112.255 ms [-112.415, -112.093] (the ledger's summary; " \
                         "runs/attempts/4/judgment-*.json not found)" in out
    assert "              16 rows  A 80.411 ms  B 37.343 ms" in out


def test_show_an_agent_attempt_with_its_brief_and_transcript(repo, tmp_path, capsys):
    """The anthropic backend's own transcript of a session: four turns, a refused edit, a commit;
    the ledger row as the loop leaves it after the accuracy gate rejected the commit."""
    root = repo.parent.parent / "repo"
    old, new = '"moe.experts.block_m": (16, (16, 32, 64)),', '"moe.experts.block_m": (32, (16, 32, 64)),'
    session = Script([
        [{"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "kernels/k31/moe/tunables.py"}}],
        [{"type": "tool_use", "id": "t2", "name": "edit_file",
          "input": {"path": "kernels/k31/reference.py", "old": "1", "new": "2"}}],
        [{"type": "tool_use", "id": "t3", "name": "edit_file",
          "input": {"path": "kernels/k31/moe/tunables.py", "old": old, "new": new}}],
        [{"type": "tool_use", "id": "t4", "name": "finish", "input": {"kind": "commit", "message": "moe: block_m 32"}}],
    ], tools=("finish",), usage=lambda i: {"input_tokens": 1000, "output_tokens": 50})
    brief = Brief(attempt=1, target="moe.experts", text="BRIEF: make moe.experts faster\nline two",
                  editable=EDITABLE, protected=PROTECTED)
    led = L.Ledger(L.default_path(root))
    n = led.new_attempt(title="moe.experts: anthropic attempt", hypothesis="", target="moe.experts",
                        backend="anthropic", base_sha=subprocess.run(
                            ["git", "rev-parse", "main"], cwd=root, capture_output=True, text=True).stdout.strip(),
                        phase_id=None)
    d = root / "runs/attempts" / str(n)
    d.mkdir(parents=True)
    (d / "brief.md").write_text(brief.text)
    led.transition(n, L.RUNNING)
    with MessagesAPI(session) as api:
        p = make_agent(agent_settings({"backend": "anthropic", "model": "claude-sonnet-4-5", "max_retries": 0}),
                       api_key="k", base_url=api.url).propose(brief, repo)
    (d / "proposal.json").write_text(json.dumps(p.as_dict()))
    tip = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    led.update(n, tokens=p.tokens_in + p.tokens_out, cost_usd=p.cost_usd)
    led.transition(n, L.JUDGING, commit_sha=tip, title=p.message)
    led.transition(n, L.ABANDONED, reason=L.ACCURACY, gate=GateSummary(scope_problems=(), accuracy=AccuracySummary(
        "FAIL", ("moe.experts at 3 rows: rel RMS 0.4 > 0.01",))))
    led.close()

    code, out, err = kern(capsys, "--repo", root, "show", n)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"attempt    #{n} abandoned (accuracy): moe: block_m 32"
    assert f"agent      anthropic: 4 turns, 4 tool calls, tokens 4000 in / 200 out, cost $0.0150" in lines
    assert "           answered commit: moe: block_m 32" in lines
    calls = [ln.strip() for ln in lines if ln.strip()[:3] in ("1. ", "2. ", "3. ", "4. ")]
    assert calls == ["1. read_file kernels/k31/moe/tunables.py",
                     "2. edit_file kernels/k31/reference.py  (refused / error)",
                     "3. edit_file kernels/k31/moe/tunables.py", "4. finish commit"]
    assert f"           transcript {p.transcript}" in lines
    assert "accuracy   FAIL" in lines and "           - moe.experts at 3 rows: rel RMS 0.4 > 0.01" in lines
    assert any("kernels/k31/moe/tunables.py | 2 +-" in ln for ln in lines)
    assert lines[-2:] == ["           BRIEF: make moe.experts faster", "           line two"]
    v = json.loads(kern(capsys, "--repo", root, "show", n, "--json")[1])
    assert v["agent"]["turns"] == 4 and v["agent"]["cost_usd"] == pytest.approx(0.015)


def test_show_refuses_what_is_not_there(tmp_path, capsys):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    code, out, err = kern(capsys, "--repo", tmp_path, "show", 1)
    assert (code, out) == (2, "") and "no ledger at" in err and len(err.splitlines()) == 1
    assert not L.default_path(tmp_path).exists()
    L.Ledger(L.default_path(tmp_path)).close()
    code, out, err = kern(capsys, "--repo", tmp_path, "show", 7)
    assert (code, out) == (2, "") and err.startswith("kern show: attempt #7 is not in the ledger ")


def test_transcript_summary_reads_plain_text_as_lines():
    s = transcript_summary(["starting", "done"])
    assert (s["format"], s["turns"], s["tool_calls"], s["lines"]) == ("text", None, [], 2)
