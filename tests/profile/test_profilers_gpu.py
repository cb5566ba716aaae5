"""ncu (and nsys, where it can make a report) on real kernels, through the profiler the loop uses (run on the device)."""

import re
import shutil

import pytest

from kforge.backends import get_backend
from kforge.problems import builtin_solution_path, resolve_problem
from kforge.profile import Profiler, ProfilerUnavailable
from kforge.profile.digest import build
from kforge.profile.ncu import find_ncu
from kforge.profile.rules import classify
from kforge.sandbox.ceilings import floor_ms

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def softmax():
    return resolve_problem("level1/2_Softmax", size="gpu")


@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_ncu_profiles_the_candidates_kernels_into_a_digest(pool, tmp_path, softmax, backend):
    if find_ncu() is None:
        pytest.skip("ncu is not installed here")
    b = get_backend(backend)
    code = builtin_solution_path(softmax, backend).read_text()
    prof = Profiler("ncu", pool, tmp_path, iterations=3).run(softmax, code, b)
    assert prof.tool == "ncu" and prof.kernels and prof.total_ms > 0
    assert prof.raw_files and all(p for p in prof.raw_files.values())
    top = prof.top(1)[0]
    # Only the candidate's kernels (each named in its source): no L2-flush fill, no reference.
    for k in prof.kernels:
        assert re.sub(r"^void\s+", "", k.name).split("(")[0].split("<")[0].strip() in code, k.name
    for metric in ("dram_pct", "sm_pct", "occupancy_pct", "registers"):
        assert metric in top.metrics, sorted(top.metrics)
    assert 0 < top.metrics["dram_pct"] <= 100 and top.metrics["registers"] > 0
    kind = pool.kinds_for("cuda")[0]
    ceilings = pool.ceilings(kind, b.spec())
    d = build(softmax, prof, ceilings=ceilings, floor_ms=floor_ms(softmax, ceilings, "cuda"))
    # A softmax over a large tensor moves bytes; a decent kernel sits on the memory roofline.
    assert d.bound == "memory", d
    assert 0.05 < d.speed_of_light <= 1.25, d.speed_of_light
    finding = classify(d)
    assert finding.rule and finding.action and finding.evidence


def test_nsys_reports_or_says_why_not(pool, tmp_path, softmax):
    code = builtin_solution_path(softmax, "cuda").read_text()
    try:
        prof = Profiler("nsys", pool, tmp_path).run(softmax, code, get_backend("cuda"))
    except ProfilerUnavailable as exc:
        # On the machines kforge was tested on, nsys writes a .qdstrm and no report; the message says so.
        assert "nsys" in str(exc).lower() or shutil.which("nsys") is None, exc
        return
    assert prof.kernels and prof.total_ms > 0


@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_in_the_backward_mode_ncu_profiles_the_backward_kernels_too(pool, tmp_path, backend):
    """A training step's range is process-wide (start/end): autograd launches the backward's kernels from its own
    threads, which a push/pop range on the calling thread does not cover."""
    if find_ncu() is None:
        pytest.skip("ncu is not installed here")
    from kforge.verify import VerifyConfig
    softmax = resolve_problem("level1/2_Softmax", size="gpu", overrides={"BATCH": 512})
    code = builtin_solution_path(softmax, backend, backward=True).read_text()
    prof = Profiler("ncu", pool, tmp_path, iterations=2).run(softmax, code, get_backend(backend),
                                                             config=VerifyConfig(backward=True).to_dict())
    names = " ".join(k.name for k in prof.kernels)
    assert "softmax_bwd_kernel" in names and "softmax_kernel" in names, names
