"""``kern report`` and ``kern status`` through the real CLI entry point."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from harness import cli
from harness.cli import report as report_cmd
from harness.ledger import Ledger, default_path

from . import sample

KERN_YAML = str(Path(__file__).resolve().parents[2] / "kern.yaml")


@pytest.fixture
def kern(capsys):
    """Run ``kern ARGS`` through the real entry point, output captured."""
    def run(repo: Path, *args: str):
        code = cli.main(["--repo", str(repo), "--config", KERN_YAML, *args])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def test_missing_ledger(kern, tmp_path):
    import subprocess

    code, out, err = kern(tmp_path, "status")  # not a repository: no loop ever ran there
    assert (code, out) == (2, "") and err == f"kern status: {tmp_path} is not a git repository: run " \
        f"kern in a clone of the repository or pass --repo DIR\n"
    code, out, err = kern(tmp_path, "report")
    assert (code, out) == (2, "") and "is not a git repository" in err
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    code, out, err = kern(tmp_path, "status")
    assert code == 0 and "no ledger at" in out and "kern loop" in out
    code, out, _ = kern(tmp_path, "status", "--json")
    assert json.loads(out)["exists"] is False
    code, out, err = kern(tmp_path, "report")
    assert code == 1 and out == "" and "no ledger at" in err and "kern try REV" in err
    assert not default_path(tmp_path).exists()  # reading never creates the ledger


def test_empty_ledger(kern, tmp_path):
    Ledger(default_path(tmp_path)).close()
    code, out, _ = kern(tmp_path, "report")
    assert code == 0 and out == "# Journey\n\nNo attempts yet.\n"
    code, out, _ = kern(tmp_path, "status")
    lines = out.splitlines()
    assert code == 0 and lines[-1] == "main       no score recorded yet"
    assert "phase      none yet" in out and "attempts   0" in out and "in flight  none" in out
    assert "budget     attempts 0 / 50 · tokens 0 / 2000000" in out


def test_report_formats(kern, tmp_path):
    sample.build(default_path(tmp_path)).close()
    code, out, _ = kern(tmp_path, "report")
    assert code == 0 and out == (Path(__file__).parent / "golden" / "journey.md").read_text()
    code, out, _ = kern(tmp_path, "report", "--lang", "zh")
    assert "| # | 尝试 | 分数变化 (ms) | 结果 |" in out
    code, out, _ = kern(tmp_path, "report", "--format", "json")
    assert json.loads(out)["phases"][1]["rows"][2]["result"] == "waiting on #13"
    code, out, _ = kern(tmp_path, "report", "--format", "csv")
    assert out.splitlines()[0].startswith("phase,#,attempt,score change (ms),result")
    dest = tmp_path / "out" / "journey.html"
    code, out, _ = kern(tmp_path, "report", "--format", "html", "--out", str(dest))
    assert code == 0 and out.startswith(f"wrote      {dest}")
    assert dest.read_text().count('<svg class="plot"') == 2


def test_report_html_folds_in_brief_judgment_and_diff(kern, tmp_path):
    """The page's files: the brief and the last judgment under runs/attempts/<n>/, the diff of
    base..commit from git when the repository has both commits; else it says why not."""
    import subprocess

    def git(*a):
        return subprocess.run(["git", "-C", str(tmp_path), *a], check=True, capture_output=True,
                              text=True).stdout.strip()

    git("init", "-q", "-b", "main")
    git("config", "user.email", "t@t")
    git("config", "user.name", "t")
    (tmp_path / "k.py").write_text("x = 1\n")
    git("add", "k.py")
    git("commit", "-q", "-m", "base")
    base = git("rev-parse", "HEAD")
    (tmp_path / "k.py").write_text("x = 2\ny = 3\n")
    git("commit", "-q", "-am", "faster")
    tip = git("rev-parse", "HEAD")
    led = Ledger(default_path(tmp_path))
    p = led.phase({"buckets": [2], "weights": [1]})
    n = led.new_attempt(title="faster", hypothesis="", target="t", backend="tuner", base_sha=base, phase_id=p)
    led.transition(n, "running")
    led.update(n, commit_sha=tip)
    led.transition(n, "judging")
    led.transition(n, "abandoned", reason="slower", delta_ms=1.0, ci_low=0.5, ci_high=1.5)
    m = led.new_attempt(title="gone", hypothesis="", target="t", backend="tuner", base_sha=base, phase_id=p)
    led.transition(m, "running")
    led.update(m, commit_sha="f" * 40)
    led.transition(m, "crashed", reason="x")
    led.close()
    d = tmp_path / "runs" / "attempts" / str(n)
    d.mkdir(parents=True)
    (d / "brief.md").write_text("# the brief of attempt one")
    for k, a_ms in ((1, 9.0), (2, 10.0)):  # the last judgment wins
        (d / f"judgment-{k}.json").write_text(json.dumps({"test": None, "bench": {
            "buckets": [2], "analysis": {"sides": {"A": {"buckets": {"2": {"median": a_ms}}},
                                                   "B": {"buckets": {"2": {"median": 11.0}}}},
                                         "ab": {"delta": {"buckets": {"2": {"delta": 1.0, "low": 0.5, "high": 1.5}}}}}}}))
    files = report_cmd.attempt_files(tmp_path, Ledger(default_path(tmp_path)).attempts())
    assert files[n].brief == "# the brief of attempt one" and "+y = 3" in files[n].diff
    assert files[n].judgment["bench"]["analysis"]["sides"]["A"]["buckets"]["2"]["median"] == 10.0
    assert files[m].diff is None and files[m].diff_missing == "commit ffffffffff is not in this repository"
    dest = tmp_path / "j.html"
    code, out, _ = kern(tmp_path, "report", "--format", "html", "--out", str(dest))
    page = dest.read_text()
    assert code == 0 and "# the brief of attempt one" in page and '<span class="add">+y = 3</span>' in page
    assert "10.000" in page and "[+0.50, +1.50]" in page
    assert "no diff: commit ffffffffff is not in this repository" in page


def test_report_plot(kern, tmp_path):
    Ledger(default_path(tmp_path)).close()
    code, out, err = kern(tmp_path, "report", "--plot", str(tmp_path / "p.png"))
    assert code == 1 and "nothing to plot" in err and not (tmp_path / "p.png").exists()
    sample.build(default_path(tmp_path)).close()
    png = tmp_path / "plots" / "journey.png"
    code, out, _ = kern(tmp_path, "report", "--plot", str(png))
    assert code == 0 and out == f"wrote      {png}  (15 attempts, 2 phase(s))\n"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = tmp_path / "journey.md"
    code, out, _ = kern(tmp_path, "report", "--plot", str(png), "--out", str(md))
    assert code == 0 and md.read_text() == (Path(__file__).parent / "golden" / "journey.md").read_text()


def test_status(kern, tmp_path):
    led = sample.build(default_path(tmp_path))
    led.close()
    code, out, _ = kern(tmp_path, "status")
    lines = out.splitlines()
    assert code == 0
    assert lines[-1] == "main       51.200 ms (phase 2, c00000000001, 2026-01-10T09:03:00+00:00)"
    assert lines[1].startswith("phase      2 · buckets 16,32,64,128,256 · context 262144")
    assert ("attempts   15: running 1 · waiting 1 · merged 3 · abandoned 7 · not done 1 · "
            "crashed 1 · timed out 1") in out
    assert "budget     attempts 15 / 50 · tokens 65000 / 2000000 · cost $0.65" in out
    assert "in flight  #13 running  moe.experts: MoE experts: persistent grid" in out
    code, out, _ = kern(tmp_path, "status", "--json")
    d = json.loads(out)
    assert d["main"]["score_ms"] == 51.2 and d["phase"]["id"] == 2
    assert d["by_state"]["merged"] == 3 and [a["#"] for a in d["in_flight"]] == [13]
    assert d["budget"]["tokens"] == {"used": 65000, "limit": 2000000}


def test_status_data_is_pure(tmp_path):
    led = sample.build(tmp_path / "l.sqlite")
    kw = dict(path="x", attempts=led.attempts(), phases=led.phases(),
              current_phase_id=led.current_phase_id(), scores=led.scores(), runs=led.runs(),
              run_usage=led.usage(1), budgets={"attempts": 50, "tokens": 10, "wall_hours": 72})
    now = datetime(2026, 1, 10, 20, 0, tzinfo=timezone.utc)
    d = report_cmd.status_data(**kw, now=now)
    assert d == report_cmd.status_data(**kw, now=now)
    assert d["budget"]["wall_hours"] == {"used": pytest.approx(11 + 59 / 60), "limit": 72}
    assert report_cmd.status_lines(d)[-1].startswith("main       51.200 ms")


def test_status_without_kern_yaml(kern, tmp_path, capsys):
    sample.build(default_path(tmp_path)).close()
    code = cli.main(["--repo", str(tmp_path), "--config", str(tmp_path / "absent.yaml"), "status"])
    out = capsys.readouterr().out
    assert code == 0 and "limits unknown" in out and "absent.yaml" in out
    assert out.splitlines()[-1].startswith("main       51.200 ms")
