"""``kern loop --demo``: the deliberately slow start and the demo's settings (pure), the margins of
its A/Bs on a loaded 2-core machine (simulated by tests/gates/cpu_load.py), and README command 1
itself (slow): a journey with a merge, an accuracy abandon and a slower or within-noise attempt,
each the gates' own verdict, in under 5 minutes on a 2-core machine."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import git
import pytest
import yaml

from harness import demo
from harness.agents.tuner import candidates, load_tree
from harness.settings import load, validate
from tests.gates.candidates import ROOT
from tests.gates.cpu_load import classifications


def _sources() -> dict:
    return {path: (ROOT / path).read_text() for path, _, _ in demo.DEVICE}


def test_the_slow_start_repeats_the_experts_and_declares_the_setting():
    out = demo.start_edits(_sources())
    assert 'for _ in range(tunables.get("moe.experts.passes")):' in out[demo.EXPERTS]
    n = demo.START_PASSES
    assert f'"moe.experts.passes": ({n}, (0, 1, {n})),' in out[demo.MOE_TUNABLES]
    # the only lines removed: the experts' call, which comes back inside the loop
    import difflib

    for path, text in _sources().items():
        diff = list(difflib.ndiff(text.splitlines(), out[path].splitlines()))
        gone = [d[2:] for d in diff if d.startswith("- ")]
        added = [d[2:] for d in diff if d.startswith("+ ")]
        if path == demo.EXPERTS:
            assert gone == [demo._CALL.rstrip("\n")] and "    " + gone[0] in added, diff
        else:
            assert gone == [] and len(added) == 3, diff


def test_the_slow_start_names_who_acts_when_the_tree_moved():
    texts = _sources()
    texts[demo.EXPERTS] = texts[demo.EXPERTS].replace("run_experts(sh, ExpertTiles", "run(sh, ExpertTiles")
    with pytest.raises(demo.DemoError) as e:
        demo.start_edits(texts)
    assert demo.EXPERTS in str(e.value) and "update" in str(e.value) and "harness/demo.py" in str(e.value)
    with pytest.raises(demo.DemoError) as e:
        demo.start_edits({demo.EXPERTS: texts[demo.EXPERTS]})
    assert demo.MOE_TUNABLES in str(e.value) or demo.EXPERTS in str(e.value)


def test_the_demo_settings_are_valid_and_change_only_their_keys():
    cfg = yaml.safe_load((ROOT / "kern.yaml").read_text())
    before = yaml.safe_dump(cfg)
    out = demo.demo_settings(cfg)
    assert validate(out) == []
    assert out["profiles"]["cpu"]["rounds"] == demo.SETTINGS["profiles.cpu.rounds"]
    assert out["agent"]["tunables"] == ["moe.experts.passes", "*"]
    assert out["profiles"]["gpu"] == cfg["profiles"]["gpu"] and out["test"] == cfg["test"]
    assert yaml.safe_dump(cfg) == before  # the input is left as it was


def test_the_demo_repository_starts_slow_and_the_tuner_tries_the_setting_first(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    import shutil

    shutil.copytree(ROOT / "kernels", src / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "kern.yaml", src / "kern.yaml")
    repo = demo.make_repo(src, "stamp")
    assert repo == src / "runs" / "demo" / "stamp"
    log = [c.summary for c in git.Repo(repo).iter_commits("main")]
    assert log == ["demo: a deliberately slow start", "demo: the kernel tree at start"]
    assert not git.Repo(repo).is_dirty(untracked_files=True)
    s = load(repo / "kern.yaml")
    table = {n: (t.value, t.choices) for n, t in load_tree(repo).items()}
    n = demo.START_PASSES
    assert table["moe.experts.passes"] == (n, (0, 1, n))
    prefer = s.resolve(False).agent.tunables
    # whatever the seed: the slow start -> 1 first; from 1, the two other moves before any other tunable
    for seed in range(30):
        first = candidates(table, [], "moe.experts", seed, prefer)[0]
        assert (first.name, first.new) == ("moe.experts.passes", 1)
        table1 = {**table, "moe.experts.passes": (1, (0, 1, n))}
        tried = ["tunable moe.experts.passes=1: merged"]
        nxt = candidates(table1, tried, "moe.experts", seed, prefer)[:2]
        assert {(c.name, c.new) for c in nxt} == {("moe.experts.passes", 0), ("moe.experts.passes", n)}


# The demo's step at 2 rows with the experts run once, and one more run of them: the profile of
# README command 1's main, then at 3 runs, in the slow suite on 2026-12-05 (main 79c93ac's
# tree, both workers busy): step 1705.069 ms at 3 runs, of which
# moe.experts' events 1225.050 ms, so 408.35 ms a run and 888.37 ms for the step at one run.
# (2026-12-01 it was 869.5 ms and 0.84 of it a run: the experts kernels have got faster since.)
STEP_MS = 888.37
PASS_MS = 408.35


@pytest.mark.slow  # 3000 simulated A/Bs: a minute on the 2-core machine
def test_the_demo_ab_shape_stays_decided_on_a_loaded_machine():
    """The demo's A/B of 4 -> 1 (and of 1 -> 4) simulated beside one busy and one bursty
    process (the CI's other slow worker and more): 'faster' in at least 997 of 1000 (resp.
    'slower' or 'within noise', the demo's third kind, in all), and the re-measurement of the
    large gain (bench.reverify_rounds, sides in alternating processes) 'faster' in 990."""
    cfg = load(ROOT / "kern.yaml").resolve(False).bench
    rounds, replays = demo.SETTINGS["profiles.cpu.rounds"], demo.SETTINGS["profiles.cpu.replays"]
    slow, fast = STEP_MS + (demo.START_PASSES - 1) * PASS_MS, STEP_MS
    load_ = dict(steady=1, bursty=1)
    seen = classifications(3, 1000, slow, fast, rounds, replays, cfg, **load_)
    assert seen.get("faster", 0) >= 997, seen
    seen = classifications(4, 1000, fast, slow, rounds, replays, cfg, **load_)
    assert seen.get("slower", 0) + seen.get("within noise", 0) == 1000, seen  # the third kind
    again = classifications(5, 1000, slow, fast, cfg.reverify_rounds, replays, cfg,
                            gap_s=4.0, **load_)
    assert again.get("faster", 0) >= 990, again


def _children_cpu() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _outcomes(repo: Path) -> list[tuple]:
    from harness import ledger as L

    with L.Ledger(L.default_path(repo)) as led:
        return [(a.number, a.title, a.state, a.reason) for a in led.attempts()]


@pytest.mark.slow
def test_readme_command_1_shows_every_kind_of_outcome_in_time(tmp_path):
    """README command 1's `kern loop` (after the install) with its flags as the README has them:
    a merge, an accuracy abandon and a slower or within-noise attempt, using less CPU than two
    cores give in 5 minutes."""
    readme = (ROOT / "README.md").read_text()
    m = re.search(r"\.venv/bin/kern (loop --demo[^\n`]*)", readme)
    assert m, "README command 1 no longer runs `kern loop --demo`: update this test"
    args = m.group(1).split()
    src = tmp_path / "src"
    src.mkdir()
    import shutil

    shutil.copytree(ROOT / "kernels", src / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "kern.yaml", src / "kern.yaml")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0, cpu0 = time.monotonic(), _children_cpu()
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "--repo", str(src), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    took, cpu = time.monotonic() - t0, _children_cpu() - cpu0
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    repo = Path(re.search(r"demo repository: (\S+)", proc.stdout).group(1))
    rows = _outcomes(repo)
    kinds = {(state, reason) for _, _, state, reason in rows}
    assert ("merged", None) in kinds, rows
    assert ("abandoned", "accuracy") in kinds, rows
    assert kinds & {("abandoned", "slower"), ("abandoned", "within noise")}, rows
    assert all(t.startswith("tune: moe.experts.passes") for _, t, _, _ in rows), rows
    page = re.search(r"journey +(\S+journey\.html)", proc.stdout)
    assert page and Path(page.group(1)).read_text().count("<tr") >= 1 + len(rows), proc.stdout[-2000:]
    # the wall time depends on what else runs (in CI: the other slow worker), the work does
    # not: the demo's processes may use at most what two cores give in 5 minutes. README
    # command 1's wall time on an idle machine is the acceptance measurement, taken by hand.
    assert cpu < 600, (f"the demo used {cpu:.0f} s of CPU in {took:.0f} s wall (expected under 600 s: "
                       f"two cores for 5 minutes; load average now {os.getloadavg()[0]:.1f}); "
                       f"tail:\n{out[-2000:]}")
