#!/usr/bin/env bash
# Everything kforge checks and measures on NVIDIA GPUs: the GPU tests, verification latency with ncu
# agreement, `kforge verify` on both GPU backends, compile speed, `make demo` with ncu, and (with two or
# more GPUs) the multi-GPU tests and the 1-vs-2-GPU sweep throughput.
#   bash benchmarks/gpu_validation.sh [OUT_DIR] [STEPS]   (logs go to OUT_DIR, default gpu-results/)
# STEPS is a comma list out of build,tests,latency,cli,compile,demo,multigpu (default: all). Steps that
# use one GPU take the first visible one, so two runs can share a two-GPU machine:
#   bash benchmarks/gpu_validation.sh out build
#   CUDA_VISIBLE_DEVICES=0 bash benchmarks/gpu_validation.sh out/a tests & CUDA_VISIBLE_DEVICES=1 bash ... out/b latency
# They share one build cache (KFORGE_CACHE_DIR). LAT_BACKENDS and LAT_PROBLEMS choose the latency rows;
# THROUGHPUT_ARGS goes to the sweep, e.g. "--override verify.timing.min_trials=100" (KernelBench's rounds).
# Rough times on one H100: build 1.5 min, tests 7, latency 1 per problem and backend, demo 5; multigpu on
# two H200s: 6.
set -u
OUT=${1:-${OUT:-gpu-results}}
STEPS=",${2:-build,tests,latency,cli,compile,demo,multigpu},"
want() { [[ $STEPS == *",$1,"* ]]; }
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 LITELLM_LOCAL_MODEL_COST_MAP=True KFORGE_CACHE_DIR=${KFORGE_CACHE_DIR:-/tmp/kforge-gpu-cache}
export KFORGE_TEST_CACHE=$KFORGE_CACHE_DIR  # the tests reuse the builds warmed here
LAT_BACKENDS=${LAT_BACKENDS:-cuda,triton}
LAT_PROBLEMS=${LAT_PROBLEMS:-1_ReLU,2_Softmax,3_LayerNorm,4_Matmul,1_Gemm_Bias_GELU}
T0=$(date +%s)
step() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset}" >> "$OUT/gpu.txt"

if want build; then
  step "warm the build cache (the oracle kernels, the test and exploit candidates)"
  python3 -m kforge.cli build --backend cuda --oracle --jobs 8 tests/candidates/cuda/*.py tests/exploits/cuda/*.py \
    prompts/examples/cuda/model_new.py > "$OUT/build.txt" 2>&1
  tail -1 "$OUT/build.txt"
fi
if want tests; then
  step "GPU tests (every test marked gpu; the two-GPU ones skip themselves on one GPU)"
  python3 -m pytest -v -m gpu --timeout 300 --durations 10 -p no:cacheprovider -rfEs > "$OUT/gpu_tests.txt" 2>&1
  tail -3 "$OUT/gpu_tests.txt"
fi
if want latency; then
  step "verification latency, repeatability, ncu agreement: $LAT_BACKENDS x $LAT_PROBLEMS"
  python3 benchmarks/verify_latency.py --backends "$LAT_BACKENDS" --problems "$LAT_PROBLEMS" \
    --json "$OUT/latency.json" > "$OUT/latency.txt" 2>&1
  tail -16 "$OUT/latency.txt"
fi
if want cli; then
  step "kforge verify on both GPU backends"
  for b in cuda triton; do
    python3 -m kforge.cli verify level1/2_Softmax kforge/problems/builtin/solutions/$b/level1/2_Softmax.py \
      --backend $b > "$OUT/cli_$b.txt" 2>&1
    echo "exit $?" >> "$OUT/cli_$b.txt"; head -3 "$OUT/cli_$b.txt"
  done
fi
if want compile; then
  step "compile speed"
  python3 benchmarks/compile_speed.py --backend cuda > "$OUT/compile_speed.txt" 2>&1
  tail -4 "$OUT/compile_speed.txt"
fi
if want demo; then
  step "make demo on the GPU with ncu profiles and the rule-based analyst"
  make demo PYTHON=python3 DEMO_ARGS="profiler=ncu analysis=rules tracking.uri=sqlite:////tmp/kforge-gpu-demo.db" \
    > "$OUT/demo.txt" 2>&1
  echo "exit $?" >> "$OUT/demo.txt"; tail -22 "$OUT/demo.txt"
  f=$(find mlartifacts /tmp -name profile.csv 2>/dev/null | head -1); [ -n "$f" ] && cp "$f" "$OUT/ncu_profile.csv"
fi
if want multigpu; then
  step "two-GPU tests, sweep throughput 1 vs 2 GPUs, CUDA start-up contention"
  python3 -m pytest -v -m gpu --timeout 300 -p no:cacheprovider -rfEs tests/verify/test_multi_gpu.py \
    tests/verify/test_lost_worker.py > "$OUT/multigpu_tests.txt" 2>&1
  tail -3 "$OUT/multigpu_tests.txt"
  # Every built-in problem in flight, a short simulated model call: the GPUs, not the model, set the pace.
  # 8 iterations: at 4 the sweep lasts ~20 s on two H200s and its first and last seconds idle the GPUs.
  python3 benchmarks/sweep_throughput.py --backend cuda --latency 0.5 --iterations "${THROUGHPUT_ITERATIONS:-8}" --levels 1,2,3 \
    --configs "${THROUGHPUT_CONFIGS:-1x12,2x12}" ${THROUGHPUT_ARGS:-} > "$OUT/throughput.txt" 2>&1
  tail -12 "$OUT/throughput.txt"
  # Why two GPUs are not twice one: CUDA context creation, first use and exit, alone and side by side.
  python3 benchmarks/gpu_contention.py > "$OUT/contention.txt" 2>&1
  grep "^|" "$OUT/contention.txt"
fi
step done
