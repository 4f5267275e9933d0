"""bench/tools/loop_profile.py turns the loop's profiles of main that a GPU run brought back
into bench/results files named by date, machine, rows and commit, each dated by the ledger's
last run and left alone once written."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("loop_profile", ROOT / "bench" / "tools" / "loop_profile.py")
loop_profile = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(loop_profile)

JOURNEY_LEDGER = ROOT / "bench" / "journey" / "ledger.sqlite"


def _measured(gpu="NVIDIA H200", rows=128) -> dict:
    return {"environment": {"gpu": gpu, "torch": "2.11.0+cu130", "triton": "3.6.0"},
            "spec": {"replays": 5, "free": True},
            "profile": {"rows": rows, "step_ms": 82.5, "ops": {"moe.experts": {"ms": 73.0}}}}


@pytest.mark.parametrize("gpu, slug", [("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100"),
                                       ("NVIDIA A100-SXM4-80GB", "a100")])
def test_the_machine_is_named_from_the_device(gpu, slug):
    assert loop_profile.machine(gpu) == slug


def test_a_device_without_a_model_number_is_refused():
    with pytest.raises(ValueError, match="cannot tell the machine"):
        loop_profile.machine("cpu")


def test_the_result_keeps_the_profile_whole_behind_its_provenance():
    measured = _measured()
    name, doc = loop_profile.result(measured, "f2d0bb7c5a0936f0debded76ca21054e60e07556", "2026-12-06")
    assert name == "2026-12-06-h200-profile-128-loop-f2d0bb7.json"
    assert list(doc)[:6] == ["date", "gpu", "commit", "torch", "triton", "what"]
    assert (doc["date"], doc["gpu"], doc["triton"]) == ("2026-12-06", "NVIDIA H200", "3.6.0")
    assert doc["commit"] == "f2d0bb7c5a0936f0debded76ca21054e60e07556"
    assert {k: doc[k] for k in measured} == measured
    assert "with the leave-one-out column" in doc["what"]


def test_a_file_that_is_no_profile_is_refused():
    with pytest.raises(ValueError, match="no environment.gpu or profile.rows"):
        loop_profile.result({"phases": {}}, "0" * 40, "2026-12-06")


def test_the_date_is_the_ledgers_last_run():
    # the journey's last run (run 3) started 2026-12-06 19:38 UTC
    assert loop_profile.last_run_date(JOURNEY_LEDGER) >= "2026-12-06"


def test_a_run_folder_becomes_one_file_per_whole_profile_and_an_existing_one_stays(tmp_path):
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    profiles, out = tmp_path / "profile", tmp_path / "results"
    profiles.mkdir(), out.mkdir()
    (profiles / f"{head[:12]}-loop-2cdd7f7c1a.json").write_text(json.dumps(_measured()))
    (profiles / f"{head[:12]}-loop-2cdd7f7c1a.partial.partial.json").write_text("{")
    (profiles / f"{'f' * 12}-loop-2cdd7f7c1a.json").write_text(json.dumps(_measured()))  # not here
    argv = ["--profiles", str(profiles), "--ledger", str(JOURNEY_LEDGER), "--out-dir", str(out)]
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        assert loop_profile.main(argv) == 0
        (written,) = out.iterdir()
        assert written.name.endswith(f"-h200-profile-128-loop-{head[:7]}.json")
        assert json.loads(written.read_text())["commit"] == head
        written.write_text("kept")
        assert loop_profile.main(argv) == 0
        assert written.read_text() == "kept"
    finally:
        os.chdir(cwd)
