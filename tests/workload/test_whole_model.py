"""The built-in workload end to end on cpu: the oracle's kernels put back, the whole model verified.

Slow: the five hand-written C++ kernels are built (about 15 s each on two cores, after the precompiled
header's first build).
"""

from __future__ import annotations

import re

import pytest

from kforge.llm.base import CallContext, ModelConfig
from kforge.llm.offline import OracleModel
from kforge.problems import load_problem_file
from kforge.verify import Verifier, VerifyConfig
from kforge.workload.assemble import RegionKernel, evaluate
from kforge.workload.extract import extract
from kforge.workload.profile import profile_model

from .helpers import BLOCK

pytestmark = pytest.mark.slow

CHECK = VerifyConfig(skip_timing=True, compile_ref=False, trials=2)


@pytest.fixture(scope="module")
def oracle_kernels(pool, tmp_path_factory):
    problem = load_problem_file(BLOCK, size="cpu")
    prof = profile_model(problem, "cpu", pool, iterations=1, warmup=1)
    w = extract(prof, problem, tmp_path_factory.mktemp("block"), cover=1.0)
    oracle = OracleModel(ModelConfig(name="oracle"))
    kernels = {}
    for r in w.regions:
        region = w.load_region(r)
        reply = oracle.complete([], CallContext(problem=region, backend="cpu", problem_key=region.key))
        assert "not an LLM" in reply.text and r.equivalent in reply.text
        kernels[r.name] = re.search(r"```python\n(.*)```", reply.text, re.S).group(1)
    return problem, w, kernels


def test_oracle_kernels_put_back_verify_correct(oracle_kernels, pool):
    problem, w, kernels = oracle_kernels
    best = {name: RegionKernel(src, 2.0) for name, src in kernels.items()}
    del best[w.region("norm").name]  # a region no kernel solved keeps the model's module
    with Verifier(CHECK, pool=pool) as verifier:
        result = evaluate(w, verifier, "cpu", best, problem=problem)
    assert result.correct, (result.state, result.message)
    assert set(result.replaced) == {r.name for r in w.regions} - {w.region("norm").name}
    assert "_kf_r1_ModelNew" in result.source and "load_inline" in result.source
    assert result.bound == pytest.approx(1 / (1 - result.replaced_share + result.replaced_share / 2))


def test_a_wrong_region_kernel_is_caught_by_the_whole_model_check(oracle_kernels, pool):
    problem, w, kernels = oracle_kernels
    name = w.region("gate_norm").name
    # off by a scale, in the Python around the (unchanged, already built) kernel
    wrong = kernels[name].replace("return _ext.rmsnorm_silu_gate_forward(x, g, self.weight, self.eps)",
                                  "return _ext.rmsnorm_silu_gate_forward(x, g, self.weight, self.eps) * 1.001")
    assert wrong != kernels[name]
    best = {n: RegionKernel(src) for n, src in kernels.items()}
    best[name] = RegionKernel(wrong)
    with Verifier(CHECK, pool=pool) as verifier:
        result = evaluate(w, verifier, "cpu", best, problem=problem)
    assert result.state == "numerical_mismatch", (result.state, result.message)
    assert result.bound is None  # speedups unknown


def test_the_bound_and_the_end_to_end_speedup_come_from_the_same_retiming(oracle_kernels):
    """The model's own modules as kernels, timed on a busy machine: every figure is the median of three
    interleaved rounds, each with the range of its rounds; the bound is computed from the regions' re-timed
    figures (not the speedups the loop handed in), so both say "not known to be faster" alike."""
    from kforge.verify.verdict import State, TimingStats, Verdict
    problem, w, kernels = oracle_kernels
    rounds: dict[str, int] = {}

    class Busy:  # each program: 1.0x, then 0.6x, then 1.5x
        config = VerifyConfig(compile_ref=False)

        def verify(self, prob, source, backend, config=None):
            i = rounds[prob.key] = rounds.get(prob.key, -1) + 1
            s = (1.0, 0.6, 1.5)[i % 3] if config is not None else 9.0  # the first, full verification: a lucky 9x

            def stats(ms):
                return TimingStats(median_ms=ms, mean_ms=ms, std_ms=0.0, n=20, min_ms=ms, rel_err=0.01)
            return Verdict(State.CORRECT, "ok", runtime=stats(1.0), ref=stats(s))
    result = evaluate(w, Busy(), "cpu", {name: RegionKernel(src, 5.0) for name, src in kernels.items()},
                      problem=problem)
    assert result.correct and (result.speedup_eager, result.speedup_lo, result.speedup_hi) == (1.0, 0.6, 1.5)
    assert all((r.speedup, r.speedup_lo, r.speedup_hi) == (1.0, 0.6, 1.5) for r in result.regions)
    assert result.bound == pytest.approx(1.0, abs=0.01) and result.bound_lo < 1.0 < result.bound_hi
    # The assembled model: verified, then three rounds; each region: three rounds (the loop verified it).
    assert rounds.pop(problem.key) == 3 and list(rounds.values()) == [2] * len(w.regions)
    assert "0.99x [0.60-1.50] ~" in result.summary() or "1.00x [0.60-1.50] ~" in result.summary()
