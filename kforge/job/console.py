"""What a person watching a job sees: a progress bar over problems, a line per iteration, a line for a
problem kforge failed on, and the summary table at the end. The bar draws only where a person watches;
logs (CI, nohup, Hydra multirun) get the lines alone."""

from __future__ import annotations

import sys
from typing import Any, Callable

from ..loop import IterationRecord, LoopObserver, ProblemResult, Step
from ..problems import Problem
from ..tracking.schema import Files


def status_line(problem: Problem, record: IterationRecord, budget: int) -> str:
    sp = f"{record.speedup_eager:.2f}x eager" if record.speedup_eager else ""
    if record.speedup_compile:
        sp += f", {record.speedup_compile:.2f}x compile"
    best = " *best*" if record.is_best else ""
    # The iteration's index as MLflow's step and iter_NNN/ have it (from 0), then how far the budget is spent.
    return (f"{problem.key:34} iter_{record.iteration:03d} ({record.iteration + 1} of {budget}) {record.phase:11} "
            f"{record.state:20} {sp}{best}  ({record.wall_s:.1f} s)")


class Progress(LoopObserver):
    """The bar and the lines, as a loop observer. ``run_of``: a problem's MLflow run id, for the line
    that says where a failed problem's traceback is."""

    def __init__(self, total: int, budget: int, run_of: Callable[[str], str | None] = lambda key: None):
        from tqdm import tqdm
        self.budget, self.run_of = budget, run_of
        self.bar = tqdm(total=total, desc="problems", unit="problem", dynamic_ncols=True, file=sys.stdout,
                        disable=not sys.stdout.isatty())

    def iteration_done(self, problem: Problem, step: Step) -> None:
        self.bar.write(status_line(problem, step.record, self.budget))

    def problem_ended(self, problem: Problem, result: ProblemResult) -> None:
        if result.error:
            last = result.error.strip().splitlines()[-1]
            self.bar.write(f"{problem.key:<34} kforge failed on this problem ({last}); the traceback is "
                           f"{Files.ERROR} in MLflow run {self.run_of(problem.key)}, and a rerun continues it")

    def advance(self, result: ProblemResult) -> None:
        """One problem's loop has been collected."""
        self.bar.update(1)

    def stopping(self, in_flight: int) -> None:
        self.bar.write(f"\nkforge: stopping: no new work; {in_flight} problem(s) in flight end after their current "
                       "step, marked KILLED (Ctrl-C again to stop them now)")

    def close(self) -> None:
        self.bar.close()


def print_summary(results: list[ProblemResult], stats: dict[str, Any], out=None) -> None:
    out = out or sys.stdout  # looked up now: a caller may have redirected it
    print("\nproblem                            best state           iters  speedup(eager)  speedup(compile)", file=out)
    for r in results:
        state = "correct" if r.correct else (r.records[-1].state if r.records else ("error" if r.error else "-"))
        fmt = lambda x: f"{x:.2f}x" if x else "-"  # noqa: E731
        print(f"{r.problem.key:34} {state:20} {len(r.records):5}  {fmt(r.speedup_eager):>14}  "
              f"{fmt(r.speedup_compile):>16}", file=out)
    g = stats.get("geomean_speedup")
    print(f"\ncorrect {stats['fast_0']:.0%} · fast_1 {stats['fast_1']:.0%} · fast_1.5 {stats['fast_1.5']:.0%} · "
          f"geomean speedup {g:.2f}x" if g else f"\ncorrect {stats['fast_0']:.0%} · no correct kernels", file=out)
    cost = stats.get("total_cost_usd")
    print(f"tokens {stats['total_prompt_tokens']} in / {stats['total_completion_tokens']} out · "
          + (f"cost ${cost:.4f}" if cost is not None else "cost unknown (litellm has no price for this model)"),
          file=out)
