"""Every figure of the journey page can be recomputed from the figures beside it (issue 38).

The page is read back as a person reads it (its HTML text, typographic minus and all) and each
summary number is recomputed from the rows: the merges and attempts counted, the gain as the
merged rows' printed changes summed, main's change from its first and last score (the plot's
line); each bucket's B − A from A and B/A, each score row from its buckets and weights; a
row's change as its re-measurement where there is one. On a demo-like ledger (one bucket, a
re-measured merge, main's scores recorded as the loop records them) and on the H200 journey in
bench/journey/. The opened row holds every reason whole and its commands; the JSON holds what
the CSV and the page show."""
from __future__ import annotations

import csv
import html as _html
import io
import json
import re
import shutil
from pathlib import Path

import pytest

from gates.summary import AccuracySummary, GateSummary, ReverifySummary, ScorerSummary
from harness import journey
from harness.ledger import Ledger

ROOT = Path(__file__).resolve().parents[2]
JOURNEY = ROOT / "bench" / "journey"


def num(text: str) -> float:
    return float(text.replace("\u2212", "-").replace("%", "").replace(",", "").strip())


def cells(row_html: str) -> list[str]:
    return [_html.unescape(re.sub(r"<[^>]+>", "", c)).strip()
            for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row_html, re.S)]


def tables(fragment: str) -> list[tuple[list[str], list[list[str]]]]:
    """Each bucket table of ``fragment``: (its headings, its rows of cell texts)."""
    out = []
    for body in re.findall(r"<table class=buckets>(.*?)</table>", fragment, re.S):
        rows = re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)
        out.append((cells(rows[0]), [cells(r) for r in rows[1:]]))
    return out


def detail_of(page: str, n) -> str:
    """The opened row of attempt ``n`` (up to the next row, or the table's end)."""
    start = page.index(f'<tr class="detail" id="d-{n}"')
    ends = [i for i in (page.find('<tr class="row ', start), page.find("</tbody></table>\n</section>", start))
            if i >= 0]
    return page[start:min(ends + [len(page)])]


def check_table(head: list[str], rows: list[list[str]]) -> float | None:
    """Recompute one A/B table from its own figures; its score row's B − A (None: none)."""
    col = {h: i for i, h in enumerate(head)}
    paired = "B/A (paired median)" in col
    d_col = col["B − A (ms) = A × (B/A − 1)" if paired else "B − A (ms) = B − A medians"]
    buckets = [r for r in rows if not r[0].startswith("score")]
    score = next((r for r in rows if r[0].startswith("score")), None)
    for r in buckets:
        if not r[d_col]:
            continue
        a, d = num(r[col["A (ms)"]]), num(r[d_col])
        if paired:
            ratio = num(r[col["B/A (paired median)"]])
            # A ± 0.0005, B/A ± 0.000005, B − A ± 0.005 as printed
            assert abs(a * (ratio - 1) - d) <= 0.0005 * abs(ratio - 1) + a * 5e-6 + 0.005 + 1e-9, r
        else:
            assert abs(num(r[col["B (ms)"]]) - a - d) <= 0.001 + 0.005 + 1e-9, r
        assert abs(d / a * 100 - num(r[col["change (of A)"]])) <= (0.005 / a + 0.0005 * abs(d) / a**2) * 100 + 0.005, r
    if score is None:
        return None
    d = num(score[d_col])
    if "weight" in col and all(r[d_col] for r in buckets):
        w = [num(r[col["weight"]]) for r in buckets]
        assert num(score[col["weight"]]) == sum(w)
        for side in ("A (ms)", "B (ms)"):
            mean = sum(wi * num(r[col[side]]) for wi, r in zip(w, buckets)) / sum(w)
            assert abs(mean - num(score[col[side]])) <= 0.001 + 1e-9, (side, score)
        mean = sum(wi * num(r[d_col]) for wi, r in zip(w, buckets)) / sum(w)
        assert abs(mean - d) <= 0.01 + 1e-9, score
        a = num(score[col["A (ms)"]])
        assert abs(d / a * 100 - num(score[col["change (of A)"]])) <= (0.005 / a + 0.0005 * abs(d) / a**2) * 100 + 0.005
    return d


def check_page(page: str, attempts, phases, scores) -> dict:
    """Recompute every figure of ``page``; returns per attempt what was checked."""
    by_number = {a.number: a for a in attempts}
    seen = {}
    for section in re.findall(r'<section class="phase".*?</section>', page, re.S):
        rows = re.findall(r'<tr class="row ([\w-]+)" id="a-(\d+)".*?</tr>', section, re.S)
        changes = {}
        for state, n in rows:
            row_html = re.search(rf'<tr class="row [\w-]+" id="a-{n}".*?</tr>', section, re.S).group(0)
            changes[int(n)] = (state, cells(row_html)[5])
            detail = detail_of(section, n)
            tabs = tables(detail)
            deltas = [check_table(h, r) for h, r in tabs]
            change = changes[int(n)][1]
            if change:  # the row counts the last A/B shown: the re-measurement when there is one
                if deltas and deltas[-1] is not None:
                    assert abs(num(change) - deltas[-1]) <= 0.005 + 1e-9, (n, change, deltas)
                else:
                    m = re.search(r"re-measured: (\S+) \[", detail)
                    last = num(m.group(1)) if m else None
                    if last is not None:
                        assert num(change) == last, (n, change)
            # the opened row: every reason whole, and the commands
            a = by_number[int(n)]
            assert f"<code>kern show {n}</code>" in detail
            if a.hidden:
                assert f"--replay-attempt {n}</code>" in detail
            # nothing clipped or counted in the opened row (the diff and brief are recorded text)
            text = _html.unescape(re.sub(r"<details.*?</details>", "", detail, flags=re.S))
            assert "…" not in text and not re.search(r"\+\d+ more", text), text
            g = a.gate or GateSummary()
            for r in (g.accuracy.reasons if g.accuracy and g.accuracy.reasons else ()):
                assert _html.escape(r) in detail
            for c in (g.scorer.checks if g.scorer and g.scorer.checks else ()):
                assert _html.escape(f"{c.get('check')}: {c.get('why')}") in detail
            seen[int(n)] = deltas
        summary = _html.unescape(re.search(r"<p class=summary>(.*?)</p>", section).group(1))
        m = re.match(r"(\d+) merged of (\d+) attempts · gain (\S+) ms", summary)
        merged = [c for s, c in changes.values() if s == "merged"]
        assert int(m.group(1)) == len(merged) and int(m.group(2)) == len(changes)
        assert num(m.group(3)) == pytest.approx(-sum(num(c) for c in merged if c), abs=1e-9)
        main = re.search(r"main (\S+) → (\S+) ms \((\S+) ms", summary)
        if main:
            first, last, change = (num(x) for x in main.groups())
            assert change == pytest.approx(last - first, abs=1e-9)
            line = re.search(r"<title>main's score: ([^<]*)</title>", _html.unescape(section)).group(1)
            steps = [num(x.replace(" ms", "")) for x in line.split(" → ")]
            assert (steps[0], steps[-1]) == (first, last), (line, summary)
    # every merge sits on main's line (the plot draws both from main's recorded scores)
    for pan in journey.plot_panels(attempts, phases, scores):
        for p in pan.points:
            if p.kind == "merged" and p.y is not None and pan.main:
                # the line steps at the merge's x through main's scores recorded there
                level = [y for x, y in pan.main if x == p.x]
                assert any(p.y == pytest.approx(y) for y in level), (p, pan.main)
    return seen


def demo_like(path: Path):
    """The demo's shape: one bucket of weight 1; a 3 -> 1 merge re-measured; its slower and
    wrong moves; main's scores as the loop records them (A's score first, B's after the merge)."""
    clock = iter(f"2026-12-04T10:{m:02d}:00+00:00" for m in range(60))
    led = Ledger(path, clock=lambda: next(clock))
    run = led.start_run("d", "cpu")
    tick = led.add_tick(run, [])
    p = led.phase({"buckets": [2], "weights": [1]})

    def attempt(title, **kw):
        n = led.new_attempt(title=title, hypothesis="", target="moe.experts", backend="tuner",
                            base_sha="b" * 40, phase_id=p, tick_id=tick)
        led.transition(n, "running")
        led.update(n, commit_sha=f"{n:040d}", tokens=0, cost_usd=0.0)
        led.transition(n, "judging")
        return n

    hidden = {"input_seed": 12345, "extra_rows": [3]}
    judgment = {"bench": {
        "buckets": [2], "weights": [1],
        "analysis": {"sides": {"A": {"score": 5046.4, "buckets": {"2": {"median": 5046.4}}},
                               "B": {"score": 2387.62, "buckets": {"2": {"median": 2387.62}}}},
                     "ab": {"paired": True, "delta_pct": -49.77,
                            "delta": {"delta": -2511.59, "low": -2600.1, "high": -2400.2, "paired": True,
                                      "buckets": {"2": {"delta": -2511.59, "low": -2600.1, "high": -2400.2}}}}},
        "reverify": {"buckets": [2], "weights": [1], "analysis": {
            "sides": {"A": {"score": 4700.0, "buckets": {"2": {"median": 4700.0}}},
                      "B": {"score": 2400.0, "buckets": {"2": {"median": 2400.0}}}},
            "ab": {"paired": True, "delta_pct": -47.76, "delta": {
                "delta": -2244.64, "low": -2300.0, "high": -2200.0, "paired": True,
                "buckets": {"2": {"delta": -2244.64, "low": -2300.0, "high": -2200.0}}}}}}}}
    led.record_score(p, "b" * 40, 5046.4, {"2": 5046.4})
    n1 = attempt("moe.experts.passes 3 -> 1")
    led.transition(n1, "merged", delta_ms=-2511.59, ci_low=-2600.1, ci_high=-2400.2, delta_pct=-49.77,
                   medians_a={"2": 5046.4}, medians_b={"2": 2387.62}, hidden=hidden,
                   commit_sha=f"{n1:040d}", gate=GateSummary(
                       scope_problems=(), accuracy=AccuracySummary("PASS bit-identical", ("bit-identical",)),
                       scorer=ScorerSummary(classification="faster", band_ms=250.0),
                       reverify=ReverifySummary(outcome="ok", delta_ms=-2244.64, ci=(-2300.0, -2200.0),
                                                delta_pct=-47.76)))
    led.record_score(p, f"{n1:040d}", 2387.62, {"2": 2387.62})
    n2 = attempt("moe.experts.passes 1 -> 3")
    led.transition(n2, "abandoned", reason="slower", delta_ms=2400.0, ci_low=2300.0, ci_high=2500.0,
                   medians_a={"2": 2390.0}, medians_b={"2": 4810.0}, hidden=hidden,
                   gate=GateSummary(scorer=ScorerSummary(classification="slower", band_ms=240.0)))
    n3 = attempt("moe.experts.passes 1 -> 0")
    many = tuple(f"reason {i}: " + "w" * 150 for i in range(6))
    led.transition(n3, "abandoned", reason="accuracy", hidden=hidden,
                   gate=GateSummary(accuracy=AccuracySummary("FAIL", many)))
    n4 = attempt("skips a row when timed")
    led.transition(n4, "abandoned", reason="scorer check", gate=GateSummary(scorer=ScorerSummary(
        checks=({"check": "timed_outputs_accuracy", "why": "x" * 300},
                {"check": "hidden_time", "why": "y" * 200}))))
    n5 = attempt("crashes")
    led.transition(n5, "crashed", reason="z " * 120)
    files = {n1: journey.AttemptFiles(judgment=judgment)}
    return led.attempts(), led.phases(), led.scores(), files


def test_the_demo_pages_figures_agree(tmp_path):
    attempts, phases, scores, files = demo_like(tmp_path / "ledger.sqlite")
    page = journey.html(attempts, phases, scores, files=files)
    seen = check_page(page, attempts, phases, scores)
    assert seen[1] == [-2511.59, -2244.64]  # the first A/B, then the re-measurement it counts
    page = _html.unescape(page)
    assert "1 merged of 5 attempts · gain 2244.64 ms" in page
    assert "main 5046.400 → 2387.620 ms (\u22122658.780 ms, main's own scores)" in page
    assert "merged (re-measured \u22122244.64 [\u22122300.00, \u22122200.00]; first \u22122511.59" in page
    assert page.count("How a score change is measured") == 1
    assert "hidden inputs: input seed 12345, extra batch sizes 3" in page
    assert "input_seed" not in re.sub(r"<script>.*?</script>", "", page, flags=re.S)
    assert "<code>kern bench 000000000000 --vs bbbbbbbbbbbb --replay-attempt 1</code>" in page
    md = journey.markdown(attempts, phases, scores=scores)
    assert "| 1 | moe.experts.passes 3 -> 1 | -2244.64 |" in md and "gain 2244.64 ms" in md


def test_the_h200_journeys_figures_agree(tmp_path):
    """bench/journey as committed: #8's 128-row B − A (−1.66) is 84.857 × (B/A − 1), and the
    headline counts #4's re-measurement."""
    for f in JOURNEY.glob("ledger.sqlite*"):  # a copy: opening the committed file rewrites its -wal
        shutil.copy(f, tmp_path / f.name)
    with Ledger(tmp_path / "ledger.sqlite") as led:
        attempts, phases, scores = led.attempts(), led.phases(), led.scores()
    files = {}
    for a in attempts:
        d = JOURNEY / "attempts" / str(a.number)
        found = sorted(d.glob("judgment-*.json"))
        if a.number == 4:
            found = [ROOT / "bench/results/2026-12-01-h200-kern-try-experts-judgment.json"]
        if found:
            files[a.number] = journey.AttemptFiles(judgment=json.loads(found[-1].read_text()))
    page = journey.html(attempts, phases, scores, files=files)
    seen = check_page(page, attempts, phases, scores)
    assert seen[8][0] == pytest.approx(-2.03, abs=0.005)
    (head, rows), = tables(detail_of(page, 8))
    r128 = next(r for r in rows if r[0] == "128")
    assert r128[2:4] == ["84.857", "82.512"] and r128[4:6] == ["0.98049", "\u22121.66"]
    assert len(seen[4]) == 2 and "gain 119.69 ms" in page  # #4 re-measured: −112.24, not −112.26


def test_the_json_carries_every_field_the_csv_and_the_page_show(tmp_path):
    attempts, phases, scores, files = demo_like(tmp_path / "ledger.sqlite")
    obj = json.loads(json.dumps(journey.json_obj(attempts, phases, scores, files=files)))
    rows = {r["#"]: r for p in obj["phases"] for r in p["rows"]}
    table = list(csv.DictReader(io.StringIO(journey.csv_text(attempts, phases))))
    same = {"state": "state", "reason": "reason", "estimate_ms": "estimate_ms", "commit_sha": "commit_sha",
            "tokens": "tokens", "cost_usd": "cost_usd", "target": "target", "backend": "backend",
            "base_sha": "base_sha", "created_at": "created_at", "finished_at": "finished_at",
            "wall_s": "wall_s", "delta_ms": "delta_ms", "delta_pct": "delta_pct", "result": "result",
            "attempt": "attempt", "hidden": "hidden_text"}
    for line in table:
        r = rows[int(line["#"])]
        for col, key in same.items():
            assert line[col] == ("" if r[key] is None else str(r[key])), (col, line[col], r[key])
        assert line["score change (ms)"] == ("" if r["score_change_ms"] is None else journey.fmt_delta(r["score_change_ms"]))
        assert [line["ci_low"], line["ci_high"]] == ["" if x is None else str(x) for x in r["ci_ms"]]
        assert line["show"] == r["commands"]["show"] and line["replay"] == " ; ".join(r["commands"]["replay"])
        again = r["remeasured"] or {}
        assert line["remeasured_delta_ms"] == ("" if again.get("delta_ms") is None else str(again["delta_ms"]))
    one = rows[1]
    assert one["score_change_ms"] == -2244.64 and one["remeasured"]["delta_ms"] == -2244.64
    assert one["measured"]["buckets"][0]["ratio"] == pytest.approx(1 - 2511.59 / 5046.4)
    assert one["measured"]["reverify"]["score"]["delta_ms"] == -2244.64
    assert one["hidden_text"] == "input seed 12345, extra batch sizes 3"
    assert one["commands"]["replay"] == ["kern test 000000000000 --vs bbbbbbbbbbbb --replay-attempt 1",
                                        "kern bench 000000000000 --vs bbbbbbbbbbbb --replay-attempt 1"]
    assert len(rows[3]["reasons"][0]["items"]) == 6 and all(len(x) > 150 for x in rows[3]["reasons"][0]["items"])
    assert obj["phases"][0]["gain_ms"] == 2244.64
    assert "paired median of log ratios" in obj["estimator"]



# --------------------------------------------------------------------------- one view, three readers
@pytest.fixture
def h200_repo(tmp_path) -> Path:
    """This repository's history (shared, not copied) with the H200 journey's ledger and every
    judgment file it kept (#4's as kern try wrote it, bench/results/), as ``kern show`` reads
    them under runs/."""
    import subprocess

    repo = tmp_path / "h200"
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(ROOT), str(repo)], check=True)
    (repo / "runs").mkdir()
    for f in JOURNEY.glob("ledger.sqlite*"):
        shutil.copy(f, repo / "runs" / f.name)
    for d in JOURNEY.glob("attempts/*"):
        for j in d.glob("judgment-*.json"):
            (repo / "runs/attempts" / d.name).mkdir(parents=True, exist_ok=True)
            shutil.copy(j, repo / "runs/attempts" / d.name / j.name)
    (repo / "runs/attempts/4").mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "bench/results/2026-12-01-h200-kern-try-experts-judgment.json",
                repo / "runs/attempts/4/judgment-1.json")
    return repo


def _show(capsys, repo, n, *flags) -> str:
    from harness import cli

    assert cli.main(["--repo", str(repo), "show", str(n), *flags]) == 0
    return capsys.readouterr().out


def _journey_of(repo):
    with Ledger(repo / "runs/ledger.sqlite") as led:
        attempts, phases, scores = led.attempts(), led.phases(), led.scores()
    files = {}
    for a in attempts:
        found = sorted((repo / "runs/attempts" / str(a.number)).glob("judgment-*.json"),
                       key=lambda p: int(p.stem.split("-")[1]))
        if found:
            files[a.number] = journey.AttemptFiles(judgment=json.loads(found[-1].read_text()))
    return attempts, phases, scores, files


def _printed(x: float, fmt: str) -> str:
    return format(x, fmt).replace("-", "\u2212")


def test_show_the_page_and_the_json_export_agree_on_each_judgment(h200_repo, capsys):
    """On the H200 journey as kept: for every judged attempt ``kern show --json``'s scorer and
    the JSON export's are one object; the page's bucket tables and ``kern show``'s lines print
    the same numbers; and those are the judgment file's own (each side's median, B − A with
    its interval, B/A = 1 + (B − A) / A, the score's change), first and re-measured."""
    attempts, phases, scores, files = _journey_of(h200_repo)
    export = json.loads(json.dumps(journey.json_obj(attempts, phases, scores, files=files)))
    rows = {r["#"]: r for p in export["phases"] for r in p["rows"]}
    page = journey.html(attempts, phases, scores, files=files)
    judged = [n for n in sorted(files) if files[n].judgment.get("bench")]
    assert {4, 5, 7, 8, 9, 11, 12} <= set(judged)  # the journey's scored attempts as of 2026-12-06
    checked = []
    for n in judged:
        shown = json.loads(_show(capsys, h200_repo, n, "--json"))["bench"]
        assert shown == rows[n]["measured"], n  # one view, one JSON form
        text = _show(capsys, h200_repo, n).splitlines()
        tabs = tables(detail_of(page, n))
        report = files[n].judgment["bench"]
        for k, (rep, view) in enumerate(((report, shown), (report.get("reverify"), shown["reverify"]))):
            if rep is None:
                assert view is None or not view["from_judgment"], n
                continue
            sides, per = rep["analysis"]["sides"], rep["analysis"]["ab"]["delta"]["buckets"]
            head, trs = tabs[k]
            col = {h: i for i, h in enumerate(head)}
            assert [b["rows"] for b in view["buckets"]] == [int(b) for b in rep["buckets"]]
            for b, tr in zip(view["buckets"], trs):
                key = str(b["rows"])
                a_ms, b_ms = sides["A"]["buckets"][key]["median"], sides["B"]["buckets"][key]["median"]
                d = per[key]
                # the file's numbers, as the view holds them
                assert (b["a_ms"], b["b_ms"], b["delta_ms"], b["ci_ms"]) == (a_ms, b_ms, d["delta"], [d["low"], d["high"]])
                assert b["ratio"] == pytest.approx(1 + d["delta"] / a_ms)
                assert b["ratio_ci"] == pytest.approx([1 + d["low"] / a_ms, 1 + d["high"] / a_ms])
                # the page's row prints them
                assert tr[0] == key and tr[col["A (ms)"]] == f"{a_ms:.3f}" and tr[col["B (ms)"]] == f"{b_ms:.3f}"
                assert tr[col["B/A (paired median)"]] == f"{b['ratio']:.5f}"
                assert tr[col["B − A (ms) = A × (B/A − 1)"]] == _printed(d["delta"], "+.2f")
                assert tr[col["95 % interval"]] == f"[{_printed(d['low'], '+.2f')}, {_printed(d['high'], '+.2f')}]"
                # kern show's line prints them
                line = f"{b['rows']:>5} {a_ms:>9.3f} {b_ms:>9.3f} {d['delta']:>+9.3f}  " \
                       f"{'[' + format(d['low'], '+.3f') + ', ' + format(d['high'], '+.3f') + ']':<20}"
                assert sum(ln.startswith(" " * 11 + line) for ln in text) == 1, (n, line)
            score = rep["analysis"]["ab"]["delta"]
            assert view["score"]["delta_ms"] == score["delta"] and view["score"]["ci_ms"] == [score["low"], score["high"]]
            assert trs[-1][col["B − A (ms) = A × (B/A − 1)"]] == _printed(score["delta"], "+.2f")
            assert sum(ln.startswith(" " * 11 + f"score {sides['A']['score']:.3f} → {sides['B']['score']:.3f} ms: "
                                     f"{score['delta']:+.3f} ms") for ln in text) == 1, n
            checked.append((n, k, len(trs)))
        # the row counts the last A/B shown: the re-measured where there is one
        counted = (shown["reverify"] or shown)["score"]["delta_ms"]
        if attempts[n - 1].state in ("merged", "abandoned") and rows[n]["score_change_ms"] is not None:
            assert rows[n]["score_change_ms"] == pytest.approx(counted, abs=1e-9), n
    # every judged file's A/B was compared (5 buckets and the score), #4's re-measured one too
    assert {(n, 0, 6) for n in judged} | {(4, 1, 6)} <= set(checked)


def test_without_its_file_show_the_page_and_the_export_read_the_ledger_row(h200_repo, capsys):
    """#4 with its judgment file gone: all three read the ledger row's medians and the
    score's change, and its re-measurement's (no per-bucket B − A: the row keeps no pairs)."""
    (h200_repo / "runs/attempts/4/judgment-1.json").unlink()
    attempts, phases, scores, files = _journey_of(h200_repo)
    a = attempts[3]
    shown = json.loads(_show(capsys, h200_repo, 4, "--json"))["bench"]
    export = json.loads(json.dumps(journey.json_obj(attempts, phases, scores, files=files)))
    row = next(r for p in export["phases"] for r in p["rows"] if r["#"] == 4)
    assert shown == row["measured"] and shown["from_judgment"] is False
    assert [(b["rows"], b["a_ms"], b["b_ms"], b["delta_ms"]) for b in shown["buckets"]] == \
        [(int(k), a.medians_a[k], a.medians_b[k], None) for k in sorted(a.medians_b, key=int)]
    assert shown["score"]["delta_ms"] == a.delta_ms and shown["score"]["ci_ms"] == [a.ci_low, a.ci_high]
    assert shown["reverify"]["score"]["delta_ms"] == a.gate.reverify.delta_ms == row["score_change_ms"]
    text = _show(capsys, h200_repo, 4)
    assert f"scorer     {a.delta_ms:+.3f} ms [{a.ci_low:+.3f}, {a.ci_high:+.3f}] (the ledger's summary" in text
    (head, trs), = tables(detail_of(journey.html(attempts, phases, scores, files=files), 4))
    assert [(r[0], r[1], r[2]) for r in trs if not r[0].startswith("score")] == \
        [(k, f"{a.medians_a[k]:.3f}", f"{a.medians_b[k]:.3f}") for k in sorted(a.medians_b, key=int)]
