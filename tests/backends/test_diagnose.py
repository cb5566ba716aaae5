"""A failed build's likely cause (`kforge.backends.diagnose`): an OpenMP pragma written inside a dispatch macro's
lambda, the way models write CPU kernels, is named in the verdict with the fix; a name in ``functions=`` that the
C++ never declares, and a CUDA kernel given to the host compiler, are named too; anything else is left to the
compiler's own words."""

from kforge.backends.diagnose import CAUSE_PREFIX, cause_in, likely_cause
from kforge.problems import problem_from_source
from kforge.verify import State, Verifier
from tests.helpers import fast_config

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sigmoid(x)


batch_size = 8
dim = 1000


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

# What a model writes: the loop and its pragma inside AT_DISPATCH's lambda. GCC moves the pragma out of the macro's
# argument, and the `omp for` finds the lambda where its loop should be.
PRAGMA_IN_DISPATCH = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

sigmoid_source = """
#include <torch/extension.h>
#include <cmath>

torch::Tensor sigmoid_forward(torch::Tensor input) {
    auto x = input.contiguous();
    auto output = torch::empty_like(x);
    const int64_t size = x.numel();
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "sigmoid_forward", ([&] {
        const scalar_t* in = x.data_ptr<scalar_t>();
        scalar_t* out = output.data_ptr<scalar_t>();
        #pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < size; ++i) {
            float v = static_cast<float>(in[i]);
            out[i] = static_cast<scalar_t>(1.0f / (1.0f + std::exp(-v)));
        }
    }));
    return output;
}
"""

sigmoid_cpp = load_inline(
    name="sigmoid_cpp_dispatch_pragma",
    cpp_sources=sigmoid_source,
    functions=["sigmoid_forward"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()
        self.sigmoid = sigmoid_cpp

    def forward(self, x):
        return self.sigmoid.sigmoid_forward(x)
'''


def test_a_pragma_inside_a_dispatch_macro_is_named_as_the_cause_with_its_fix(pool):
    problem = problem_from_source(PROBLEM, where="sigmoid.py", name="sigmoid")
    verifier = Verifier(fast_config(skip_timing=True), pool=pool)
    v = verifier.verify(problem, PRAGMA_IN_DISPATCH, "cpu")
    assert v.state is State.COMPILATION_FAILURE, v.summary()
    assert "`#pragma omp parallel for schedule(static)` is written inside the arguments of the macro " \
           "AT_DISPATCH_FLOATING_TYPES_AND2" in v.message, v.message
    assert '_Pragma("omp parallel for schedule(static)")' in v.message
    log = v.evidence.compiler_log
    assert "for statement expected before" in log and cause_in(log) in v.message
    fixed = PRAGMA_IN_DISPATCH.replace("#pragma omp parallel for schedule(static)",
                                       '_Pragma("omp parallel for schedule(static)")')
    assert verifier.verify(problem, fixed, "cpu").state is State.CORRECT


MAIN = "/root/.cache/kforge/ext/builds/0f3a/main.cpp"


def test_a_bound_name_the_cpp_sources_never_declare_is_named():
    # load_inline's main.cpp for a CUDA candidate whose cpp_sources forgot the declaration
    log = (f"{MAIN}: In function ‘void pybind11_init_fused(pybind11::module_&)’:\n"
           f"{MAIN}:4:48: error: ‘fused_forward’ was not declared in this scope\n"
           f'    4 | m.def("fused_forward", torch::wrap_pybind_function(fused_forward), "fused_forward");\n'
           "ninja: build stopped: subcommand failed.")
    cause = likely_cause(log, ["#include <torch/extension.h>"], ["fused_forward"])
    assert cause.startswith("`fused_forward` in load_inline's functions= is not declared in cpp_sources")
    assert 'cpp_sources="torch::Tensor fused_forward(torch::Tensor x);"' in cause
    assert cause_in(f"{log}\n{CAUSE_PREFIX}{cause}\n") == cause
    # the C locale's quotes
    assert likely_cause(log.replace("‘", "'").replace("’", "'"), [], ["fused_forward"]) == cause
    # an undeclared name that is not one load_inline binds is the compiler's to explain
    assert likely_cause(log, [], ["other_forward"]) is None


def test_a_cuda_kernel_given_to_the_host_compiler_is_named():
    # g++ 12's words for a kernel in cpp_sources (or a CUDA program on the cpu backend)
    log = (f"{MAIN}:3:1: error: ‘__global__’ does not name a type\n"
           f"{MAIN}:9:5: error: ‘relu_kernel’ was not declared in this scope\n"
           f"{MAIN}:9:17: error: expected primary-expression before ‘<’ token")
    cause = likely_cause(log, ["__global__ void relu_kernel(float* x) {}"], ["relu_forward"])
    assert cause.startswith("a CUDA kernel (`__global__`) reached the host C++ compiler") and "cuda_sources" in cause


def test_no_cause_is_guessed_where_the_error_is_another():
    source = PRAGMA_IN_DISPATCH.split('"""')[1]
    slip = f"{MAIN}:9:54: error: expected ‘;’ before ‘}}’ token"
    assert likely_cause(slip, [source], ["sigmoid_forward"]) is None  # a pragma is there, but not what failed
    looped = f"{MAIN}:14:9: error: for statement expected before ‘[’ token"
    assert likely_cause(looped, [source], []) is not None
    outside = source.replace("AT_DISPATCH_FLOATING_TYPES_AND2(", "if (true) { auto fn = (")
    assert likely_cause(looped, [outside], []) is None  # no macro around the pragma: not this cause
    assert likely_cause("ninja: build stopped", [source], []) is None and cause_in("no cause here") is None
