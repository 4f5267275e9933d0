"""Bad input through ``kern`` as a user types it: one line saying what is wrong and what is
expected, exit 2, and nothing written (no ledger, no runs/ folder)."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness import cli
from harness.ledger import default_path

from .test_loop_stops import light_repo

FORMS = "expected a duration: 90s, 20m, 1h or 1d (a whole number, then s, m, h or d)"


def kern(capsys, *args: str) -> tuple[int, str, str]:
    try:
        code = cli.main(list(args))
    except SystemExit as e:  # argparse refuses a flag's value itself
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def untouched(repo: Path) -> bool:
    return not (repo / "runs").exists() and not default_path(repo).exists()


@pytest.mark.parametrize("every", ["banana", "20", "20min", "1.5h", "1w", "-5m", "1 h"])
def test_every_takes_a_duration_and_nothing_else(every, tmp_path, capsys):
    repo = light_repo(tmp_path, {})
    code, out, err = kern(capsys, "--repo", str(repo), "loop", f"--every={every}", "--tick")
    assert code == 2 and out == ""
    assert err.splitlines()[-1] == f"kern loop: error: argument --every: {FORMS}, found {every!r}"
    assert untouched(repo)


@pytest.mark.parametrize("every,seconds", [("90s", 90), ("20m", 1200), ("1h", 3600), ("1d", 86400)])
def test_every_s_accepted_forms(every, seconds):
    assert cli.parser().parse_args(["loop", "--every", every]).every == seconds


def test_a_kern_yaml_every_that_is_no_duration_names_the_key_and_the_forms(tmp_path, capsys):
    repo = light_repo(tmp_path, {"loop.every": 20})
    code, out, err = kern(capsys, "--repo", str(repo), "loop", "--tick")
    assert code == 2 and out == "" and f"loop.every: {FORMS}, found 20" in err
    assert untouched(repo)


def test_a_revision_that_does_not_exist_is_one_line_and_leaves_no_ledger(tmp_path, capsys):
    repo = light_repo(tmp_path, {})
    code, out, err = kern(capsys, "--repo", str(repo), "try", "doesnotexist")
    assert (code, out) == (2, "") and err == (
        f"kern try: revision 'doesnotexist' is not a commit of {repo}: name a branch, tag or commit "
        f"SHA (git log --oneline lists them)\n")
    assert untouched(repo)
    code, out, err = kern(capsys, "--repo", str(repo), "try", "WORKTREE")
    assert code == 2 and err.startswith("kern try: WORKTREE: expected a commit") and untouched(repo)
    code, out, _ = kern(capsys, "--repo", str(repo), "status")
    assert code == 0 and "nothing has been tried in this repository yet" in out


def test_a_revision_step_cannot_find_is_one_line(tmp_path, capsys):
    repo = light_repo(tmp_path, {})
    code, out, err = kern(capsys, "--repo", str(repo), "step", "nope")
    assert (code, out) == (2, "") and len(err.splitlines()) == 1
    assert err.startswith("kern step: revision 'nope' is not a commit of ")


def test_a_directory_that_is_not_a_repository_is_one_line(tmp_path, capsys):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "kern.yaml").write_text((Path(__file__).resolve().parents[2] / "kern.yaml").read_text())
    for verb in (["try", "HEAD"], ["loop", "--tick"]):
        code, out, err = kern(capsys, "--repo", str(plain), *verb)
        assert (code, out) == (2, "") and err == (
            f"kern {verb[0]}: {plain} is not a git repository: run kern in a clone of the repository "
            f"or pass --repo DIR\n")
    assert untouched(plain)


@pytest.mark.parametrize("verb", [["status"], ["report"], ["try", "HEAD"], ["loop", "--tick"]])
def test_a_repo_that_does_not_exist_is_one_line(verb, tmp_path, capsys):
    missing = tmp_path / "nonexistent"
    code, out, err = kern(capsys, "--repo", str(missing), *verb)
    assert (code, out) == (2, "") and err == (
        f"kern: --repo {missing}: expected a directory (a clone of the repository), found nothing there\n")
    assert not missing.exists()


# ---- issue 38: every mistake a message and exit 2, never a traceback ---------------------------
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import sqlite3  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from harness import ledger as L  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def one_attempt(repo: Path, brief: str = "") -> None:
    with L.Ledger(default_path(repo)) as led:
        led.new_attempt(title="t", hypothesis="", target="moe.experts", backend="manual",
                        base_sha=None, phase_id=None)
    if brief:
        d = repo / "runs" / "attempts" / "1"
        d.mkdir(parents=True)
        (d / "brief.md").write_text(brief)


@pytest.mark.parametrize("argv,says", [
    (["show", "99999999999999999999999"], "argument N: expected an attempt number from 1 to "
                                          "9223372036854775807, found '99999999999999999999999'"),
    (["show", "0"], "expected an attempt number from 1 to"),
    (["loop", "--ticks", "0"], "argument --ticks: expected a number of ticks from 1 to"),
    (["loop", "--ticks", "-1"], "argument --ticks: expected a number of ticks from 1 to"),
    (["loop", "--wait-agents", "-5"], "argument --wait-agents: expected seconds to wait from 0 to 604800"),
    (["loop", "--wait-agents", "nan"], "argument --wait-agents: expected seconds to wait from 0"),
    (["bench", "--rounds", "0"], "argument --rounds: expected a number of rounds from 1 to"),
    (["bench", "--replays", "-1"], "argument --replays: expected a number of replays from 1 to"),
    (["step", "--replays", "0"], "argument --replays: expected a number of replays from 1 to"),
    (["step", "--rows", "0"], "argument --rows: expected comma-separated batch sizes, each a whole "
                              "number from 1 to 2147483647, found '0'"),
    (["step", "--rows", "16,x"], "argument --rows: expected comma-separated batch sizes"),
    (["profile", "--rows", "0"], "argument --rows: expected a batch size from 1 to"),
    (["test", "main", "--gpus", "0"], "argument --gpus: expected a number of processes from 1 to 8"),
    (["test", "main", "--replay-attempt", "-3"], "argument --replay-attempt: expected an attempt number"),
    (["cancel", "0"], "argument N: expected an attempt number from 1 to"),
])
def test_counts_and_numbers_out_of_range_are_refused_by_the_parser(argv, says, tmp_path, capsys):
    repo = light_repo(tmp_path, {})
    code, out, err = kern(capsys, "--repo", str(repo), *argv)
    assert code == 2 and out == "" and says in err.splitlines()[-1], err
    assert untouched(repo)


@pytest.mark.parametrize("every,says", [
    ("0s", "--every: expected at least loop.min_every (1s, kern.yaml) between ticks, found 0s: a "
           "shorter wait is a busy loop"),
    ("1000000d", "--every: expected at most 30d between ticks, found 1000000d (for rarer ticks, run "
                 "`kern loop --tick` from cron)"),
])
def test_an_interval_has_a_floor_from_kern_yaml_and_a_ceiling(every, says, tmp_path, capsys):
    repo = light_repo(tmp_path, {})
    code, out, err = kern(capsys, "--repo", str(repo), "loop", "--every", every, "--tick")
    assert (code, out, err) == (2, "", f"kern loop: {says}\n")
    assert untouched(repo)
    (tmp_path / "b").mkdir()
    (tmp_path / "c").mkdir()
    repo2 = light_repo(tmp_path / "b", {"loop.min_every": "2s", "loop.every": "1s"})
    code, out, err = kern(capsys, "--repo", str(repo2), "loop", "--tick")
    assert code == 2 and "loop.every: expected at least loop.min_every (2s, kern.yaml)" in err
    repo3 = light_repo(tmp_path / "c", {"loop.every": "0s"})
    code, out, err = kern(capsys, "--repo", str(repo3), "loop", "--tick")
    assert code == 2 and "loop.every: expected at least loop.min_every (1s" in err
    assert untouched(repo2) and untouched(repo3)


def test_the_demos_every_1s_stands(tmp_path):
    from harness.settings import interval_problem

    assert cli.parser().parse_args(["loop", "--every", "1s"]).every == 1.0
    assert interval_problem(1.0, 1.0) is None


def test_duplicate_keys_in_kern_yaml_name_the_key_and_both_lines(tmp_path, capsys):
    repo = light_repo(tmp_path, {})
    text = (repo / "kern.yaml").read_text()
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("loop:"))
    lines.insert(at + 1, "  every: 5m")
    (repo / "kern.yaml").write_text("\n".join(lines) + "\n")
    second = next(i for i, ln in enumerate(lines) if ln.startswith("  every: ") and i > at + 1) + 1
    for verb in (["doctor", "--offline"], ["loop", "--tick"]):
        code, out, err = kern(capsys, "--repo", str(repo), *verb)
        assert code == 2 and f"every key once, found loop.every on lines {at + 2} and {second}" in err


def test_output_files_are_checked_before_any_work(tmp_path, capsys):
    repo = light_repo(tmp_path, {})
    one_attempt(repo)
    r = ["--repo", str(repo), "report"]
    code, out, err = kern(capsys, *r, "--plot", str(tmp_path / "x.jpg"))
    assert (code, out) == (2, "") and err == (
        f"kern report: --plot {tmp_path / 'x.jpg'}: expected a file name ending in .png or .svg (the "
        f"format follows the suffix), found '.jpg'\n")
    code, out, err = kern(capsys, *r, "--out", str(tmp_path))
    assert code == 2 and err.startswith(f"kern report: --out {tmp_path}: expected a file to write, "
                                        f"found a folder")
    code, out, err = kern(capsys, *r, "--out", "/proc/version")
    assert code == 2 and "found a file of the kernel's proc" in err
    far = tmp_path / "elsewhere" / "deep" / "f.md"
    code, out, err = kern(capsys, *r, "--out", str(far))
    assert code == 2 and "kern makes folders only inside the repository" in err and "--mkdir" in err
    assert not (tmp_path / "elsewhere").exists()
    code, out, err = kern(capsys, *r, "--out", str(far), "--mkdir")
    assert code == 0 and far.read_text().startswith("#")
    code, out, err = kern(capsys, *r, "--out", str(repo / "notes" / "j.md"))  # inside: made
    assert code == 0 and (repo / "notes" / "j.md").exists()
    for fmt in ("png", "svg"):
        code, out, err = kern(capsys, *r, "--plot", str(tmp_path / f"j.{fmt}"))
        assert code == 0, err
    assert (tmp_path / "j.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in (tmp_path / "j.svg").read_bytes()[:1000]


def test_config_naming_a_folder_is_a_message(tmp_path, capsys):
    repo = light_repo(tmp_path, {})
    one_attempt(repo)
    folder = str(tmp_path)
    code, out, err = kern(capsys, "--repo", str(repo), "--config", folder, "doctor", "--offline")
    assert code == 2 and f"kern.yaml: expected a file at {folder}, found a folder" in err
    code, out, err = kern(capsys, "--repo", str(repo), "--config", folder, "status")
    assert code == 0 and f"limits unknown: kern.yaml: expected a file at {folder}, found a folder" in out
    code, out, err = kern(capsys, "--repo", str(repo), "--config", folder, "report")
    assert code == 0 and "Traceback" not in err


def test_a_ledger_missing_a_table_or_damaged_is_told_apart_and_nothing_is_deleted(tmp_path, capsys):
    repo = light_repo(tmp_path, {})
    one_attempt(repo)
    path = default_path(repo)
    con = sqlite3.connect(path)
    con.execute("DROP TABLE events")
    con.commit()
    con.close()
    for verb in (["status"], ["show", "1"]):
        code, out, err = kern(capsys, "--repo", str(repo), *verb)
        assert (code, out) == (2, "") and "no such table: events" in err, err
        assert "lacks part of a kern-loop ledger" in err and ".recover" in err and "aside" not in err
    path.write_bytes(b"garbage, not SQLite " * 100)
    for verb in (["status"], ["report"], ["show", "1"]):
        code, out, err = kern(capsys, "--repo", str(repo), *verb)
        assert (code, out) == (2, "") and "is damaged: file is not a database" in err, err
        assert f"`sqlite3 {path} .recover | sqlite3 recovered.sqlite`" in err
        assert "aside" not in err and "Traceback" not in err


def test_a_closed_pipe_ends_quietly(tmp_path):
    repo = light_repo(tmp_path, {})
    one_attempt(repo, brief="x" * 2_000_000)  # more than a pipe holds
    r = subprocess.run(["bash", "-c", f"set -o pipefail; {sys.executable} -m harness.cli --repo "
                                      f"{repo} show 1 --json | head -c 10"],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (r.returncode, r.stdout, r.stderr) == (141, '{"number":', "")


def as_user(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    """``cmd`` as an unprivileged user (nobody) when this is root: root writes through any mode."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": "/tmp"}
    pre = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
    return subprocess.run(pre + cmd, capture_output=True, text=True, env=env, **kw)


def test_a_read_only_runs_folder_is_read_and_never_written(tmp_path):
    """status, report and show read a ledger this user may not write (SQLite's mode=ro), as it
    is; try and loop say runs/ is not writable (who: the user; expected vs got) before importing
    torch or writing anything."""
    base = Path("/tmp") / f"kern-ro-{os.getpid()}"  # pytest's tmp_path is root's alone (0700)
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir()
    try:
        repo = light_repo(base, {})
        one_attempt(repo)
        git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
        subprocess.run(git + ["switch", "-q", "-c", "change"], cwd=repo, check=True)
        (repo / "note.txt").write_text("x\n")
        subprocess.run(git + ["add", "-A"], cwd=repo, check=True)
        subprocess.run(git + ["commit", "-qm", "change"], cwd=repo, check=True)
        if os.geteuid() == 0:
            base.chmod(0o755)
            subprocess.run(["chown", "-R", "65534:65534", str(repo)], check=True)
            subprocess.run(["chown", "-R", "0:0", str(repo / "runs")], check=True)
        for p in [repo / "runs", *(repo / "runs").rglob("*")]:
            p.chmod(0o555 if p.is_dir() else 0o444)
        kern_ = [sys.executable, "-m", "harness.cli", "--repo", str(repo)]
        for verb in (["status"], ["report"], ["show", "1"]):
            r = as_user(kern_ + verb)
            assert r.returncode == 0 and "Traceback" not in r.stderr, (verb, r.stderr)
        assert "t" in as_user(kern_ + ["show", "1"]).stdout
        for verb in (["try", "change"], ["loop", "--tick"]):
            r = as_user(kern_ + verb)
            assert r.returncode == 2 and "is not writable by this user" in r.stderr, (verb, r.stderr)
            assert "Expected the folder writable" in r.stderr and "The user fixes it" in r.stderr
            assert "Traceback" not in r.stderr
        assert sorted(p.name for p in (repo / "runs").iterdir()) == ["attempts", "ledger.sqlite"] or \
            sorted(p.name for p in (repo / "runs").iterdir()) == ["ledger.sqlite"]
    finally:
        for p in [base, *base.rglob("*")]:
            try:
                p.chmod(0o755)
            except OSError:
                pass
        shutil.rmtree(base, ignore_errors=True)
