#!/usr/bin/env bash
# GPU evidence in as few device calls as possible. Usage (on the device, from the repo root
# copy that carried .carry/): bash bench/gpu_evidence.sh PHASE
#   kernel-tests - the kernel tests on the GPU
#   gates-gpu [TIMEOUT] [EXPR] - the gates' GPU tests (tests/gates -m gpu), before a loop on new gates code
#   step   - kern step at every bucket (profile at 128, reference at 3)
#   gates  - kern test main vs main and vs evidence/reordered-sum (wall times); kern bench
#            evidence/extra-work vs main with the eager baseline and the fla-core peer
#   bench  - kern bench main five times (CV), kern profile at 128 rows, the compile baseline
#   loop   - kern loop with the tuner backend on reduced settings (see the phase)
#   ab     - issue 4's bar: a plain A/B (no baselines, no peers) timed whole, the compile
#            baseline at 64 rows; issue 7: the GPU-only reward hacks
#   allreduce [REV] - issue 6: one-shot vs NCCL vs gather all-reduce latency on 2 GPUs and the
#            GPU tests of the one-shot path, at REV (a branch of the bundle; default main)
#   x2 STEP - on the 2-GPU device (nvidia-h200-x2), issue 6; STEP (one device call each):
#            test    kern test main --vs main --gpus 2 --base-gpus 1 on a reduced tap (the 2-rank
#                    step against the whole model in one process, judged by logits)
#            bench   kern bench main --gpus 2 --emulate 8 --rounds 1 (the W = 2, emulate 8 score)
#            profile kern profile main --gpus 2 --emulate 8 --rows 128 (rank 0, collectives as rows)
#   try REV [TIMEOUT] - issue 14: kern try REV on the full config, the journey's ledger
#            (.carry/ledger.sqlite, when there) carried in and back out with the judgments
#   try-start REV [TIMEOUT] / try-wait [SECONDS] - the same kern try spread over two device
#            calls on one warm machine: try-start runs it in its own process session (which the
#            device keeps running after the call returns) and waits up to 570 s; try-wait, the
#            next call, keeps the clone, waits for it to end and brings the ledger back. Then
#            another phase may follow in the same command (a second run of this script)
#   queue-micro [FROM] [ROWS] [TIMEOUT] - issue 36: the journey's waiting patches from number FROM
#            (default 007) each applied to main as the replay backend hands them out, one
#            op_bench process per kernel family (bench/tools/queue_micro.py): which candidates
#            are worth a judgment first; TIMEOUT (default 240 s) per family. Fits an H100
#            (state for ROWS, default 16,64,128, not 256)
#   compile-chain [BUCKETS] - main's compile side of B (HEAD + a comment in one kernel) from empty
#            against seeded by HEAD's compiled cache (bench/tools/compile_chain.py), one run;
#            BUCKETS (e.g. 16,32,64,128 on an H100) narrows the scorer's build
#   ncu-experts [ROWS...] - Nsight Compute's counters of moe.experts' FC1 and FC2 kernels on the
#            full config (bench/tools/ncu_experts.py; ROWS default 16 64 128): per row count one
#            ncu run (--clock-control none: clocks as the device runs them) over a few eager calls,
#            $OUT/ncu_experts_<rows>.json with duration, DRAM % of peak, issue slots busy, IPC,
#            occupancy, registers, top warp stalls, instructions per weight word and a verdict per
#            kernel (issue-, memory- or latency-bound); the reports in ncu_experts_reports.tgz.
#            NCU_TIMEOUT (default 180 s) per row count. Fits an H100 up to 192 rows
#   compile-rows [ROWS...] - issue 36: the compile baseline (bench/tools/compile_baseline.py: the tree's
#            step, then every reference op under torch.compile, same process) at each row count
#            (default 16 64), one process each so a limit at one keeps the others;
#            $OUT/compile_baseline_<rows>.jsonl (its .err logs each op's first call and each untimed
#            step); COMPILE_TIMEOUT (default 450 s) per row count. On an H100 on 2026-12-07 none finished
#            (200, 450 s; 420 s with dynamic shapes): moe.experts' expert loop recompiled for every new
#            routing until 3381858. Longer than one call: chain-start "COMPILE_TIMEOUT=1200 compile-rows 16"
#   loop-start TICKS [TIMEOUT] [POLLS] / loop-wait [POLLS] - issue 26 (LOOP_CONCURRENCY replays a tick, 3 unless set;
#            LOOP_WALL_HOURS, TIMEOUT less a minute unless set: no judgment starts that could outlast it): kern loop with the replay backend
#            over bench/journey/patches/ (each patch names its target), the journey's ledger
#            (bench/journey/ledger.sqlite) as its ledger, in its own process session across
#            device calls; loop-wait waits, then brings back the ledger, the exports and a
#            bundle of the clone's main and notes (the gates' merges)
#   judging [OLD] [KINDS...] - issue 34: the same candidates judged by kern try with OLD's gates
#            (86661fa) and main's, one after the other; one JSON of both (judging_times.py)
#   judging-start [OLD] [KINDS...] / judging-wait [POLLS] - the same judging phase in its own
#            process session across device calls on one warm machine (it takes longer than one
#            call: four judgments); judging-wait waits, then brings back what it wrote to $OUT
#   chain-start LINE... / chain-wait [POLLS] - several phases one after another in one detached
#            session on one warm machine (no idle gap between them), e.g. chain-start "gates-gpu 300"
#            "JUDGING_SIDES=after judging" "loop-start 3 1500 100000"; each phase's $OUT comes back
#            in <k>-<phase>/
#   demo [TIMEOUT] - issue 34: README command 1 (kern loop --demo) on the GPU, timed whole, with the
#            demo repository's ledger and report
#   hacks [TIMEOUT] [EXPR] - issue 13: the GPU cases of tests/adversarial (small model on the
#            GPU); EXPR, when given, is pytest's -k (each case runs only its own scorer)
#   fairbar [WHICH] [TIMEOUT] - issue 35: the scorer's band rule at 128k. WHICH: attempt-9 (#9's
#            patch carried onto main, re-judged), long-context-bug (the class the rule refuses) or
#            both (two judgments: give the call 600 s, or one WHICH a call); kern try of each
#            (bench/tools/fair_bar.py candidates), then fair_bar.py record of the judgments into
#            $OUT/fair_bar.json (copy it to bench/results/<date>-h200-fair-bar.json)
#   final [BASE] [TIMEOUT] - issues 14 and 36: main's whole gain in one interleaved run, kern bench
#            main --vs BASE, then kern profile main --rows 128. BASE kernels-of:REV (the default:
#            kernels-of:f52bebd, issue 36's start) is REV's kernel tree on main's protected model,
#            built here by bench/tools/kernel_base.py: an old main cannot be a side of today's
#            gates (f52bebd's workload has no timed_inputs; 1ce3bd7's had no position_bound).
#            8062018 is issue 14's (its kernel tree is byte for byte 1ce3bd7's). FINAL_MAIN=BUNDLE
#            benches that bundle's main (a fast-forward of the carried one): in a chain after a
#            loop, FINAL_MAIN=/tmp/chain-out/1-loop-start/device-main.bundle (the loop's merges)
# The detached phases (try-, loop-, judging-, chain-start/-wait) run through bench/detached.sh.
# Writes JSON/logs to $OUT. Needs: .carry/repo.bundle (main + evidence branches), .carry/.whl:
# bash bench/carry.sh [BRANCH...] builds both here.
set -u
ROOT=$PWD
source "$ROOT/bench/detached.sh"
phase=${1:?phase}
if { [ "$phase" = try-wait ] || [ "$phase" = loop-wait ]; } && [ -d /tmp/r/.git ]; then
  cd /tmp/r  # the clone try-start made on this warm machine, with its runs/
elif [ "$phase" = judging-start ] || [ "$phase" = judging-wait ] || [ "$phase" = chain-start ] || [ "$phase" = chain-wait ]; then
  :  # the phases they start (further runs of this script) make their own clones
elif command -v git >/dev/null; then
  rm -rf /tmp/r && git clone -q "$ROOT/.carry/repo.bundle" /tmp/r && cd /tmp/r && git checkout -q main
  for b in $(git for-each-ref --format='%(refname:short)' refs/remotes/origin | sed 's|^origin/||'); do
    [ "$b" = main ] || [ "$b" = HEAD ] || git branch -q "$b" "origin/$b"
  done
  git config user.email kern@loop; git config user.name kern-loop
  # the journey's attempt commits (branches attempt/<n>) from main's files: a restarted loop
  # re-judges an attempt left judging from its commit, and the page shows each one's diff
  python3 bench/journey/rebuild.py apply | tail -1
else
  echo "no git on the device: running from the main snapshot only"; mkdir -p /tmp/r && tar -xf "$ROOT/.carry/main.tar" -C /tmp/r && cd /tmp/r
fi
cp -r "$ROOT/.carry/.whl" . && source bench/device_env.sh
# the commit the phase runs: its clone's; the phases that clone nothing here (a chain, judging)
# name the carried bundle's main, which their phases clone, not the device copy's HEAD
case "$phase" in
  chain-start|chain-wait|judging-start|judging-wait) at=$(git bundle list-heads "$ROOT/.carry/repo.bundle" refs/heads/main 2>/dev/null | cut -c1-40) ;;
  *) at=$(git rev-parse HEAD 2>/dev/null) ;;
esac
echo "commit ${at:-snapshot}; $(python3 -c 'import torch,triton;print("torch",torch.__version__,"triton",triton.__version__)')"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
# the full config's step peaks at 85.8 GiB (bench/results/2026-11-29-h200-step-full.json): on a
# smaller card every judgment ends out of memory. 2026-12-05 a call that named nvidia-h200 got an
# H100 (80 GB); the device's run() needs needs_h200=true for these phases
case "$phase" in
  loop-start|try|try-start|judging|fairbar|final|step|gates|bench|compile|micro|ab|judged)
    gib=$(python3 -c 'import torch; print(torch.cuda.get_device_properties(0).total_memory >> 30)') || exit 4
    if [ "$gib" -lt "${FULL_CONFIG_GIB:-100}" ]; then
      echo "environment: phase $phase runs the full config (its step peaks at 85.8 GiB) but this GPU has $gib GiB;" \
        "expected >= ${FULL_CONFIG_GIB:-100} GiB (an H200: call the device with needs_h200=true)" >&2
      exit 4
    fi
    ;;
esac
compile_baseline_at() {  # ROWS LIMIT: bench/tools/compile_baseline.py in its own process, $OUT/compile_baseline_ROWS.*
  local t0=$(date +%s) rc
  timeout $2 python3 bench/tools/compile_baseline.py $1 > $OUT/compile_baseline_$1.jsonl 2>$OUT/compile_baseline_$1.err
  rc=$?; tail -c 600 $OUT/compile_baseline_$1.jsonl; grep "compile baseline" $OUT/compile_baseline_$1.err | tail -8; tail -2 $OUT/compile_baseline_$1.err
  echo "compile baseline $1 rows: rc $rc, wall $(( $(date +%s)-t0 ))s"
}
try_collect() {  # the ledger and the attempts' logs of a finished kern try, into $OUT
  python3 -c "import sqlite3; sqlite3.connect('runs/ledger.sqlite').execute('PRAGMA wal_checkpoint(TRUNCATE)')"
  cp runs/ledger.sqlite $OUT/
  tar -czf $OUT/attempts.tgz runs/attempts runs/bench/*/*.log runs/tap/*/*.log 2>/dev/null
}
loop_collect() {  # the journey's ledger, its exports and the clone's main (the gates' merges)
  # a consistent copy while the loop may still write (sqlite's online backup)
  python3 -c "import sqlite3,sys; sqlite3.connect('runs/ledger.sqlite').backup(sqlite3.connect(sys.argv[1]))" $OUT/ledger.sqlite
  cp /tmp/kern-loop.yaml $OUT/ 2>/dev/null
  cp /tmp/loop.log $OUT/loop.log 2>/dev/null  # each tick's and judgment's lines, with their times
  python3 -m harness.cli --config /tmp/kern-loop.yaml report --format json --out $OUT/journey.json >/dev/null 2>&1
  python3 -m harness.cli --config /tmp/kern-loop.yaml status > $OUT/loop_status.txt 2>&1
  # main, the gates' notes and every attempt's branch: an abandoned or interrupted attempt's
  # commit comes back too (the journey shows its diff; a restarted loop re-judges it)
  git bundle create $OUT/device-main.bundle main $(git for-each-ref --format='%(refname)' refs/notes refs/heads/attempt) >/dev/null 2>&1
  tar -czf $OUT/attempts.tgz runs/attempts runs/profile runs/bench/*/*.log runs/tap/*/*.log 2>/dev/null
}
case $phase in
queue-micro)
  t0=$(date +%s)
  python3 bench/tools/queue_micro.py --from ${2:-007} --rows ${3:-16,64,128} --timeout ${4:-240} \
    --out $OUT/queue_micro.json 2>/tmp/queue_micro.err | tail -60
  tail -40 /tmp/queue_micro.err; echo "queue-micro: wall $(( $(date +%s)-t0 ))s"
  ;;
compile-chain)  # [BUCKETS] - what seeding a new main's compile side saves on this GPU
  t0=$(date +%s)
  python3 bench/tools/compile_chain.py ${2:+--buckets $2} --out $OUT/compile_chain.json 2>/tmp/compile_chain.err | tail -5
  rc=${PIPESTATUS[0]}; tail -25 /tmp/compile_chain.err
  echo "compile-chain: rc $rc, wall $(( $(date +%s)-t0 ))s"
  ;;
compile-rows)  # [ROWS...] - the compile baseline at each row count, apart
  rows="${*:2}"; rows=${rows//,/ }
  for r in ${rows:-16 64}; do compile_baseline_at $r ${COMPILE_TIMEOUT:-450}; done
  ;;
ncu-experts)  # [ROWS...] - is moe.experts issue-bound, memory-bound or latency-bound on this GPU
  rows="${*:2}"; rows=${rows//,/ }; rows=${rows:-16 64 128}
  # ncu_experts.py finds ncu (PATH, else /opt/nvidia/nsight-compute/*/ncu) and says where it looked
  # the capture step holds the decode state: 192 rows fit an H100 (80 GB), 256 need the H200
  gib=$(python3 -c 'import torch; print(torch.cuda.get_device_properties(0).total_memory >> 30)') || exit 4
  for r in $rows; do
    if [ "$r" -gt 192 ] && [ "$gib" -lt "${FULL_CONFIG_GIB:-100}" ]; then
      echo "environment: ncu-experts at $r rows records a full-config step at $r rows; this GPU has $gib GiB," \
        "expected >= ${FULL_CONFIG_GIB:-100} GiB above 192 rows (an H200: needs_h200=true), or ROWS <= 192" >&2
      exit 4
    fi
  done
  echo "ncu-experts: rows $rows"
  t0=$(date +%s); rm -rf /tmp/ncu_experts
  python3 bench/tools/ncu_experts.py run --rows $rows --out-dir $OUT --work /tmp/ncu_experts \
    --timeout ${NCU_TIMEOUT:-180} --commit "$(git rev-parse --short HEAD 2>/dev/null || echo snapshot)" \
    2>/tmp/ncu_experts.err | tail -20; rc=${PIPESTATUS[0]}
  tail -30 /tmp/ncu_experts.err
  cp /tmp/ncu_experts.err /tmp/ncu_experts/ 2>/dev/null
  tar -czf $OUT/ncu_experts_reports.tgz -C /tmp ncu_experts 2>/dev/null
  echo "ncu-experts: rc $rc, wall $(( $(date +%s)-t0 ))s"
  ;;
demo)  # [TIMEOUT] - issue 34: README command 1 on this GPU (kern loop --demo), timed whole; its
  # output, the demo repository's ledger and its report come back
  t0=$(date +%s); timeout ${2:-600} python3 -m harness.cli loop --demo --ticks 4 --every 1s --wait-agents 120 \
    --no-live >/tmp/demo.log 2>&1; rc=$?
  tail -30 /tmp/demo.log; echo "kern loop --demo: rc $rc, wall $(( $(date +%s)-t0 ))s" | tee -a /tmp/demo.log
  cp /tmp/demo.log $OUT/; d=$(ls -d runs/demo/*/ 2>/dev/null | tail -1)
  if [ -n "$d" ]; then
    cp "$d/runs/ledger.sqlite" $OUT/demo_ledger.sqlite
    python3 -m harness.cli --repo "$d" --config "$d/kern.yaml" report --format md --out $OUT/demo_report.md
  fi
  ;;
loop-start)
  ticks=${2:?loop-start needs TICKS}
  mkdir -p runs && cp bench/journey/ledger.sqlite runs/ledger.sqlite
  # the loop's wall budget ends a minute before the timeout kills it (its report is written in
  # that minute): it starts no judgment that could outlast it (a killed one stays judging)
  export LOOP_WALL_HOURS=${LOOP_WALL_HOURS:-$(python3 -c "print(max(${3:-1500} - 60, 60) / 3600)")}
  # the first judgment (main's compile in it): #11's 352 s on 2026-12-06, the longest measured
  export LOOP_FIRST_JUDGMENT_S=${LOOP_FIRST_JUDGMENT_S:-360}
  python3 bench/journey/loop_config.py /tmp/kern-loop.yaml || exit 3
  python3 -c "import torch; from gates.side import tamper; torch.zeros(1, device='cuda'); print('persisting L2 bytes', tamper.persisting_l2_bytes(torch.device('cuda')))" || exit 3
  detached_start loop ${4:-110} "timeout ${3:-1500} python3 -m harness.cli --config /tmp/kern-loop.yaml loop --ticks $ticks --every 1s --wait-agents 120 --no-live --report"
  tail -30 /tmp/loop.log; detached_state loop "kern loop"
  loop_collect
  ;;
loop-wait)
  detached_wait loop ${2:-110}
  tail -60 /tmp/loop.log; detached_state loop "kern loop"
  loop_collect
  ;;
try-start)
  rev=${2:?try-start needs a revision}
  mkdir -p runs; [ -f "$ROOT/.carry/ledger.sqlite" ] && cp "$ROOT/.carry/ledger.sqlite" runs/ledger.sqlite
  python3 -c "import torch; from gates.side import tamper; torch.zeros(1, device='cuda'); print('persisting L2 bytes', tamper.persisting_l2_bytes(torch.device('cuda')))" || exit 3
  detached_start try 114 "timeout ${3:-1080} python3 -m harness.cli try $rev"
  tail -40 /tmp/try.log; detached_state try "kern try $rev"
  detached_done try && try_collect
  ;;
try-wait)
  detached_wait try ${2:-110}
  tail -60 /tmp/try.log; cp /tmp/try.log $OUT/try.log; detached_state try "kern try"
  try_collect
  ;;
try)
  rev=${2:?try needs a revision}
  mkdir -p runs; [ -f "$ROOT/.carry/ledger.sqlite" ] && cp "$ROOT/.carry/ledger.sqlite" runs/ledger.sqlite
  # the scorer asks the driver what L2 is set aside: a failure there would fail every bench
  python3 -c "import torch; from gates.side import tamper; torch.zeros(1, device='cuda'); print('persisting L2 bytes', tamper.persisting_l2_bytes(torch.device('cuda')))" || exit 3
  t0=$(date +%s); timeout ${3:-540} python3 -m harness.cli try "$rev" 2>&1 | tail -60
  echo "kern try $rev: rc ${PIPESTATUS[0]}, wall $(( $(date +%s)-t0 ))s"
  python3 -c "import sqlite3; sqlite3.connect('runs/ledger.sqlite').execute('PRAGMA wal_checkpoint(TRUNCATE)')"
  cp runs/ledger.sqlite $OUT/
  tar -czf $OUT/attempts.tgz runs/attempts runs/bench/*/*.log runs/tap/*/*.log 2>/dev/null
  ;;
judged)  # issue 13: a plain A/B with the judged outputs (REV vs main), then the GPU hack cases
  t0=$(date +%s); timeout ${3:-240} python3 -m harness.cli bench "${2:?judged needs a revision}" --vs main \
    --out $OUT/bench_ab_judged.json 2>$OUT/bench_ab_judged.err | tail -24
  echo "kern bench $2 --vs main (plain A/B, judged outputs): wall $(( $(date +%s)-t0 ))s"
  t0=$(date +%s); timeout ${4:-200} python3 -m pytest -q -p no:cacheprovider -rA -m gpu tests/adversarial \
    2>&1 | tail -40 | tee $OUT/gpu_hacks.txt; echo "GPU hacks: wall $(( $(date +%s)-t0 ))s"
  ;;
judging)  # issue 34's before/after: the same candidates judged by `kern try` with the gates of
  # OLD (default 86661fa, before issue 34) and of main, each in a clone of its own with its own
  # ledger, one after the other on this GPU; then bench/tools/judging_times.py (main's) over
  # both ledgers into one record. KINDS: identical (a comment in moe.experts: bit-identical),
  # rounded (moe.combine's weights rounded to bf16: not identical). Usage: judging [OLD] [KINDS...]
  old=${2:-86661fa}; kinds="${*:3}"; kinds=${kinds:-identical rounded}
  python3 -c "import torch; torch.zeros(1, device='cuda')" || exit 3
  # main's first: its rows are the ones the goals are read on (JUDGING_SIDES=after: main's alone)
  sides=${JUDGING_SIDES:-after before}
  for side in $sides; do
    rm -rf /tmp/j-$side && git clone -q /tmp/r /tmp/j-$side && cd /tmp/j-$side || exit 3
    git config user.email kern@loop; git config user.name kern-loop
    [ $side = before ] && git checkout -q -B main "$old"
    cp -r /tmp/r/.whl . 2>/dev/null; mkdir -p runs
    for k in $kinds; do
      git checkout -q -B "cand-$k" main
      python3 - "$k" <<'PY'
import pathlib, sys
kind = sys.argv[1]
edits = {"identical": ("kernels/k31/moe/experts.py", "@triton.jit\n", "# a comment that changes no instruction\n@triton.jit\n"),
         "rounded": ("kernels/k31/moe/combine.py", "other=0.0).to(tl.float32)[:, None]",
                     "other=0.0).to(tl.bfloat16).to(tl.float32)[:, None]")}
path, old, new = edits[kind]
p = pathlib.Path(path); text = p.read_text()
assert old in text, f"{kind}: {path} no longer holds the edit's anchor"
p.write_text(text.replace(old, new, 1))
PY
      git commit -qam "judging $k: $side" && git checkout -q main
      t0=$(date +%s); timeout ${JUDGING_TIMEOUT:-600} python3 -m harness.cli try "cand-$k" 2>&1 | tail -12
      echo "judging $side $k: kern try rc ${PIPESTATUS[0]}, wall $(( $(date +%s)-t0 ))s" | tee -a /tmp/judging.txt $OUT/judging_walls.txt
    done
    cd /tmp/r
  done
  for side in $sides; do
    python3 bench/tools/judging_times.py --ledger /tmp/j-$side/runs/ledger.sqlite \
      --attempts /tmp/j-$side/runs/attempts --out /tmp/judging-$side.json \
      --note "kern try of $kinds with the gates of $( [ $side = before ] && echo $old || git rev-parse --short main) (bench/gpu_evidence.sh judging)"
  done
  python3 -c "
import json, sys
doc = {s: json.load(open(f'/tmp/judging-{s}.json')) for s in sys.argv[2:]}
doc['walls'] = open('/tmp/judging.txt').read().splitlines()
json.dump(doc, open(sys.argv[1], 'w'), indent=1)" $OUT/judging.json $sides
  cat /tmp/judging.txt
  ;;
judging-start)
  rm -rf /tmp/judging-out; mkdir -p /tmp/judging-out
  detached_start judging ${JUDGING_POLLS:-110} "OUT=/tmp/judging-out bash '$ROOT/bench/gpu_evidence.sh' judging ${*:2}"
  tail -30 /tmp/judging.log; detached_state judging judging
  detached_done judging && cp -r /tmp/judging-out/. $OUT/
  ;;
chain-start)  # LINE... - phases one after another in one detached session (the machine never idles
  # between them: an idle one is given back after 30 s); each LINE is one phase's arguments with
  # leading VAR=value words, e.g. chain-start "gates-gpu 300" "JUDGING_SIDES=after judging" "loop-start 3 1500 100000"
  [ $# -ge 2 ] || { echo "chain-start needs at least one phase line" >&2; exit 2; }
  rm -rf /tmp/chain-out; mkdir -p /tmp/chain-out
  cmd=$(detached_chain "$ROOT/bench/gpu_evidence.sh" /tmp/chain-out "${@:2}") || exit 2
  detached_start chain ${CHAIN_POLLS:-110} "$cmd"
  tail -30 /tmp/chain.log; detached_state chain chain; cp -r /tmp/chain-out/. $OUT/
  ;;
chain-wait)  # [POLLS] - wait for chain-start's phases; bring back each one's $OUT (in <k>-<phase>/)
  detached_wait chain ${2:-110}
  tail -40 /tmp/chain.log; cp /tmp/chain.log $OUT/; detached_state chain chain; cp -r /tmp/chain-out/. $OUT/
  ;;
judging-wait)
  detached_wait judging ${2:-110}
  tail -40 /tmp/judging.log; cp /tmp/judging.log $OUT/; detached_state judging judging
  cp -r /tmp/judging-out/. $OUT/ 2>/dev/null
  tar -czf $OUT/judging-logs.tgz /tmp/j-*/runs/attempts /tmp/j-*/runs/tap/*/*.log /tmp/j-*/runs/bench/*/*.log 2>/dev/null
  ;;
fairbar)
  which=${2:-attempt-9}
  python3 bench/tools/fair_bar.py candidates | tee $OUT/fair_bar_candidates.txt || exit 3
  mkdir -p runs
  for c in $( [ "$which" = both ] && echo attempt-9 long-context-bug || echo "$which" ); do
    t0=$(date +%s); timeout ${3:-540} python3 -m harness.cli try "fair-bar/$c" 2>&1 | tail -40
    echo "kern try fair-bar/$c: rc ${PIPESTATUS[0]}, wall $(( $(date +%s)-t0 ))s"
  done
  python3 bench/tools/fair_bar.py record runs/attempts/*/judgment-*.json --out $OUT/fair_bar.json \
    --note "kern try of fair-bar/$which on the H200 (bench/gpu_evidence.sh fairbar)"
  try_collect
  ;;
final)
  if [ -n "${FINAL_MAIN:-}" ]; then  # a bundle of another clone's main: a chain's loop, with its merges
    git fetch -q "$FINAL_MAIN" main && git merge -q --ff-only FETCH_HEAD \
      || { echo "final: FINAL_MAIN=$FINAL_MAIN holds no main that fast-forwards this clone's" >&2; exit 1; }
    echo "final: main is $(git rev-parse --short HEAD), from $FINAL_MAIN"
  fi
  base=${2:-kernels-of:f52bebd}
  if [ "${base#kernels-of:}" != "$base" ]; then  # an old main's kernel tree on main's protected model
    rev=${base#kernels-of:}
    base=$(python3 bench/tools/kernel_base.py "$rev" --branch "kernels-of-$rev") || exit 1
    echo "final: $rev's kernel tree on main's protected model is $base (bench/tools/kernel_base.py)" \
      | tee $OUT/final_base.txt
  fi
  t0=$(date +%s); timeout ${3:-420} python3 -m harness.cli bench main --vs "$base" \
    --out $OUT/bench_main_vs_${base}.json 2>$OUT/bench_main_vs_${base}.err | tail -24
  echo "kern bench main --vs $base: wall $(( $(date +%s)-t0 ))s"
  t0=$(date +%s); timeout 150 python3 -m harness.cli profile main --rows 128 --out $OUT/profile_128.json \
    2>$OUT/profile.err | tail -30; echo "kern profile main --rows 128: wall $(( $(date +%s)-t0 ))s"
  ;;
hacks)  # [TIMEOUT] [EXPR]: the cases judge verdicts, not times, so they share the GPU over
  # HACKS_WORKERS pytest workers (3 unless set; the scorer-only kern try cases on one worker:
  # their fixture judges all four), then the persisting-L2 case alone (its candidate changes
  # the device's L2 set-aside, which the other cases' sides check)
  t0=$(date +%s); limit=${2:-300}
  if [ -z "${3:-}" ] && python3 -c "import xdist" 2>/dev/null; then
    timeout $limit python3 -m pytest -v -p no:cacheprovider -rA -m gpu tests/adversarial -n ${HACKS_WORKERS:-3} \
      --dist loadgroup -k "not persisting_l2" 2>&1 | tail -40 | tee $OUT/gpu_hacks.txt
    left=$(( limit - ($(date +%s)-t0) )); [ $left -gt 10 ] || left=10
    timeout $left python3 -m pytest -q -p no:cacheprovider -rA -m gpu tests/adversarial -k persisting_l2 \
      2>&1 | tail -15 | tee -a $OUT/gpu_hacks.txt
  else
    timeout $limit python3 -m pytest -q -p no:cacheprovider -rA -m gpu tests/adversarial ${3:+-k "$3"} \
      2>&1 | tail -40 | tee $OUT/gpu_hacks.txt
  fi
  echo "GPU hacks: wall $(( $(date +%s)-t0 ))s"
  ;;
gates-gpu)  # the gates' GPU tests (the fingerprint's device, the model store over CUDA IPC): run
  # them before a loop on gates code that no GPU has run yet. Usage: gates-gpu [TIMEOUT] [EXPR].
  # One pytest process a test, each with its traceback: a test cut off by the timeout hides no
  # other's failure or traceback
  t0=$(date +%s); limit=${2:-300}; : > $OUT/gates_gpu.txt
  tests=$(python3 -m pytest --collect-only -q -p no:cacheprovider -m gpu tests/gates ${3:+-k "$3"} | grep '::')
  for t in $tests; do
    left=$(( limit - ($(date +%s)-t0) ))
    if [ $left -lt 20 ]; then echo "gates-gpu: $t not run (no time left of $limit s)" | tee -a $OUT/gates_gpu.txt; continue; fi
    t1=$(date +%s)
    timeout $left python3 -m pytest -q -p no:cacheprovider -rA --tb=short "$t" 2>&1 | tail -80 >> $OUT/gates_gpu.txt
    echo "gates-gpu: $t rc ${PIPESTATUS[0]}, wall $(( $(date +%s)-t1 ))s" | tee -a $OUT/gates_gpu.txt
  done
  tail -60 $OUT/gates_gpu.txt; echo "gates' GPU tests: wall $(( $(date +%s)-t0 ))s"
  ;;
kernel-tests)
  timeout ${2:-300} python3 -m pytest -q -p no:cacheprovider tests/kernels 2>&1 | tail -15 | tee $OUT/kernel_tests_gpu.txt
  ;;
step)
  timeout 330 python3 -m harness.cli step --rows 16,32,64,128,256 --replays 20 --profile-rows 128 --ref-rows 3 \
    --out $OUT/step_full.json 2>$OUT/step_full.err | tee $OUT/step_full.txt
  cp $OUT/step_full.partial.json $OUT/step_full_partial.json 2>/dev/null
  ;;
gates)  # issue 3 (test bar and evidence) and issue 4 (A/B with ~2 % extra work, eager, peers)
  for rev in main evidence/reordered-sum; do
    t0=$(date +%s); timeout 200 python3 -m harness.cli test $rev --vs main --out $OUT/test_${rev//\//_}.json 2>$OUT/test_${rev//\//_}.err | tail -16
    echo "kern test $rev --vs main: wall $(( $(date +%s)-t0 ))s"
  done
  t0=$(date +%s); timeout 280 python3 -m harness.cli bench evidence/extra-work --vs main --baseline eager --peers \
    --out $OUT/bench_ab_extra_work.json 2>$OUT/bench_ab.err | tail -30; echo "kern bench A/B: wall $(( $(date +%s)-t0 ))s"
  cp -r runs/tap/*.log runs/tap/*/*.log $OUT/ 2>/dev/null
  ;;
bench)  # issue 4: the same commit benched 5 times, the profile table; issue 3: kern test warm
  mkdir -p /tmp/runs5
  for i in 1 2 3 4 5; do
    t0=$(date +%s); timeout 100 python3 -m harness.cli bench main --rounds 2 --out /tmp/runs5/bench_main_$i.json 2>>$OUT/phase.err | tail -1
    echo "bench run $i wall $(( $(date +%s)-t0 ))s"
  done
  tar -czf $OUT/bench_main_runs.tgz -C /tmp/runs5 .
  rm -rf runs/tap  # A records again, with the Triton cache warm (a loop's steady state)
  for rev in main evidence/reordered-sum; do
    t0=$(date +%s); timeout 200 python3 -m harness.cli test $rev --vs main --out $OUT/test_${rev//\//_}.json 2>>$OUT/phase.err | tail -16
    echo "kern test $rev --vs main (warm): wall $(( $(date +%s)-t0 ))s"
  done
  t0=$(date +%s); timeout 150 python3 -m harness.cli profile main --rows 128 --out $OUT/profile_128.json 2>>$OUT/phase.err | tail -40
  echo "kern profile: wall $(( $(date +%s)-t0 ))s"
  ;;
compile)  # issue 4: the compile baseline
  t0=$(date +%s); timeout ${2:-200} python3 -m harness.cli bench main --rounds 1 --baseline compile \
    --out $OUT/bench_compile.json 2>$OUT/bench_compile.err | tail -12; echo "compile baseline: wall $(( $(date +%s)-t0 ))s"
  ;;
loop)  # issue 5: the tuner loop on reduced settings (written into this clone's kern.yaml, committed)
  python3 - <<'PY'
import yaml, pathlib
p = pathlib.Path("kern.yaml"); c = yaml.safe_load(p.read_text()); g = c["profiles"]["gpu"]
g.update(buckets=[16, 128], weights=[1, 1], context=32768, test_rows=[1, 3, 17], test_steps=1,
         rounds=1, replays=10)
c["loop"]["concurrency"] = 2
p.write_text(yaml.safe_dump(c, sort_keys=False))
PY
  git commit -qam "bench: reduced GPU settings for the device loop evidence" && git diff HEAD~1 | tee $OUT/loop_settings.diff
  timeout ${2:-520} python3 -m harness.cli loop --ticks ${3:-3} --every 1s --wait-agents 150 --no-live --report 2>&1 | tail -40
  python3 -m harness.cli report --format json --out $OUT/loop_journey.json
  python3 -m harness.cli report --format html --out $OUT/loop_journey.html
  python3 -m harness.cli report > $OUT/loop_journey.md; python3 -m harness.cli status > $OUT/loop_status.txt
  ;;
ab)
  t0=$(date +%s); timeout 260 python3 -m harness.cli bench evidence/extra-work --vs main \
    --out $OUT/bench_ab_plain.json 2>$OUT/bench_ab_plain.err | tail -14
  echo "kern bench evidence/extra-work --vs main (plain A/B): wall $(( $(date +%s)-t0 ))s"
  t0=$(date +%s); timeout 170 python3 -m pytest -q -p no:cacheprovider -rA tests/adversarial/test_gpu_hacks.py \
    2>&1 | tail -25 | tee $OUT/gpu_hacks.txt; echo "GPU hacks: wall $(( $(date +%s)-t0 ))s"
  compile_baseline_at 64 ${2:-200}
  ;;
allreduce)  # issue 6: the one-shot all-reduce on 2 GPUs (latency vs NCCL and gather, bit identity)
  rev=${2:-main}
  if [ "$rev" != main ]; then git checkout -q "$rev" || { echo "no revision $rev in the bundle"; exit 1; }; fi
  echo "allreduce at $(git rev-parse HEAD 2>/dev/null || echo snapshot), $(nvidia-smi -L | wc -l) GPUs"
  t0=$(date +%s); timeout 300 python3 bench/tools/allreduce_latency.py --world 2 --out $OUT/allreduce_latency.json \
    2>$OUT/allreduce_latency.err | tee $OUT/allreduce_latency.txt; echo "allreduce tool: rc ${PIPESTATUS[0]}, wall $(( $(date +%s)-t0 ))s"
  timeout 240 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_comm.py 2>&1 | tail -15 | tee $OUT/allreduce_tests_gpu.txt
  ;;
x2)  # issue 6: every side as 2 rank processes over NCCL (multicast off: device_env.sh)
  nvidia-smi topo -m > $OUT/x2_topo.txt 2>&1
  case ${2:?x2 needs a step: test, bench or profile} in
  test)  # reduced tap so the whole model fits one process and its reference band fits ~150 s:
    # one weight set, batch sizes 1, 3 and bucket 8, context 8192 (DSA still selects 2048)
    python3 - <<'PY'
import yaml, pathlib
c = yaml.safe_load(pathlib.Path("kern.yaml").read_text()); g = c["profiles"]["gpu"]
g.update(buckets=[8], weights=[1], test_rows=[1, 3], test_context=8192, test_steps=1)
c["target"]["weight_sets"] = 1
pathlib.Path("/tmp/kern-x2-test.yaml").write_text(yaml.safe_dump(c, sort_keys=False))
PY
    t0=$(date +%s); timeout ${3:-400} python3 -m harness.cli --config /tmp/kern-x2-test.yaml test main --vs main \
      --gpus 2 --base-gpus 1 --out $OUT/x2_test_1rank_vs_2rank.json 2>$OUT/x2_test.err | tail -20
    echo "kern test main --vs main --gpus 2 --base-gpus 1: wall $(( $(date +%s)-t0 ))s"
    cp /tmp/kern-x2-test.yaml $OUT/; cp -r runs/tap/*/*.log $OUT/ 2>/dev/null
    ;;
  bench)
    t0=$(date +%s); timeout ${3:-500} python3 -m harness.cli bench main --gpus 2 --emulate 8 --rounds 1 \
      --out $OUT/x2_bench_emulate8.json 2>$OUT/x2_bench.err | tail -14
    echo "kern bench main --gpus 2 --emulate 8 --rounds 1: wall $(( $(date +%s)-t0 ))s"
    cp runs/bench/*/*.log $OUT/ 2>/dev/null
    ;;
  profile)
    t0=$(date +%s); timeout ${3:-500} python3 -m harness.cli profile main --gpus 2 --emulate 8 --rows 128 \
      --out $OUT/x2_profile_128.json 2>$OUT/x2_profile.err | tail -34
    echo "kern profile main --gpus 2 --emulate 8 --rows 128: wall $(( $(date +%s)-t0 ))s"
    ;;
  esac
  ;;
esac
cp -r runs/step $OUT/ 2>/dev/null; ls $OUT
