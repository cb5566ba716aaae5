"""The light ``torch/extension.h``: a source that compiles without torch's C++ frontend is built on the
smaller header; one that needs the frontend, or does not compile at all, is built as torch builds it, and
that build's result and compiler log are the ones reported."""

import json
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from kforge.backends.build import Builder, CompilationError
from kforge.backends.header import LIGHT_DROPS, PCH_STAMP, light_header
from tests.backends.test_build import FLAGS, cache_with_the_sessions_pch

# Written the way models write CPU kernels: the extension header, checks, a dispatch macro, OpenMP.
ATEN_ONLY = r"""
#include <torch/extension.h>
#include <omp.h>

template <typename scalar_t>
void leaky_relu_kernel(const scalar_t* x, scalar_t* y, int64_t n, scalar_t slope) {
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : x[i] * slope;
}

torch::Tensor leaky_relu_fwd(torch::Tensor input, double slope) {
    TORCH_CHECK(input.is_contiguous(), "input must be contiguous");
    auto out = torch::empty_like(input);
    AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "leaky_relu_fwd", [&] {
        leaky_relu_kernel<scalar_t>(input.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), input.numel(),
                                    static_cast<scalar_t>(slope));
    });
    return out;
}
"""

# A model that reaches for the C++ frontend (torch::nn::functional, NoGradGuard), which the light header lacks.
FRONTEND = r"""
#include <torch/extension.h>
namespace F = torch::nn::functional;

torch::Tensor gelu_tanh(torch::Tensor x) {
    torch::NoGradGuard no_grad;
    return F::gelu(x, F::GELUFuncOptions().approximate("tanh"));
}
"""

# A misspelt frontend function: only the full header can say what is wrong with it.
MISSPELT = r"""
#include <torch/extension.h>
torch::Tensor relu_fwd(torch::Tensor x) { return torch::nn::functional::relux(x); }
"""


@pytest.fixture
def builder(tmp_path, cache_dir):
    cache, _ = cache_with_the_sessions_pch(tmp_path, cache_dir)
    return Builder(cache, use_pch=True)


def header_of(build_dir: str) -> str:
    """Which precompiled header a finished build compiled against (``none``), from its ninja file and the header's
    stamp."""
    ninja = (Path(build_dir) / "build.ninja").read_text()
    pch = re.search(r"-I(\S+/pch/[0-9a-f]+)\b", ninja)
    return json.loads((Path(pch.group(1)) / PCH_STAMP).read_text()).get("header", "full") if pch else "none"


def test_the_light_header_is_torch_python_bindings_without_the_cpp_frontend(builder):
    includes = builder.headers.light_includes()
    assert "torch/types.h" in includes and "torch/csrc/utils/pybind.h" in includes
    assert not set(includes) & set(LIGHT_DROPS)
    text = light_header(includes)
    # torch's own refusal of stable-ABI builds comes with it, before anything is included.
    assert text.index("#error") < text.index("#include <torch/types.h>")


def test_a_kernel_on_aten_alone_is_built_on_the_light_header(builder):
    ext = builder.load_inline("kf_light_leaky", ATEN_ONLY, functions=["leaky_relu_fwd"], extra_cflags=FLAGS,
                              extra_ldflags=["-fopenmp"])
    x = torch.randn(1031)
    torch.testing.assert_close(ext.leaky_relu_fwd(x, 0.1), F.leaky_relu(x, 0.1))
    assert len(builder.built) == 1 and header_of(builder.built[0]) == "light"


def test_a_kernel_on_the_cpp_frontend_is_built_as_torch_builds_it(builder):
    ext = builder.load_inline("kf_light_gelu", FRONTEND, functions=["gelu_tanh"], extra_cflags=FLAGS,
                              extra_ldflags=["-fopenmp"])
    x = torch.randn(257)
    torch.testing.assert_close(ext.gelu_tanh(x), F.gelu(x, approximate="tanh"))
    assert len(builder.built) == 1 and header_of(builder.built[0]) != "light"  # torch's full header
    assert builder.failed == {}  # the light attempt is the builder's business, not a failed build


def test_a_kernel_that_does_not_compile_reports_the_full_headers_log(builder):
    with pytest.raises(CompilationError) as caught:
        builder.load_inline("kf_light_misspelt", MISSPELT, functions=["relu_fwd"], extra_cflags=FLAGS)
    # The light header knows no torch::nn; torch's own build knows it and names what is missing there.
    assert re.search(r"relux.{1,3} is not a member of .torch::nn::functional", caught.value.log)
    assert list(builder.failed.values()) == [caught.value.log]


def test_the_faster_build_is_tried_only_where_it_differs_and_its_failure_is_not_the_verdict():
    calls = []

    def faster():
        calls.append("faster")
        raise CompilationError("light header: 'nn' is not a member of 'torch'")

    def torchs():
        calls.append("torch's")
        return "module"
    assert Builder._first_that_builds(faster, torchs, differ=True) == "module" and calls == ["faster", "torch's"]
    calls.clear()
    assert Builder._first_that_builds(faster, torchs, differ=False) == "module" and calls == ["torch's"]
    calls.clear()
    assert Builder._first_that_builds(lambda: calls.append("faster") or "fast", torchs, differ=True) == "fast"
    assert calls == ["faster"]

