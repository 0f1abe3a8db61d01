#!/bin/bash
# torch's schedules, predicted against measured in one sitting (docs/TORCH-SCHEDULES.md §7a):
# the runtime calibration, the message exchange, the calibrated model's picks and three launches
# of every entry, back to back, so that the model and the launches see the same machine.
#
#   scripts/torch_schedules_sitting.sh SITTING WORKLOAD ROUNDS [--probes]
#
# SITTING: a folder name (the date, say); WORKLOAD: a one-layer-per-stage profile
# results/real/torch-schedules/WORKLOAD.json; ROUNDS: timed rounds per launch. Writes
# results/real/runtime-calibration/SITTING/: WORKLOAD.cal.json (the designed entries) and
# WORKLOAD/ (their timed actions, and exchange.json); results/real/torch-schedules/SITTING/:
# WORKLOAD.runtime.json (the calibrated problem), WORKLOAD.runtime-pred.json (its picks),
# WORKLOAD.all.json (those picks and the profile's, WORKLOAD.union.json or WORKLOAD.pred.json
# beside the profile, merged) and the launches WORKLOAD.run1.json to run3.json. An existing
# sitting of the workload is refused. --probes: the calibration runs the schedule probes too
# (runtime_calibration.py entries --probes). The page: measure_torch_schedules.py --combine.
set -euo pipefail
if [ $# -lt 3 ] || [ $# -gt 4 ] || { [ $# -eq 4 ] && [ "$4" != --probes ]; }; then
    echo "usage: $0 SITTING WORKLOAD ROUNDS [--probes]" >&2
    exit 2
fi
S=$1 W=$2 R=$3 PROBES=${4:-}
cd "$(dirname "$0")/.."
P=results/real/torch-schedules
T=$P/$S
C=results/real/runtime-calibration/$S
[ -f "$P/$W.json" ] || { echo "error: WORKLOAD: no profile $P/$W.json" >&2; exit 2; }
[[ "$R" =~ ^[1-9][0-9]*$ ]] || { echo "error: ROUNDS: expected an integer >= 1, got $R" >&2; exit 2; }
if [ -e "$T/$W.run1.json" ] || [ -e "$C/$W" ]; then
    echo "error: SITTING: $S already holds $W (remove $T/$W.* and $C/$W* first)" >&2
    exit 2
fi
mkdir -p "$T" "$C"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python scripts/runtime_calibration.py entries "$P/$W.json" $PROBES > "$tmp/cal.json"
mv "$tmp/cal.json" "$C/$W.cal.json"
python scripts/runtime_calibration.py run "$C/$W.cal.json" --rounds 8 --out "$tmp/ops"
python scripts/torch_schedule_ops.py exchange --out "$tmp/ops"
mv "$tmp/ops" "$C/$W"
python scripts/runtime_calibration.py fit "$C/$W.cal.json" --ops "$C/$W" \
    --exchange "$C/$W/exchange.json" --out "$T/$W.runtime.json"
python scripts/measure_torch_schedules.py --predict "$T/$W.runtime.json" > "$tmp/pred.json"
mv "$tmp/pred.json" "$T/$W.runtime-pred.json"
profiled=$P/$W.union.json
[ -f "$profiled" ] || profiled=$P/$W.pred.json
python scripts/measure_torch_schedules.py --merge "$profiled" "$T/$W.runtime-pred.json" \
    > "$tmp/all.json"
mv "$tmp/all.json" "$T/$W.all.json"
for n in 1 2 3; do
    python scripts/measure_torch_schedules.py "$T/$W.all.json" --rounds "$R" --warmup 3 \
        --out "$T/$W.run$n.json" --report "$tmp/run$n.md"
done
