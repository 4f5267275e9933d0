"""The journey page in a real browser: Debian's Chromium, headless, driven over the DevTools
protocol (tests/harness/browser.py). It loads the HTML ``kern report --format html`` writes for
the sample ledger and asks the page itself what it shows."""
from __future__ import annotations

import os

import pytest

from harness import journey

from . import browser, sample

pytestmark = pytest.mark.slow  # a browser start: seconds on a loaded 2-core machine

# CI sets it (.ci/run installs chromium): there an absent browser is a failure, not a skip
REQUIRED = bool(os.environ.get("KERN_REQUIRE_CHROMIUM"))


@pytest.fixture(scope="module")
def chromium():
    binary = browser.find()
    if binary is None:
        if REQUIRED:
            pytest.fail("KERN_REQUIRE_CHROMIUM is set but no chromium was found at "
                        f"{browser.CHROMIUM} or on PATH: .ci/run must install Debian's "
                        "`chromium` package (apt-get install -y chromium)")
        pytest.skip(f"no chromium at {browser.CHROMIUM} or on PATH (install Debian's `chromium` "
                    "package to run the browser test; CI installs it and requires it)")
    return binary


FACTS = """(async () => {
  const tick = () => new Promise(r => setTimeout(r, 50));
  const svg = document.querySelector('svg.plot');
  const box = el => el.getBoundingClientRect();
  const start = svg.querySelector('line.phase-start'), axis = svg.querySelector('line.x-axis');
  const main = svg.querySelector('path.main-line');
  const ctm = svg.getScreenCTM();
  const p0 = main.getPointAtLength(0);
  const mainStartX = p0.x * ctm.a + ctm.e, startX = box(start).left + box(start).width / 2;
  const pts = [...svg.querySelectorAll('g.pt')].map(g => ({n: +g.dataset.n, kind: g.dataset.kind,
      unmeasured: g.classList.contains('unmeasured'), top: box(g).top, bottom: box(g).bottom,
      left: box(g).left}));
  const table = document.querySelector('table.journey');
  const order = () => [...table.querySelectorAll('tbody tr.row')].map(r => +r.dataset.n);
  const shown = () => [...document.querySelectorAll('tr.row')].filter(r => r.offsetHeight > 0)
      .map(r => +r.dataset.n);
  const facts = {
    title: document.title, tables: document.querySelectorAll('table.journey').length,
    plots: document.querySelectorAll('svg.plot').length,
    headers: [...table.querySelectorAll('th')].map(h => h.innerText.trim()),
    rows: [...document.querySelectorAll('tr.row')].map(r => r.innerText),
    mainStartX, startX, axisY: box(axis).top, pts,
    firstMarkerX: Math.min(...pts.map(p => p.left)),
    initialOrder: order(),
  };
  // a row's detail opens on a click of its number
  const detail = document.getElementById('d-1');
  facts.detailHiddenBefore = detail.offsetHeight === 0;
  table.querySelector('#a-1 button.open').click(); await tick();
  facts.detailShownAfter = detail.offsetHeight > 0;
  facts.detailText = detail.innerText;
  facts.expanded = table.querySelector('#a-1 button.open').getAttribute('aria-expanded');
  // sorting: the score change column, ascending then descending (empty cells last)
  const head = [...table.querySelectorAll('th')].find(h => h.innerText.startsWith('score change'));
  head.querySelector('button').click(); await tick();
  facts.ascending = order(); facts.ariaSort = head.getAttribute('aria-sort');
  facts.changes = [...table.querySelectorAll('tbody tr.row')].map(r => r.children[5].dataset.v);
  facts.detailFollows = [...table.querySelectorAll('tbody tr')].every((r, i, all) =>
      !r.classList.contains('row') || all[i + 1].id === r.dataset.detail);
  head.querySelector('button').click(); await tick();
  facts.descendingChanges = [...table.querySelectorAll('tbody tr.row')].map(r => r.children[5].dataset.v);
  // the filter by result
  const f = document.getElementById('filter');
  facts.filterOptions = [...f.options].map(o => o.value);
  table.querySelector('#a-3 button.open').click(); await tick();
  facts.openedThree = document.getElementById('d-3').offsetHeight > 0;
  f.value = 'merged'; f.dispatchEvent(new Event('change')); await tick();
  facts.onlyMerged = shown(); facts.openOfFiltered = document.getElementById('d-3').offsetHeight;
  facts.openOfShown = detail.offsetHeight > 0;
  f.value = ''; f.dispatchEvent(new Event('change')); await tick();
  facts.allAgain = shown().length;
  // a marker in the plot opens its row
  svg.querySelector('g.pt[data-n="7"]').dispatchEvent(new MouseEvent('click', {bubbles: true})); await tick();
  facts.markerOpened = document.getElementById('d-7').offsetHeight > 0;
  return facts;
})()"""


def _judgment():
    return {"bench": {"buckets": [16, 256], "bandwidth": {"Bps": 4e12},
                      "cost": {"16": {"bytes": 4e10}, "256": {"bytes": 2e11}},
                      "analysis": {"sides": {"A": {"score": 41.2, "buckets": {"16": {"median": 30.1}, "256": {"median": 60.4}}},
                                             "B": {"score": 40.85, "buckets": {"16": {"median": 29.9}, "256": {"median": 59.9}}}},
                                   "ab": {"delta": {"buckets": {"16": {"delta": -0.2, "low": -0.25, "high": -0.15},
                                                                "256": {"delta": -0.5, "low": -0.6, "high": -0.4}}}}}}}


def test_journey_page_in_a_browser(chromium, tmp_path):
    """The sample ledger's page: main's line starts at the phase's start, the attempts never
    measured sit below the axis, a row's detail opens, sorting and the filter work, a marker
    opens its row, and nothing is reported as an error."""
    led = sample.build(tmp_path / "ledger.sqlite")
    files = {1: journey.AttemptFiles(brief="make the experts faster",
                                     diff="diff --git a/k.py b/k.py\n--- a/k.py\n+++ b/k.py\n@@ -1 +1 @@\n-a\n+b\n",
                                     judgment=_judgment())}
    page = tmp_path / "journey.html"
    page.write_text(journey.html(led.attempts(), led.phases(), led.scores(), files=files), encoding="utf-8")
    led.close()
    got = browser.render(page, FACTS, binary=chromium)
    f = got.value
    assert got.errors() == [], got.errors()
    assert f["title"] == "Journey" and f["tables"] == 2 and f["plots"] == 2, f
    assert f["headers"][:3] == ["#", "attempt", "target"] and "score change (ms)" in f["headers"]
    assert len(f["rows"]) == 15 and f["initialOrder"] == list(range(1, 12))
    assert any("abandoned: within noise (\u22120.02 [\u22120.06, +0.02], band \u00b10.05)" in r
               for r in f["rows"]), f["rows"]
    # main's score: a line from the phase's start, left of every attempt
    assert abs(f["mainStartX"] - f["startX"]) < 1.5 and f["mainStartX"] < f["firstMarkerX"], f
    # the never measured below the axis, the measured above it
    below = [p for p in f["pts"] if p["unmeasured"]]
    assert sorted(p["n"] for p in below) == [3, 6, 8, 9, 10, 11]
    assert all(p["top"] > f["axisY"] for p in below), (f["axisY"], below)
    assert all(p["bottom"] <= f["axisY"] for p in f["pts"] if not p["unmeasured"]), f["pts"]
    # a row's detail
    assert f["detailHiddenBefore"] and f["detailShownAfter"] and f["expanded"] == "true"
    for text in ("Change per bucket", "[\u22120.25, \u22120.15]", "the brief the agent was given",
                 "diff base000000..c000000000: 1 file(s), +1 \u22121", "% of floor"):
        assert text in f["detailText"], (text, f["detailText"])
    # sorting: numbers ascending with the empty last, then descending, each detail after its row
    vals = [float(v) for v in f["changes"] if v]
    assert f["ariaSort"] == "ascending" and vals == sorted(vals) and f["changes"][len(vals):] == [""] * (11 - len(vals))
    assert f["ascending"][0] == 7 and f["detailFollows"]
    desc = [float(v) for v in f["descendingChanges"] if v]
    assert desc == sorted(vals, reverse=True)
    # the filter: merged only, then everything again
    assert f["filterOptions"][0] == "" and "merged" in f["filterOptions"] and "accuracy" in f["filterOptions"]
    assert f["openedThree"] and sorted(f["onlyMerged"]) == [1, 7, 12] and f["allAgain"] == 15
    assert f["openOfFiltered"] == 0 and f["openOfShown"]  # an open detail goes with its row
    assert f["markerOpened"]


def test_the_browser_check_sees_a_broken_page(chromium, tmp_path):
    """What the journey test relies on: a missing plot, a console error and an uncaught
    exception are all seen, so a page that had them would fail it; an expression that throws
    in the page (the journey test's, on a page without a plot) is an error of its own."""
    page = tmp_path / "broken.html"
    page.write_text('<!DOCTYPE html><html><head><title>x</title></head><body>'
                    '<img alt="plot" src="data:image/png;base64,AAAA">'
                    '<script>console.error("plot missing"); null.x;</script></body></html>')
    got = browser.render(page, "(() => { const i = document.querySelector('img'); return "
                               "{plots: document.querySelectorAll('svg.plot').length, w: i.naturalWidth}; })()",
                         binary=chromium)
    assert got.value == {"plots": 0, "w": 0}, got.value
    errors = got.errors()
    assert "console.error: plot missing" in errors, errors
    assert any(e.startswith("exception: TypeError") for e in errors), errors
    with pytest.raises(browser.BrowserError, match="threw in the page"):
        browser.render(page, FACTS, binary=chromium)
