"""The ``dispatcher_bypass`` rule: PyTorch's own kernels called from C++ past the dispatcher, where the run cannot
see them (`kforge.verify.static_bypass`); the CUDA helpers models use around kernels of their own pass."""

import pytest

from kforge.backends import get_backend
from kforge.problems import resolve_problem
from kforge.verify.static import check
from tests.helpers import candidate
from tests.verify.test_static import rules

HONEST = candidate("cpu", "relu_ok.py")


def with_cpp(body: str, include: str = "") -> str:
    """The honest ReLU with ``body`` as its C++ function's last lines and ``include`` above it."""
    return HONEST.replace('SRC = r"""\n', f'SRC = r"""\n{include}\n').replace("    return out;\n}", body + "\n}")


HIDDEN = {
    "a cpu kernel by its dispatch header": ("    return at::cpu::clamp_min(xc, 0);",
                                            "#include <ATen/ops/clamp_min_cpu_dispatch.h>"),
    "all the cpu kernels' header": ("    return at::cpu::relu(xc);", "#include <ATen/CPUFunctions.h>"),
    "a cuda kernel by its header": ("    return at::cuda::relu(xc);", "#include <ATen/ops/relu_cuda_dispatch.h>"),
    "a composite kernel": ("    return at::compositeexplicitautograd::clone(out);", ""),
    "a native implementation of the operator": ("    return at::native::relu(xc);", "#include <ATen/NativeFunctions.h>"),
    "a redispatch, which skips the profiler's record": (
        "    return at::_ops::clamp_min::redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), xc, 0);",
        "#include <ATen/ops/clamp_min_ops.h>"),
    "an alias of the cpu namespace": ("    namespace fast = at::cpu;\n    return fast::clamp_min(xc, 0);",
                                      "#include <ATen/CPUFunctions_inl.h>"),
    "a using directive": ("    using namespace at::cpu;\n    return clamp_min(xc, 0);", ""),
    "a pointer to the cpu kernel": ("    auto f = &at::cpu::clamp_min;\n    return f(xc, 0);", ""),
}


@pytest.mark.parametrize("body,include", HIDDEN.values(), ids=list(HIDDEN))
def test_pytorchs_kernels_called_past_the_dispatcher_are_denied(body, include):
    assert ("dispatcher_bypass", "deny") in rules(with_cpp(body, include))


def test_a_native_operator_of_the_problem_is_denied_and_its_helpers_are_not():
    native = with_cpp("    return at::native::relu_(out);")
    assert ("dispatcher_bypass", "deny") in rules(native)
    softmax = resolve_problem("level1/2_Softmax")
    assert [f.rule for f in check(with_cpp("    (void)at::native::ceil_log2(8);\n    return out;"),
                                  get_backend("cpu"), softmax)].count("dispatcher_bypass") == 0


def test_the_dispatcher_and_the_cuda_backends_helpers_are_not_a_bypass():
    assert "dispatcher_bypass" not in [r for r, _ in rules(HONEST)]
    # at::cpu's CPU-feature helpers pick a code path of the kernel's own
    avx = with_cpp("    static const bool avx2 = at::cpu::is_avx2_supported() && "
                   "at::cpu::get_cpu_capabilities().size() > 0;\n    return out;", "#include <ATen/cpu/Utils.h>")
    assert "dispatcher_bypass" not in [r for r, _ in rules(avx)]
    helpers = with_cpp("    auto stream = at::cuda::getCurrentCUDAStream();\n    return out;",
                       "#include <ATen/cuda/CUDAContext.h>\n#include <ATen/native/cuda/block_reduce.cuh>")
    assert "dispatcher_bypass" not in [r for r, _ in rules(helpers)]


def test_for_a_file_that_names_no_operators_the_common_ones_are_known():
    """KernelBench's files declare no ``ops``: an ``at::native`` implementation is told by its name."""
    from kforge.problems import problem_from_source
    kb = problem_from_source("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                             "    def forward(self, x):\n        return torch.softmax(x, dim=1)\n\n\n"
                             "def get_inputs():\n    return [torch.randn(8, 8)]\n\n\ndef get_init_inputs():\n"
                             "    return []\n", where="kb.py", name="kb")
    assert kb.ops == ()
    found = [f.rule for f in check(with_cpp("    return at::native::softmax_cpu(xc, 1, false);"), get_backend("cpu"),
                                   kb)]
    assert "dispatcher_bypass" in found
    helpers = with_cpp("    at::native::resize_output(out, xc.sizes());\n    return out;")
    assert "dispatcher_bypass" not in [f.rule for f in check(helpers, get_backend("cpu"), kb)]
