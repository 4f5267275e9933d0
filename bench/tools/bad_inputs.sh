#!/usr/bin/env bash
# Issue 38's list of a user's mistakes and interruptions, run on a scratch clone of this
# repository: each command as typed, then its output verbatim (stdout and stderr as they
# interleave) and its exit code. For the issue's closing note; nothing here judges the output.
#
#   bench/tools/bad_inputs.sh            # from a clone's root (kern-loop installed or not)
#   PYTHON=.venv/bin/python bench/tools/bad_inputs.sh
#
# The scratch clone lives under /tmp and is removed at the end (KEEP=1 keeps it). One command
# runs a real `kern try` on the small config and stops it with SIGINT (about a minute on a CPU).
# Run as root, the read-only cases run as the user nobody: root writes through any mode bits.
set -u
PYTHON=${PYTHON:-python}
SRC=$(git rev-parse --show-toplevel)
WORK=$(mktemp -d /tmp/kern-bad-inputs.XXXXXX)
chmod 755 "$WORK"
CLONE=$WORK/clone
git clone --quiet "$SRC" "$CLONE"
git -C "$CLONE" switch -q -C main  # this checkout as the clone's main, whatever branch it is
git -C "$CLONE" config user.name bad-inputs
git -C "$CLONE" config user.email bad-inputs@kern
export PYTHONPATH=$CLONE TRITON_INTERPRET=1
cd "$CLONE" || exit 1

kern() { "$PYTHON" -m harness.cli "$@"; }
as_user() {  # the command as an unprivileged user when this is root
  if [ "$(id -u)" = 0 ]; then HOME=/tmp setpriv --reuid=65534 --regid=65534 --clear-groups "$@"
  else "$@"; fi
}
n=0
run() {  # run DESCRIPTION -- COMMAND...: print it, its output, its exit code
  local what=$1; shift; shift
  n=$((n + 1))
  printf '\n=== %d. %s\n$ %s\n' "$n" "$what" "$*"
  ( eval "$*" ) 2>&1
  printf '[exit %d]\n' "$?"
}
echo "kern-loop $(git -C "$SRC" rev-parse --short HEAD), scratch clone $CLONE, $(date -Iseconds)"

# ---- kern try traps
run "kern try on main (the first example in kern --help)" -- kern try HEAD
git switch -q -c change
printf '\n# a comment: nothing to measure\n' >> kernels/k31/moe/situ.py
git commit -qam "moe: a comment"
run "Ctrl-C during kern try (SIGINT to its process group after 40 s)" -- \
  'set -m; kern try change & pid=$!; sleep 40; kill -INT -- -$pid; wait $pid'
run "status after the Ctrl-C" -- kern status
run "the same commit again" -- kern try change
run "a loop's attempt left judging: cancel it" -- \
  "$PYTHON"' -c "from harness import ledger as L; l = L.Ledger(L.default_path(\".\")); n = l.new_attempt(title=\"moe.combine: one pass\", hypothesis=\"\", target=\"moe.combine\", backend=\"tuner\", base_sha=None, phase_id=None); l.transition(n, \"judging\", commit_sha=\"0\" * 40)"; kern status; kern doctor --offline | grep -A1 judging; kern cancel 2 --reason "left by a stopped loop"'
git switch -q main

# ---- tracebacks that were
run "an attempt number out of range" -- kern show 99999999999999999999999
run "a closed pipe (kern's own exit code after the output)" -- \
  'kern show 1 --json | head -c 10; echo; echo "kern exited ${PIPESTATUS[0]}"'
run "report --out a folder" -- kern report --out "$WORK"
run "report --out /proc/version" -- kern report --out /proc/version
run "--config a folder: doctor" -- kern --config "$WORK" doctor --offline
run "--config a folder: status" -- kern --config "$WORK" status
run "--config a folder: report" -- kern --config "$WORK" report
cp runs/ledger.sqlite "$WORK/ledger.keep"
sqlite3 runs/ledger.sqlite "DROP TABLE events" 2>/dev/null || \
  "$PYTHON" -c "import sqlite3; c = sqlite3.connect('runs/ledger.sqlite'); c.execute('DROP TABLE events'); c.commit()"
run "a ledger missing its events table: status" -- kern status
run "a ledger missing its events table: show" -- kern show 1
cp "$WORK/ledger.keep" runs/ledger.sqlite
rm -f runs/ledger.sqlite-wal runs/ledger.sqlite-shm

# ---- a read-only runs/ (as nobody when root)
if [ "$(id -u)" = 0 ]; then chown -R 65534:65534 "$CLONE"; chown -R 0:0 "$CLONE/runs"; fi
chmod -R a-w runs
run "read-only runs/: status" -- as_user "$PYTHON" -m harness.cli status
run "read-only runs/: report" -- as_user "$PYTHON" -m harness.cli report
run "read-only runs/: show" -- as_user "$PYTHON" -m harness.cli show 1
run "read-only runs/: try" -- as_user "$PYTHON" -m harness.cli try change --again
run "read-only runs/: loop" -- as_user "$PYTHON" -m harness.cli loop --tick
chmod -R u+w runs
if [ "$(id -u)" = 0 ]; then chown -R 0:0 "$CLONE"; fi
cp runs/ledger.sqlite "$WORK/ledger.keep"
head -c 4096 /dev/urandom > runs/ledger.sqlite
run "a damaged ledger: status" -- kern status
cp "$WORK/ledger.keep" runs/ledger.sqlite

# ---- silent acceptances
run "--ticks 0" -- kern loop --ticks 0
run "--ticks -1" -- kern loop --ticks -1
run "--wait-agents -5" -- kern loop --wait-agents -5
run "--rounds 0" -- kern bench --rounds 0
run "--replays -1" -- kern bench --replays -1
run "--rows 0 (step)" -- kern step --rows 0
run "--rows 0 (profile)" -- kern profile --rows 0
run "--every 0s" -- kern loop --every 0s --tick
run "--every 1000000d" -- kern loop --every 1000000d --tick
run "--plot x.jpg" -- kern report --plot "$WORK/x.jpg"
run "--out /nonexistent/dir/f" -- kern report --out /nonexistent/dir/f
run "duplicate keys in kern.yaml" -- \
  "sed -i 's/^  every: 20m .*/&\n  every: 5m/' kern.yaml; kern loop --tick; rc=\$?; git checkout -q kern.yaml; exit \$rc"

# ---- kern doctor
run "doctor, claude-code backend, no key" -- \
  "env -u ANTHROPIC_API_KEY -u ANTHROPIC_AUTH_TOKEN -u CLAUDE_CODE_OAUTH_TOKEN $PYTHON -m harness.cli doctor --offline --set agent.backend=claude-code | grep -A1 -E '^(ok|warn|fail) +(agent|disk)'; exit \${PIPESTATUS[0]}"
mkdir -p "$WORK/plain" && cp kern.yaml "$WORK/plain/"
run "doctor in a folder that is not a repository" -- \
  "kern --repo $WORK/plain doctor --offline; rc=\$?; echo \"the folder holds: \$(ls -A $WORK/plain)\"; exit \$rc"

# ---- small frictions
run "a bad revision answers before torch is imported" -- 'time kern try nosuchrev'
run "kern help" -- 'kern help | head -5; kern help cancel | head -3'

cd / || exit 1
if [ "${KEEP:-0}" = 1 ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
