"""bench/tools/judging_times.py exports every judgment's seconds from a ledger and its
attempts' judgment files: here the project's own H200 journey (bench/journey/: real judgments,
kept before phases were recorded, so each side's wall is one unmeasured span and no total);
a CPU run that records its phases is tests/gates/test_keep_and_band.py's."""
from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("judging_times", ROOT / "bench" / "tools" / "judging_times.py")
judging_times = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(judging_times)

JOURNEY = ROOT / "bench" / "journey"


def test_the_h200_journey_exports_one_row_per_judgment_and_medians_per_verdict(tmp_path):
    before = (JOURNEY / "ledger.sqlite").read_bytes()
    out = tmp_path / "judging.json"
    assert judging_times.main(["--ledger", str(JOURNEY / "ledger.sqlite"), "--attempts",
                               str(JOURNEY / "attempts"), "--date", "2026-12-04", "--out", str(out)]) == 0
    assert (JOURNEY / "ledger.sqlite").read_bytes() == before  # read from a copy
    rec = json.loads(out.read_text())
    files = sorted(JOURNEY.glob("attempts/*/judgment-*.json"))
    assert rec["machine"] == "h200" and rec["judgments"] == len(files) == len(rec["rows"])
    for r in rec["rows"]:
        doc = json.loads((JOURNEY / "attempts" / str(r["attempt"]) / f"judgment-{r['judgment']}.json").read_text())
        assert r["verdict"] == doc["test"]["verdict"] and r["accuracy_s"] == doc["test"]["wall_s"]
        assert r["scorer_s"] == (doc["bench"] or {}).get("wall_s")
        if doc.get("times") is None:  # judged before judgments kept their phases (to 2026-12-04)
            assert r["phases_recorded"] is False and r["total_s"] is None
            assert r["phases"]["accuracy"]["B replay"] == {"unmeasured": doc["test"]["b_wall_s"]}
            assert abs(sum(r["by_phase"].values()) - r["accuracy_s"] - (r["scorer_s"] or 0)) < 1e-6
            assert r["beside"] == [] and r["overlap_s"] is None  # each replay started after main recorded
        else:  # the judgment's own seconds
            assert r["phases_recorded"] is True and r["total_s"] == doc["times"]["total_s"]
            assert r["total_s"] >= r["accuracy_s"] + (r["scorer_s"] or 0)
    kinds = {r["verdict"] for r in rec["rows"]}
    assert set(rec["medians"]) == kinds
    bit = [r for r in rec["rows"] if r["verdict"] == "PASS bit-identical"]
    m = rec["medians"]["PASS bit-identical"]
    assert m["judgments"] == len(bit) and m["accuracy_s"] == judging_times._median([r["accuracy_s"] for r in bit])


def test_a_replay_beside_mains_recording_exports_its_overlap(tmp_path):
    """A judgment whose replay started beside main's recording (its accuracy report's
    ``beside`` and ``timeline``, as gates/accuracy.py writes them): its row says what ran
    beside and how much of it main's recording covered; its phases stay those of the path."""
    attempts = tmp_path / "attempts"
    shutil.copytree(JOURNEY / "attempts", attempts)
    path = attempts / "10" / "judgment-1.json"
    doc = json.loads(path.read_text())
    doc["test"]["beside"] = [{"gate": "accuracy", "part": "B replay", "phase": p, "seconds": x}
                             for p, x in (("start", 9.5), ("build", 14.0))]
    doc["test"]["timeline"] = {"a_started": 0.1, "a_recorded": 20.1, "b_started": 0.1, "b_released": 23.6}
    path.write_text(json.dumps(doc))
    out = tmp_path / "judging.json"
    assert judging_times.main(["--ledger", str(JOURNEY / "ledger.sqlite"), "--attempts", str(attempts),
                               "--out", str(out)]) == 0
    rec = json.loads(out.read_text())
    (r,) = [r for r in rec["rows"] if r["attempt"] == 10]
    assert {"verdict", "accuracy_s", "scorer_s", "total_s"} <= set(r)
    assert r["overlap_s"] == 20.0
    (b,) = r["beside"]
    assert (b["part"], b["of"], b["phases"], b["seconds"], b["after_s"]) == (
        "B replay", "A record", {"start": 9.5, "build": 14.0}, 23.5, 3.5)
    assert abs(sum(r["by_phase"].values()) - r["accuracy_s"] - (r["scorer_s"] or 0)) < 1e-6
    assert rec["medians"][r["verdict"]]["overlap_s"] == 20.0  # the only one that ran beside


def test_medians_count_each_figure_over_the_judgments_that_have_it():
    rows = [{"verdict": "FAIL", "accuracy_s": 10.0, "scorer_s": None, "remeasure_s": None, "total_s": 11.0},
            {"verdict": "FAIL", "accuracy_s": 30.0, "scorer_s": None, "remeasure_s": None, "total_s": None},
            {"verdict": "PASS bit-identical", "accuracy_s": 40.0, "scorer_s": 80.0, "remeasure_s": 70.0,
             "total_s": 200.0}]
    m = judging_times.medians(rows)
    assert m["FAIL"] == {"judgments": 2, "accuracy_s": 20.0, "scorer_s": None, "remeasure_s": None,
                         "total_s": 11.0, "accuracy_warm_s": None, "total_warm_s": None,
                         "overlap_s": None, "gates_s": 20.0}
    assert m["PASS bit-identical"]["gates_s"] == 190.0


def test_a_kern_try_on_a_fresh_clone_exports_its_seconds_without_mains_compile(tmp_path):
    """The H200's kern try of #9's patch (2026-12-05, bench/results/…-fair-bar-*): the clone's
    first judgment compiled main (compile_main); its warm figures are its walls less that phase.
    ``--attempt`` keeps only the attempts named."""
    import tarfile

    results = ROOT / "bench" / "results"
    with tarfile.open(results / "2026-12-05-h200-fair-bar-runs.tgz") as tar:
        tar.extractall(tmp_path, filter="data")
    out = tmp_path / "judging.json"
    args = ["--ledger", str(results / "2026-12-05-h200-fair-bar-ledger.sqlite"),
            "--attempts", str(tmp_path / "runs" / "attempts"), "--out", str(out)]
    assert judging_times.main([*args, "--attempt", "1"]) == 0
    (r,) = json.loads(out.read_text())["rows"]
    doc = json.loads((tmp_path / "runs" / "attempts" / "1" / "judgment-1.json").read_text())
    compiled = sum(s["seconds"] for s in doc["test"]["phases"] if s["phase"] == "compile_main")
    assert compiled > 10 and r["compile_main_s"] == compiled
    assert r["accuracy_warm_s"] == r["accuracy_s"] - compiled and r["total_warm_s"] == r["total_s"] - compiled
    m = json.loads(out.read_text())["medians"][r["verdict"]]
    assert m["accuracy_warm_s"] == r["accuracy_warm_s"]
    try:
        judging_times.main([*args, "--attempt", "7"])
    except SystemExit as e:
        assert e.code == 2  # no judgment of attempt 7: the user is told, nothing written
    else:
        raise AssertionError("an --attempt with no judgment files must stop with a usage error")
