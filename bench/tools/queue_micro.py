"""Device tool: the journey's waiting queue micro-benchmarked before its judgments, one
op_bench process per kernel family with every waiting patch of that family beside main.

    python3 bench/tools/queue_micro.py --from 007 --out $OUT/queue_micro.json [--rows 16,64,128]
        [--timeout 240] [--work /tmp/qm]

Each patch under bench/journey/patches/ from ``--from`` on is applied to main in its own
worktree the way the replay backend would hand it out with every predecessor abandoned (the
patch, else its onto-main variant: ``harness.agents.replay.variants``); the ops it changes are
those whose sources, or the tunables beside them, it touches. Then bench/tools/op_bench.py
runs each family's ops with main's tree and the family's candidate trees (checked against
main's outputs, timed interleaved in one process). The orchestrator reads the ratios to decide
which candidates are worth a judgment first; nothing here decides a merge (the gates do).
A family whose process fails or times out keeps its error and the others go on.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness.gitcmd import GitError, git, git_or_none  # noqa: E402 (after the path)

PATCHES = ROOT / "bench" / "journey" / "patches"
TREE = "kernels/k31/"


@dataclass(frozen=True)
class QueuedPatch:
    """One waiting patch as applied on the device: its file name, the file that applied (the
    patch or its onto-main variant; None when neither did) and the lines its diff changes, by path."""
    name: str
    applied: str | None
    changes: Mapping[str, str]  # path -> its added and removed lines
    error: str = ""

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(self.changes)


@dataclass(frozen=True)
class FamilyRun:
    """One op_bench process: the ops of a family that its patches change, and those patches."""
    family: str
    ops: tuple[str, ...]
    patches: tuple[str, ...]


def changed_lines(diff_text: str) -> dict[str, str]:
    """Pure: each file of a git diff (its ``b/`` path, in order) and its added and removed lines."""
    out: dict[str, list[str]] = {}
    current = None
    for line in diff_text.splitlines():
        if line.startswith("diff --git "):
            current = out.setdefault(line.split(" b/", 1)[1], [])
        elif current is not None and line[:1] in "+-" and not line.startswith(("+++", "---")):
            current.append(line[1:])
    return {path: "\n".join(lines) for path, lines in out.items()}


def ops_changed(changes: Mapping[str, str], op_files: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
    """Pure: the ops (of ``op_files``: op name -> its files under kernels/k31/) that a patch with
    ``changes`` (path -> changed lines) changes, sorted. A tunables file changes the ops whose
    knobs (``"<op>.``) its changed lines name; when they name none (a family-wide knob such as
    ``dense.linear.*``), every op beside it. Over-asking costs the device memory: op_bench
    records and copies every op it is asked for."""
    rels = {p.removeprefix(TREE): text for p, text in changes.items() if p.startswith(TREE)}
    out = set()
    for rel, text in rels.items():
        users = [op for op, files in op_files.items() if rel in files]
        if rel.endswith("tunables.py"):
            named = [op for op in users if f'"{op}.' in text]
            users = named or users
        out.update(users)
    return tuple(sorted(out))


def plan(queue: Iterable[QueuedPatch], op_files: Mapping[str, tuple[str, ...]],
         family_of: Mapping[str, str]) -> list[FamilyRun]:
    """Pure: one run per family (first seen first) over the patches that applied; the family of
    a patch is that of the ops it changes (several families: one run each). A family's dense
    ops are asked as op_bench's group ``dense`` when a patch changes every dense op."""
    dense = tuple(sorted(op for op, fam in family_of.items() if fam == "dense"))
    runs: dict[str, tuple[list[str], list[str]]] = {}
    for q in queue:
        if q.applied is None:
            continue
        for op in ops_changed(q.changes, op_files):
            ops, names = runs.setdefault(family_of[op], ([], []))
            if op not in ops:
                ops.append(op)
            if q.name not in names:
                names.append(q.name)
    out = []
    for fam, (ops, names) in runs.items():
        asked = ("dense",) if fam == "dense" and set(dense) <= set(ops) else tuple(sorted(ops))
        out.append(FamilyRun(fam, asked, tuple(names)))
    return out


@dataclass(frozen=True)
class PatchSummary:
    """What one patch's op_bench rows say, summed over the ops it changed: per row count, the
    step's ms saved (main's ms per step minus the patch's; negative: slower) and whether every
    output was bit-identical to main's; errors where a run failed."""
    name: str
    saved_ms: Mapping[str, float]
    identical: bool
    errors: tuple[str, ...] = ()


def measured_on(families: Mapping[str, dict]) -> dict:
    """Pure: the GPU, torch and triton the families' op_bench processes ran on (the first
    family with a document says; every family runs on the one device), or "not measured"."""
    for fam in families.values():
        env = (fam.get("op_bench") or {}).get("environment")
        if env:
            return {k: env.get(k, "unknown") for k in ("gpu", "torch", "triton")}
    return {k: "not measured (no family's op_bench wrote its document)" for k in ("gpu", "torch", "triton")}


def summarize(queue: Iterable[QueuedPatch], families: Mapping[str, dict]) -> list[PatchSummary]:
    """Pure: each patch's summary from the families' op_bench documents (a family's rerun of a
    patch alone, when there is one, stands for that patch), in queue order. A patch that did not
    apply, or whose op never ran, says why instead of a number."""
    docs: dict[str, list[dict]] = {}
    for fam in families.values():
        alone = fam.get("alone", {})
        for name in fam["patches"]:
            doc = alone[name]["op_bench"] if name in alone else fam["op_bench"]
            docs.setdefault(name, []).append(doc)
    out = []
    for q in queue:
        if q.applied is None:
            out.append(PatchSummary(q.name, {}, False, (f"did not apply: {q.error}",)))
            continue
        v, saved, identical, errors = variant_name(q.name), {}, True, []
        for doc in docs.get(q.name, []):
            for op, per in ((doc or {}).get("ops") or {}).items():
                for rows, e in per.items():
                    mine, main = e["variants"].get(v), e["variants"].get("main", {})
                    if mine is None:
                        continue  # this op is main's in the patch's tree
                    if "ms_per_step" not in mine or "ms_per_step" not in main:
                        errors.append(f"{op} at {rows} rows: {mine.get('error') or main.get('error') or 'not timed'}")
                        continue
                    saved[rows] = saved.get(rows, 0.0) + main["ms_per_step"] - mine["ms_per_step"]
                    identical = identical and mine["check"] == "bit-identical"
        if not saved and not errors:
            errors.append("no op of it was timed (its family's op_bench failed: see families)")
        out.append(PatchSummary(q.name, saved, identical and bool(saved), tuple(errors)))
    return out


def summary_table(rows: list[PatchSummary]) -> str:
    counts = sorted({r for s in rows for r in s.saved_ms}, key=int)
    lines = ["ms per step saved by each patch's ops (negative: slower), by rows",
             f"{'patch':58s} " + " ".join(f"{r:>8s}" for r in counts) + "  outputs"]
    for s in rows:
        cells = " ".join(f"{s.saved_ms[r]:+8.3f}" if r in s.saved_ms else f"{'-':>8s}" for r in counts)
        what = "bit-identical" if s.identical else ("differ" if s.saved_ms else "")
        lines.append(f"{s.name[:58]:58s} {cells}  {what}{'  ' + '; '.join(s.errors) if s.errors else ''}")
    return "\n".join(lines)


def variant_name(patch: str) -> str:
    """op_bench's variant name for a patch file: its number (``013-...patch`` -> ``p013``)."""
    return "p" + patch.split("-", 1)[0]


# ------------------------------------------------------------------ the shell
def apply_queue(repo: Path, names: list[str], work: Path) -> list[QueuedPatch]:
    """Each patch of ``repo``'s queue applied to its main in a worktree ``work/<variant name>``."""
    from harness.agents.replay import variants

    patches = repo / PATCHES.relative_to(ROOT)
    out = []
    for name in names:
        wt = work / variant_name(name)
        if wt.exists():
            git_or_none(repo, "worktree", "remove", "--force", str(wt))
        try:
            git(repo, "worktree", "add", "--detach", "-q", str(wt), "main")
        except GitError as e:
            raise SystemExit(f"queue_micro: environment: git worktree add {wt} failed: {e.said}") from None
        errors = []
        for f in variants(patches / name):
            try:
                git(wt, "apply", "--index", str(f))
            except GitError as e:  # does not apply here: the next variant, or the error kept
                errors.append(f"{f.relative_to(repo)}: {e.said[:300]}")
                continue
            out.append(QueuedPatch(name, str(f.relative_to(repo)), changed_lines(f.read_text())))
            break
        else:
            out.append(QueuedPatch(name, None, {}, "; ".join(errors)))
    return out


def log(msg: str) -> None:
    print(f"queue_micro: {msg}", file=sys.stderr, flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="queue_micro", description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="first", required=True, help="the first waiting patch's number, e.g. 007")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--rows", default="16,64,128")
    ap.add_argument("--timeout", type=int, default=240, help="seconds for each family's op_bench")
    ap.add_argument("--work", type=Path, default=Path("/tmp/qm"))
    args = ap.parse_args(argv)

    from harness.agents.replay import patch_files
    from kernels.k31 import contracts
    from bench.tools.op_bench import op_files

    names = [p.name for p in patch_files(PATCHES) if p.name.split("-", 1)[0] >= args.first]
    if not names:
        raise SystemExit(f"queue_micro: no patch in {PATCHES.relative_to(ROOT)} from {args.first} on")
    args.work.mkdir(parents=True, exist_ok=True)
    queue = apply_queue(ROOT, names, args.work)
    files = {op: tuple(op_files(s)) for op, s in contracts.OPS.items()}
    runs = plan(queue, files, {op: s.family for op, s in contracts.OPS.items()})
    main_rev = git(ROOT, "rev-parse", "--short", "main").strip()
    result = {"what": "the journey's waiting queue, each family's patches beside main in one op_bench process",
              "date": time.strftime("%Y-%m-%d"), "main": main_rev, "rows": args.rows,
              "queue": [{"name": q.name, "applied": q.applied, "paths": list(q.paths), "error": q.error} for q in queue], "families": {}}
    for q in queue:
        log(f"{q.name}: " + (f"applied {q.applied}" if q.applied else f"neither applies: {q.error}"))
    def bench(run: FamilyRun, key: str) -> dict:
        out = args.work / f"{key}.json"
        out.unlink(missing_ok=True)  # an earlier run's numbers are never read as this one's
        cmd = [sys.executable, str(ROOT / "bench/tools/op_bench.py"), "--rows", args.rows, "--out", str(out),
               "--commit", f"main {main_rev}; queue " + " ".join(run.patches),
               "--variant", f"main={ROOT / 'kernels' / 'k31'}"]
        cmd += [a for op in run.ops for a in ("--op", op)]
        cmd += [a for n in run.patches
                for a in ("--variant", f"{variant_name(n)}={args.work / variant_name(n) / 'kernels' / 'k31'}")]
        log(f"{key}: ops {', '.join(run.ops)}; patches {', '.join(run.patches)}")
        t0 = time.monotonic()
        try:
            r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=args.timeout)
            rc, tail = r.returncode, (r.stdout + r.stderr)[-3000:]
        except subprocess.TimeoutExpired as e:
            rc, tail = "timeout", ((e.stdout or b"").decode() + (e.stderr or b"").decode())[-3000:]
        entry = {"ops": list(run.ops), "patches": list(run.patches), "rc": rc,
                 "wall_s": round(time.monotonic() - t0, 1), "tail": tail.splitlines()[-40:],
                 "op_bench": json.loads(out.read_text()) if out.exists() else None}
        log(f"{key}: rc {rc}, {entry['wall_s']} s")
        print("\n".join(entry["tail"][-25:]), flush=True)
        return entry

    for run in runs:
        entry = result["families"][run.family] = bench(run, run.family)
        args.out.write_text(json.dumps(result, indent=1, default=str))
        if entry["rc"] not in (0, "timeout") and len(run.patches) > 1:
            # one candidate that faults the GPU poisons the whole process's CUDA context: each
            # patch again in its own process, so the others keep their numbers
            entry["alone"] = {}
            for name in run.patches:
                alone = FamilyRun(run.family, run.ops, (name,))
                entry["alone"][name] = bench(alone, f"{run.family}-{variant_name(name)}")
                args.out.write_text(json.dumps(result, indent=1, default=str))
    for q in queue:  # the trees op_bench read; the repository keeps no worktree of them
        git_or_none(ROOT, "worktree", "remove", "--force", str(args.work / variant_name(q.name)))
    result.update(measured_on(result["families"]))
    summary = summarize(queue, result["families"])
    result["summary"] = [s.__dict__ for s in summary]
    args.out.write_text(json.dumps(result, indent=1, default=str))
    print(summary_table(summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
