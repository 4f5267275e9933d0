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
