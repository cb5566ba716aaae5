"""Time budgets for the harness's own phases in a worker's child, enforced by an alarm.

kforge's own measuring (timing with its compile reference, attributing the work) must not run into the run's
timeout, which is the candidate's: a phase gets a `budget`, and when it runs out a `BudgetSpent` is raised in the
child's main thread (by ``SIGALRM``, at the next Python instruction), for the phase to decide from what it has
measured. Budgets nest (the compile reference's inside timing's): the alarm is set for the earliest deadline, and
the exception names the budget that ran out, so an inner handler lets an outer budget's exception pass.
Code in a C extension that never returns to Python (a hung kernel) is not interrupted: the run's timeout still ends
it. The alarm reaches only the main thread; Python code the harness runs on other threads while a budget of the
main thread's is open (a CUDA backward's operators run on autograd's device thread, the main thread waiting in C++
meanwhile) calls `check`. Outside the main thread (tests, a caller's threads) budgets are not opened.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from typing import Iterator

from . import progress

# A call of the candidate's that has run HANG_FACTOR times as long as the longest of its calls that returned, and
# HANG_MARGIN_S seconds more, hangs (a busy host makes calls a few times slower, never that much).
HANG_FACTOR = 4.0
HANG_MARGIN_S = 5.0


class BudgetSpent(BaseException):
    """A phase of the harness's own ran out of its time (a BaseException, so that ``except Exception`` in the code
    it interrupts does not swallow it)."""

    def __init__(self, budget: "Budget"):
        super().__init__(f"{budget.what}: {budget.seconds:g} s spent")
        self.budget = budget
        self.running_s = progress.running_s()
        """How long the candidate's call running when the time ran out had run (0: none was running)."""
        self.longest_s = progress.longest_s()
        """The longest of the candidate's calls that had returned before."""

    @property
    def hung(self) -> bool:
        """The candidate's call had run far longer than any of its calls that returned: it hangs, and the budget
        that ran out is not the reason (a slow candidate's call that was merely cut is not)."""
        return self.running_s > max(HANG_FACTOR * self.longest_s, self.longest_s + HANG_MARGIN_S)


class Budget:
    def __init__(self, what: str, seconds: float):
        self.what, self.seconds = what, seconds
        self.deadline = time.monotonic() + max(0.0, seconds)
        self.spent = False


_active: list[Budget] = []


def _arm() -> None:
    pending = [b for b in _active if not b.spent]
    if not pending:
        signal.setitimer(signal.ITIMER_REAL, 0)
        return
    left = min(b.deadline for b in pending) - time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, max(left, 1e-3))


def _on_alarm(signum, frame) -> None:
    now = time.monotonic()
    due = [b for b in _active if not b.spent and b.deadline <= now + 1e-3]
    if not due:
        _arm()
        return
    outermost = due[0]  # the outer budget's handler decides; inner ones let it pass
    for b in due:
        b.spent = True
    _arm()
    raise BudgetSpent(outermost)


@contextlib.contextmanager
def budget(what: str, seconds: float | None) -> Iterator[Budget]:
    """Run the block within ``seconds`` (None: no limit); `BudgetSpent` is raised in it when they are spent."""
    b = Budget(what, seconds if seconds is not None else float("inf"))
    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield b
        return
    previous = signal.getsignal(signal.SIGALRM) if not _active else None
    if not _active:
        signal.signal(signal.SIGALRM, _on_alarm)
    _active.append(b)
    _arm()
    try:
        yield b
    finally:
        b.spent = True  # no alarm for it from here on
        _active.remove(b)
        if _active:
            _arm()
        else:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous if previous is not None else signal.SIG_DFL)


def check() -> None:
    """Raise `BudgetSpent` when an open budget's deadline has passed, on whichever thread calls it: the alarm's
    exception can only be raised in the main thread, and only when it next runs Python. The budget is marked spent,
    so the alarm does not raise it a second time."""
    if not _active:
        return
    now = time.monotonic()
    due = [b for b in list(_active) if not b.spent and b.deadline <= now]
    if due:
        for b in due:
            b.spent = True
        raise BudgetSpent(due[0])


def spent(exc: BudgetSpent, b: Budget) -> bool:
    """Whether ``exc`` is ``b``'s own (an outer budget's passes through the inner handler)."""
    return exc.budget is b
