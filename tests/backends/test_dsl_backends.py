"""The cute (CuTe DSL) and tilelang backends. On a GPU: their examples and oracle solutions verify correct and
their matmuls beat fp32 eager (marked gpu; neither package runs without an NVIDIA GPU). Everywhere: they are
registered, their static rules find their kernels, and the recorder's wrapping of a DSL's compiled callables
counts the candidate's launches, checked with a stand-in DSL module."""

import sys
import types

import pytest
import torch

from kforge.backends import BACKENDS, get_backend
from kforge.problems import builtin_solution_path, load_builtin
from kforge.sandbox.dsl_hooks import DslHooks, _Launcher
from kforge.sandbox.recorder import Recorder
from kforge.verify import State, Verifier
from kforge.verify.static import check as static_check
from tests.helpers import fast_config

DSLS = {"cute": "cutlass", "tilelang": "tilelang"}


@pytest.mark.parametrize("name", DSLS)
def test_registered_with_an_example_and_five_oracle_solutions(name):
    backend = get_backend(name)
    assert name in BACKENDS and backend.device == "cuda"
    model, model_new = backend.example()
    assert backend.has_kernel(model_new) and not backend.has_kernel(model)
    solved = [p for p in load_builtin() if builtin_solution_path(p, name)]
    assert len(solved) >= 5 and any(p.name == "4_Matmul" for p in solved), [p.key for p in solved]
    for p in solved:
        source = builtin_solution_path(p, name).read_text()
        found = [f for f in static_check(source, backend, p) if f.severity == "deny"]
        assert backend.has_kernel(source) and not found, (p.key, found)


def _fake_dsl(tmp_path):
    """A stand-in DSL: ``jit`` makes a kernel object of the module ``fakedsl.kernel``, as TileLang does."""
    mod = types.ModuleType("fakedsl")

    class Kernel:
        def __init__(self, fn):
            self.fn = fn

        def __call__(self, *args):
            return self.fn(*args)
    Kernel.__module__ = "fakedsl.kernel"

    def jit(fn):
        return lambda *shape: Kernel(lambda x: x.mul_(2)) if shape else Kernel(fn)
    mod.jit = jit
    return mod


def test_the_candidates_dsl_launches_are_recorded_and_a_librarys_are_not(tmp_path):
    rec = Recorder()
    dsl = _fake_dsl(tmp_path)
    hooks = DslHooks(rec, "fake", ("fakedsl",))
    jit = hooks.decorator(dsl.jit)
    ns = {"jit": jit}
    exec(compile("@jit\ndef factory(n):\n    pass\n", str(tmp_path / "candidate.py"), "exec"), ns)
    exec(compile("@jit\ndef helper(n):\n    pass\n", str(tmp_path / "library.py"), "exec"), ns)
    kernel = ns["factory"](8)  # shapes in, a kernel out: not a launch
    assert isinstance(ns["factory"], _Launcher) and isinstance(kernel, _Launcher)
    assert not isinstance(ns["helper"], _Launcher)  # not defined in the candidate's file
    rec.start("profile")
    try:
        x = torch.ones(4)
        kernel(x)
        ns["helper"](1)(x)
    finally:
        rec.stop()
    assert rec.calls == 1 and x.tolist() == [4.0] * 4 and "factory" in rec.triton_names


def test_dsl_tensors_lead_back_to_their_torch_tensors_without_keeping_them_alive(tmp_path):
    # A forward makes new DSL tensors from new torch tensors every call: held, they would fill the device.
    class DslTensor:
        def __init__(self, t):
            self.ptr = t.data_ptr()

    hooks = DslHooks(Recorder(), "fake", ("fakedsl",))
    from_dlpack = hooks.from_dlpack(DslTensor)
    x = torch.ones(4)
    wrapped = from_dlpack(x)
    assert hooks.as_torch(wrapped) is x and hooks.has_tensors((wrapped,), {})
    stranger = DslTensor(x)  # made some other way: not followed
    assert hooks.as_torch(stranger) is stranger and not hooks.has_tensors((stranger,), {})
    del wrapped
    assert not hooks.dlpack  # its entry left with it
    kept = from_dlpack(torch.zeros(2))  # the torch tensor dies first: the DSL tensor maps to nothing
    assert hooks.as_torch(kept) is kept and sys.getrefcount(x) == 2


def _gpu_verify(pool, problem, source, backend):
    return Verifier(fast_config(trials=3), pool=pool).verify(problem, source, backend)


GPU_PROBLEMS = load_builtin(size="gpu")


@pytest.mark.gpu
@pytest.mark.parametrize("name", DSLS)
def test_dsl_example_is_correct(pool, name):
    pytest.importorskip(DSLS[name])
    backend = get_backend(name)
    v = _gpu_verify(pool, backend.example_problem(), backend.example()[1], backend)
    assert v.state is State.CORRECT, v.summary()


@pytest.mark.gpu
@pytest.mark.parametrize("name", DSLS)
@pytest.mark.parametrize("problem", GPU_PROBLEMS, ids=[p.key for p in GPU_PROBLEMS])
def test_dsl_oracle_is_correct_on_the_gpu(pool, name, problem):
    pytest.importorskip(DSLS[name])
    path = builtin_solution_path(problem, name)
    if path is None:
        pytest.skip(f"{problem.key} has no {name} solution")
    v = _gpu_verify(pool, problem, path.read_text(), name)
    assert v.state is State.CORRECT, v.summary()
    assert v.kernel_share and v.kernel_share > 0.5 and v.attribution.output_from_kernel, v.summary()
    if problem.name in ("4_Matmul", "1_Gemm_Bias_GELU"):  # split-operand GEMMs on the tensor cores beat fp32 eager
        assert v.speedup_eager > 1.0, v.summary()


def test_the_dsls_are_named_in_sys_modules_only_when_imported():
    # Importing kforge never imports either DSL (a CPU machine has neither).
    assert not any(m in sys.modules for m in ("cutlass.cute", "tilelang"))
