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


#: The backward oracles at sizes the interpreter runs in seconds (odd sizes: masks and tails are exercised).
BACKWARD_SIZES = {"level1/1_ReLU": {"BATCH": 4, "DIM": 3000}, "level1/2_Softmax": {"BATCH": 4, "DIM": 5000},
                  "level1/3_LayerNorm": {"BATCH": 70, "DIM": 200}, "level1/4_Matmul": {"M": 70, "K": 40, "N": 150},
                  "level2/4_RMSNorm_SiLUGate": {"BATCH": 70, "DIM": 200},
                  "level3/1_MLPBlock": {"BATCH": 2, "SEQ": 9, "DIM": 48}}


@pytest.mark.parametrize("key", sorted(BACKWARD_SIZES))
def test_triton_backward_oracle_under_the_interpreter(setup, key):
    from kforge.problems import builtin_solution_path
    verifier, _, backend = setup
    problem = resolve_problem(key, size="cpu", overrides=BACKWARD_SIZES[key])
    code = builtin_solution_path(problem, "triton", backward=True).read_text()
    v = verifier.verify(problem, code, backend, config=fast_config(backward=True))
    assert v.state is State.CORRECT, v.summary()
    assert v.attribution.backward_share and v.attribution.gradient_from_kernel, v.summary()


def test_a_bf16_tensor_core_kernel_is_judged_at_bf16_under_the_interpreter(setup):
    """The worker installs bf16 by-value arithmetic in Triton's interpreter (which alone computes on bf16's bit
    patterns): the bf16 Matmul oracle's ``tl.dot`` tiles come out `correct` at ``precision=bf16``, variants too."""
    from kforge.problems import builtin_solution_path
    verifier, _, backend = setup
    problem = resolve_problem("level1/4_Matmul", size="cpu", overrides={"M": 70, "K": 40, "N": 150})
    code = builtin_solution_path(problem, "triton", "bf16").read_text()
    assert "tl.dot(a, b, acc)" in code
    v = verifier.verify(problem, code, backend, config=fast_config(precision="bf16", variants=True))
    assert v.state is State.CORRECT and v.precision == "bf16", v.summary()


AUTOTUNED = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_SIZE": 1024}, num_warps=4),
        triton.Config({"BLOCK_SIZE": 2048}, num_warps=8),
        triton.Config({"BLOCK_SIZE": 512}, num_warps=2),
    ],
    key=["n_elements"],
)
@triton.jit
def relu_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.maximum(x, 0.0)
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n_elements = x.numel()
        grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)
        relu_kernel[grid](x, y, n_elements)
        return y
'''


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_an_autotuned_kernel_runs_its_first_config_under_the_interpreter(setup, precision):
    """``@triton.autotune`` times configs with a GPU driver the interpreter lacks (Triton raised "0 active
    drivers"); the worker makes it keep the first config untimed, and that config's results are still checked."""
    verifier, problem, backend = setup
    cfg = fast_config(precision=precision, variants=True)
    v = verifier.verify(problem, AUTOTUNED, backend, config=cfg)
    assert v.state is State.CORRECT, v.summary()
    wrong = AUTOTUNED.replace("tl.maximum(x, 0.0)", "tl.maximum(x, 0.5)")
    v = verifier.verify(problem, wrong, backend, config=cfg)
    assert v.state is State.NUMERICAL_MISMATCH, v.summary()


GELU_TANH = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x, approximate="tanh")


batch_size = 8
dim = 1000


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''
LIBDEVICE_GELU = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def gelu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    y = 0.5 * x * (1.0 + libdevice.tanh(inner))
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        gelu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK_SIZE=1024)
        return out
'''


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_libdevice_math_is_computed_under_the_interpreter(setup, precision):
    """The interpreter implements no libdevice function (a GELU's ``libdevice.tanh`` returned None, a
    ``runtime_error``); the worker computes them by value, so the tanh GELU is correct and the exact (erf) GELU,
    another function, is not at fp32's tolerance."""
    from kforge.problems import problem_from_source
    verifier, _, backend = setup
    problem = problem_from_source(GELU_TANH, where="gelu_tanh.py", name="gelu_tanh")
    cfg = fast_config(precision=precision)
    v = verifier.verify(problem, LIBDEVICE_GELU, backend, config=cfg)
    assert v.state is State.CORRECT, v.summary()
    erf = LIBDEVICE_GELU.replace("(1.0 + libdevice.tanh(inner))", "(1.0 + libdevice.erf(x * 0.7071067811865476))")
    if precision == "fp32":
        v = verifier.verify(problem, erf, backend, config=cfg)
        assert v.state is State.NUMERICAL_MISMATCH, v.summary()


def test_a_float32_dot_is_tf32_under_the_interpreter_as_on_a_gpu(setup):
    """``tl.dot`` on float32 operands is TF32 on a GPU unless the kernel asks for ``input_precision="ieee"``; the
    interpreter computed it exactly, so such a matrix product was correct on CPU and a mismatch on a GPU."""
    from kforge.problems import builtin_solution_path
    verifier, _, backend = setup
    problem = resolve_problem("level1/4_Matmul", size="cpu", overrides={"M": 64, "K": 256, "N": 96})
    ieee = builtin_solution_path(problem, "triton").read_text()
    assert 'input_precision="ieee"' in ieee
    default = ieee.replace(', input_precision="ieee"', "")
    v = verifier.verify(problem, ieee, backend)
    assert v.state is State.CORRECT, v.summary()
    v = verifier.verify(problem, default, backend)
    assert v.state is State.NUMERICAL_MISMATCH and v.states["kernelbench"] == "numerical_mismatch", v.summary()
    assert 'unless it is given input_precision="ieee"' in v.message, v.message  # says how to keep float32
    v = verifier.verify(problem, default, backend, config=fast_config(precision="tf32"))
    assert v.state is State.CORRECT, v.summary()  # the kforge rules at tf32 allow TF32 matrix products


def test_what_a_gpu_compile_refuses_is_refused_under_the_interpreter(setup):
    """A bf16 ``tl.dot`` on a K block of 8 and ``libdevice.tanh`` on bf16 values ran in the interpreter and were
    `correct`; Triton's compiler for an H100 refuses both (K >= 16 for 16-bit operands; tanh has float32 and float64
    versions only)."""
    from kforge.problems import builtin_solution_path, problem_from_source
    verifier, _, backend = setup
    cfg = fast_config(precision="bf16")
    problem = resolve_problem("level1/4_Matmul", size="cpu", overrides={"M": 64, "K": 64, "N": 64})
    code = builtin_solution_path(problem, "triton", "bf16").read_text()
    assert "BLOCK_M, BLOCK_N, BLOCK_K = 128, 256, 64" in code
    narrow = code.replace("BLOCK_M, BLOCK_N, BLOCK_K = 128, 256, 64", "BLOCK_M, BLOCK_N, BLOCK_K = 128, 256, 8")
    v = verifier.verify(problem, narrow, backend, config=cfg)
    assert v.state is State.COMPILATION_FAILURE and "K >= 16" in v.message, v.summary()
    gelu = problem_from_source(GELU_TANH, where="gelu_tanh.py", name="gelu_tanh")
    uncast = LIBDEVICE_GELU.replace("other=0.0).to(tl.float32)", "other=0.0)")
    v = verifier.verify(gelu, uncast, backend, config=cfg)
    assert v.state is State.COMPILATION_FAILURE and "libdevice.tanh has no version for bf16" in v.message, v.summary()
    v = verifier.verify(gelu, uncast, backend)  # float32 values: tanh has that version
    assert v.state is State.CORRECT, v.summary()


def test_a_float32_scan_adds_as_a_tree_does_not_one_element_after_another():
    """The interpreter's ``tl.cumsum`` ran numpy's cumsum in float32 along 4,000 columns: a correct kernel failed
    1e-4 on CPU in two runs of three. The worker's scan accumulates wider, closer to a GPU's tree than a chain."""
    import numpy as np
    from triton.runtime import interpreter as interp

    from kforge.backends import triton_bf16
    triton_bf16.install()
    import triton.language as tl
    rng = np.random.default_rng(0)
    data = rng.standard_normal((64, 4096)).astype(np.float32)
    ops = interp.ScanOps(1, tl.standard._sum_combine, False)
    out = ops.cumsum(ops.to_tensor(data, tl.float32))[0].handle.data
    exact = np.cumsum(data.astype(np.float64), axis=1)
    assert out.dtype == np.float32 and np.abs(out - exact).max() <= 2e-5  # a chain of float32 adds: 4e-4


def test_the_interpreter_is_not_timed_and_its_messages_name_the_candidates_code(setup):
    """Under the interpreter the baselines and speedups measured nothing (a "speedup 0.00x"), and its torch.compile
    ratio, kept for the problem, was reused by the cpu backend. An autotuned symbol passed again failed in kforge's
    own code, and a wrapper that falls back to PyTorch off CUDA was not told why."""
    verifier, problem, backend = setup
    v = verifier.verify(problem, candidate("triton", "relu_ok.py"), backend, config=fast_config(compile_ref=True))
    assert v.state is State.CORRECT and v.runtime is None and v.speedup_compile is None, v.summary()
    again = AUTOTUNED.replace("relu_kernel[grid](x, y, n_elements)", "relu_kernel[grid](x, y, n_elements, BLOCK_SIZE=1024)")
    v = verifier.verify(problem, again, backend)
    assert v.state is State.RUNTIME_ERROR and "Conflicting meta-parameters: BLOCK_SIZE" in v.message, v.summary()
    fallback = AUTOTUNED.replace("        x = x.contiguous()\n", "        if not x.is_cuda:\n            return torch.relu(x)\n"
                                 "        x = x.contiguous()\n")
    v = verifier.verify(problem, fallback, backend)
    assert v.state is State.KERNEL_UNUSED and "a wrapper that checks x.is_cuda" in v.message, v.summary()
