"""The README and docs/: short enough to read, every relative link and anchor resolves, and the
README's commands are the ones CI runs."""
from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# [text](target) and ![alt](target), not inside code; the target up to a space or ")"
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE = re.compile(r"`[^`\n]*`")


def links(text: str) -> list[str]:
    """The link targets of a Markdown text, code blocks and code spans left out."""
    return LINK.findall(CODE.sub("", FENCE.sub("", text)))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped (hyphens and
    underscores kept), spaces to hyphens."""
    text = re.sub(r"[`*_]{1,2}(?=\S)|(?<=\S)[`*_]{1,2}", "", heading.strip()).lower()
    text = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    out, seen = set(), {}
    for line in FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    return out


def test_slugs_follow_github():
    assert slug("The demo's time (README command 1)") == "the-demos-time-readme-command-1"
    assert slug("Judging slots (`farm` in kern.yaml)") == "judging-slots-farm-in-kernyaml"
    assert slug("What is real and what is not") == "what-is-real-and-what-is-not"
    assert links("see [a](x.md#y), ![p](i.png) and `[no](z.md)`\n```\n[no](w.md)\n```\n") == \
        ["x.md#y", "i.png"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    text = page.read_text(encoding="utf-8")
    bad = []
    for target in links(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, mailto: … are not files here
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading with the anchor #{anchor} in {dest.relative_to(ROOT)}")
    assert bad == [], f"{page.relative_to(ROOT)} links to what is not there:\n" + "\n".join(bad)


def test_the_readme_is_a_five_minute_read():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; move detail to docs/ (at most 150)"


def _code_lines(text: str) -> list[str]:
    return [line for block in re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M)
            for line in block.splitlines() if line.strip()]


def test_the_readme_commands_are_what_ci_runs():
    """The install and the test command of the README are .ci/run's, word for word; the demo
    command is README command 1 (tests/harness/test_demo.py runs it)."""
    readme = _code_lines((ROOT / "README.md").read_text(encoding="utf-8"))
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.lstrip().startswith("#")]
    install = next(line for line in readme if line.startswith("python3 -m venv .venv"))
    for step in install.split(" && "):
        assert step in ci, f"README's install step {step!r} is not a line of .ci/run"
    tests = next(line for line in readme if line.startswith(".venv/bin/python -m pytest"))
    assert tests == ci[-1], ("README's test command and .ci/run's last line differ (keep the two "
                             f"in step):\nREADME: {tests}\n.ci/run: {ci[-1]}")
    assert any(line.startswith(".venv/bin/kern loop --demo") for line in readme)
