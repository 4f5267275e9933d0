"""bench/tools/ncu_experts.py: ncu's raw page read into counters, the verdict per kernel, the
commands it runs, and its target and run modes' mechanics on the CPU (a stand-in ncu)."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from bench.tools import ncu_experts as nx

ROOT = Path(__file__).resolve().parents[1]

# A raw page as `ncu --csv --page raw --print-units base` writes it (hand-written in its format,
# checked against ncu 2025.3.1's on an H100 on 2026-12-06: a header of columns then metric names,
# a row of units, "ns" for durations, one row per launch; en_US thousands separators; ncu's own
# lines first). Four launches: FC1 and FC2 of two calls. FC1 is issue-bound,
# FC2 memory-bound.
FIXED = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
         "Block Size", "Grid Size", "Device", "CC"]
STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
METRICS = [  # name, unit
    (nx.DURATION, "ns"), (nx.DRAM_PCT, "%"), (nx.DRAM_READ, "byte"), (nx.DRAM_WRITE, "byte"),
    (nx.ISSUE_PCT, "%"), (nx.ISSUED_IPC, "inst/cycle"), (nx.SCHED_ISSUE_PCT, "%"), (nx.OCCUPANCY, "%"),
    (nx.REGISTERS, "register/thread"), (nx.SMEM_STATIC, "byte/block"), (nx.SMEM_DYNAMIC, "byte/block"),
    (nx.INST, "inst"), (nx.THREAD_INST, "inst"), (nx.CYCLES_PER_ISSUE, "cycle"), (nx.GRID, ""),
    (STALL.format("long_scoreboard"), "inst"), (STALL.format("not_selected"), "inst"),
    (STALL.format("math_pipe_throttle"), "inst"), (STALL.format("selected"), "inst"),
    ("smsp__pcsamp_warps_issue_stalled_wait", ""),
]


def launch_row(id_, kernel, values, metrics=METRICS):
    fixed = [str(id_), "4242", "python3", "127.0.0.1", kernel, "1", "7", "(64, 1, 1)", "(48, 30, 1)", "0", "9.0"]
    return fixed + [values.get(name, "") for name, _ in metrics]


FC1 = {nx.DURATION: "412,736", nx.DRAM_PCT: "55.21", nx.DRAM_READ: "1,325,400,064", nx.DRAM_WRITE: "262,144",
       nx.ISSUE_PCT: "91.37", nx.ISSUED_IPC: "3.65", nx.SCHED_ISSUE_PCT: "91.40", nx.OCCUPANCY: "18.75",
       nx.REGISTERS: "168", nx.SMEM_STATIC: "0", nx.SMEM_DYNAMIC: "24,576", nx.INST: "1,118,208,000",
       nx.THREAD_INST: "35,782,656,000", nx.CYCLES_PER_ISSUE: "3.10", nx.GRID: "1,440",
       STALL.format("long_scoreboard"): "0.41", STALL.format("not_selected"): "0.93",
       STALL.format("math_pipe_throttle"): "0.52", STALL.format("selected"): "1.00",
       "smsp__pcsamp_warps_issue_stalled_wait": "1,234"}
FC2 = {**FC1, nx.DURATION: "209,120", nx.DRAM_PCT: "86.02", nx.DRAM_READ: "662,700,032", nx.ISSUE_PCT: "71.8",
       nx.INST: "540,000,000", STALL.format("long_scoreboard"): "2.75"}


def csv_text(rows, metrics=METRICS, prelude=("==PROF== Connected to process 4242 (/usr/bin/python3.12)",)):
    def line(cells):
        return ",".join('"' + c.replace('"', '""') + '"' for c in cells)
    header = FIXED + [m for m, _ in metrics]
    units = [""] * len(FIXED) + [u for _, u in metrics]
    return "\n".join([*prelude, line(header), line(units), *(line(r) for r in rows)]) + "\n"


SAMPLE = csv_text([launch_row(0, "_fc1_kernel", FC1), launch_row(1, "_fc2_kernel", FC2),
                   launch_row(2, "_fc1_kernel", FC1), launch_row(3, "_fc2_kernel", FC2)])


def call(words_fc1=1_000_000, words_fc2=500_000):
    def w(n):
        return {"touched_experts": 100, "blocks": 100, "words_unique": n, "words_streamed": n}
    return {"site": "L3.moe.experts", "local_pairs": 100, "words": {"_fc1_kernel": w(words_fc1), "_fc2_kernel": w(words_fc2)},
            "weight_bytes": {"_fc1_kernel": 4 * words_fc1 * 17 // 16, "_fc2_kernel": 4 * words_fc2 * 17 // 16}}


# ------------------------------------------------------------------ parsing
def test_the_raw_page_parses_into_launches_in_base_units():
    launches = nx.parse_raw_csv(SAMPLE)
    assert [(ln.id, ln.kernel) for ln in launches] == [(0, "_fc1_kernel"), (1, "_fc2_kernel"),
                                                        (2, "_fc1_kernel"), (3, "_fc2_kernel")]
    m = launches[0].metrics
    assert m[nx.DURATION] == pytest.approx(412_736e-9)  # ns -> seconds
    assert launches[0].units[nx.DURATION] == "ns"
    assert m[nx.DRAM_READ] == 1_325_400_064.0  # thousands separators dropped
    assert m[nx.ISSUE_PCT] == 91.37 and m[nx.REGISTERS] == 168.0
    assert m["Block Size"] == "(64, 1, 1)"  # text stays text
    assert launches[1].metrics[nx.DRAM_PCT] == 86.02


def test_scaled_units_are_read_in_base_units_and_empty_cells_are_none():
    metrics = [(nx.DURATION, "usecond"), (nx.DRAM_READ, "Mbyte"), (nx.DRAM_WRITE, "byte")]  # older names
    values = {nx.DURATION: "209.12", nx.DRAM_READ: "662.70", nx.DRAM_WRITE: "n/a"}
    text = csv_text([launch_row(5, "_fc2_kernel", values, metrics)], metrics=metrics, prelude=())
    (ln,) = nx.parse_raw_csv(text)
    assert ln.metrics[nx.DURATION] == pytest.approx(209.12e-6)
    assert ln.metrics[nx.DRAM_READ] == pytest.approx(662.70e6)
    assert ln.metrics[nx.DRAM_WRITE] is None


def test_a_duration_in_no_known_time_unit_is_an_error_not_a_guess():
    metrics = [(n, "fortnight" if n == nx.DURATION else u) for n, u in METRICS]
    ln = nx.parse_raw_csv(csv_text([launch_row(4, "_fc1_kernel", FC1, metrics)], metrics=metrics))[0]
    with pytest.raises(nx.MissingMetric, match=r"launch 4 \(_fc1_kernel\) gives gpu__time_duration.sum in 'fortnight'"):
        nx.counters(ln)


def test_output_without_a_raw_page_is_an_error_that_says_what_was_expected():
    with pytest.raises(ValueError, match='header row starting "ID"'):
        nx.parse_raw_csv("==PROF== Disconnected from process 4242\n==ERROR== ERR_NVGPUCTRPERM\n")
    with pytest.raises(ValueError, match="no lines"):
        nx.parse_raw_csv("")


def test_counters_read_one_launch_and_its_stalls_without_the_issuing_warp():
    c = nx.counters(nx.parse_raw_csv(SAMPLE)[0])
    assert c.kernel == "_fc1_kernel" and c.id == 0
    assert c.duration_us == pytest.approx(412.736)
    assert c.issue_slots_busy_pct == 91.37 and c.dram_pct == 55.21 and c.issued_ipc == 3.65
    assert c.achieved_occupancy_pct == 18.75 and c.shared_mem_bytes == 24_576 and c.inst_executed == 1_118_208_000
    # the WarpStateStats family wins over PC sampling; "selected" (the warp that issued) is no stall
    assert c.stall_family == nx.STALL_FAMILIES[0].pattern
    assert c.stalls == {"long_scoreboard": 0.41, "not_selected": 0.93, "math_pipe_throttle": 0.52}
    assert nx.top_stalls(c.stalls, 2) == [["not_selected", 0.93], ["math_pipe_throttle", 0.52]]
    assert c.optional[nx.THREAD_INST] == 35_782_656_000


def test_pc_sampling_stalls_serve_when_the_warp_state_family_is_absent():
    family, stalls = nx.stall_reasons({"smsp__pcsamp_warps_issue_stalled_wait": 10.0,
                                       "smsp__pcsamp_warps_issue_stalled_wait_not_issued": 3.0,
                                       "smsp__pcsamp_warps_issue_stalled_long_scoreboard": 99.0,
                                       "smsp__pcsamp_sample_count": 500.0})
    assert family == nx.STALL_FAMILIES[1].pattern
    assert stalls == {"wait": 10.0, "long_scoreboard": 99.0}


def test_a_missing_metric_is_named_with_its_launch():
    metrics = [m for m in METRICS if m[0] not in (nx.DRAM_READ, nx.INST)]
    ln = nx.parse_raw_csv(csv_text([launch_row(7, "_fc1_kernel", FC1, metrics)], metrics=metrics))[0]
    with pytest.raises(nx.MissingMetric) as e:
        nx.counters(ln)
    msg = str(e.value)
    assert "launch 7 (_fc1_kernel)" in msg and "dram__bytes_read.sum" in msg and "smsp__inst_executed.sum" in msg
    assert "WarpStateStats" in msg  # what the report was expected to hold
    # a blank cell is as missing as an absent column
    blank = nx.parse_raw_csv(csv_text([launch_row(8, "_fc1_kernel", {**FC1, nx.ISSUE_PCT: ""})]))[0]
    with pytest.raises(nx.MissingMetric, match=r"launch 8 \(_fc1_kernel\) has no value for sm__inst_issued"):
        nx.counters(blank)


def test_no_stall_metrics_is_an_error_naming_the_section():
    metrics = [m for m in METRICS if "stalled" not in m[0]]
    ln = nx.parse_raw_csv(csv_text([launch_row(0, "_fc1_kernel", FC1, metrics)], metrics=metrics))[0]
    with pytest.raises(nx.MissingMetric, match="no warp stall metrics.*WarpStateStats"):
        nx.counters(ln)


# ------------------------------------------------------------------ verdict and summary
def test_the_verdict_names_the_limit_and_the_numbers_behind_it():
    stalls = {"long_scoreboard": 2.75, "not_selected": 0.2}
    assert nx.verdict(91.4, 55.2, stalls).startswith("issue-bound: issue slots >= 80 % busy (issue slots 91.4 %")
    assert nx.verdict(71.8, 86.0, stalls).startswith("memory-bound: dram >= 80 % of peak")
    # both at their limit: the DRAM caps the kernel whatever the issue rate
    assert nx.verdict(95.0, 90.0, stalls).startswith("memory-bound")
    latency = nx.verdict(45.0, 40.0, stalls)
    assert latency.startswith("latency-bound: top stall long_scoreboard (2.75)") and "issue slots 45.0 %" in latency
    # the thresholds are inclusive and the constants, not literals, decide
    assert nx.verdict(nx.ISSUE_BOUND_PCT, 0.0, stalls).startswith("issue-bound")
    assert nx.verdict(nx.ISSUE_BOUND_PCT - 0.01, nx.MEMORY_BOUND_PCT - 0.01, stalls).startswith("latency-bound")
    assert "top stall not_selected" in nx.verdict(90.0, 10.0, {"not_selected": 3.0, "wait": 1.0})


def test_weight_words_count_one_pass_per_block_of_pairs():
    w = nx.weight_words([0, 1, 16, 17, 40, 0], block_m=16, words_per_expert=1000)
    assert w == {"touched_experts": 4, "blocks": 1 + 1 + 2 + 3, "words_unique": 4000, "words_streamed": 7000}
    assert nx.weight_words([0, 0], 16, 1000)["words_streamed"] == 0


def test_summary_pairs_launches_with_calls_and_gives_a_verdict_per_kernel():
    s = nx.summarize(nx.parse_raw_csv(SAMPLE), [call(), call(2_000_000, 1_000_000)])
    fc1, fc2 = s["_fc1_kernel"], s["_fc2_kernel"]
    assert fc1["launches"] == fc2["launches"] == 2
    assert fc1["verdict"].startswith("issue-bound") and fc2["verdict"].startswith("memory-bound")
    # launch i of a kernel is call i: FC1's instructions per streamed word at each call
    per = [r["thread_inst_per_word_streamed"] for r in fc1["per_launch"]]
    assert per == pytest.approx([32 * 1_118_208_000 / 1_000_000, 32 * 1_118_208_000 / 2_000_000])
    assert fc1["median"]["thread_inst_per_word_streamed"] == pytest.approx(statistics.median(per))
    assert fc1["median"]["duration_us"] == pytest.approx(412.736)
    assert fc2["median"]["top_stalls"][0] == ["long_scoreboard", 2.75]
    assert fc2["per_launch"][1]["dram_read_per_weight_byte"] == pytest.approx(662_700_032 / (4 * 1_000_000 * 17 // 16))
    json.dumps(s)  # the document is JSON as it stands


def test_summary_refuses_launches_that_are_not_one_per_call():
    with pytest.raises(ValueError, match="2 launches of _fc1_kernel, expected one per profiled call \\(3\\)"):
        nx.summarize(nx.parse_raw_csv(SAMPLE), [call()] * 3)


# ------------------------------------------------------------------ commands
def test_the_profile_command_keeps_the_clocks_and_profiles_only_the_target_launches(tmp_path):
    cmd = nx.ncu_profile_command("/opt/ncu", "/usr/bin/python3", 64, 3, tmp_path / "r", tmp_path / "c.json")
    joined = " ".join(cmd)
    assert "--clock-control none" in joined and "--profile-from-start off" in joined
    assert cmd[cmd.index("-k") + 1] == "regex:_fc1_kernel|_fc2_kernel"
    assert cmd[cmd.index("--launch-count") + 1] == "6"
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "--section"] == list(nx.SECTIONS)
    assert set(nx.REQUIRED) <= set(cmd[cmd.index("--metrics") + 1].split(","))
    tail = cmd[cmd.index("/usr/bin/python3"):]
    assert tail[2:] == ["target", "--rows", "64", "--calls", "3", "--calls-out", str(tmp_path / "c.json")]
    assert nx.ncu_import_command("/opt/ncu", tmp_path / "r.ncu-rep")[-5:] == ["--csv", "--page", "raw", "--print-units", "base"]


def test_ncu_is_found_on_path_else_under_the_device_image_folder(tmp_path):
    assert nx.find_ncu(None, which=lambda n: "/usr/bin/ncu", glob=lambda p: []) == "/usr/bin/ncu"
    newest = [Path("/opt/nvidia/nsight-compute/2024.1.0/ncu"), Path("/opt/nvidia/nsight-compute/2025.2.1/ncu")]
    assert nx.find_ncu(None, which=lambda n: None, glob=lambda p: newest) == str(newest[-1])
    with pytest.raises(SystemExit, match=r"no ncu on PATH nor under /opt/nvidia/nsight-compute/\*/ncu"):
        nx.find_ncu(None, which=lambda n: None, glob=lambda p: [])
    with pytest.raises(SystemExit, match="--ncu .* is not a file"):
        nx.find_ncu(str(tmp_path / "nope"))


def test_help_has_an_example():
    r = subprocess.run([sys.executable, "bench/tools/ncu_experts.py", "--help"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "bash bench/gpu_evidence.sh ncu-experts" in r.stdout
    r = subprocess.run([sys.executable, "bench/tools/ncu_experts.py", "run", "--out-dir", "x", "--rows", "0"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "expected row counts >= 1, got 0" in r.stderr


# ------------------------------------------------------------------ the modes, on the CPU
FAKE_NCU = '''#!{python}
"""A stand-in ncu: runs the profiled command, writes a report file, prints a recorded raw page."""
import pathlib, subprocess, sys
a = sys.argv[1:]
if a == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\\nVersion 0.0 (stand-in)")
    sys.exit(0)
if "--import" in a:
    sys.stdout.write(pathlib.Path({csv!r}).read_text())
    sys.exit(0)
pathlib.Path(a[a.index("--export") + 1] + ".ncu-rep").write_text("report")
print("==PROF== Connected to process 1")
sys.exit(subprocess.run(a[a.index("--force-overwrite") + 1:]).returncode)
'''


def cpu_env():
    return {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}


def test_target_records_the_profiled_calls_weight_words(tmp_path):
    out = tmp_path / "calls.json"
    r = subprocess.run([sys.executable, "bench/tools/ncu_experts.py", "target", "--rows", "2", "--calls", "2",
                        "--calls-out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300, env=cpu_env())
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["rows"] == 2 and len(doc["calls"]) == 2 and doc["tiles"]["block_m"] >= 16
    for c in doc["calls"]:
        fc1, fc2 = c["words"]["_fc1_kernel"], c["words"]["_fc2_kernel"]
        assert 0 < fc1["touched_experts"] <= c["local_pairs"] and fc1["blocks"] >= fc1["touched_experts"]
        # FC1 reads gate and up rows (2I x latent), FC2 latent x I: twice the words per expert
        assert fc1["words_unique"] == 2 * fc2["words_unique"] > 0
        assert c["weight_bytes"]["_fc1_kernel"] > 4 * fc1["words_unique"]  # weights and their scales


def test_run_writes_one_json_per_row_count_with_a_verdict_per_kernel(tmp_path):
    raw = tmp_path / "raw.csv"
    raw.write_text(SAMPLE)
    ncu = tmp_path / "ncu"
    ncu.write_text(FAKE_NCU.format(python=sys.executable, csv=str(raw)))
    ncu.chmod(0o755)
    r = subprocess.run([sys.executable, "bench/tools/ncu_experts.py", "run", "--rows", "2", "--calls", "2",
                        "--ncu", str(ncu), "--out-dir", str(tmp_path / "out"), "--work", str(tmp_path / "work"),
                        "--commit", "abc1234"], cwd=ROOT, capture_output=True, text=True, timeout=300, env=cpu_env())
    assert r.returncode == 0, r.stdout[-1000:] + r.stderr[-2000:]
    doc = json.loads((tmp_path / "out" / "ncu_experts_2.json").read_text())
    assert doc["meta"]["commit"] == "abc1234" and doc["meta"]["rows"] == 2
    assert doc["meta"]["ncu_version"] == "Version 0.0 (stand-in)" and doc["meta"]["torch"] and doc["meta"]["triton"]
    assert doc["kernels"]["_fc1_kernel"]["verdict"].startswith("issue-bound")
    assert doc["kernels"]["_fc2_kernel"]["verdict"].startswith("memory-bound")
    assert "issue-bound" in r.stdout and "memory-bound" in r.stdout
    # launches were paired with the target's own calls (their word counts, not the sample's)
    words = [c["words"]["_fc1_kernel"]["words_streamed"] for c in doc["calls"]]
    assert [x["words_streamed"] for x in doc["kernels"]["_fc1_kernel"]["per_launch"]] == words


def test_run_keeps_a_failed_row_count_as_an_error_and_exits_1(tmp_path):
    ncu = tmp_path / "ncu"
    ncu.write_text("#!/bin/sh\n[ \"$1\" = --version ] && exit 0\necho '==ERROR== ERR_NVGPUCTRPERM' ; exit 1\n")
    ncu.chmod(0o755)
    r = subprocess.run([sys.executable, "bench/tools/ncu_experts.py", "run", "--rows", "3", "--ncu", str(ncu),
                        "--out-dir", str(tmp_path / "out"), "--work", str(tmp_path / "work")],
                       cwd=ROOT, capture_output=True, text=True, timeout=120, env=cpu_env())
    assert r.returncode == 1
    doc = json.loads((tmp_path / "out" / "ncu_experts_3.json").read_text())
    assert doc["error"].startswith("ncu over the target at 3 rows: rc 1") and "calls file not written" in doc["error"]
    assert "==ERROR== ERR_NVGPUCTRPERM" in doc["log_tail"]
    assert "ERR_NVGPUCTRPERM" in r.stderr


@pytest.mark.gpu
def test_real_ncu_counters_of_both_kernels_at_16_rows(tmp_path):
    """On a GPU with Nsight Compute: the real raw page holds every metric the summary reads."""
    try:
        ncu = nx.find_ncu(None)
    except SystemExit:
        pytest.skip("no ncu on this machine")
    r = subprocess.run([sys.executable, "bench/tools/ncu_experts.py", "run", "--rows", "16", "--calls", "1",
                        "--ncu", ncu, "--out-dir", str(tmp_path), "--work", str(tmp_path / "work")],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    doc = json.loads((tmp_path / "ncu_experts_16.json").read_text())
    assert r.returncode == 0 and "error" not in doc, doc.get("error")
    for k in nx.KERNELS:
        m = doc["kernels"][k]["median"]
        assert m["duration_us"] > 0 and 0 < m["issue_slots_busy_pct"] <= 100 and m["thread_inst_per_word_streamed"] > 0
