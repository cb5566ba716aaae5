"""The triton backend's correctness path on CPU tensors through Triton's interpreter (CI has no GPU)."""

import pytest

from kforge.backends import get_backend
from kforge.problems import resolve_problem
from kforge.verify import State, Verifier
from tests.helpers import candidate, fast_config

pytest.importorskip("triton")


@pytest.fixture(scope="module")
def setup(pool):
    problem = resolve_problem("level1/1_ReLU", size="cpu", overrides={"BATCH": 4, "DIM": 3000})
    return Verifier(fast_config(), pool=pool), problem, get_backend("triton", device="cpu")


@pytest.mark.parametrize("name,state", [
    ("relu_ok.py", State.CORRECT),
    ("relu_wrong_math.py", State.NUMERICAL_MISMATCH),
    ("relu_wrong_shape.py", State.SHAPE_MISMATCH),
])
def test_triton_interpreter_states(setup, name, state):
    verifier, problem, backend = setup
    v = verifier.verify(problem, candidate("triton", name), backend)
    assert v.state is state, v.summary()
    assert "interpreter" in backend.describe()


def test_triton_kernel_rule(setup):
    verifier, problem, backend = setup
    v = verifier.verify(problem, candidate("cpu", "relu_torch_only.py"), backend)
    assert v.state is State.KERNEL_UNUSED and v.rule == "kernel_not_run", v.summary()
    assert "no_kernel" in {f["rule"] for f in v.evidence.findings}
