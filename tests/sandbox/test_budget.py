"""Budgets for the harness's own phases: the block is interrupted when its time is spent, nested ones by theirs."""

import threading
import time

import pytest

from kforge.sandbox import budget as budgets
from kforge.sandbox.budget import BudgetSpent, budget, check, spent


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


def test_a_thread_the_alarm_cannot_reach_ends_the_budget_by_checking(monkeypatch):
    """As autograd's CUDA thread runs a backward's operators while the main thread waits in C++: with no alarm
    armed, only the worker's `check` can end the budget; it marks it spent, so an alarm would not raise it again."""
    monkeypatch.setattr(budgets, "_arm", lambda: None)
    caught = []

    def worker():
        give_up = time.monotonic() + 10
        try:
            while time.monotonic() < give_up:
                check()
                time.sleep(0.001)
        except BudgetSpent as exc:
            caught.append((exc, time.monotonic()))

    with budget("attribution", 0.2) as b:
        check()  # within its time: nothing
        t = threading.Thread(target=worker)
        t.start()
        t.join(20)
        assert b.spent
    (exc, when), = caught
    assert spent(exc, b) and when >= b.deadline
    check()  # no budget open: nothing
