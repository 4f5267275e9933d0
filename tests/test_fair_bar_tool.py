"""bench/tools/fair_bar.py: #9's tunables carried onto main, and the record of judgments the
next H200 session writes (issue 35 item 1), on what its parts are given."""
from __future__ import annotations

import subprocess

import pytest

from bench.tools import fair_bar
from harness.settings import load
from tests.gates.test_timed_band import _timed_entry, _totals

ROOT = fair_bar.ROOT


def test_the_index_logits_block_of_the_patch_replaces_mains_and_nothing_else():
    main = (ROOT / fair_bar.TUNABLES).read_text()
    # the patched file of #9 on its base: its block, and the mla.topk block of the base
    base = subprocess.run(["git", "show", f"{fair_bar.BASE_9}:{fair_bar.TUNABLES}"], cwd=ROOT,
                          capture_output=True, text=True)
    if base.returncode:
        pytest.skip(f"this clone lacks #9's base {fair_bar.BASE_9}")
    patched = base.stdout.replace('"mla.index_logits.num_stages": (3, (1, 2, 3, 4)),',
                                  '"mla.index_logits.num_stages": (6, (1, 2, 3, 4, 5, 6)),')
    got = fair_bar.with_block(main, patched)
    assert '"mla.index_logits.num_stages": (6, (1, 2, 3, 4, 5, 6)),' in got
    assert got.replace(fair_bar.index_logits_block(got), "") == \
        main.replace(fair_bar.index_logits_block(main), "")  # main's mla.topk block kept
    with pytest.raises(ValueError, match="the file changed"):
        fair_bar.index_logits_block("TUNABLES = {}\n")


def test_a_judgment_is_recorded_with_both_rules_on_the_same_timed_outputs():
    cfg = load(ROOT / "kern.yaml").resolve(True)
    main = _totals([7] * 64, [2e-4 * 7] * 64, [1 if i % 9 == 0 else 0 for i in range(64)], [0] * 64)
    cand = {**main, "above": [1 if i % 11 == 0 else 0 for i in range(64)]}
    judgment = {"test": {"rev": "b" * 40, "base": "a" * 40, "verdict": "PASS logit evidence",
                         "touched_ops": ["mla.index_logits"], "wall_s": 150.0,
                         "evidence": {"logits": {"rows": 64}}},
                "bench": {"outcome": "ok", "timed": _timed_entry(2, 0.3), "wall_s": 80.0,
                          "timed_band": {"main": main, "candidate": cand, "candidate_vs_main": cand,
                                         "ops": ["mla.index_logits"], "replays": {"64": [0]}},
                          "timed_band_s": 3.5, "analysis": {"sides": {"B": {"failed_checks": []}}}}}
    got = fair_bar.summarize(judgment, cfg.test, cfg.bench)
    assert got["fixed_rule"]["check"] == "timed_outputs_accuracy"  # what #9 met on the H200
    assert got["band_rule"] == "pass" and got["band"]["ok"] and got["band_s"] == 3.5
    assert got["band"]["replays"] == {"64": [0]} and got["timed"]["64"]["logits"]["rows"] == 64
    alone = fair_bar.summarize({"test": judgment["test"], "bench": {"outcome": "timeout"}},
                               cfg.test, cfg.bench)
    assert alone["scorer"] == "timeout" and "band" not in alone
