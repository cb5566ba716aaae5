"""The adaptive stopping rule for timed rounds (the clocks are `kforge.backends.clocks`)."""

from __future__ import annotations

from typing import Callable

from .config import TimingConfig
from .verdict import TimingStats, median_rel_err


class Sampler:
    """Collects (device ms, host ms) per program and decides when the medians are stable enough."""

    def __init__(self, labels: list[str], cfg: TimingConfig, now: Callable[[], float]):
        self.cfg = cfg
        self.samples: dict[str, list[float]] = {k: [] for k in labels}
        self.host: dict[str, list[float]] = {k: [] for k in labels}
        self._now = now
        self._start = now()
        self.stop_reason = ""

    def add(self, label: str, device_ms: float, host_ms: float) -> None:
        self.samples[label].append(device_ms)
        self.host[label].append(host_ms)

    def elapsed(self) -> float:
        return self._now() - self._start

    def done(self, rounds: int) -> bool:
        cfg = self.cfg
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
        return False

    def stats(self, label: str) -> TimingStats | None:
        s = self.samples.get(label)
        return TimingStats.from_samples(s, self.host[label]) if s else None
