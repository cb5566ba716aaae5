"""MLflow tracking: a parent run per sweep job, a nested run per problem, a step per iteration.

Everything goes through one `MlflowClient` with explicit run ids (problem loops run in threads), under
a lock, so one tracker is safe to share. A problem's run is finished as soon as the problem is, so a
sweep killed later loses none of it.

Per-iteration metric ``state_index`` holds the index of the verdict state in `STATE_CODES` (MLflow
metrics are numbers); its name is the tag ``state.N`` beside it, and in the iteration's ``verdict.json``.
A problem run's tag ``state`` is its outcome (``correct`` once any iteration was correct). Metrics were
renamed to read at a glance (`RENAMED` keeps the old names, so runs logged before still read).
What the MLflow UI shows first (runs table, saved view, the job's summary) is in `mlflow_view`.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from . import mlflow_view
from .metrics import summary, total_cost
from .verify import STATES

STATE_CODES = {s: i for i, s in enumerate(STATES)}

#: Metric name -> the name it had before issue 22, for runs logged by an older kforge.
RENAMED = {"state_index": "state", "speedup_vs_eager": "speedup_eager", "speedup_vs_compile": "speedup_compile",
           "best_speedup_vs_eager": "best_speedup_eager", "best_speedup_vs_compile": "best_speedup_compile"}


def metric(metrics: dict[str, float], name: str) -> float | None:
    """A run's metric by its name, or by its old name in a run logged before the rename."""
    value = metrics.get(name)
    return metrics.get(RENAMED[name]) if value is None and name in RENAMED else value


def metric_history(client, run_id: str, name: str) -> list:
    """``client.get_metric_history`` that also reads a run logged under the metric's old name."""
    history = client.get_metric_history(run_id, name)
    return history or (client.get_metric_history(run_id, RENAMED[name]) if name in RENAMED else [])


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = json.dumps(v) if isinstance(v, (list, tuple)) else str(v)
    return out


class _Retrying:
    """An MlflowClient whose calls retry while SQLite says the database is locked.

    Several jobs (joblib, several launchers on one machine) may write one SQLite store at once; SQLite
    serialises writers and the loser gets "database is locked" after its busy timeout. Retrying
    loses nothing. A server backend never says this.
    """

    def __init__(self, client):
        self._client = client

    def __getattr__(self, name):
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            delay = 0.05
            for attempt in range(12):
                try:
                    return attr(*args, **kwargs)
                except Exception as exc:  # noqa: BLE001 - MLflow wraps SQLAlchemy's OperationalError
                    if "database is locked" not in str(exc) or attempt == 11:
                        raise
                    time.sleep(delay)
                    delay = min(2.0, delay * 2)
        return call


def default_uri() -> str:
    """A SQLite file in the working directory (MLflow's embedded mode)."""
    return f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def _sqlite_path(uri: str) -> Path | None:
    return Path(uri[len("sqlite:///"):]).resolve() if uri.startswith("sqlite:///") else None


def open_client(uri: str):
    """An MlflowClient for ``uri`` that retries while a SQLite store is locked.

    A new SQLite store gets its tables on its first touch; two processes touching it at once (jobs
    started together, or a reader such as `make tables` beside a starting sweep) race in that schema
    migration and one dies. A lock file next to the database serialises the first touch.
    """
    from mlflow.tracking import MlflowClient
    # MLflow draws a "Downloading artifacts" bar per download; resume and reference transfer download a
    # few small files per problem, hundreds of bars for nothing. An explicit setting is kept.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    db = _sqlite_path(uri)
    if db is None:
        return _Retrying(MlflowClient(tracking_uri=uri))
    import fcntl
    db.parent.mkdir(parents=True, exist_ok=True)
    with open(str(db) + ".lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        # MLflow creates and migrates the tables when it makes the client's store, or at its first call.
        client = _Retrying(MlflowClient(tracking_uri=uri))
        client.get_experiment_by_name("Default")
    return client


class Tracker:
    """Writes runs to one MLflow experiment."""

    def __init__(self, uri: str | None = None, experiment: str = "kforge", artifact_root: str | None = None):
        import mlflow
        self.mlflow = mlflow
        self.uri = uri or default_uri()
        self._lock = threading.RLock()
        self.experiment = experiment
        self.client = open_client(self.uri)
        db = _sqlite_path(self.uri)
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
                                                    tags=mlflow_view.experiment_tags())
            except Exception:  # noqa: BLE001 - another job created it first
                exp = self.client.get_experiment_by_name(self.experiment)
                if exp is None:
                    raise
        if exp is not None:
            eid = exp.experiment_id
            for key, value in mlflow_view.experiment_tags(exp.tags).items():  # an experiment made before
                self.client.set_experiment_tag(eid, key, value)
        return eid

    def view_url(self, ui: str = mlflow_view.LOCAL_UI) -> str:
        """Where the MLflow UI shows this experiment's runs table with kforge's columns."""
        base = self.uri if self.uri.startswith(("http://", "https://")) else ui
        return mlflow_view.runs_url(base, self.experiment_id)

    # -- runs ----------------------------------------------------------------------------------------
    def start_parent(self, name: str, config: dict[str, Any], config_yaml: str, tags: dict[str, str]) -> str:
        from mlflow.entities import Param
        with self._lock:
            run = self.client.create_run(self.experiment_id, run_name=name, tags={**tags, "kforge.kind": "sweep-job"})
            rid = run.info.run_id
            self._titles[rid] = {**tags, "run_name": name}
            params = [Param(k[:250], v[:6000]) for k, v in flatten(config).items()]
            for i in range(0, len(params), 100):
                self.client.log_batch(rid, params=params[i:i + 100])
            self.client.log_text(rid, config_yaml, "config.yaml")
        return rid

    def start_problem(self, parent_id: str, name: str, tags: dict[str, str]) -> str:
        with self._lock:
            run = self.client.create_run(self.experiment_id, run_name=name,
                                         tags={**tags, "mlflow.parentRunId": parent_id, "kforge.kind": "problem"})
        return run.info.run_id

    def log_iteration(self, run_id: str, record, attempt, verdict, recommendation=None) -> None:
        """Metrics at ``step=iteration``, tags ``state``/``state.N``/``kernel.N``, files under ``iter_NNN/``."""
        from mlflow.entities import Metric, RunTag
        it = record.iteration
        values = {"state_index": STATE_CODES[record.state], "correct": float(record.correct),
                  "speedup_vs_eager": record.speedup_eager, "speedup_vs_compile": record.speedup_compile,
                  "runtime_ms": record.runtime_ms, "speed_of_light": record.speed_of_light,
                  "kernel_share": record.kernel_share,
                  "prompt_tokens": record.prompt_tokens, "completion_tokens": record.completion_tokens,
                  "cost_usd": record.cost_usd, "llm_s": record.llm_s, "verify_s": record.verify_s,
                  "analysis_s": record.analysis_s}
        now = int(time.time() * 1000)
        metrics = [Metric(k, float(v), now, it) for k, v in values.items() if v is not None]
        d = f"iter_{it:03d}"
        with self._lock:
            self.client.log_text(run_id, attempt.prompt_text, f"{d}/prompt.md")
            if attempt.response is not None:
                self.client.log_text(run_id, attempt.response.text, f"{d}/reply.md")
            if attempt.candidate.source:
                self.client.log_text(run_id, attempt.candidate.source, f"{d}/kernel.py")
            self.client.log_dict(run_id, {**verdict.to_dict(), "phase": record.phase,
                                          "cached_reply": record.cached_reply}, f"{d}/verdict.json")
            self.client.log_dict(run_id, record.to_dict(), f"{d}/record.json")
            if recommendation is not None:
                self.client.log_text(run_id, f"source: {recommendation.source}\n\n{recommendation.text()}\n",
                                     f"{d}/recommendation.md")
                if recommendation.artifacts.get("prompt"):
                    self.client.log_text(run_id, recommendation.artifacts["prompt"], f"{d}/analysis_prompt.md")
                for name, path in (recommendation.artifacts.get("files") or {}).items():
                    if path and os.path.isfile(path):
                        self.client.log_artifact(run_id, path, f"{d}/profile")
                digest = recommendation.artifacts.get("digest") or {}
                if digest.get("speed_of_light") is not None and record.speed_of_light is None:
                    metrics.append(Metric("speed_of_light", float(digest["speed_of_light"]), now, it))
            if record.correct:
                self._solved.add(run_id)
            tags = [RunTag(f"state.{it}", record.state),
                    RunTag("state", "correct" if run_id in self._solved else record.state)]
            if verdict.source_hash:  # which kernel was timed: the tables compare timings of one kernel
                tags.append(RunTag(f"kernel.{it}", verdict.source_hash))
            # The metrics go last: a step that has them is complete, which is what a resumed job relies on
            # (an iteration cut off before this point is run again, overwriting its files).
            self.client.log_batch(run_id, metrics=metrics, tags=tags)

    def end_problem(self, run_id: str, result, status: str = "FINISHED") -> None:
        from mlflow.entities import Metric
        now = int(time.time() * 1000)
        recs = result.records
        first_ok = next((r.iteration for r in recs if r.correct), None)
        values = {"best_correct": float(result.correct), "best_speedup_vs_eager": result.speedup_eager,
                  "best_speedup_vs_compile": result.speedup_compile, "best_kernel_share": result.kernel_share,
                  "iterations": len(recs),
                  "first_correct_iteration": first_ok,
                  "total_prompt_tokens": sum(r.prompt_tokens for r in recs),
                  "total_completion_tokens": sum(r.completion_tokens for r in recs),
                  "total_cost_usd": total_cost(r.cost_usd for r in recs)}
        with self._lock:
            self.client.log_batch(run_id, metrics=[Metric(k, float(v), now, 0) for k, v in values.items()
                                                   if v is not None])
            self.client.set_tag(run_id, "state", mlflow_view.outcome(result))
            self.client.set_tag(run_id, "problem_flags", ",".join(result.problem_flags))
            if result.best_verdict is not None and result.best_verdict.source_hash:
                self.client.set_tag(run_id, "best_kernel", result.best_verdict.source_hash)
            if result.best_code:
                self.client.log_text(run_id, result.best_code, "best/kernel.py")
                self.client.log_dict(run_id, result.best_verdict.to_dict(), "best/verdict.json")
            if result.error:
                self.client.log_text(run_id, result.error, "error.txt")
            self.client.set_terminated(run_id, status="FAILED" if result.error else status)

    def end_parent(self, run_id: str, results: list, status: str = "FINISHED", speedup_vs: str = "eager") -> dict:
        """Summary metrics, and the job's table of problems as the run's description."""
        from mlflow.entities import Metric, RunTag
        now = int(time.time() * 1000)
        outcomes = [(r.correct, r.speedup_compile if speedup_vs == "compile" and r.speedup_compile is not None
                     else r.speedup_eager) for r in results]
        stats = summary(outcomes)
        stats["total_prompt_tokens"] = sum(x.prompt_tokens for r in results for x in r.records)
        stats["total_completion_tokens"] = sum(x.completion_tokens for r in results for x in r.records)
        stats["total_cost_usd"] = total_cost(x.cost_usd for r in results for x in r.records)
        # Logged under names that say what they count and against what; `stats` keeps summary()'s keys.
        names = {"n": "problems", "geomean_speedup": f"geomean_speedup_vs_{speedup_vs}"}
        note = mlflow_view.job_summary(self._titles.get(run_id, {}), results, stats, speedup_vs, status)
        with self._lock:
            self.client.log_batch(run_id, metrics=[Metric(names.get(k, k), float(v), now, 0)
                                                   for k, v in stats.items() if v is not None],
                                  tags=[RunTag("speedup_vs", speedup_vs), RunTag(mlflow_view.NOTE, note)])
            self.client.set_terminated(run_id, status=status)
        return stats

    def reopen(self, run_id: str) -> None:
        """Mark a run that was cut off as running again (a resumed job continues it)."""
        with self._lock:
            self.client.update_run(run_id, status="RUNNING")
            if self.client.get_run(run_id).data.tags.get("state") == "correct":
                self._solved.add(run_id)

    def kill(self, run_id: str) -> None:
        with self._lock:
            self.client.set_terminated(run_id, status="KILLED")

    # -- kforge eval: a run per evaluation, a finished nested run per candidate file ---------------------
    def start_eval(self, name: str, params: dict[str, Any], tags: dict[str, str]) -> str:
        from mlflow.entities import Param
        with self._lock:
            run = self.client.create_run(self.experiment_id, run_name=name, tags={**tags, "kforge.kind": "eval"})
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
        tags = {"mlflow.parentRunId": parent_id, "kforge.kind": "candidate", "state": str(row.get("state")),
                **{k: str(row[k]) for k in ("problem", "level", "problem_id", "sample_id", "backend", "candidate",
                                            "candidate_hash") if row.get(k) is not None}}
        values = {k: row.get(k) for k in ("speedup_eager", "speedup_compile", "runtime_ms", "ref_runtime_ms",
                                          "compile_ref_runtime_ms", "kernel_share", "wall_s")}
        values["correct"] = float(bool(row.get("correct")))
        if row.get("state") in STATE_CODES:
            values["state"] = STATE_CODES[row["state"]]
        now = int(time.time() * 1000)
        with self._lock:
            rid = self.client.create_run(self.experiment_id, run_name=name[:250], tags=tags).info.run_id
            self.client.log_batch(rid, metrics=[Metric(k, float(v), now, 0) for k, v in values.items()
                                                if isinstance(v, (int, float))])
            if text is not None:
                self.client.log_text(rid, text, "kernel.py")
            self.client.log_dict(rid, row, "verdict.json")
            self.client.set_terminated(rid, status="FAILED" if row.get("error") else "FINISHED")
        return rid

    def end_eval(self, run_id: str, summary: dict[str, Any], files: list[Path], status: str = "FINISHED") -> None:
        """The summary's figures as metrics (``all`` unprefixed, ``level1.fast_1`` per level) and its files."""
        from mlflow.entities import Metric
        now = int(time.time() * 1000)
        groups = [("", summary["all"])] + [(f"level{k}.", g) for k, g in summary["levels"].items() if k != "-"]
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
