"""The adaptive stopping rule for timed rounds (the clocks are `kforge.backends.clocks`)."""

from __future__ import annotations

from typing import Callable

from .config import TimingConfig
from .verdict import TimingStats, median_rel_err


class Sampler:
    """Collects (device ms, host ms) per program and decides when the medians are stable enough."""

    def __init__(self, labels: list[str], cfg: TimingConfig, now: Callable[[], float], deadline: float | None = None):
        self.cfg = cfg
        self.deadline = deadline
        """When the rounds stop whatever their count (in ``now``'s clock): the timing phase's own budget."""
        self.samples: dict[str, list[float]] = {k: [] for k in labels}
        self.host: dict[str, list[float]] = {k: [] for k in labels}
        self._now = now
        self._start = self._last = now()
        self._longest_round = 0.0
        self.stop_reason = ""

    def add(self, label: str, device_ms: float, host_ms: float) -> None:
        self.samples[label].append(device_ms)
        self.host[label].append(host_ms)

    def elapsed(self) -> float:
        return self._now() - self._start

    def done(self, rounds: int) -> bool:
        cfg = self.cfg
        now = self._now()
        self._longest_round, self._last = max(self._longest_round, now - self._last), now
        if rounds >= cfg.max_trials:
            self.stop_reason = f"max_trials ({cfg.max_trials}) reached"
            return True
        if rounds >= cfg.min_trials and all(median_rel_err(s) <= cfg.target_rel_err
                                            for s in self.samples.values() if s):
            self.stop_reason = f"medians within {cfg.target_rel_err:.1%}"
            return True
        if self.elapsed() > cfg.budget_s and rounds >= min(cfg.min_trials, 3):
            self.stop_reason = f"time budget ({cfg.budget_s:g} s) spent after {rounds} rounds"
            return True
        if self.deadline is not None and rounds >= 1 and now + self._longest_round >= self.deadline:
            self.stop_reason = f"the timing phase's limit reached after {rounds} rounds ({self.spread()})"
            return True
        return False

    def spread(self) -> str:
        """Each program's median's relative standard error, as far as the rounds got."""
        return "relative error of the median: " + ", ".join(
            f"{label} {median_rel_err(s):.1%}" if len(s) >= 4 else f"{label} n={len(s)}"
            for label, s in self.samples.items() if s)

    def stats(self, label: str) -> TimingStats | None:
        s = self.samples.get(label)
        return TimingStats.from_samples(s, self.host[label]) if s else None
