"""Each backend's one-shot example is itself a correct candidate for its own module."""

import pytest

from kforge.backends import get_backend
from kforge.verify import State, Verifier
from tests.helpers import fast_config


@pytest.mark.parametrize("name,device", [
    ("cpu", None),
    pytest.param("triton", "cpu", id="triton-interpreter"),
    pytest.param("opencl", None, id="opencl-pocl"),
    pytest.param("cuda", None, marks=pytest.mark.gpu),
    pytest.param("triton", None, marks=pytest.mark.gpu, id="triton-gpu"),
])
def test_example_is_correct(pool, name, device):
    if name in ("triton", "opencl"):
        pytest.importorskip("pyopencl" if name == "opencl" else "triton")
    backend = get_backend(name, device=device)
    if not backend.example_dir.is_dir():
        pytest.fail(f"{backend.example_dir} is missing")
    _, model_new = backend.example()
    v = Verifier(fast_config(), pool=pool).verify(backend.example_problem(), model_new, backend)
    assert v.state is State.CORRECT, v.summary()
