"""The state matrix for the cuda and triton backends on a real GPU (run on the device: make test-gpu)."""

import time

import pytest

from kforge.backends import get_backend
from kforge.problems import resolve_problem
from kforge.sandbox.ceilings import CeilingCache
from kforge.sandbox.gpus import detect_gpus
from kforge.verify import State, Verifier, WorkerPool
from tests.helpers import candidate, fast_config

pytestmark = pytest.mark.gpu

MATRIX = {
    "cuda": [("relu_ok.py", State.CORRECT), ("relu_wrong_math.py", State.NUMERICAL_MISMATCH),
             ("relu_wrong_shape.py", State.SHAPE_MISMATCH), ("relu_syntax_error.py", State.COMPILATION_FAILURE),
             ("relu_raises.py", State.RUNTIME_ERROR), ("relu_partial_write.py", State.NUMERICAL_MISMATCH)],
    "triton": [("relu_ok.py", State.CORRECT), ("relu_wrong_math.py", State.NUMERICAL_MISMATCH),
               ("relu_wrong_shape.py", State.SHAPE_MISMATCH), ("relu_compile_error.py", State.COMPILATION_FAILURE)],
}


@pytest.fixture(scope="module")
def relu():
    return resolve_problem("level1/1_ReLU", size="gpu", overrides={"BATCH": 256, "DIM": 8192})


@pytest.fixture(scope="module")
def verifier(pool):
    return Verifier(fast_config(timeout_s=120), pool=pool)


@pytest.mark.parametrize("backend,name,state", [(b, n, s) for b, rows in MATRIX.items() for n, s in rows])
def test_gpu_state_matrix(verifier, relu, backend, name, state):
    v = verifier.verify(relu, candidate(backend, name), backend)
    assert v.state is state, v.summary()
    if state is State.CORRECT:
        assert v.runtime.host_median_ms >= v.runtime.median_ms * 0.5 and v.speedup_eager > 0
        assert "H100" in v.device or "H200" in v.device or v.device
    if state is State.COMPILATION_FAILURE:
        assert v.evidence.compiler_log


@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_illegal_address_then_next_candidate_is_fine(verifier, relu, backend):
    bad = verifier.verify(relu, candidate(backend, "relu_illegal_address.py"), backend)
    assert bad.state is State.RUNTIME_ERROR, bad.summary()
    assert "illegal" in (bad.message + (bad.evidence.traceback or "") + (bad.evidence.output_tail or "")).lower() \
        or "SIG" in bad.message
    good = verifier.verify(relu, candidate(backend, "relu_ok.py"), backend)
    assert good.state is State.CORRECT, good.summary()


@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_timeout_kills_and_recovers(pool, relu, backend):
    verifier = Verifier(fast_config(timeout_s=20), pool=pool)
    # Build (and cache) first with no trials, so the timed call measures the hang alone.
    verifier.verify(relu, candidate(backend, "relu_infinite_loop.py"), backend,
                    config=fast_config(timeout_s=600, trials=0, skip_timing=True))
    start = time.monotonic()
    v = verifier.verify(relu, candidate(backend, "relu_infinite_loop.py"), backend)
    assert v.state is State.TIMEOUT, v.summary()
    assert time.monotonic() - start < 20 + 30
    assert verifier.verify(relu, candidate(backend, "relu_ok.py"), backend).state is State.CORRECT


def test_a_ceiling_cached_low_is_measured_again_before_calling_a_kernel_a_cheat(tmp_path, cache_dir, relu):
    """A bandwidth cached while the GPU was shared reads low; an honest kernel must not pay for it.

    The cache claims 1 GB/s, which puts ReLU's floor at ~17 ms: the oracle kernel looks impossibly fast
    until the verifier measures the GPU again, on its own pool and GPU slot, and keeps the higher reading.
    """
    assert relu.bytes, "the check needs a problem with a roofline floor"
    (tmp_path / "ext").symlink_to(cache_dir / "ext", target_is_directory=True)  # the session's builds
    cache = CeilingCache(tmp_path / "ceilings.json")  # the pool's: next to its build cache
    with WorkerPool(gpus=detect_gpus()[:1], build_cache=tmp_path / "ext") as pool:
        kind = pool.kinds_for("cuda")[0]
        info = pool.device_info(kind, get_backend("cuda").spec())
        key = f"{info.device}|{info.torch}"
        cache.put(key, {"bandwidth_bytes_per_s": 1e9, "fp32_flops": 1e12, "bf16_flops": 1e12})
        v = Verifier(fast_config(timeout_s=120), pool=pool).verify(relu, candidate("cuda", "relu_ok.py"), "cuda")
    assert v.state is State.CORRECT, v.summary()
    assert v.floor_ms and v.floor_ms < 1.0, v.floor_ms  # judged against the new reading, not 17 ms
    assert cache.get(key)["bandwidth_bytes_per_s"] > 1e12  # and the low reading is gone from the cache
