#!/usr/bin/env bash
# Capture every committed CPU problem file in umpipe_bench/problems/data/, one thread per stage.
#
#   bash scripts/profile_all.sh            # all six, ~19 min on the shared 2-core machine
#   bash scripts/profile_all.sh gpt1-mini-s2 vgg16-mini-s2    # just some of them
#
# Sizes (why): each profile must fit in ~10 min on one core of this machine, and the planners
# want B in 16..64.
# * gpt1 at seq 32, B 16: one fwd+bwd sample of full GPT-1 (147M params) costs ~0.6 s on one
#   core; a profile round is two passes over the grid 1+2+4+8+16 = 31 samples per stage
#   (~40 s), times 1 warm-up + 5 rounds. B = 32 would double that.
# * vgg16 at 64 px, B 32: ~0.15 s per sample (fc1 has 8*64*2*2 = 2048 inputs), a round covers
#   1+...+32 = 63 samples twice (~20 s on an idle core). B = 64 took over 20 min with the
#   machine shared (load average 5 on 2 cores), so B = 32.
# * the -mini-s2 ones are executed for real with one process per core, so they are timed with
#   --co-run (another process trains the same model meanwhile): measured alone, with the other
#   core idle, they under-predicted 2-process runs by 14-26 % (results/real, before --co-run).
# * the -mini-s2 ones at B 32 (their models are sized so a B = 32 iteration takes ~0.5-1 s on one
#   core), 2 stages balanced by a probe, 9 rounds (cheap, and the runtime checks against them).
# The 4-stage variants are balanced with the per-layer times of the one-layer-per-stage files
# (--balance-from), so they need those first.
# Measured durations (load average 2-6 from other jobs): gpt1-mini-s2 74 s, vgg16-mini-s2 51 s,
# vgg16 298 s, vgg16-s4 224 s, gpt1-14 269 s, gpt1-s4 221 s.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
OUT=umpipe_bench/problems/data
mkdir -p "$OUT"

run() {  # name, then profile arguments
    local name=$1; shift
    local t0=$SECONDS
    echo "=== $name: umpipe-bench profile $* --out $OUT/$name.json ($(date -u +%H:%M:%S))"
    umpipe-bench profile "$@" --threads 1 --out "$OUT/$name.json"
    echo "=== $name: done in $((SECONDS - t0)) s"
}

SELECTED="$*"
sel() { [[ -z "$SELECTED" ]] || [[ " $SELECTED " == *" $1 "* ]]; }

sel gpt1-mini-s2 && run gpt1-mini-s2 gpt1-mini --batch 32 --stages 2 --repeats 9 --warmup 2 --co-run
sel vgg16-mini-s2 && run vgg16-mini-s2 vgg16-mini --batch 32 --stages 2 --repeats 9 --warmup 2 --co-run
# vgg16-stem-s2 (how it was chosen: results/real/workload.md); sgd, as it was measured
sel vgg16-stem-s2 && run vgg16-stem-s2 vgg16-stem --batch 16 --layers-per-stage 3,4 \
    --optimizer sgd --repeats 9 --warmup 2 --co-run
sel vgg16 && run vgg16 vgg16 --batch 32 --image 64 --repeats 5 --warmup 1
sel vgg16-s4 && run vgg16-s4 vgg16 --batch 32 --image 64 --stages 4 \
    --balance-from "$OUT/vgg16.json" --repeats 5 --warmup 1
sel gpt1-14 && run gpt1-14 gpt1 --batch 16 --seq 32 --repeats 5 --warmup 1
sel gpt1-s4 && run gpt1-s4 gpt1 --batch 16 --seq 32 --stages 4 \
    --balance-from "$OUT/gpt1-14.json" --repeats 5 --warmup 1
echo "all requested profiles done"
