#!/usr/bin/env bash
# After a GPU run of the journey: what the loop phase brought back (bench/gpu_evidence.sh
# loop-start's or loop-wait's $OUT, or a chain's <k>-loop-start/ folder, fetched here to DIR)
# into main's files, in one commit: the ledger, each attempt's kept files, the device's main
# (the gates' merges) merged, the new attempts' recipes (rebuild.py record), the export, and
# the new judgments' seconds (bench/results/<date>-<gpu>-judging-loop-<first>-<last>.json) and
# the loop's profiles of main (bench/results/<date>-<gpu>-profile-<rows>-loop-<sha7>.json).
#
#   bash bench/journey/import.sh DIR "the H200 run of <date>: <what it judged>"
#
# Run from the repository root on main with a clean tree. It stops before committing anything
# where a step fails, and says which. Nothing the run brought back is deleted.
set -euo pipefail
dir=${1:?usage: bash bench/journey/import.sh DIR MESSAGE, DIR the loop phase fetched OUT folder}
msg=${2:?usage: bash bench/journey/import.sh DIR MESSAGE, the commit subject after bench:}
py=${PYTHON:-python3}
kern() { $py -m harness.cli "$@"; }
die() { echo "import: $*" >&2; exit 2; }
[ -f "$dir/ledger.sqlite" ] || die "$dir holds no ledger.sqlite (expected the loop phase's \$OUT): nothing imported"
[ "$(git rev-parse --abbrev-ref HEAD)" = main ] || die "check out main first (expected branch main)"
[ -z "$(git status --porcelain --untracked-files=no)" ] || die "the tree has changes: commit them first"

numbers() { $py -c "import sqlite3,sys; print(' '.join(str(r[0]) for r in sqlite3.connect(sys.argv[1]).execute('select number from attempts order by number')))" "$1"; }
old=" $(numbers bench/journey/ledger.sqlite) "
new=()
for n in $(numbers "$dir/ledger.sqlite"); do [[ $old == *" $n "* ]] || new+=("$n"); done
echo "import: attempts new in this run: ${new[*]:-none}"

# 1. the device's main and the attempts' branches (their commits: the recipes and the diffs)
if [ -f "$dir/device-main.bundle" ]; then
  git fetch -q "$dir/device-main.bundle" "+refs/heads/*:refs/remotes/device/*"
  if git merge-base --is-ancestor device/main main; then
    echo "import: the device's main brought no merge"
  else
    subjects=$(git log --format='- %s' main..device/main)
    git merge -q --no-ff device/main -m "merge the device's main: the loop's merges ($msg)" -m "$subjects" \
      || die "merging the device's main failed: resolve it (git merge --abort to undo) and run again"
    echo "import: merged the device's main:"; echo "$subjects"
  fi
else
  echo "import: no device-main.bundle in $dir: no merge, no attempt commits"
fi

# 2. the ledger and what the loop kept of each attempt (never a recording: runs/attempts only)
cp "$dir/ledger.sqlite" bench/journey/ledger.sqlite
if [ -f "$dir/attempts.tgz" ]; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  tar -xzf "$dir/attempts.tgz" -C "$tmp"
  for a in "$tmp"/runs/attempts/*/; do
    [ -d "$a" ] || continue
    n=$(basename "$a"); mkdir -p "bench/journey/attempts/$n"
    cp -r "$a". "bench/journey/attempts/$n/"
  done
fi

# 3. the new replay attempts' recipes, each proved by a rebuild (attempts with a patch only), and
# those of earlier attempts the run judged again on a newer main (rebased: a new commit)
rec=()
for n in "${new[@]}"; do [ -f "bench/journey/attempts/$n/settings.json" ] && rec+=("$n"); done
rec+=($($py bench/journey/rebuild.py moved))
if [ ${#rec[@]} -gt 0 ]; then
  $py bench/journey/rebuild.py record "${rec[@]}" || die "rebuild.py record ${rec[*]} failed (above): fetch the bundle or pass --search by hand"
fi

# 4. the export, from a clone that holds every attempt's commit (each row's diff)
jr=$(mktemp -d)
git clone -q --no-checkout . "$jr"
$py bench/journey/rebuild.py apply --repo "$jr" | tail -1
mkdir -p "$jr/runs/attempts/4" && cp bench/journey/ledger.sqlite "$jr/runs/"
cp kern.yaml "$jr/"
cp bench/results/2026-12-01-h200-kern-try-experts-judgment.json "$jr/runs/attempts/4/judgment-1.json"
cp -r bench/journey/attempts/. "$jr/runs/attempts/"
for f in md html json; do kern --repo "$jr" --config "$jr/kern.yaml" report --format $f --out bench/journey/journey.$f; done
kern --repo "$jr" --config "$jr/kern.yaml" report --plot bench/journey/journey.png
rm -rf "$jr"

# 5. the run's new judgments' seconds by phase (issue 34; the loop compiled main when it profiled
# it, so these are its steady state), beside the other results
# (the attempts with a judgment file main does not hold yet: new ones, and earlier ones judged again)
judged=($(git ls-files --others -- 'bench/journey/attempts/*/judgment-*.json' | cut -d/ -f4 | sort -nu))
if [ ${#judged[@]} -gt 0 ]; then
  suffix=loop-${judged[0]}-${judged[-1]}
  $py bench/tools/judging_times.py --ledger bench/journey/ledger.sqlite --attempts bench/journey/attempts \
    $(printf -- '--attempt %s ' "${judged[@]}") --suffix "$suffix" --note "kern loop, $msg" \
    || die "bench/tools/judging_times.py failed (above)"
  git add bench/results/*-judging-"$suffix".json
fi

# 6. the loop's profiles of main measured in this run (the next briefs read them: kern brief --profile)
if [ -n "${tmp:-}" ] && [ -d "$tmp/runs/profile" ]; then
  $py bench/tools/loop_profile.py --profiles "$tmp/runs/profile" --ledger bench/journey/ledger.sqlite \
    || die "bench/tools/loop_profile.py failed (above)"
  git add bench/results/*-profile-*-loop-*.json
fi

git add bench/journey
if git diff --cached --quiet; then
  echo "import: the journey's files are as main holds them: nothing to commit"
else
  git commit -q -m "bench: $msg" && git log --oneline -1
fi
