"""Device tool: Nsight Compute's hardware counters of moe.experts' two weight-streaming kernels
(FC1 ``_fc1_kernel``, FC2 ``_fc2_kernel``, kernels/k31/moe/experts.py) on the full config, and
one verdict per kernel: issue-bound, memory-bound or latency-bound (naming the top warp stall).

    python3 bench/tools/ncu_experts.py run --rows 16 64 128 --out-dir $OUT [--calls 4]
        [--ncu PATH] [--work /tmp/ncu_experts] [--timeout 300] [--commit SHA]
    python3 bench/tools/ncu_experts.py target --rows 128 --calls 4 --calls-out calls.json

The question it settles: on an H100 moe.experts runs at 77 % of the card's read ceiling, on the
H200 (44 % more bandwidth) it gains almost nothing; its K loop issues ~30 thread instructions per
32-bit weight word (this tool on an H100, 2026-12-06: FC1 32, FC2 34), which at the H200's rate
needs about as many warp instructions per cycle as an SM can issue (4). Only the counters say
whether the issue slots (not the HBM, not latency) are what runs out. On the H200 (2026-12-06,
bench/results/2026-12-06-h200-ncu-experts.json) neither was: FC1 at 128 rows 71 % of the issue
slots, 58 % of DRAM peak, 16 warps an SM (24 % occupancy).

``run`` (the shell): per row count, ``ncu`` (``--clock-control none``: the device's clocks are
never changed; ``--profile-from-start off``) profiles the ``target`` mode of this file into a
report, imports its raw page as CSV (``--csv --page raw --print-units base``) and writes
``ncu_experts_<rows>.json``: date, GPU, commit, torch and triton versions, per kernel the
median over its launches of duration, DRAM throughput (% of peak) and bytes read, issue slots
busy and issued IPC, achieved occupancy, registers and shared memory, instructions executed
and per weight word, the top warp stalls, and the verdict. The reports, CSVs and logs stay in
``--work``. A row count whose ncu run fails keeps its error in its JSON; the others go on.

``target``: builds the side the scorer builds (kern.yaml's profile: on CUDA the full model),
records every moe.experts call's inputs of one eager step at ``--rows`` with experts_bench's
hook, takes ``--calls`` of them spread over the layers (each streams other experts' weights),
runs moe.experts on each once (compiles), then once more each, eagerly, between
``torch.cuda.profiler.start()`` and ``stop()``: ncu profiles those launches. Writes each
profiled call's weight words (per kernel: the touched experts' words, and the words streamed,
one pass of an expert's weights per block of ``block_m`` pairs) to ``--calls-out``, in launch
order. Without CUDA it runs the same mechanics on the CPU profile (times mean nothing).

The parsing and the verdict are pure functions (tests/test_ncu_experts.py).
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import math
import re
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

KERNELS = ("_fc1_kernel", "_fc2_kernel")
KERNEL_FILTER = "regex:" + "|".join(KERNELS)
NCU_GLOB = "/opt/nvidia/nsight-compute/*/ncu"  # where the device image keeps it (not on PATH)
SECTIONS = ("SpeedOfLight", "ComputeWorkloadAnalysis", "MemoryWorkloadAnalysis", "Occupancy",
            "SchedulerStats", "WarpStateStats", "InstructionStats", "LaunchStats")

# the metrics the summary reads (raw page names); asked for by --metrics too, so they are in the
# raw page whatever a version's sections hold
DURATION = "gpu__time_duration.sum"
DRAM_PCT = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
DRAM_READ = "dram__bytes_read.sum"
DRAM_WRITE = "dram__bytes_write.sum"
ISSUE_PCT = "sm__inst_issued.avg.pct_of_peak_sustained_active"  # "Issue Slots Busy"
ISSUED_IPC = "sm__inst_issued.avg.per_cycle_active"  # warp instructions per active SM cycle
SCHED_ISSUE_PCT = "smsp__issue_active.avg.pct_of_peak_sustained_active"  # per scheduler
OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
REGISTERS = "launch__registers_per_thread"
SMEM_STATIC = "launch__shared_mem_per_block_static"
SMEM_DYNAMIC = "launch__shared_mem_per_block_dynamic"
INST = "smsp__inst_executed.sum"  # warp instructions
THREAD_INST = "smsp__thread_inst_executed.sum"
CYCLES_PER_ISSUE = "smsp__average_warp_latency_per_inst_issued.ratio"
ELIGIBLE = "smsp__warps_eligible.avg.per_cycle_active"
SM_HZ = "smsp__cycles_elapsed.avg.per_second"
GRID = "launch__grid_size"
BLOCK = "launch__block_size"
REQUIRED = (DURATION, DRAM_PCT, DRAM_READ, ISSUE_PCT, ISSUED_IPC, OCCUPANCY, REGISTERS,
            SMEM_STATIC, SMEM_DYNAMIC, INST)
OPTIONAL = (DRAM_WRITE, SCHED_ISSUE_PCT, THREAD_INST, CYCLES_PER_ISSUE, ELIGIBLE, SM_HZ, GRID, BLOCK)
EXTRA_METRICS = REQUIRED + OPTIONAL

# Warp stall reasons, by the first family present in a launch's raw page: WarpStateStats' average
# warps stalled per issued instruction (cycles per issue), PC sampling's counts, or the average
# latency per stall. "selected" is the warp that issued, not a stall.
STALL_FAMILIES = (
    re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$"),
    re.compile(r"^smsp__pcsamp_warps_issue_stalled_(\w+?)$"),
    re.compile(r"^smsp__average_warp_latency_issue_stalled_(\w+?)(?:\.ratio)?$"),
)
NOT_A_STALL = ("selected",)

# Verdict thresholds. An SM sub-partition issues at most one warp instruction a cycle; a kernel
# whose issue slots are busy >= 80 % of its active cycles is left only the bubbles a scheduler
# cannot fill (dependencies right after an issue): more bandwidth cannot be used, fewer
# instructions per weight word can. HBM delivers ~90 % of its nominal peak at best (the read
# ceiling the project measures: 3.07 of 3.35 TB/s on an H100, 92 %); >= 80 % of peak is at its
# roof. DRAM is judged first: a saturated DRAM caps the kernel whatever the issue rate.
ISSUE_BOUND_PCT = 80.0
MEMORY_BOUND_PCT = 80.0

# Units to seconds and bytes. --print-units base writes "ns" and "byte" (ncu 2025.3 on the H100,
# 2026-12-06); older versions' names and scaled units (a run without the flag) are read too.
TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0,
              "nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0}
UNIT_SCALE = {**TIME_UNITS, "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12,
              "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}


class MissingMetric(ValueError):
    """A raw page lacks a metric the summary needs (the message names it and the launch)."""


# ------------------------------------------------------------------ pure: parsing
@dataclass(frozen=True)
class Launch:
    """One profiled kernel launch of a raw page: its result ID, kernel name and metrics (floats in
    base units: seconds, bytes, %, counts; text where the value is not a number)."""
    id: int
    kernel: str
    metrics: dict
    units: dict = field(default_factory=dict)  # as ncu printed them, before scaling


def number(text: str):
    """A raw page value as a float (``1,234.5`` -> 1234.5: en_US thousands separators); None for
    an empty or ``n/a`` cell; the text itself when it is not a number (``(64, 1, 1)``)."""
    t = text.strip()
    if t in ("", "n/a", "N/A"):
        return None
    try:
        return float(t.replace(",", ""))
    except ValueError:
        return t


def parse_raw_csv(text: str) -> list[Launch]:
    """Launches of ``ncu --csv --page raw`` output: a header row of column names (``ID``,
    ``Kernel Name``, ... then metric names), a row of units, one row per launch. Lines ncu
    itself prints (``==PROF==``, ``==WARNING==``) and anything before the header are skipped.
    Time metrics are returned in seconds and byte metrics in bytes, whatever scale ncu printed."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("==")]
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        raise ValueError("ncu_experts: no raw page in ncu's output: expected a CSV header row "
                         "starting \"ID\" (ncu --csv --page raw); got "
                         + (repr(lines[0][:120]) if lines else "no lines"))
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, units, body = rows[0], rows[1] if len(rows) > 1 else [], rows[2:]
    for col in ("ID", "Kernel Name"):
        if col not in header:
            raise ValueError(f"ncu_experts: the raw page's header has no {col!r} column; got {header[:12]}")
    i_id, i_name = header.index("ID"), header.index("Kernel Name")
    out = []
    for r in body:
        if len(r) != len(header):
            raise ValueError(f"ncu_experts: a raw page row has {len(r)} cells, its header {len(header)}: "
                             f"{r[:6]}")
        metrics, unit_of = {}, {}
        for j, (name, cell) in enumerate(zip(header, r)):
            v = number(cell)
            unit_of[name] = unit = units[j] if j < len(units) else ""
            if isinstance(v, float) and unit in UNIT_SCALE:
                v *= UNIT_SCALE[unit]
            metrics[name] = v
        out.append(Launch(int(number(r[i_id])), r[i_name], metrics, unit_of))
    return out


def kernel_of(name: str) -> str | None:
    """Which of KERNELS a launch's kernel name is (ncu may print it with a signature or suffix)."""
    return next((k for k in KERNELS if k in name), None)


def stall_reasons(metrics: dict) -> tuple[str, dict]:
    """The first stall family present in ``metrics``: (its pattern, reason -> value), the warp
    that issued ("selected") left out. Raises MissingMetric when no family is there."""
    for fam in STALL_FAMILIES:
        found = {}
        for name, v in metrics.items():
            m = fam.match(name)
            if m and isinstance(v, float) and m.group(1) not in NOT_A_STALL and not m.group(1).endswith("_not_issued"):
                found[m.group(1)] = v
        if found:
            return fam.pattern, found
    raise MissingMetric("no warp stall metrics (" + " / ".join(f.pattern for f in STALL_FAMILIES)
                        + "): expected the WarpStateStats section in the report")


def top_stalls(stalls: dict, n: int = 3) -> list[list]:
    """The ``n`` largest stall reasons, [[reason, value], ...], largest first (ties by name)."""
    return [[k, v] for k, v in sorted(stalls.items(), key=lambda kv: (-kv[1], kv[0]))[:n]]


@dataclass(frozen=True)
class KernelCounters:
    """What the verdict and the summary read of one launch."""
    kernel: str
    id: int
    duration_us: float
    dram_pct: float
    dram_read_bytes: float
    issue_slots_busy_pct: float
    issued_ipc: float
    achieved_occupancy_pct: float
    registers_per_thread: float
    shared_mem_bytes: float
    inst_executed: float
    stall_family: str
    stalls: dict
    optional: dict = field(default_factory=dict)


def counters(launch: Launch) -> KernelCounters:
    """The counters of one launch; MissingMetric names every required metric its raw page lacks."""
    m = launch.metrics
    missing = [k for k in REQUIRED if not isinstance(m.get(k), float)]
    if missing:
        raise MissingMetric(f"ncu_experts: launch {launch.id} ({launch.kernel}) has no value for "
                            f"{', '.join(missing)}: expected the sections {', '.join(SECTIONS)} and "
                            f"--metrics {','.join(REQUIRED)} in its report (ncu run by this tool's run mode)")
    if launch.units and launch.units.get(DURATION) not in TIME_UNITS:
        raise MissingMetric(f"ncu_experts: launch {launch.id} ({launch.kernel}) gives {DURATION} in "
                            f"{launch.units.get(DURATION)!r}; expected a time unit ({', '.join(TIME_UNITS)})")
    fam, stalls = stall_reasons(m)
    return KernelCounters(
        kernel=kernel_of(launch.kernel) or launch.kernel, id=launch.id, duration_us=m[DURATION] * 1e6,
        dram_pct=m[DRAM_PCT], dram_read_bytes=m[DRAM_READ], issue_slots_busy_pct=m[ISSUE_PCT],
        issued_ipc=m[ISSUED_IPC], achieved_occupancy_pct=m[OCCUPANCY], registers_per_thread=m[REGISTERS],
        shared_mem_bytes=m[SMEM_STATIC] + m[SMEM_DYNAMIC], inst_executed=m[INST], stall_family=fam,
        stalls=stalls, optional={k: m.get(k) for k in OPTIONAL})


# ------------------------------------------------------------------ pure: words and verdict
def weight_words(pairs_per_expert: list[int], block_m: int, words_per_expert: int) -> dict:
    """A kernel's 32-bit weight words for one call: the touched experts' (each read once at
    least) and the words streamed (every block of ``block_m`` pairs of an expert streams all its
    words: the kernel's K loop runs once per block)."""
    touched = sum(1 for c in pairs_per_expert if c > 0)
    blocks = sum(math.ceil(c / block_m) for c in pairs_per_expert if c > 0)
    return {"touched_experts": touched, "blocks": blocks, "words_unique": touched * words_per_expert,
            "words_streamed": blocks * words_per_expert}


def verdict(issue_pct: float, dram_pct: float, stalls: dict) -> str:
    """One line: ``memory-bound`` when DRAM throughput >= MEMORY_BOUND_PCT of peak, else
    ``issue-bound`` when issue slots are >= ISSUE_BOUND_PCT busy, else ``latency-bound``; the
    numbers behind it and the top stall (cycles per issued instruction, or samples) follow."""
    top = top_stalls(stalls, 1)
    stall = f"top stall {top[0][0]} ({top[0][1]:.2f})" if top else "no stall reasons"
    nums = f"issue slots {issue_pct:.1f} % busy, dram {dram_pct:.1f} % of peak"
    if dram_pct >= MEMORY_BOUND_PCT:
        return f"memory-bound: dram >= {MEMORY_BOUND_PCT:.0f} % of peak ({nums}); {stall}"
    if issue_pct >= ISSUE_BOUND_PCT:
        return f"issue-bound: issue slots >= {ISSUE_BOUND_PCT:.0f} % busy ({nums}); {stall}"
    return f"latency-bound: {stall} ({nums}; both under {min(ISSUE_BOUND_PCT, MEMORY_BOUND_PCT):.0f} %)"


def _ratio(a: float, b: float):
    return a / b if b else None


def _median(xs):
    xs = [x for x in xs if isinstance(x, (int, float))]
    return statistics.median(xs) if xs else None


def summarize(launches: list[Launch], calls: list[dict]) -> dict:
    """Per kernel of KERNELS: the launches' counters in order, paired with the profiled calls
    (the i-th launch of a kernel is call i: target mode launches FC1 then FC2 per call), the
    instructions per weight word, the medians over launches and the verdict on them. Raises
    ValueError when a kernel's launches are not one per call, MissingMetric as counters does."""
    out = {}
    for k in KERNELS:
        mine = sorted((ln for ln in launches if kernel_of(ln.kernel) == k), key=lambda ln: ln.id)
        if len(mine) != len(calls):
            raise ValueError(f"ncu_experts: the raw page holds {len(mine)} launches of {k}, expected one per "
                             f"profiled call ({len(calls)}): was ncu's --launch-count 2 x calls?")
        rows = []
        for ln, call in zip(mine, calls):
            c = counters(ln)
            w, wb = call["words"][k], call["weight_bytes"][k]
            # a warp instruction works for 32 threads, each on its own words: thread instructions
            # per word is the unit of "~27 instructions per weight word"
            row = {**asdict(c), "top_stalls": top_stalls(c.stalls), **w, "weight_bytes": wb,
                   "warp_inst_per_word_streamed": _ratio(c.inst_executed, w["words_streamed"]),
                   "thread_inst_per_word_streamed": _ratio(32 * c.inst_executed, w["words_streamed"]),
                   "thread_inst_per_word_unique": _ratio(32 * c.inst_executed, w["words_unique"]),
                   "dram_read_per_weight_byte": _ratio(c.dram_read_bytes, wb)}
            rows.append(row)
        keys = ("duration_us", "dram_pct", "dram_read_bytes", "issue_slots_busy_pct", "issued_ipc",
                "achieved_occupancy_pct", "registers_per_thread", "shared_mem_bytes", "inst_executed",
                "words_unique", "words_streamed", "weight_bytes", "warp_inst_per_word_streamed",
                "thread_inst_per_word_streamed", "thread_inst_per_word_unique", "dram_read_per_weight_byte")
        med = {key: _median([r[key] for r in rows]) for key in keys}
        med.update({f"optional.{o}": _median([r["optional"].get(o) for r in rows]) for o in OPTIONAL})
        reasons = sorted({s for r in rows for s in r["stalls"]})
        stalls = {s: _median([r["stalls"].get(s) for r in rows]) for s in reasons}
        med["top_stalls"] = top_stalls(stalls, 5)
        out[k] = {"launches": len(rows), "median": med, "stall_family": rows[0]["stall_family"] if rows else None,
                  "verdict": verdict(med["issue_slots_busy_pct"], med["dram_pct"], stalls), "per_launch": rows}
    return out


# ------------------------------------------------------------------ pure: commands
def ncu_profile_command(ncu: str, python: str, rows: int, calls: int, report: Path, calls_out: Path) -> list[str]:
    """ncu over the target mode: the clocks left as the device runs them, only the launches
    between the target's profiler start and stop, FC1 and FC2 only, cold caches each pass."""
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--cache-control", "all",
           "-k", KERNEL_FILTER, "--launch-count", str(2 * calls)]
    for s in SECTIONS:
        cmd += ["--section", s]
    cmd += ["--metrics", ",".join(EXTRA_METRICS), "--export", str(report), "--force-overwrite",
            python, str(Path(__file__).resolve()), "target", "--rows", str(rows), "--calls", str(calls),
            "--calls-out", str(calls_out)]
    return cmd


def ncu_import_command(ncu: str, report: Path) -> list[str]:
    return [ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"]


def find_ncu(given: str | None, which=shutil.which, glob=lambda p: sorted(Path("/").glob(p.lstrip("/")))) -> str:
    """``given``, else ncu on PATH, else the newest under NCU_GLOB; SystemExit naming where it looked."""
    if given:
        if not Path(given).is_file():
            raise SystemExit(f"ncu_experts: --ncu {given} is not a file")
        return given
    found = which("ncu") or next((str(p) for p in reversed(glob(NCU_GLOB))), None)
    if not found:
        raise SystemExit(f"ncu_experts: no ncu on PATH nor under {NCU_GLOB}: install Nsight Compute "
                         "or pass --ncu PATH")
    return found


# ------------------------------------------------------------------ the shell: target
def log(msg: str) -> None:
    print(f"[ncu_experts {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def target(args) -> int:
    import torch

    from bench.tools.experts_bench import capture_inputs, pick_sets
    from gates.side.session import Side, Spec, environment
    from gates.spec import side_spec
    from harness import settings as hsettings
    from kernels.k31.moe import experts
    from kernels.k31.moe import reference as ref

    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    if not cuda:
        log("no CUDA device: the CPU profile's mechanics (no counters; ncu needs a GPU)")
    cfg = hsettings.load(ROOT / "kern.yaml").resolve(cuda)
    spec = Spec.from_dict(side_spec(cfg.target, cfg.machine, rows=[args.rows], steps=1))
    side = Side(spec, str(dev))
    sh = side.shapes
    sets = pick_sets(capture_inputs(side, [args.rows])[args.rows], args.calls)
    side.model.state = None  # the decode state (most of the memory) is not needed any more
    if cuda:
        torch.cuda.empty_cache()
    tiles = experts.ExpertTiles.from_tunables()
    ys = [torch.empty(args.rows * sh.dims.top_k, sh.dims.latent, dtype=torch.bfloat16, device=dev) for _ in sets]
    calls = []
    for s in sets:
        local = s["ids"].reshape(-1)[ref.moe_experts_defined(sh, s["ids"])].long() - sh.expert_first
        per_expert = torch.bincount(local, minlength=sh.experts).tolist()
        calls.append({"site": s["site"], "local_pairs": int(local.numel()), "words": {
            "_fc1_kernel": weight_words(per_expert, tiles.block_m, s["w1"][0].numel() // 4),
            "_fc2_kernel": weight_words(per_expert, tiles.block_m, s["w2"][0].numel() // 4)}})
        touched = calls[-1]["words"]["_fc1_kernel"]["touched_experts"]
        calls[-1]["weight_bytes"] = {  # the touched experts' weights and scales, each read once
            "_fc1_kernel": touched * (s["w1"][0].numel() + s["s1"][0].numel()),
            "_fc2_kernel": touched * (s["w2"][0].numel() + s["s2"][0].numel())}

    def run(s, y):
        experts.run_experts(sh, tiles, x=s["x"], ids=s["ids"], w1=s["w1"], s1=s["s1"], w2=s["w2"], s2=s["s2"], y=y)

    for s, y in zip(sets, ys):  # compiles; ncu does not profile before the start below
        run(s, y)
    side.sync()
    if cuda:
        torch.cuda.profiler.start()
    for s, y in zip(sets, ys):
        run(s, y)
    side.sync()
    if cuda:
        torch.cuda.profiler.stop()
    doc = {"rows": args.rows, "tiles": asdict(tiles), "environment": environment(dev),
           "spec": asdict(spec), "calls": calls}
    args.calls_out.parent.mkdir(parents=True, exist_ok=True)
    args.calls_out.write_text(json.dumps(doc, indent=1, default=str))
    log(f"rows {args.rows}: {len(calls)} calls profiled (sites {[c['site'] for c in calls]}), "
        f"FC1 words streamed {[c['words']['_fc1_kernel']['words_streamed'] for c in calls]}")
    return 0


# ------------------------------------------------------------------ the shell: run
def _tail(path: Path, n: int = 30) -> list[str]:
    return path.read_text(errors="replace").splitlines()[-n:] if path.exists() else []


def profile_rows(ncu: str, rows: int, args) -> dict:
    """One ncu run at ``rows``: the document of ncu_experts_<rows>.json (with "error" on failure)."""
    work = args.work / f"rows{rows}"
    work.mkdir(parents=True, exist_ok=True)
    report, calls_out, raw = work / "report", work / "calls.json", work / "raw.csv"
    calls_out.unlink(missing_ok=True)  # never read an earlier run's calls as this run's
    doc = {"meta": {"date": time.strftime("%Y-%m-%d"), "tool": "bench/tools/ncu_experts.py", "commit": args.commit,
                    "rows": rows, "calls": args.calls, "ncu": ncu, "argv": sys.argv[1:],
                    "thresholds": {"ISSUE_BOUND_PCT": ISSUE_BOUND_PCT, "MEMORY_BOUND_PCT": MEMORY_BOUND_PCT},
                    "work": str(work)}}
    try:
        version = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60).stdout
        doc["meta"]["ncu_version"] = version.strip().splitlines()[-1]
    except (OSError, subprocess.SubprocessError, IndexError) as e:
        doc["meta"]["ncu_version"] = f"unreadable: {e}"
    cmd = ncu_profile_command(ncu, sys.executable, rows, args.calls, report, calls_out)
    doc["meta"]["ncu_command"] = cmd
    t0 = time.monotonic()
    with open(work / "profile.log", "w") as logf:
        try:
            rc = subprocess.run(cmd, stdout=logf, stderr=subprocess.STDOUT, timeout=args.timeout, cwd=ROOT).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    doc["meta"]["profile_wall_s"] = round(time.monotonic() - t0, 1)
    if rc != 0 or not calls_out.exists():
        doc["error"] = (f"ncu over the target at {rows} rows: rc {rc} (limit {args.timeout} s), calls file "
                        f"{'written' if calls_out.exists() else 'not written'}; expected rc 0 and {calls_out}")
        doc["log_tail"] = _tail(work / "profile.log")
        return doc
    target_doc = json.loads(calls_out.read_text())
    env = target_doc["environment"]
    doc["meta"].update(gpu=env.get("gpu"), torch=env.get("torch"), triton=env.get("triton"), cuda=env.get("cuda"))
    doc.update(environment=env, tiles=target_doc["tiles"], calls=target_doc["calls"])
    imp = subprocess.run(ncu_import_command(ncu, Path(f"{report}.ncu-rep")), capture_output=True, text=True,
                         timeout=args.timeout)
    raw.write_text(imp.stdout)
    if imp.returncode != 0:
        doc["error"] = f"ncu --import {report}.ncu-rep: rc {imp.returncode}; expected its raw page as CSV"
        doc["log_tail"] = imp.stderr.splitlines()[-30:]
        return doc
    try:
        doc["kernels"] = summarize(parse_raw_csv(imp.stdout), target_doc["calls"])
    except ValueError as e:  # MissingMetric too: the JSON says what the report lacks
        doc["error"] = str(e)
    return doc


def run(args) -> int:
    ncu = find_ncu(args.ncu)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    failed = []
    for rows in args.rows:
        doc = profile_rows(ncu, rows, args)
        out = args.out_dir / f"ncu_experts_{rows}.json"
        out.write_text(json.dumps(doc, indent=1, default=str))
        if "error" in doc:
            failed.append(rows)
            log(f"rows {rows}: FAILED: {doc['error']}")
            for line in doc.get("log_tail", [])[-15:]:
                log(f"  | {line}")
            continue
        for k, v in doc["kernels"].items():
            m = v["median"]
            print(f"rows {rows:4d} {k:12s} {m['duration_us']:8.1f} us  dram {m['dram_pct']:5.1f} %  "
                  f"issue {m['issue_slots_busy_pct']:5.1f} %  ipc {m['issued_ipc']:.2f}  occ "
                  f"{m['achieved_occupancy_pct']:5.1f} %  regs {m['registers_per_thread']:.0f}  "
                  f"inst/word {m['thread_inst_per_word_streamed'] or 0:.1f}  -> {v['verdict']}", flush=True)
    return 1 if failed else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="ncu_experts", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example (on the device, after source bench/device_env.sh):\n"
               "  python3 bench/tools/ncu_experts.py run --rows 16 64 128 --out-dir $OUT --commit $(git rev-parse --short HEAD)\n"
               "or the phase: bash bench/gpu_evidence.sh ncu-experts 16 64 128")
    sub = ap.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("run", help="ncu over the target mode per row count; one JSON each")
    r.add_argument("--rows", type=int, nargs="+", default=[16, 64, 128])
    r.add_argument("--out-dir", type=Path, required=True)
    r.add_argument("--calls", type=int, default=4, help="moe.experts calls profiled per row count (layers)")
    r.add_argument("--ncu", default=None, help=f"default: ncu on PATH, else the newest {NCU_GLOB}")
    r.add_argument("--work", type=Path, default=Path("/tmp/ncu_experts"), help="reports, CSVs, logs")
    r.add_argument("--timeout", type=int, default=300, help="seconds per ncu run")
    r.add_argument("--commit", default="unknown")
    t = sub.add_parser("target", help="what ncu runs: moe.experts launches between profiler start/stop")
    t.add_argument("--rows", type=int, required=True)
    t.add_argument("--calls", type=int, default=4)
    t.add_argument("--calls-out", type=Path, required=True)
    args = ap.parse_args(argv)
    for n in args.rows if args.mode == "run" else [args.rows]:
        if n < 1:
            ap.error(f"--rows: expected row counts >= 1, got {n}")
    if args.calls < 1:
        ap.error(f"--calls: expected >= 1, got {args.calls}")
    return run(args) if args.mode == "run" else target(args)


if __name__ == "__main__":
    sys.exit(main())
