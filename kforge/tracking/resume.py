"""Resuming a sweep: what a previous run of the same job configuration already did, from MLflow.

Every run carries ``kforge.config_hash`` (the job's configuration minus where it logs and which
workers it uses). Started again with the same configuration, a job skips problems whose run
finished, and continues a run that did not (KILLED by Ctrl-C or SIGTERM, FAILED by a kforge error,
left RUNNING by SIGKILL or a lost node) from its last recorded iteration in the same MLflow run,
rebuilding the loop's state (`kforge.loop.LoopState`, handed to ``ProblemLoop.run``) from that run's
``iter_NNN/`` files; the newest job's parent run is continued too, so a rerun adds no run. Nothing is
logged twice, so tables never double-count. Runs left RUNNING that nothing continues are marked KILLED:
a job started again assumes the one before it is gone. The model's replies are replayed
(`kforge.llm.replay`), so a continued iteration costs no new call. A whole-model job's rerun works in the
extraction folder its parent run recorded (`workload_folders`), so its regions are the same problems.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..loop import IterationRecord, LoopState, ProblemResult
from ..problems import Problem
from ..verify import Verdict
from .schema import STATE_INDEX, Files, Kind, Tags, WorkloadTags, metric_history, tag_is
from .store import open_client, sqlite_path, tracking_uri

#: Configuration keys that do not change what a job computes.
IGNORED = ("tracking", "workers", "resume", "hydra")
#: Model settings that say how to reach the model, not which one answers (a vLLM server restarted on
#: another port serves the same sweep).
IGNORED_MODEL = ("api_base", "api_key_env", "timeout_s", "retries", "backoff_s", "cache")


def config_hash(conf: dict[str, Any]) -> str:
    kept = {k: v for k, v in conf.items() if k not in IGNORED}
    if isinstance(kept.get("model"), dict):
        kept["model"] = {k: v for k, v in kept["model"].items() if k not in IGNORED_MODEL}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass
class Previous:
    """What an earlier job with this configuration left for one problem."""

    run_id: str
    finished: bool
    state: LoopState
    """Where its loop stood: the result so far, and the next iteration to run."""

    @property
    def result(self) -> ProblemResult:
        return self.state.result


def _download_json(client, run_id: str, path: str, tmp: str) -> dict[str, Any] | None:
    try:
        return json.loads(Path(client.download_artifacts(run_id, path, tmp)).read_text())
    except Exception:  # noqa: BLE001 - a missing artifact: that iteration was not finished
        return None


def _download_text(client, run_id: str, path: str, tmp: str) -> str | None:
    try:
        return Path(client.download_artifacts(run_id, path, tmp)).read_text()
    except Exception:  # noqa: BLE001
        return None


def restore(client, run, problem: Problem) -> Previous:
    """Rebuild a problem's loop state from its run's per-iteration files."""
    finished = run.info.status == "FINISHED"
    state = LoopState(ProblemResult(problem))
    result = state.result
    # A step with metrics is complete: the writer logs them last.
    steps = sorted({m.step for m in metric_history(client, run.info.run_id, STATE_INDEX)})
    with tempfile.TemporaryDirectory() as tmp:
        for step in steps:
            rec = _download_json(client, run.info.run_id, Files.at(step, Files.RECORD), tmp)
            verdict = _download_json(client, run.info.run_id, Files.at(step, Files.VERDICT), tmp)
            if rec is None or verdict is None:
                break  # killed while logging this iteration: run it again
            record = IterationRecord(**rec)
            v = Verdict.from_dict(verdict)
            code = _download_text(client, run.info.run_id, Files.at(step, Files.KERNEL), tmp)
            result.records.append(record)
            state.kernels[record.iteration] = (code, v, record)
            if v.correct:  # its timing pooled as the loop pooled it, so the finalists include it again
                result.remember(code, v, record.iteration)
            if record.is_best:
                result.best_code, result.best_verdict, result.best_iteration = code, v, record.iteration
            state.last_code, state.last_verdict = code, v
    state.next_iteration = len(result.records)
    return Previous(run.info.run_id, finished, state)


def previous_runs(client, experiment_id: str, chash: str, problems: list[Problem]) -> dict[str, Previous]:
    """The newest run per problem of this configuration (finished ones, and ones to continue)."""
    by_key = {p.key: p for p in problems}
    runs = client.search_runs([experiment_id], f"{tag_is(Tags.CONFIG_HASH, chash)} and {tag_is(Tags.KIND, Kind.PROBLEM)}",
                              max_results=50000, order_by=["attributes.start_time DESC"])
    out: dict[str, Previous] = {}
    for run in runs:
        key = run.data.tags.get(Tags.PROBLEM)
        if key not in by_key or key in out:
            continue
        out[key] = restore(client, run, by_key[key])
    return out


def stale_runs(client, experiment_id: str, chash: str) -> list:
    """Runs of this configuration still marked RUNNING: their job was killed (SIGKILL, a lost node)."""
    return client.search_runs([experiment_id], f"{tag_is(Tags.CONFIG_HASH, chash)} and attributes.status = 'RUNNING'",
                              max_results=50000)


def previous_parent(client, experiment_id: str, chash: str) -> str | None:
    """The newest parent run of a job with this configuration, if any."""
    runs = client.search_runs([experiment_id], f"{tag_is(Tags.CONFIG_HASH, chash)} and {tag_is(Tags.KIND, Kind.JOB)}",
                              max_results=1, order_by=["attributes.start_time DESC"])
    return runs[0].info.run_id if runs else None


def workload_folders(uri: str | None, experiment: str, chash: str) -> list[str]:
    """The extraction folders (`WorkloadTags.DIR`) of earlier whole-model jobs of this configuration, newest first.

    A rerun reuses one, so its regions, and so its problems, are the earlier job's. Read before the job's
    tracker exists (the problems are needed first), so nothing is created: no store, no experiment."""
    uri = tracking_uri(uri)
    db = sqlite_path(uri)
    if db is not None and not db.is_file():
        return []
    client = open_client(uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    jobs = f"{tag_is(Tags.CONFIG_HASH, chash)} and {tag_is(Tags.KIND, Kind.JOB)}"
    runs = client.search_runs([exp.experiment_id], jobs, max_results=100, order_by=["attributes.start_time DESC"])
    return [r.data.tags[WorkloadTags.DIR] for r in runs if r.data.tags.get(WorkloadTags.DIR)]


@dataclass
class Earlier:
    """What earlier jobs of a configuration left (`take_over`)."""

    problems: dict[str, Previous]
    """Problem key -> its newest run (none with ``resume`` off)."""
    parent: str | None
    """The newest job's parent run, which a rerun continues (None with ``resume`` off)."""
    stale: int
    """Runs they left RUNNING that nothing continues, now marked KILLED."""
    parent_open: bool = False
    """``parent`` was not closed FINISHED (its job was interrupted, or killed, after its problems ended)."""

    @property
    def done(self) -> dict[str, Previous]:
        return {k: p for k, p in self.problems.items() if p.finished}

    @property
    def cut(self) -> dict[str, Previous]:
        return {k: p for k, p in self.problems.items() if not p.finished}


def take_over(tracker, chash: str, problems: list[Problem], resume: bool = True) -> Earlier:
    """What earlier jobs of this configuration left; their runs left RUNNING that this job does not
    continue are marked KILLED (a job started again assumes the one before it is gone)."""
    client, eid = tracker.client, tracker.experiment_id
    previous = previous_runs(client, eid, chash, problems) if resume else {}
    parent = previous_parent(client, eid, chash) if resume else None
    continued = {prev.run_id for prev in previous.values()} | {parent}
    stale = [r for r in stale_runs(client, eid, chash) if r.info.run_id not in continued]
    for r in stale:
        tracker.kill(r.info.run_id)
    parent_open = parent is not None and client.get_run(parent).info.status != "FINISHED"
    return Earlier(previous, parent, len(stale), parent_open)
