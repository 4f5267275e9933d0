"""Rebuild the journey's attempt commits byte for byte from main's files alone.

A replay attempt's commit is ``git am`` of its patch (``bench/journey/patches/``) onto its base,
committed by the replay backend (``kern-loop replay <kern-loop@localhost>``) in the second the
device's clock showed. The patch holds the tree change, the author, the author's date and the
message; the base is main's history; the committer's second is the one fact no other file
holds, so ``bench/journey/commits.json`` keeps it beside the rest of each attempt's recipe. A
fresh clone of main thus gets back the very commit the ledger names (same SHA): no tag or side
branch needs to travel.

    python bench/journey/rebuild.py check           # every recipe reproduces its SHA (writes nothing)
    python bench/journey/rebuild.py apply [--repo R] # the commits R lacks, as branches attempt/<n>
    python bench/journey/rebuild.py record 12 13    # recipes of attempts whose commits are here
                                                    # (a device bundle brought them back)
    python bench/journey/rebuild.py moved           # attempts the ledger names a newer commit of

``apply`` names each rebuilt commit ``attempt/<n>``, the branch the loop itself keeps for an
attempt, so a restarted loop re-judges an attempt left ``judging`` from its commit, and
``loop-wait``'s bundle brings it back like any other. ``record`` reads the ledger row (base,
commit), the attempt's ``settings.json`` (which patch the replay backend applied) and the
commit's own committer line, then rebuilds it to prove the recipe; for a commit that is not
here, ``--search`` tries each second from the attempt's creation to the ledger's record of its
commit. Attempts 1-3 were made by hand on the device and have no patch: they cannot be rebuilt.

Exit status: 0 every commit named was rebuilt with its SHA; 1 one was not (each printed with
expected and found); 2 the files or arguments are wrong. Uses only git and the standard
library (the device runs it before anything is installed).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent  # the repository whose files (patches, recipes, ledger) are read
MANIFEST = HERE / "commits.json"
LEDGER = HERE / "ledger.sqlite"
ATTEMPTS = HERE / "attempts"
BRANCH = "attempt/{n}"  # harness/worktrees.py Repo.branch: the loop's branch of attempt n
NOTE = ("The recipe of each replay attempt's commit: `git am PATCH` onto BASE with the committer "
        "and committer date below (author, author date and message come from the patch). "
        "bench/journey/rebuild.py rebuilds them; check verifies every SHA.")


class RebuildError(RuntimeError):
    """A recipe cannot be followed (a missing patch or base, a patch that does not apply);
    the message names the file or commit and who acts."""


@dataclass(frozen=True)
class Recipe:
    """How attempt ``attempt``'s commit is made again (one entry of commits.json)."""
    attempt: int
    patch: str  # a file of patches_dir, relative to the repository root
    base: str  # the commit the patch is applied on
    commit: str  # the SHA the ledger records, which the rebuild must give
    committer: str  # "name <email>"
    committer_date: str  # git's raw form: "<epoch seconds> <+hhmm>"

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("attempt")
        return d


# ---------------------------------------------------------------- pure
def load_manifest(text: str) -> dict[int, Recipe]:
    """commits.json's recipes by attempt number; :class:`RebuildError` on a malformed file."""
    try:
        data = json.loads(text)
        out = {}
        for n, r in data["attempts"].items():
            out[int(n)] = Recipe(int(n), **{k: str(r[k]) for k in
                                           ("patch", "base", "commit", "committer", "committer_date")})
        return out
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise RebuildError(f"{MANIFEST}: expected {{'attempts': {{N: {{patch, base, commit, committer, "
                           f"committer_date}}}}}}, found {type(e).__name__}: {e} (fix the file)") from None


def dump_manifest(recipes: dict[int, Recipe]) -> str:
    return json.dumps({"note": NOTE, "attempts": {str(n): recipes[n].to_json() for n in sorted(recipes)}},
                      indent=1) + "\n"


def object_sha(raw: bytes, kind: str = "commit") -> str:
    """Git's SHA-1 of an object of ``kind`` with content ``raw``."""
    return hashlib.sha1(f"{kind} {len(raw)}\0".encode() + raw).hexdigest()


_COMMITTER = re.compile(rb"^committer (.*) (\d+) ([+-]\d{4})$", re.M)


def committer_of(raw: bytes) -> tuple[str, str]:
    """(``name <email>``, ``<epoch> <tz>``) of a commit object's committer line."""
    m = _COMMITTER.search(raw.split(b"\n\n", 1)[0])
    if m is None:
        raise RebuildError("commit object without a committer line")
    return m.group(1).decode(), f"{int(m.group(2))} {m.group(3).decode()}"


def with_committer_date(raw: bytes, date: str) -> bytes:
    """``raw`` (a commit object) with its committer's date replaced by ``date`` (raw form)."""
    head, sep, body = raw.partition(b"\n\n")
    new, n = _COMMITTER.subn(lambda m: b"committer " + m.group(1) + b" " + date.encode(), head, count=1)
    if n != 1:
        raise RebuildError("commit object without a committer line")
    return new + sep + body


def raw_date(iso: str) -> str:
    """An ISO-8601 time with its offset (the ledger's) in git's raw form."""
    t = datetime.fromisoformat(iso)
    if t.tzinfo is None:
        raise RebuildError(f"time {iso!r} has no offset; expected the ledger's ISO-8601 form")
    off = int(t.utcoffset().total_seconds()) // 60
    return f"{int(t.timestamp())} {'+' if off >= 0 else '-'}{abs(off) // 60:02d}{abs(off) % 60:02d}"


def seconds_between(first: str, last: str) -> list[str]:
    """Every second from ``first`` to ``last`` (raw dates, ``first``'s offset), in order."""
    t0, tz = first.split()
    t1 = int(last.split()[0])
    return [f"{t} {tz}" for t in range(int(t0), t1 + 1)]


# ---------------------------------------------------------------- the shell
def _env(recipe: Recipe | None = None) -> dict:
    """git's environment: no user or system config (no signing, hooks, am options), the
    recipe's committer and date."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, LC_ALL="C", TZ="UTC")
    if recipe is not None:
        m = re.fullmatch(r"(.*) <(.*)>", recipe.committer)
        if m is None:
            raise RebuildError(f"attempt {recipe.attempt}: committer {recipe.committer!r}: expected "
                               f"'name <email>' (fix {MANIFEST.name})")
        env.update(GIT_COMMITTER_NAME=m.group(1), GIT_COMMITTER_EMAIL=m.group(2),
                   GIT_COMMITTER_DATE=recipe.committer_date)
    return env


def git(cwd: Path, *args: str, env: dict | None = None, data: bytes | None = None) -> bytes:
    r = subprocess.run(["git", "-c", "commit.gpgsign=false", "-c", "core.hooksPath=" + os.devnull, *args],
                       cwd=cwd, env=env or _env(), input=data, capture_output=True)
    if r.returncode != 0:
        raise RebuildError(f"`git {' '.join(args)}` in {cwd} exited {r.returncode}: "
                           f"{r.stderr.decode(errors='replace').strip()[-1500:]}")
    return r.stdout


def has_commit(repo: Path, sha: str) -> bool:
    return subprocess.run(["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=repo, env=_env(),
                          capture_output=True).returncode == 0


class Scratch:
    """A scratch clone sharing ``repo``'s objects (nothing it writes lands in ``repo``)."""

    def __init__(self, repo: Path):
        self.repo = repo
        self._tmp = tempfile.TemporaryDirectory(prefix="kern-rebuild-")
        self.path = Path(self._tmp.name) / "r"
        git(repo, "clone", "-q", "--no-checkout", "--shared", str(repo), str(self.path))

    def am(self, recipe: Recipe) -> bytes:
        """The commit object ``git am`` makes of the recipe (written in the scratch clone;
        its branch ``rebuilt/<n>`` points at it)."""
        patch = ROOT / recipe.patch
        if not patch.is_file():
            raise RebuildError(f"attempt {recipe.attempt}: patch {recipe.patch} is not in {ROOT}")
        if not has_commit(self.repo, recipe.base):
            raise RebuildError(f"attempt {recipe.attempt}: base {recipe.base[:12]} is not in {self.repo} "
                               f"(fetch main's history: a shallow clone lacks it)")
        git(self.path, "checkout", "-q", "-f", "--detach", recipe.base)
        try:
            git(self.path, "am", "-q", "--no-3way", str(patch), env=_env(recipe))
        except RebuildError as e:
            # with the recipe's committer: without an identity git refuses the abort too, and the
            # next recipe's am would meet this one's rebase-apply folder
            subprocess.run(["git", "am", "--abort"], cwd=self.path, env=_env(recipe), capture_output=True)
            raise RebuildError(f"attempt {recipe.attempt}: {recipe.patch} does not apply on "
                               f"{recipe.base[:12]}: {e}") from None
        git(self.path, "branch", "-f", f"rebuilt/{recipe.attempt}", "HEAD")
        return git(self.path, "cat-file", "commit", "HEAD")

    def fetch_into(self, numbers: list[int]) -> None:
        """The rebuilt commits into ``repo`` as the loop's branches ``attempt/<n>``."""
        if numbers:
            git(self.repo, "fetch", "-q", str(self.path),
                *[f"refs/heads/rebuilt/{n}:refs/heads/{BRANCH.format(n=n)}" for n in numbers])

    def close(self) -> None:
        self._tmp.cleanup()


def ledger_rows(path: Path) -> dict[int, dict]:
    """The ledger's attempts (read-only: this never writes the ledger)."""
    # immutable: a read-only open of a WAL file would still leave -shm/-wal files beside it
    db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        db.row_factory = sqlite3.Row
        rows = {r["number"]: dict(r) for r in db.execute("SELECT * FROM attempts")}
        for r in db.execute("SELECT attempt, at, data FROM events WHERE kind IN ('transition', "
                            "'update') ORDER BY id"):
            fields = json.loads(r["data"]).get("fields", json.loads(r["data"]))
            row = rows.get(r["attempt"])
            if row is not None and isinstance(fields, dict) and fields.get("commit_sha") \
                    and "commit_recorded_at" not in row:
                row["commit_recorded_at"] = r["at"]
        return rows
    finally:
        db.close()


def recipe_of(n: int, row: dict, attempt_dir: Path) -> tuple[list[str], str]:
    """(patch paths relative to :data:`ROOT`, base) of replay attempt ``n``: the patch its
    settings.json's replay index names in its replay_dir, then its variants (onto-main/, onto-NNN/)
    where it has them, in the order the backend tries them (the first that applies on the base
    is the one)."""
    if row.get("backend") != "replay":
        raise RebuildError(f"attempt {n}: backend {row.get('backend')!r}: only the replay backend's "
                           f"commits are made from a patch of main's files")
    try:
        s = json.loads((attempt_dir / "settings.json").read_text())
        index, folder = int(s["context"]["index"]), s["agent"]["replay_dir"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise RebuildError(f"attempt {n}: {attempt_dir / 'settings.json'}: expected the replay index "
                           f"and replay_dir the loop wrote, found {type(e).__name__}: {e}") from None
    sys.path.insert(0, str(ROOT))
    from harness.agents.replay import patch_files, variants  # the backend's own rules

    files = patch_files(ROOT / folder)
    if not 0 <= index < len(files):
        raise RebuildError(f"attempt {n}: replay index {index}, but {folder} holds {len(files)} patches")
    return [str(p.relative_to(ROOT)) for p in variants(files[index])], row["base_sha"]


def moved(recipes: dict[int, Recipe], rows: dict[int, dict]) -> list[int]:
    """Pure: the attempts whose recipe names another commit than their ledger row: judged again
    on a newer main since they were recorded (the loop rebased them), so recorded again."""
    return sorted(n for n, r in recipes.items()
                  if (rows.get(n) or {}).get("commit_sha") not in (None, "", r.commit))


def cmd_check(repo: Path, recipes: dict[int, Recipe], numbers: list[int], apply: bool) -> int:
    led = ledger_rows(LEDGER) if LEDGER.exists() else {}
    todo = [recipes[n] for n in numbers]
    if apply:
        todo = [r for r in todo if not has_commit(repo, r.commit)]
    bad, made = 0, []
    scratch = Scratch(repo) if todo else None
    try:
        for r in todo:
            ledger_sha = (led.get(r.attempt) or {}).get("commit_sha")
            if ledger_sha and ledger_sha != r.commit:
                print(f"attempt {r.attempt}: {MANIFEST.name} names {r.commit[:12]}, the ledger "
                      f"{ledger_sha[:12]}: fix {MANIFEST.name}")
                bad += 1
                continue
            try:
                sha = object_sha(scratch.am(r))
            except RebuildError as e:
                print(e)
                bad += 1
                continue
            if sha != r.commit:
                print(f"attempt {r.attempt}: expected {r.commit}, rebuilt {sha} ({r.patch} on "
                      f"{r.base[:12]}, committer date {r.committer_date})")
                bad += 1
                continue
            print(f"attempt {r.attempt}: {sha} rebuilt from {r.patch}")
            made.append(r.attempt)
        if apply and scratch is not None:
            scratch.fetch_into(made)
            for n in made:
                print(f"attempt {n}: branch {BRANCH.format(n=n)}")
    finally:
        if scratch is not None:
            scratch.close()
    if apply:
        have = len(numbers) - len(todo)
        print(f"{len(made)} rebuilt, {have} already here" + (f", {bad} failed" if bad else ""))
    return 1 if bad else 0


def cmd_record(repo: Path, recipes: dict[int, Recipe], numbers: list[int], search: bool) -> int:
    led = ledger_rows(LEDGER)
    bad = 0
    scratch = Scratch(repo)
    try:
        for n in numbers:
            row = led.get(n)
            if row is None or not row.get("commit_sha"):
                print(f"attempt {n}: no commit in the ledger {LEDGER}")
                bad += 1
                continue
            try:
                patches, base = recipe_of(n, row, ATTEMPTS / str(n))
                sha = row["commit_sha"]
                if has_commit(repo, sha):
                    who, when = committer_of(git(repo, "cat-file", "commit", sha))
                    tries = [when]
                elif search:
                    who = "kern-loop replay <kern-loop@localhost>"  # harness/agents/common.identity
                    tries = seconds_between(raw_date(row["created_at"]),
                                            raw_date(row.get("commit_recorded_at") or row["updated_at"]))
                else:
                    print(f"attempt {n}: commit {sha[:12]} is not here: fetch the device's bundle, "
                          f"or pass --search to try each second the ledger allows")
                    bad += 1
                    continue
                raw, errors = None, []
                for patch in patches:  # the backend's order: the first that applies was applied
                    r = Recipe(n, patch, base, sha, who, tries[0])
                    try:
                        raw = scratch.am(r)
                        break
                    except RebuildError as e:
                        errors.append(str(e))
                if raw is None:
                    raise RebuildError("; ".join(errors))
                found = next((d for d in tries if object_sha(with_committer_date(raw, d)) == sha), None)
            except RebuildError as e:
                print(e)
                bad += 1
                continue
            if found is None:
                print(f"attempt {n}: no committer date among {len(tries)} tried gives {sha[:12]}")
                bad += 1
                continue
            recipes[n] = Recipe(n, r.patch, base, sha, who, found)  # r: the variant that applied
            print(f"attempt {n}: recorded ({r.patch} on {base[:12]}, committer date {found})")
    finally:
        scratch.close()
    MANIFEST.write_text(dump_manifest(recipes))
    return 1 if bad else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("verb", choices=("check", "apply", "record", "moved"))
    p.add_argument("numbers", nargs="*", type=int, help="attempts (default: every recipe)")
    p.add_argument("--repo", default=str(ROOT),
                   help="the repository whose objects hold the bases and that gets the commits "
                        "(default: this one; the patches and recipes are always this one's)")
    p.add_argument("--search", action="store_true",
                   help="record: find the committer's second of a commit that is not here")
    args = p.parse_intermixed_args(argv)
    repo = Path(args.repo).resolve()
    try:
        recipes = load_manifest(MANIFEST.read_text()) if MANIFEST.exists() else {}
        if args.verb == "moved":
            print(" ".join(map(str, moved(recipes, ledger_rows(LEDGER) if LEDGER.exists() else {}))))
            return 0
        if args.verb == "record":
            if not args.numbers:
                p.error("record: name the attempts")
            return cmd_record(repo, recipes, args.numbers, args.search)
        unknown = sorted(set(args.numbers) - set(recipes))
        if unknown:
            print(f"attempts {unknown}: no recipe in {MANIFEST} (record them first)", file=sys.stderr)
            return 2
        return cmd_check(repo, recipes, args.numbers or sorted(recipes), apply=args.verb == "apply")
    except RebuildError as e:
        print(f"rebuild: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
