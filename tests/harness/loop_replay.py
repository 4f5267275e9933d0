"""The replay loop of the slow loop tests (test_loop_*.py): a temporary repository whose SiTU
launches ``moe.situ.passes`` times (deliberate extra work, so that faster and slower candidates
are unmistakable even on the interpreter), patches written as plain diffs, and the loop with
the real gates run over them. Each module judges few patches (one fixture each, at most about
5 minutes on the idle 2-core CI machine); ``--dist loadfile`` spreads the modules over the two
workers.
"""
from __future__ import annotations

from pathlib import Path

import git

from harness.orchestrator import Orchestrator
from tests.gates.candidates import context, make_repo

SITU = "kernels/k31/moe/situ.py"
SITU_TUNABLES = "kernels/k31/moe/tunables.py"
LAUNCH = "    _situ_kernel[(cdiv(rows, block_r), cdiv(inter, block))](\n"
LOOP_LINE = "    for _ in range(tunables.get(\"moe.situ.passes\")):  # repeated work\n"
BASE_PASSES = 120  # moe.situ.passes in slow_base: the work the patches remove or add


def slow_base(repo: Path, passes: int = BASE_PASSES) -> None:
    """Commit a base whose SiTU launches ``moe.situ.passes`` (``passes``) times: work to find."""
    p = repo / SITU
    s = p.read_text()
    assert LAUNCH in s, "update the test: moe/situ.py's launch line changed"
    s = s.replace(LAUNCH, LOOP_LINE + "     " + LAUNCH.lstrip(" "))
    p.write_text(s)
    t = repo / SITU_TUNABLES
    ts = t.read_text()
    assert "TUNABLES = {" in ts
    t.write_text(ts.replace("TUNABLES = {", f"TUNABLES = {{\n    \"moe.situ.passes\": ({passes}, (1, {BASE_PASSES})),", 1))
    r = git.Repo(repo)
    r.git.add("-A")
    r.git.commit("-m", "base with repeated SiTU work")


def patch(repo: Path, name: str, edits: list, folder: Path, subject: str, target: str | None = None) -> None:
    """Write a plain diff (``subject`` on its first line, then ``Target: target`` when given)
    made from ``edits`` on main."""
    for path, old, new in edits:
        p = repo / path
        s = p.read_text()
        assert old in s, f"{name}: {path} lacks {old!r}"
        p.write_text(s.replace(old, new, 1))
    diff = git.Repo(repo).git.diff()
    git.Repo(repo).git.checkout("--", ".")
    (folder / name).write_text(f"{subject}\n" + (f"\nTarget: {target}\n\n" if target else "") + f"{diff}\n")


def passes_patch(repo: Path, name: str, folder: Path, passes: int, subject: str, target: str | None = None) -> None:
    """A patch that makes the base's SiTU launch ``passes`` times."""
    patch(repo, name, [(SITU, LOOP_LINE, f"    for _ in range({passes}):  # {subject}\n")], folder,
          subject, target=target)


# loop mechanics, not gate coverage (tests/gates has the awkward sizes): one small bucket. The
# tap runs the test rows and every bucket: [1, 2]. The A/B is 8 rounds (12 before, below) of
# one replay per visit, so each A replay is paired with the B replay next to it in time (A B B
# A) and a load swing on the shared CI machine mostly hits both of a pair. Measured (kern step --rows 2,
# load average 1.5): the base's step 2028 ms, SiTU once 899 ms (0.44 of it; 29 ms a pass).
# Under one busy loop and two bursty ones (plus this machine's other users, load average
# 4-8), 'once' against the base at the former 2 rounds x 3 replays: faster, faster, within
# noise (band 34 %, interval's high end -33.8 %: issue 18); at 12 x 1: faster twice (band 23
# and 19 %, high end -51.3 and -52.8 %); '120 times' slower (band 10.5 %, low end +89 %).
# Simulated on that load with one more bursty process (tests/gates/cpu_load.py, 1000 A/Bs
# each): at 2 x 3 'once' is faster in 330, 'twice' in 325; at 12 x 1 'once' in 1000, 'twice'
# in 998, '120 times' slower in 1000. The cost: 24 timed replays a side instead of 12.
# A gain above bench.reverify_pct is merged only after a re-measurement in alternating fresh
# processes (bench.reverify_rounds = 1 round: two visits a side, a process start of about 8 s
# between them, measured 42 s for the whole re-measurement). Against a base of 40 passes that
# shape called 'once' within noise in 141 of 1000 simulated A/Bs, and in CI (2026-12-01) both
# 'once' and 'twice' ended 'scorer check'; against 80 passes in 10 of 1000 (one busy, three
# bursty) and 1 of 1000 (one busy, two bursty: a busy loop beside the other worker). '200
# times' kept the slower patch as far above the base as '120 times' was above 40. (Those were
# the interpreter's costs before gates/interpreter.py; today's base and slower patch, and why,
# are under STEP_MS below.) At today's costs 8 rounds decide as 12 did: 'once', 'twice' and the
# slower patch each 1000 of 1000 simulated A/Bs (also with two busy and five bursty processes;
# 6 rounds: 999), for two thirds of the A/B's time, the largest part of a judgment here (12
# rounds made the merge's fixture as long as the CI allows a test: about 5 minutes idle).
LIGHT = {"profiles.cpu.test_rows": [1], "profiles.cpu.buckets": [2], "profiles.cpu.weights": [1],
         "profiles.cpu.rounds": 8, "profiles.cpu.replays": 1}
# kern step --rows 2 with moe.situ.passes = 1 and = 40 (ms): the model's rest and a pass.
# Measured 2026-12-03 on this tree once the interpreter keeps its language patched
# (gates/interpreter.py), the fastest of 3 interleaved runs of 8 replays each: 985.5 and
# 1927.1 ms (in the same runs without it: 1801.1 and 2791.7, a pass 25.4 ms). The rest got
# 1.8x cheaper and a pass barely, so the base's work is a smaller share of its step than the
# 869.5 / 28.96 ms measured earlier made it: against 80 passes the re-measurement of 'once'
# came out within noise in 19 of 1000 (one busy, two bursty: 995 required) and of 'twice' in
# 52 of 1000 (three bursty: 980). 120 passes: 2 and 8 of 1000. The slower patch was 260
# passes against 120 (at 200 it was slower in 979 of 1000, not 997): its A/B alone, 12 rounds
# of a 3.9 s and a 7.2 s step, cost about 350 s of CPU, more than the CI's 5 minutes a test. It
# is judged against a base of one pass instead (LIGHT_BASE_PASSES: nothing there is to be
# found faster): 60 passes against 1 is 2.4x its step (260 against 120: 1.9x), slower in 1000
# of 1000 simulated A/Bs (30 passes: 998), and its A/B costs a third.
# Since the sides skip the interpreter's discarded overflow checks (gates/interpreter.py,
# 2026-12-05) a step's CPU time fell by about 28 % for the rest and 17 % for a pass (process
# time, 2 rows, load average 5), so the patches' ratios to their bases grew ('once' 3.0x ->
# 3.3x): the shapes simulated at 695 and 20.0 ms decide as at the values below ('once',
# 'twice', slower: 1000 of 1000; the re-measurement at three bursty processes 996).
STEP_MS, PASS_MS = 961.4, 24.14
LIGHT_BASE_PASSES = 1  # the base of the patches that lose (slower, accuracy, scope, crashed)
SLOWER_PASSES = 60  # the slower patch, against LIGHT_BASE_PASSES
REVERIFY_GAP_S = 8.0  # a side switch in alternating processes: a process start (about 8 s)


def replay_repo(tmp: Path, passes: int, concurrency: int) -> tuple[Path, Path]:
    """(repository, its patch folder): LIGHT, the replay backend with ``concurrency`` agents,
    on a base whose SiTU launches ``passes`` times."""
    patches = tmp / "patches"
    patches.mkdir()
    repo = make_repo(tmp, {**LIGHT, "agent.backend": "replay", "agent.replay_dir": str(patches),
                           "loop.concurrency": concurrency, "test.timeout_s": 150})
    slow_base(repo, passes)
    return repo, patches


def replay_loop(repo: Path, spawning_ticks: int, between=None):
    """The loop on ``repo``: ``spawning_ticks`` ticks that judge what is ready and start
    agents (waiting for them), then one that only judges. ``between()`` runs before that
    last tick. Returns the loop's Context."""
    ctx, settings = context(repo)
    orch = Orchestrator(ctx)
    for _ in range(spawning_ticks):
        orch.tick(wait_for_agents=120)
    if between is not None:
        between()
    orch.tick(spawn=False)
    return ctx
