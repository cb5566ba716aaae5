"""Each backend's one-shot examples (the forward's, and the backward mode's training step) are themselves correct
candidates for their own modules."""

import pytest

from kforge.backends import get_backend
from kforge.backends.base import backward_examples
from kforge.verify import State, Verifier
from tests.helpers import fast_config


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("name,device", [
    ("cpu", None),
    pytest.param("triton", "cpu", id="triton-interpreter"),
    pytest.param("opencl", None, id="opencl-pocl"),
    pytest.param("cuda", None, marks=pytest.mark.gpu),
    pytest.param("triton", None, marks=pytest.mark.gpu, id="triton-gpu"),
])
def test_example_is_correct(pool, name, device, backward):
    if name in ("triton", "opencl"):
        pytest.importorskip("pyopencl" if name == "opencl" else "triton")
    backend = get_backend(name, device=device)
    if backward and name not in backward_examples():
        assert name == "opencl", f"{name} lost its backward example"
        pytest.skip("no backward example for opencl (the backward mode is refused there)")
    _, model_new = backend.example(backward=backward)
    verifier = Verifier(fast_config(backward=backward), pool=pool)
    v = verifier.verify(backend.example_problem(backward=backward), model_new, backend)
    assert v.state is State.CORRECT, v.summary()
    if backward:  # the example shows the convention: its backward is its own kernels' work
        assert v.attribution.backward_share and v.attribution.gradient_from_kernel, v.summary()


def test_cpu_bf16_example_is_correct_at_bf16(cache_dir):
    import torch

    from tests.precision_harness import cached_builds, run_at
    backend = get_backend("cpu")
    assert backend.example_dir("bf16").name == "bf16"
    model, model_new = backend.example("bf16")
    with cached_builds(cache_dir):
        run_at(model, model_new, torch.bfloat16).check("cpu bf16 example")


def test_triton_bf16_example_under_the_interpreter():
    # in bf16: the interpreter process installs kforge's by-value bf16 arithmetic, as a kforge worker does
    pytest.importorskip("triton")
    from tests.precision_harness import in_triton_interpreter
    model, model_new = get_backend("triton").example("bf16")
    small = model.replace("torch.randn(1024, 512)", "torch.randn(200, 512)")
    assert in_triton_interpreter({"triton bf16 example": (small, model_new, "bfloat16")}) == {
        "triton bf16 example": None}


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["cuda", "triton"])
def test_bf16_example_is_correct_at_bf16_on_a_gpu(pool, name):
    backend = get_backend(name)
    _, model_new = backend.example("bf16")
    v = Verifier(fast_config(precision="bf16"), pool=pool).verify(backend.example_problem("bf16"), model_new, backend)
    assert v.state is State.CORRECT, v.summary()
