"""Issue 38 item 1: ``kern try`` refuses what cannot be a change (a commit main holds, a commit
the ledger judged, unless ``--again``), a Ctrl-C or SIGTERM ends the attempt as
``interrupted`` (a real signal to a real ``kern try`` on the small config), ``kern cancel``
ends an attempt in flight, and a loop's resume never judges a dead kern try's attempt again.
The slow test starts real kern try processes; the rest run on a repository with kern.yaml only."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import cli
from harness import ledger as L
from harness.processes import acquire_loop_lock, started_at

from .test_bad_input import kern, untouched
from .test_loop_stops import light_repo, orchestrator

ROOT = Path(__file__).resolve().parents[2]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.parametrize("rev", ["HEAD", "main", "main~0"])
def test_a_commit_main_already_holds_is_refused_before_anything_is_written(rev, tmp_path, capsys):
    repo = light_repo(tmp_path, {})
    code, out, err = kern(capsys, "--repo", str(repo), "try", rev)
    sha = git(repo, "rev-parse", "HEAD")
    assert (code, out) == (2, "") and err == (
        f"kern try: {rev} ({sha[:12]}) is already on main: there is no change to judge against it. "
        f"Commit your change on a branch (git switch -c my-change; git commit -a), then kern try "
        f"my-change\n")
    assert untouched(repo)


def ledger_with(repo: Path, *rows: tuple[str, str, str]) -> None:
    """Attempts (backend, state, commit) in a fresh ledger of ``repo``."""
    with L.Ledger(L.default_path(repo)) as led:
        for n, (backend, state, sha) in enumerate(rows, 1):
            led.new_attempt(title=f"#{n}", hypothesis="", target="moe.experts", backend=backend,
                            base_sha=None, phase_id=None)
            if state == L.QUEUED:
                continue
            led.transition(n, L.JUDGING, commit_sha=sha)
            if state != L.JUDGING:
                led.transition(n, state, reason={L.ABANDONED: "accuracy", L.MERGED: None}.get(state, "x"))


def test_a_commit_the_ledger_judged_is_refused_unless_again_and_never_twice_at_once(tmp_path, capsys):
    repo = light_repo(tmp_path, {})
    git(repo, "switch", "-q", "-c", "change")
    (repo / "note.txt").write_text("a change\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a change")
    sha = git(repo, "rev-parse", "HEAD")
    ledger_with(repo, ("manual", L.ABANDONED, sha))
    before = L.default_path(repo).read_bytes()
    code, out, err = kern(capsys, "--repo", str(repo), "try", "change")
    assert (code, out) == (2, "") and err == (
        f"kern try: commit {sha[:12]} was judged already: attempt #1, abandoned (accuracy). `kern "
        f"show 1` shows it; `kern try {sha[:12]} --again` judges it again as a new attempt\n")
    with L.Ledger(L.default_path(repo)) as led:
        led.new_attempt(title="#2", hypothesis="", target="", backend="manual", base_sha=None,
                        phase_id=None)
        led.transition(2, L.JUDGING, commit_sha=sha)
    code, out, err = kern(capsys, "--repo", str(repo), "try", "change", "--again")
    assert code == 2 and err.startswith(f"kern try: commit {sha[:12]} is being judged now as "
                                        f"attempt #2 (judging since ")
    assert "`kern cancel 2` first" in err
    with L.Ledger(L.default_path(repo), readonly=True) as led:
        assert len(led.attempts()) == 2  # no row for a refusal
    assert before  # (the first refusal wrote nothing either: checked through the row count)


def test_cancel_ends_an_attempt_in_flight_and_refuses_what_it_cannot_end(tmp_path, capsys):
    repo = light_repo(tmp_path, {})
    ledger_with(repo, ("tuner", L.QUEUED, ""), ("manual", L.JUDGING, "c" * 40),
                ("tuner", L.MERGED, "d" * 40), ("tuner", L.JUDGING, "e" * 40))
    code, out, _ = kern(capsys, "--repo", str(repo), "cancel", "1", "--reason", "wrong target")
    assert code == 0 and out == "attempt #1: interrupted (cancelled: wrong target; it was queued)\n"
    # a kern try's attempt whose process is gone (no judge.pid, backend manual)
    code, out, _ = kern(capsys, "--repo", str(repo), "cancel", "2")
    assert code == 0 and "cancelled: no reason given; it was judging" in out
    code, out, err = kern(capsys, "--repo", str(repo), "cancel", "3")
    assert (code, out) == (2, "") and err == "kern cancel: attempt #3 is already merged: nothing to cancel\n"
    code, _, err = kern(capsys, "--repo", str(repo), "cancel", "9")
    assert code == 2 and "attempt #9 is not in the ledger" in err
    lock = acquire_loop_lock(repo / "runs")  # a loop runs: its attempt is its own
    try:
        code, out, err = kern(capsys, "--repo", str(repo), "cancel", "4")
    finally:
        lock.close()
    assert (code, out) == (2, "") and err.startswith(
        f"kern cancel: attempt #4 (judging) belongs to the kern loop that runs on this repository "
        f"(pid {os.getpid()} on ")
    code, out, _ = kern(capsys, "--repo", str(repo), "cancel", "4", "--reason", "stale")
    assert code == 0
    with L.Ledger(L.default_path(repo), readonly=True) as led:
        states = {a.number: (a.state, a.reason) for a in led.attempts()}
    assert states == {1: ("interrupted", "cancelled: wrong target"),
                      2: ("interrupted", "cancelled: no reason given"), 3: ("merged", None),
                      4: ("interrupted", "cancelled: stale")}


def test_a_loops_resume_records_a_dead_kern_trys_attempt_as_interrupted_and_leaves_a_live_one(tmp_path):
    repo = light_repo(tmp_path, {})
    ledger_with(repo, ("manual", L.JUDGING, "a" * 40), ("manual", L.JUDGING, "b" * 40),
                ("tuner", L.JUDGING, "c" * 40))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for n, pid in ((1, dead.pid), (2, os.getpid())):
        d = repo / "runs" / "attempts" / str(n)
        d.mkdir(parents=True)
        (d / "judge.pid").write_text(f"{pid} {os.uname().nodename} {started_at(pid)}\n")
    orch = orchestrator(repo)
    done = orch.resume()
    assert (done.interrupted, done.requeued) == ([1], [3])
    a = {x.number: x for x in orch.led.attempts()}
    assert a[1].state == "interrupted" and f"kern try {'a' * 12} --again" in a[1].reason
    assert a[2].state == "judging"  # its kern try still runs (this test's process)
    assert a[3].state == "queued"  # the loop's own: judged again, as before


def test_status_report_show_and_the_live_view_know_interrupted(tmp_path, capsys):
    from harness.journey import result
    from harness.progress import live_rows

    repo = light_repo(tmp_path, {})
    ledger_with(repo, ("manual", L.JUDGING, "a" * 40))
    with L.Ledger(L.default_path(repo)) as led:
        led.transition(1, L.INTERRUPTED, reason="SIGINT (Ctrl-C) to kern try while judging")
        a = led.attempt(1)
    assert kern(capsys, "--repo", str(repo), "status")[1].splitlines()[2] == "attempts   1: interrupted 1"
    code, out, _ = kern(capsys, "--repo", str(repo), "report")
    assert code == 0 and "interrupted (SIGINT (Ctrl-C) to kern try while judging)" in out
    code, out, _ = kern(capsys, "--repo", str(repo), "show", "1")
    assert out.startswith("attempt    #1 interrupted (SIGINT (Ctrl-C) to kern try while judging): #1")
    row = live_rows([a], None, time.time(), result)[0]
    assert row[2] == "interrupted" and row[5].startswith("interrupted (SIGINT")
    code, out, _ = kern(capsys, "--repo", str(repo), "report", "--format", "html")
    assert 'data-kind="interrupted"' in out


# ---- the real thing: a kern try on the small config, stopped by a signal ----------------------
def start_try(repo: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"}
    return subprocess.Popen([sys.executable, "-m", "harness.cli", "--repo", str(repo), "try", *args],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=as_in_a_terminal)


def as_in_a_terminal() -> None:
    """In the child before exec: Ctrl-C's default action, as a terminal's foreground job has it
    (a test run started in the background of a script inherits SIGINT ignored, and Python then
    leaves it ignored: the signal would test nothing)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for_a_gate(repo: Path, proc: subprocess.Popen, number: int, limit_s: float = 300) -> None:
    """Until attempt ``number`` is judging and its first gate's side processes have started."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        path = L.default_path(repo)
        if path.exists() and (repo / "runs" / "tap").is_dir():
            with L.Ledger(path, readonly=True) as led:
                if any(a.number == number and a.state == L.JUDGING for a in led.attempts()):
                    time.sleep(2)  # the sides are importing the tree
                    return
        time.sleep(0.5)
    raise AssertionError("kern try never reached its accuracy gate")


def sides_of(repo: Path) -> list[int]:
    """Processes whose command line names ``repo`` (the gates' sides run in its worktrees)."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if str(repo).encode() in (d / "cmdline").read_bytes():
                    found.append(int(d.name))
            except OSError:
                pass
    return found


@pytest.mark.slow
def test_ctrl_c_and_kern_cancel_end_a_real_kern_try_as_interrupted(tmp_path, capsys):
    from tests.gates.candidates import candidate, make_repo
    from tests.harness.loop_replay import LIGHT, SITU

    repo = make_repo(tmp_path, dict(LIGHT))
    sha = candidate(repo, "change", [(SITU, "\n", "\n# a comment: nothing to measure\n")])
    proc = start_try(repo, "change")
    wait_for_a_gate(repo, proc, 1)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)  # what Ctrl-C in a terminal sends kern's process group
    _, err = proc.communicate(timeout=60)
    took = time.monotonic() - t0
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert took < 5, f"Ctrl-C took {took:.1f} s"
    assert (f"kern try: attempt #1 interrupted: SIGINT (Ctrl-C) to kern try while judging; "
            f"`kern try {sha[:12]} --again` judges it again\nkern: interrupted\n") in err
    assert not sides_of(repo), ["a side process outlived its kern try"] + [Path(f"/proc/{p}/cmdline").read_bytes()[:300] for p in sides_of(repo)]
    with L.Ledger(L.default_path(repo), readonly=True) as led:
        (a,) = led.attempts()
    assert (a.state, a.commit_sha) == ("interrupted", sha) and a.finished_at
    status = json.loads(kern(capsys, "--repo", str(repo), "status", "--json")[1])
    assert status["by_state"] == {"interrupted": 1} and status["in_flight"] == []
    code, _, err = kern(capsys, "--repo", str(repo), "try", "change")
    assert code == 2 and "was judged already: attempt #1, interrupted" in err

    proc = start_try(repo, "change", "--again")
    wait_for_a_gate(repo, proc, 2)
    code, out, _ = kern(capsys, "--repo", str(repo), "cancel", "2", "--reason", "wrong base")
    _, err = proc.communicate(timeout=60)
    assert code == 0 and out == (f"attempt #2: interrupted (cancelled: wrong base; `kern try "
                                 f"{sha[:12]} --again` judges it again)\n")
    assert proc.returncode == 128 + signal.SIGTERM and "Traceback" not in err, err
    assert not sides_of(repo)


def test_status_names_an_attempts_target_once(tmp_path, capsys):
    repo = light_repo(tmp_path, {})
    with L.Ledger(L.default_path(repo)) as led:
        led.new_attempt(title="moe.combine: one pass over the experts", hypothesis="",
                        target="moe.combine", backend="tuner", base_sha=None, phase_id=None)
    code, out, _ = kern(capsys, "--repo", str(repo), "status")
    line = next(ln for ln in out.splitlines() if ln.startswith("in flight"))
    assert code == 0 and "#1 queued   moe.combine: one pass over the experts (since " in line
    assert "moe.combine: moe.combine" not in out


@pytest.mark.parametrize("argv,code", [(["try", "nosuchrev"], 2), (["try", "HEAD"], 2),
                                       (["loop", "--tick"], 3)])
def test_a_bad_revision_or_a_held_lock_answers_before_torch_is_imported(argv, code, tmp_path):
    """torch takes seconds to import: a refusal must not wait for it."""
    repo = light_repo(tmp_path, {})
    lock = acquire_loop_lock(repo / "runs")  # held by this process: the loop must refuse
    try:
        r = subprocess.run([sys.executable, "-c", "import sys; from harness import cli; "
                            f"rc = cli.main({['--repo', str(repo), *argv]!r}); "
                            "print(rc, 'torch' in sys.modules)"],
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    finally:
        lock.close()
    assert r.stdout == f"{code} False\n", r.stderr
