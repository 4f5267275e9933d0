"""``kern doctor``: is this machine ready for a long unattended run?

Probes (the shell: :func:`probe`) gather plain data and never decide: what torch and nvidia-smi
see, free GPU memory, git's state, free disk under runs/, whether the ledger opens in WAL mode
and takes the write lock, whether the agent backend can be reached, whether a loop holds the
repository. Decisions (the core: :func:`diagnose` and one pure function per check) turn that
data into findings, each ok / warn / fail with its fix: who acts and what to do. Exit 1 when
any finding fails.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..settings import Agent, Resolved, SettingsFile
from .shared import examples

OK, WARN, FAIL = "ok", "warn", "fail"
GIB = 1 << 30
# NVML clock-event reasons (nvidia-smi clocks_event_reasons.active): idle, application clocks
# and display clocks are normal; anything else lowers clocks under load and skews timings
THROTTLE = {0x4: "software power cap", 0x8: "hardware slowdown", 0x10: "sync boost",
            0x20: "software thermal slowdown", 0x40: "hardware thermal slowdown",
            0x80: "hardware power brake"}
SMI_FIELDS = ("index", "name", "clocks.sm", "clocks.max.sm", "clocks.mem",
              "clocks_event_reasons.active", "persistence_mode", "temperature.gpu")
DEFAULT_API = "https://api.anthropic.com"


@dataclass(frozen=True)
class Finding:
    check: str
    status: str  # ok | warn | fail
    text: str  # what was found
    fix: str = ""  # who acts and what to do (for warn and fail)


# --------------------------------------------------------------------------- decisions (pure)
def gpu_finding(gpu: dict, smi: dict) -> Finding:
    """``gpu``: {devices: [{name, total_bytes, free_bytes}], torch, cuda, visible, error};
    ``smi``: {present, gpus: [rows], error}."""
    devs = gpu.get("devices") or []
    vis = f" (CUDA_VISIBLE_DEVICES={gpu['visible']})" if gpu.get("visible") is not None else ""
    if devs:
        names = ", ".join(sorted({d["name"] for d in devs}))
        return Finding("gpu", OK, f"{len(devs)} x {names} visible to torch {gpu.get('torch')} "
                                  f"(CUDA {gpu.get('cuda')}){vis}")
    listed = smi.get("gpus") or []
    if listed:
        return Finding("gpu", FAIL, f"nvidia-smi lists {len(listed)} GPU(s) ({listed[0].get('name')}) "
                                    f"but torch {gpu.get('torch')} sees none{vis}"
                                    + (f": {gpu['error']}" if gpu.get("error") else ""),
                       "operator: install a CUDA build of torch that matches the driver, or fix "
                       "CUDA_VISIBLE_DEVICES; without it the loop runs the CPU profile")
    return Finding("gpu", WARN, f"no GPU visible{vis}: the loop runs the cpu profile through "
                                f"Triton's interpreter (mechanics, never GPU scores)",
                   "operator: run on a GPU machine for scores; nothing to do for a CPU demo")


def clock_finding(gpu: dict, smi: dict) -> Finding:
    if not gpu.get("devices") and not smi.get("gpus"):
        return Finding("clocks", OK, "no GPU: no clocks to check")
    if not smi.get("present"):
        return Finding("clocks", WARN, "nvidia-smi not on PATH: clocks and throttling unchecked",
                       "operator: put the driver's nvidia-smi on PATH and run kern doctor again")
    if smi.get("error") or not smi.get("gpus"):
        return Finding("clocks", WARN, f"nvidia-smi answered nothing usable: {smi.get('error')}",
                       "operator: run `nvidia-smi -q -d CLOCK,PERFORMANCE` and check the driver")
    problems, fixes, facts = [], [], []
    for g in smi["gpus"]:
        i = g.get("index")
        facts.append(f"GPU {i} SM {g.get('clocks.sm')}/{g.get('clocks.max.sm')} MHz, memory "
                     f"{g.get('clocks.mem')} MHz, {g.get('temperature.gpu')} C")
        reasons = throttle_reasons(g.get("clocks_event_reasons.active"))
        if reasons:
            problems.append(f"GPU {i} throttled: {', '.join(reasons)}")
            fixes.append("check cooling and power limits (`nvidia-smi -q -d PERFORMANCE`) before "
                         "timing anything")
        if str(g.get("persistence_mode", "")).lower() == "disabled":
            problems.append(f"GPU {i} persistence mode off")
            fixes.append("as root, `nvidia-smi -pm 1`, so the driver stays loaded and every run "
                         "starts from the same state")
    if problems:
        return Finding("clocks", WARN, "; ".join(problems), "operator: " + "; ".join(dict.fromkeys(fixes)))
    return Finding("clocks", OK, "; ".join(facts) + "; not throttled, persistence on")


def throttle_reasons(value) -> list[str]:
    """The clock-event reasons of an nvidia-smi bitmask ("0x...4") that skew timings."""
    try:
        bits = int(str(value), 16) if str(value).lower().startswith("0x") else int(value)
    except (TypeError, ValueError):
        return []
    return [name for bit, name in THROTTLE.items() if bits & bit]


def memory_finding(gpu: dict, need_gib: float | None) -> Finding:
    """Free memory of the device the sides use (the first visible) against the profile's need."""
    devs = gpu.get("devices") or []
    if not devs:
        return Finding("gpu memory", OK, "no GPU: the cpu profile's model lives in host memory")
    d = devs[0]
    free, total = d["free_bytes"] / GIB, d["total_bytes"] / GIB
    if need_gib is None:
        return Finding("gpu memory", WARN, f"GPU 0: {free:.1f} of {total:.1f} GiB free; the gpu "
                                           f"profile does not say what it needs",
                       "operator: set profiles.gpu.memory_gib in kern.yaml (kern step's peak memory)")
    if free < need_gib:
        return Finding("gpu memory", FAIL, f"GPU 0: {free:.1f} GiB free, the gpu profile needs "
                                           f"{need_gib:g} GiB ({total:.1f} GiB total)",
                       "operator: stop what holds GPU 0 (nvidia-smi lists it), or pick a free GPU "
                       "with CUDA_VISIBLE_DEVICES")
    return Finding("gpu memory", OK, f"GPU 0: {free:.1f} GiB free >= the {need_gib:g} GiB the gpu "
                                     f"profile needs")


def git_finding(g: dict, main: str = "main") -> Finding:
    """``g``: {error, branch (None: detached), has_main, dirty: [porcelain lines]}."""
    if g.get("error"):
        return Finding("git", FAIL, f"not a usable git repository: {g['error']}",
                       "operator: run kern in the repository (or pass --repo)")
    if not g.get("has_main"):
        return Finding("git", FAIL, f"no branch {main!r}: the loop merges into it",
                       f"operator: create it (`git branch {main} <rev>`), or try `kern loop --demo`")
    dirty = g.get("dirty") or []
    problems, fixes = [], []
    if dirty:
        problems.append(f"{len(dirty)} uncommitted change(s) ({', '.join(x[3:] for x in dirty[:3])}"
                        f"{', ...' if len(dirty) > 3 else ''})")
        fixes.append("commit or stash them (a merge into a checked-out main refuses to overwrite "
                     "them)")
    if g.get("branch") != main:
        where = f"on {g['branch']!r}" if g.get("branch") else "detached"
        problems.append(f"HEAD is {where}, not {main!r}")
        fixes.append(f"`git checkout {main}` to see merges land in the work tree (the loop moves "
                     f"{main} either way)")
    if problems:
        return Finding("git", WARN, "; ".join(problems), "operator: " + "; ".join(fixes))
    return Finding("git", OK, f"on {main}, work tree clean")


def worktree_finding(g: dict, in_flight: set) -> Finding:
    """``g['attempt_worktrees']``: [{number, path}] under runs/worktrees; ``g['prunable']``:
    registered worktrees whose folder is gone; ``in_flight``: attempts still running."""
    left = [w for w in g.get("attempt_worktrees") or [] if w["number"] not in in_flight]
    prunable = g.get("prunable") or []
    if not left and not prunable:
        busy = len(g.get("attempt_worktrees") or [])
        return Finding("worktrees", OK, f"no attempt worktree left over ({busy} in use)")
    parts, fixes = [], []
    if left:
        parts.append(f"{len(left)} attempt worktree(s) of finished attempts left: "
                     + ", ".join(Path(w["path"]).name for w in left[:5]))
        fixes.append("`git worktree remove --force <path>` for each (their branches attempt/<n> "
                     "keep the commits)")
    if prunable:
        parts.append(f"{len(prunable)} registered worktree(s) whose folder is gone")
        fixes.append("`git worktree prune`")
    return Finding("worktrees", WARN, "; ".join(parts), "operator: " + "; ".join(fixes))


def disk_finding(d: dict, need) -> Finding:
    """``d``: {path, free_bytes, error}; ``need``: what one judgment of this machine's profile
    writes at most (``gates.rules.footprint.JudgmentBytes``; its recordings are deleted when its verdict
    is made, so a long run holds one judgment's at a time). Every judgment checks the same
    figure before its sides start and stops with ``environment: disk`` when short."""
    from gates.rules.footprint import fmt_bytes

    if d.get("error"):
        return Finding("disk", FAIL, f"cannot read free space at {d.get('path')}: {d['error']}",
                       "operator: make runs/ a readable local folder")
    free = d["free_bytes"]
    text = f"{free / GIB:.1f} GiB free under {d['path']}"
    if free < need.need:
        return Finding("disk", FAIL, f"{text}; one judgment writes up to {need.describe()}",
                       "operator: free space there (old runs/bench and runs/tap folders can go), "
                       "or lower test.snapshot_budget_mb in kern.yaml; until then every judgment "
                       "stops with environment: disk")
    if free < 2 * need.need:  # each judgment's documents and logs stay: little room to grow
        return Finding("disk", WARN, f"{text}: less than twice what one judgment writes "
                                     f"({fmt_bytes(need.need)} with the margin)",
                       "operator: free space before a week-long run (old runs/bench folders can go)")
    return Finding("disk", OK, f"{text}; one judgment writes up to {fmt_bytes(need.need)}")


def ledger_finding(led: dict) -> Finding:
    """``led``: {path, exists, journal_mode, writable, locked, integrity, error}."""
    if led.get("skipped"):
        return Finding("ledger", WARN, f"{led['path']}: not checked: {led['skipped']}",
                       "user: run kern doctor in a clone of the repository (or pass --repo)")
    if led.get("error"):
        return Finding("ledger", FAIL, f"{led['path']}: {led['error']}",
                       "operator: keep runs/ on a local disk the user can write; the message says "
                       "what else to do (a damaged ledger: sqlite3 .recover, never deleted)")
    where = led["path"] if led.get("exists") else f"{led['path']} (not created yet; a test file was)"
    if led.get("journal_mode") != "wal":
        return Finding("ledger", FAIL, f"{where}: journal mode {led.get('journal_mode')!r}, not WAL",
                       "operator: put runs/ on a local file system (network file systems refuse WAL)")
    if led.get("locked"):
        return Finding("ledger", WARN, f"{where}: WAL, but another process holds the write lock",
                       "operator: a loop or kern try is writing; wait for it or stop it")
    if led.get("integrity", "ok") != "ok":
        return Finding("ledger", FAIL, f"{where}: integrity check says {led['integrity']}",
                       f"operator: keep the file (its history); `sqlite3 {led['path']} .recover | "
                       f"sqlite3 recovered.sqlite` copies every row SQLite can still read")
    return Finding("ledger", OK, f"{where}: WAL, writable")


def judging_finding(led: dict, loop_running: bool) -> Finding:
    """``led['judging']``: [{number, backend, since, judge}] the attempts the ledger says are
    judging, ``judge`` whether the kern try judging it runs (None: none recorded, or another
    host's); ``loop_running``: a kern loop holds the repository. An attempt nobody judges any
    more is named with what to do: a kern try's is judged by no one until cancelled or tried
    again; a loop's is judged again by the next kern loop."""
    judging = led.get("judging") or []
    gone = [j for j in judging if j.get("judge") is False
            or (j.get("judge") is None and j.get("backend") == "manual")
            or (j.get("judge") is None and j.get("backend") != "manual" and not loop_running)]
    if not gone:
        return Finding("judging", OK, f"{len(judging)} attempt(s) judging, each by a live process"
                       if judging else "no attempt judging")
    tried = [j for j in gone if j.get("judge") is not None or j.get("backend") == "manual"]
    looped = [j for j in gone if j not in tried]
    parts, fixes = [], []
    if tried:
        parts.append("left judging by a kern try that is gone: " + ", ".join(
            f"#{j['number']} (since {j['since']})" for j in tried))
        fixes.append(f"`kern cancel {tried[0]['number']}` records it as interrupted; `kern try REV "
                     f"--again` judges the commit again")
    if looped:
        parts.append("left judging by a kern loop that stopped: " + ", ".join(
            f"#{j['number']} (since {j['since']})" for j in looped))
        fixes.append("the next `kern loop` judges them again; `kern cancel N` first if it should not")
    return Finding("judging", WARN, "; ".join(parts), "user: " + "; ".join(fixes))


def agent_finding(backend: str, a: dict) -> Finding:
    """``a`` by backend: anthropic {key, url, status, net_error, checked}; claude-code {sdk};
    command {command, program, found}; tuner and replay need nothing."""
    if backend in ("anthropic", "claude-code"):
        head = f"{backend} backend"
        if backend == "claude-code":
            if not a.get("sdk"):
                return Finding("agent", FAIL, "claude-code backend: claude_agent_sdk is not importable",
                               "operator: pip install 'kern-loop[agents]'")
            head = "claude-code backend: claude_agent_sdk importable"
        if not a.get("key"):
            return Finding("agent", FAIL, f"{head}; no ANTHROPIC_API_KEY in the environment",
                           "operator: export ANTHROPIC_API_KEY in the shell that starts kern loop "
                           "(only the agent process sees it)")
        if not a.get("checked"):
            return Finding("agent", OK, f"{head}; key present; {a.get('url')} not contacted "
                                        f"({a.get('why_unchecked') or '--offline'})")
        if a.get("net_error"):
            return Finding("agent", FAIL, f"{head}; {a['url']} unreachable: {a['net_error']}",
                           "operator: check the network or proxy, or set agent.base_url / "
                           "ANTHROPIC_BASE_URL")
        status = a.get("status")
        said = f": {a['message']}" if a.get("message") else ""
        if status in (401, 403):
            return Finding("agent", FAIL, f"{head}; {a['url']} refused the key (HTTP {status}{said})",
                           "operator: export a valid ANTHROPIC_API_KEY (console.anthropic.com)")
        if not isinstance(status, int) or not 200 <= status < 300:
            return Finding("agent", WARN, f"{head}; key present; {a['url']} answered HTTP "
                                          f"{status}{said}",
                           "operator: check agent.model and agent.base_url; the first attempt "
                           "will say more")
        return Finding("agent", OK, f"{head}; key present; {a['url']} accepted it (HTTP {status})")
    if backend == "command":
        if not a.get("program"):
            return Finding("agent", FAIL, "command backend: agent.command is empty",
                           "operator: set agent.command in kern.yaml (the brief comes on stdin)")
        if not a.get("found"):
            return Finding("agent", FAIL, f"command backend: {a['program']!r} (of {a['command']!r}) "
                                          f"is not an executable on PATH",
                           "operator: install it or give its full path in agent.command")
        return Finding("agent", OK, f"command backend: {a['program']} is {a['found']}")
    return Finding("agent", OK, f"{backend} backend: offline, nothing to reach")


def lock_finding(lock: dict) -> Finding:
    if lock.get("held"):
        return Finding("loop lock", WARN, f"a kern loop holds this repository ({lock.get('holder')})",
                       "operator: a second loop is refused; stop that one first if it should not run")
    return Finding("loop lock", OK, "no loop runs on this repository")


def sandbox_finding(sb: dict) -> Finding:
    """``sb``: {mode (kern.yaml's sandbox), mechanism (or None), described, error, fix}."""
    if sb.get("error"):
        return Finding("sandbox", FAIL, sb["error"], sb.get("fix", ""))
    if sb.get("mechanism") == "off":
        return Finding("sandbox", WARN, sb["described"],
                       "user: set `sandbox: auto` in kern.yaml unless this machine holds nothing "
                       "a candidate's code must not read or send away")
    if sb.get("mechanism") == "user":  # the weakest: it leaves readable what others may read
        return Finding("sandbox", WARN, f"{sb['described']} (kern.yaml sandbox: {sb['mode']})",
                       "operator: allow unprivileged user namespaces or boot a kernel with landlock "
                       "for the full sandbox; until then keep secrets unreadable to others "
                       "(chmod o-r) — docs/sandbox.md says what `user` leaves open")
    return Finding("sandbox", OK, f"{sb['described']} (kern.yaml sandbox: {sb['mode']})")


def diagnose(p: dict, settings: SettingsFile) -> list[Finding]:
    """Pure: every finding, in the order a person reads them (the memory one against the gpu
    profile, the disk one against the profile of the machine the probe found)."""
    from gates.rules.footprint import judgment_bytes

    need = settings.resolve(cuda=True).machine.memory_gib
    cfg = settings.resolve(cuda=bool(p["gpu"].get("devices")))
    judgment = judgment_bytes(cfg.machine, cfg.test, cfg.bench,
                              copies=(p.get("sandbox") or {}).get("mechanism") in ("landlock", "user"))
    return [gpu_finding(p["gpu"], p["smi"]), clock_finding(p["gpu"], p["smi"]),
            memory_finding(p["gpu"], need),
            git_finding(p["git"]), worktree_finding(p["git"], set(p["ledger"].get("in_flight", ()))),
            disk_finding(p["disk"], judgment), ledger_finding(p["ledger"]),
            judging_finding(p["ledger"], bool(p["lock"].get("held"))),
            agent_finding(cfg.agent.backend, p["agent"]), lock_finding(p["lock"]),
            sandbox_finding(p["sandbox"])]


def lines(findings: list[Finding]) -> list[str]:
    out = []
    for f in findings:
        out.append(f"{f.status:5s} {f.check:11s} {f.text}")
        if f.fix and f.status != OK:
            out.append(f"{'':17s} fix: {f.fix}")
    counts = {s: sum(f.status == s for f in findings) for s in (OK, WARN, FAIL)}
    out.append(f"doctor: {counts[OK]} ok, {counts[WARN]} warn, {counts[FAIL]} fail"
               + (" — fix the failures before a long run" if counts[FAIL] else ""))
    return out


# --------------------------------------------------------------------------- probes (shell)
def probe(repo: Path, cfg: Resolved, *, offline: bool) -> dict:
    """Every probe; none writes outside a git repository (the ledger's write test is skipped
    there), and inside one nothing is left behind."""
    runs = repo / "runs"
    g = _probe_git(repo, runs)
    if g.get("error"):
        ledger = {"path": str(runs / "ledger.sqlite"), "skipped": "no git repository here, and "
                  "kern doctor writes nothing outside one"}
    else:
        ledger = _probe_ledger(repo)
    return {"gpu": _probe_gpu(), "smi": _probe_smi(), "git": g,
            "disk": _probe_disk(runs if runs.exists() else repo), "ledger": ledger,
            "agent": _probe_agent(cfg.agent, offline), "lock": _probe_lock(runs),
            "sandbox": _probe_sandbox(cfg.sandbox)}


def _probe_sandbox(mode: str) -> dict:
    from gates.launch import sandbox
    from gates.rules.confinement import SandboxUnavailable

    try:
        mech = sandbox.chosen(mode)
    except SandboxUnavailable as e:
        text, _, fix = str(e).partition("; fix: ")
        return {"mode": mode, "mechanism": None, "error": text, "fix": fix}
    return {"mode": mode, "mechanism": mech, "described": sandbox.facts().describe(mech)}


def _probe_gpu() -> dict:
    out = {"visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "devices": []}
    try:
        import torch

        out.update(torch=torch.__version__, cuda=torch.version.cuda)
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                free, total = torch.cuda.mem_get_info(i)
                out["devices"].append({"name": torch.cuda.get_device_name(i), "total_bytes": total,
                                       "free_bytes": free})
    except Exception as e:  # noqa: BLE001 - what torch says is the finding
        out["error"] = f"{type(e).__name__}: {e}"[:300]
    return out


def _probe_smi() -> dict:
    from ..farm import nvidia_smi

    fields = list(SMI_FIELDS)
    for attempt in (fields, [f.replace("clocks_event_reasons", "clocks_throttle_reasons") for f in fields]):
        got = nvidia_smi(attempt)  # older drivers only know the field by its former name
        if got is None:
            return {"present": False}
        if isinstance(got, list):
            return {"present": True, "gpus": [dict(zip(fields, row.values())) for row in got]}
    return {"present": True, "error": got}


def _probe_git(repo: Path, runs: Path) -> dict:
    from ..gitcmd import GitError, git, git_or_none

    try:
        branch = git(repo, "symbolic-ref", "--quiet", "--short", "HEAD", timeout=60).strip()
    except GitError as e:
        if e.returncode is None:  # git did not run
            return {"error": e.said[:300]}
        branch = None  # detached
    try:
        has_main = git_or_none(repo, "rev-parse", "--verify", "--quiet", "refs/heads/main",
                               timeout=60) is not None
        dirty = [x for x in git(repo, "status", "--porcelain", timeout=60).splitlines()
                 if not x[3:].startswith("runs/")]
        listing = git(repo, "worktree", "list", "--porcelain", timeout=60)
    except GitError as e:  # git's own words ("not a git repository")
        said = e.said.splitlines()
        return {"error": (said[0] if said else str(e))[:300]}
    worktrees, prunable, path = [], [], None
    for line in listing.splitlines():
        if line.startswith("worktree "):
            path = line[len("worktree "):]
            name = Path(path).name
            if Path(path).parent == (runs / "worktrees").resolve() and name.startswith("attempt-") \
                    and name[len("attempt-"):].isdigit():
                worktrees.append({"number": int(name[len("attempt-"):]), "path": path})
        elif line.startswith("prunable"):
            prunable.append(path)
    return {"branch": branch, "has_main": has_main, "dirty": dirty,
            "attempt_worktrees": worktrees, "prunable": prunable}


def _probe_disk(path: Path) -> dict:
    try:
        return {"path": str(path), "free_bytes": shutil.disk_usage(path).free}
    except OSError as e:
        return {"path": str(path), "error": str(e)}


def _probe_ledger(repo: Path) -> dict:
    """Open the ledger (or, when none exists yet, a scratch database beside where it will be)
    in WAL mode and take the write lock for a moment; never leaves a file behind."""
    import sqlite3

    from ..ledger import IN_FLIGHT, JUDGING, Ledger, LedgerError, default_path

    path = default_path(repo)
    out = {"path": str(path), "exists": path.exists()}
    if not path.exists():
        scratch = path.with_name(f".doctor-{os.getpid()}.sqlite")
        made = not path.parent.exists()  # taken away again below: doctor leaves nothing
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(str(scratch), isolation_level=None)
            try:
                out["journal_mode"] = db.execute("PRAGMA journal_mode = WAL").fetchone()[0].lower()
                db.execute("BEGIN IMMEDIATE")
                db.execute("CREATE TABLE t (x)")
                db.execute("COMMIT")
            finally:
                db.close()
        except (OSError, sqlite3.Error) as e:
            out["error"] = f"cannot write a database there: {e}"
        finally:
            for suffix in ("", "-wal", "-shm"):
                Path(str(scratch) + suffix).unlink(missing_ok=True)
            if made:
                try:
                    path.parent.rmdir()
                except OSError:
                    pass
        return out
    try:
        led = Ledger(path, busy_timeout_ms=500)  # a writer holding it longer is busy
    except LedgerError as e:
        out["error"] = str(e)
        return out
    from ..processes import judge_alive

    runs = path.parent
    try:
        out["journal_mode"] = led._db.execute("PRAGMA journal_mode").fetchone()[0].lower()
        try:
            led._db.execute("BEGIN IMMEDIATE")
            led._db.execute("ROLLBACK")
        except sqlite3.OperationalError as e:
            out["locked"] = "locked" in str(e) or "busy" in str(e)
            if not out["locked"]:
                out["error"] = f"cannot take the write lock: {e}"
        out["integrity"] = led._db.execute("PRAGMA quick_check").fetchone()[0]
        out["in_flight"] = [a.number for a in led.attempts(states=IN_FLIGHT)]
        out["judging"] = [{"number": a.number, "backend": a.backend, "since": a.updated_at,
                           "judge": judge_alive(runs / "attempts" / str(a.number))}
                          for a in led.attempts(states=[JUDGING])]
    except LedgerError as e:
        out["error"] = str(e)
    finally:
        led.close()
    return out


def _probe_agent(agent: Agent, offline: bool) -> dict:
    backend = agent.backend
    if backend in ("anthropic", "claude-code"):
        out = {}
        if backend == "claude-code":  # Claude Code reads the key and ANTHROPIC_BASE_URL itself
            import importlib.util

            out["sdk"] = importlib.util.find_spec("claude_agent_sdk") is not None
            url = os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_API
        else:
            url = agent.base_url or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_API
        key = os.environ.get("ANTHROPIC_API_KEY") or ""
        token = os.environ.get("ANTHROPIC_AUTH_TOKEN") or os.environ.get("CLAUDE_CODE_OAUTH_TOKEN") or ""
        out.update(key=bool(key or token), url=url, checked=not offline and bool(key))
        if token and not key and not offline:
            out["why_unchecked"] = "a bearer token, not an API key: doctor asks with API keys only"
        if out["checked"]:
            out.update(_ask(url, key, agent.model))
        return out
    if backend == "command":
        command = agent.command
        program = command_program(command)
        found = None
        if program:
            found = shutil.which(program) or (program if os.access(program, os.X_OK) and
                                              Path(program).is_file() else None)
        return {"command": command, "program": program, "found": found}
    return {}


def command_program(command: str) -> str | None:
    """Pure: the program a shell line runs (past ``exec``, ``env`` and VAR=value words)."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    for w in words:
        if w in ("exec", "env", "nohup", "command") or ("=" in w and not w.startswith(("/", "."))):
            continue
        return w
    return None


def _ask(url: str, key: str, model: str, timeout_s: float = 10.0) -> dict:
    """One request the Messages API answers only for a valid key, at no cost: count the tokens
    of a one-word message (``POST /v1/messages/count_tokens``). {status, message, seconds} or
    {net_error}."""
    import urllib.error
    import urllib.request

    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "ping"}]}).encode()
    req = urllib.request.Request(url.rstrip("/") + "/v1/messages/count_tokens", data=body,
                                 method="POST", headers={
                                     "x-api-key": key, "anthropic-version": "2023-06-01",
                                     "content-type": "application/json"})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return {"status": r.status, "seconds": time.monotonic() - t0}
    except urllib.error.HTTPError as e:  # an answer, so the API is reachable: what did it say?
        try:
            message = json.loads(e.read() or b"{}").get("error", {}).get("message")
        except (ValueError, AttributeError, OSError):
            message = None
        return {"status": e.code, "message": (message or "")[:200], "seconds": time.monotonic() - t0}
    except (urllib.error.URLError, OSError, ValueError) as e:
        return {"net_error": str(getattr(e, "reason", e))[:200]}


def _probe_lock(runs: Path) -> dict:
    from ..processes import loop_holder

    holder = loop_holder(runs)
    return {"held": False} if holder is None else {"held": True, "holder": holder}


# --------------------------------------------------------------------------- the verb
def register(sub) -> None:
    p = sub.add_parser(
        "doctor", **examples(
            'kern doctor                           every check, one line each, with its fix',
            "kern doctor --offline --json          without contacting the agent's API, as JSON"),
        help="check this machine before a long run",
        description="Check this machine before a long unattended run, one finding per line, each "
                    "ok / warn / fail with its fix (who acts, what to do): the GPU torch sees "
                    "(and which), its clocks and throttling (nvidia-smi), free GPU memory against "
                    "profiles.gpu.memory_gib, git (clean tree, on main, attempt worktrees left "
                    "over), free disk under runs/ against what one judgment writes on this machine's "
                    "profile (main's kept calls: its recording_mb, at most the snapshot budget), the "
                    "ledger (opens in WAL mode, takes the write lock), attempts left judging by a "
                    "process that is gone, the agent backend (anthropic: the key present and "
                    "accepted by the API; claude-code: the SDK importable, the key present and "
                    "accepted; command: the program on PATH; tuner and replay: nothing to reach), whether a loop "
                    "already holds the repository, and the sandbox candidate code runs in "
                    "(kern.yaml sandbox; fails when none is available). Exit 1 if any check fails.")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--offline", action="store_true",
                   help="do not contact the agent's API (no request that checks the key)")
    p.set_defaults(func=cmd_doctor)


def cmd_doctor(args) -> int:
    from .shared import settings_of

    repo = Path(args.repo).resolve()
    settings = settings_of(args, repo)
    findings = diagnose(probe(repo, settings.resolve(cuda=False), offline=args.offline), settings)
    failed = any(f.status == FAIL for f in findings)
    if args.json:
        json.dump({"ok": not failed, "findings": [asdict(f) for f in findings]}, sys.stdout)
        print()
    else:
        print("\n".join(lines(findings)))
    return 1 if failed else 0
