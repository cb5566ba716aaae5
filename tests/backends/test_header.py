"""The light ``torch/extension.h``: a source that compiles without torch's C++ frontend is built on the
smaller header; one that needs the frontend, or does not compile for want of a name, is built as torch builds
it, and that build's result and compiler log are the ones reported; an error no header cures (a missing
semicolon) is reported as it is."""

import json
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from kforge.backends.build import Builder, CompilationError, header_independent
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


# ATen's parallel loop, which models' CPU kernels use often; SLIP is the same with a semicolon missing.
PARALLEL = r"""
#include <torch/extension.h>

torch::Tensor scale_fwd(torch::Tensor x, double s) {
    TORCH_CHECK(x.scalar_type() == at::kFloat, "float32 only");
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const float* src = xc.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    const float f = static_cast<float>(s);
    at::parallel_for(0, xc.numel(), 2048, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) dst[i] = src[i] * f;
    });
    return out;
}
"""
SLIP = PARALLEL.replace("dst[i] = src[i] * f;", "dst[i] = src[i] * f")


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
    calls.clear()

    def slip():
        calls.append("faster")
        raise CompilationError("main.cpp:2:57: error: expected ‘;’ before ‘}’ token")
    with pytest.raises(CompilationError, match="expected"):
        Builder._first_that_builds(slip, torchs, differ=True)
    assert calls == ["faster"]



def test_a_kernel_on_atens_parallel_loop_is_built_on_the_light_header(builder):
    ext = builder.load_inline("kf_light_parallel", PARALLEL, functions=["scale_fwd"], extra_cflags=FLAGS,
                              extra_ldflags=["-fopenmp"])
    x = torch.randn(5003)
    torch.testing.assert_close(ext.scale_fwd(x, 0.5), x * 0.5)
    assert len(builder.built) == 1 and header_of(builder.built[0]) == "light"


def test_a_syntax_error_is_the_light_builds_verdict_and_nothing_is_built_again(builder):
    runs = []
    run = builder._run_build
    builder._run_build = lambda *args, **kwargs: runs.append(args[1]) or run(*args, **kwargs)
    with pytest.raises(CompilationError) as caught:
        builder.load_inline("kf_light_slip", SLIP, functions=["scale_fwd"], extra_cflags=FLAGS)
    assert re.search(r"error: expected .;. before .}. token", caught.value.log), caught.value.log
    assert runs == ["kf_light_slip"]  # one build: the full header cures no missing semicolon
    assert list(builder.failed.values()) == [caught.value.log]


GCC = "/tmp/b/main.cpp"


@pytest.mark.parametrize("log, incurable", [
    (f"{GCC}:9:54: error: expected ‘;’ before ‘}}’ token\n    9 |   return x }}\n      |           ^", True),
    (f"{GCC}:9:54: error: expected ';' before '}}' token", True),  # the C locale's quotes
    (f"{GCC}:3:1: error: expected ‘}}’ at end of input\n{GCC}:2:30: error: expected ‘)’ before ‘{{’ token", True),
    (f"{GCC}:4:5: error: stray ‘\\302’ in program\n    4 |   y = x; // error: what GCC quotes is not an error",
     True),
    # A name the light header lacks, with the syntax error it leads to: the full header may cure both.
    (f"{GCC}:5:12: error: ‘parallel_for’ is not a member of ‘at’\n{GCC}:7:5: error: expected ‘;’ before ‘}}’", False),
    (f"{GCC}:5:12: error: ‘F’ has not been declared", False),
    # The module defined twice (load_inline's and the candidate's own PYBIND11_MODULE): so it is on any header.
    (f"/site/pybind11/detail/common.h:365:42: error: redefinition of ‘PyObject* PyInit_kf()’\n"
     f"{GCC}:7:1: note: in expansion of macro ‘PYBIND11_MODULE’", True),
    ('/tmp/b/cuda.cu(9): error: function "relu_kernel" has already been defined', True),
    # A CUDA header on a CPU-only torch: both builds search the same include paths.
    (f"{GCC}:3:10: fatal error: ATen/cuda/CUDAContext.h: No such file or directory\ncompilation terminated.", True),
    ('/tmp/b/cuda.cu(2): catastrophic error: cannot open source file "cuda_fp8_utils.h"', True),
    ("main.o: in function `f':\nmain.cpp:(.text+0x1d): undefined reference to `g'\n"
     "collect2: error: ld returned 1 exit status", False),
    ('/tmp/b/cuda.cu(12): error: expected a ";"\n      return x\n              ^\n\n1 error detected in the '
     'compilation of "/tmp/b/cuda.cu".', True),  # nvcc's words
    ('/tmp/b/cuda.cu(7): error: identifier "blockDimx" is undefined\n/tmp/b/cuda.cu(12): error: expected a ";"',
     False),
    ("ninja: build stopped: subcommand failed.", False),  # no compiler error to judge by
    # an `omp for` pragma GCC moved out of a macro's argument (kforge.backends.diagnose)
    ("/site/torch/headeronly/core/Dispatch.h:32:3: error: for statement expected before ‘[’ token", True),
])
def test_only_errors_no_header_cures_are_taken_as_the_full_headers_too(log, incurable):
    assert header_independent(log) is incurable


class _Compiler:
    """Stands in for GCC making a header: records each command, writes the output (or fails with ``rc``)."""

    def __init__(self, rc: int = 0):
        self.rc, self.commands = rc, []

    def __call__(self, cmd, **kwargs):
        import subprocess
        self.commands.append(cmd)
        if self.rc == 0:
            Path(cmd[cmd.index("-o") + 1]).write_bytes(b"gch")
        return subprocess.CompletedProcess(cmd, self.rc, "", "cc1plus: error: something the compiler refused")


def test_an_empty_flag_is_no_flag_and_a_refused_header_is_not_tried_again(tmp_path, monkeypatch):
    """KernelBench's example passes ``extra_cflags=[""]``: torch's ninja file drops it, and the header made for the
    build must too (handed to GCC as an argument of its own, it failed every time, each build paying the attempt)."""
    from kforge.backends import header as header_mod
    env = {"torch": torch.__version__, "cxx": "g++ (test) 12", "arch": None}
    headers = header_mod.PrecompiledHeaders(tmp_path, env, is_gcc=True)
    gcc = _Compiler()
    monkeypatch.setattr(header_mod.subprocess, "run", gcc)
    made = headers.ensure(["-O3", ""])
    assert made == headers.ensure(["-O3"]) == headers.ensure([" ", "-O3"]) and len(gcc.commands) == 1
    assert "" not in gcc.commands[0] and gcc.commands[0][-1] == "-O3"
    assert json.loads((made / PCH_STAMP).read_text())["extra_cflags"] == ["-O3"]
    refusing = _Compiler(rc=1)
    monkeypatch.setattr(header_mod.subprocess, "run", refusing)
    assert headers.ensure(["-march=nonsense"]) is None and headers.ensure(["-march=nonsense"]) is None
    assert len(refusing.commands) == 1  # the refusal is kept beside where the header would be
    killed = _Compiler(rc=-9)  # killed (memory, a timeout): not the flags' fault, tried again next time
    monkeypatch.setattr(header_mod.subprocess, "run", killed)
    assert headers.ensure(["-O1"]) is None and headers.ensure(["-O1"]) is None and len(killed.commands) == 2
