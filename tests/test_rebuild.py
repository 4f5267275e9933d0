"""bench/journey/rebuild.py: every replay attempt of the journey's ledger has a recipe in main's
files, each recipe gives back the very commit the ledger names, and a clone that lacks those
commits gets them as the loop's branches."""
from __future__ import annotations

import importlib.util
import sqlite3
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "journey" / "rebuild.py"
spec = importlib.util.spec_from_file_location("journey_rebuild", SCRIPT)
rebuild = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = rebuild  # dataclasses look their module up
spec.loader.exec_module(rebuild)


def _git(cwd, *args, data=None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, input=data, capture_output=True, check=True).stdout.decode()


def test_object_sha_and_committer_edits_are_gits():
    raw = _git(ROOT, "cat-file", "commit", "0f870c4747007f5bdb7f3181cfe526082e075b82").encode()
    assert rebuild.object_sha(raw) == "0f870c4747007f5bdb7f3181cfe526082e075b82"
    who, when = rebuild.committer_of(raw)
    assert rebuild.with_committer_date(raw, when) == raw
    moved = rebuild.with_committer_date(raw, "1796394097 +0000")
    assert rebuild.committer_of(moved) == (who, "1796394097 +0000")
    assert rebuild.object_sha(moved) == _git(ROOT, "hash-object", "-t", "commit", "--stdin", data=moved).strip()
    assert rebuild.raw_date("2026-12-04T14:21:37+00:00") == "1796394097 +0000"
    assert rebuild.raw_date("2026-12-04T15:21:37+01:00") == "1796394097 +0100"
    assert rebuild.seconds_between("10 +0000", "12 +0000") == ["10 +0000", "11 +0000", "12 +0000"]


@given(st.dictionaries(st.integers(1, 10_000), st.tuples(
    st.text(min_size=1), st.from_regex(r"[0-9a-f]{40}", fullmatch=True),
    st.from_regex(r"[0-9a-f]{40}", fullmatch=True), st.integers(0, 2**33))))
def test_the_manifest_round_trips(entries):
    recipes = {n: rebuild.Recipe(n, p, b, c, "kern-loop replay <kern-loop@localhost>", f"{t} +0000")
               for n, (p, b, c, t) in entries.items()}
    assert rebuild.load_manifest(rebuild.dump_manifest(recipes)) == recipes


def test_every_replay_attempt_of_the_ledger_has_a_recipe_that_gives_its_sha(capsys):
    db = sqlite3.connect(f"file:{rebuild.LEDGER}?mode=ro&immutable=1", uri=True)
    ledger = dict(db.execute("SELECT number, commit_sha FROM attempts WHERE backend='replay' "
                             "AND commit_sha IS NOT NULL"))
    db.close()
    recipes = rebuild.load_manifest(rebuild.MANIFEST.read_text())
    assert ledger and {n: r.commit for n, r in recipes.items()} == ledger
    assert rebuild.main(["check"]) == 0
    out = capsys.readouterr().out
    assert all(f"attempt {n}: {sha} rebuilt" in out for n, sha in ledger.items())


def test_apply_gives_a_clone_without_them_the_loops_branches(tmp_path):
    """A clone of this branch alone (no tag, no attempt branch) gets attempts 9-11's commits,
    the ones the device made before its branches came back."""
    clone = tmp_path / "clone"
    _git(ROOT, "clone", "-q", "--no-local", "--single-branch", str(ROOT), str(clone))
    recipes = rebuild.load_manifest(rebuild.MANIFEST.read_text())
    missing = [n for n, r in recipes.items() if not rebuild.has_commit(clone, r.commit)]
    assert {9, 10, 11} <= set(missing)
    r = subprocess.run([sys.executable, str(SCRIPT), "apply", "--repo", str(clone)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    for n in missing:
        assert _git(clone, "rev-parse", f"attempt/{n}").strip() == recipes[n].commit
    assert not _git(clone, "tag", "-l").strip()
    again = subprocess.run([sys.executable, str(SCRIPT), "apply", "--repo", str(clone)],
                           capture_output=True, text=True)
    assert again.returncode == 0 and f"0 rebuilt, {len(recipes)} already here" in again.stdout


def test_a_wrong_recipe_is_named_with_expected_and_found(tmp_path, monkeypatch, capsys):
    recipes = rebuild.load_manifest(rebuild.MANIFEST.read_text())
    bad = {11: rebuild.Recipe(**{**recipes[11].__dict__, "committer_date": "1796394099 +0000"})}
    manifest = tmp_path / "commits.json"
    manifest.write_text(rebuild.dump_manifest({**recipes, **bad}))
    monkeypatch.setattr(rebuild, "MANIFEST", manifest)
    assert rebuild.main(["check", "11"]) == 1
    assert f"attempt 11: expected {recipes[11].commit}, rebuilt " in capsys.readouterr().out
    assert rebuild.main(["check", "99"]) == 2


def test_record_names_the_onto_main_variant_when_the_handed_patch_does_not_apply(tmp_path, monkeypatch, capsys):
    """Attempt 11 was handed the folder's 7th patch. In a folder whose 7th patch does not apply
    on 11's base but whose onto-main variant is 11's real patch, record proves 11's commit from
    the variant and names it, as the replay backend would have applied it."""
    clone = tmp_path / "clone"
    _git(ROOT, "clone", "-q", "--no-local", "--single-branch", str(ROOT), str(clone))
    assert rebuild.main(["apply", "11", "--repo", str(clone)]) == 0
    recipes = rebuild.load_manifest(rebuild.MANIFEST.read_text())
    real = ROOT / recipes[11].patch
    root = tmp_path / "root"
    patches = root / "bench" / "journey" / "patches"
    (patches / "onto-main").mkdir(parents=True)
    for p in sorted((ROOT / "bench" / "journey" / "patches").glob("0*.patch"))[:7]:
        (patches / p.name).write_bytes(p.read_bytes())
    stacked = next((ROOT / "bench" / "journey" / "patches").glob("013-*.patch"))  # written on 008
    (patches / real.name).write_bytes(stacked.read_bytes())  # so it does not apply on 11's base
    (patches / "onto-main" / real.name).write_bytes(real.read_bytes())
    monkeypatch.setattr(rebuild, "ROOT", root)
    monkeypatch.setattr(rebuild, "MANIFEST", tmp_path / "commits.json")
    capsys.readouterr()
    assert rebuild.main(["record", "11", "--repo", str(clone)]) == 0, capsys.readouterr()
    got = rebuild.load_manifest((tmp_path / "commits.json").read_text())[11]
    assert got.patch == f"bench/journey/patches/onto-main/{real.name}"
    assert (got.base, got.commit, got.committer_date) == (recipes[11].base, recipes[11].commit,
                                                           recipes[11].committer_date)


def test_moved_names_the_attempts_whose_ledger_row_names_another_commit():
    def recipe(n, sha):
        return rebuild.Recipe(n, "p.patch", "b" * 40, sha, "kern-loop replay <kern-loop@localhost>", "1 +0000")

    recipes = {5: recipe(5, "a" * 40), 11: recipe(11, "c" * 40), 12: recipe(12, "d" * 40)}
    rows = {5: {"commit_sha": "a" * 40}, 11: {"commit_sha": "e" * 40},  # #11 judged again, rebased
            12: {"commit_sha": None}, 13: {"commit_sha": "f" * 40}}  # no commit yet; no recipe yet
    assert rebuild.moved(recipes, rows) == [11]
    assert rebuild.moved(recipes, {}) == []  # a ledger without those rows moves nothing
