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


FACTS = """(() => {
  const img = document.querySelector('img');
  return {
    title: document.title,
    tables: document.querySelectorAll('table').length,
    rows: [...document.querySelectorAll('table tr')].slice(1).map(r => r.innerText),
    headers: [...document.querySelectorAll('th')].map(h => h.innerText),
    img: img && {alt: img.alt, complete: img.complete, w: img.naturalWidth, h: img.naturalHeight,
                 shown: img.getBoundingClientRect().width},
    svg: document.querySelectorAll('svg').length,
  };
})()"""


def test_journey_page_shows_table_and_plot_without_console_errors(chromium, tmp_path):
    led = sample.build(tmp_path / "ledger.sqlite")
    page = tmp_path / "journey.html"
    page.write_text(journey.html(led.attempts(), led.phases(), led.scores()), encoding="utf-8")
    led.close()
    got = browser.render(page, FACTS, binary=chromium)
    f = got.value
    assert got.errors() == [], got.errors()
    assert f["title"] == "Journey" and f["tables"] == 2, f
    assert f["headers"][:4] == ["#", "attempt", "score change (ms)", "result"]
    assert sum(1 for r in f["rows"] if r.split("\t")[0].strip().isdigit()) == 15, f["rows"]
    assert any("abandoned: within noise (\u22120.02 [\u22120.06, +0.02], band \u00b10.05)" in r
               for r in f["rows"]), f["rows"]
    # the plot: a decoded PNG of the size plot_png draws, laid out on the page
    img = f["img"]
    assert img and img["alt"] == journey.TEXT["en"]["plot"], f
    assert img["complete"] and (img["w"], img["h"]) == (900, 670) and img["shown"] > 300, img


def test_the_browser_check_sees_a_broken_page(chromium, tmp_path):
    """What the journey test relies on: a missing plot, a console error and an uncaught
    exception are all seen, so a page that had them would fail it."""
    page = tmp_path / "broken.html"
    page.write_text('<!DOCTYPE html><html><head><title>x</title></head><body>'
                    '<img alt="plot" src="data:image/png;base64,AAAA">'
                    '<script>console.error("plot missing"); null.x;</script></body></html>')
    got = browser.render(page, FACTS, binary=chromium)
    assert got.value["tables"] == 0 and got.value["img"]["w"] == 0, got.value
    errors = got.errors()
    assert "console.error: plot missing" in errors, errors
    assert any(e.startswith("exception: TypeError") for e in errors), errors
