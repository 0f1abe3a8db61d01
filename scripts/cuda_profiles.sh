#!/usr/bin/env bash
# Capture gpt1-14 and vgg16 on CUDA (issue 3): one prepared script for a machine with a GPU.
#
#   bash scripts/cuda_profiles.sh            # writes problems/data/gpt1-14-cuda.json, vgg16-cuda.json
#
# Timing uses CUDA events + synchronize (umpipe_bench/profiler/engine.py). On a GPU the real
# shapes are affordable: GPT-1 at its own sequence length 512 and VGG16 at 224 px, B = 32 and 64.
# The link is calibrated by a ping-pong between two processes: NCCL between cuda:0 and cuda:1
# when there are two GPUs, otherwise gloo between two CPU processes (recorded in provenance).
# Each profile is a few minutes on one recent GPU; the script stops at the first error.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=problems/data
mkdir -p "$OUT"
python - <<'PY'
import torch, sys
if not torch.cuda.is_available():
    sys.exit("cuda_profiles.sh: torch.cuda.is_available() is False (torch " + torch.__version__ + ")")
print("GPUs:", [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])
PY
NGPU=$(python -c "import torch; print(torch.cuda.device_count())")
BACKEND=gloo
if [[ "$NGPU" -ge 2 ]]; then BACKEND=nccl; fi
export OMP_NUM_THREADS=4

run() {  # name, then profile arguments
    local name=$1; shift
    local t0=$SECONDS
    echo "=== $name: umpipe-bench profile $* ($(date -u +%H:%M:%S))"
    umpipe-bench profile "$@" --device cuda --threads 4 --link-backend "$BACKEND" \
        --repeats 10 --warmup 3 --out "$OUT/$name.json"
    echo "=== $name: done in $((SECONDS - t0)) s"
}

run gpt1-14-cuda gpt1 --batch 32 --seq 512
run vgg16-cuda vgg16 --batch 64 --image 224
echo "done: $OUT/gpt1-14-cuda.json $OUT/vgg16-cuda.json (commit them)"
