#!/bin/bash
# One GPU call as a list of steps, each with its own timeout, for the session's device tool (its $OUT folder
# comes back): bash tools/device_steps.sh PLAN, where PLAN is a bash file of lines such as
#     step corr 170 python3 attention_bwd_check.py --only correctness
#     WS_BWD_DEFAULTS=flat_dq=1 step masks 150 python3 attention_training_masks.py --no-time
# Each step runs in bench/ and logs to $OUT/NAME.log; $OUT/steps.txt gets the GPU's state, each step's exit
# code and seconds; the last TAILN (25) lines of each log are printed for the call's reply. Keep a call's
# steps under the device's per-call limit and its files under the 8 that come back.
cd "$(dirname "$0")/.." || exit 1
export PYTHONUNBUFFERED=1
: "${OUT:?OUT must name the folder that comes back}"
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader >> "$OUT/steps.txt" 2>&1
step() {  # step NAME TIMEOUT CMD...
  local name=$1 t=$2; shift 2
  local t0
  t0=$(date +%s)
  echo "=== $name (timeout $t s)" | tee -a "$OUT/steps.txt"
  ( cd bench && timeout -k 5 "$t" "$@" ) > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "=== $name rc=$rc $(( $(date +%s) - t0 )) s" | tee -a "$OUT/steps.txt"
  tail -n "${TAILN:-25}" "$OUT/$name.log"
}
# shellcheck disable=SC1090
source "${1:?usage: bash tools/device_steps.sh PLAN}"
