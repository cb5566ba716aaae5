"""Budgets for the harness's own phases: the block is interrupted when its time is spent, nested ones by theirs."""

import time

import pytest

from kforge.sandbox.budget import BudgetSpent, budget, spent


def busy(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_a_block_past_its_budget_is_interrupted():
    t0 = time.monotonic()
    with pytest.raises(BudgetSpent) as exc:
        with budget("timing", 0.2) as b:
            busy(5)
    assert spent(exc.value, b) and time.monotonic() - t0 < 2
    with budget("timing", 5):
        busy(0.05)  # within its budget: nothing happens, and no alarm is left behind
    busy(0.3)


def test_nested_budgets_each_end_their_own_block():
    with budget("timing", 5) as outer:
        with pytest.raises(BudgetSpent) as exc:
            with budget("compile reference", 0.1) as inner:
                busy(5)
        assert spent(exc.value, inner) and not spent(exc.value, outer)
        busy(0.05)  # the outer one goes on
    with pytest.raises(BudgetSpent) as exc:
        with budget("timing", 0.2) as outer:
            try:
                with budget("compile reference", 5) as inner:
                    busy(5)
            except BudgetSpent as e:
                assert not spent(e, inner)
                raise
    assert spent(exc.value, outer)


def test_code_catching_exception_does_not_swallow_it():
    with pytest.raises(BudgetSpent):
        with budget("attribution", 0.1):
            try:
                busy(5)
            except Exception:  # noqa: BLE001 - what a candidate's fallback does
                pass
