"""A kernel's speedup as noise leaves it: the median of its timings with an interval, and re-timing interleaved."""

import math

import pytest

from kforge.verify.config import VerifyConfig
from kforge.verify.retime import measured, one_timing, retime, timing_only
from kforge.verify.verdict import State, TimingStats, Verdict


def timed(cand_ms: float, eager_ms: float, rel: float = 0.01, compile_ms: float | None = None) -> Verdict:
    def stats(ms):
        return TimingStats(median_ms=ms, mean_ms=ms, std_ms=0.0, n=20, min_ms=ms, rel_err=rel)
    return Verdict(State.CORRECT, "ok", runtime=stats(cand_ms), ref=stats(eager_ms),
                   compile_ref=stats(compile_ms) if compile_ms else None)


def test_one_timing_is_its_ratio_of_medians_widened_by_two_standard_errors():
    s = one_timing(timed(2.0, 3.0, rel=0.03), "eager")
    e = 2 * (2 * 0.03 ** 2) ** 0.5  # the two medians' relative errors (of their logs), in quadrature, twice
    assert (s.value, s.lo, s.hi, s.timings) == (pytest.approx(1.5), pytest.approx(1.5 / math.exp(e)),
                                                pytest.approx(1.5 * math.exp(e)), 1)
    assert s.lo * s.hi == pytest.approx(s.value ** 2)  # symmetric on the log scale, as a ratio's interval is
    assert one_timing(timed(2.0, 3.0), "compile") is None  # torch.compile not timed
    assert one_timing(Verdict(State.NUMERICAL_MISMATCH, "no"), "eager") is None


def test_a_noisy_timings_interval_never_reaches_zero():
    """s·(1-e) was clipped at 0 once e passed 1: tables printed a lower bound of 0.00 for a kernel that ran."""
    s = one_timing(timed(2.0, 3.0, rel=0.6), "eager")  # e = 2·sqrt(2·0.36) ≈ 1.7
    assert s.lo == pytest.approx(1.5 / math.exp(2 * math.sqrt(0.72))) and 0.2 < s.lo < 1.0 < s.hi and s.spans_one
    assert f"{s.lo:.2f}" != "0.00"


def test_the_same_kernel_timed_five_times_is_their_median_not_their_largest():
    """Issue 44: one kernel on a busy machine measured 0.14, 5.98, 5.51, 0.85 and 0.78x; the loop kept 5.98x."""
    timings = [timed(1.0, x) for x in (0.14, 5.98, 5.51, 0.85, 0.78)]
    s = measured(timings, "eager")
    assert s.value == pytest.approx(0.85) and s.timings == 5
    assert (s.lo, s.hi) == (pytest.approx(0.14), pytest.approx(5.98)) and s.spans_one  # not known to be faster
    assert not measured([timed(1.0, 2.0)], "eager").spans_one and measured([], "eager") is None


def test_retime_times_every_kernel_once_a_round_each_round_in_another_order():
    order = []

    def verify(source):
        order.append(source)
        return timed(1.0, 2.0) if source != "broken" else Verdict(State.RUNTIME_ERROR, "crashed")
    out = retime(verify, ["a", "b", "broken"], rounds=3)
    assert order == ["a", "b", "broken", "b", "broken", "a", "broken", "a", "b"]
    assert [len(out[k]) for k in ("a", "b", "broken")] == [3, 3, 0]  # a failed run gives no timing
    stopped = retime(verify, ["a", "b"], rounds=3, stop=lambda: len(order) >= 11)
    assert sum(len(v) for v in stopped.values()) == 2


def test_timing_only_settings_share_the_budget_and_skip_what_was_established():
    cfg = timing_only(VerifyConfig(), rounds=3)
    assert (cfg.trials, cfg.attribution, cfg.skip_timing) == (1, False, False)
    assert cfg.timing.budget_s == pytest.approx(10.0 / 3) and timing_only(VerifyConfig(), 30).timing.budget_s == 1.0
