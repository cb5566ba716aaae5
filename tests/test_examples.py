"""Each backend's one-shot examples (the forward's, and the backward mode's training step) are themselves correct
candidates for their own modules."""

import pytest

from kforge.backends import get_backend
from kforge.verify import State, Verifier
from tests.helpers import fast_config


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("name,device", [
    ("cpu", None),
    pytest.param("triton", "cpu", id="triton-interpreter"),
    pytest.param("cuda", None, marks=pytest.mark.gpu),
    pytest.param("triton", None, marks=pytest.mark.gpu, id="triton-gpu"),
])
def test_example_is_correct(pool, name, device, backward):
    if name == "triton":
        pytest.importorskip("triton")
    backend = get_backend(name, device=device)
    if not backend.example_dir.is_dir():
        pytest.fail(f"{backend.example_dir} is missing")
    _, model_new = backend.example(backward)
    verifier = Verifier(fast_config(backward=backward), pool=pool)
    v = verifier.verify(backend.example_problem(backward), model_new, backend)
    assert v.state is State.CORRECT, v.summary()
    if backward:  # the example shows the convention: its backward is its own kernels' work
        assert v.attribution.backward_share and v.attribution.gradient_from_kernel, v.summary()
