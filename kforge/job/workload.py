"""A synthesis job in whole-workload mode (``workload=NAME|FILE.py``; docs/workload.md).

`job.pipeline.compose` calls `prepare_workload` where it would load problems: the model is profiled and its
regions extracted (or an earlier extraction reused), and the regions are the job's problems, each a problem
run under the job's parent run as any problem is. `WorkloadStage`, the job's first observer, takes over
once the problems are over (``job_ended``): `finish_workload` puts each region's best correct kernel into
the model, verifies the assembled model against the original with the job's verifier and times it against
eager and torch.compile; the stage tells the outcome (``workload_done``, a `WorkloadRecord`) to the other
observers before they hear the job end, so MLflow (`tracking.observer.MlflowObserver`, which owns the job's
runs) writes it on the parent run while that is open, under `tracking.schema`'s names.

Resuming: the parent run carries the extraction's folder; a rerun of the same configuration reuses it
(`tracking.resume.workload_folders`), so its regions are the same problems and the job's own resume skips
the finished ones (MLflow keeps their best kernels). A region no candidate solved keeps the model's module;
the assembled model says so.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..errors import ConfigError
from ..loop import JobEnd, LoopObserver, ProblemResult
from ..problems import Problem, ProblemError
from ..tracking.resume import workload_folders
from ..tracking.schema import WorkloadTags
from ..workload.assemble import RegionKernel, WorkloadResult, evaluate
from ..workload.extract import WORKLOAD_JSON, Workload
from ..workload.prepare import ASSEMBLED, RESULT_JSON, prepare, region_problems, resolve_model, save_kernels
from ..workload.profile import WorkloadError
from ..workload.record import SUMMARY_TXT, Unsolved, WorkloadRecord


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
    """Tags of the job's parent run (`tracking.schema.WorkloadTags`: the model, its path, the folder)."""

    @property
    def name(self) -> str:
        """The model file's name."""
        return self.tags[WorkloadTags.MODEL]


def earlier_folder(job, chash: str) -> Path | None:
    """The extraction an earlier job of this configuration worked in, if it is still there."""
    tcfg = job.tracking
    for folder in workload_folders(tcfg.uri, tcfg.experiment or "kforge", chash):
        if (Path(folder) / WORKLOAD_JSON).is_file():
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
                                   min_share=cfg.min_share, iterations=cfg.iterations,
                                   precision=job.verify.precision)
    except WorkloadError as exc:
        raise ConfigError(f"workload={cfg.model}: {exc}") from None
    name = Path(model.path or model.key).name
    if reused:
        print(f"kforge: workload {name}: reusing the extraction in {folder}", flush=True)
    print(f"kforge: workload {name}: {len(workload.regions)} region(s) cover {workload.coverage * 100:.1f}% of its "
          f"operator time on {workload.device} in {workload.precision}; they are this job's problems", flush=True)
    tags = {WorkloadTags.MODEL: name, WorkloadTags.MODEL_PATH: workload.model,
            WorkloadTags.DIR: str(Path(folder).resolve())}
    return PreparedWorkload(model, workload, region_problems(workload), reused, tags)


def region_kernels(prep: PreparedWorkload, results: list[ProblemResult]) -> tuple[dict[str, RegionKernel],
                                                                                  list[Unsolved]]:
    """The finished regions' best correct kernels by region name, and the regions without one."""
    by_key = {r.problem.key: r for r in results}
    kernels: dict[str, RegionKernel] = {}
    missing: list[Unsolved] = []
    for region, problem in zip(prep.workload.regions, prep.problems):
        res = by_key.get(problem.key)
        if res is not None and res.best_code and res.correct:
            kernels[region.name] = RegionKernel(res.best_code, res.speedup_eager)
            continue
        why = "not finished" if res is None else (
            f"no correct kernel in {len(res.records)} iteration(s), last {res.records[-1].state}" if res.records
            else f"no kernel ({res.error.strip().splitlines()[-1] if res.error else 'no iteration ran'})")
        missing.append(Unsolved(region.name, region.path, region.share, why))
    return kernels, missing


def finish_workload(prep: PreparedWorkload, job, end: JobEnd) -> WorkloadRecord:
    """Assemble, verify and time the whole model once the job's problems are over (``end``); the outcome is
    also written in the extraction folder (kernels/, assembled.py, result.json, summary.txt)."""
    workload, folder = prep.workload, Path(prep.workload.root)
    kernels, missing = region_kernels(prep, end.results)
    outcome: WorkloadResult | None = None
    if end.interrupted:
        state = "interrupted"
        message = (f"interrupted before assembly: {len(kernels)} of {len(workload.regions)} region(s) solved so far "
                   f"are kept (MLflow, and the extraction in {folder}); run the same command again to continue")
    else:
        save_kernels(workload, kernels)
        if not kernels:
            state, message = "unchanged", "no region was solved: the model is unchanged, nothing to assemble"
        else:
            outcome, state, message = _assemble(prep, job, kernels)
    if outcome is not None:
        (folder / ASSEMBLED).write_text(outcome.source)
        (folder / RESULT_JSON).write_text(json.dumps({k: v for k, v in outcome.to_dict().items() if k != "source"},
                                                     indent=1, default=str))
    record = _record(prep, state, message, len(kernels), missing, outcome)
    (folder / SUMMARY_TXT).write_text(record.summary() + "\n")
    return record


def _assemble(prep: PreparedWorkload, job, kernels: dict[str, RegionKernel]) -> tuple[WorkloadResult | None, str,
                                                                                       str]:
    try:
        outcome = evaluate(prep.workload, job.verifier, job.backend, kernels, config=job.config.verify,
                           problem=prep.model)
    except WorkloadError as exc:
        return None, "assembly_failed", str(exc)
    return outcome, outcome.state, outcome.message


def _record(prep: PreparedWorkload, state: str, message: str, solved: int, missing: list[Unsolved],
            outcome: WorkloadResult | None = None) -> WorkloadRecord:
    w = prep.workload
    return WorkloadRecord(prep.name, Path(w.root), state, message, w.coverage, len(w.regions), w.total_ms,
                          solved, missing, outcome)


class WorkloadStage(LoopObserver):
    """Whole-workload mode's last step, as the job's first observer: when the problems are over (``job_ended``)
    it assembles and verifies the whole model (`finish_workload`) and tells the outcome (``workload_done``) to
    ``then``, the observers after it, before they hear ``job_ended``: MLflow records it on the parent run before
    closing that. ``record`` keeps it for the job's result.

    A Ctrl-C (or SIGTERM) while the whole model is verified ends the job as an interrupted one: the record says
    ``interrupted``, ``end.interrupted`` is set (the parent run ends KILLED, the job exits as interrupted), and
    the same command again assembles anew (its regions all finished, it opens no run: the record goes on the
    earlier parent run).
    """

    def __init__(self, prep: PreparedWorkload, job, then: Sequence[LoopObserver]):
        self.prep, self.job, self.then = prep, job, list(then)
        self.record: WorkloadRecord | None = None

    def job_ended(self, end: JobEnd) -> None:
        try:
            record = finish_workload(self.prep, self.job, end)
        except KeyboardInterrupt:
            end.interrupted = True
            kernels, missing = region_kernels(self.prep, end.results)
            record = _record(self.prep, "interrupted", "interrupted while the assembled model was verified: run the "
                             "same command again to assemble it anew", len(kernels), missing)
        self.record = record
        for observer in self.then:
            observer.workload_done(record)
