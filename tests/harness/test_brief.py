"""``kern brief``: the brief the loop would write, through the CLI, from a profile of main and
the journey; and the pure pieces it shares with the loop's spawn."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from harness import briefs, cli
from harness.ledger import Ledger, default_path

KERN_YAML = str(Path(__file__).resolve().parents[2] / "kern.yaml")

PROFILE = {
    "environment": {"device": "cuda"}, "read_ceiling_Bps": 4.55e12, "torch_sum_Bps": 3.93e12,
    "profile": {"rows": 128, "step_ms": 92.0, "ops": {
        "moe.experts": {"ms": 71.0, "floor_ms": 29.6, "free_ms": 61.0, "calls": 92, "modules": []},
        "mla.topk": {"ms": 4.0, "floor_ms": 0.05, "free_ms": 3.2, "calls": 24, "modules": []},
    }}}


def repo_with_main(tmp_path: Path) -> Path:
    repo = tmp_path / "r"
    repo.mkdir()
    for args in (["init", "-q", "-b", "main"], ["config", "user.email", "t@t"], ["config", "user.name", "t"],
                 ["commit", "-q", "--allow-empty", "-m", "init"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    return repo


def kern(capsys, repo: Path, *args: str):
    code = cli.main(["--repo", str(repo), "--config", KERN_YAML, *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_brief_renders_the_profile_row_the_ceiling_and_what_was_tried(tmp_path, capsys):
    repo = repo_with_main(tmp_path)
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps(PROFILE))
    led = Ledger(default_path(repo))
    n = led.new_attempt(title="kernels: experts split-K", hypothesis="", target="moe.experts",
                        backend="replay", base_sha="0" * 40, phase_id=led.phase({"buckets": [16]}))
    led.transition(n, "running")
    led.transition(n, "judging")
    led.transition(n, "abandoned", reason="slower", delta_ms=0.4, ci_low=0.2, ci_high=0.6)
    led.close()
    code, out, err = kern(capsys, repo, "brief", "moe.experts", "--profile", str(prof))
    assert code == 0, err
    assert "# Attempt #2: make `moe.experts` faster" in out
    # the leave-one-out time, not the per-call events (71.0 ms), and the brief says which
    assert ("takes 61.000 ms of the 92.000 ms step at 128 rows (66.3% of the step): the profile's "
            "leave-one-out 'free' column") in out and "events say 71.000 ms" in out
    assert "29.600 ms, 49% of its time. Headroom: 31.400 ms" in out  # free 61.0 - floor 29.6
    assert "4.55 TB/s, the card's read ceiling" in out and "torch's sum read 3.93 TB/s" in out
    assert "- kernels: experts split-K: abandoned" in out
    assert "buckets [16, 32, 64, 128, 256] rows" in out  # a GPU profile: the gpu profile's shapes
    assert "{" not in out.replace("{exact", "")  # every field filled


def test_brief_json_and_out_file(tmp_path, capsys):
    repo = repo_with_main(tmp_path)
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps(PROFILE))
    code, out, _ = kern(capsys, repo, "brief", "mla.topk", "--profile", str(prof), "--json",
                        "--out", str(tmp_path / "b.md"))
    data = json.loads(out)
    assert code == 0 and data["target"] == "mla.topk" and data["attempt"] == 1
    assert (tmp_path / "b.md").read_text() == data["text"]
    assert not default_path(repo).exists()  # a brief is read-only: no ledger created


@pytest.mark.parametrize("case", ["unknown target", "no profile", "bad profile", "not a repo"])
def test_brief_errors_are_one_line_and_exit_2(tmp_path, capsys, case):
    repo = repo_with_main(tmp_path)
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps(PROFILE) if case != "bad profile" else '{"rows": 1}')
    args = {"unknown target": ["brief", "moe.nothing", "--profile", str(prof)],
            "no profile": ["brief", "moe.experts"],
            "bad profile": ["brief", "moe.experts", "--profile", str(prof)],
            "not a repo": ["brief", "moe.experts", "--profile", str(prof)]}[case]
    code, out, err = kern(capsys, tmp_path if case == "not a repo" else repo, *args)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert {"unknown target": "its rows: mla.topk, moe.experts", "no profile": "kern profile main",
            "bad profile": "expected a profile JSON", "not a repo": "not a git repository"}[case] in err


def test_ceiling_text_says_which_figure_floors_use():
    assert briefs.ceiling_text(PROFILE).startswith("4.55 TB/s, the card's read ceiling")
    assert "under-read" in briefs.ceiling_text({"read_bandwidth_Bps": 3.98e12})
    assert "CPU" in briefs.ceiling_text({})


RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


def test_brief_says_which_column_its_time_came_from(tmp_path, capsys):
    """The loop's event-only profile (8339e6e) and kern profile's leave-one-out one (0f870c4),
    as committed in bench/results/."""
    repo = repo_with_main(tmp_path)
    events = str(RESULTS / "2026-12-04-h200-profile-128-loop-8339e6e.json")
    code, out, err = kern(capsys, repo, "brief", "moe.experts", "--profile", events)
    assert code == 0, err
    # not "73.4 ms of the 85.2 ms step (86.2 %)": its per-call events sum to 230 ms
    assert "takes about 62.121 ms of the 85.229 ms step at 128 rows (72.9% of the step), an estimate" in out
    assert "no leave-one-out column" in out and "2.04x its floor" in out and "events say 73.449 ms" in out
    free = str(RESULTS / "2026-12-03-h200-profile-128-0f870c4.json")
    code, out, err = kern(capsys, repo, "brief", "moe.combine", "--profile", free)
    assert code == 0, err
    assert ("`moe.combine` has no measurable time in the 92.595 ms step at 128 rows: leaving it out saved "
            "-0.215 ms, within the profile's noise (±0.914 ms") in out
    assert "Headroom: 0.000 ms" in out and "events say 6.029 ms" in out


def test_a_replayed_patch_on_a_row_the_profile_lacks_is_briefed_without_a_time():
    from harness.planning import target_of

    ops = PROFILE["profile"]["ops"]
    t = target_of("mla.nothing", ops, 92.0, [])
    assert briefs.time_text(t, 92.0, 128) == ("`mla.nothing` is not a row of the profile of main: no time "
                                              "was measured for it in the 92.000 ms step at 128 rows.")
