"""bench/detached.sh: a command started in one device call is waited for, and its rc read, in a
later one (bench/gpu_evidence.sh's try-, loop- and judging-start/-wait)."""
import pathlib
import subprocess
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _sh(tmp_path, script: str) -> str:
    env = {"PATH": "/usr/bin:/bin", "DETACHED_DIR": str(tmp_path), "DETACHED_POLL_S": "0.1"}
    return subprocess.run(["bash", "-c", f"set -u; source {ROOT}/bench/detached.sh; {script}"],
                          env=env, capture_output=True, text=True, check=True, timeout=60).stdout


def test_a_command_that_outlives_its_start_is_waited_for_and_its_rc_read(tmp_path):
    out = _sh(tmp_path, "detached_start job 2 'sleep 1.5; echo said; exit 3'; detached_state job 'the job'")
    assert out.startswith("the job: still running after ")
    # the starting shell has ended; the command goes on in its own session
    assert _sh(tmp_path, "detached_wait job 100; detached_state job 'the job'").startswith("the job: rc 3 after ")
    assert (tmp_path / "job.log").read_text() == "said\n"


def test_a_quick_command_ends_within_its_start_and_a_restart_forgets_the_old_rc(tmp_path):
    assert _sh(tmp_path, "detached_start job 50 'true'; detached_done job && echo done") == "done\n"
    assert (tmp_path / "job.rc").read_text() == "0\n"
    t0 = time.monotonic()
    out = _sh(tmp_path, "detached_start job 1 'sleep 2'; detached_done job || echo running")
    assert out == "running\n" and time.monotonic() - t0 < 2  # the old rc no longer reads as ended
    assert _sh(tmp_path, "detached_wait job 100; cat $DETACHED_DIR/job.rc") == "0\n"


def test_the_evidence_script_parses_and_starts_its_detached_phases_through_the_helpers():
    subprocess.run(["bash", "-n", str(ROOT / "bench/gpu_evidence.sh")], check=True)
    text = (ROOT / "bench/gpu_evidence.sh").read_text()
    assert "setsid" not in text  # every detached phase goes through bench/detached.sh
    for name in ("try", "loop", "judging", "chain"):
        assert f"detached_start {name} " in text and f"detached_wait {name} " in text


def test_a_chain_runs_its_phases_in_order_each_with_its_own_out_and_environment(tmp_path):
    fake = tmp_path / "evidence.sh"  # stands for bench/gpu_evidence.sh: says what it was given
    fake.write_text('echo "$1 ${2:-} sides=${JUDGING_SIDES:-both}" > "$OUT/said"; [ "$1" != bad ]\n')
    out = tmp_path / "out"
    script = _sh(tmp_path, f"detached_chain {fake} {out} 'gates-gpu 300' 'bad' "
                           f"'JUDGING_SIDES=after judging 86661fa'")
    log = _sh(tmp_path, f"detached_start chain 100 {_quoted(script)}; cat $DETACHED_DIR/chain.log")
    assert [(out / d / "said").read_text() for d in ("1-gates-gpu", "2-bad", "3-judging")] == \
        ["gates-gpu 300 sides=both\n", "bad  sides=both\n", "judging 86661fa sides=after\n"]
    # a failed phase is reported and the next one still runs
    assert [line for line in log.splitlines() if line.startswith("== ")] == [
        "== 1: gates-gpu 300", "== 1: rc 0", "== 2: bad", "== 2: rc 1",
        "== 3: JUDGING_SIDES=after judging 86661fa", "== 3: rc 0"]


def test_a_chain_line_without_a_phase_is_refused(tmp_path):
    r = subprocess.run(["bash", "-c", f"source {ROOT}/bench/detached.sh; detached_chain x {tmp_path} 'A=1'"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "names no phase" in r.stderr


def _quoted(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"
