"""The opencl backend on PoCL (CI's CPU OpenCL): the oracle suite, candidates written differently from it, what
counts as the candidate's work, its build failures, and its static rules. GPU OpenCL is not exercised here."""

import pytest

from kforge.backends import get_backend
from kforge.problems import builtin_solution_path, load_builtin, resolve_problem
from kforge.verify import State, Verifier
from kforge.verify.static import check as static_check
from tests.helpers import fast_config

pytest.importorskip("pyopencl", reason="the opencl extra (pyopencl and PoCL) is not installed: make setup installs it")

PROBLEMS = load_builtin(size="cpu")
RELU = "level1/1_ReLU"


@pytest.fixture(scope="module")
def verifier(pool):
    return Verifier(fast_config(trials=3, skip_timing=True), pool=pool)


def relu(size="BATCH=8 DIM=4096"):
    return resolve_problem(RELU, size="cpu", overrides={k: int(v) for k, v in (s.split("=") for s in size.split())})


@pytest.mark.parametrize("problem", PROBLEMS, ids=[p.key for p in PROBLEMS])
def test_opencl_oracle_is_correct_on_pocl(verifier, problem):
    path = builtin_solution_path(problem, "opencl")
    assert path is not None, f"{problem.key} has no opencl solution"
    v = verifier.verify(problem, path.read_text(), "opencl")
    assert v.state is State.CORRECT, v.summary()
    assert v.attribution.output_from_kernel and v.kernel_share > 0.5, v.summary()


# Held out: written the way a model would, unlike the oracle (a kernel fetched by attribute on every call,
# global size left to the runtime, a float result made with torch.tensor from a NumPy array).
HELD_OUT = '''
import numpy as np
import pyopencl as cl
import torch
import torch.nn as nn

relu_src = """
__kernel void relu_fwd(__global const float *input, __global float *output, const int total)
{
    const int idx = get_global_id(0);
    if (idx < total) {
        const float v = input[idx];
        output[idx] = v > 0.0f ? v : 0.0f;
    }
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()
        plat = cl.get_platforms()[0]
        self.ctx = cl.Context(devices=plat.get_devices())
        self.queue = cl.CommandQueue(self.ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
        self.prg = cl.Program(self.ctx, relu_src).build(options=["-cl-fast-relaxed-math"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        host_in = x.detach().cpu().numpy().astype(np.float32).ravel()
        host_out = np.zeros_like(host_in)
        mf = cl.mem_flags
        d_in = cl.Buffer(self.ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=host_in)
        d_out = cl.Buffer(self.ctx, mf.WRITE_ONLY, host_out.nbytes)
        evt = self.prg.relu_fwd(self.queue, host_in.shape, None, d_in, d_out, np.int32(host_in.size))
        evt.wait()
        cl.enqueue_copy(self.queue, host_out, d_out).wait()
        return torch.tensor(host_out).reshape(x.shape)
'''

# The same kernel built and enqueued, but PyTorch's answer returned: not the candidate's work.
HELD_OUT_TORCH = HELD_OUT.replace("return torch.tensor(host_out).reshape(x.shape)",
                                  "return torch.relu(x)  # same values as host_out")


def test_a_plain_pyopencl_kernel_written_differently_is_correct(verifier):
    v = verifier.verify(relu(), HELD_OUT, "opencl")
    assert v.state is State.CORRECT, v.summary()
    assert v.attribution.output_from_kernel is True, v.summary()
    assert any(u.origin == "candidate" and "relu_fwd" in u.name for u in v.attribution.top), v.attribution.top


def test_a_kernel_whose_answer_pytorch_computes_is_not_the_candidates_work(pool):
    # default rules: the static forbidden_op only warns, the measured trials decide
    v = Verifier(fast_config(trials=3, skip_timing=True), pool=pool).verify(relu(), HELD_OUT_TORCH, "opencl")
    assert v.state is not State.CORRECT and v.states["kforge"] != "correct", v.summary()
    assert v.attribution.output_from_kernel is False and v.rule == "output_not_from_kernel", v.summary()


ARRAY_ARITHMETIC = '''
import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pyopencl.clmath
import torch
import torch.nn as nn

queue = cl.CommandQueue(cl.create_some_context(interactive=False))
SRC = "__kernel void unused(__global float* p) { p[get_global_id(0)] = 0.0f; }"
prg = cl.Program(queue.context, SRC).build()


class ModelNew(nn.Module):
    def forward(self, x):
        d = cla.to_device(queue, x.contiguous().numpy())
        y = (d + abs(d)) * 0.5  # relu from pyopencl's own array kernels
        return torch.from_numpy(y.get())
'''


def test_pyopencl_array_arithmetic_is_a_librarys_kernels(pool):
    v = Verifier(fast_config(trials=3, skip_timing=True), pool=pool).verify(relu(), ARRAY_ARITHMETIC, "opencl")
    assert v.state is not State.CORRECT and v.rule == "kernel_not_run", v.summary()
    assert v.attribution.shares.get("library", 0) > 0, v.attribution


def test_a_kernel_that_does_not_build_is_a_compilation_failure(verifier):
    broken = HELD_OUT.replace("const float v = input[idx];", "const float v = input[idx]")
    v = verifier.verify(relu(), broken, "opencl")
    assert v.state is State.COMPILATION_FAILURE, v.summary()
    # The compiler's first error, not pyopencl's "BUILD_PROGRAM_FAILURE" three times over.
    assert "expected ';'" in v.message and "BUILD_PROGRAM_FAILURE" not in v.message, v.message
    assert "of the kernel source" in v.message, v.message


def test_half_arithmetic_on_a_device_without_cl_khr_fp16_says_how_to_store_half(verifier):
    half = HELD_OUT.replace("const float v = input[idx];", "const half v = (half)input[idx];")
    v = verifier.verify(relu(), half, "opencl")
    assert v.state is State.COMPILATION_FAILURE and "vload_half" in v.message, v.summary()


def test_static_rules_know_opencl_kernels():
    backend = get_backend("opencl")
    problem = relu()
    assert backend.has_kernel(HELD_OUT) and not backend.has_kernel("import torch\nclass ModelNew: pass\n")
    never = HELD_OUT.replace("evt = self.prg.relu_fwd(", "evt = None and (").replace("evt.wait()", "")
    rules = {f.rule for f in static_check(never.replace("self.prg.relu_fwd", "x"), backend, problem)}
    assert "kernel_not_called" in rules, rules
    assert "kernel_not_called" not in {f.rule for f in static_check(HELD_OUT, backend, problem)}
    patched = HELD_OUT + "\ncl.enqueue_copy = lambda *a, **k: None\n"
    assert "monkey_patch" in {f.rule for f in static_check(patched, backend, problem)}
    ctx_env = HELD_OUT.replace("import numpy as np", "import os\nimport numpy as np\nos.environ['PYOPENCL_CTX'] = '0'")
    assert not [f for f in static_check(ctx_env, backend, problem) if f.severity == "deny"]


def test_the_backend_is_cpu_tensors_whatever_runs_the_kernels():
    with pytest.raises(ValueError, match="options.platform"):
        get_backend("opencl", device="cuda")
    assert get_backend("opencl", platform="nvidia").describe().startswith("opencl (OpenCL C on platform 'nvidia'")


def test_a_work_group_the_global_size_is_no_multiple_of_is_told_how_to_round(verifier):
    fixed = HELD_OUT.replace("host_in.shape, None,", "host_in.shape, (256,),")
    v = verifier.verify(relu("BATCH=3 DIM=100"), fixed, "opencl")
    assert v.state is State.RUNTIME_ERROR and "INVALID_WORK_GROUP_SIZE" in v.message, v.summary()
    assert "round the global size up to a multiple" in v.message, v.message


def test_numpy_on_a_bf16_tensor_is_told_that_numpy_has_no_bfloat16(pool):
    v = Verifier(fast_config(trials=3, skip_timing=True, precision="bf16", variants=False), pool=pool).verify(
        relu(), HELD_OUT.replace(".numpy().astype(np.float32)", ".numpy()"), "opencl")
    assert v.state is State.RUNTIME_ERROR and "NumPy has no bfloat16: take `.float()`" in v.message, v.summary()
