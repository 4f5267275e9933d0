"""``kern try`` on a disk that fills, with real sides (CPU, small config, Triton interpreter):
``runs/tap`` is a small tmpfs in a mount namespace of the test's own (``unshare -Urm``: a user
namespace maps this user to root there, so it may mount; the CI machine allows it like this
one). Each case ends with a named reason and the side's last words in ``kern show``, and leaves
no ``*.pt`` under ``runs/tap``:

* a disk too small for one judgment: stopped before any side starts (``environment: disk``);
* main's side killed while it saves its recording (a crash, its last log lines);
* main's side's save meeting a full disk (ENOSPC: torch's writer says only ``unexpected
  pos``; the launcher finds the folder's disk full: ``disk full``), as on the H200 when
  earlier recordings had filled it.

Main's own tree misbehaves here (its commit is no candidate: no scope gate reads it), so the
candidate is a comment and the side that fails is main's recording, as in issue 34.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness import cli
from harness import ledger as L
from tests.gates.candidates import ROOT, candidate, make_repo

# slow: after the unit tests (.ci/run), on one of the two workers
pytestmark = pytest.mark.slow

SITU = "kernels/k31/moe/situ.py"
COMMENT = (SITU, "import torch\n", "import torch\n# a comment that changes no instruction\n")
# at import, in main's side: torch.save writes the start of its file, then the process
# is killed (SIGKILL: no handler runs)
KILLED = ("import torch\n", "import torch\n"
          "import os as _os, signal as _signal\n\n\n"
          "def _dies_while_saving(obj, f, *args, **kwargs):\n"
          "    with open(f, 'wb') as out:\n"
          "        out.write(b'PK' + bytes(4096))\n"
          "        out.flush()\n"
          "        print('saving', f, file=__import__('sys').stderr, flush=True)\n"
          "        _os.kill(_os.getpid(), _signal.SIGKILL)\n\n\n"
          "torch.save = _dies_while_saving\n")
# at import: fill the disk of the side's own folder, leaving a few pages for its log, so the
# logits it records later do not fit
FILLS = ("import torch\n", "import torch\n"
         "import os as _os, sys as _sys\n\n\n"
         "def _fill():\n"
         "    where = _os.path.dirname(_sys.argv[_sys.argv.index('--out') + 1])\n"
         "    st = _os.statvfs(where)\n"
         "    if st.f_blocks * st.f_frsize > (64 << 20):\n"
         "        return  # only the test's small tmpfs (runs/tap), never the machine's disk\n"
         "    path = _os.path.join(where, 'filler.bin')\n"
         "    with open(path, 'wb', buffering=0) as f:\n"
         "        try:\n"
         "            while True:\n"
         "                f.write(bytes(1 << 16))\n"
         "        except OSError:\n"
         "            pass\n"
         "    _os.truncate(path, max(0, _os.path.getsize(path) - (24 << 10)))\n\n\n"
         "_fill()\n")
# the smallest tap with logits larger than what FILLS leaves (31 rows x 512 floats)
SETTINGS = {"profiles.cpu.test_rows": [1, 3, 17, 8], "profiles.cpu.test_steps": 1,
            "profiles.cpu.buckets": [2], "profiles.cpu.weights": [1], "test.timeout_s": 300,
            "test.snapshot_budget_mb": 1}


def _unshare() -> str | None:
    """Why a tmpfs cannot be mounted in a namespace of this test's own, or None."""
    if not shutil.which("unshare"):
        return "no unshare(1) on this machine (util-linux)"
    r = subprocess.run(["unshare", "-Urm", "sh", "-c", "d=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs $d"],
                       capture_output=True, text=True)
    return None if r.returncode == 0 else f"unshare -Urm + mount -t tmpfs refused: {r.stderr.strip()}"


def judged_repo(tmp: Path, main_edit=None) -> tuple[Path, str]:
    """A repository whose main carries ``main_edit`` (path, old, new), and a candidate on it
    that changes a comment: (repository, the candidate's SHA)."""
    why = _unshare()
    if why:
        pytest.skip(why)
    repo = make_repo(tmp, SETTINGS)
    if main_edit:
        path, old, new = main_edit
        p = repo / path
        p.write_text(p.read_text().replace(old, new, 1))
        subprocess.run(["git", "commit", "-qam", "main's tree misbehaves"], cwd=repo, check=True)
    return repo, candidate(repo, "cand", [COMMENT])


def try_on_tmpfs(repo: Path, rev: str, size: str) -> tuple[int, str, list[str]]:
    """``kern try REV`` with runs/tap on a tmpfs of ``size``: (exit code, stderr, the *.pt
    files left under runs/tap when it ended, seen inside the namespace)."""
    tap = repo / "runs" / "tap"
    shutil.rmtree(tap, ignore_errors=True)
    tap.mkdir(parents=True)
    script = ('mount -t tmpfs -o size="$1" tmpfs "$2/runs/tap" || exit 97\n'
              '"$3" -m harness.cli --repo "$2" try "$4"; rc=$?\n'
              'echo "--- left:" >&2; find "$2/runs/tap" -name "*.pt" >&2\n'
              'exit $rc\n')
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(["unshare", "-Urm", "sh", "-c", script, "sh", size, str(repo), sys.executable, rev],
                       capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode != 97, r.stderr
    err, _, left = r.stderr.rpartition("--- left:\n")
    return r.returncode, err, [ln for ln in left.splitlines() if ln.strip()]


def show(repo: Path, number: int, capsys) -> tuple[list[str], dict]:
    capsys.readouterr()
    assert cli.main(["--repo", str(repo), "show", str(number)]) == 0
    text = capsys.readouterr().out.splitlines()
    assert cli.main(["--repo", str(repo), "show", str(number), "--json"]) == 0
    return text, json.loads(capsys.readouterr().out)


def last_attempt(repo: Path) -> L.Attempt:
    with L.Ledger(L.default_path(repo)) as led:
        return led.attempts()[-1]


def test_a_disk_too_small_for_one_judgment_stops_before_any_side(tmp_path, capsys):
    repo, sha = judged_repo(tmp_path)
    code, err, left = try_on_tmpfs(repo, sha, "160k")
    assert code == 4, err
    assert "kern try: stopped: environment: disk: " in err and "has " in err and "bytes free" in err
    a = last_attempt(repo)
    assert a.state == L.CRASHED and a.reason.startswith(f"environment: disk: {repo / 'runs' / 'tap'} has ")
    assert left == [] and not list((repo / "runs" / "tap").iterdir())  # no side started
    text, view = show(repo, a.number, capsys)
    assert any(ln.startswith("attempt    #") and "environment: disk" in ln for ln in text)


def test_a_side_killed_while_it_saves_is_a_crash_with_its_last_words(tmp_path, capsys):
    repo, sha = judged_repo(tmp_path, (SITU, *KILLED))
    code, err, left = try_on_tmpfs(repo, sha, "64m")
    assert code == 1, err
    a = last_attempt(repo)
    assert (a.state, a.reason) == (L.CRASHED, "kern test: main's side ended with crash (signal SIGKILL)")
    words = a.gate.last_words
    assert words.side == "A record" and words.kind == "crash (signal SIGKILL)", words
    assert words.last.startswith("saving ") and words.last.endswith("logits_a.pt"), words
    assert "-failed-" in words.log and "%f" not in words.log and words.log.endswith("record.log")
    assert left == []
    text, view = show(repo, a.number, capsys)
    assert f"last words A record ended with {words.kind} (log {words.log})" in text
    assert view["last_words"][0]["lines"][-1] == words.last


def test_a_side_whose_save_meets_a_full_disk_ends_named_with_its_last_words(tmp_path, capsys):
    repo, sha = judged_repo(tmp_path, (SITU, *FILLS))
    code, err, left = try_on_tmpfs(repo, sha, "40m")
    assert code == 4, err
    assert "kern try: stopped: environment: disk: accuracy gate's A record ran out of disk space writing " in err
    a = last_attempt(repo)
    assert a.state == L.CRASHED and a.reason.startswith("environment: disk: accuracy gate's A record ran out")
    words = a.gate.last_words
    assert words.kind == "disk full" and "unexpected pos" in " ".join(words.lines), words
    assert words.last.startswith("environment: disk: no space left on the disk holding "), words
    assert left == []
    text, view = show(repo, a.number, capsys)
    assert f"last words A record ended with disk full (log {words.log})" in text
    assert view["last_words"] == [words.to_dict()]
