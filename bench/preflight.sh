#!/usr/bin/env bash
# Before a GPU run of the journey: the loop-start phase's path on this CPU, as the device runs
# it, so a harness bug costs minutes here instead of an H200 run. It runs with an interpreter
# holding only the device image's packages (torch, triton, numpy, matplotlib), with the carried
# wheels (bench/device_wheels.txt) on PYTHONPATH. It works in a clone of .carry/repo.bundle with
# the attempts rebuilt, starting from the journey's ledger, with the replay backend. The ticks run
# on the small config through Triton's interpreter.
# On 2026-12-05 an H200 call judged nothing: every agent died at an import that only the carried
# wheels held. A run made here would also have shown that #11, re-queued on an older main, crashed its scorer.
# It runs main as committed (the bundle), as the device would.
# Usage: bash bench/carry.sh && bash bench/preflight.sh [TICKS] [CONCURRENCY]
#   (defaults 2 and 1: about 6 minutes on 2 cores). Exit 0 when no new attempt crashed; 1 names
#   the crashed ones (their reasons); 2 for a setup failure. PREFLIGHT_DIR (default
#   /tmp/kern-preflight) keeps the interpreter and wheels between runs.
set -uo pipefail
cd "$(dirname "$0")/.."
quiet_pip() { "$@" 2>&1 | grep -v "is ignored: it is neither a file nor a directory"; return "${PIPESTATUS[0]}"; }
ticks=${1:-2}; concurrency=${2:-1}
dir=${PREFLIGHT_DIR:-/tmp/kern-preflight}
[ -f .carry/repo.bundle ] || { echo "preflight: no .carry/repo.bundle: run bash bench/carry.sh first" >&2; exit 2; }
mkdir -p "$dir"
if [ ! -x "$dir/venv/bin/python" ]; then
  echo "preflight: an interpreter with the device image's packages only (first run: a few minutes)"
  python3 -m venv "$dir/venv" && quiet_pip "$dir/venv/bin/pip" install -q torch==2.13.0 triton numpy matplotlib \
    || { echo "preflight: installing torch, triton, numpy, matplotlib failed" >&2; rm -rf "$dir/venv"; exit 2; }
fi
py="$dir/venv/bin/python"
if [ ! -d "$dir/site" ]; then
  rm -rf "$dir/whl" && quiet_pip "$py" -m pip download -q --no-deps --only-binary=:all: -d "$dir/whl" \
    $(grep -v '^#' bench/device_wheels.txt) \
    && quiet_pip "$py" -m pip install -q --no-index --no-deps --no-compile --target "$dir/site" "$dir/whl"/*.whl \
    || { echo "preflight: the wheels of bench/device_wheels.txt did not download or install" >&2; rm -rf "$dir/site"; exit 2; }
fi
repo="$dir/repo"
rm -rf "$repo" && git clone -q .carry/repo.bundle "$repo" 2>/dev/null && cd "$repo" && git checkout -q main \
  && git config user.email kern@loop && git config user.name kern-loop \
  || { echo "preflight: cloning .carry/repo.bundle failed" >&2; exit 2; }
export PYTHONPATH="$dir/site:$repo"
"$py" bench/journey/rebuild.py apply | tail -1
mkdir -p runs && cp bench/journey/ledger.sqlite runs/ledger.sqlite
"$py" -c "import sqlite3, json; print(json.dumps(sqlite3.connect('runs/ledger.sqlite').execute('select number, state, reason from attempts').fetchall()))" > "$dir/before.json"
LOOP_CONCURRENCY=$concurrency "$py" bench/journey/loop_config.py "$dir/kern-loop.yaml" || exit 2
echo "preflight: kern loop --ticks $ticks, concurrency $concurrency, on $(git rev-parse --short main) (log $dir/loop.log)"
t0=$(date +%s)
"$py" -m harness.cli --config "$dir/kern-loop.yaml" loop --ticks "$ticks" --every 1s --wait-agents 120 \
  --no-live > "$dir/loop.log" 2>&1
rc=$?
grep -v "round \|…   " "$dir/loop.log" | tail -20
echo "preflight: kern loop rc $rc after $(( $(date +%s) - t0 )) s"
"$py" - "$dir/before.json" <<'PY'
import json, sqlite3, sys
before = {n: (state, reason) for n, state, reason in json.load(open(sys.argv[1]))}
rows = sqlite3.connect("runs/ledger.sqlite").execute(
    "select number, state, reason from attempts order by number").fetchall()
changed = [r for r in rows if before.get(r[0]) != (r[1], r[2])]  # new rows and re-judged ones
for n, state, reason in changed:
    print(f"preflight: #{n} {state}: {reason or ''}"[:300])
bad = [n for n, state, _ in changed if state == "crashed"]
if bad:
    print(f"preflight: attempt(s) {bad} crashed: fix the harness before a GPU run", file=sys.stderr)
    sys.exit(1)
print(f"preflight: {len(changed)} attempt(s) judged or started, none crashed")
PY
