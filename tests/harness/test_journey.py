"""The journey: result strings, the golden Markdown, CSV/JSON, the self-contained HTML page."""
from __future__ import annotations

import base64
import csv
import io
import json
import os
import re
from pathlib import Path

import pytest

from gates.results import BucketTimes, BucketView, ScorerView
from gates.summary import GateSummary
from harness import journey
from harness.ledger import Attempt, Phase, Score

from . import sample

GOLDEN = Path(__file__).parent / "golden" / "journey.md"


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    led = sample.build(tmp_path_factory.mktemp("ledger") / "ledger.sqlite")
    out = led.attempts(), led.phases(), led.scores()
    led.close()
    return out


M = "\u2212"  # the result column's minus
G = GateSummary.from_dict  # a gate as the ledger's column holds it (JSON)


@pytest.mark.parametrize("attempt, change, result", [
    (Attempt(1, "a", state="merged", delta_ms=-0.35), "-0.35", f"merged ({M}0.35)"),
    (Attempt(1, "a", state="merged", delta_ms=-0.35, ci_low=-0.41, ci_high=-0.29), "-0.35",
     f"merged ({M}0.35 [{M}0.41, {M}0.29])"),
    (Attempt(2, "a", state="abandoned", reason="slower", delta_ms=0.21), "+0.21",
     "abandoned: slower (+0.21)"),
    (Attempt(2, "a", state="abandoned", reason="slower", delta_ms=0.21, ci_low=0.15, ci_high=0.27),
     "+0.21", "abandoned: slower (+0.21 [+0.15, +0.27])"),
    # the case: a −22 % change called within noise shows the interval that decided it
    (Attempt(4, "a", state="abandoned", reason="within noise", delta_ms=-417.69, ci_low=-900.1,
             ci_high=60.3), "-417.69", f"abandoned: within noise ({M}417.69 [{M}900.10, +60.30])"),
    (Attempt(4, "a", state="abandoned", reason="within noise", delta_ms=-417.69, ci_low=-500.0,
             ci_high=-300.0, gate=G({"bench": {"classification": "within noise", "band_ms": 512.3}})),
     "-417.69", f"abandoned: within noise ({M}417.69 [{M}500.00, {M}300.00], band ±512.30)"),
    (Attempt(4, "a", state="abandoned", reason="within noise", delta_ms=-0.02), "-0.02",
     f"abandoned: within noise ({M}0.02)"),
    (Attempt(3, "a", state="abandoned", reason="accuracy",
             gate=G({"accuracy": {"verdict": "FAIL", "tag": "kl"}})), "", "abandoned: accuracy (FAIL kl)"),
    (Attempt(3, "a", state="abandoned", reason="accuracy",
             gate=G({"accuracy": {"verdict": "FAIL", "reasons": ["3 confident argmax flip(s)"]}})), "",
     "abandoned: accuracy (FAIL: 3 confident argmax flip(s))"),
    (Attempt(3, "a", state="abandoned", reason="accuracy",
             gate=G({"accuracy": {"verdict": "FAIL", "reasons": [
                 "KL(A||B) max 0.031 > limit 0.01 (max of kl_fail and 4 x the reference band)",
                 "reference tolerance exceeded: moe.experts.y", "x"]}})), "",
     "abandoned: accuracy (FAIL: KL(A||B) max 0.031 > limit 0.01 (max of kl_fail and 4 x the "
     "reference band) (+2 more))"),
    (Attempt(3, "a", state="abandoned", reason="accuracy",
             gate=G({"accuracy": {"verdict": "FAIL", "reasons": ["w" * 150]}})), "",
     "abandoned: accuracy (FAIL: " + "w" * 99 + "…)"),
    (Attempt(9, "a", state="timed out", reason="accuracy gate timeout: the H200 command's 540 s "
             "limit stopped kern try inside the accuracy gate (pinned and band passes)"), "",
     "timed out (accuracy gate timeout: the H200 command's 540 s limit stopped kern try inside "
     "the accuracy gate…)"),
    (Attempt(3, "a", state="abandoned", reason="accuracy", gate=G({"accuracy": {"verdict": "INCONCLUSIVE"}})),
     "", "abandoned: accuracy (INCONCLUSIVE)"),
    (Attempt(5, "a", state="abandoned", reason="guard", delta_ms=-0.1,
             gate=G({"guard": {"worst_pct": 2.4, "rows": 16}})), "-0.10", "abandoned: guard (+2.4 % at 16 rows)"),
    (Attempt(5, "a", state="abandoned", reason="scorer check",
             gate=G({"bench": {"checks": [{"check": "roofline_floor", "why": "16 rows below the floor"},
                                        {"check": "hidden_time"}], "graph_matches_eager": True}})),
     "", "abandoned: scorer check (roofline_floor: 16 rows below the floor (+1 more))"),
    (Attempt(5, "a", state="abandoned", reason="scorer check",
             gate=G({"bench": {"checks": [], "graph_matches_eager": False}})),
     "", "abandoned: scorer check (the CUDA graph's outputs differ from eager)"),
    (Attempt(5, "a", state="abandoned", reason="scorer check",
             gate=G({"bench": {"outcome": "tampered", "error": "fd 0 swapped"}})),
     "", "abandoned: scorer check (tampered: fd 0 swapped)"),
    (Attempt(6, "a", state="abandoned", reason="scope"), "", "abandoned: scope"),
    (Attempt(6, "a", state="abandoned", reason="scope", gate=G({"detail": "2 commits"})), "",
     "abandoned: scope (2 commits)"),
    (Attempt(7, "a", state="abandoned", reason="conflict"), "", "abandoned: conflict"),
    (Attempt(8, "a", state="crashed", reason="illegal memory access"), "",
     "crashed (illegal memory access)"),
    (Attempt(8, "a", state="crashed"), "", "crashed"),
    (Attempt(9, "a", state="timed out", reason="scorer timeout"), "", "timed out (scorer timeout)"),
    (Attempt(9, "a", state="timed out"), "", "timed out"),
    (Attempt(10, "a", state="not done", estimate_ms=-0.4), "", "not done: estimated −0.4"),
    (Attempt(10, "a", state="not done", estimate_ms=-0.035), "", "not done: estimated −0.035"),
    (Attempt(10, "a", state="not done", estimate_ms=-1.25), "", "not done: estimated −1.2"),
    (Attempt(10, "a", state="not done"), "", "not done"),
    (Attempt(11, "a", state="waiting", waiting_on=31), "", "waiting on #31"),
    (Attempt(12, "a", state="running"), "", "running"),
    (Attempt(13, "a", state="queued"), "", "queued"),
    (Attempt(14, "a", state="judging"), "", "judging"),
    (Attempt(14, "a", state="cancelled", reason="wrong target"), "", "cancelled (wrong target)"),
    (Attempt(14, "a", state="interrupted"), "", "interrupted"),
    (Attempt(15, "a", state="merged", delta_ms=-0.004), "-0.004", f"merged ({M}0.004)"),
])
def test_result_strings(attempt, change, result):
    assert (journey.change(attempt), journey.result(attempt)) == (change, result)
    if not journey.tried_nothing(attempt):
        (row,) = journey.rows([attempt])
        assert (row.number, row.title, row.change, row.result) == (attempt.number, "a", change, result)


def test_accuracy_tags_follow_the_gate_reasons():
    assert journey.accuracy_tag(["KL(A||B) max 0.031 > limit 0.01"]) == "kl"
    assert journey.accuracy_tag(["candidate side ended: crash"]) == "crash"
    assert journey.accuracy_tag(["2 logits rows with NaN/Inf"]) == "nan"
    assert journey.accuracy_tag(["protected files changed: x", "KL …"]) == "protected"
    assert journey.accuracy_tag([]) == ""


def test_markdown_matches_golden(records):
    text = journey.markdown(records[0], records[1], lang="en", scores=records[2])
    if os.environ.get("KERN_UPDATE_GOLDEN"):
        GOLDEN.write_text(text, encoding="utf-8")
    assert text == GOLDEN.read_text(encoding="utf-8"), \
        "the journey changed; if intended, rerun with KERN_UPDATE_GOLDEN=1 and review the diff"


def test_markdown_structure_and_zh(records):
    attempts, phases, scores = records
    en = journey.markdown(attempts, phases, scores=scores)
    assert en.count("| # | attempt | score change (ms) | result |") == 2
    assert en.count("not comparable with other phases") == 2
    assert ("2 merged of 11 attempts · gain 0.84 ms (the merged rows' score changes, summed) · "
            "main 41.200 → 40.360 ms (−0.840 ms, main's own scores)") in en
    assert en.count("How a score change is measured: per bucket, B − A is A's median × (B/A − 1)") == 1
    zh = journey.markdown(attempts, phases, lang="zh", scores=scores)
    assert zh.startswith("# 优化历程\n")
    assert zh.count("| # | 尝试 | 分数变化 (ms) | 结果 |") == 2
    assert "## 阶段 1 · " in zh and "本阶段的分数与其他阶段不可比" in zh
    assert "已合并 2 / 共 11 次尝试 · 收益 0.84 ms" in zh
    with pytest.raises(ValueError, match="expected one of en, zh"):
        journey.markdown(attempts, phases, lang="fr")


def test_markdown_of_nothing():
    assert journey.markdown([], []) == "# Journey\n\nNo attempts yet.\n"
    assert "尚无尝试" in journey.markdown([], [], lang="zh")


def test_phases_as_mapping_and_unknown_phase():
    atts = [Attempt(1, "x", state="merged", delta_ms=-1.0, phase_id=1),
            Attempt(2, "y", state="running", phase_id=None)]
    md = journey.markdown(atts, {1: {"context": 4}})
    assert "## Phase 1 · context 4" in md and "## no phase recorded" in md


def test_csv_and_json(records):
    attempts, phases, scores = records
    rows = list(csv.reader(io.StringIO(journey.csv_text(attempts, phases))))
    assert rows[0][:5] == ["phase", "#", "attempt", "score change (ms)", "result"]
    assert rows[2][:5] == ["1", "2", "MLA decode: BLOCK_N 128", "+0.21",
                       "abandoned: slower (+0.21 [+0.15, +0.27])"]
    assert len(rows) == 1 + len(attempts)
    assert list(csv.reader(io.StringIO(journey.csv_text(attempts, phases, "zh"))))[0][:5] == \
        ["阶段", "#", "尝试", "分数变化 (ms)", "结果"]
    obj = json.loads(json.dumps(journey.json_obj(attempts, phases, scores)))
    assert [p["phase"] for p in obj["phases"]] == [1, 2]
    p1 = obj["phases"][0]
    assert p1["merged"] == 2 and p1["gain_ms"] == 0.84 and p1["comparable_across_phases"] is False
    row = p1["rows"][0]
    assert {k: row[k] for k in ("#", "attempt", "score_change_ms", "result", "state", "reason",
                                "ci_ms", "estimate_ms", "waiting_on", "commit_sha", "target",
                                "backend", "tokens", "cost_usd", "commands")} == {
        "#": 1, "attempt": "MoE experts: split-K over 2 CTAs", "score_change_ms": -0.35,
        "result": "merged (−0.35 [−0.41, −0.29])", "state": "merged", "reason": None,
        "ci_ms": [-0.41, -0.29], "estimate_ms": None, "waiting_on": None,
        "commit_sha": "c000000000001", "target": "moe.experts", "backend": "tuner",
        "tokens": 1000, "cost_usd": 0.01, "commands": {"show": "kern show 1", "replay": []}}
    assert (row["created_at"], row["finished_at"], row["wall_s"]) == ("2026-01-10T08:05:00+00:00", "2026-01-10T08:09:00+00:00", 240.0)
    assert obj["estimator"].startswith("How a score change is measured")
    assert len(obj["scores"]) == 5


def test_html_is_self_contained_with_its_plot_and_tables(records):
    attempts, phases, scores = records
    page = journey.html(attempts, phases, scores, lang="en")
    assert page.startswith("<!DOCTYPE html>") and '<html lang="en">' in page
    assert "<style>" in page and page.count('<table class="journey">') == 2
    assert page.count('<svg class="plot"') == 2 and page.count('class="main-line"') == 2
    assert "abandoned: guard (+2.4 % at 16 rows)" in page and "residual: fuse norm | add" in page
    # every journey row, with its detail row, its commit and its kind for the filter
    assert page.count('<tr class="row ') == 15 and page.count('<tr class="detail"') == 15
    assert '<code>c000000000</code>' in page and 'data-kind="accuracy"' in page
    # nothing fetched from anywhere: no URLs, no external scripts, styles, fonts or images
    assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/|<link|<script[^>]*src|@import|url\(",
                         page, re.I)
    assert not re.findall(r'(?:src|href)="(?!#)[^"]*"', page)
    assert journey.html(attempts, phases, scores) == page  # reproducible bytes


def _attempts_of_every_kind(title="data"):
    """One attempt of each result, recorded text set to ``title`` (so a page can be searched
    for the journey's own words alone)."""
    g = G({"accuracy": {"verdict": title, "reasons": [title]}})
    return [
        Attempt(1, title, state="merged", delta_ms=-1.0, ci_low=-1.2, ci_high=-0.8, phase_id=1,
                commit_sha="a" * 40, base_sha="b" * 40, target=title, backend=title, tokens=10,
                cost_usd=0.1, created_at="2026-01-10T08:00:00+00:00",
                finished_at="2026-01-10T09:04:12+00:00"),
        Attempt(2, title, state="abandoned", reason="slower", delta_ms=0.5, ci_low=0.4, ci_high=0.6,
                phase_id=1, gate=G({"bench": {"band_ms": 0.2}}), created_at="2026-01-10T08:00:00+00:00",
                finished_at="2026-01-10T08:04:12+00:00"),
        Attempt(3, title, state="abandoned", reason="within noise", delta_ms=0.1, ci_low=-0.1,
                ci_high=0.3, phase_id=1),
        Attempt(4, title, state="abandoned", reason="accuracy", gate=g, phase_id=1),
        Attempt(5, title, state="abandoned", reason="guard", delta_ms=-0.1,
                gate=G({"guard": {"worst_pct": 2.4, "rows": 16}}), phase_id=1),
        Attempt(6, title, state="abandoned", reason="scorer check",
                gate=G({"bench": {"checks": [], "graph_matches_eager": False}}), phase_id=1),
        Attempt(7, title, state="abandoned", reason="scope", phase_id=1),
        Attempt(8, title, state="crashed", reason=title, phase_id=1),
        Attempt(9, title, state="timed out", reason=title, phase_id=1),
        Attempt(10, title, state="not done", estimate_ms=-0.4, phase_id=1),
        Attempt(11, title, state="waiting", waiting_on=12, phase_id=1),
        Attempt(12, title, state="running", phase_id=1),
        Attempt(13, title, state="not done", estimate_ms=0, phase_id=1),
    ]


def test_zh_covers_every_string_of_page_and_table():
    """Every key English has, Chinese has; and a Chinese page of every kind of result, whose
    recorded text is Chinese too, holds no English word of the journey's own."""
    def keys(d, pre=""):
        return {pre + k for k in d} | {x for k, v in d.items() if isinstance(v, dict)
                                       for x in keys(v, pre + k + ".")}
    assert keys(journey.TEXT["zh"]) == keys(journey.TEXT["en"])
    atts = _attempts_of_every_kind("数据")
    phases = [Phase(1, {}, "", "")]
    scores = [Score(1, 1, "b" * 40, 10.0, None, "x")]
    files = {1: journey.AttemptFiles(brief="数据", diff="diff --git a/x b/x\n+数据\n-数据\n"),
             2: journey.AttemptFiles(diff_missing="数据")}
    page = journey.html(atts, phases, scores, lang="zh", files=files)
    # recorded text: the diff and brief (in <pre>), commits (hex), paths of files on disk
    # code (commands, the estimator's names of files and keys) is not the journey's words
    visible = re.sub(r"<style>.*?</style>|<script>.*?</script>|<pre.*?</pre>|<code>.*?</code>", "",
                     page, flags=re.S)
    visible = re.sub(r"runs/attempts/\d+/[\w.*-]+|\b[0-9a-f]{10,40}\b", "", visible)
    visible = re.sub(r'<[^>]*?(?:title|aria-label)="([^"]*)"[^>]*>', r" \1 ", visible)
    visible = re.sub(r"<[^>]+>", " ", visible)
    words = set(re.findall(r"[A-Za-z]{3,}", visible))
    assert words <= {"USD", "CUDA"}, sorted(words)
    md = journey.markdown(atts, phases, lang="zh", scores=scores)
    assert set(re.findall(r"[A-Za-z]{3,}", re.sub(r"`[^`]*`", "", md))) <= {"CUDA"}, md
    assert "已放弃：精度" in md and "未做：估计 −0.4" in md and "等待 #12" in md


def test_an_attempt_that_tried_nothing_is_no_row():
    """The loop's rule: declined with no estimated gain (the tuner's 'nothing left to tune')
    is left out of every rendering, and the phase says which it left out."""
    atts = _attempts_of_every_kind()
    assert [a.number for a in atts if journey.tried_nothing(a)] == [13]
    assert not journey.tried_nothing(Attempt(1, state="not done", estimate_ms=-0.4))
    assert journey.tried_nothing(Attempt(1, state="not done"))
    assert 13 not in [r.number for r in journey.rows(atts)] and len(journey.rows(atts)) == 12
    md = journey.markdown(atts, [Phase(1, {}, "", "")])
    assert "| 13 |" not in md and "of 12 attempts" in md
    assert "Not shown: 1 attempt(s) that tried nothing (declined with no estimated gain): #13." in md
    assert len(list(csv.reader(io.StringIO(journey.csv_text(atts))))) == 1 + 12
    obj = journey.json_obj(atts)
    assert obj["phases"][0]["tried_nothing"] == [13] and len(obj["phases"][0]["rows"]) == 12
    (pan,) = journey.plot_panels(atts, [Phase(1, {}, "", "")])
    assert [p.number for p in pan.points] == list(range(1, 13))
    page = journey.html(atts, [Phase(1, {}, "", "")])
    assert 'id="a-13"' not in page and "#13." in page


def test_page_detail_of_a_judged_attempt():
    """A row's detail: per-bucket medians, change, interval and % of floor from the judgment's
    file; the brief; the diff with its numbers; a missing diff says why."""
    judgment = {"bench": {
        "buckets": [16, 32], "bandwidth": {"Bps": 2e12},
        "cost": {"16": {"bytes": 2e10}, "32": {"bytes": 4e10}},
        "analysis": {"sides": {"A": {"score": 30.0, "buckets": {"16": {"median": 20.0}, "32": {"median": 40.0}}},
                               "B": {"score": 25.0, "buckets": {"16": {"median": 16.0}, "32": {"median": 34.0}}}},
                     "ab": {"delta": {"buckets": {"16": {"delta": -4.0, "low": -4.5, "high": -3.5},
                                                  "32": {"delta": -6.0, "low": -6.2, "high": -5.8}}}}}}}
    a = Attempt(4, "fast path", state="merged", delta_ms=-5.0, ci_low=-5.3, ci_high=-4.7,
                delta_pct=-16.7, phase_id=1, commit_sha="c" * 40, base_sha="d" * 40,
                created_at="2026-01-10T08:00:00+00:00", finished_at="2026-01-10T08:04:12+00:00",
                tokens=12345, cost_usd=0.5, gate=G({"reverify": {"delta_ms": -5.1, "ci": [-5.4, -4.8]}}))
    view = journey.judgment_view(a, judgment)
    bs = view.buckets
    assert view.from_judgment and [(b.rows, b.a_ms, b.b_ms, b.delta_ms, b.low, b.high) for b in bs] == \
        [(16, 20.0, 16.0, -4.0, -4.5, -3.5), (32, 40.0, 34.0, -6.0, -6.2, -5.8)]
    assert bs[0].ratio is None  # an unpaired judgment: B − A is the medians' difference
    assert bs[0].floor_ms == pytest.approx(10.0) and bs[0].pct_of_floor(16.0) == pytest.approx(62.5)
    # the file holds no re-measurement: the ledger row's (its score's B − A alone)
    assert (view.reverify.from_judgment, view.reverify.delta_ms, view.reverify.buckets) == (False, -5.1, ())
    # without the file: the ledger's medians, and no per-bucket B − A (the row has no pairs)
    led = Attempt(4, state="merged", medians_a={"16": 20.0}, medians_b={"16": 17.0})
    assert journey.judgment_view(led, None) == ScorerView(
        from_judgment=False, paired=True,
        buckets=(BucketView(16, a=BucketTimes(20.0), b=BucketTimes(17.0), paired=True),))
    diff = "diff --git a/k.py b/k.py\n--- a/k.py\n+++ b/k.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n+y = 3\n"
    assert journey.diff_stats(diff) == (1, 2, 1)
    page = journey.html([a], [Phase(1, {"buckets": [16, 32], "weights": [1, 1]}, "", "")],
                        [Score(1, 1, "d" * 40, 30.0, None, "x")],
                        files={4: journey.AttemptFiles(brief="make it fast", diff=diff, judgment=judgment)})
    assert "make it fast" in page and "diff dddddddddd..cccccccccc: 1 file(s), +2 −1" in page
    assert '<span class="add">+y = 3</span>' in page
    assert "[−4.50, −3.50]" in page and "62 %" in page and "50 %" in page  # B and A % of floor
    assert "re-measured: −5.10 [−5.40, −4.80]" in page
    assert "4 min 12 s" in page and "12,345" in page and "0.50" in page
    other = journey.html([Attempt(5, "x", state="crashed", commit_sha="e" * 40, phase_id=1)])
    assert "no diff: commit eeeeeeeeee is not in this repository" in other
    assert "no brief on disk (runs/attempts/5/brief.md)" in other


def test_html_without_scores_and_of_nothing(records):
    attempts, phases, _ = records
    page = journey.html(attempts, phases, [], lang="zh")
    assert '<html lang="zh">' in page and "<button>尝试</button>" in page
    assert page.count('<svg class="plot"') == 2  # attempts without a score are still plotted
    empty = journey.html([], [], [])
    assert "No attempts yet." in empty and "No attempt or score recorded yet." in empty
    assert "<svg" not in empty and journey.plot_png([], [], []) is None


def test_the_svg_puts_main_from_the_phase_start_and_unmeasured_below_the_axis(records):
    attempts, phases, scores = records
    p1 = journey.plot_panels(attempts, phases, scores)[0]
    doc = journey.svg(p1)
    start = float(re.search(r'class="phase-start" x1="([\d.]+)"', doc).group(1))
    first = re.search(r'class="main-line" d="M([\d.]+) ', doc)
    assert float(first.group(1)) == start
    axis = float(re.search(r'class="x-axis"[^>]* y1="([\d.]+)"', doc).group(1))
    below = [float(y) for y in re.findall(r'class="pt unmeasured"[^>]*translate\([\d.]+,([\d.]+)\)', doc)]
    above = [float(y) for y in re.findall(r'class="pt" [^>]*translate\([\d.]+,([\d.]+)\)', doc)]
    assert len(below) == 6 and min(below) > axis and len(above) == 5 and max(above) < axis


def test_main_starts_at_the_phase_start_when_first_measured_late():
    """bench/journey's case: three attempts never measured, then a merge whose A/B measured
    main's baseline: main's line starts at the phase's start, not after the third attempt."""
    phases = [Phase(1, {"buckets": [16], "weights": [1]}, "", "2026-12-01T13:10:56+00:00")]
    atts = [Attempt(1, state="crashed", phase_id=1, finished_at="2026-12-01T13:12:40+00:00"),
            Attempt(2, state="timed out", phase_id=1, finished_at="2026-12-01T13:56:09+00:00"),
            Attempt(3, state="crashed", phase_id=1, finished_at="2026-12-01T18:44:13+00:00"),
            Attempt(4, state="merged", phase_id=1, delta_ms=-112.0, commit_sha="c9", merged_sha="c9",
                    finished_at="2026-12-01T19:00:54+00:00")]
    scores = [Score(1, 1, "80", 192.0, None, "2026-12-01T19:00:54+00:00"),
              Score(2, 1, "c9", 80.0, None, "2026-12-01T19:00:54+00:00")]
    (pan,) = journey.plot_panels(atts, phases, scores)
    assert pan.main == ((0.5, 192.0), (4.0, 80.0))
    # only the merge's score recorded: the level before it is the merge's A side
    (pan,) = journey.plot_panels(atts, phases, scores[1:])
    assert pan.main == ((0.5, 192.0), (4.0, 80.0))


def _png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def test_plot_panels_of_the_sample(records):
    attempts, phases, scores = records
    p1, p2 = journey.plot_panels(attempts, phases, scores)
    assert (p1.phase_id, p1.title, p1.unit) == (1, "Phase 1 · 11 attempts · 2 merged", "score")
    # main: the baseline before attempt 1, then a drop at each merge's own position
    assert p1.main == ((0.5, 41.2), (1.0, 40.85), (7.0, 40.36))
    assert [p.x for p in p1.points] == list(range(1, 12))
    assert [p.kind for p in p1.points] == ["merged", "slower", "accuracy", "within noise", "guard",
                                           "scope", "merged", "crashed", "timed out", "conflict",
                                           "not done"]
    one, two = p1.points[0], p1.points[1]
    # B at A's level (main before the attempt) plus its change, the interval placed alike
    assert (one.y, one.low, one.high) == pytest.approx((40.85, 41.2 - 0.41, 41.2 - 0.29))
    assert (two.y, two.low, two.high) == pytest.approx((41.06, 41.0, 41.12))
    assert [p.number for p in p1.points if p.y is None] == [3, 6, 8, 9, 10, 11]
    assert p2.main == ((0.5, 52.0), (1.0, 51.2)) and p2.points[0].number == 12
    assert [p.kind for p in p2.points] == ["merged", "in flight", "in flight", "scorer check"]


def test_plot_places_b_at_its_own_a_side():
    """With its recorded medians an attempt sits at its own A/B's A score plus its change
    (the phase's buckets and weights), not at main's recorded score."""
    phases = [Phase(1, {"buckets": [16, 32], "weights": [1, 3]}, "", "")]
    a = Attempt(1, "x", state="abandoned", reason="slower", delta_ms=1.0, ci_low=0.5, ci_high=1.5,
                phase_id=1, medians_a={"16": 10.0, "32": 20.0}, medians_b={"16": 11.0, "32": 21.0})
    (pan,) = journey.plot_panels([a], phases, [Score(1, 1, "base", 99.0, None, "x")])
    assert (pan.points[0].y, pan.points[0].low, pan.points[0].high) == (18.5, 18.0, 19.0)
    # no score and no medians: the panel plots changes against zero
    b = Attempt(2, "y", state="abandoned", reason="within noise", delta_ms=-0.2, ci_low=-0.5,
                ci_high=0.1, phase_id=2)
    (pan,) = journey.plot_panels([b], [Phase(2, {}, "", "")], [])
    assert pan.unit == "change" and pan.main == () and pan.points[0].y == -0.2
    assert (pan.points[0].low, pan.points[0].high) == (-0.5, 0.1)


def test_plot_orders_scores_without_times_by_record():
    phases = [Phase(1, {"context": 4}, "", "")]
    atts = [Attempt(3, "x", state="merged", delta_ms=-1.0, commit_sha="abc", merged_sha="abc",
                    phase_id=1)]
    scores = [Score(1, 1, "base", 10.0, None, "not a time"), Score(2, 1, "abc", 9.0, None, "later")]
    (pan,) = journey.plot_panels(atts, phases, scores)
    assert pan.main == ((0.5, 10.0), (1.0, 9.0)) and pan.points[0].y == 9.0
    assert _png_size(journey.plot_png(atts, phases, scores)) == (900, 380)


@pytest.mark.parametrize("kind, attempt", [
    ("merged", Attempt(1, state="merged")),
    ("accuracy", Attempt(1, state="abandoned", reason="accuracy")),
    ("within noise", Attempt(1, state="abandoned", reason="within noise")),
    ("slower", Attempt(1, state="abandoned", reason="slower")),
    ("guard", Attempt(1, state="abandoned", reason="guard")),
    ("scorer check", Attempt(1, state="abandoned", reason="scorer check")),
    ("other", Attempt(1, state="abandoned", reason="a reason a new gate invented")),
    ("other", Attempt(1, state="abandoned", reason="merged")),
    ("crashed", Attempt(1, state="crashed")),
    ("timed out", Attempt(1, state="timed out")),
    ("not done", Attempt(1, state="not done")),
    ("in flight", Attempt(1, state="judging")),
    ("in flight", Attempt(1, state="waiting")),
    ("interrupted", Attempt(1, state="interrupted")),  # Ctrl-C, SIGTERM or kern cancel
])
def test_outcome_kinds(kind, attempt):
    assert journey.outcome_kind(attempt) == kind
    assert kind in [k[0] for k in journey.KINDS]


def test_plot_reads_with_one_attempt_and_with_500():
    one = [Attempt(1, "x", state="abandoned", reason="within noise", delta_ms=-417.69,
                   ci_low=-900.1, ci_high=60.3, phase_id=1)]
    png = journey.plot_png(one, [Phase(1, {}, "", "")], [Score(1, 1, "b", 1900.0, None, "x")])
    assert _png_size(png) == (900, 380)
    many, scores, main = [], [Score(1, 1, "b", 40.0, None, "x")], 40.0
    for n in range(1, 501):
        if n % 15 == 0:
            main -= 0.1
            many.append(Attempt(n, state="merged", delta_ms=-0.1, ci_low=-0.15, ci_high=-0.05,
                                commit_sha=f"s{n}", phase_id=1))
            scores.append(Score(n + 1, 1, f"s{n}", main, None, "x"))
        elif n % 3:
            many.append(Attempt(n, state="abandoned", reason="within noise", delta_ms=0.01 * (n % 7),
                                ci_low=-0.1, ci_high=0.1, phase_id=1))
        else:
            many.append(Attempt(n, state="crashed", phase_id=1))
    (pan,) = journey.plot_panels(many, [Phase(1, {}, "", "")], scores)
    assert len(pan.main) == 1 + 33 and pan.main[-1] == (495.0, pytest.approx(36.7))
    assert _png_size(journey.plot_png(many, [Phase(1, {}, "", "")], scores)) == (900, 380)
    small, large = journey.marker_style(1), journey.marker_style(500)
    assert small["label_merges"] and not large["label_merges"]  # 33 labels would overlap
    assert large["ms"] < small["ms"] and large["alpha"] < small["alpha"] and large["cap"] == 0


def test_plot_of_a_phase_where_nothing_was_measured():
    """The H200 journey's case: a crash and a timeout, no score: both attempts in the strip."""
    atts = [Attempt(1, state="crashed", phase_id=1), Attempt(2, state="timed out", phase_id=1)]
    (pan,) = journey.plot_panels(atts, [Phase(1, {"buckets": [16], "weights": [1]}, "", "")], [])
    assert pan.main == () and [(p.kind, p.y) for p in pan.points] == [("crashed", None),
                                                                       ("timed out", None)]
    assert _png_size(journey.plot_png(atts, [], [])) == (900, 380)
