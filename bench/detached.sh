# A command that outlives the device call that started it, and the later calls that wait for it
# (sourced by bench/gpu_evidence.sh). A device call ends after at most 600 s; a machine stays warm
# between calls, and a process in its own session (setsid) keeps running there. NAME's state is
# $DETACHED_DIR/NAME.{t0,log,rc} (default /tmp): rc exists once the command has ended.
detached_start() {  # NAME POLLS CMD: start CMD (a bash -c string) detached, then wait as detached_wait
  local d=${DETACHED_DIR:-/tmp}
  rm -f "$d/$1.rc"; date +%s > "$d/$1.t0"
  setsid bash -c "($3) > '$d/$1.log' 2>&1; echo \$? > '$d/$1.rc'" < /dev/null > /dev/null 2>&1 &
  detached_wait "$1" "$2"
}
detached_wait() {  # NAME POLLS: wait until NAME ended, at most POLLS polls (5 s each)
  local i
  for i in $(seq 1 "$2"); do detached_done "$1" && break; sleep "${DETACHED_POLL_S:-5}"; done
}
detached_done() { [ -f "${DETACHED_DIR:-/tmp}/$1.rc" ]; }
detached_state() {  # NAME LABEL: LABEL's rc (or 'still running') and its seconds since the start
  local d=${DETACHED_DIR:-/tmp}
  echo "$2: $(detached_done "$1" && echo "rc $(cat "$d/$1.rc")" || echo 'still running') after $(( $(date +%s)-$(cat "$d/$1.t0") ))s"
}
detached_chain() {  # SCRIPT OUTDIR LINE...: the bash -c string that runs SCRIPT once per LINE, one
  # after another, each with OUT=OUTDIR/<k>-<phase>; a LINE's leading VAR=value words are its
  # environment ("JUDGING_SIDES=after judging 86661fa identical"). A failed line does not stop the rest.
  local script=$1 outdir=$2 line w k=0 cmd="" pre post
  shift 2
  for line in "$@"; do
    k=$((k+1)); pre=""; post=""
    for w in $line; do
      if [ -z "$post" ] && [[ $w == *=* ]]; then pre+="$w "; else post+="$w "; fi
    done
    [ -n "$post" ] || { echo "detached_chain: line $k ('$line') names no phase" >&2; return 2; }
    set -- $post
    cmd+="mkdir -p '$outdir/$k-$1'; echo '== $k: $line'; env OUT='$outdir/$k-$1' ${pre}bash '$script' ${post}; echo \"== $k: rc \$?\"; "
  done
  echo "$cmd"
}
