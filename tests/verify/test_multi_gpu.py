"""The verifier's pool over several GPUs: concurrent candidates spread over all of them (run on a multi-GPU machine)."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from kforge.problems import resolve_problem
from kforge.sandbox.gpus import detect_gpus
from kforge.verify import State, Verifier, WorkerPool
from tests.helpers import candidate, fast_config

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpus():
    found = detect_gpus()
    if len(found) < 2:
        pytest.skip("needs two GPUs (run on a two-GPU machine)")
    return found


@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_concurrent_candidates_use_every_gpu(gpus, tmp_path, backend):
    relu = resolve_problem("level1/1_ReLU", size="gpu", overrides={"BATCH": 256, "DIM": 8192})
    with WorkerPool(gpus=gpus, build_cache=tmp_path / "cache") as pool:
        verifier = Verifier(fast_config(), pool=pool)
        assert pool.kinds_for("cuda") == [f"cuda:{g}" for g in gpus]
        code = candidate(backend, "relu_ok.py")
        n = 3 * len(gpus)
        with ThreadPoolExecutor(n) as ex:
            verdicts = list(ex.map(lambda _: verifier.verify(relu, code, backend), range(n)))
        assert all(v.state is State.CORRECT for v in verdicts), [v.summary() for v in verdicts if not v.correct]
        assert pool.counters["run"] == n
        # Every GPU served some of them, and no GPU served all.
        assert set(pool.busy_s) == set(pool.kinds_for("cuda")) and all(s > 0 for s in pool.busy_s.values())
