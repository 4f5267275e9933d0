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
             ci_high=-300.0, gate={"bench": {"classification": "within noise", "band_ms": 512.3}}),
     "-417.69", f"abandoned: within noise ({M}417.69 [{M}500.00, {M}300.00], band ±512.30)"),
    (Attempt(4, "a", state="abandoned", reason="within noise", delta_ms=-0.02), "-0.02",
     f"abandoned: within noise ({M}0.02)"),
    (Attempt(3, "a", state="abandoned", reason="accuracy",
             gate={"accuracy": {"verdict": "FAIL", "tag": "kl"}}), "", "abandoned: accuracy (FAIL kl)"),
    (Attempt(3, "a", state="abandoned", reason="accuracy",
             gate={"accuracy": {"verdict": "FAIL", "reasons": ["3 confident argmax flip(s)"]}}), "",
     "abandoned: accuracy (FAIL: 3 confident argmax flip(s))"),
    (Attempt(3, "a", state="abandoned", reason="accuracy",
             gate={"accuracy": {"verdict": "FAIL", "reasons": [
                 "KL(A||B) max 0.031 > limit 0.01 (max of kl_fail and 4 x the reference band)",
                 "reference tolerance exceeded: moe.experts.y", "x"]}}), "",
     "abandoned: accuracy (FAIL: KL(A||B) max 0.031 > limit 0.01 (max of kl_fail and 4 x the "
     "reference band) (+2 more))"),
    (Attempt(3, "a", state="abandoned", reason="accuracy",
             gate={"accuracy": {"verdict": "FAIL", "reasons": ["w" * 150]}}), "",
     "abandoned: accuracy (FAIL: " + "w" * 99 + "…)"),
    (Attempt(3, "a", state="abandoned", reason="accuracy", gate={"accuracy": {"verdict": "INCONCLUSIVE"}}),
     "", "abandoned: accuracy (INCONCLUSIVE)"),
    (Attempt(5, "a", state="abandoned", reason="guard", delta_ms=-0.1,
             gate={"guard": {"worst_pct": 2.4, "rows": 16}}), "-0.10", "abandoned: guard (+2.4 % at 16 rows)"),
    (Attempt(5, "a", state="abandoned", reason="scorer check",
             gate={"bench": {"checks": [{"check": "roofline_floor", "why": "16 rows below the floor"},
                                        {"check": "hidden_time"}], "graph_matches_eager": True}}),
     "", "abandoned: scorer check (roofline_floor: 16 rows below the floor (+1 more))"),
    (Attempt(5, "a", state="abandoned", reason="scorer check",
             gate={"bench": {"checks": [], "graph_matches_eager": False}}),
     "", "abandoned: scorer check (the CUDA graph's outputs differ from eager)"),
    (Attempt(5, "a", state="abandoned", reason="scorer check",
             gate={"bench": {"outcome": "tampered", "error": "fd 0 swapped"}}),
     "", "abandoned: scorer check (tampered: fd 0 swapped)"),
    (Attempt(6, "a", state="abandoned", reason="scope"), "", "abandoned: scope"),
    (Attempt(6, "a", state="abandoned", reason="scope", gate={"detail": "2 commits"}), "",
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
    (Attempt(15, "a", state="merged", delta_ms=-0.004), "-0.004", f"merged ({M}0.004)"),
])
def test_result_strings(attempt, change, result):
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
    assert "2 merged of 11 attempts · total gain 0.84 ms · main 41.200 → 40.360 ms" in en
    zh = journey.markdown(attempts, phases, lang="zh", scores=scores)
    assert zh.startswith("# 优化历程\n")
    assert zh.count("| # | 尝试 | 分数变化 (ms) | 结果 |") == 2
    assert "## 阶段 1 · " in zh and "本阶段的分数与其他阶段不可比" in zh
    assert "已合并 2 / 共 11 次尝试 · 总收益 0.84 ms" in zh
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
    assert p1["rows"][0] == {"#": 1, "attempt": "MoE experts: split-K over 2 CTAs",
                             "score_change_ms": -0.35, "result": "merged (−0.35 [−0.41, −0.29])",
                             "state": "merged",
                             "reason": None, "ci_ms": [-0.41, -0.29], "estimate_ms": None,
                             "waiting_on": None, "commit_sha": "c000000000001"}
    assert len(obj["scores"]) == 5


def test_html_is_self_contained_with_the_plot(records):
    attempts, phases, scores = records
    page = journey.html(attempts, phases, scores, lang="en")
    assert page.startswith("<!DOCTYPE html>") and '<html lang="en">' in page
    assert "<style>" in page and page.count("<table>") == 2
    assert "abandoned: guard (+2.4 % at 16 rows)" in page and "residual: fuse norm | add" in page
    m = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(m) == 1
    png = base64.b64decode(m[0])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    # nothing fetched from anywhere: no URLs, no external scripts, styles, fonts or images
    assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/|<link|<script|@import|url\(", page, re.I)
    assert all(s.startswith("data:") for s in re.findall(r'src="([^"]*)"', page))
    assert journey.html(attempts, phases, scores) == page  # reproducible bytes


def test_html_zh_and_without_scores(records):
    attempts, phases, _ = records
    page = journey.html(attempts, phases, [], lang="zh")
    assert '<html lang="zh">' in page and "<th>尝试</th>" in page and "<th>分数变化 (ms)</th>" in page
    assert "尚无分数记录" in page and "data:image/png" not in page
    assert "No attempts yet." in journey.html([], [], [])


def test_plot_labels_points_by_attempt():
    phases = [Phase(1, {"context": 4}, "", "")]
    atts = [Attempt(3, "x", state="merged", commit_sha="abc", merged_sha="abc", phase_id=1)]
    scores = [Score(1, 1, "base", 10.0, None, "not a time"), Score(2, 1, "abc", 9.0, None, "later")]
    png = journey.plot_png(atts, phases, scores)  # unparseable times fall back to the index
    assert png[:4] == b"\x89PNG"
    assert journey.plot_png(atts, phases, []) is None
