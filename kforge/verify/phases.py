"""kforge's own phases of a run (timing, attribution) within budgets of their own, and what the run reports as it
goes, so that the run's timeout is the candidate's alone.

The run's ``timeout_s`` kills a candidate that hangs; kforge's own measuring must never be what reaches it. So each
of its phases gets a budget (``timing.limit_s``, ``attribution_budget_s``), cut to what the run's time limit leaves
(`OwnPhases.left_s`, less a margin for the reply): timing stops cooperatively at its deadline (`Sampler`) and by
an alarm a little after it (`kforge.sandbox.budget`), the attribution by the alarm; either way the verdict is
decided from what was measured, with a note. And the run reports what it has established (`OwnPhases.report`, the
``run`` milestone of `kforge.sandbox.progress`) and marks candidate code: a run stopped at its time limit anyway,
while not in candidate code and after its correctness trials passed, is judged from that report by the verifier.
"""

from __future__ import annotations

import contextlib
import time
from typing import Iterator

from ..sandbox import progress
from ..sandbox.budget import Budget, BudgetSpent, budget, spent
from .protocol import Outcome, RunProgress

MARGIN = 0.05
"""Of ``timeout_s``, kept for the reply and the start of the child (at least 2 s, at most 20 s)."""
ATTRIBUTION_SHARE = 0.4
"""At most this share of the time left when timing starts is kept for the attribution after it."""
GRACE = 0.2
"""Timing's rounds stop this share of its budget before the alarm (at most 5 s), so the alarm rarely cuts a round."""


class OwnPhases:
    """For `kforge.verify.worker`'s run: budgets from the config and the run's time limit, and progress reports."""

    def begin(self) -> None:
        timeout = float(self.cfg.timeout_s)
        self._deadline = time.monotonic() + timeout - min(20.0, max(2.0, MARGIN * timeout))

    def left_s(self) -> float:
        """Seconds left before the run's own deadline (its timeout, less the margin)."""
        return self._deadline - time.monotonic() if hasattr(self, "_deadline") else float("inf")

    def timing_budget_s(self) -> float:
        left = self.left_s()
        keep = min(self.cfg.attribution_budget_s, ATTRIBUTION_SHARE * left) if self.cfg.attribution else 0.0
        return max(0.0, min(self.cfg.timing.limit_s, left - keep))

    def rounds_deadline(self, now) -> float | None:
        """When the timing rounds stop, in ``now``'s clock: a little before the timing budget's alarm."""
        b = getattr(self, "_timing_budget", None)
        if b is None or b.seconds == float("inf"):
            return None
        left = b.deadline - time.monotonic()
        return now() + left - min(5.0, GRACE * b.seconds)

    @contextlib.contextmanager
    def timing_budget(self) -> Iterator[Budget]:
        """The timing phase's budget, remembered for the rounds' own deadline (`rounds_deadline`)."""
        with budget("timing", self.timing_budget_s()) as b:
            self._timing_budget = b
            try:
                yield b
            finally:
                self._timing_budget = None

    def compile_budget_s(self) -> float | None:
        """The compile reference's share of what is left of timing's budget: half (the rounds need the rest)."""
        b = getattr(self, "_timing_budget", None)
        return None if b is None or b.seconds == float("inf") else max(0.0, 0.5 * (b.deadline - time.monotonic()))

    def measured_within_budget(self, model) -> None:
        """The measured trials within ``attribution_budget_s``; when it is spent, the work is judged from what they
        measured (a trial it interrupted does not count)."""
        limit = max(0.0, min(self.cfg.attribution_budget_s, self.left_s()))
        before = self.trials_done
        try:
            with budget("attribution", limit) as b:
                self.measured(model)
        except BudgetSpent as exc:
            if not spent(exc, b):
                raise
            if self.trials_done > before and self.work is None:
                self.trials_done -= 1
            self.notes.append(f"attribution's budget ({limit:.3g} s) was spent before it finished: whose code did the "
                              "work is judged from what it had measured (verify.attribution_budget_s)")
            if self.attribution is not None and self.work is None:
                self.judge()

    def cut_short(self, b: Budget) -> tuple[str, dict]:
        """The timing phase's message and timings when its budget ran out: what its rounds had measured."""
        sampler = getattr(self, "_sampler", None)
        took = {k: sampler.stats(k) for k in sampler.samples} if sampler else {}
        if not took.get("cand") or not took.get("ref"):
            self.notes.append(f"the timing phase's budget ({b.seconds:.3g} s) was spent before a round was timed: "
                              "no timings (verify.timing.limit_s, verify.timeout_s)")
            return f"matches the reference on {self.cfg.trials} trials (not timed: its budget was spent)", {}
        rounds = len(sampler.samples["cand"])
        self.notes.append(f"timing: cut short when its budget ({b.seconds:.3g} s) was spent, after {rounds} rounds "
                          f"({sampler.spread()}); unsynchronized work not checked")
        return f"matches the reference on {self.cfg.trials} trials", {
            "runtime": took["cand"], "ref": took["ref"], "compile_ref": took.get("compile"),
            "ref_strict": took.get("ref_strict")}

    def report(self, timings: dict | None = None) -> None:
        """The ``run`` milestone: what the run has established so far (after its correctness trials passed)."""
        failed = {view: Outcome(state=v.state, message=v.message, rule=v.extra.get("rule"))
                  for view, v in self.views.failed.items()}
        progress.milestone("run", RunProgress(trials=self.trials_done, audit=self.audit, notes=list(self.notes),
                                              mismatch=failed, **(timings or {})).to_wire())
