"""Timing on values the candidate has not seen (`kforge.verify.timed.TimedRounds._on_fresh_values`): a result kept by
the inputs' contents is right on every repeat, and fast; its runtime is its calls on fresh values."""

from types import SimpleNamespace

import pytest

from kforge.verify.timed import TimedRounds


class Rounds(TimedRounds):
    def __init__(self):
        self.notes = []


def sampler(cand, ref):
    return SimpleNamespace(samples={"cand": cand, "ref": ref})


def test_a_result_kept_by_input_is_timed_on_fresh_values():
    rounds = Rounds()
    # a memoised GEMM: 0.2 ms on the repeats, 47 ms on each first sight of new values; eager steady at 12 ms
    stats = rounds._on_fresh_values(sampler([0.2] * 190 + [47.0] * 6, [12.0] * 196),
                                    {"cand": [(47.0, 47.1), (49.0, 49.1)], "ref": [(12.5, 12.6), (11.9, 12.0)]})
    assert stats is not None and stats.median_ms == 48.0 and stats.n == 2
    assert "it hands back results kept by input, so its runtime is its calls on fresh values (2)" in rounds.notes[0]


def test_rounds_where_eager_was_still_warming_up_do_not_excuse_a_memo():
    """The first rechecks fall on rounds 3 and 7, where eager's calls still took 36 ms against its median of 11: read
    as a slow machine, they let a memo pass two runs in five. Those rounds are set aside, the steady ones judge."""
    rounds = Rounds()
    fresh = {"cand": [(46.0, 46.1), (47.0, 47.1), (46.5, 46.6), (48.0, 48.1)],
             "ref": [(35.8, 35.9), (35.3, 35.4), (10.9, 11.0), (10.8, 10.9)]}
    stats = rounds._on_fresh_values(sampler([0.47] * 190 + [46.0] * 4, [11.2] * 194), fresh)
    assert stats is not None and stats.n == 2 and stats.median_ms == pytest.approx(47.25)


def test_an_honest_kernel_or_a_slow_moment_keeps_its_timing():
    rounds = Rounds()
    # honest: its fresh calls are as fast as the others (some slower: the machine's noise)
    assert rounds._on_fresh_values(sampler([10.0] * 100, [12.0] * 100),
                                   {"cand": [(10.5, 10.6), (31.0, 31.1)], "ref": [(12.0, 12.1)]}) is None
    # every program slow on those rounds: the machine, not the candidate
    assert rounds._on_fresh_values(sampler([1.0] * 100, [12.0] * 100),
                                   {"cand": [(40.0, 40.1)], "ref": [(30.0, 30.1)]}) is None
    assert rounds._on_fresh_values(sampler([1.0] * 100, [12.0] * 100), {"cand": [], "ref": []}) is None
    assert rounds.notes == []
