"""The MLflow writer: a parent run per sweep job, a nested run per problem, a step per iteration; and
``kforge eval``'s runs. Names and paths come from `schema`.

Everything goes through one `MlflowClient` with explicit run ids (problem loops run in threads), under
a lock, so one tracker is safe to share. A problem's run is finished as soon as the problem is, so a
sweep killed later loses none of it.

A problem run's tag ``state`` is its outcome (``correct`` once any iteration was correct); each
iteration's state is the metric ``state_index`` (an index into `schema.STATE_CODES`), the tag
``state.N`` beside it, and its ``verdict.json``. What the MLflow UI shows first (runs table, saved view,
the job's summary) is in `view`.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ..metrics import speedup_over, summary, total_cost
from . import view
from .schema import (CANDIDATE_METRICS, CANDIDATE_STATE_INDEX, CANDIDATE_TAGS, JOB_METRIC_NAMES, STATE_CODES, Files,
                     Kind, Metrics, Tags, iteration_values, level_prefix)
from .store import default_uri, open_client, sqlite_path

log = logging.getLogger(__name__)


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
        import mlflow
        self.mlflow = mlflow
        self.uri = uri or default_uri()
        self._lock = threading.RLock()
        self.experiment = experiment
        self.client = open_client(self.uri)
        db = sqlite_path(self.uri)
        # Keep artifacts next to a SQLite database, not in whatever directory the run started from.
        location = artifact_root or (db.parent.joinpath("mlartifacts").as_uri() if db is not None else None)
        self.experiment_id = self._experiment_id(location)
        self._titles: dict[str, dict[str, str]] = {}
        """Parent run id -> the tags its summary is titled with."""
        self._solved: set[str] = set()
        """Problem runs with a correct iteration (their ``state`` tag stays ``correct``)."""

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
    def start_parent(self, name: str, config: dict[str, Any], config_yaml: str, tags: dict[str, str]) -> str:
        from mlflow.entities import Param
        with self._lock:
            run = self.client.create_run(self.experiment_id, run_name=name, tags={**tags, Tags.KIND: Kind.JOB})
            rid = run.info.run_id
            self._titles[rid] = {**tags, Tags.RUN_NAME: name}
            params = [Param(k[:250], v[:6000]) for k, v in flatten(config).items()]
            for i in range(0, len(params), 100):
                self.client.log_batch(rid, params=params[i:i + 100])
            self.client.log_text(rid, config_yaml, Files.CONFIG)
        return rid

    def start_problem(self, parent_id: str, name: str, tags: dict[str, str]) -> str:
        with self._lock:
            run = self.client.create_run(self.experiment_id, run_name=name,
                                         tags={**tags, Tags.PARENT: parent_id, Tags.KIND: Kind.PROBLEM})
        return run.info.run_id

    def log_iteration(self, run_id: str, record, attempt, verdict, recommendation=None) -> None:
        """Metrics at ``step=iteration``, tags ``state``/``state.N``/``kernel.N``, files under ``iter_NNN/``."""
        from mlflow.entities import Metric, RunTag
        it = record.iteration
        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, it) for k, v in iteration_values(record).items()]
        with self._lock:
            self.client.log_text(run_id, attempt.prompt_text, Files.at(it, Files.PROMPT))
            if attempt.response is not None:
                self.client.log_text(run_id, attempt.response.text, Files.at(it, Files.REPLY))
            if attempt.candidate.source:
                self.client.log_text(run_id, attempt.candidate.source, Files.at(it, Files.KERNEL))
            self.client.log_dict(run_id, {**verdict.to_dict(), "phase": record.phase,
                                          "cached_reply": record.cached_reply}, Files.at(it, Files.VERDICT))
            self.client.log_dict(run_id, record.to_dict(), Files.at(it, Files.RECORD))
            if recommendation is not None:
                self.client.log_text(run_id, f"source: {recommendation.source}\n\n{recommendation.text()}\n",
                                     Files.at(it, Files.RECOMMENDATION))
                if recommendation.artifacts.get("prompt"):
                    self.client.log_text(run_id, recommendation.artifacts["prompt"],
                                         Files.at(it, Files.ANALYSIS_PROMPT))
                for name, path in (recommendation.artifacts.get("files") or {}).items():
                    if path and os.path.isfile(path):
                        self.client.log_artifact(run_id, path, Files.at(it, Files.PROFILE))
                digest = recommendation.artifacts.get("digest") or {}
                if digest.get("speed_of_light") is not None and record.speed_of_light is None:
                    metrics.append(Metric(Metrics.SPEED_OF_LIGHT, float(digest["speed_of_light"]), now, it))
            if record.correct:
                self._solved.add(run_id)
            tags = [RunTag(Tags.state_at(it), record.state),
                    RunTag(Tags.STATE, "correct" if run_id in self._solved else record.state)]
            if record.direction is not None:  # beam search: the tree's branch, beside the metrics parent and depth
                tags.append(RunTag(Tags.direction_at(it), record.direction))
            if verdict.source_hash:  # which kernel was timed: the tables compare timings of one kernel
                tags.append(RunTag(Tags.kernel_at(it), verdict.source_hash))
            # The metrics go last: a step that has them is complete, which is what a resumed job relies on
            # (an iteration cut off before this point is run again, overwriting its files).
            self.client.log_batch(run_id, metrics=metrics, tags=tags)

    def end_problem(self, run_id: str, result, status: str = "FINISHED") -> None:
        from mlflow.entities import Metric
        now = int(time.time() * 1000)
        recs = result.records
        first_ok = next((r.iteration for r in recs if r.correct), None)
        values = {Metrics.BEST_CORRECT: float(result.correct), Metrics.best_speedup("eager"): result.speedup_eager,
                  Metrics.best_speedup("compile"): result.speedup_compile,
                  Metrics.BEST_KERNEL_SHARE: result.kernel_share, Metrics.ITERATIONS: len(recs),
                  Metrics.FIRST_CORRECT_ITERATION: first_ok,
                  Metrics.TOTAL_PROMPT_TOKENS: sum(r.prompt_tokens for r in recs),
                  Metrics.TOTAL_COMPLETION_TOKENS: sum(r.completion_tokens for r in recs),
                  Metrics.TOTAL_COST_USD: total_cost(r.cost_usd for r in recs)}
        with self._lock:
            self.client.log_batch(run_id, metrics=[Metric(k, float(v), now, 0) for k, v in values.items()
                                                   if v is not None])
            self.client.set_tag(run_id, Tags.STATE, view.outcome(result))
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
        from ..report.plots import plot_tree
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

    def end_parent(self, run_id: str, results: list, status: str = "FINISHED", speedup_vs: str = "eager") -> dict:
        """Summary metrics, and the job's table of problems as the run's description."""
        from mlflow.entities import Metric, RunTag
        now = int(time.time() * 1000)
        outcomes = [(r.correct, speedup_over(speedup_vs, r.speedup_eager, r.speedup_compile, or_eager=True))
                    for r in results]
        stats = summary(outcomes)
        stats[Metrics.TOTAL_PROMPT_TOKENS] = sum(x.prompt_tokens for r in results for x in r.records)
        stats[Metrics.TOTAL_COMPLETION_TOKENS] = sum(x.completion_tokens for r in results for x in r.records)
        stats[Metrics.TOTAL_COST_USD] = total_cost(x.cost_usd for r in results for x in r.records)
        # Logged under names that say what they count and against what; `stats` keeps summary()'s keys.
        names = {**JOB_METRIC_NAMES, "geomean_speedup": Metrics.geomean_speedup(speedup_vs)}
        note = view.job_summary(self._titles.get(run_id, {}), results, stats, speedup_vs, status)
        with self._lock:
            self.client.log_batch(run_id, metrics=[Metric(names.get(k, k), float(v), now, 0)
                                                   for k, v in stats.items() if v is not None],
                                  tags=[RunTag(Tags.SPEEDUP_VS, speedup_vs), RunTag(Tags.NOTE, note)])
            self.client.set_terminated(run_id, status=status)
        return stats

    def reopen(self, run_id: str) -> None:
        """Mark a run that was cut off as running again (a resumed job continues it)."""
        with self._lock:
            self.client.update_run(run_id, status="RUNNING")
            if self.client.get_run(run_id).data.tags.get(Tags.STATE) == "correct":
                self._solved.add(run_id)

    def kill(self, run_id: str) -> None:
        with self._lock:
            self.client.set_terminated(run_id, status="KILLED")

    # -- kforge eval: a run per evaluation, a finished nested run per candidate file ---------------------
    def start_eval(self, name: str, params: dict[str, Any], tags: dict[str, str]) -> str:
        from mlflow.entities import Param
        with self._lock:
            run = self.client.create_run(self.experiment_id, run_name=name, tags={**tags, Tags.KIND: Kind.EVAL})
            rid = run.info.run_id
            items = [Param(k[:250], v[:6000]) for k, v in flatten(params).items()]
            for i in range(0, len(items), 100):
                self.client.log_batch(rid, params=items[i:i + 100])
        return rid

    def log_candidate(self, parent_id: str, row: dict[str, Any], text: str | None) -> str:
        """One evaluated file (``text`` as read), logged and closed at once: a later crash loses none of it."""
        from mlflow.entities import Metric
        name = (f"{row.get('problem')} sample {row['sample_id']}" if row.get("sample_id") is not None
                else f"{row.get('problem')} {Path(row['candidate']).name}")
        tags = {Tags.PARENT: parent_id, Tags.KIND: Kind.CANDIDATE, Tags.STATE: str(row.get("state")),
                **{k: str(row[k]) for k in CANDIDATE_TAGS if row.get(k) is not None}}
        values = {k: row.get(k) for k in CANDIDATE_METRICS}
        values[Metrics.CORRECT] = float(bool(row.get("correct")))
        if row.get("state") in STATE_CODES:
            values[CANDIDATE_STATE_INDEX] = STATE_CODES[row["state"]]
        now = int(time.time() * 1000)
        with self._lock:
            rid = self.client.create_run(self.experiment_id, run_name=name[:250], tags=tags).info.run_id
            self.client.log_batch(rid, metrics=[Metric(k, float(v), now, 0) for k, v in values.items()
                                                if isinstance(v, (int, float))])
            if text is not None:
                self.client.log_text(rid, text, Files.KERNEL)
            self.client.log_dict(rid, row, Files.VERDICT)
            self.client.set_terminated(rid, status="FAILED" if row.get("error") else "FINISHED")
        return rid

    def end_eval(self, run_id: str, summary: dict[str, Any], files: list[Path], status: str = "FINISHED") -> None:
        """The summary's figures as metrics (``all`` unprefixed, ``level1.fast_1`` per level) and its files."""
        from mlflow.entities import Metric
        now = int(time.time() * 1000)
        groups = [("", summary["all"])] + [(level_prefix(k), g) for k, g in summary["levels"].items() if k != "-"]
        metrics = [Metric(f"{prefix}{k}", float(v), now, 0) for prefix, g in groups
                   for k, v in flatten(g).items() if _is_number(v)]
        with self._lock:
            for i in range(0, len(metrics), 500):
                self.client.log_batch(run_id, metrics=metrics[i:i + 500])
            for f in files:
                if f.is_file():
                    self.client.log_artifact(run_id, str(f))
            self.client.set_terminated(run_id, status=status)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return text not in ("nan", "inf", "-inf")
