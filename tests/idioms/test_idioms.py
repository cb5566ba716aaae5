"""Candidates written the way models write them: honest ones must verify `correct`, dishonest ones must not.

Honest (``h_*``): the extension on ``self``, reached with ``getattr``, inside ``torch.autograd.Function``,
built in ``__init__`` or lazily, behind a helper class, raw pointers, an unused try/except fallback,
speed settings, a library GEMM with the candidate's own epilogue, a two-stage reduction finished in
PyTorch, a stream of its own joined back, a runtime setting such as ``CUDA_MODULE_LOADING``, every output of
an all-zeros problem written over a zeros fill, a CuPy ``RawKernel`` (cuda, where CuPy is installed), a class bound
to ``ModelNew`` by an assignment or a factory, a stateful RNN cell (a hidden state kept between calls), a build
verbosity read from the environment beside torch's compiler configuration, and a kernel that computes what the
reference itself discards (``kernel_unused``, no decoy).
Dishonest (``d_*``): a dummy launch, a dead fast path, a fallback that runs, a result thrown away, C++ that
calls a torch operator, a no-op write on PyTorch's answer, a kernel on a slice of it, a copy of a library
answer, a stream joined only on a dead branch, a kernel on a dummy tensor beside the reference's own dead code.
Each file's header says what it expects (see tests/exploits/test_corpus.py).
"""

from pathlib import Path

import pytest

from tests.exploits.test_corpus import check, header

HERE = Path(__file__).parent


def cases(backend: str):
    return sorted((HERE / backend).glob("*.py"))


def test_the_corpus_has_what_the_issue_asks_for():
    for backend, honest, dishonest in (("cpu", 10, 6), ("cuda", 10, 6), ("triton", 6, 4), ("opencl", 4, 3)):
        expects = [header(p)["expect"] for p in cases(backend)]
        assert expects.count("correct") >= honest, backend
        assert len(expects) - expects.count("correct") >= dishonest, backend


@pytest.mark.parametrize("path", cases("cpu"), ids=lambda p: p.stem)
def test_cpu_idiom(pool, path):
    v = check(pool, path, "cpu", "cpu")
    if header(path)["expect"] == "correct":
        assert v.kernel_share is not None and v.kernel_share > 0, v.summary()
        if "degenerate" in v.problem_flags:  # all-zeros outputs over a zeros fill: the dataflow cannot tell
            assert v.attribution.output_from_kernel is not False, v.summary()
        else:
            assert v.attribution.output_from_kernel, v.summary()
    if path.stem in ("h_load_in_init", "h_sources_written_then_load"):
        # Built in ModelNew.__init__, or with load() from files written into the phase's own directory: the build
        # phase builds it (constructing the model once), and the run phase loads it from the cache.
        assert v.build["built"] or v.build["cached"], v.build
        assert v.phases.get("load", 0) < 5, v.phases


@pytest.mark.parametrize("path", cases("opencl"), ids=lambda p: p.stem)
def test_opencl_idiom(pool, path):
    v = check(pool, path, "opencl", "cpu")
    if header(path)["expect"] == "correct":  # PoCL runs the kernels: the candidate's share and dataflow are measured
        assert v.kernel_share is not None and v.kernel_share > 0, v.summary()
        assert v.attribution.output_from_kernel, v.summary()


def test_a_build_the_candidate_caught_failing_is_reported_and_not_compiled_again(pool):
    """The build phase saw the extension fail (the candidate caught it); the run phase is told, fails the same
    build at once with the same compiler log, and the verdict is the compilation failure."""
    v = check(pool, HERE / "cpu" / "d_guarded_load_build_fails.py", "cpu", "cpu")
    assert v.build["failed"] == 1 and v.build["built"] == [], v.build
    assert "expected" in v.evidence.compiler_log and v.phases.get("load", 0) < 1, v.phases


@pytest.mark.gpu
@pytest.mark.parametrize("path", cases("cuda"), ids=lambda p: p.stem)
def test_cuda_idiom(pool, path):
    v = check(pool, path, "cuda", "gpu")
    if header(path)["expect"] == "correct":
        assert v.kernel_share is not None and v.kernel_share > 0, v.summary()
    if path.stem in ("h_load_if_cuda_available", "d_guarded_load_build_fails", "h_load_in_init",
                     "h_sources_written_then_load"):
        # Built only `if torch.cuda.is_available()` or in __init__: the build phase (no GPU visible) still tried it.
        assert v.build["built"] or v.build["cached"] or v.build.get("failed"), v.build
    if path.stem == "h_init_on_device_then_load":  # constructing it without a GPU fails before the build
        assert not (v.build["built"] or v.build["cached"]), v.build


@pytest.mark.gpu
@pytest.mark.parametrize("path", cases("triton"), ids=lambda p: p.stem)
def test_triton_idiom(pool, path):
    v = check(pool, path, "triton", "gpu")
    if header(path)["expect"] == "correct":
        assert v.kernel_share is not None and v.kernel_share > 0, v.summary()


INIT_RAISES = """
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        raise RuntimeError("kf-init-raised")
        self.ext = load_inline(name="kf_never", cpp_sources=["int f() { return 1; }"], functions=["f"])

    def forward(self, x):
        return self.ext.f(x)
"""

INIT_BUILD_FAILS = """
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SRC = "torch::Tensor relu_forward(torch::Tensor x) { return x.clamp_min(0) }"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = load_inline(name="kf_idiom_init_typo", cpp_sources=[SRC], functions=["relu_forward"])

    def forward(self, x):
        return self.ext.relu_forward(x)
"""


def test_constructing_the_model_in_the_build_phase_leaves_other_errors_to_the_run(pool, tmp_path):
    path = tmp_path / "init_raises.py"
    path.write_text("# expect: runtime_error\n" + INIT_RAISES)
    v = check(pool, path, "cpu", "cpu")
    assert "kf-init-raised" in (v.evidence.traceback or v.message) and not v.build.get("failed"), v.summary()


def test_a_build_failing_in_init_fails_in_the_build_phase(pool, tmp_path):
    path = tmp_path / "init_build_fails.py"
    path.write_text("# expect: compilation_failure\n" + INIT_BUILD_FAILS)
    v = check(pool, path, "cpu", "cpu")
    assert "expected" in v.evidence.compiler_log and "load" not in (v.phases or {}), (v.phases, v.summary())
