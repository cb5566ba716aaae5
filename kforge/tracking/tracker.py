"""The MLflow writer: a parent run per sweep job, a nested run per problem, a step per iteration; and
``kforge eval``'s runs. Names and paths come from `schema`.

Everything goes through one `MlflowClient` with explicit run ids (problem loops run in threads), under
a lock, so one tracker is safe to share. A problem's run is finished as soon as the problem is, so a
sweep killed later loses none of it.

A problem run's tag ``state`` is its outcome (`kforge.loop.ProblemResult.outcome`), updated after each
iteration; an iteration's outcome is its metrics (``state_index``: an index into `schema.STATE_CODES`)
and its ``record.json``, beside the verdict it came from (``verdict.json``). What the MLflow UI shows first (runs table, saved view,
the job's summary) is in `view`.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ..metrics import total_cost
from ..verify.verdict import correct_under
from . import view
from .schema import (
    CANDIDATE_METRICS,
    CANDIDATE_STATE_INDEX,
    CANDIDATE_TAGS,
    JOB_METRIC_NAMES,
    STATE_CODES,
    Files,
    Kind,
    Metrics,
    Tags,
    WorkloadFiles,
    WorkloadMetrics,
    WorkloadTags,
    iteration_values,
    level_prefix,
)
from .store import import_mlflow, open_client, sqlite_path, tracking_uri

log = logging.getLogger(__name__)


#: Significant digits a metric keeps: MLflow's tables show every digit logged, and a speedup or a time is
#: not known past its fourth (timing noise is larger); whole numbers (counts, tokens) are kept exactly.
METRIC_DIGITS = 4


def as_metrics(values: dict[str, Any], step: int = 0, now: int | None = None) -> list:
    """MLflow metrics for the numbers among ``values`` (None and non-numbers are left out), each to
    `METRIC_DIGITS` significant digits."""
    from mlflow.entities import Metric
    now = int(time.time() * 1000) if now is None else now
    return [Metric(k, _tidy(float(v)), now, step) for k, v in values.items() if _is_number(v)]


def _tidy(v: float) -> float:
    return v if v.is_integer() else float(f"{v:.{METRIC_DIGITS}g}")


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = json.dumps(v) if isinstance(v, (list, tuple)) else str(v)
    return out


class Tracker:
    """Writes runs to one MLflow experiment."""

    def __init__(self, uri: str | None = None, experiment: str = "kforge", artifact_root: str | None = None):
        self.mlflow = import_mlflow()
        self.uri = tracking_uri(uri)  # a bad one refused in one line, before MLflow is asked
        self._lock = threading.RLock()
        self.experiment = experiment
        self.client = open_client(self.uri)
        db = sqlite_path(self.uri)
        # Keep artifacts next to a SQLite database, not in whatever directory the run started from.
        location = artifact_root or (db.parent.joinpath("mlartifacts").as_uri() if db is not None else None)
        self.experiment_id = self._experiment_id(location)
        self._titles: dict[str, dict[str, str]] = {}
        """Parent run id -> the tags its summary is titled with."""

    def _experiment_id(self, location: str | None) -> str:
        exp = self.client.get_experiment_by_name(self.experiment)
        if exp is None:
            try:
                eid = self.client.create_experiment(self.experiment, artifact_location=location,
                                                    tags=view.experiment_tags())
            except Exception:  # noqa: BLE001 - another job created it first
                exp = self.client.get_experiment_by_name(self.experiment)
                if exp is None:
                    raise
        if exp is not None:
            eid = exp.experiment_id
            for key, value in view.experiment_tags(exp.tags).items():  # an experiment made before
                self.client.set_experiment_tag(eid, key, value)
        return eid

    def view_url(self, ui: str = view.LOCAL_UI) -> str:
        """Where the MLflow UI shows this experiment's runs table with kforge's columns."""
        base = self.uri if self.uri.startswith(("http://", "https://")) else ui
        return view.runs_url(base, self.experiment_id)

    # -- runs ----------------------------------------------------------------------------------------
    def start_parent(self, name: str, config: dict[str, Any], config_yaml: str, tags: dict[str, str],
                     params: dict[str, str] | None = None) -> str:
        """A job's run: its flattened ``config`` and ``params`` as parameters, ``config_yaml`` as a file."""
        with self._lock:
            run = self.client.create_run(self.experiment_id, run_name=name, tags={**tags, Tags.KIND: Kind.JOB})
            rid = run.info.run_id
            self._titles[rid] = {**tags, Tags.RUN_NAME: name}
            self._log_params(rid, {**flatten(config), **(params or {})})
            self.client.log_text(rid, config_yaml, Files.CONFIG)
        return rid

    def reopen_parent(self, run_id: str, tags: dict[str, str]) -> None:
        """Continue an earlier job's run (a rerun of its configuration): running again, its tags updated;
        its parameters are the same configuration's, logged when it started."""
        with self._lock:
            self.client.update_run(run_id, status="RUNNING")
            run = self.client.get_run(run_id)
            for key, value in tags.items():
                self.client.set_tag(run_id, key, value)
            self._titles[run_id] = {**tags, Tags.RUN_NAME: run.info.run_name}

    def start_problem(self, parent_id: str, name: str, tags: dict[str, str],
                      params: dict[str, str] | None = None) -> str:
        with self._lock:
            run = self.client.create_run(self.experiment_id, run_name=name,
                                         tags={**tags, Tags.PARENT: parent_id, Tags.KIND: Kind.PROBLEM})
            self._log_params(run.info.run_id, params or {})
        return run.info.run_id

    def _log_params(self, run_id: str, params: dict[str, str]) -> None:
        from mlflow.entities import Param
        items = [Param(k[:250], str(v)[:6000]) for k, v in params.items()]
        for i in range(0, len(items), 100):
            self.client.log_batch(run_id, params=items[i:i + 100])

    def log_iteration(self, run_id: str, record, attempt, verdict, recommendation=None, outcome: str = "") -> None:
        """Metrics at ``step=iteration``, files under ``iter_NNN/``, the tags ``kernel.N`` (and ``direction.N``
        in a beam search), and the problem's ``state`` tag set to ``outcome`` (the record's state if not given)."""
        from mlflow.entities import RunTag
        it = record.iteration
        now = int(time.time() * 1000)
        metrics = as_metrics(iteration_values(record), it, now)
        with self._lock:
            self.client.log_text(run_id, attempt.prompt_text, Files.at(it, Files.PROMPT))
            if attempt.response is not None:
                self.client.log_text(run_id, attempt.response.text, Files.at(it, Files.REPLY))
            if attempt.candidate.source:
                self.client.log_text(run_id, attempt.candidate.source, Files.at(it, Files.KERNEL))
            self.client.log_dict(run_id, verdict.to_dict(), Files.at(it, Files.VERDICT))
            self.client.log_dict(run_id, record.to_dict(), Files.at(it, Files.RECORD))
            if recommendation is not None:
                self.client.log_text(run_id, f"source: {recommendation.source}\n\n{recommendation.text()}\n",
                                     Files.at(it, Files.RECOMMENDATION))
                if recommendation.prompt:
                    self.client.log_text(run_id, recommendation.prompt, Files.at(it, Files.ANALYSIS_PROMPT))
                for path in recommendation.files.values():
                    if path and os.path.isfile(path):
                        self.client.log_artifact(run_id, path, Files.at(it, Files.PROFILE))
                if recommendation.speed_of_light is not None and record.speed_of_light is None:
                    metrics += as_metrics({Metrics.SPEED_OF_LIGHT: recommendation.speed_of_light}, it, now)
            tags = [RunTag(Tags.STATE, outcome or record.state)]
            if record.direction is not None:  # beam search: the tree's branch, beside the metrics parent and depth
                tags.append(RunTag(Tags.direction_at(it), record.direction))
            if verdict.source_hash:  # which kernel was timed: the tables compare timings of one kernel
                tags.append(RunTag(Tags.kernel_at(it), verdict.source_hash))
            # The metrics go last: a step that has them is complete, which is what a resumed job relies on
            # (an iteration cut off before this point is run again, overwriting its files).
            self.client.log_batch(run_id, metrics=metrics, tags=tags)

    def end_problem(self, run_id: str, result, status: str = "FINISHED") -> None:
        recs = result.records
        first_ok = next((r.iteration for r in recs if r.correct), None)
        values = {Metrics.BEST_CORRECT: float(result.correct), Metrics.best_speedup("eager"): result.speedup_eager,
                  Metrics.best_speedup("compile"): result.speedup_compile,
                  Metrics.BEST_KERNEL_SHARE: result.kernel_share, Metrics.ITERATIONS: len(recs),
                  Metrics.FIRST_CORRECT_ITERATION: first_ok,
                  Metrics.TOTAL_PROMPT_TOKENS: sum(r.prompt_tokens for r in recs),
                  Metrics.TOTAL_COMPLETION_TOKENS: sum(r.completion_tokens for r in recs),
                  Metrics.TOTAL_COST_USD: total_cost(r.cost_usd for r in recs),
                  Metrics.REPLAYED_CALLS: sum(r.replayed_calls for r in recs)}
        for b in ("eager", "compile"):  # the reported speedup's interval (kforge.verify.retime)
            s = result.speed(b)
            values.update({Metrics.best_speedup_lo(b): s.lo, Metrics.best_speedup_hi(b): s.hi} if s else {})
        with self._lock:
            self.client.log_batch(run_id, metrics=as_metrics(values))
            self.client.set_tag(run_id, Tags.STATE, result.outcome)
            self.client.set_tag(run_id, Tags.PROBLEM_FLAGS, ",".join(result.problem_flags))
            if result.best_verdict is not None and result.best_verdict.source_hash:
                self.client.set_tag(run_id, Tags.BEST_KERNEL, result.best_verdict.source_hash)
            if result.best_code:
                self.client.log_text(run_id, result.best_code, Files.BEST_KERNEL)
                self.client.log_dict(run_id, result.best_verdict.to_dict(), Files.BEST_VERDICT)
            if result.error:
                self.client.log_text(run_id, result.error, Files.ERROR)
            if any(r.depth is not None for r in recs):
                self._log_tree(run_id, result)
            self.client.set_terminated(run_id, status="FAILED" if result.error else status)

    def _log_tree(self, run_id: str, result) -> None:
        """The search tree as a picture on the problem's run (the nodes' numbers are its metrics already)."""
        from .tree_plot import plot_tree
        nodes = [{"id": r.iteration, "parent": r.parent, "depth": r.depth or 0, "state": r.state,
                  "speedup": r.speedup_eager if r.correct else None, "direction": r.direction,
                  "best": r.iteration == result.best_iteration} for r in result.records]
        with tempfile.TemporaryDirectory() as tmp:
            try:
                path = plot_tree(nodes, Path(tmp) / Files.TREE_PLOT, result.problem.key)
            except Exception as exc:  # noqa: BLE001 - a picture that cannot be drawn loses no result
                log.warning("kforge: the search tree of %s could not be drawn: %s", result.problem.key, exc)
                return
            self.client.log_artifact(run_id, str(path))

    def skip_problem(self, run_id: str, traceback: str) -> None:
        """End a problem's run that was skipped because the problem itself fails: its traceback as a file,
        ``state`` ``problem_error``, FAILED (a rerun tries it again)."""
        with self._lock:
            self.client.log_text(run_id, traceback, Files.PROBLEM_ERROR)
            self.client.set_tag(run_id, Tags.STATE, "problem_error")
            self.client.set_terminated(run_id, status="FAILED")

    def end_parent(self, run_id: str, results: list, stats: dict[str, Any], status: str = "FINISHED",
                   speedup_vs: str = "eager", counts: dict[str, float] | None = None) -> None:
        """The job's figures (``stats``, `kforge.loop.job_stats` of ``results``) and ``counts`` as metrics,
        and its table of problems as the run's description."""
        from mlflow.entities import RunTag
        # Logged under names that say what they count and against what; `stats` keeps its keys.
        names = {**JOB_METRIC_NAMES, "geomean_speedup": Metrics.geomean_speedup(speedup_vs)}
        values = {names.get(k, k): v for k, v in stats.items()}
        values.update(counts or {})
        note = view.job_summary(self._titles.get(run_id, {}), results, stats, speedup_vs, status)
        with self._lock:
            self.client.log_batch(run_id, metrics=as_metrics(values),
                                  tags=[RunTag(Tags.SPEEDUP_VS, speedup_vs), RunTag(Tags.NOTE, note)])
            self.client.set_terminated(run_id, status=status)

    def log_workload(self, run_id: str, record) -> None:
        """A whole-model job's outcome (`kforge.workload.record.WorkloadRecord`) on its parent run: figures,
        verdict, unsolved regions, and the extraction folder's files under ``workload/``."""
        from mlflow.entities import RunTag
        m = WorkloadMetrics
        values = {m.COVERAGE: record.coverage, m.REGIONS: record.regions, m.SOLVED: record.solved,
                  m.MODEL_MS: record.model_ms}
        out = record.result  # None: nothing was assembled (no region solved, interrupted, assembly failed)
        if out is not None:
            values.update({m.REPLACED_SHARE: out.replaced_share, m.CORRECT: float(out.correct),
                           m.SPEEDUP_EAGER: out.speedup_eager, m.SPEEDUP_COMPILE: out.speedup_compile,
                           m.BOUND: out.bound, m.SPEEDUP_LO: out.speedup_lo, m.SPEEDUP_HI: out.speedup_hi,
                           m.BOUND_LO: out.bound_lo, m.BOUND_HI: out.bound_hi})
        tags = [RunTag(WorkloadTags.STATE, record.state), RunTag(WorkloadTags.MESSAGE, record.message[:5000]),
                RunTag(WorkloadTags.UNSOLVED, ",".join(u.name for u in record.unsolved))]
        with self._lock:
            self.client.log_batch(run_id, metrics=as_metrics(values), tags=tags)
            self.client.log_artifacts(run_id, str(record.folder), WorkloadFiles.FOLDER)

    def reopen(self, run_id: str) -> None:
        """Mark a run that was cut off as running again (a resumed job continues it)."""
        with self._lock:
            self.client.update_run(run_id, status="RUNNING")

    def kill(self, run_id: str) -> None:
        with self._lock:
            self.client.set_terminated(run_id, status="KILLED")

    # -- kforge eval: a run per evaluation, a finished nested run per candidate file ---------------------
    def start_eval(self, name: str, params: dict[str, Any], tags: dict[str, str]) -> str:
        with self._lock:
            run = self.client.create_run(self.experiment_id, run_name=name, tags={**tags, Tags.KIND: Kind.EVAL})
            self._log_params(run.info.run_id, flatten(params))
        return run.info.run_id

    def log_candidate(self, parent_id: str, row: dict[str, Any], text: str | None) -> str:
        """One evaluated file (``text`` as read), logged and closed at once: a later crash loses none of it."""
        name = (f"{row.get('problem')} sample {row['sample_id']}" if row.get("sample_id") is not None
                else f"{row.get('problem')} {Path(row['candidate']).name}")
        tags = {Tags.PARENT: parent_id, Tags.KIND: Kind.CANDIDATE, Tags.STATE: str(row.get("state")),
                **{k: str(row[k]) for k in CANDIDATE_TAGS if row.get(k) is not None}}
        if precision := (row.get("judged") or {}).get("precision") or row.get("precision"):
            tags[Tags.PRECISION] = str(precision)  # a file's run says what it was judged at, as a job's problem runs do
        values = {k: row.get(k) for k in CANDIDATE_METRICS}
        values[Metrics.CORRECT] = float(bool(row.get("correct")))
        values[Metrics.CORRECT_KERNELBENCH] = float(correct_under(row.get("states") or {}, "kernelbench",
                                                                  row.get("state")))
        if row.get("state") in STATE_CODES:
            values[CANDIDATE_STATE_INDEX] = STATE_CODES[row["state"]]
        with self._lock:
            rid = self.client.create_run(self.experiment_id, run_name=name[:250], tags=tags).info.run_id
            self.client.log_batch(rid, metrics=as_metrics(values))
            if text is not None:
                self.client.log_text(rid, text, Files.KERNEL)
            self.client.log_dict(rid, row, Files.VERDICT)
            self.client.set_terminated(rid, status="FAILED" if row.get("error") else "FINISHED")
        return rid

    def end_eval(self, run_id: str, summary: dict[str, Any], files: list[Path], status: str = "FINISHED") -> None:
        """The summary's figures as metrics (``all`` unprefixed, ``level1.fast_1`` per level) and its files."""
        groups = [("", summary["all"])] + [(level_prefix(k), g) for k, g in summary["levels"].items() if k != "-"]
        kb = (summary.get("rules") or {}).get("kernelbench")  # the same figures under KernelBench's rules
        if kb:
            groups += [("kernelbench.", kb["all"])] + [(f"kernelbench.{level_prefix(k)}", g)
                                                       for k, g in kb["levels"].items() if k != "-"]
        metrics = as_metrics({f"{prefix}{k}": v for prefix, g in groups for k, v in flatten(g).items()})
        with self._lock:
            for i in range(0, len(metrics), 500):
                self.client.log_batch(run_id, metrics=metrics[i:i + 500])
            for f in files:
                if f.is_file():
                    self.client.log_artifact(run_id, str(f))
            self.client.set_terminated(run_id, status=status)


def _is_number(value: Any) -> bool:
    """A finite number, or a string of one (`flatten`'s values)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return False
    return math.isfinite(v)
