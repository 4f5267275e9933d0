"""The gates' results as terminal text: every line ``kern test``, ``kern bench`` and ``kern show``
print of a gate, rendered here from the typed results the gates return (gates/results.py), as
pytest's terminal reporter renders the reports its runners build.

The gates produce typed results and their JSON reports only; this module decides how they read.
Pure: lists of lines, no printing. Sections no type holds yet (the scorer's machine, baselines,
peers and timed outputs; the accuracy gate's tap, local and logits evidence) are read from the
result's report (``res.report``), the JSON it writes.

    kern test    accuracy_report(AccuracyResult)  diff, ranks, tap, local, logits, noise,
                                                  reference, why, hidden, then the verdict
    kern bench   scorer_report(BenchResult)       machine, each side per bucket, checks,
                                                  baselines, peers, timed outputs, hidden,
                                                  B − A per bucket, the score
    kern show    accuracy_lines, view_lines,      the deciding judgment's verdict, its A/B per
                 last_words_lines, phase_lines    bucket (gates.results.ScorerView), the sides
                                                  that ended badly, where its time went
"""
from __future__ import annotations

from gates.results import OK, AccuracyResult, BenchResult, ScorerView, check_name

PAD = f"{'':<10}"  # the indent of a section's continuation lines


def _ms(x, sign: bool = False) -> str:
    return "-" if x is None else (f"{x:+.3f}" if sign else f"{x:.3f}")


def _secs(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} s" if x < 10 else f"{x:.0f} s"


# ----------------------------------------------------------------------------- kern test
def _short(sha: str) -> str:
    from gates.launch import checkout

    return sha[:12] if sha != checkout.WORKTREE else "worktree"


def rank_lines(res: AccuracyResult) -> list[str]:
    """Each side's processes and layout, and whether its ranks agreed (only when a side ran
    on several ranks or on its own layout)."""
    rep = res.report
    ev = rep["evidence"]
    rk = ev.get("ranks") or {}
    if not (rk.get("a") or rk.get("b") or ev.get("cross_layout")):
        return []
    out = []
    for side, spec in (("A", rep.get("base_spec") or rep["spec"]), ("B", rep["spec"])):
        info = rk.get(side.lower())
        how = (f"{info['world']} processes ({info['backend']}): {info['note']}" if info else
               "1 process")
        bad = rk.get(f"{side.lower()}_disagree") or []
        agree = "" if not info else (f"; ranks DISAGREE after {len(bad)} step(s)" if bad else
                                     "; every rank identical at every step")
        out.append(f"ranks      {side}: layout {spec.get('layout')}, {how}{agree}")
    return out


def accuracy_hidden_line(hidden: dict | None, replayed: int | None = None) -> str:
    """The judgment's hidden inputs, shown once it is over (one line)."""
    from gates.protocol import Hidden

    if hidden is None:
        return "hidden     none: the target seed and the visible batch sizes only"
    how = f"attempt #{replayed}'s, replayed" if replayed is not None else "drawn for this judgment"
    return f"hidden     {Hidden.from_dict(hidden).describe()} ({how})"


def accuracy_report(res: AccuracyResult | dict, replayed: int | None = None, limit: int = 8) -> list[str]:
    """``kern test``: one fact per line by section; equal things counted, different things
    worst first; the verdict last. ``res``: the gate's result (or its report); ``replayed``:
    the attempt whose hidden inputs it replayed (else as its report says)."""
    from gates.rules import verdict

    res = AccuracyResult.of(res)
    rep = res.report
    replayed = rep.get("replayed_from") if replayed is None else replayed
    ev = rep["evidence"]
    touched = (", ".join(rep["touched_ops"]) or "none") if isinstance(rep["touched_ops"], list) \
        else "all (a file no single op owns changed)"
    out = [f"diff       {_short(rep['base'])} → {_short(rep['rev'])}: {len(rep['changed'])} file(s) changed; "
           f"ops touched: {touched}"]
    if ev.get("protected_changed"):
        out.append(f"diff       protected: {', '.join(ev['protected_changed'])}")
    a_time = " (cached)" if rep["a_cached"] else f" {rep['a_wall_s']:.0f}s"
    noise = res.outcome_noise
    if noise not in ("not needed",):
        noise = f"{noise} (cached for this main)" if rep.get("noise_cached") else \
            f"{noise} {rep.get('noise_wall_s', 0):.0f}s"
    out.append(f"diff       sides: A {res.outcome_a}{a_time}, B {res.outcome_b} {rep['b_wall_s']:.0f}s, "
               f"A's noise passes {noise}")
    for side in ("a", "b"):
        if rep.get(f"{side}_log_tail"):
            last = [ln for ln in rep[f"{side}_log_tail"].strip().splitlines() if ln.strip()][-1:]
            out.append(f"diff       {side.upper()}'s last words: {last[0][:160] if last else '(none)'} "
                       f"(log in {rep[f'{side}_dir']})")
    out += rank_lines(res)
    tap = ev.get("tap")
    if tap:
        spec = rep["spec"]
        rows = rep.get("rows") or spec["rows"]
        out.append(f"tap        {len(rows)} batch sizes {rows} x {spec['steps']} steps, "
                   f"context {spec['context']}: {tap['calls']} op calls")
        if not tap.get("compared", True):
            out.append("tap        not compared with A's op calls (another layout); B's own "
                       "defects checked")
        elif tap["differ_raw"] == 0 and not tap["sequence"]:
            out.append(f"tap        {tap['calls']} op calls bit-identical")
        else:
            out.append(f"tap        {tap['calls'] - tap['differ_raw']} equal, {tap['differ_raw']} differ "
                       f"({tap['differ_value']} in value); first at {tap['first_difference']}")
            worst = sorted(tap["by_op"].items(), key=lambda kv: -kv[1]["raw"])
            for op, c in [w for w in worst if w[1]["raw"]][:limit]:
                out.append(f"tap        {op}: {c['raw']} of {c['calls']} calls differ")
        for s in tap["sequence"][:limit]:
            out.append(f"tap        sequence: {s}")
        for s in (tap["unwritten"] + tap["nonfinite"] + tap["outside"])[:limit]:
            out.append(f"tap        defect: {s}")
    local = ev.get("local")
    if local and local["ops"]:
        ops = sorted(local["ops"].items(), key=lambda kv: -kv[1]["rel_rms"])
        for op, o in ops[:limit]:
            at = f", worst at {o['worst_site']}" if o["worst_site"] else ""
            out.append(f"local      {op}: {o['calls']} calls, {o['differing']} elements differ, max ulp "
                       f"{verdict.fmt(o['max_ulp'])}, rel RMS {verdict.fmt(o['rel_rms'])}, NaN/Inf {o['nan']}{at}")
        for d in (local["defects"] + local["diverged"])[:limit]:
            out.append(f"local      {d}")
    elif tap and tap["differ_raw"]:
        out.append("local      not run (no recorded call to pin)")
    lg = ev.get("logits")
    if lg:
        out.append(f"logits     {lg['rows']} rows: argmax flips {lg['flips_confident']} confident, "
                   f"{lg['flips_near_tie']} near-tie; KL max {verdict.fmt(lg['kl_max'])}, mean "
                   f"{verdict.fmt(lg['kl_mean'])}; max |Δ| {verdict.fmt(lg['max_ulps'])} ulp of A's top logit")
        for w in [w for w in lg["worst"] if w["kl"] > 0 or w["flip"]][:min(limit, 3)]:
            flip = (", FLIP (near-tie)" if w["near_tie"] else ", FLIP (confident)") if w["flip"] else ""
            out.append(f"logits     {w['at']}: KL {verdict.fmt(w['kl'])}, margin {w['margin']:.3g}, "
                       f"rms Δ {w['rms_delta']:.3g}{flip}")
    bd = ev.get("band")
    if bd:
        out.append(f"noise      A vs A with the touched ops on the reference (the band): KL max "
                   f"{verdict.fmt(bd['kl_max'])}, flips {bd['flips_near_tie'] + bd['flips_confident']}")
    nz = ev.get("noise")
    if nz:
        nt = ev["noise_tap"]
        if nt["differ_raw"] == 0 and nz["identical"]:
            out.append("noise      A re-run from restored state: bit-reproducible")
        else:
            out.append(f"noise      A vs A: {nt['differ_raw']} op calls differ, KL max {verdict.fmt(nz['kl_max'])}, "
                       f"flips {nz['flips_near_tie'] + nz['flips_confident']}")
    if local and local["ops"]:
        breaks = local["reference_breaks"]
        worst = sorted(local["ops"].items(), key=lambda kv: -kv[1]["ref_rel_rms"])
        for op, o in worst[:limit]:
            out.append(f"reference  {op}: rel RMS {verdict.fmt(o['ref_rel_rms'])}, max ulp {verdict.fmt(o['ref_max_ulp'])}")
        for b in breaks[:limit]:
            out.append(f"reference  exceeded: {b}")
        if not breaks:
            out.append(f"reference  {len(local['ops'])} op(s) within tolerance")
    elif tap and tap["differ_raw"] == 0:
        out.append("reference  unchanged ops: nothing to check")
    for r in res.reasons[1:]:
        out.append(f"why        {r}")
    out.append(accuracy_hidden_line(res.hidden, replayed))
    out.append(f"{res.verdict}" + (f": {res.reasons[0]}" if res.reasons else "")
               + f"  ({res.wall_s:.0f}s)")
    return out


# ----------------------------------------------------------------------------- kern bench
def _processes(report: dict) -> str:
    return ", ".join(f"{k} {n}" for k, n in sorted((report.get("processes") or {}).items()))


def scorer_report(res: BenchResult | dict, replayed: int | None = None) -> list[str]:
    """``kern bench``: the machine, each side's median per bucket (spread, % of the roofline
    floor, each rank's), the checks, baselines, peers and timed outputs, the hidden inputs,
    then with a base B − A per bucket and the score's change, its class and the guard.
    ``res``: the scorer's result (or its report); ``replayed`` as :func:`accuracy_report`'."""
    res = BenchResult.of(res)
    rep, view = res.report, res.view
    replayed = rep.get("replayed_from") if replayed is None else replayed
    lines = []
    if rep.get("cpu_note"):
        lines.append(f"note       {rep['cpu_note']}")
    env = rep.get("environment") or {}
    lines.append(f"machine    {env.get('gpu') or 'CPU'}; torch {env.get('torch')}, triton {env.get('triton')}; "
                 f"model {'shared over CUDA IPC' if rep['shared_model'] else 'built per side'}"
                 + (f"; sides alternate, one process at a time ({_processes(rep)})"
                    if rep.get("alternating") else ""))
    rk = rep.get("ranks")
    if rk:
        lines.append(f"ranks      {rk['world']} processes per side ({rk['backend']}), layout "
                     f"{rk['layout']}: {rk['note']}; a replay's time is its slowest rank's")
    if res.outcome != OK:
        lines.append(f"FAILED     {res.outcome}: {res.error} (log {rep.get('log')})")
        return lines
    bw = (rep.get("bandwidth") or {}).get("Bps")
    if bw:
        torch_sum = (rep.get("bandwidth") or {}).get("torch_sum_Bps")
        lines.append(f"ceiling    read {bw / 1e12:.2f} TB/s (best streaming read of this run: floors divide by it)"
                     + (f"; torch's sum {torch_sum / 1e12:.2f} TB/s" if torch_sum else ""))
    for k, side in sorted(view.sides.items()):
        for bv in view.buckets:
            t = bv.a if k == "A" else bv.b
            pct = bv.pct_of_floor(t.median)
            floor = f"  floor {bv.floor_ms:.3f} ms ({pct:.0f} % of floor)" if pct is not None else ""
            ranks = f"  ranks {' / '.join(f'{x:.3f}' for x in t.ranks)}" if t.ranks else ""
            lines.append(f"{k} {bv.rows:4d} rows  median {t.median:9.3f} ms  p10–p90 {t.p10:.3f}–{t.p90:.3f}"
                         f"  cv {t.cv * 100:.2f} %{floor}{ranks}")
        if side.failed_checks:
            lines.append(f"{k} CHECK FAILED: {list(side.failed_checks[:3])}")
        if not side.graph_matches_eager:
            lines.append(f"{k} CHECK FAILED: graph replay differs from the eager step")
    an = rep["analysis"]
    for k in sorted(an["sides"]):
        if an["sides"][k].get("score_cv") is not None:
            vs = an["sides"][k]["visit_scores"]
            lines.append(f"{k} score per visit: {', '.join(f'{x:.3f}' for x in vs)} ms (cv {an['sides'][k]['score_cv'] * 100:.2f} %)")
    if rep.get("extras_error"):
        lines.append(f"baseline   stopped: {rep['extras_error'][:200]}")
    lines += baseline_lines(res)
    for b, e in ((rep.get("peers") or {}).get("kda_decode") or {}).items():
        if isinstance(e, dict) and "ours_us" in e and "fla_us" in e:
            lines.append(f"peer       kda decode {int(b):4d} rows: ours {e['ours_us']:.1f} µs, fla-core "
                         f"{e['fla_us']:.1f} µs (ours/fla {e['ratio_ours_over_fla']:.2f})")
        else:
            lines.append(f"peer       kda decode {b}: {e}")
    lines += timed_lines(rep)
    lines.append(scorer_hidden_line(res.hidden, replayed))
    if res.ab is not None:
        for bv in view.buckets:
            lines.append(f"delta {bv.rows:4d} rows  {bv.delta_ms:+.3f} ms [{bv.low:+.3f}, {bv.high:+.3f}]")
        lines.append(f"score      {view.score_a:.3f} → {view.score_b:.3f} ms; noise band ±{view.band_ms:.3f} ms")
        lines.append(f"delta {view.delta_ms:+.2f} ms ({view.delta_pct:+.1f} %) [{view.low:+.2f}, {view.high:+.2f}] "
                     f"{view.classification} · {view.guard}")
    else:
        lines.append(f"score {view.score_b:.3f} ms")
    return lines


def baseline_lines(res: BenchResult | dict) -> list[str]:
    """Pure: one line per baseline bucket of a finished bench: its median step and its ratio to
    the tree's (main's median, else the candidate's), the first call's time apart
    (torch.compile compiles there), or why it failed."""
    from gates.rules import stats

    res = BenchResult.of(res)
    sides = res.view.sides
    lines = []
    for kind, per in (res.report.get("baselines") or {}).items():
        for b in per:
            r = per[b]
            if "error" in r:
                lines.append(f"baseline   {kind} {b} rows: {r['error'][:150]}")
            else:
                med = stats.median(r["times"])
                ratio = med / sides["A" if "A" in sides else "B"].medians[int(b)]
                # the first call compiles (torch.compile) or warms up: its time apart from the step's
                warm = (f", then {r['warmup_steps']} warm-up step(s) in {r['warmup_s']:.1f} s"
                        if r.get("warmup_steps") else "")
                first = (f"  (first call {r['first_call_s']:.1f} s"
                         + (", compiling" if kind == "compile" else "") + warm + ")") if "first_call_s" in r else ""
                lines.append(f"baseline   {kind} {int(b):4d} rows  {med:9.3f} ms  = {ratio:.2f}x the tree's step{first}")
    return lines


def timed_lines(report: dict) -> list[str]:
    """What the timed replays' outputs showed against main's (one line, two when they differ),
    from a bench's report."""
    from gates import logits
    from gates.rules import verdict

    timed = report.get("timed")
    if not timed:
        return []
    n = sum(t["replays"] for t in timed.values())
    claim = report.get("accuracy_claim")
    raw = [(b, t["first_raw_difference"]) for b, t in sorted(timed.items(), key=lambda x: int(x[0]))
           if t["first_raw_difference"] is not None]
    cost = report.get("judged_cost") or {}
    when = (f" (judging them cost {cost['total_s']:.1f} s, {cost['share_of_wall'] * 100:.1f} % of "
            f"the run)") if cost.get("share_of_wall") is not None else ""
    band = band_lines((report.get("analysis") or {}).get("timed_band"), report.get("timed_band_s"))
    if not raw:
        return [f"timed      {n} timed replays per side: outputs and state equal main's byte for "
                f"byte{when}"] + band
    b, first = raw[0]
    head = (f"timed      {n} timed replays per side: first difference at {b} rows replay "
            f"{first['replay']} ({', '.join(first['what'])}){when}")
    if any("logits" not in t for t in timed.values()):
        return [head, f"timed      digests only (the accuracy gate claimed {claim})"]
    lg = logits.merge_logit_stats([t["logits"] for t in timed.values()])
    sk = max(t["sketch_rel_max"] for t in timed.values())
    return [head,
            f"timed      logits: argmax flips {lg['flips_confident']} confident, "
            f"{lg['flips_near_tie']} near-tie of {lg['rows']} rows; KL max {verdict.fmt(lg['kl_max'])}; "
            f"state sketch {verdict.fmt(sk)} from main's; judged against: {claim or 'no accuracy verdict (scored alone)'}"] \
        + band


def band_lines(band: dict | None, seconds: float | None) -> list[str]:
    """Pure: main's band at the scorer's context and the band rule's outcome (one line)."""
    from gates.rules import verdict

    if not band:
        return []
    stats = "; ".join(f"{c['statistic']} {verdict.fmt(c['candidate'])} vs main's {verdict.fmt(c['main'])}"
                      for c in band["checks"])
    took = f", {seconds:.1f} s" if seconds is not None else ""
    return [f"band       against main with {', '.join(band['ops']) or 'no op'} on the reference, "
            f"{band['rows']} timed rows of {band['clusters']} requests{took}: {stats}; "
            f"{'as close as main' if band['ok'] else 'further than main'} (KL max "
            f"{verdict.fmt(band['kl_max']['candidate'])} vs main's {verdict.fmt(band['kl_max']['main'])})"]


def scorer_hidden_line(hidden: dict | None, replayed: int | None = None) -> str:
    """The input seed both sides decoded, shown once the run is over (one line)."""
    from gates.protocol import Hidden

    if hidden is None:
        return "hidden     none: the workload of the target seed"
    h = Hidden.from_dict(hidden)
    how = f"attempt #{replayed}'s, replayed" if replayed is not None else "drawn for this run"
    return f"hidden     input seed {h.input_seed} on both sides ({how})"


# ----------------------------------------------------------------------------- kern show
def accuracy_lines(acc, limit: int = 8) -> list[str]:
    """The accuracy gate of a judgment: its verdict (with its wall time when known) and its
    first ``limit`` reasons. ``acc``: the judgment file's AccuracyResult, or the ledger row's
    AccuracySummary (gates/summary.py), or None."""
    if acc is None or not (acc.verdict or acc.reasons or getattr(acc, "tag", None)):
        return []
    wall = getattr(acc, "wall_s", None)
    out = [f"{'accuracy':<10} {acc.verdict}" + (f" ({wall:.0f} s)" if wall else "")]
    return out + [f"{PAD} - {r}" for r in (acc.reasons or ())[:limit]]


def table_lines(v: ScorerView, head: str) -> list[str]:
    """One A/B of a scorer's report per bucket (A's and B's median, B − A with its interval,
    % of the roofline floor), the score's change, each side's checks; or how it ended."""
    if v.outcome != OK:
        return [f"{head:<10} {v.outcome}: {v.error or 'no measurement'}"]
    both = "A" in v.sides
    floor_side = "B" if "B" in v.sides else "A"  # the floor as the candidate reaches it
    cols = f"{'rows':>5} " + (f"{'A ms':>9} " if both else "") + f"{'B ms':>9}"
    if both:
        cols += f" {'B - A ms':>9}  {'interval':<20}"
    out = [f"{head:<10} {cols} {'% floor':>8}"]
    for b in v.buckets:
        line = f"{b.rows:>5} " + (f"{_ms(b.a_ms):>9} " if both else "") + f"{_ms(b.b_ms):>9}"
        if both:
            line += f" {_ms(b.delta_ms, True):>9}  " + (
                f"[{b.low:+.3f}, {b.high:+.3f}]" if b.delta_ms is not None else "-").ljust(20)
        pct = b.pct_of_floor(b.b_ms if floor_side == "B" else b.a_ms)
        line += f" {(f'{pct:.0f} %' if pct is not None else '-'):>8}"
        out.append(f"{PAD} {line}")
    if v.delta_ms is not None:
        out.append(f"{PAD} score {_ms(v.score_a)} → {_ms(v.score_b)} ms: {v.delta_ms:+.3f} ms "
                   f"({v.delta_pct:+.1f} %) [{v.low:+.3f}, {v.high:+.3f}], "
                   f"{v.classification} (noise band ±{v.band_ms or 0:.3f} ms); {v.guard}")
    for k, s in sorted(v.sides.items()):
        failed = [check_name(c) for c in s.failed_checks]
        if s.graph_matches_eager is False:
            failed.append("graph replay differs from the eager step")
        out.append(f"{PAD} checks {k}: {', '.join(failed) if failed else 'all passed'}")
    return out


def view_lines(v: ScorerView | None, number: int) -> list[str]:
    """The scorer of attempt ``number``'s deciding judgment: its report's A/B and the
    re-measurement's (:func:`table_lines`), or, with no judgment file, what the ledger row
    keeps (the score's B − A and the medians per bucket)."""
    if v is None:
        return []
    if v.from_judgment:
        again = v.reverify
        return table_lines(v, "scorer") + (
            table_lines(again, "again") if again is not None and again.from_judgment else [])
    if v.delta_ms is None:
        return []
    out = [f"{'scorer':<10} {v.delta_ms:+.3f} ms [{_ms(v.low, True)}, {_ms(v.high, True)}] "
           f"(the ledger's summary; runs/attempts/{number}/judgment-*.json not found)"]
    return out + [f"{PAD} {b.rows:>5} rows  A {_ms(b.a_ms)} ms  B {_ms(b.b_ms)} ms"
                  for b in v.buckets if b.b is not None]


def last_words_lines(words) -> list[str]:
    """Each side that ended badly (gates.results.LastWords): how, its log, its last lines."""
    out = []
    for w in words:
        out.append(f"{'last words':<10} {w.side} ended with {w.kind}" + (f" (log {w.log})" if w.log else ""))
        out += [f"{PAD}   {ln}" for ln in w.lines]
    return out


GATE_NAMES = {"accuracy": "accuracy", "scorer": "scorer", "remeasure": "re-measure"}


def phase_lines(t, recorded: bool) -> list[str]:
    """Where a judgment's time went (gates.rules.phases.JudgmentTimes; None: no gate ran): one line of
    each gate's total, then one per part of its phases. ``recorded``: the judgment kept its
    phases (else they are read back from its reports)."""
    from gates.rules.phases import GATES

    if t is None:
        return []
    walls = [(GATE_NAMES["accuracy"], t.accuracy_s), (GATE_NAMES["scorer"], t.scorer_s),
             (GATE_NAMES["remeasure"], t.remeasure_s)]
    head = " · ".join(f"{name} {_secs(s)}" for name, s in walls if s is not None)
    head += f" · total {_secs(t.total_s)}" if t.total_s is not None else ""
    out = [f"{'phases':<10} {head or 'none measured'}"
           + ("" if recorded else " (kept before phases were recorded: each side's wall)")]
    for gate in GATES:
        for i, (part, phases) in enumerate(t.by_part(gate).items()):
            label = GATE_NAMES.get(gate, gate) if i == 0 else ""
            out.append(f"{PAD} {label:<10} {part:<12} " + " · ".join(f"{k} {_secs(v)}" for k, v in phases.items()))
        for b in (b for b in t.beside if b.gate == gate):
            out += beside_lines(b, wall_s=dict(walls).get(GATE_NAMES.get(gate, gate)))
    return out


# what each side's work is called where one ran beside another (gates.rules.phases.BESIDE_PAIRS)
BESIDE_WORDS = {"A record": "main's recording", "B replay": "the candidate's",
                "A early": "main's side's", "B early": "the candidate's side's"}


def beside_lines(b, wall_s: float | None = None) -> list[str]:
    """What ``b`` (gates.rules.phases.Beside) did off its gate's path: its phases, when each
    side ran (seconds from the gate's start), and how much of its work the other's covered."""
    from gates.rules.phases import EARLY_PARTS

    def window(start, end, ended: str, never: str) -> str:
        return f"{_secs(start)} → {_secs(end)} ({ended})" if end is not None else f"{_secs(start)} → ({never})"

    gate = GATE_NAMES.get(b.gate, b.gate)
    off = f"off the path: not in {gate} {_secs(wall_s)}" if wall_s is not None else "off the path"
    out = [f"{PAD} {'beside':<10} {b.part:<12} " + " · ".join(f"{k} {_secs(v)}" for k, v in b.by_phase().items())
           + f" ({off})"]
    if b.overlap_s is None:
        return out + [f"{PAD} {'':<10} {'overlap':<12} not known (its gate kept no timeline)"]
    if b.started_s is not None and b.of_started_s is not None:
        out.append(f"{PAD} {'':<10} {'timeline':<12} "
                   f"{b.of} {window(b.of_started_s, b.of_done_s, 'done', 'never done')} · "
                   f"{b.part} {window(b.started_s, b.released_s, 'released', 'never released')}")
    work = " · ".join(b.by_phase())
    whose, of = BESIDE_WORDS.get(b.part, f"{b.part}'s"), BESIDE_WORDS.get(b.of, f"{b.of}'s work")
    line = f"{_secs(b.overlap_s)} of {of} overlapped {whose} {work}"
    if b.of_done_s is None:
        line += f" (ended with {b.of}, which never finished)"
    elif b.after_s >= 0.05 and b.part in EARLY_PARTS:  # before its gate started: on no path
        line += f"; {_secs(b.after_s)} after it (before this gate started)"
    elif b.after_s >= 0.05:  # what _secs would print as 0.0 s is none
        line += f"; {_secs(b.after_s)} after it (on the path, in the coordinator's other)"
    else:
        line += "; none after it"
    return out + [f"{PAD} {'':<10} {'overlap':<12} {line}"]
