"""Real candidate commits for gate tests: a temporary repository holding the fixture kernel
tree on ``main``, and one branch per candidate with one edit to a kernel source.

Each edit names the exact source text it replaces and fails loudly when that text is gone,
so a refactor of a kernel cannot silently turn a test into one that checks nothing.
"""
from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path

import git
import yaml

ROOT = Path(__file__).resolve().parents[2]

# The kernel tree the gates' tests and the reward-hack catalogue judge and edit: kernels/ as
# committed at this commit, not the working tree's. The journey's loop merges kernel commits
# into main (bench/journey/), so an edit anchored on today's source would fail on tomorrow's
# main; the gates under test are the working tree's. Its protected kernel files must equal the
# working tree's (tests/gates/test_fixture_tree.py): move the pin when one of them changes.
FIXTURE_KERNELS = "34997816ee1ffd6f4475349009f784c60ee20292"


def fixture_kernels(dest: Path) -> None:
    """Write ``FIXTURE_KERNELS``'s ``kernels/`` under ``dest`` (``dest/kernels/...``)."""
    got = subprocess.run(["git", "archive", "--format=tar", FIXTURE_KERNELS, "kernels"], cwd=ROOT,
                         capture_output=True)
    if got.returncode != 0:
        raise RuntimeError(
            f"tests: the gates' fixture kernel tree is kernels/ at commit {FIXTURE_KERNELS}, which "
            f"{ROOT} cannot read ({got.stderr.decode().strip()}); the tests need the project's "
            f"git history: clone it whole, not shallow")
    with tarfile.open(fileobj=io.BytesIO(got.stdout)) as tar:
        tar.extractall(dest, filter="data")


# kern.yaml overrides that run the small model on a GPU too, at the smallest tap and bench: the
# gates' GPU tests and the catalogue's GPU cases prove mechanics, which do not depend on the
# model's size (the GPU profile's full config would not fit an 80 GB card, and takes minutes)
GPU_SMALL = {"profiles.gpu.model": "small", "profiles.gpu.layout": "tp2", "profiles.gpu.context": 96,
             "profiles.gpu.test_context": 80, "profiles.gpu.test_rows": [1], "profiles.gpu.buckets": [2],
             "profiles.gpu.weights": [1], "profiles.gpu.test_steps": 1, "profiles.gpu.rounds": 1,
             "profiles.gpu.replays": 2}

# kern.yaml overrides for a judgment on the smallest tap: one visible row, one step, one bucket
ONE_ROW_TAP = {"profiles.cpu.test_rows": [1], "profiles.cpu.test_steps": 1, "profiles.cpu.buckets": [2],
               "profiles.cpu.weights": [1], "test.timeout_s": 300}


def make_repo(tmp: Path, overrides: dict | None = None, tree: bool = True) -> Path:
    """``tmp/repo``, a git repository on ``main`` holding kern.yaml (``overrides``:
    'section.key' -> value) and, with ``tree``, the fixture kernel tree (``FIXTURE_KERNELS``)."""
    repo = tmp / "repo"
    repo.mkdir(parents=True)
    if tree:
        fixture_kernels(repo)
    cfg = yaml.safe_load((ROOT / "kern.yaml").read_text())
    for path, value in (overrides or {}).items():
        node = cfg
        *head, last = path.split(".")
        for h in head:
            node = node[h]
        node[last] = value
    (repo / "kern.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    (repo / ".gitignore").write_text("runs/\n__pycache__/\n")
    r = git.Repo.init(repo, initial_branch="main")
    with r.config_writer() as c:
        c.set_value("user", "name", "test")
        c.set_value("user", "email", "test@kern")
    r.git.add("-A")
    r.git.commit("-m", "base")
    return repo


def context(repo: Path):
    """(the loop's Context, the settings) on ``repo``: its kern.yaml, its ledger, silent."""
    import torch

    from harness import ledger as L
    from harness.pipeline import Context
    from harness.settings import load
    from harness.worktrees import Repo

    settings = load(repo / "kern.yaml")
    cuda = torch.cuda.is_available()
    led = L.Ledger(L.default_path(repo))
    return Context(Repo(repo), settings.resolve(cuda), repo / "runs", cuda, led,
                   progress=lambda m: None, settings_digest=settings.digest), settings


def candidate(repo: Path, branch: str, edits: list[tuple[str, str, str]], message: str | None = None) -> str:
    """Commit ``edits`` [(path, old, new)] on a new branch from main; return its SHA."""
    r = git.Repo(repo)
    r.git.checkout("-q", "-B", branch, "main")
    for path, old, new in edits:
        p = repo / path
        text = p.read_text()
        if old not in text:
            raise AssertionError(f"candidate {branch}: {path} no longer contains {old!r}; "
                                 f"update the test's edit to the kernel's current source")
        p.write_text(text.replace(old, new, 1))
    r.git.add("-A")
    r.git.commit("-m", message or branch)
    sha = r.head.commit.hexsha
    r.git.checkout("-q", "main")
    return sha


def accuracy_verdicts(tmp: Path, overrides: dict, cases: dict, hidden: dict | None = None) -> dict:
    """{case: ``kern test`` report} for each of ``cases`` ({name: edits}) committed on its own
    branch of one repository (``overrides`` on kern.yaml) and judged against main, two at a
    time (the interpreter is CPU-bound; CI has two cores). Each judgment records main itself:
    a recording's tensors are deleted once no judgment holds it (gates/launch/disk.py), so two cases
    judged at once on the same touched ops share one, later ones record it again. While one
    judgment records or replays against a recording, another on the same recording waits for
    it (its lock, gates/accuracy.py); ``hidden`` ({case: ``Hidden``}) judges a case on a draw of
    its own, hence on a recording of its own that no other case waits for."""
    from concurrent.futures import ThreadPoolExecutor

    import torch

    from gates.accuracy import run_test
    from harness.pipeline import accuracy_request
    from harness.settings import load

    repo = make_repo(tmp, overrides)
    shas = {name: candidate(repo, name, edits) for name, edits in cases.items()}
    cuda = torch.cuda.is_available()
    cfg = load(repo / "kern.yaml").resolve(cuda)

    def judge(name, sha):
        return run_test(accuracy_request(cfg, repo, sha, "main", repo / "runs", cuda,
                                         hidden=(hidden or {}).get(name))).report

    with ThreadPoolExecutor(2) as pool:
        futures = {n: pool.submit(judge, n, s) for n, s in shas.items()}
        return {n: f.result() for n, f in futures.items()}


def tensors_left(reports) -> list:
    """The ``*.pt`` files under the runs/tap folder of ``kern test`` reports (none once every
    judgment has ended)."""
    taps = {Path(r["a_dir"]).parent for r in reports}
    return sorted(p for t in taps for p in t.rglob("*.pt"))


def side_dumps(root: Path, marker: str) -> list[dict]:
    """What candidates printed from inside a side: every ``MARKER {json}`` line of the logs
    under ``root``, each object with the log it came from."""
    out = []
    for log in sorted(root.rglob("*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith(marker + " "):
                out.append({"log": str(log), **json.loads(line[len(marker) + 1:])})
    return out


def reasons(verdict: dict) -> str:
    """An accuracy verdict's reasons on one line: the message of an assertion about it."""
    return " | ".join(verdict["reasons"])


def process_gone(pid: int) -> bool:
    """Whether no process ``pid`` exists any more (what a test's side left must be gone)."""
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False
