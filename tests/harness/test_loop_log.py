"""``kern loop``'s log and live view a person reads after a week: every line it writes starts
with the time; the live view counts down to the next tick and shows the budgets spent and what
is being judged, for how long."""
from __future__ import annotations

import re
import time
from datetime import datetime, timedelta, timezone

from rich.console import Console

from harness import cli
from harness import ledger as L
from harness.cli.loop import _LiveView, live_caption, stamped
from harness.settings import Budgets

from .test_loop_stops import finish, light_repo, orchestrator, working_agent

ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d ")


def test_a_stamp_is_the_iso_time_then_the_line():
    now = datetime(2026, 12, 3, 18, 4, 5, 678, tzinfo=timezone(timedelta(hours=1)))
    assert stamped("tick 1: 0 collected", now) == "2026-12-03T18:04:05+01:00 tick 1: 0 collected"


def test_every_line_of_a_piped_loop_starts_with_its_time(tmp_path, capsys):
    repo = light_repo(tmp_path, {"loop.concurrency": 0, "loop.stop_after_idle_ticks": 2})
    assert cli.main(["--repo", str(repo), "loop", "--tick"]) == 0
    out = capsys.readouterr()
    lines = (out.out + out.err).splitlines()
    assert lines and all(ISO.match(ln) for ln in lines), lines
    assert any(ln.endswith(" tick 1: 0 collected, 0 started, 0 in flight") for ln in lines), lines
    assert cli.main(["--repo", str(repo), "loop", "--ticks", "3", "--every", "1s"]) == 0
    out = capsys.readouterr()
    lines = (out.out + out.err).splitlines()
    assert all(ISO.match(ln) for ln in lines), lines
    assert [ln[ln.index(" ") + 1:] for ln in lines if " tick " in ln or "stopping" in ln] == [
        "tick 1: 0 collected, 0 started, 0 in flight; next tick in 1s",
        "stopping: agents reported nothing left for 2 ticks"]


def test_the_live_caption_counts_down_and_shows_budgets_and_what_is_judged():
    b = Budgets(attempts=50, tokens=2_000_000, wall_hours=72, cost_usd=50.0)
    use = {"attempts": 7, "tokens": 123_456, "cost_usd": 3.456}
    judging = [("7", "moe.experts", "judging", "scorer · A B B A round 2 of 3", "3m05s", "")]
    assert live_caption(81.25, use, b, 2.5, 605.4, judging) == [
        "main score: 81.250 ms · next tick in 10m05s",
        "budgets: attempts 7 / 50 · tokens 123456 / 2000000 · cost $3.46 / $50.00 · wall 2.5 / 72 h",
        "judging #7 moe.experts: scorer · A B B A round 2 of 3 for 3m05s"]
    assert live_caption(None, use, b, 0.0, None, [])[0] == "main score: not measured yet · tick running"


def test_the_live_view_renders_them(tmp_path):
    repo = light_repo(tmp_path, {"budgets.cost_usd": 10.0})
    orch = orchestrator(repo)
    n, proc = working_agent(orch)
    try:
        orch.led.update(n, tokens=500, cost_usd=1.25)
        view = _LiveView(orch.ctx, [], time.monotonic() - 1800)
        view.next_tick = time.monotonic() + 125
        console = Console(record=True, width=140)
        console.print(view)
        text = console.export_text()
    finally:
        finish(orch, n, proc, cost=0.0)
    assert "next tick in 2m0" in text and "agent at work" in text
    assert "budgets: attempts 1 / 50 · tokens 500 / 2000000 · cost $1.25 / $10.00 · wall 0.5 / 72 h" in text
