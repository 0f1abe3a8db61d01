#!/usr/bin/env bash
# Measured speedups, end to end: plans (planner or fallback search, best EDP GPipe and
# 1F1B by the simulator), then `umpipe-bench execute` A/B in one run per problem, with the
# torch.distributed.pipelining peer check. Writes results/real/{<problem>.csv,<problem>.json,README.md}.
#
#   scripts/measure_real.sh                       # gpt1-mini-s2 and vgg16-mini-s2
#   scripts/measure_real.sh vgg16-mini-s2 --iters 10
#
# Two stage processes, one thread each (OMP_NUM_THREADS=1): on a 2-core machine that is all of
# it, so run it when nothing else is busy and read the medians, not single iterations.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
exec python scripts/measure_real.py "$@"
