"""The extension builder: its bookkeeping of failed builds (what a verification's run phase is told), and
``load`` from source files, cached by what the files hold rather than where they lie."""

import sys
from pathlib import Path

import pytest
import torch

from kforge.backends.build import Builder, CompilationError

SOURCE = "int f() { return 1 }"  # a missing semicolon
MISSING_SEMICOLON = "expected .;. before"  # the compiler quotes in the locale's quotation marks


def test_a_build_known_to_have_failed_fails_at_once_with_its_log(tmp_path):
    builder = Builder(tmp_path)
    key = builder.key("kf_fails", [SOURCE], None, {})
    builder.known_failures = {key: "main.cpp:1: error: expected ';' before '}' token"}
    with pytest.raises(CompilationError, match="expected ';'"):
        builder.load_inline("kf_fails", [SOURCE])
    assert builder.failed == {key: builder.known_failures[key]}
    assert not (tmp_path / "builds").exists() and builder.built == []  # nothing was compiled
    # Another source is not taken for the failed one.
    assert builder.key("kf_fails", ["int f() { return 1; }"], None, {}) != key


# -- load(): sources a model wrote to files ------------------------------------------------------------

FUSED_H = "inline float relu_of(float v) { return v > 0.0f ? v : 0.0f; }\n"
FUSED_CPP = r"""
#include <torch/extension.h>
#include "fused.h"

torch::Tensor relu_forward(torch::Tensor input) {
    auto x = input.contiguous();
    auto out = torch::empty_like(x);
    const float* src = x.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) dst[i] = relu_of(src[i]);
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("relu_forward", &relu_forward, "ReLU"); }
"""
NAME = "kf_fused_relu"


def write_kernel(directory, cpp=FUSED_CPP, header=FUSED_H, file="fused.cpp") -> str:
    """What models do: write the kernel and its header side by side, then give `load` the .cpp's path."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "fused.h").write_text(header)
    (directory / file).write_text(cpp)
    return str(directory / file)


#: The flags the suite's C++ kernels build with (the corpora's, the oracle's): the session's precompiled header
#: is made for these, so these builds use it.
FLAGS = ["-O3", "-fopenmp"]


def load_from(builder, directory, **kw):
    """A model's call: its own build directory, flags, and verbose off."""
    return builder.load(name=NAME, sources=[write_kernel(directory, **kw)], extra_cflags=FLAGS,
                        extra_ldflags=["-fopenmp"], build_directory=str(directory / "build"), verbose=False)


def cache_with_the_sessions_pch(root: Path, session_cache: Path) -> tuple[Path, bool]:
    """A build cache of the test's own (its builds and hits are the test's to count) whose precompiled headers
    are the session's, and whether one is there to use: one is ~800 MB and 30-60 s of compiling, and halves each
    build that uses it. Where the session has none yet (a cold cache: the background build makes it first), the
    test builds without one rather than wait for it, as before."""
    shared = session_cache / "ext" / "pch"
    shared.mkdir(parents=True, exist_ok=True)
    (root / "cache").mkdir(parents=True)
    (root / "cache" / "pch").symlink_to(shared, target_is_directory=True)
    return root / "cache", pch_ready(root / "cache")


def pch_ready(cache: Path) -> bool:
    """Whether a finished precompiled header is in ``cache`` (the builder writes it under its final name last)."""
    return any((cache / "pch").glob("*/torch/extension.h.gch"))


@pytest.fixture(scope="module")
def built(tmp_path_factory, cache_dir):
    """The build phase: a worker in its own directory builds the kernel once (10-30 s on 2 cores with the PCH)."""
    root = tmp_path_factory.mktemp("load")
    cache, use_pch = cache_with_the_sessions_pch(root, cache_dir)
    builder = Builder(cache, use_pch=use_pch)
    ext = load_from(builder, root / "build_phase")
    return root, builder, ext


def test_load_builds_into_the_cache_not_the_candidates_directory(built):
    root, builder, ext = built
    assert len(builder.built) == 1 and builder.hits == [] and builder.failed == {}
    assert builder.built[0].startswith(str(root / "cache" / "builds"))
    assert not (root / "build_phase" / "build").exists()
    x = torch.randn(257)
    assert torch.equal(ext.relu_forward(x), x.clamp_min(0))


def test_the_same_files_in_another_directory_are_a_cache_hit(built, tmp_path):
    root, first, _ = built
    run_phase = Builder(root / "cache", use_pch=pch_ready(root / "cache"))  # another process, in the run phase's own directory
    ext = load_from(run_phase, tmp_path / "run_phase")
    # loaded, not compiled: the builder counts what it compiled (no wall-clock bound: a busy machine is slow)
    assert run_phase.hits == first.built and run_phase.built == [], (run_phase.hits, run_phase.built)
    x = torch.randn(33)
    assert torch.equal(ext.relu_forward(x), x.clamp_min(0))


def test_a_changed_source_is_built_again(built, tmp_path):
    root, first, _ = built
    builder = Builder(root / "cache", use_pch=pch_ready(root / "cache"))
    leaky = FUSED_CPP.replace("dst[i] = relu_of(src[i]);", "dst[i] = src[i] > 0.0f ? src[i] : 0.5f * src[i];")
    ext = load_from(builder, tmp_path / "changed", cpp=leaky)
    assert len(builder.built) == 1 and builder.built != first.built and builder.hits == []
    x = torch.randn(64)
    assert torch.allclose(ext.relu_forward(x), torch.where(x > 0, x, 0.5 * x))


def test_the_key_is_what_is_built_not_where(tmp_path):
    builder = Builder(tmp_path / "cache")

    def key(directory, flags=("-O2",), **kw):
        return builder.file_key(NAME, [write_kernel(tmp_path / directory, **kw)], {
            "extra_cflags": list(flags), "build_directory": str(tmp_path / directory / "build"), "verbose": True})
    base = key("a")
    assert key("b") == base  # another directory, another build_directory, verbose: the same build
    assert key("c", header=FUSED_H.replace("? v : 0.0f", "? v : -0.0f")) != base  # a local header it includes
    assert key("d", cpp=FUSED_CPP + "\n// tuned\n") != base
    assert key("e", file="kernel.cpp") != base  # the basename: .cpp or .cu decides how torch builds it
    assert key("f", flags=("-O3",)) != base
    # An include path that is the sources' own (temporary) directory counts by the headers in it.

    def own_include(directory, **kw):
        src = write_kernel(tmp_path / directory, **kw)
        return builder.file_key(NAME, [src], {"extra_cflags": ["-O2"], "extra_include_paths": [str(Path(src).parent)]})
    assert own_include("h") == own_include("i") != base
    assert own_include("j", header=FUSED_H + "\n// tuned\n") != own_include("h")
    # Positional arguments are torch's: load(name, sources, extra_cflags) is the keyword call's build.
    builder.known_failures = {key("g"): "fused.cpp: error: kf-known"}
    with pytest.raises(CompilationError, match="kf-known"):
        builder.load(NAME, [str(tmp_path / "g" / "fused.cpp")], ["-O2"])


def test_a_missing_source_is_the_candidates_error_not_a_compilation_failure(tmp_path):
    builder = Builder(tmp_path / "cache")
    with pytest.raises(FileNotFoundError, match="nowhere.cpp"):
        builder.load(name=NAME, sources=[str(tmp_path / "nowhere.cpp")])
    assert builder.failed == {} and builder.built == []


def test_a_failed_load_raises_the_compilers_words_and_fails_at_once_in_the_run_phase(tmp_path):
    build_phase = Builder(tmp_path / "cache", use_pch=False)
    sources = [write_kernel(tmp_path / "build_phase", cpp=SOURCE, file="broken.cpp")]
    with pytest.raises(CompilationError, match=MISSING_SEMICOLON) as caught:
        build_phase.load(name="kf_broken", sources=sources)
    assert list(build_phase.failed.values()) == [caught.value.log] and build_phase.built == []
    # The run phase is told (the harness copies the build phase's failures), in its own directory.
    run_phase = Builder(tmp_path / "cache", use_pch=False)
    run_phase.known_failures = dict(build_phase.failed)
    untouched = tmp_path / "cache" / "builds" / next(iter(build_phase.failed)) / "kf-untouched"
    untouched.touch()  # a build starts by emptying its directory
    with pytest.raises(CompilationError, match=MISSING_SEMICOLON):
        run_phase.load(name="kf_broken", sources=[write_kernel(tmp_path / "run_phase", cpp=SOURCE, file="broken.cpp")],
                       verbose=True)
    assert untouched.exists() and run_phase.failed == build_phase.failed and run_phase.built == []


def test_the_recorder_sees_extensions_built_through_load(built, tmp_path, monkeypatch):
    """In a run worker the backend installs the builder, then the recorder wraps what is installed: a module
    from ``load`` must reach the recorder (its .so, for attribution by symbol; its functions, wrapped)."""
    import torch.utils.cpp_extension as ce
    from torch.cuda import graphs

    from kforge.backends import WorkerContext, get_backend
    from kforge.sandbox.recorder import Recorder
    for attr in ("load", "load_inline"):  # both are put back after the test
        monkeypatch.setattr(ce, attr, getattr(ce, attr))
    monkeypatch.setattr(graphs.CUDAGraph, "replay", graphs.CUDAGraph.replay)
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    root, first, _ = built
    backend = get_backend("cpu")
    backend.prepare(WorkerContext(cache_dir=str(root / "cache")))  # as the harness's setup does, in this order
    recorder = Recorder()
    recorder.install()

    from torch.utils.cpp_extension import load  # the candidate's import, after both
    ext = load(name=NAME, sources=[write_kernel(tmp_path / "run_phase")], extra_cflags=FLAGS, extra_ldflags=["-fopenmp"])
    assert backend.builder.hits == first.built  # the builder served it ...
    assert recorder.so_paths and recorder.so_paths[0].startswith(first.built[0])  # ... and the recorder saw it
    recorder.start("profile")
    x = torch.randn(16)
    assert torch.equal(ext.relu_forward(x), x.clamp_min(0)) and recorder.calls == 1
    recorder.stop()
