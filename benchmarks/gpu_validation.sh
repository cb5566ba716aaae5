#!/usr/bin/env bash
# Everything kforge checks and measures on an NVIDIA GPU, about 20 minutes on an H100 (build 1.5, tests 7, latency 6, compile speed and demo the rest):
# the GPU tests, compile speed, verification latency with ncu agreement, and the demo with ncu.
#   bash benchmarks/gpu_validation.sh [OUT_DIR] [STEPS]   (logs go to OUT_DIR, default gpu-results/)
# STEPS is a comma list out of build,tests,latency,compile,demo (default: all), so the run can be
# split across calls that share one build cache (KFORGE_CACHE_DIR).
set -u
OUT=${1:-${OUT:-gpu-results}}
STEPS=",${2:-build,tests,latency,compile,demo},"
want() { [[ $STEPS == *",$1,"* ]]; }
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 LITELLM_LOCAL_MODEL_COST_MAP=True KFORGE_CACHE_DIR=${KFORGE_CACHE_DIR:-/tmp/kforge-gpu-cache}
export KFORGE_TEST_CACHE=$KFORGE_CACHE_DIR  # the tests reuse the builds warmed here
T0=$(date +%s)
step() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
want build && step "warm the build cache (the oracle kernels, the test and exploit candidates)"
want build && { python3 -m kforge.cli build --backend cuda --oracle --jobs 8 tests/candidates/cuda/*.py tests/exploits/cuda/*.py \
    prompts/examples/cuda/model_new.py > "$OUT/build.txt" 2>&1; tail -1 "$OUT/build.txt"; }
want tests && step "GPU tests"
want tests && { python3 -m pytest -v -m gpu --timeout 300 --durations 10 -p no:cacheprovider tests/verify/test_gpu_states.py tests/test_examples.py \
    tests/exploits/test_corpus.py tests/test_builtin.py -rfE > "$OUT/gpu_tests.txt" 2>&1; tail -3 "$OUT/gpu_tests.txt"; }
want latency && step "verification latency, repeatability, ncu agreement"
want latency && { python3 benchmarks/verify_latency.py --backends cuda --problems 1_ReLU,2_Softmax,4_Matmul \
    --json "$OUT/latency.json" > "$OUT/latency.txt" 2>&1; tail -12 "$OUT/latency.txt"; }
want compile && step "compile speed"
want compile && { python3 benchmarks/compile_speed.py --backend cuda > "$OUT/compile_speed.txt" 2>&1; tail -4 "$OUT/compile_speed.txt"; }
want demo && step "demo: cuda backend, ncu profiles, rule-based analyst, 4 problems"
want demo && { python3 pipelines/synthesize.py experiment=demo backend=cuda profiler=ncu analysis=rules \
    'problems.names=[level1/1_ReLU,level1/2_Softmax,level2/1_Gemm_Bias_GELU,level3/2_AttentionBlock]' \
    tracking.uri="sqlite:////tmp/kforge-gpu-demo.db" > "$OUT/demo.txt" 2>&1; tail -18 "$OUT/demo.txt"
  f=$(find mlartifacts /tmp -name profile.csv 2>/dev/null | head -1); [ -n "$f" ] && cp "$f" "$OUT/ncu_profile.csv"; }
step done
