"""What judging costs, through the real pipeline (``kern try``: CPU, small model, Triton
interpreter): main's keep-copies are written only for a candidate whose pass differs from
main's, which still gets its pinned pass on them; main's repeat and band passes are made once
per (main, touched ops, spec) and serve the next judgment's hidden draw; every judgment keeps
its phases, ``kern show`` prints them and bench/tools/judging_times.py exports them.

Two candidates round moe.combine differently (values change a little everywhere; kl_pass is
lowered so that their verdicts need main's noise passes), then a comment-only one."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from gates.accuracy import band_inputs
from gates.protocol import TapFiles
from harness import cli
from harness.pipeline import try_commit
from tests.gates.candidates import candidate, context, make_repo

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
COMBINE = "kernels/k31/moe/combine.py"
WEIGHT = "wt = tl.load(w_ptr + row * w_rs + j, mask=live, other=0.0).to(tl.float32)[:, None]"
CASES = {
    "weights-bf16": [(COMBINE, WEIGHT, WEIGHT.replace(".to(tl.float32)", ".to(tl.bfloat16).to(tl.float32)"))],
    "products-bf16": [(COMBINE, "acc += wt * yv.to(tl.float32)",
                       "acc += (wt * yv.to(tl.float32)).to(tl.bfloat16).to(tl.float32)")],
    "identical": [(COMBINE, "def moe_combine(", "# a comment that changes no instruction\ndef moe_combine(")],
}
# one bucket among four visible sizes; 2, 5, 6, 7 are left for the hidden draws
SETTINGS = {"profiles.cpu.test_rows": [1, 3, 8, 4], "profiles.cpu.test_steps": 1,
            "profiles.cpu.buckets": [4], "profiles.cpu.weights": [1], "test.timeout_s": 600,
            "bench.timeout_s": 600, "test.kl_pass": 1.0e-12}


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    repo = make_repo(tmp_path_factory.mktemp("keep"), SETTINGS)
    shas = {name: candidate(repo, name, edits) for name, edits in CASES.items()}
    ctx, _ = context(repo)
    numbers = {name: try_commit(ctx, shas[name], title=name)[0] for name in CASES}
    docs = {name: json.loads((repo / "runs/attempts" / str(n) / "judgment-1.json").read_text())
            for name, n in numbers.items()}
    return repo, ctx, numbers, docs


def test_a_bit_identical_candidate_never_writes_mains_kept_calls(judged):
    repo, ctx, numbers, docs = judged
    test = docs["identical"]["test"]
    assert test["verdict"] == "PASS bit-identical", test["reasons"]
    a = TapFiles(Path(test["a_dir"]))
    # main's document stays, every tensor went with the verdict (gates/launch/disk.py): what main's
    # side saved is what its document says it saved
    assert a.record.exists() and list((repo / "runs" / "tap").rglob("*.pt")) == []
    assert json.loads(a.record.read_text())["kept_saved"] is False
    assert test["evidence"]["outcome_noise"] == "not needed"


def test_a_differing_candidate_gets_mains_kept_calls_and_its_pinned_pass(judged):
    repo, ctx, numbers, docs = judged
    for name in ("weights-bf16", "products-bf16"):
        test = docs[name]["test"]
        assert test["evidence"]["outcome_a"] == test["evidence"]["outcome_b"] == "ok", test["reasons"]
        a = TapFiles(Path(test["a_dir"]))
        assert json.loads(a.record.read_text())["kept_saved"] is True  # (the file went with the verdict)
        replay = json.loads((Path(test["b_dir"]) / TapFiles.RESULT).read_text())
        # every call of moe.combine recomputed on main's kept inputs and compared with its outputs
        pinned = [c for c in replay["pinned"]["calls"] if c.get("op") == "moe.combine"]
        assert pinned and all(c["outputs"]["out"]["differing"] >= 0 for c in pinned)
        assert not [c for c in replay["pinned"]["calls"] if "diverged" in c]
        local = test["evidence"]["local"]["ops"]["moe.combine"]
        assert local["calls"] == len(pinned) and local["differing"] > 0
        assert test["verdict"] in ("PASS within noise floor", "INCONCLUSIVE"), test["reasons"]


def test_mains_band_passes_are_made_once_and_serve_the_next_hidden_draw(judged):
    repo, ctx, numbers, docs = judged
    first, second = docs["weights-bf16"]["test"], docs["products-bf16"]["test"]
    assert first["hidden"] != second["hidden"]  # each judgment its own draw
    assert first["evidence"]["outcome_noise"] == second["evidence"]["outcome_noise"] == "ok"
    assert first["noise_wall_s"] > 0 and not first["noise_cached"]
    assert second["noise_wall_s"] == 0.0 and second["noise_cached"]
    assert first["band_dir"] == second["band_dir"]
    band = json.loads((Path(first["band_dir"]) / "band.json").read_text())
    assert band["inputs"] == band_inputs(ctx.cfg.target, ctx.cfg.machine, ctx.cfg.test).to_dict()
    assert band["inputs"]["input_seed"] == ctx.cfg.target.seed  # the visible seed
    assert band["inputs"]["extra_rows"] and band["band_ops"] == ["moe.combine"]
    # each of its three passes timed, within the noise side's wall
    assert set(band["passes_s"]) == {"plain", "repeat", "band"}
    assert all(s > 0 for s in band["passes_s"].values())
    assert sum(band["passes_s"].values()) < first["noise_wall_s"]
    assert first["noise_passes_s"] == band["passes_s"] and second["noise_passes_s"] is None
    for ev in (first["evidence"], second["evidence"]):
        assert ev["band"] == band["band"] and ev["noise"] == band["noise"]
    assert list(Path(first["band_dir"]).rglob("*.pt")) == []  # its statistics are what is kept
    # its process's phases are in the first judgment only
    parts = {s["part"] for s in first["phases"]} - {s["part"] for s in second["phases"]}
    assert parts == {"A noise"}


def test_every_judgment_keeps_its_phases_and_kern_show_prints_them(judged, capsys):
    repo, ctx, numbers, docs = judged
    for name, doc in docs.items():
        times, test = doc["times"], doc["test"]
        assert times["accuracy_s"] == test["wall_s"] and times["total_s"] >= test["wall_s"]
        acc = [s for s in times["spans"] if s["gate"] == "accuracy"]
        assert abs(sum(s["seconds"] for s in acc) - test["wall_s"]) < 1e-6
        phases = {(s["part"], s["phase"]) for s in acc}
        assert {("B replay", "start"), ("B replay", "tap"), ("coordinator", "checkout"),
                ("coordinator", "verdict")} <= phases, phases
        # the candidate's build ran beside main's recording (gates/accuracy.py): kept apart
        assert ("B replay", "build") in {(s["part"], s["phase"]) for s in test["beside"]}, test["beside"]
        (b,) = times["beside"]  # and in the judgment's times, with the timeline
        assert b["part"] == "B replay" and b["of"] == "A record" and b["spans"] == test["beside"]
        assert (b["started_s"], b["of_done_s"]) == (test["timeline"]["b_started"], test["timeline"]["a_recorded"])
        row = ctx.ledger.attempt(numbers[name])
        assert row.gate.times.accuracy_s == test["wall_s"] and row.gate.times.total_s == times["total_s"]
    bench = docs["identical"]["bench"]
    assert bench and docs["identical"]["times"]["scorer_s"] == bench["wall_s"]
    scorer = {(s["part"], s["phase"]) for s in docs["identical"]["times"]["spans"] if s["gate"] == "scorer"}
    assert {("A", "start"), ("B", "start"), ("coordinator", "rounds")} <= scorer, scorer

    assert cli.main(["--repo", str(repo), "show", str(numbers["identical"])]) == 0
    out = capsys.readouterr().out.splitlines()
    head = next(ln for ln in out if ln.startswith("phases     "))
    assert head.startswith("phases     accuracy ") and " · scorer " in head and " · total " in head
    first = out.index(next(ln for ln in out if ln.startswith("           accuracy   ")))
    assert " B replay " in out[first] or " A record " in out[first], out  # the sides, then the rest
    assert any(" B replay " in ln and " tap " in ln for ln in out[first:]), out
    beside = out.index(next(ln for ln in out if ln.startswith("           beside     B replay     start ")))
    assert beside > first and " build " in out[beside] and "(off the path: not in accuracy " in out[beside]
    assert out[beside + 1].startswith("                      timeline     A record ")
    assert out[beside + 2].startswith("                      overlap      ") and \
        " of main's recording overlapped the candidate's start · build" in out[beside + 2], out
    assert cli.main(["--repo", str(repo), "show", str(numbers["identical"]), "--json"]) == 0
    ph = json.loads(capsys.readouterr().out)["phases"]
    assert ph["recorded"] is True and ph["total_s"] == docs["identical"]["times"]["total_s"]
    (b,) = ph["beside"]
    assert b["overlap_s"] == ph["overlap_s"] and abs(b["overlap_s"] + b["after_s"] - b["seconds"]) < 1e-6


def test_judging_times_exports_this_runs_judgments(judged, tmp_path):
    repo, ctx, numbers, docs = judged
    spec = importlib.util.spec_from_file_location("judging_times", ROOT / "bench/tools/judging_times.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    out = tmp_path / "judging.json"
    assert tool.main(["--ledger", str(repo / "runs/ledger.sqlite"), "--attempts",
                      str(repo / "runs/attempts"), "--out", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert rec["machine"] == "cpu" and [r["attempt"] for r in rec["rows"]] == sorted(numbers.values())
    by = {r["attempt"]: r for r in rec["rows"]}
    for name, n in numbers.items():
        r, doc = by[n], docs[name]
        assert r["verdict"] == doc["test"]["verdict"] and r["phases_recorded"]
        assert (r["accuracy_s"], r["scorer_s"], r["total_s"]) == (
            doc["times"]["accuracy_s"], doc["times"]["scorer_s"], doc["times"]["total_s"])
        assert r["by_phase"]["tap"] > 0 and "B replay" in r["phases"]["accuracy"]
        assert r["overlap_s"] is not None and 0 <= r["overlap_s"] <= r["beside"][0]["seconds"]
    # the band's passes in the judgment that made them only; the identical one needed none
    assert set(by[numbers["weights-bf16"]]["noise_passes_s"]) == {"plain", "repeat", "band"}
    assert by[numbers["products-bf16"]]["noise_passes_s"] is None  # (cached)
    assert by[numbers["identical"]]["noise_passes_s"] is None
    # every tap side that ran in a judgment names its GPU memory (none on the CPU); the
    # noise side only where it ran
    assert set(by[numbers["weights-bf16"]]["device_memory"]) == {"A record", "B replay", "A noise"}
    assert "A noise" not in by[numbers["identical"]]["device_memory"]
    assert all(m is None for r in rec["rows"] for m in r["device_memory"].values())
    # the scorer's verification by side, where the scorer ran (an INCONCLUSIVE verdict stops before it)
    scored = [r for r in rec["rows"] if r["scorer_s"] is not None]
    assert by[numbers["identical"]] in scored
    assert all(set(r["verify_s"]) == {"A", "B"} and min(r["verify_s"].values()) > 0 for r in scored)
    assert all(r["verify_s"] is None for r in rec["rows"] if r not in scored)
    assert rec["medians"]["PASS bit-identical"]["judgments"] == 1
    assert sum(m["judgments"] for m in rec["medians"].values()) == 3
