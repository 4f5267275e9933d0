"""Issue 35 item 1 on the H200: the scorer's band rule against attempt #9's timed rows.

    python bench/tools/fair_bar.py candidates            # in a clone of the repository
    python bench/tools/fair_bar.py record JUDGMENT.json... --out RECORD.json [--note TEXT]

``candidates`` makes two branches from ``main`` and prints ``name sha`` for each:

* ``fair-bar/attempt-9``: #9's patch (bench/journey/patches/005-*.patch, ``git am`` onto its
  base 8339e6e, where it applies as it was judged), carried onto main: its indexer whole, and
  in ``mla/tunables.py`` main's file with the ``mla.index_logits`` block taken from the patch
  (main's tunables moved since: the mla.topk block of #8's merge);
* ``fair-bar/long-context-bug``: ``tests/adversarial/hacks.py``'s ``LONG_CONTEXT_BUG`` (the
  indexer's scale folded ahead, and past the tap's context, 8192 local tokens on the gpu
  profile, only the most recent top-k tokens scored): the class the rule must refuse.

``record`` reads the judgments ``kern try`` kept (``runs/attempts/<n>/judgment-<k>.json``) and
writes one JSON record for bench/results/: per judgment the accuracy verdict, the timed
outputs' statistics, main's band at the scorer's context with the band rule's checks
(``gates.rules.verdict.judge_band``), the verdict of the fixed rule on the same timed outputs
(``judge_timed`` without the band: what the scorer said before issue 35) and what the band
cost. ``bash bench/gpu_evidence.sh fairbar`` runs both on the device (docs/results.md).
"""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATCH_9 = "bench/journey/patches/005-mla.index_logits-token-major-fp16.patch"
BASE_9 = "8339e6e"  # main when #9 was judged (bench/journey/attempts/9/judgment-1.json)
TUNABLES = "kernels/k31/mla/tunables.py"
INDEXER = "kernels/k31/mla/indexer.py"
BLOCK_START, BLOCK_END = "    # mla.index_logits:", "    # mla.topk"


def index_logits_block(text: str) -> str:
    """Pure: the ``mla.index_logits`` block of a ``mla/tunables.py`` (its comment through the
    line before the ``mla.topk`` comment)."""
    i, j = text.find(BLOCK_START), text.find(BLOCK_END)
    if i < 0 or j < i:
        raise ValueError(f"{TUNABLES}: expected a block from {BLOCK_START!r} to {BLOCK_END!r}; "
                         f"the file changed: update bench/tools/fair_bar.py")
    return text[i:j]


def with_block(main_text: str, patched_text: str) -> str:
    """Pure: main's tunables with the patched file's ``mla.index_logits`` block."""
    return main_text.replace(index_logits_block(main_text), index_logits_block(patched_text), 1)


def summarize(judgment: dict, th, scorer) -> dict:
    """Pure: one judgment (``{"test": ..., "bench": ...}``) as the record keeps it, judged again
    on ``th`` (the verdict's gates.settings.Thresholds) and ``scorer`` (ScorerSettings)."""
    from gates.rules import verdict

    test, bench = judgment.get("test") or {}, judgment.get("bench") or {}
    out = {"rev": test.get("rev"), "base": test.get("base"), "accuracy": test.get("verdict"),
           "touched_ops": test.get("touched_ops")}
    timed = bench.get("timed")
    if not timed:
        return {**out, "scorer": bench.get("outcome") or "not run", "error": bench.get("error")}
    claim = {"verdict": test.get("verdict"), **{k: (test.get("evidence") or {}).get(k)
                                               for k in ("band", "noise", "noise_tap")},
             "rows": ((test.get("evidence") or {}).get("logits") or {}).get("rows")}
    fixed = verdict.judge_timed(timed, claim, th, scorer.state_sketch_rel)
    out["timed"] = {b: {k: {x: t[k][x] for x in ("rows", "kl_max", "kl_mean", "flips_near_tie",
                                                 "flips_confident")}
                        for k in ("logits", "logits_sample") if k in t}
                    for b, t in timed.items()}
    out["fixed_rule"] = fixed or "pass"
    band = bench.get("timed_band")
    if band is not None:
        tb = verdict.TimedBand.of(band)
        checks = verdict.judge_band(tb, scorer.timed_band_alpha, th.band_factor,
                                    th.kl_pass, scorer.bootstrap)
        out["band"] = verdict.band_summary(tb, checks)
        out["band"]["replays"] = band.get("replays")
        out["band_rule"] = verdict.judge_timed(timed, claim, th, scorer.state_sketch_rel,
                                               band=band, alpha=scorer.timed_band_alpha,
                                               iters=scorer.bootstrap) or "pass"
        out["band_s"] = bench.get("timed_band_s")
    checks = ((bench.get("analysis") or {}).get("sides") or {}).get("B", {}).get("failed_checks")
    out["scorer_checks"] = checks
    out["judged_cost"] = bench.get("judged_cost")
    out["wall_s"] = {"test": test.get("wall_s"), "bench": bench.get("wall_s")}
    return out


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def candidates(repo: Path) -> dict:
    """The two branches (see the module's docstring) in ``repo``; returns {name: sha}."""
    sys.path.insert(0, str(ROOT))
    from tests.adversarial.hacks import LONG_CONTEXT_BUG, Hack, commit_hack

    out = {}
    _git("checkout", "-q", "-B", "fair-bar/attempt-9-on-its-base", BASE_9, cwd=repo)
    _git("am", "-q", str(ROOT / PATCH_9), cwd=repo)
    patched = _git("rev-parse", "HEAD", cwd=repo)
    message = _git("log", "-1", "--format=%B", patched, cwd=repo)
    _git("checkout", "-q", "-B", "fair-bar/attempt-9", "main", cwd=repo)
    _git("checkout", patched, "--", INDEXER, cwd=repo)
    (repo / TUNABLES).write_text(with_block((repo / TUNABLES).read_text(),
                                            _git("show", f"{patched}:{TUNABLES}", cwd=repo) + "\n"))
    _git("add", INDEXER, TUNABLES, cwd=repo)
    _git("commit", "-q", "-m", message + f"\n\n(#9's patch {PATCH_9} carried onto main for issue 35's "
         "re-judgment: its indexer, and its mla.index_logits tunables in main's file)", cwd=repo)
    out["fair-bar/attempt-9"] = _git("rev-parse", "HEAD", cwd=repo)
    _git("checkout", "-q", "main", cwd=repo)
    bug = Hack(LONG_CONTEXT_BUG.case, "fair-bar/long-context-bug", LONG_CONTEXT_BUG.what, LONG_CONTEXT_BUG.edits)
    out[bug.name] = commit_hack(repo, bug)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("candidates")
    c.add_argument("--repo", type=Path, default=Path.cwd())
    r = sub.add_parser("record")
    r.add_argument("judgments", nargs="+", type=Path)
    r.add_argument("--config", type=Path, default=Path("kern.yaml"))
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--note", default="")
    a = ap.parse_args(argv)
    if a.cmd == "candidates":
        for name, sha in candidates(a.repo.resolve()).items():
            print(name, sha)
        return 0
    sys.path.insert(0, str(ROOT))
    from harness.settings import load

    cfg = load(a.config).resolve(True)
    record = {"what": "issue 35: the scorer's band rule on the H200 (bench/tools/fair_bar.py)",
              "date": datetime.date.today().isoformat(), "note": a.note,
              "environment": None, "judgments": []}
    for p in a.judgments:
        j = json.loads(p.read_text())
        record["environment"] = record["environment"] or (j.get("bench") or {}).get("environment")
        record["judgments"].append({"file": str(p), **summarize(j, cfg.test, cfg.bench)})
    a.out.write_text(json.dumps(record, indent=1, default=str))
    for j in record["judgments"]:
        band = j.get("band") or {}
        print(f"{(j.get('rev') or '')[:12]} {j.get('accuracy')}: fixed rule "
              f"{'pass' if j.get('fixed_rule') == 'pass' else 'refuse'}, band rule "
              f"{'pass' if j.get('band_rule') == 'pass' else 'refuse' if band else 'not measured'}"
              + (f" ({band.get('rows')} rows, {j.get('band_s') or 0:.1f} s)" if band else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
