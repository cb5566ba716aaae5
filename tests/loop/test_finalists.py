"""The best kernel by a rule noise cannot win: a kernel met again is no new result, and competing finalists are
re-timed against each other at the end of the problem."""

import threading
from types import SimpleNamespace

import pytest

from kforge.loop import ProblemResult
from kforge.loop.finalists import MeasuredOnce, settle
from kforge.problems import load_builtin
from kforge.verify.config import VerifyConfig
from kforge.verify.verdict import State, TimingStats, Verdict

(RELU,) = load_builtin(names=["level1/1_ReLU"], size="cpu")


def kernel(name: str) -> str:
    return f"import torch\nclass ModelNew(torch.nn.Module):\n    pass  # kernel {name}\n"


def name_of(source: str) -> str:
    return source.rsplit(" ", 1)[1].strip()


def timed(kernel: str, speedup: float, rel: float = 0.01) -> Verdict:
    def stats(ms):
        return TimingStats(median_ms=ms, mean_ms=ms, std_ms=0.0, n=20, min_ms=ms, rel_err=rel)
    return Verdict(State.CORRECT, "ok", runtime=stats(1.0), ref=stats(speedup), source_hash=kernel)


def test_a_kernel_met_again_pools_its_timings_and_never_becomes_best_again():
    r = ProblemResult(RELU)
    assert r.offer("A", timed("a", 0.14), 0, "eager")
    assert not r.offer("A", timed("a", 5.98), 1, "eager")  # the same source: a lucky timing is no new result
    assert not r.offer("A", timed("a", 0.85), 2, "eager")
    assert r.best_iteration == 0 and r.speedup_eager == pytest.approx(0.85)  # the median of 0.14, 5.98, 0.85
    assert r.speed("eager").spans_one and r.speed("eager").timings == 3
    assert r.offer("B", timed("b", 1.2), 3, "eager")  # another kernel, ranked above A's median
    assert r.best_speedup("compile") == pytest.approx(1.2)  # compile untimed: eager's figure


class FakeVerifier:
    """Times each kernel at its true speed, but the first timing of "b" is a lucky 1.5x."""

    def __init__(self, true: dict[str, float]):
        self.true, self.calls, self.config, self.lucky = true, [], VerifyConfig(), {"B": 1.5}

    def verify(self, problem, candidate, backend, config=None):
        name = name_of(candidate if isinstance(candidate, str) else candidate.source)
        self.calls.append((name, config is not None))
        true = self.true[name]
        if isinstance(true, list):  # one timing after another, as noise has them
            true = true[sum(1 for n, _ in self.calls if n == name) % len(true)]
        return timed(name.lower(), self.lucky.pop(name, true))


def test_measured_once_verifies_a_source_once_per_problem():
    fake = FakeVerifier({"A": 1.0, "B": 1.0})
    v = MeasuredOnce(fake)
    first = v.verify(RELU, kernel("A"), "cpu")
    assert v.verify(RELU, kernel("A"), "cpu") is first and v.verify(RELU, kernel("B"), "cpu") is not first
    assert fake.calls == [("A", False), ("B", False)]
    v.verify(RELU, kernel("A"), "cpu", VerifyConfig())  # a call with its own settings always goes through
    assert len(fake.calls) == 3 and v.config is fake.config  # anything else is the verifier's


def test_finalists_are_retimed_and_the_retiming_chooses_and_reports():
    """Two kernels equally fast (1.0x); one drew a lucky 1.5x and led. Re-timed interleaved, the lucky lead
    is gone, and the figure the problem reports is the re-timed one with its interval."""
    fake = FakeVerifier({"A": [1.02, 0.97, 1.07], "B": 1.0})
    loop = SimpleNamespace(config=SimpleNamespace(speedup_vs="eager"), stop=threading.Event(),
                           agent=SimpleNamespace(backend="cpu"))
    loop.verifier = MeasuredOnce(fake, loop.stop)
    r = ProblemResult(RELU)
    for i, name in enumerate(["A", "B"]):
        r.offer(kernel(name), loop.verifier.verify(RELU, kernel(name), "cpu"), i, "eager")
    assert r.best_code == kernel("B") and r.speedup_eager == pytest.approx(1.5)  # noise leads before the re-timing
    assert settle(loop, RELU, r) == 2
    retimes = [source for source, own in fake.calls if own]
    assert retimes == ["B", "A", "A", "B", "B", "A"] and loop.verifier.retimings == 6  # 3 rounds, rotated
    assert r.best_code == kernel("A") and r.best_iteration == 0 and r.speedup_eager == pytest.approx(1.02)
    s = r.speed("eager")
    assert s.timings == 3 and (s.lo, s.hi) == (pytest.approx(0.97), pytest.approx(1.07)) and s.spans_one


def test_one_correct_kernel_is_not_timed_again():
    fake = FakeVerifier({"A": 2.0})
    loop = SimpleNamespace(config=SimpleNamespace(speedup_vs="eager"), stop=threading.Event(),
                           agent=SimpleNamespace(backend="cpu"), verifier=MeasuredOnce(fake))
    r = ProblemResult(RELU)
    r.offer(kernel("A"), loop.verifier.verify(RELU, kernel("A"), "cpu"), 0, "eager")
    assert settle(loop, RELU, r) == 0 and len(fake.calls) == 1 and r.speedup_eager == pytest.approx(2.0)
