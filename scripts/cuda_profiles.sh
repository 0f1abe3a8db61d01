#!/usr/bin/env bash
# Capture gpt1-14 and vgg16 on CUDA at the paper's sizes (issues 3 and 14): one prepared run of
# at most 8 minutes, by construction.
#
#   bash scripts/cuda_profiles.sh     # writes umpipe_bench/problems/data/gpt1-14-cuda.json, vgg16-cuda.json
#
# Timing uses CUDA events + synchronize (umpipe_bench/profiler/engine.py). On a GPU the real
# shapes are affordable: GPT-1 at its own sequence length 512 (B = 32) and VGG16 at 224 px
# (B = 64). The link is calibrated by a ping-pong between two processes: NCCL between cuda:0 and
# cuda:1 when there are two GPUs, otherwise gloo between two CPU processes (recorded in
# provenance). Each problem file gets the device's name (profiler provenance) and memory
# (`device_capacity`, bytes, plus provenance.host.gpu_memory_bytes) so memory caps apply.
#
# The 8-minute bound: every step runs under `timeout` with its own budget, and the budgets sum
# to PRE_S + GPT_S + VGG_S + POST_S = 20 + 210 + 210 + 20 = 460 s < 480 s. A step that overruns
# is killed and the script stops with its name (exit 124) instead of running on. Estimate of the
# work (why 210 s is ample on a recent GPU): a profile round visits sizes 1, 2, 4, ..., B in a
# stash pass and a recompute pass, about 2.3 x (1 + 2 + ... + B) sample fwd+bwd; GPT-1 at seq 512
# is ~0.36 TFLOP per sample fwd+bwd, so ~52 TFLOP a round, ~13 rounds (10 + 3 warm-up): well under
# a minute of compute at tens of TFLOP/s; VGG16 at 224 px, B = 64, is ~4x less. The rest is
# start-up, model build and the link ping-pong (seconds). Measured on one NVIDIA H200
# (2026-11-30): 50 s for gpt1-14, 42 s for vgg16, 111 s for the whole script (README "CUDA
# profiles"). With one GPU the link is calibrated between two CPU processes (gloo), far slower
# than NVLink.
set -euo pipefail
cd "$(dirname "$0")/.."
# The device image has no install of this package and may have no `python`: run the module
# from the checkout with python3 (override with PYTHON=...).
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT=umpipe_bench/problems/data
mkdir -p "$OUT"
PRE_S=20; GPT_S=210; VGG_S=210; POST_S=20
(( PRE_S + GPT_S + VGG_S + POST_S < 480 )) || { echo "budgets exceed 8 minutes" >&2; exit 2; }

timeout "$PRE_S" "$PY" - <<'PY'
import sys
import torch
if not torch.cuda.is_available():
    sys.exit("cuda_profiles.sh: torch.cuda.is_available() is False (torch " + torch.__version__ + ")")
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"GPU {i}: {p.name}, {p.total_memory / 2**30:.1f} GiB")
PY
NGPU=$("$PY" -c "import torch; print(torch.cuda.device_count())")
BACKEND=gloo
if [[ "$NGPU" -ge 2 ]]; then BACKEND=nccl; fi
export OMP_NUM_THREADS=4

run() {  # budget seconds, name, then profile arguments
    local budget=$1 name=$2; shift 2
    local t0=$SECONDS
    echo "=== $name: $PY -m umpipe_bench profile $* (budget ${budget} s, $(date -u +%H:%M:%S))"
    if ! timeout --kill-after=5 "$budget" "$PY" -m umpipe_bench profile "$@" --device cuda --threads 4 \
        --link-backend "$BACKEND" --repeats 10 --warmup 3 --no-progress --out "$OUT/$name.json"
    then
        echo "=== $name: failed or over its ${budget} s budget" >&2
        exit 124
    fi
    echo "=== $name: done in $((SECONDS - t0)) s"
}

run "$GPT_S" gpt1-14-cuda gpt1 --batch 32 --seq 512
run "$VGG_S" vgg16-cuda vgg16 --batch 64 --image 224

# device memory into the files (the profiler records the device's name), then the headline rows
timeout "$POST_S" "$PY" - "$OUT/gpt1-14-cuda.json" "$OUT/vgg16-cuda.json" <<'PY'
import json, sys
import torch
from umpipe_bench.problem import Problem
from umpipe_bench.planners.evaluation.reference import best_edp
mem = torch.cuda.get_device_properties(0).total_memory
for path in sys.argv[1:]:
    d = json.loads(open(path).read())
    d["device_capacity"] = float(mem)
    d["provenance"].setdefault("host", {})["gpu_memory_bytes"] = int(mem)
    p = Problem.from_dict(d, where=path)
    p.save(path)
    g = best_edp(p, "stash", "gpipe")
    o = best_edp(p, "stash", "1f1b")
    print(f"{p.name}: {p.provenance['host'].get('gpu')} ({mem / 2**30:.1f} GiB), S={p.S}, "
          f"B={p.B}; best GPipe-EDP M={g[0]} {g[1] * 1e3:.1f} ms, best 1F1B-EDP M={o[0]} "
          f"{o[1] * 1e3:.1f} ms")
PY
echo "done: $OUT/gpt1-14-cuda.json $OUT/vgg16-cuda.json (commit them with the headline rows)"
