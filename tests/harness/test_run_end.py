"""A run's end is an event of the ledger: ``kern status`` says how and when the loop stopped
(its ticks run, a budget, idle, interrupted), tells a live loop from one killed outright, and
outside a demo's repository points at the newest demo's ledger."""
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
from harness.cli.loop import interruption
from harness.cli.report import newest_demo
from harness.processes import acquire_loop_lock, loop_holder

from .test_loop_stops import light_repo
from .test_try_interrupt import as_in_a_terminal

ROOT = Path(__file__).resolve().parents[2]


def status(capsys, repo: Path) -> tuple[str, dict]:
    assert cli.main(["--repo", str(repo), "status"]) == 0
    text = capsys.readouterr().out
    assert cli.main(["--repo", str(repo), "status", "--json"]) == 0
    return text, json.loads(capsys.readouterr().out)


def test_a_loop_that_ran_its_ticks_says_so_with_the_time(tmp_path, capsys):
    repo = light_repo(tmp_path, {"loop.concurrency": 0, "loop.stop_after_idle_ticks": 5})
    assert cli.main(["--repo", str(repo), "loop", "--tick"]) == 0
    capsys.readouterr()
    text, d = status(capsys, repo)
    end = d["run"]["stopped"]
    assert end["how"] == L.RUN_TICKS and end["reason"] == "one tick (--tick)"
    assert f"stopped    {end['at']} · ticks reached: one tick (--tick)" in text
    assert cli.main(["--repo", str(repo), "loop", "--ticks", "2", "--every", "1s"]) == 0
    capsys.readouterr()
    text, d = status(capsys, repo)
    assert d["run"]["id"] == 2 and d["run"]["stopped"]["reason"] == "2 of --ticks 2"
    assert "run        #2 on " in text and f"to {d['run']['stopped']['at']}: 0 attempts" in text
    with L.Ledger(L.default_path(repo)) as led:
        assert [(e.run, e.how) for e in led.stops().values()] == [(1, L.RUN_TICKS), (2, L.RUN_TICKS)]


@pytest.mark.parametrize("sig, words", [(signal.SIGINT, "Ctrl-C (SIGINT)"),
                                        (signal.SIGTERM, "SIGTERM (exit 143)")])
def test_an_interrupted_loop_records_its_end(tmp_path, capsys, sig, words):
    """A real signal to a real ``kern loop`` waiting for its next tick."""
    repo = light_repo(tmp_path, {"loop.concurrency": 0, "loop.stop_after_idle_ticks": 5})
    log = tmp_path / "loop.log"
    with open(log, "w") as out:
        p = subprocess.Popen([sys.executable, "-m", "harness.cli", "--repo", str(repo), "loop",
                              "--every", "1h", "--no-live"], stdout=out, stderr=subprocess.STDOUT,
                             env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONFAULTHANDLER": "1"},
                             cwd=ROOT, preexec_fn=as_in_a_terminal)
    try:
        deadline = time.monotonic() + 600  # its first tick, on a loaded 2-core machine
        while "next tick in" not in log.read_text() and time.monotonic() < deadline:
            assert p.poll() is None, log.read_text()
            time.sleep(0.2)
        assert "next tick in" in log.read_text(), log.read_text()  # waiting, not ticking
        assert loop_holder(repo / "runs") == f"pid {p.pid} on {os.uname().nodename}"
        masks = [ln for ln in Path(f"/proc/{p.pid}/status").read_text().splitlines()
                 if ln.startswith(("SigBlk", "SigIgn", "SigCgt"))]
        p.send_signal(sig)
        try:
            code = p.wait(60)
        except subprocess.TimeoutExpired:  # where each of its threads is (faulthandler's dump)
            p.send_signal(signal.SIGABRT)
            p.wait(20)
            raise AssertionError(f"the loop outlived its signal by 60 s; its signal masks then: "
                                 f"{masks}; its log:\n{log.read_text()[-6000:]}") from None
        assert code in (130, 143)
    finally:
        if p.poll() is None:
            p.kill()
    text, d = status(capsys, repo)
    assert d["run"]["stopped"]["how"] == L.RUN_INTERRUPTED and d["run"]["stopped"]["reason"] == words
    assert f"· interrupted: {words}" in text and loop_holder(repo / "runs") is None


def test_a_run_without_an_end_is_live_while_a_loop_holds_the_lock_else_killed(tmp_path, capsys):
    repo = light_repo(tmp_path, {})
    with L.Ledger(L.default_path(repo)) as led:
        led.start_run("digest", "host-a")
    lock = acquire_loop_lock(repo / "runs")
    try:
        text, d = status(capsys, repo)
    finally:
        lock.close()
    assert d["run"]["stopped"] is None and d["run"]["running"] == f"pid {os.getpid()} on {os.uname().nodename}"
    assert f"running    the loop of pid {os.getpid()}" in text
    text, d = status(capsys, repo)
    assert d["run"]["running"] is None and "stopped    no end recorded" in text
    assert "killed outright" in text


def test_a_run_ends_once_and_only_in_known_ways(tmp_path):
    with L.Ledger(tmp_path / "l.sqlite", clock=lambda: "2026-12-04T10:00:00+00:00") as led:
        run = led.start_run("digest", "host-a")
        with pytest.raises(L.LedgerError, match="unknown end 'finished'; expected one of 'ticks reached'"):
            led.stop_run(run, "x", how="finished")
        led.stop_run(run, "cost budget spent", how=L.RUN_BUDGET)
        led.stop_run(run, "Ctrl-C (SIGINT)", how=L.RUN_INTERRUPTED)  # the first end stands
        assert led.stops() == {run: L.RunEnd(run, "2026-12-04T10:00:00+00:00", L.RUN_BUDGET,
                                              "cost budget spent")}


def test_interruption_words():
    assert interruption(KeyboardInterrupt()) == "Ctrl-C (SIGINT)"
    assert interruption(SystemExit(128 + signal.SIGTERM)) == "SIGTERM (exit 143)"
    assert interruption(SystemExit(2)) == "the process exited (2)"


def test_outside_a_demo_status_and_report_point_at_the_newest_demo(tmp_path, capsys, monkeypatch):
    assert newest_demo([], set()) is None
    assert newest_demo(["20261204-101010", "20261203-090000"], {"20261203-090000"}) == "20261203-090000"
    assert newest_demo(["20261204-101010", "20261203-090000"], set()) == "20261204-101010"
    repo = light_repo(tmp_path, {})
    for stamp in ("20261203-090000", "20261204-101010"):
        L.Ledger(L.default_path(repo / "runs" / "demo" / stamp)).close()
    (repo / "runs" / "demo" / "20261205-000000").mkdir()  # a demo stopped before its ledger
    monkeypatch.chdir(repo)
    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    assert "nothing has been tried in this repository yet" in out
    assert "the newest demo's ledger is in runs/demo/20261204-101010: kern --repo " \
           "runs/demo/20261204-101010 status" in out
    assert cli.main(["report"]) == 1
    assert "kern --repo runs/demo/20261204-101010 report" in capsys.readouterr().err
