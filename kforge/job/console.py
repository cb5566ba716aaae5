"""What a person watching a job sees: a progress bar over problems, a line per iteration, a line for a
problem kforge failed on, a whole-model job's outcome, and the summary table at the end. The bar draws only
where a person watches; logs (CI, nohup, Hydra multirun) get the lines alone."""

from __future__ import annotations

import sys
from typing import Any, Callable

from ..loop import IterationRecord, LoopObserver, ProblemResult, Step
from ..problems import Problem
from ..tracking.schema import Files
from ..verify.verdict import State
from ..workload.record import WorkloadRecord

GENERATION_FAILURE = State.GENERATION_FAILURE.value


def status_line(problem: Problem, record: IterationRecord, budget: int) -> str:
    # A failed verdict may carry a timing (a kernel timed at the main shape, then failing a shape variant): a
    # speedup beside it would read as the failed kernel's merit.
    sp = f"{record.speedup_eager:.2f}x eager" if record.correct and record.speedup_eager else ""
    if record.correct and record.speedup_compile:
        sp += f", {record.speedup_compile:.2f}x compile"
    best = " *best*" if record.is_best else ""
    # A reply without code says why only in its message (the oracle without a solution, a refusal).
    why = f"{_first_line(record.message)}  " if record.state == GENERATION_FAILURE and record.message else ""
    # The iteration's index as MLflow's step and iter_NNN/ have it (from 0), then how far the budget is spent.
    return (f"{problem.key:34} iter_{record.iteration:03d} ({record.iteration + 1} of {budget}) {record.phase:11} "
            f"{record.state:20} {sp}{best}  {why}({record.wall_s:.1f} s)")


def _first_line(text: str, width: int = 140) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= width else line[:width - 3] + "..."


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
        s = result.settled.get(_settled_baseline(result))
        if s is not None:  # the finalists were re-timed against each other (kforge.loop.finalists)
            self.bar.write(f"{problem.key:34} finalists re-timed {s.timings} times each: best iter_"
                           f"{result.best_iteration:03d} {s.text()}")
        if result.error:
            last = result.error.strip().splitlines()[-1]
            self.bar.write(f"{problem.key:<34} kforge failed on this problem ({last}); the traceback is "
                           f"{Files.ERROR} in MLflow run {self.run_of(problem.key)}, and a rerun continues it")

    def problem_collected(self, result: ProblemResult) -> None:
        """One problem's loop has been collected."""
        self.bar.update(1)

    def job_stopping(self, in_flight: int) -> None:
        self.bar.write(f"\nkforge: stopping: no new work; {in_flight} problem(s) in flight end after their current "
                       "step, marked KILLED (Ctrl-C or SIGTERM again to stop them now)")

    def workload_done(self, record: WorkloadRecord) -> None:
        """A whole-model job's outcome: the regions left unsolved, then the assembled model's verdict."""
        if record.state != "interrupted":
            for region in record.unsolved:
                self.bar.write(f"kforge: {region.line()}; the assembled model keeps the model's own module")
        self.bar.write(f"kforge: workload {record.name}:\n{record.summary()}")

    def close(self) -> None:
        self.bar.close()


#: Models that are not LLMs (kforge/llm/offline.py): they cost nothing, and the summary says so.
OFFLINE_MODELS = {"oracle": "the oracle: hand-written solutions, not an LLM",
                  "scripted": "a scripted model, not an LLM"}


def print_summary(results: list[ProblemResult], stats: dict[str, Any], out=None, *,
                  cut_off: list[ProblemResult] = (), model_kind: str | None = None,
                  skipped: list[ProblemResult] = ()) -> None:
    """The closing table: a row per finished problem, per problem ``cut_off`` by an interrupt (its best so far)
    and per problem ``skipped`` because it fails on its own (neither counted in the job's metrics, both said so);
    then the metrics over finished problems, tokens and cost."""
    out = out or sys.stdout  # looked up now: a caller may have redirected it
    print("\nproblem                            best state           iters  speedup(eager)  speedup(compile)", file=out)
    rows = [(r, "") for r in results] + [(r, " (cut off)") for r in cut_off] + [(r, " (skipped)") for r in skipped]
    for r, note in rows:
        state = "correct" if r.correct else (
            "problem_error" if r.problem_error else r.records[-1].state if r.records else ("error" if r.error else "-"))
        print(f"{r.problem.key:34} {state + note:20} {len(r.records):5}  {_x(r.speed('eager')):>14}  "
              f"{_x(r.speed('compile')):>16}", file=out)
    print("\n" + _metrics_line(results, stats, cut_off, skipped), file=out)
    if any(s is not None and s.spans_one for r, _ in rows for s in (r.speed("eager"), r.speed("compile"))):
        print("~ the speedup's interval spans 1.0: not known to be faster or slower, whatever its figure", file=out)
    shown = [x for r in [*results, *cut_off] for x in r.records]
    tokens = (f"tokens {sum(x.prompt_tokens for x in shown)} in / {sum(x.completion_tokens for x in shown)} out")
    print(f"{tokens} · {_cost(shown, model_kind)}", file=out)


def _x(s) -> str:
    """A reported speedup (`kforge.verify.retime.Speedup`), ``~`` marking one whose interval spans 1.0."""
    return "-" if s is None else f"{s.value:.2f}x" + (" ~" if s.spans_one else "  ")


def _settled_baseline(result: ProblemResult) -> str:
    """The baseline a re-timing chose by (eager, unless only compile's figure is there)."""
    return "eager" if "eager" in result.settled else next(iter(result.settled), "eager")


def _metrics_line(results: list[ProblemResult], stats: dict[str, Any], cut_off: list[ProblemResult],
                  skipped: list[ProblemResult] = ()) -> str:
    """Correctness and speed over the finished problems, saying how many those are of all the job's problems."""
    solved = sum(1 for r in cut_off if r.correct)
    later = (f"; {len(cut_off)} cut off ({solved} with a correct kernel so far) are not counted: a rerun "
             "finishes them") if cut_off else ""
    if skipped:
        later += (f"; {len(skipped)} skipped (the problem itself fails: problem_error) {'is' if len(skipped) == 1 else 'are'}"
                  " not counted")
    if not results:
        return "no problem finished in this job" + later
    k, g = sum(1 for r in results if r.correct), stats.get("geomean_speedup")
    total = len(results) + len(cut_off) + len(skipped)
    head = f"correct {stats['fast_0']:.0%} ({k} of {len(results)} finished" + (
        f", of {total} problems)" if total > len(results) else ")")
    if not g:
        return f"{head} · no correct kernels{later}" if not k else f"{head} · untimed{later}"
    noisy = sum(1 for r in results if (s := r.speed("eager")) is not None and s.spans_one and s.value > 1.0)
    within = f" ({noisy} within noise ~)" if noisy else ""
    return (f"{head} · fast_1 {stats['fast_1']:.0%}{within} · fast_1.5 {stats['fast_1.5']:.0%} · geomean speedup "
            f"{g:.2f}x{later}")


def _cost(records: list, model_kind: str | None) -> str:
    if model_kind in OFFLINE_MODELS:
        return f"cost $0 ({OFFLINE_MODELS[model_kind]})"
    if not records:
        return "no model calls"
    known = [x.cost_usd for x in records if x.cost_usd is not None]
    if not known:
        return "cost unknown (litellm has no price for this model)"
    return f"cost ${sum(known):.4f}" + ("" if len(known) == len(records) else
                                         f" ({len(records) - len(known)} iteration(s) without a price)")


def closing_line(tracker) -> str:
    """The job's last line: where to compare its experiment's runs. It saves the experiment's ablation view
    (`report.browse`) and names it, and for a SQLite store the `kforge ui` command that serves that store
    (by its path: right from any directory)."""
    from ..report.browse import ablation_url, save_ablation_view
    from ..tracking.store import sqlite_path
    from ..tracking.view import LOCAL_UI
    try:
        save_ablation_view(tracker.client, tracker.experiment_id)
    except Exception as exc:  # noqa: BLE001 - a view not saved loses no result; the runs table still opens
        return f"runs table: {tracker.view_url()}  (the ablation view was not saved: {exc})"
    if tracker.uri.startswith(("http://", "https://")):
        return f"compare the runs: {ablation_url(tracker.uri, tracker.experiment_id)}"
    db = sqlite_path(tracker.uri)
    return (f"compare the runs: kforge ui --store {db or tracker.uri}  (then "
            f"{ablation_url(LOCAL_UI, tracker.experiment_id)})")
