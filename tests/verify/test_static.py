"""Static-check configuration: deny and allow patterns, warnings, switching rules off."""

from kforge.backends import get_backend
from kforge.problems import resolve_problem
from kforge.verify.static import StaticConfig, check
from tests.helpers import candidate

RELU = resolve_problem("level1/1_ReLU")


def rules(source, backend="cpu", **cfg):
    return [(f.rule, f.severity) for f in check(source, get_backend(backend), RELU, StaticConfig(**cfg))]


def test_honest_kernel_has_no_findings():
    assert rules(candidate("cpu", "relu_ok.py")) == []


def test_deny_pattern_rejects_and_names_the_line():
    fs = check(candidate("cpu", "relu_ok.py"), get_backend("cpu"), RELU, StaticConfig(deny=[r"#pragma omp"]))
    assert [f.rule for f in fs] == ["deny_pattern"] and fs[0].line == 14


def test_allow_pattern_drops_a_finding():
    src = candidate("cpu", "relu_ok.py").replace("return ext.relu_fwd(x)", "return torch.relu(ext.relu_fwd(x))")
    assert ("forbidden_op", "deny") in rules(src)
    assert rules(src, allow=[r"torch\.relu\(ext"]) == []


def test_precision_downgrade_is_a_warning_and_warn_only_softens_rules():
    src = candidate("cpu", "relu_ok.py").replace("return ext.relu_fwd(x)", "return ext.relu_fwd(x.half().float())")
    assert rules(src) == [("precision_downgrade", "warn")]
    src = candidate("cpu", "relu_ok.py").replace("return ext.relu_fwd(x)", "return x.clamp_min(0)")
    assert ("forbidden_op", "warn") in rules(src, warn_only=["forbidden_op"])


def test_precision_downgrade_reads_the_cpp_and_triton_spellings_but_not_a_dtype_dispatch():
    ok = candidate("cpu", "relu_ok.py")
    for spelling in ("auto h = x.to(torch::kHalf);", "const at::BFloat16* p = x.data_ptr<at::BFloat16>();",
                     "y[i] = __float2half(v);", "acc = acc.to(tl.bfloat16)", "h = x.to(torch.half)"):
        src = ok.replace("return ext.relu_fwd(x)", f"# {spelling}\n        return ext.relu_fwd(x)")
        assert rules(src) == [("precision_downgrade", "warn")], spelling
    for generic in ('AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "relu", [&] {',
                    "if (x.scalar_type() == at::kHalf) { return relu_half(x); }"):
        src = ok.replace("return ext.relu_fwd(x)", f"# {generic}\n        return ext.relu_fwd(x)")
        assert rules(src) == [], generic


def test_rules_can_be_switched_off():
    src = "import os\n" + candidate("cpu", "relu_ok.py").replace(
        "return ext.relu_fwd(x)", "os.environ.get('KFORGE_X')\n        return ext.relu_fwd(x)")
    assert ("environment", "deny") in rules(src)
    assert rules(src, disabled=["environment"]) == []


def test_submodule_of_the_reference_op_is_a_fallback():
    ln = resolve_problem("level1/3_LayerNorm")
    src = ("import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n"
           "ext = load_inline(name='x', cpp_sources=['int f(){return 1;}'], functions=['f'])\n"
           "class ModelNew(nn.Module):\n    def __init__(self, d):\n        super().__init__()\n"
           "        self.norm = nn.LayerNorm(d)\n    def forward(self, x):\n        ext.f()\n"
           "        return self.norm(x)\n")
    fs = check(src, get_backend("cpu"), ln)
    assert [f.rule for f in fs] == ["forbidden_op"] and "self.norm" in fs[0].message


def test_kernel_source_writing_to_descriptors_is_denied_but_methods_named_write_are_not():
    honest = candidate("cpu", "relu_ok.py")
    for call in ("write(3, buf, n);", "::write(3, buf, n);", "_exit(0);", "dup2(fd, 1);"):
        src = honest.replace("return out;", call + "\n    return out;")
        assert ("environment", "deny") in rules(src), call
    for call in ("writer.write(buf);", "stream->write(buf);", "rewrite(buf);"):
        assert rules(honest.replace("return out;", call + "\n    return out;")) == [], call


STREAM_MODEL = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.stream = torch.cuda.Stream() if torch.cuda.is_available() else None

    def forward(self, x):
        with torch.cuda.stream(self.stream):
            y = self.ops.launch(x)
{join}        return y
'''


def test_a_side_stream_joined_back_is_a_warning_and_one_never_waited_for_is_denied():
    joined = rules(STREAM_MODEL.format(join="        torch.cuda.current_stream().wait_stream(self.stream)\n"),
                   disabled=["no_kernel", "kernel_not_called"])
    assert joined and set(joined) == {("threads_processes", "warn")}, joined
    host_waits = rules(STREAM_MODEL.format(join="        self.stream.synchronize()\n"),
                       disabled=["no_kernel", "kernel_not_called"])
    assert set(host_waits) == {("threads_processes", "warn")}, host_waits
    never = rules(STREAM_MODEL.format(join=""), disabled=["no_kernel", "kernel_not_called"])
    assert ("threads_processes", "deny") in never, never


def test_a_candidate_with_its_own_streams_is_timed_with_the_device_settled():
    from kforge.verify.static_rules import own_streams
    model = STREAM_MODEL.format(join="")
    assert own_streams(model)
    aliased = model.replace("import torch.nn as nn", "import torch.nn as nn\nfrom torch.cuda import Stream")
    assert own_streams(aliased.replace("torch.cuda.Stream()", "Stream()").replace(
        "with torch.cuda.stream(self.stream):", "if True:"))
    assert own_streams('SRC = "auto s = at::cuda::getStreamFromPool();"')
    assert not own_streams(candidate("cpu", "relu_ok.py"))
    assert not own_streams("import torch\ntorch.cuda.current_stream().synchronize()")
    # The caller's own stream is no stream of the candidate's.
    assert not own_streams("import torch\nwith torch.cuda.stream(torch.cuda.current_stream()):\n    pass")


CPP_STREAMS = """
import torch
from torch.utils.cpp_extension import load_inline
SRC = r\"\"\"
torch::Tensor two_halves(torch::Tensor x) {{
    cudaStream_t s;
    cudaStreamCreate(&s);
    launch_half(x, 0, at::cuda::getCurrentCUDAStream());
    launch_half(x, 1, s);
{join}    return x;
}}
\"\"\"
ext = load_inline(name="kf_two", cpp_sources=[""], cuda_sources=[SRC], functions=["two_halves"])
"""


def test_a_stream_made_in_cpp_is_judged_like_one_made_in_python():
    off = ["kernel_not_called", "no_kernel"]
    joined = rules(CPP_STREAMS.format(join="    cudaStreamSynchronize(s);\n"), disabled=off, backend="cuda")
    assert set(joined) == {("threads_processes", "warn")}, joined
    never = rules(CPP_STREAMS.format(join=""), disabled=off, backend="cuda")
    assert ("threads_processes", "deny") in never, never


def test_a_constant_on_a_backends_flag_torch_does_not_read_is_a_warning():
    # Seen in a published H100 kernel: `torch.backends.cudnn.fastest = True` (no PyTorch release reads it).
    src = ("import torch\nimport torch.nn as nn\ntorch.backends.cudnn.fastest = True\n"
           "torch.backends.cudnn.workspace_limit = 1 << 30\n")
    found = [f for f in check(src, get_backend("cpu"), None, StaticConfig(require_kernel=False))
             if f.rule == "monkey_patch"]
    assert found and all(f.severity == "warn" for f in found), found
    patched = "import torch\ntorch.backends.cudnn.is_acceptable = lambda t: True\n"  # a function replaced
    assert any(f.severity == "deny" for f in check(patched, get_backend("cpu"), None,
                                                     StaticConfig(require_kernel=False)) if f.rule == "monkey_patch")


def test_library_configuration_is_no_patch():
    """What a program assigns in torch's configuration modules configures its own compiled code; the compile
    reference runs with the harness's configuration (tests/sandbox/test_settings.py)."""
    src = ("import torch\nimport torch._inductor.config as inductor_config\n"
           "torch._inductor.config.coordinate_descent_tuning = True\n"
           "inductor_config.triton.cudagraphs = False\n"
           "torch._dynamo.config.cache_size_limit = 64\n"
           "torch._dynamo.config.suppress_errors = True\n"
           "torch.backends.cuda.matmul.allow_tf32 = True\ntorch.backends.cudnn.benchmark = True\n")
    found = [f for f in check(src, get_backend("cpu"), None, StaticConfig(require_kernel=False))
             if f.rule == "monkey_patch"]
    assert found == [], found
    patched = "import torch\ntorch._dynamo.optimize = lambda *a, **k: (lambda f: f)\n"  # torch itself, not its config
    assert any(f.severity == "deny" for f in check(patched, get_backend("cpu"), None,
                                                     StaticConfig(require_kernel=False)) if f.rule == "monkey_patch")


def test_a_kernel_program_bound_to_self_is_no_forbidden_operator():
    """``self.prg.matmul(...)`` (an OpenCL program built in __init__) read as a call of torch's ``matmul``."""
    matmul = resolve_problem("level1/4_Matmul")
    src = '''import numpy as np
import pyopencl as cl
import torch


class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ctx = cl.create_some_context()
        self.prg = cl.Program(self.ctx, "__kernel void matmul(__global float* c) {}").build()
        self.ext = torch.utils.cpp_extension.load_inline(name="m", cpp_sources="", functions=["matmul"])

    def forward(self, a, b):
        self.ext.matmul(a, b)
        return self.prg.matmul(a, b)
'''
    found = [(f.rule, f.severity) for f in check(src, get_backend("opencl"), matmul, StaticConfig())]
    assert ("forbidden_op", "warn") not in found and ("forbidden_op", "deny") not in found, found
    torch_call = src.replace("return self.prg.matmul(a, b)", "return self.ctx.matmul(a, b)")
    assert "forbidden_op" in [f.rule for f in check(torch_call, get_backend("opencl"), matmul, StaticConfig())]
