"""A worker process that dies under a candidate: retried once (on another GPU where there is one), then recorded.

The candidates kill their own worker (the zygote they were forked from), which is what a crash in the
driver or a node losing a GPU looks like from the pool. Static rules are off: these are harness tests.
"""

import pytest

from kforge.problems import resolve_problem
from kforge.sandbox.gpus import detect_gpus
from kforge.verify import State, Verifier, WorkerPool
from kforge.verify.static import RULES, StaticConfig
from tests.helpers import fast_config

# Kills its worker the first time it runs (a marker file remembers), then behaves: one loss, then correct.
# The kill is in __init__: the build step imports the module but builds no model.
KILL_ONCE = '''
import os, signal
import torch
import torch.nn as nn

MARKER = {marker!r}


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        if not os.path.exists(MARKER):
            open(MARKER, "w").write(os.environ.get("CUDA_VISIBLE_DEVICES") or "cpu")
            os.kill(os.getppid(), signal.SIGKILL)
            os._exit(1)

    def forward(self, x):
        return torch.relu(x)
'''

# Kills its worker every time, in the phase named: the second loss is the verdict.
KILL_ALWAYS = '''
import os, signal
import torch.nn as nn

def die():
    os.kill(os.getppid(), signal.SIGKILL)
    os._exit(1)

{at_import}

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        die()

    def forward(self, x):
        return x
'''


def harness_verifier(pool: WorkerPool) -> Verifier:
    return Verifier(fast_config(require_kernel=False), pool=pool, static=StaticConfig(disabled=list(RULES)))


def test_lost_worker_is_retried_once_then_correct(tmp_path):
    relu = resolve_problem("level1/1_ReLU", size="cpu")
    with WorkerPool(gpus=[], build_cache=tmp_path / "cache") as pool:
        verifier = harness_verifier(pool)
        v = verifier.verify(relu, KILL_ONCE.format(marker=str(tmp_path / "killed")), "cpu")
        assert v.state is State.CORRECT, v.summary()
        assert pool.counters["lost"] == 1 and (tmp_path / "killed").read_text() == "cpu"


@pytest.mark.parametrize("at_import,state", [("", State.RUNTIME_ERROR), ("die()", State.COMPILATION_FAILURE)],
                         ids=["run", "build"])
def test_worker_lost_twice_is_the_verdict_and_the_pool_recovers(tmp_path, at_import, state):
    relu = resolve_problem("level1/1_ReLU", size="cpu")
    with WorkerPool(gpus=[], build_cache=tmp_path / "cache") as pool:
        verifier = harness_verifier(pool)
        v = verifier.verify(relu, KILL_ALWAYS.format(at_import=at_import), "cpu")
        assert v.state is state and "died twice" in v.message, v.summary()
        assert pool.counters["lost"] == 2
        after = verifier.verify(relu, KILL_ONCE.format(marker=str(tmp_path / "m")), "cpu")
        assert after.state is State.CORRECT, after.summary()


@pytest.mark.gpu
def test_lost_gpu_worker_is_retried_on_the_other_gpu(tmp_path):
    gpus = detect_gpus()
    if len(gpus) < 2:
        pytest.skip("needs two GPUs (run on a two-GPU machine)")
    relu = resolve_problem("level1/1_ReLU", size="gpu", overrides={"BATCH": 256, "DIM": 8192})
    with WorkerPool(gpus=gpus[:2], build_cache=tmp_path / "cache") as pool:
        v = harness_verifier(pool).verify(relu, KILL_ONCE.format(marker=str(tmp_path / "killed")), "cuda")
        assert v.state is State.CORRECT, v.summary()
        assert pool.counters["lost"] == 1
        # The first attempt died on one GPU; the retry ran on the other.
        assert set(pool.busy_s) == {f"cuda:{g}" for g in gpus[:2]}
