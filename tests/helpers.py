"""Helpers shared by the tests."""

from __future__ import annotations

from pathlib import Path

from kforge.verify import TimingConfig, VerifyConfig

CANDIDATES = Path(__file__).parent / "candidates"


def fast_config(**overrides) -> VerifyConfig:
    """Few trials and short timing: the tests check behaviour, not speed."""
    timing = TimingConfig(warmup=1, min_trials=3, max_trials=6, budget_s=1.0, input_sets=2, recheck_every=2)
    base = dict(trials=2, compile_ref=False, timeout_s=120, timing=timing)
    base.update(overrides)
    return VerifyConfig(**base)


def candidate(backend: str, name: str) -> str:
    return (CANDIDATES / backend / name).read_text()
