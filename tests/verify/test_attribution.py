"""Attributing kernels to the candidate, PyTorch or a library, and spotting a reference re-run in PyTorch."""

import ctypes.util
import random
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from kforge.verify.attribution import (
    _HEADER_KERNEL,
    _HEADER_SYMBOLS,
    AGAIN,
    CANDIDATE,
    REFERENCE,
    attribute,
    candidate_symbols,
    demangle,
    elf_functions,
    origin_of,
    replayed,
    summarise,
)

# Names as Kineto reported them on an H100 (torch 2.11, CUDA 13).
SEEN_ON_H100 = {
    "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(cutlass_80_simt_sgemm_256x128_8x4_nn_align1"
    "::Params)": "library",
    "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x64x32_stage5_warpsize2x2x1_g1_tensor"
    "16x8x8_kernel_trt": "library",
    "void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>"
    "(cudnn::engines_precompiled::nchw2nhwc_params_t<float>, float const*, float*)": "library",
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar"
    "(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()"
    "() const::{lambda()#14}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >(int, ...)": "torch",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, ...> >(...)": "torch",
    "triton_poi_fused_add_mul_relu_0": "torch",
    "Memset (Device)": "torch",
    "relu_kernel(float const*, float*, int)": "unknown",
    "tri_relu": "unknown",
}


@pytest.mark.parametrize("name,origin", SEEN_ON_H100.items(), ids=lambda x: str(x)[:40])
def test_origin_by_symbol(name, origin):
    assert origin_of(name, set()) == origin


def test_own_symbols_win_over_patterns():
    # A candidate may call its kernel anything, even a name that looks like a library's.
    assert origin_of("my_gemm_kernel(float const*, float*, int)", {"my_gemm_kernel(float const*, float*, int)"}) \
        == "candidate"
    assert origin_of("aten::mm", set()) == "library" and origin_of("aten::clamp_min", set()) == "torch"


def test_elf_symbols_and_demangling():
    libm = ctypes.util.find_library("m")
    names = elf_functions(f"/lib/x86_64-linux-gnu/{libm}") if libm else set()
    if not names:
        pytest.skip("no libm to read")
    assert {"exp", "log", "pow"} <= names and len(names) > 100
    assert demangle("_Z11relu_kernelPKfPfi") == "relu_kernel(float const*, float*, int)"
    assert demangle("_Z12scale_kernelIfEvPT_S0_i") == "void scale_kernel<float>(float*, float, int)"
    assert demangle("not_mangled") == "not_mangled"
    assert elf_functions("/nonexistent.so") == set()


def every_function(so: str) -> set[str]:
    """What `candidate_symbols` must find: every function the object defines, demangled, that is no header's."""
    return {demangle(n) for n in elf_functions(so) if not _HEADER_SYMBOLS.match(n)}


EXTENSION = r"""
namespace ops { template <typename T, int B> void softmax_kernel(const T* x, T* y, int n) { y[0] = x[n % B]; }
                template void softmax_kernel<float, 256>(const float*, float*, int);
                namespace { void hidden_kernel(float* x) { x[0] = 1; } }
                void (*keep)(float*) = hidden_kernel; }
void relu_kernel(const float* x, float* y, int n) { y[0] = x[n]; }
void k(float* x) { x[0] = 0; }                        // a one-letter name
void relu_kernel_v2(const float* x, float* y) { y[0] = x[0]; }  // a longer name holding another
extern "C" void tri_relu(float* x) { x[0] = 2; }
namespace at { namespace native { template <int N> void vectorized_elementwise_kernel(float* x) { x[0] = N; }
                                   template void vectorized_elementwise_kernel<4>(float*); } }
struct Half { unsigned short bits; };
void cast_kernel(const Half* x, float* y) { y[0] = x[0].bits; }
""" + "".join(f"float noise_{i}(float x) {{ return x * {i}; }}\n" for i in range(300))


def test_candidate_symbols_finds_what_demangling_everything_finds(tmp_path: Path):
    """The candidate's kernels among a profile's names: found by demangling only the symbols that could be one
    of them, with the same answer as demangling every function the object defines."""
    if not shutil.which("g++"):
        pytest.skip("no g++ to build a shared object")
    (tmp_path / "ext.cpp").write_text(EXTENSION)
    so = str(tmp_path / "ext.so")
    subprocess.run(["g++", "-shared", "-fPIC", "-O1", "-o", so, str(tmp_path / "ext.cpp")], check=True)
    everything = every_function(so)
    profiled = everything | {"relu_kernel(float const*, float*, long)", "void softmax_kernel<float, 128>(float const*, "
                             "float*, int)", "tri_relu2", "Memset (Device)", "void at::native::vectorized_elementwise_"
                             "kernel<4>(float*)", "void at::native::vectorized_elementwise_kernel<4, at::native::"
                             "FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>)"}
    found = candidate_symbols([so, so], profiled)
    assert found == {n for n in everything if not _HEADER_KERNEL.match(n)}
    assert {"relu_kernel(float const*, float*, int)", "void ops::softmax_kernel<float, 256>(float const*, float*, int)",
            "ops::(anonymous namespace)::hidden_kernel(float*)", "k(float*)", "tri_relu", "cast_kernel(Half const*, "
            "float*)", "relu_kernel_v2(float const*, float*)"} <= found
    assert candidate_symbols([so], {"relu_kernel(float const*, float*, int)"}) == {"relu_kernel(float const*, float*, "
                                                                                  "int)"}
    assert candidate_symbols([so], set()) == set() and candidate_symbols(["/nonexistent.so"], profiled) == set()


def test_candidate_symbols_on_a_large_real_object():
    """PyTorch's own Python bindings (34k functions): a sample of their names is found as demangling all finds."""
    so = Path(torch.__file__).parent / "lib" / "libtorch_python.so"
    if not so.exists():
        pytest.skip("no libtorch_python.so in this torch")
    everything = sorted(n for n in every_function(str(so)) if not _HEADER_KERNEL.match(n))
    sample = set(random.Random(0).sample(everything, 300))
    assert candidate_symbols([str(so)], sample | {"relu_kernel(float const*, float*, int)"}) == sample


def test_summary_shares_and_top():
    a = summarise({("gemm", "library"): [1, 900.0], ("my_epilogue", "candidate"): [1, 100.0]})
    assert a.kernel_share == pytest.approx(0.1) and a.shares == {"library": 0.9, "candidate": 0.1}
    assert [u.name for u in a.top] == ["gemm", "my_epilogue"] and a.top[0].ms == pytest.approx(0.9)
    assert summarise({}).kernel_share is None


def event(name, start, end, device=True, annotation=False):
    """A profile's FunctionEvent as `attribute` reads it."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType
    return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end), cpu_parent=None, kernels=[],
                           device_type=DeviceType.CUDA if device else DeviceType.CPU, is_user_annotation=annotation)


def test_ranges_on_the_device_timeline_are_not_kernels():
    """A candidate whose extension failed to build fell back to torch.compile: the compiled graph's range, on the
    device's timeline, was taken for an unknown kernel of the candidate's (seen on a published H100 kernel)."""
    profile = [event(CANDIDATE, 0, 100, device=False),
               event("## Call CompiledFxGraph f7bklk32bue ##", 5, 95, annotation=True),
               event("## Call CompiledFxGraph unmarked ##", 5, 95),  # a torch that does not mark annotations
               event("triton_per_fused_addmm_relu_t_1", 10, 40), event("sm90_xmma_gemm_f32f32_tf32f32", 40, 60)]
    a, _ = attribute(profile, cuda=True, so_paths=[], triton_names=set())
    assert a.shares == pytest.approx({"torch": 0.6, "library": 0.4}) and a.kernel_share == 0.0, a.shares
    own = [event(CANDIDATE, 0, 100, device=False), event("fused_mlp_kernel(float const*, float*)", 10, 30)]
    assert attribute(own, cuda=True, so_paths=[], triton_names=set())[0].shares == {"unknown": 1.0}



def test_a_cute_dsl_kernel_is_the_candidates_inside_its_call_and_a_librarys_outside():
    """CuTe DSL names what it compiles kernel_cutlass_<function>_..., which reads as a CUTLASS library's name
    (seen on an H100: every cute oracle judged kernel_unused). Inside the candidate's DSL call it is its own;
    a CUTLASS library kernel there, or that name outside any call of the candidate's, is not."""
    dsl = "kernel_cutlass_relu_kernel_tensorptrf32gmemo4026531841_tensorptrf32gme"
    profile = [event(CANDIDATE, 0, 100, device=False), event("kforge::cute::relu", 5, 50),
               event(dsl, 10, 30), event("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(Params)",
                                         30, 40), event(dsl, 60, 70)]
    a, _ = attribute(profile, cuda=True, so_paths=[], triton_names={"relu"})
    assert a.shares == pytest.approx({"candidate": 0.5, "library": 0.5}), a.shares

def host_event(name, start, end, self_us):
    """A CPU profile's FunctionEvent: its self time apart from its span (children run inside the span)."""
    e = event(name, start, end, device=False)
    e.self_cpu_time_total = self_us
    return e


def host_call(section, start, epilogue_us, mm_us=300.0, mms=1):
    """One call of a forward on a CPU: a library GEMM (or ``mms`` of them), then the candidate's own epilogue."""
    end = start + mms * mm_us + epilogue_us + 10
    return [host_event(section, start, end, 10), *[host_event("aten::mm", start + 1 + i * mm_us, start + (i + 1) *
                                                                mm_us, mm_us) for i in range(mms)],
            host_event("kforge::ext::bias_gelu", end - epilogue_us - 5, end - 5, epilogue_us)]


def test_on_a_cpu_each_operator_counts_its_least_time_over_the_calls_before_the_judged_one():
    """On a busy 2-core machine the judged call's own epilogue was preempted (7.7 ms where it takes 0.2): its share
    read 92% where it is 36%, and the strict rules' verdict moved with the load. The calls just before it count
    each operator's least time."""
    calm, preempted = 170.0, 7700.0
    judged = host_call(CANDIDATE, 10_000, preempted)
    alone, _ = attribute(judged, cuda=False, so_paths=[], triton_names=set())
    assert alone.kernel_share == pytest.approx(preempted / (preempted + 300), abs=1e-3)
    # the reference's section and two calls before the judged one: one of them preempted in its GEMM instead
    profile = [*host_call(REFERENCE, 0, 0), *host_call(AGAIN, 500, calm, mm_us=5000), *host_call(AGAIN, 6000, calm),
               *judged]
    a, ops = attribute(profile, cuda=False, so_paths=[], triton_names=set())
    assert a.kernel_share == pytest.approx(calm / (calm + 300), abs=1e-3), a.shares
    assert [(u.name, u.calls) for u in a.top] == [("aten::mm", 1), ("ext::bias_gelu", 1)]
    assert ops[CANDIDATE]["aten::mm"][0] == 1  # what `replayed` reads: the judged call's operators alone
    # An operator a repeat called a different number of times keeps the judged call's time.
    other = [*host_call(AGAIN, 500, calm, mms=2), *judged]
    assert attribute(other, cuda=False, so_paths=[], triton_names=set())[0].top[0].ms == pytest.approx(0.3)


def test_on_a_cpu_views_and_no_op_casts_are_no_ones_work():
    """A bf16 kernel whose forward views its input and casts it to the dtype it has (metadata alone) lost 14% of its
    share to them on a small problem, under the strict rules' 90%; a real cast (``aten::_to_copy``) still counts."""
    call = [host_event(CANDIDATE, 0, 200, 5), host_event("aten::view", 10, 20, 10), host_event("aten::to", 20, 25, 5),
            host_event("aten::lift_fresh", 25, 28, 3), host_event("kforge::ext::layernorm", 30, 130, 100)]
    a, _ = attribute(call, cuda=False, so_paths=[], triton_names=set())
    assert a.kernel_share == 1.0, a.shares
    cast = call + [host_event("aten::_to_copy", 130, 180, 50)]
    assert attribute(cast, cuda=False, so_paths=[], triton_names=set())[0].kernel_share == pytest.approx(100 / 150)


def ops(ref, cand):
    return {REFERENCE: ref, CANDIDATE: cand}


def test_replayed_needs_every_computing_operator_on_as_much_data():
    ref = {"aten::addmm": [1, 900.0, 10_000], "aten::gelu": [1, 100.0, 4_000], "aten::copy_": [1, 50.0, 4_000]}
    # linear + gelu both ran in PyTorch on the full data: the reference was re-run.
    assert replayed(ops(ref, {"aten::addmm": [1, 880.0, 10_000], "aten::gelu": [1, 90.0, 4_000]})) == \
        ["aten::addmm", "aten::gelu"]
    # The candidate's kernel replaced gelu: a library GEMM plus its own epilogue is not a replay.
    assert replayed(ops(ref, {"aten::addmm": [1, 880.0, 10_000]})) is None
    # A GEMM of K = 8192 dwarfs its epilogue (GroupNorm and Swish, each under 1% of the reference's time): the
    # candidate's own kernel for all of the epilogue beside PyTorch's GEMM is still no replay, and PyTorch's
    # epilogue beside the GEMM still is.
    big = {"aten::addmm": [1, 9_900.0, 8_000_000], "aten::native_group_norm": [1, 50.0, 131_072],
           "aten::sigmoid": [1, 30.0, 131_072], "aten::mul": [1, 20.0, 262_144]}
    assert replayed(ops(big, {"aten::addmm": [1, 9_800.0, 8_000_000]})) is None
    assert replayed(ops(big, dict(big))) == sorted(big)
    # A two-stage reduction finishes in PyTorch on a few partial sums: not the reference's sum.
    assert replayed(ops({"aten::sum": [1, 20.0, 65_536]}, {"aten::sum": [1, 15.0, 1_024]})) is None
    # One ReLU of ten replaced by the candidate's kernel: not every call ran in PyTorch.
    assert replayed(ops({"aten::relu": [10, 100.0, 10_000]}, {"aten::relu": [9, 90.0, 9_000]})) is None
    # Layout operators alone never make a replay.
    assert replayed(ops({"aten::copy_": [1, 10.0, 100]}, {"aten::copy_": [1, 10.0, 100]})) is None
    assert replayed(ops({}, {})) is None


def test_a_window_reads_one_pass_of_each_section_by_time():
    """A training step's passes: the backward's kernels run on autograd's threads, outside the section's nesting,
    so an event belongs where its start falls in time."""
    from kforge.verify.attribution import spans
    from kforge.verify.backward import BACKWARD, FORWARD
    profile = [event(REFERENCE, 0, 100, device=False), event(FORWARD, 1, 40, device=False),
               event(BACKWARD, 41, 99, device=False), event(CANDIDATE, 200, 300, device=False),
               event(FORWARD, 201, 240, device=False), event(BACKWARD, 241, 299, device=False),
               event("my_fwd_kernel(float*)", 210, 230), event("my_bwd_kernel(float*)", 250, 260),
               event("at::native::vectorized_elementwise_kernel<>", 262, 292)]
    assert spans(profile, BACKWARD) == {REFERENCE: (41, 99), CANDIDATE: (241, 299)}
    whole, _ = attribute(profile, cuda=True, so_paths=[], triton_names=set())
    back, _ = attribute(profile, cuda=True, so_paths=[], triton_names=set(), window=BACKWARD)
    fwd, _ = attribute(profile, cuda=True, so_paths=[], triton_names=set(), window=FORWARD)
    assert fwd.shares == {"unknown": 1.0} and back.shares == pytest.approx({"unknown": 0.25, "torch": 0.75})
    assert whole.total_ms == pytest.approx(0.06) and back.total_ms == pytest.approx(0.04)
