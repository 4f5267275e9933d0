"""The slow suite's module order (tests/conftest.py): LONGEST_FIRST names real slow modules,
and the order it gives is a stable reordering that puts them first."""
from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import LONGEST_FIRST, longest_first

ROOT = Path(__file__).resolve().parents[1]


def test_every_longest_first_entry_is_a_slow_module():
    for m in LONGEST_FIRST:
        p = ROOT / m
        assert p.is_file(), f"tests/conftest.py LONGEST_FIRST names {m}, which does not exist"
        assert "pytest.mark.slow" in p.read_text(), f"{m} is not a slow module: its place changes nothing"
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)


@settings(deadline=None)  # no wall-clock limit: a loaded CI machine must not fail a pure test
@given(st.lists(st.sampled_from(list(LONGEST_FIRST) + ["tests/a.py", "tests/b.py", "tests/c.py"]), max_size=30))
def test_longest_first_is_a_stable_reordering_with_the_listed_modules_first(paths):
    order = longest_first(paths)
    assert sorted(order) == list(range(len(paths)))
    got = [paths[i] for i in order]
    listed = [p for p in got if p in LONGEST_FIRST]
    assert got[:len(listed)] == listed  # every listed module before any other
    assert listed == sorted(listed, key=LONGEST_FIRST.index)
    # within one module, and among the unlisted, the collection order holds
    for m in set(paths):
        assert [i for i in order if paths[i] == m] == [i for i, p in enumerate(paths) if p == m]
    rest = [i for i in order if paths[i] not in LONGEST_FIRST]
    assert rest == sorted(rest)
