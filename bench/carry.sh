#!/usr/bin/env bash
# Build .carry/ (git-ignored) for a device call of bench/gpu_evidence.sh, on this machine:
#   .carry/.whl/        the wheels the H200 image lacks (Python 3.12, x86-64; the image has torch,
#                       triton, numpy, matplotlib but not these; 2026-12-04: 15 wheels, 4.6 MB)
#   .carry/repo.bundle  main, the journey's attempt tags (journey/attempt-N: a restarted loop
#                       re-judges an attempt left judging from its commit) and any BRANCH named
# Usage: bash bench/carry.sh [BRANCH...]; then run(..., carry=[".carry"]) with the phase.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .carry/.whl
if [ -z "$(ls .carry/.whl/*.whl 2>/dev/null)" ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .carry/.whl gitpython gitdb smmap rich markdown-it-py mdurl pygments pyyaml pytest pluggy \
    iniconfig packaging hypothesis sortedcontainers attrs
fi
git bundle create -q .carry/repo.bundle main $(git tag -l 'journey/*') "$@"
echo "carry: $(ls .carry/.whl | wc -l) wheels, bundle of main $(git rev-parse --short main)" \
     "with $(git tag -l 'journey/*' | wc -l) journey tags${*:+ and $*}"
