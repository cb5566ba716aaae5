#!/usr/bin/env bash
# kforge under `--rules kernelbench` beside KernelBench's own harness, on one GPU machine, in one command:
# a corpus of published kernels at fp32 and a sample at bf16 (benchmarks/kernelbench_agreement.py does the
# work; this script runs its steps side by side within a time budget and prints both tables).
#   bash benchmarks/device_agreement.sh DATA [OUT]
# DATA holds KernelBench/ (a checkout: src/ and KernelBench/level1..3), corpus/manifest.csv (run at fp32) and
# bf16/manifest.csv (run at bf16); a manifest may be left out. OUT (default agreement-results/) gets a folder
# per run (fp32/, bf16/) and logs. The corpora are not part of kforge: bring your own.
# Lanes, side by side: KernelBench precompiles the fp32 corpus's CUDA candidates while it judges the bf16
# sample, then judges the corpus; kforge eval judges the bf16 sample, then the corpus. Every step stops at the
# budget's end (BUDGET seconds from the start, default 450) and is resumable: the same command goes on where
# it stopped. Other settings: JOBS (builds at a time per harness, default: half the cores), EVAL_JOBS
# (KernelBench evaluations at a time, default 6), TIMED (KernelBench's timed trials, default 20: its
# speedups are indicative; correctness, what is compared, uses its 5 trials), SERIAL=1 (kforge alone in the
# budget's first half, then KernelBench: nothing else loads the machine while kforge runs).
# KernelBench's eval imports pydantic and dotenv; where they are missing, DATA/wheels/*.whl are installed
# into a temporary folder first (no network needed). COPY_TO=DIR copies the tables, the rows and the logs
# there at the end (not the build folders), e.g. to the folder a remote machine sends back.
set -u
DATA=$(cd "${1:?usage: bash benchmarks/device_agreement.sh DATA [OUT]}" && pwd)
OUT=${2:-agreement-results}
mkdir -p "$OUT/logs"
OUT=$(cd "$OUT" && pwd)
BUDGET=${BUDGET:-450}
JOBS=${JOBS:-$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))}
EVAL_JOBS=${EVAL_JOBS:-6}
TIMED=${TIMED:-20}
KB="$DATA/KernelBench"
T0=$(date +%s)
END=$(( T0 + BUDGET ))
export PYTHONUNBUFFERED=1 LITELLM_LOCAL_MODEL_COST_MAP=True KFORGE_CACHE_DIR=${KFORGE_CACHE_DIR:-/tmp/kforge-gpu-cache}
step() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
left() { local l=$(( END - $(date +%s) - ${1:-0} )); echo $(( l > 1 ? l : 1 )); }

if ! python3 -c "import pydantic, dotenv" 2>/dev/null; then
  if compgen -G "$DATA/wheels/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/kb-site "$DATA"/wheels/*.whl || exit 1
    export PYTHONPATH=/tmp/kb-site${PYTHONPATH:+:$PYTHONPATH}
  fi
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" |
  tee -a "$OUT/gpu.txt"

# agree RUN PRECISION STEPS DEADLINE [extra]: one call of the agreement script on DATA/RUN/manifest.csv.
agree() {
  local run=$1 precision=$2 steps=$3 deadline=$4; shift 4
  [[ -f "$DATA/$run/manifest.csv" ]] || return 0
  python3 benchmarks/kernelbench_agreement.py --kernelbench "$KB" --manifest "$DATA/$run/manifest.csv" \
    --out "$OUT/$precision" --precision "$precision" --steps "$steps" --deadline "$deadline" \
    --jobs "$JOBS" --eval-jobs "$EVAL_JOBS" --timed "$TIMED" "$@"
}
# The bf16 sample is smaller and all Triton: it goes first in each lane, so a short budget still judges it.
kernelbench_lane() {
  agree corpus fp32 build "$(left 60)" > "$OUT/logs/kb_build_fp32.log" 2>&1 &
  local build=$!
  agree bf16 bf16 kernelbench "$(left 60)" > "$OUT/logs/kb_bf16.log" 2>&1
  wait "$build"  # the corpus's evaluations reuse what its precompile built
  agree corpus fp32 kernelbench "$(left 20)" > "$OUT/logs/kb_fp32.log" 2>&1
}
kforge_lane() {
  agree bf16 bf16 kforge "$(left 60)" > "$OUT/logs/kforge_bf16.log" 2>&1
  agree corpus fp32 kforge "$(left 20)" > "$OUT/logs/kforge_fp32.log" 2>&1
}
if [[ ${SERIAL:-0} == 1 ]]; then
  step "kforge (alone), then KernelBench; budget $BUDGET s"
  END=$(( T0 + BUDGET / 2 )) kforge_lane
  kernelbench_lane
else
  step "KernelBench and kforge side by side; budget $BUDGET s, $JOBS builds at a time each," \
    "$EVAL_JOBS KernelBench evaluations at a time"
  kernelbench_lane & kb=$!
  kforge_lane & kf=$!
  polls=0
  while kill -0 "$kb" 2>/dev/null || kill -0 "$kf" 2>/dev/null; do
    sleep 2
    (( ++polls % 15 == 0 )) &&
      step "$(cat "$OUT"/logs/*.log 2>/dev/null | grep -cE '^\[(kforge|kernelbench) [0-9]+/') verdicts so far"
  done
  wait "$kb" "$kf"
fi
for precision in bf16 fp32; do
  run=$([[ $precision == bf16 ]] && echo bf16 || echo corpus)
  [[ -f "$DATA/$run/manifest.csv" ]] || continue
  step "the $precision table"
  agree "$run" "$precision" report 60 > "$OUT/logs/report_$precision.log" 2>&1
  cat "$OUT/$precision/agreement.md"
  grep -E "^  (DISAGREE|pending)" "$OUT/logs/report_$precision.log" | head -40
done
if [[ -n ${COPY_TO:-} ]]; then
  mkdir -p "$COPY_TO" && cp -r "$OUT/logs" "$OUT/gpu.txt" "$COPY_TO"/
  for precision in bf16 fp32; do
    [[ -d "$OUT/$precision" ]] || continue
    mkdir -p "$COPY_TO/$precision"
    cp "$OUT/$precision"/*.md "$OUT/$precision"/*.csv "$OUT/$precision"/*.jsonl "$OUT/$precision"/*.json \
      "$COPY_TO/$precision"/ 2>/dev/null
  done
fi
step "done; logs in $OUT/logs; run the same command again to finish what the budget cut off"
