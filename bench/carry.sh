#!/usr/bin/env bash
# Build .carry/ (git-ignored) for a device call of bench/gpu_evidence.sh, on this machine:
#   .carry/.whl/        the wheels the H200 image lacks (Python 3.12, x86-64; the image has torch,
#                       triton, numpy, matplotlib): bench/device_wheels.txt names them (22 wheels,
#                       7.4 MB on 2026-12-05). A .carry/ made before that list grew lacks the new
#                       ones: delete .carry/.whl
#   .carry/repo.bundle  main and any BRANCH named (the journey's attempt commits travel as main's
#                       files: gpu_evidence.sh rebuilds them on the device with
#                       bench/journey/rebuild.py, so no tag or side branch is carried)
# Usage: bash bench/carry.sh [BRANCH...]; then run(..., carry=[".carry"]) with the phase.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .carry/.whl
if [ -z "$(ls .carry/.whl/*.whl 2>/dev/null)" ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .carry/.whl $(grep -v '^#' bench/device_wheels.txt)
fi
python3 bench/journey/rebuild.py check >/dev/null || {
  echo "carry: bench/journey/rebuild.py check failed: main's files do not rebuild every attempt's commit" >&2; exit 1; }
git bundle create -q .carry/repo.bundle main "$@"
echo "carry: $(ls .carry/.whl | wc -l) wheels, bundle of main $(git rev-parse --short main)${*:+ and $*}"
