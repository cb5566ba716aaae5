"""``kforge-synthesize workload=...`` end to end on cpu: regions as problem runs, the whole model put back,
verified and timed on the parent run (read back through `kforge.tracking.schema`'s names, written before the
parent run ended); a wrong kernel caught whole; an interrupted workload resumed. And the job's workload stage
alone: what it tells the observers, in which order, when the job was cut off.

Slow (those marked): the oracle's five C++ kernels are built once (about 15 s each on two cores); the later
tests reuse those builds (the build cache is the session's), and the assembled model's copies of them hit it.
"""

from __future__ import annotations

import _thread
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest
from mlflow.tracking import MlflowClient

from kforge.job import workload as job_workload
from kforge.job.pipeline import ConfigError, run
from kforge.job.workload import PreparedWorkload, WorkloadStage
from kforge.llm import ModelConfig, make_model
from kforge.llm.offline import OracleModel
from kforge.loop import JobEnd, LoopObserver
from kforge.problems import builtin_solution_path
from kforge.problems.equivalent import builtin_equivalent
from kforge.report.workload import write_workload_table
from kforge.tracking.schema import WORKLOAD_SOURCE, Kind, Tags
from kforge.tracking.schema import WorkloadFiles as WFiles
from kforge.tracking.schema import WorkloadMetrics as WMetrics
from kforge.tracking.schema import WorkloadTags as WTags
from kforge.workload.extract import Workload
from tests.helpers import FAST, scripted
from tests.workload.helpers import block_workload

# FAST names a problem of the problems group; a workload job's problems are its regions.
QUICK = [o for o in FAST if not o.startswith(("problems.names", "problems.overrides"))]


def workload_config(tmp_path: Path, *overrides: str):
    from kforge.apps.hydra_conf import compose
    return compose("synthesize", [f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", *QUICK, "model=oracle",
                                  "loop=single_shot", "workload=transformer_block", *overrides])


def runs_of(tmp_path: Path):
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("kforge")
    every = client.search_runs([exp.experiment_id])
    return client, [r for r in every if r.data.tags.get(Tags.KIND) == Kind.JOB], \
        [r for r in every if r.data.tags.get(Tags.KIND) == Kind.PROBLEM]


@pytest.fixture(scope="module")
def oracle_job(pool, tmp_path_factory):
    """The built-in workload through the pipeline with the oracle: extract, solve every region, assemble."""
    tmp = tmp_path_factory.mktemp("workload-oracle")
    result = run(workload_config(tmp), pool=pool)
    return tmp, result


@pytest.mark.slow
def test_builtin_workload_end_to_end_with_the_oracle(oracle_job):
    tmp, result = oracle_job
    done = result.extra["workload"]
    assert done.state == "correct", done.message
    folder = done.folder
    workload = Workload.load(folder)
    assert len(workload.regions) == 6 and all(r.equivalent for r in workload.regions)
    assert not done.unsolved and len(result.results) == 6 and all(r.correct for r in result.results)
    client, parents, problems = runs_of(tmp)
    assert len(parents) == 1 and len(problems) == 6
    parent = parents[0]
    assert {r.data.tags[Tags.PARENT] for r in problems} == {parent.info.run_id}
    assert {r.data.tags[Tags.PROBLEM] for r in problems} == {p.problem.key for p in result.results}
    assert {r.data.tags[Tags.PROBLEMS_SOURCE] for r in [parent, *problems]} == {WORKLOAD_SOURCE}
    m, t = parent.data.metrics, parent.data.tags
    assert t[WTags.STATE] == "correct" and t[WTags.MODEL] == "transformer_block.py" and t[WTags.DIR] == str(folder)
    assert t[WTags.MODEL_PATH] == workload.model and t[WTags.UNSOLVED] == ""
    assert m[WMetrics.CORRECT] == 1.0 and m[WMetrics.SOLVED] == 6 == m[WMetrics.REGIONS]
    assert m[WMetrics.SPEEDUP_EAGER] > 0 and m[WMetrics.BOUND] > 0
    assert m[WMetrics.REPLACED_SHARE] == pytest.approx(m[WMetrics.COVERAGE], rel=1e-3)  # every region replaced
    # The end-to-end speedup and the bound come from the same re-timing, each with its interval.
    assert m[WMetrics.SPEEDUP_LO] <= m[WMetrics.SPEEDUP_EAGER] <= m[WMetrics.SPEEDUP_HI]
    assert m[WMetrics.BOUND_LO] <= m[WMetrics.BOUND] <= m[WMetrics.BOUND_HI]
    assert m[WMetrics.COVERAGE] == pytest.approx(workload.coverage, rel=1e-3) and 0.5 < workload.coverage <= 1.0
    assert m[WMetrics.MODEL_MS] == pytest.approx(workload.total_ms, rel=1e-3)
    # The observer wrote the workload on the parent run before it ended the run, with the job's own figures.
    assert parent.info.status == "FINISHED" and m["problems"] == 6
    written = client.get_metric_history(parent.info.run_id, WMetrics.CORRECT)[-1].timestamp
    assert written <= parent.info.end_time
    files = {f.path for f in client.list_artifacts(parent.info.run_id, WFiles.FOLDER)}
    assert {WFiles.WORKLOAD_JSON, WFiles.PROFILE_TABLE, WFiles.PROFILE_PLOT, WFiles.ASSEMBLED, WFiles.RESULT,
            WFiles.SUMMARY} <= files
    summary = Path(client.download_artifacts(parent.info.run_id, WFiles.SUMMARY, str(tmp))).read_text()
    assert summary.startswith("whole model: correct") and "regions replaced: 6/6" in summary
    assembled = (folder / "assembled.py").read_text()
    assert assembled.count("load_inline(") == 5  # the two Matmul regions share one kernel
    # The whole_workload table reads the parent run back.
    tables = write_workload_table(client, tmp / "results", experiment="kforge")
    table = tables["whole_workload"]["table"]
    row = table.iloc[0]
    assert len(table) == 1 and row["regions_solved"] == "6/6" and row["verdict"] == "correct"
    assert row["speedup_eager"].endswith("x") and row["bound"].endswith("x") and row["backend"] == "cpu"
    assert "| transformer_block.py | oracle | cpu | fp32 |" in (tmp / "results" / "whole_workload.md").read_text()


def _oracle_reply(source: str) -> str:
    path = builtin_solution_path(builtin_equivalent(source), "cpu")
    return f"Here is the kernel.\n```python\n{path.read_text()}```\n"


@pytest.mark.slow
def test_unsolved_region_keeps_its_module_and_a_wrong_kernel_is_caught_whole(oracle_job, pool, tmp_path, capsys):
    _, first = oracle_job
    folder = first.extra["workload"].folder
    workload = Workload.load(folder)  # reused: the region order is known, so scripted replies can follow it
    replies = []
    for r in workload.regions:
        reply = _oracle_reply(workload.region_file(r).read_text())
        if r.type == "GatedRMSNorm":
            # Right on its own problem (built under the verifier's seed, like the Model), wrong in the model:
            # the copy taken at construction keeps the kernel's own weights, not the model's loaded ones.
            reply = reply.replace("self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))",
                                  "self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))\n"
                                  "        self._w = self.weight.detach().clone()  # contiguous copy for the kernel")
            reply = reply.replace("x, g, self.weight, self.eps)", "x, g, self._w, self.eps)")
            assert "self._w, self.eps" in reply
        if r.type == "Norm":
            reply = "I could not write a faster LayerNorm than PyTorch's."
        replies.append(reply)
    result = run(workload_config(tmp_path, f"workload.dir={folder}"), llm=scripted(*replies), pool=pool)
    done = result.extra["workload"]
    norm = next(r for r in workload.regions if r.type == "Norm")
    gated = next(r for r in workload.regions if r.type == "GatedRMSNorm")
    assert {r.problem.key: r for r in result.results}[workload.load_region(gated).key].correct  # right alone
    assert done.state == "numerical_mismatch", done.message
    assert [u.name for u in done.unsolved] == [norm.name]
    out = capsys.readouterr().out
    assert "reusing the extraction" in out and f"region {norm.name}" in out and "keeps the model's own module" in out
    client, parents, _ = runs_of(tmp_path)
    tags, metrics = parents[0].data.tags, parents[0].data.metrics
    assert tags[WTags.STATE] == "numerical_mismatch" and tags[WTags.UNSOLVED] == norm.name
    assert metrics[WMetrics.CORRECT] == 0.0 and metrics[WMetrics.SOLVED] == 5


class InterruptingOracle(OracleModel):
    """The oracle, whose ``at``-th call is answered as a Ctrl-C lands on the job (in its main thread)."""

    def __init__(self, at: int):
        super().__init__(ModelConfig(name="oracle", kind="oracle"))
        self.at = at

    def complete(self, messages, context=None):
        if self.calls + 1 == self.at:
            _thread.interrupt_main(signal.SIGINT)
        return super().complete(messages, context)


@pytest.mark.slow
def test_interrupted_workload_resumes_reusing_its_finished_regions(pool, tmp_path, capsys):
    cfg = workload_config(tmp_path)
    # As a terminal delivers it, even where this test runs with SIGINT ignored (a shell's background job).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        first = run(cfg, llm=InterruptingOracle(at=3), pool=pool)
    finally:
        signal.signal(signal.SIGINT, previous)
    done = first.extra["workload"]
    assert first.interrupted and done.state == "interrupted" and "run the same command again" in done.message
    finished = len(first.results)
    assert 2 <= finished < 6  # the regions before the interruption, and perhaps the one it landed in
    second = run(cfg, llm=make_model(ModelConfig(name="oracle", kind="oracle")), pool=pool)
    out = capsys.readouterr().out
    assert f"reusing the extraction in {done.folder}" in out  # the folder the parent run recorded
    assert f"{finished} problem(s) finished earlier are skipped" in out
    again = second.extra["workload"]
    assert again.state == "correct", again.message
    assert again.folder == done.folder
    client, parents, problems = runs_of(tmp_path)
    assert sum(r.info.status == "FINISHED" for r in problems) == 6  # each region finished once
    (parent,) = parents  # the rerun continued the interrupted job's parent run
    assert parent.info.status == "FINISHED" and parent.data.tags[WTags.STATE] == "correct"
    assert parent.data.metrics["problems_skipped"] == finished and parent.data.metrics[WMetrics.SOLVED] == 6


@pytest.mark.slow
def test_a_model_file_that_fails_to_build_stops_the_job_with_its_error(pool, tmp_path):
    bad = tmp_path / "broken_model.py"
    bad.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def __init__(self, n):\n"
                   "        super().__init__()\n        self.lin = nn.Linear(n, n // 0)\n\n    def forward(self, x):\n"
                   "        return self.lin(x)\n\n\ndef get_inputs():\n    return [torch.randn(2, 4)]\n\n\n"
                   "def get_init_inputs():\n    return [4]\n")
    with pytest.raises(ConfigError, match=r"broken_model.py.*failed to build.*ZeroDivisionError"):
        run(workload_config(tmp_path, f"workload={bad}"), pool=pool)
    with pytest.raises(ConfigError, match="no model file 'nosuch_model' and no built-in workload"):
        run(workload_config(tmp_path, "workload.model=nosuch_model"), pool=pool)


def test_a_job_in_bf16_profiles_its_workload_in_bf16(pool, tmp_path, capsys):
    """The hot regions are the model's in the job's precision (a convolution's share grows in bf16 on a GPU, a
    matrix product's shrinks), so the job profiles it cast, and a folder extracted in another precision is an error."""
    from kforge.backends import get_backend
    from kforge.job.config import JobConfig
    folder = tmp_path / "extracted"
    cfg = JobConfig.from_hydra(workload_config(tmp_path, "precision=bf16", f"workload.dir={folder}"))
    prep = job_workload.prepare_workload(cfg, get_backend("cpu"), pool, {}, "hash")
    assert prep.workload.precision == "bf16" and Workload.load(folder).precision == "bf16"
    assert "in bf16; they are this job's problems" in capsys.readouterr().out
    fp32 = JobConfig.from_hydra(workload_config(tmp_path, f"workload.dir={folder}"))
    with pytest.raises(ConfigError, match=r"bf16\), not of .* fp32\): choose another workload.dir"):
        job_workload.prepare_workload(fp32, get_backend("cpu"), pool, {}, "hash")


class Heard(LoopObserver):
    """An observer after the stage: which job events it heard, in order."""

    def __init__(self):
        self.events: list[tuple[str, object]] = []

    def workload_done(self, record) -> None:
        self.events.append(("workload_done", record))

    def job_ended(self, end) -> None:
        self.events.append(("job_ended", end))


def _stage(tmp_path: Path) -> tuple[WorkloadStage, Heard]:
    """The built-in block's six regions, none finished, in a folder of their own; the stage first, as the
    pipeline puts it, then an observer that records what it hears."""
    workload = block_workload()
    workload.root = str(tmp_path)
    problems = [SimpleNamespace(key=f"workload/{r.name}") for r in workload.regions]
    prep = PreparedWorkload(SimpleNamespace(), workload, problems, True, {WTags.MODEL: "transformer_block.py"})
    heard = Heard()
    return WorkloadStage(prep, SimpleNamespace(), then=[heard]), heard


def _tell_job_ended(stage: WorkloadStage, heard: Heard, end: JobEnd) -> None:
    for observer in (stage, heard):  # as the runner tells a job event: every observer, in order
        observer.job_ended(end)


def test_the_stage_tells_an_interrupted_jobs_workload_before_the_job_ends(tmp_path):
    stage, heard = _stage(tmp_path)
    end = JobEnd([], {}, interrupted=True)
    _tell_job_ended(stage, heard, end)
    assert [e for e, _ in heard.events] == ["workload_done", "job_ended"]
    record = heard.events[0][1]
    assert record is stage.record and record.state == "interrupted" and "run the same command again" in record.message
    assert record.solved == 0 and len(record.unsolved) == 6 and {u.why for u in record.unsolved} == {"not finished"}
    assert (record.regions, record.folder, record.name) == (6, tmp_path, "transformer_block.py")
    assert (tmp_path / "summary.txt").read_text().startswith("whole model: interrupted")


def test_a_ctrl_c_while_the_whole_model_is_verified_ends_the_job_as_interrupted(tmp_path, monkeypatch):
    def cut_off(*_):
        raise KeyboardInterrupt  # as a Ctrl-C lands while the assembled model is verified
    monkeypatch.setattr(job_workload, "finish_workload", cut_off)
    stage, heard = _stage(tmp_path)
    end = JobEnd([], {})
    _tell_job_ended(stage, heard, end)  # no KeyboardInterrupt escapes: the others still hear the job end
    assert end.interrupted  # so MLflow ends the parent run KILLED and the job exits as interrupted
    assert [e for e, _ in heard.events] == ["workload_done", "job_ended"]
    assert stage.record.state == "interrupted" and "assemble it anew" in stage.record.message
