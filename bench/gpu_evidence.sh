#!/usr/bin/env bash
# GPU evidence in as few device calls as possible. Usage (on the device, from the repo root
# copy that carried .carry/): bash bench/gpu_evidence.sh PHASE
#   step   - kernel tests on the GPU, kern step at every bucket (profile at 128, reference at 3)
#   gates  - kern test main vs main and vs evidence/reordered-sum; kern bench main (+ baselines,
#            peers, per-round CV) and evidence/extra-work vs main
#   loop   - kern loop with the tuner backend
# Writes JSON/logs to $OUT. Needs: .carry/repo.bundle (main + evidence branches), .carry/.whl.
set -u
ROOT=$PWD
phase=${1:?phase}
if command -v git >/dev/null; then
  rm -rf /tmp/r && git clone -q "$ROOT/.carry/repo.bundle" /tmp/r && cd /tmp/r && git checkout -q main
  for b in evidence/reordered-sum evidence/extra-work; do git branch -q "$b" "origin/$b"; done
  git config user.email kern@loop; git config user.name kern-loop
else
  echo "no git on the device: running from the main snapshot only"; mkdir -p /tmp/r && tar -xf "$ROOT/.carry/main.tar" -C /tmp/r && cd /tmp/r
fi
cp -r "$ROOT/.carry/.whl" . && source bench/device_env.sh
echo "commit $(git rev-parse HEAD 2>/dev/null || echo snapshot); $(python3 -c 'import torch,triton;print("torch",torch.__version__,"triton",triton.__version__)')"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
case $phase in
kernel-tests)
  timeout ${2:-300} python3 -m pytest -q -p no:cacheprovider tests/kernels 2>&1 | tail -15 | tee $OUT/kernel_tests_gpu.txt
  ;;
step|step+gates)
  timeout 330 python3 -m harness.cli step --rows 16,32,64,128,256 --replays 20 --profile-rows 128 --ref-rows 3 \
    --out $OUT/step_full.json 2>$OUT/step_full.err | tee $OUT/step_full.txt
  cp $OUT/step_full.partial.json $OUT/step_full_partial.json 2>/dev/null
  [ "$phase" = step ] && { ls $OUT; exit 0; }
  ;&
gates)
  t0=$(date +%s); timeout 200 python3 -m harness.cli test main --vs main --out $OUT/test_main_vs_main.json | tail -12; echo "wall $(( $(date +%s)-t0 ))s"
  t0=$(date +%s); timeout 240 python3 -m harness.cli test evidence/reordered-sum --vs main --out $OUT/test_reordered.json | tail -14; echo "wall $(( $(date +%s)-t0 ))s"
  ;;
bench)
  t0=$(date +%s); timeout 280 python3 -m harness.cli bench evidence/extra-work --vs main --out $OUT/bench_extra_work.json | tail -20; echo "wall $(( $(date +%s)-t0 ))s"
  t0=$(date +%s); timeout 280 python3 -m harness.cli bench main --rounds 5 --baseline eager --baseline compile --peers --out $OUT/bench_main.json | tail -25; echo "wall $(( $(date +%s)-t0 ))s"
  ;;
final)
  t0=$(date +%s); timeout 280 python3 -m harness.cli bench evidence/extra-work --vs main --baseline eager --peers --out $OUT/bench_ab_extra_work.json 2>$OUT/bench.err | tail -30; echo "bench wall $(( $(date +%s)-t0 ))s"
  t0=$(date +%s); timeout 170 python3 -m harness.cli test main --vs main --out $OUT/test_main_vs_main.json 2>&1 | tail -25; echo "test wall $(( $(date +%s)-t0 ))s"
  cp -r runs/bench runs/tap/*/*.log $OUT/ 2>/dev/null
  ;;
loop)
  timeout 560 python3 -m harness.cli loop --ticks ${2:-4} --every 1s --wait-agents 120 --no-live --report 2>&1 | tail -40
  python3 -m harness.cli report --format json --out $OUT/loop_journey.json; python3 -m harness.cli report --format html --out $OUT/loop_journey.html
  python3 -m harness.cli report > $OUT/loop_journey.md
  ;;
esac
cp -r runs/step $OUT/ 2>/dev/null; ls $OUT
