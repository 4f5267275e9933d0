"""Every judgment's seconds, as one JSON record for bench/results/ (issue 34).

    python bench/tools/judging_times.py --ledger runs/ledger.sqlite --attempts runs/attempts \
        [--machine h200] [--date 2026-12-05] [--out FILE | --suffix S] [--note TEXT] [--attempt N ...]

Reads the ledger (a copy: opening one may migrate it) and each attempt's judgment files
(``runs/attempts/<n>/judgment-<k>.json``, or ``bench/journey/attempts/``) and writes
``bench/results/<date>-<machine>-judging.json``: one row per judgment with its verdict kind
(``verdict``: the accuracy gate's verdict, ``scope`` when only the scope gate ran), the
attempt's final state and reason, ``accuracy_s``, ``scorer_s``, ``remeasure_s``, ``total_s``,
the first and last without main's compile (``accuracy_warm_s``, ``total_warm_s``: the loop's
steady state; ``compile_main_s``: the compile) and its phases (``phases``: gate -> part ->
phase -> seconds; ``by_phase``: phase -> seconds over every part; both on the gates' paths, adding up to their walls), what ran beside them
(``beside``: the candidate's start and build beside main's recording, each with its phases,
``seconds``, ``overlap_s`` and ``after_s``; ``overlap_s``: their seconds that main's recording
covered, None when nothing ran beside or no timeline was kept), then the medians per verdict
kind (``medians``). A judgment kept before phases were recorded has its gates' walls and what
its reports show (``phases_recorded`` false) and no ``total_s``. The machine defaults to the
judgments' GPU ("h200"), else "cpu".

The times are of the machine the judgments ran on; nothing here measures anything.
"""
from __future__ import annotations

import argparse
import datetime
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gates.rules.phases import GATES, JudgmentTimes  # noqa: E402


def verdict_kind(doc: dict) -> str:
    """Pure: a judgment's verdict kind: its accuracy verdict, or ``scope`` when no gate that
    runs code ran."""
    test = doc.get("test") or {}
    return test.get("verdict") or "scope"


def row(number: int, k: int, doc: dict, state: str | None, reason: str | None, last: bool) -> dict:
    """Pure: one judgment's row (``doc``: its judgment file)."""
    t = JudgmentTimes.of_judgment(doc)
    return {"attempt": number, "judgment": k, "last": last, "verdict": verdict_kind(doc),
            "state": state if last else "judged again", "reason": reason if last else None,
            "accuracy_s": t.accuracy_s, "scorer_s": t.scorer_s, "remeasure_s": t.remeasure_s,
            "total_s": t.total_s, **warm(t.accuracy_s, t.total_s, t.by_phase().get("compile_main")),
            "phases_recorded": doc.get("times") is not None,
            "phases": {g: t.by_part(g) for g in GATES if t.by_part(g)}, "by_phase": t.by_phase(),
            "overlap_s": t.overlap_s, "beside": [b.view() for b in t.beside], **checks_seconds(doc),
            # each tap side's GPU memory (None off CUDA, or a report from before it was kept)
            "device_memory": (doc.get("test") or {}).get("device_memory")}


def checks_seconds(doc: dict) -> dict:
    """Pure: where a judgment's checking passes went: main's noise side's passes (``plain``,
    ``repeat``, ``band``: None where the band was cached or not needed), the scorer's timed
    band (main's replays with the touched ops on the reference; None where none ran) and its
    verification by side."""
    bench = doc.get("bench") or {}
    return {"noise_passes_s": (doc.get("test") or {}).get("noise_passes_s"),
            "timed_band_s": bench.get("timed_band_s"),
            # the scorer's verification by side (A main's graph against eager; B that and its
            # ops against the reference): what main's share of it costs a judgment
            "verify_s": bench.get("verify_s")}


def warm(accuracy_s, total_s, compile_main_s) -> dict:
    """Pure: a judgment's seconds without main's compile (``compile_main``: paid once per main,
    by the loop when it profiles main, by a ``kern try`` on a fresh clone in its first judgment):
    the loop's steady state, which issue 34's goals are read on. None where not measured."""
    c = compile_main_s or 0.0
    return {"compile_main_s": compile_main_s,
            "accuracy_warm_s": None if accuracy_s is None else accuracy_s - c,
            "total_warm_s": None if total_s is None else total_s - c}


def _median(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def medians(rows: list[dict]) -> dict:
    """Pure: per verdict kind, how many judgments and the medians of their seconds (each over
    the judgments that have it: ``scorer_s`` over those whose scorer ran, ``overlap_s`` over
    those whose replay ran beside main's recording)."""
    out = {}
    for kind in sorted({r["verdict"] for r in rows}):
        rs = [r for r in rows if r["verdict"] == kind]
        both = [r["accuracy_s"] + (r["scorer_s"] or 0.0) + (r["remeasure_s"] or 0.0)
                for r in rs if r["accuracy_s"] is not None]
        out[kind] = {"judgments": len(rs),
                     **{k: _median([r.get(k) for r in rs]) for k in ("accuracy_s", "scorer_s", "remeasure_s", "total_s",
                                                                 "accuracy_warm_s", "total_warm_s")},
                     "overlap_s": _median([r.get("overlap_s") for r in rs]),
                     "gates_s": _median(both)}
    return out


def machine_of(docs: list[dict]) -> str:
    """Pure: the judgments' GPU as a short name ("NVIDIA H200" -> "h200"), else "cpu"."""
    for d in docs:
        for rep in (d.get("test"), d.get("bench")):
            gpu = ((rep or {}).get("environment") or {}).get("gpu")
            if gpu:
                return str(gpu).split()[-1].lower()
    return "cpu"


def collect(ledger: Path, attempts: Path, only: set[int] | None = None) -> tuple[list[dict], list[dict]]:
    """(rows, judgment files) of every attempt of ``ledger`` (``only``: of those numbers) with
    judgment files under ``attempts``, in attempt and judgment order."""
    from harness.ledger import Ledger

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "ledger.sqlite"
        shutil.copy(ledger, copy)
        for side in ("-wal", "-shm"):  # a ledger in use keeps its latest rows in its WAL
            if Path(f"{ledger}{side}").exists():
                shutil.copy(f"{ledger}{side}", f"{copy}{side}")
        with Ledger(copy) as led:
            states = {a.number: (a.state, a.reason) for a in led.attempts()}
    rows, docs = [], []
    for number in sorted(states):
        if only is not None and number not in only:
            continue
        files = sorted((attempts / str(number)).glob("judgment-*.json"),
                       key=lambda p: int(p.stem.split("-")[1]) if p.stem.split("-")[1].isdigit() else 0)
        for i, path in enumerate(files):
            doc = json.loads(path.read_text())
            docs.append(doc)
            rows.append(row(number, i + 1, doc, *states[number], last=i == len(files) - 1))
    return rows, docs


def record(rows: list[dict], machine: str, date: str, source: dict, note: str = "") -> dict:
    """Pure: the JSON record the tool writes."""
    return {"what": "every judgment's seconds by phase (bench/tools/judging_times.py)",
            "machine": machine, "date": date, "source": source, "note": note,
            "judgments": len(rows), "rows": rows, "medians": medians(rows)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ledger", type=Path, default=Path("runs/ledger.sqlite"))
    ap.add_argument("--attempts", type=Path, default=Path("runs/attempts"))
    ap.add_argument("--machine", default=None, help="default: the judgments' GPU, else cpu")
    ap.add_argument("--date", default=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"))
    ap.add_argument("--out", type=Path, default=None,
                    help="default: bench/results/<date>-<machine>-judging[-SUFFIX].json")
    ap.add_argument("--suffix", default="", help="ends the default file's name, e.g. loop-12-18")
    ap.add_argument("--note", default="")
    ap.add_argument("--attempt", type=int, action="append", default=None, metavar="N",
                    help="only attempt N (repeat for several; default: every attempt), e.g. the "
                         "attempts one GPU run judged")
    args = ap.parse_args(argv)
    if not args.ledger.is_file():
        ap.error(f"no ledger at {args.ledger} (expected a kern-loop ledger.sqlite)")
    rows, docs = collect(args.ledger, args.attempts, set(args.attempt) if args.attempt else None)
    if args.attempt and not rows:
        ap.error(f"no judgment files of attempts {args.attempt} under {args.attempts}")
    machine = args.machine or machine_of(docs)
    out = args.out or ROOT / "bench" / "results" / \
        f"{args.date}-{machine}-judging{'-' + args.suffix if args.suffix else ''}.json"
    rec = record(rows, machine, args.date, {"ledger": str(args.ledger), "attempts": str(args.attempts)},
                 args.note)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rec, indent=1) + "\n")
    for kind, m in rec["medians"].items():
        print(f"{kind}: {m['judgments']} judgment(s), median accuracy {m['accuracy_s']}, scorer "
              f"{m['scorer_s']}, total {m['total_s']}; without main's compile: accuracy "
              f"{m['accuracy_warm_s']}, total {m['total_warm_s']}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
