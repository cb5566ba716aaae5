"""A synthesis job in whole-workload mode (``workload=NAME|FILE.py``; docs/workload.md).

`job.pipeline.run` calls `prepare_workload` where it would load problems: the model is profiled and its
regions extracted (or an earlier extraction reused), and the regions are the job's problems, each a problem
run under the job's parent run as any problem is. Once the loop is over, `finish_workload` puts each
region's best correct kernel into the model, verifies the assembled model against the original with the
job's verifier, times it against eager and torch.compile, and records it all on the parent run
(`kforge.workload.record`'s names).

Resuming: the parent run carries the extraction's folder; a rerun of the same configuration reuses it, so
its regions are the same problems and the job's own resume skips the finished ones (MLflow keeps their best
kernels). A region no candidate solved keeps the model's module; the assembled model says so.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..problems import Problem, ProblemError
from ..tracking import Tracker
from ..tracking.tracker import as_metrics
from ..tracking.schema import Kind, Tags, tag_is
from ..workload.assemble import RegionKernel, WorkloadResult, evaluate
from ..workload.extract import WORKLOAD_JSON, Workload
from ..workload.prepare import ASSEMBLED, RESULT_JSON, prepare, region_problems, resolve_model, save_kernels
from ..workload.profile import WorkloadError
from ..workload.record import WFiles, WMetrics, WTags


@dataclass
class PreparedWorkload:
    """A workload job's model and regions, before its loop runs."""

    model: Problem
    """The model file at the job's size: what the assembled model is verified against."""
    workload: Workload
    problems: list[Problem]
    """The regions' problems, one per region, in its order."""
    reused: bool
    """An earlier extraction was reused (nothing was profiled)."""
    tags: dict[str, str] = field(default_factory=dict)
    """Tags of the job's parent run."""


def _tracker(job) -> Tracker:
    tcfg = job.tracking
    return Tracker(tcfg.uri, tcfg.experiment or "kforge", tcfg.artifact_root)


def earlier_folder(job, chash: str) -> Path | None:
    """The extraction an earlier job of this configuration worked in, if it is still there."""
    tracker = _tracker(job)
    runs = tracker.client.search_runs([tracker.experiment_id], f"{tag_is(Tags.CONFIG_HASH, chash)} and "
                                      f"{tag_is(Tags.KIND, Kind.JOB)}", max_results=100,
                                      order_by=["attributes.start_time DESC"])
    for run in runs:
        folder = run.data.tags.get(WTags.DIR)
        if folder and (Path(folder) / WORKLOAD_JSON).is_file():
            return Path(folder)
    return None


def prepare_workload(job, backend, pool, tags: dict[str, str], chash: str) -> PreparedWorkload:
    """The workload of ``job.workload.model`` on ``backend``: extracted into its folder, or reused from it."""
    cfg = job.workload
    try:
        model = resolve_model(cfg.model, cfg.size or job.problems.size, backend.device)
    except (WorkloadError, ProblemError) as exc:
        raise ConfigError(f"workload={cfg.model}: {exc}") from None
    folder = Path(cfg.dir) if cfg.dir else (earlier_folder(job, chash) if job.resume else None)
    if folder is None:
        out = tags.get("hydra.output_dir")
        folder = Path(out) / "workload" if out else Path(tempfile.mkdtemp(prefix="kforge-workload-"))
    try:
        workload, reused = prepare(model, backend, pool, folder, top=cfg.top, cover=cfg.cover,
                                   min_share=cfg.min_share, iterations=cfg.iterations)
    except WorkloadError as exc:
        raise ConfigError(f"workload={cfg.model}: {exc}") from None
    name = Path(model.path or model.key).name
    if reused:
        print(f"kforge: workload {name}: reusing the extraction in {folder}", flush=True)
    print(f"kforge: workload {name}: {len(workload.regions)} region(s) cover {workload.coverage * 100:.1f}% of its "
          f"operator time on {workload.device}; they are this job's problems", flush=True)
    # The job's problems come from the workload, not from the problems group: its runs say so.
    job.problems.source = "workload"
    tags = {WTags.MODEL: name, WTags.MODEL_PATH: workload.model, WTags.DIR: str(Path(folder).resolve())}
    return PreparedWorkload(model, workload, region_problems(workload), reused, tags)


def region_kernels(prep: PreparedWorkload, results: list) -> tuple[dict[str, RegionKernel], list[str]]:
    """The finished regions' best correct kernels by region name, and lines for the regions without one."""
    by_key = {r.problem.key: r for r in results}
    kernels: dict[str, RegionKernel] = {}
    missing: list[str] = []
    for region, problem in zip(prep.workload.regions, prep.problems):
        res = by_key.get(problem.key)
        if res is not None and res.best_code and res.correct:
            kernels[region.name] = RegionKernel(res.best_code, res.speedup_eager)
            continue
        why = "not finished" if res is None else (
            f"no correct kernel in {len(res.records)} iteration(s), last {res.records[-1].state}" if res.records
            else f"no kernel ({res.error.strip().splitlines()[-1] if res.error else 'no iteration ran'})")
        missing.append(f"region {region.name} (`{region.path}`, {region.share * 100:.1f}% of the model): {why}")
    return kernels, missing


def finish_workload(prep: PreparedWorkload, job, result) -> WorkloadResult | None:
    """Assemble, verify and time the whole model after the job's loop; record it on the parent run."""
    workload, folder = prep.workload, Path(prep.workload.root)
    kernels, missing = region_kernels(prep, result.results)
    name = prep.tags[WTags.MODEL]
    tracker = _tracker(job.config)
    parent = result.parent_run_id
    metrics: dict[str, Any] = {WMetrics.COVERAGE: workload.coverage, WMetrics.REGIONS: len(workload.regions),
                               WMetrics.SOLVED: len(kernels), WMetrics.MODEL_MS: workload.total_ms}
    outcome: WorkloadResult | None = None
    if result.interrupted:
        state = "interrupted"
        message = (f"interrupted before assembly: {len(kernels)} of {len(workload.regions)} region(s) solved so far "
                   f"are kept (MLflow, and the extraction in {folder}); run the same command again to continue")
    else:
        for line in missing:
            print(f"kforge: {line}; the assembled model keeps the model's own module", flush=True)
        save_kernels(workload, kernels)
        if not kernels:
            state, message = "unchanged", "no region was solved: the model is unchanged, nothing to assemble"
        else:
            outcome, state, message = _assemble(prep, job, kernels)
    if outcome is not None:
        metrics.update({WMetrics.REPLACED_SHARE: outcome.replaced_share, WMetrics.CORRECT: float(outcome.correct),
                        WMetrics.SPEEDUP_EAGER: outcome.speedup_eager,
                        WMetrics.SPEEDUP_COMPILE: outcome.speedup_compile, WMetrics.BOUND: outcome.bound,
                        WMetrics.SPEEDUP_LO: outcome.speedup_lo, WMetrics.SPEEDUP_HI: outcome.speedup_hi,
                        WMetrics.BOUND_LO: outcome.bound_lo, WMetrics.BOUND_HI: outcome.bound_hi})
        (folder / ASSEMBLED).write_text(outcome.source)
        (folder / RESULT_JSON).write_text(json.dumps({k: v for k, v in outcome.to_dict().items() if k != "source"},
                                                     indent=1, default=str))
        summary = outcome.summary()
    else:
        summary = f"whole model: {state} ({message})"
    (folder / "summary.txt").write_text(summary + "\n")
    if parent is not None:
        _record(tracker, parent, folder, metrics, state, message, missing)
    print(f"kforge: workload {name}:\n{summary}", flush=True)
    result.extra["workload"] = {"state": state, "message": message, "folder": str(folder),
                                "result": outcome, "unsolved": missing}
    return outcome


def _assemble(prep: PreparedWorkload, job, kernels: dict[str, RegionKernel]) -> tuple[WorkloadResult | None, str,
                                                                                       str]:
    try:
        outcome = evaluate(prep.workload, job.verifier, job.backend, kernels, config=job.config.verify,
                           problem=prep.model)
    except WorkloadError as exc:
        return None, "assembly_failed", str(exc)
    return outcome, outcome.state, outcome.message


def _record(tracker: Tracker, parent: str, folder: Path, metrics: dict[str, Any], state: str, message: str,
            missing: list[str]) -> None:
    """The workload's figures, verdict and files on the job's parent run (after the job's own summary)."""
    from mlflow.entities import RunTag
    tags = [RunTag(WTags.STATE, state), RunTag(WTags.MESSAGE, message[:5000]),
            RunTag(WTags.UNSOLVED, ",".join(line.split(" ", 2)[1] for line in missing))]
    tracker.client.log_batch(parent, metrics=as_metrics(metrics), tags=tags)
    tracker.client.log_artifacts(parent, str(folder), WFiles.FOLDER)
