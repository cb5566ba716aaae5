#!/usr/bin/env bash
# Everything kforge checks and measures on an NVIDIA GPU, in one go (~10 minutes on an H100/H200):
# the GPU tests, compile speed, verification latency with ncu agreement, and the demo with ncu.
#   bash benchmarks/gpu_validation.sh [OUT_DIR]        (results and logs go to OUT_DIR, default gpu-results/)
set -u
OUT=${1:-${OUT:-gpu-results}}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 LITELLM_LOCAL_MODEL_COST_MAP=True KFORGE_CACHE_DIR=${KFORGE_CACHE_DIR:-/tmp/kforge-gpu-cache}
T0=$(date +%s)
step() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
step "warm the build cache (the oracle kernels, the test and exploit candidates)"
python3 -m kforge.cli build --backend cuda --oracle --jobs 8 tests/candidates/cuda/*.py tests/exploits/cuda/*.py \
    prompts/examples/cuda/model_new.py > "$OUT/build.txt" 2>&1; tail -1 "$OUT/build.txt"
step "GPU tests"
python3 -m pytest -q -m gpu --timeout 300 -p no:cacheprovider tests/verify/test_gpu_states.py tests/test_examples.py \
    tests/exploits/test_corpus.py tests/test_builtin.py -rfE > "$OUT/gpu_tests.txt" 2>&1; tail -3 "$OUT/gpu_tests.txt"
step "verification latency, repeatability, ncu agreement"
python3 benchmarks/verify_latency.py --problems 1_ReLU,2_Softmax,3_LayerNorm,5_SumReduction,4_Matmul \
    --json "$OUT/latency.json" > "$OUT/latency.txt" 2>&1; tail -12 "$OUT/latency.txt"
step "compile speed"
python3 benchmarks/compile_speed.py --backend cuda > "$OUT/compile_speed.txt" 2>&1; tail -4 "$OUT/compile_speed.txt"
step "demo: cuda backend, ncu profiles, rule-based analyst"
python3 pipelines/synthesize.py experiment=demo backend=cuda profiler=ncu analysis=rules \
    tracking.uri="sqlite:///$PWD/$OUT/mlflow.db" > "$OUT/demo.txt" 2>&1; tail -18 "$OUT/demo.txt"
f=$(find "$OUT" mlartifacts -name profile.csv 2>/dev/null | head -1); [ -n "$f" ] && cp "$f" "$OUT/ncu_profile.csv"
step done
