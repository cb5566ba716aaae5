"""``kforge-synthesize workload=...`` end to end on cpu: regions as problem runs, the whole model put back,
verified and timed on the parent run; a wrong kernel caught whole; an interrupted workload resumed.

Slow: the oracle's five C++ kernels are built once (about 15 s each on two cores); the later tests reuse
those builds (the build cache is the session's), and the assembled model's copies of them hit it too.
"""

from __future__ import annotations

import _thread
import signal
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from kforge.job.pipeline import ConfigError, run
from kforge.llm import ModelConfig, make_model
from kforge.llm.offline import OracleModel
from kforge.problems import builtin_solution_path
from kforge.problems.equivalent import builtin_equivalent
from kforge.workload.extract import Workload
from kforge.workload.record import WFiles, WMetrics, WTags, write_workload_table
from tests.helpers import FAST, scripted

pytestmark = pytest.mark.slow

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
    return client, [r for r in every if r.data.tags.get("kforge.kind") == "sweep-job"], \
        [r for r in every if r.data.tags.get("kforge.kind") == "problem"]


@pytest.fixture(scope="module")
def oracle_job(pool, tmp_path_factory):
    """The built-in workload through the pipeline with the oracle: extract, solve every region, assemble."""
    tmp = tmp_path_factory.mktemp("workload-oracle")
    result = run(workload_config(tmp), pool=pool)
    return tmp, result


def test_builtin_workload_end_to_end_with_the_oracle(oracle_job):
    tmp, result = oracle_job
    done = result.extra["workload"]
    assert done["state"] == "correct", done["message"]
    folder = Path(done["folder"])
    workload = Workload.load(folder)
    assert len(workload.regions) == 6 and all(r.equivalent for r in workload.regions)
    assert not done["unsolved"] and len(result.results) == 6 and all(r.correct for r in result.results)
    client, parents, problems = runs_of(tmp)
    assert len(parents) == 1 and len(problems) == 6
    parent = parents[0]
    assert {r.data.tags["mlflow.parentRunId"] for r in problems} == {parent.info.run_id}
    assert {r.data.tags["problem"] for r in problems} == {p.problem.key for p in result.results}
    assert {r.data.tags["problems_source"] for r in problems} == {"workload"}
    m, t = parent.data.metrics, parent.data.tags
    assert t[WTags.STATE] == "correct" and t[WTags.MODEL] == "transformer_block.py" and t[WTags.DIR] == str(folder)
    assert m[WMetrics.CORRECT] == 1.0 and m[WMetrics.SOLVED] == 6 == m[WMetrics.REGIONS]
    assert m[WMetrics.SPEEDUP_EAGER] > 0 and m[WMetrics.BOUND] > 0
    # The end-to-end speedup and the bound come from the same re-timing, each with its interval.
    assert m[WMetrics.SPEEDUP_LO] <= m[WMetrics.SPEEDUP_EAGER] <= m[WMetrics.SPEEDUP_HI]
    assert m[WMetrics.BOUND_LO] <= m[WMetrics.BOUND] <= m[WMetrics.BOUND_HI]
    assert m[WMetrics.COVERAGE] == pytest.approx(workload.coverage, rel=1e-3) and 0.5 < workload.coverage <= 1.0
    files = {f.path for f in client.list_artifacts(parent.info.run_id, WFiles.FOLDER)}
    assert {WFiles.PROFILE_TABLE, WFiles.PROFILE_PLOT, WFiles.ASSEMBLED, WFiles.RESULT, "workload/workload.json"} \
        <= files
    assembled = (folder / "assembled.py").read_text()
    assert assembled.count("load_inline(") == 5  # the two Matmul regions share one kernel
    # The whole_workload table reads the parent run back.
    tables = write_workload_table(client, tmp / "results", experiment="kforge")
    table = tables["whole_workload"]["table"]
    row = table.iloc[0]
    assert len(table) == 1 and row["regions_solved"] == "6/6" and row["verdict"] == "correct"
    assert row["speedup_eager"].endswith("x") and row["bound"].endswith("x") and row["backend"] == "cpu"
    assert "| transformer_block.py | oracle | cpu |" in (tmp / "results" / "whole_workload.md").read_text()


def _oracle_reply(source: str) -> str:
    path = builtin_solution_path(builtin_equivalent(source), "cpu")
    return f"Here is the kernel.\n```python\n{path.read_text()}```\n"


def test_unsolved_region_keeps_its_module_and_a_wrong_kernel_is_caught_whole(oracle_job, pool, tmp_path, capsys):
    _, first = oracle_job
    folder = Path(first.extra["workload"]["folder"])
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
    assert done["state"] == "numerical_mismatch", done["message"]
    assert len(done["unsolved"]) == 1 and norm.name in done["unsolved"][0]
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


def test_interrupted_workload_resumes_reusing_its_finished_regions(pool, tmp_path, capsys):
    cfg = workload_config(tmp_path)
    # As a terminal delivers it, even where this test runs with SIGINT ignored (a shell's background job).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        first = run(cfg, llm=InterruptingOracle(at=3), pool=pool)
    finally:
        signal.signal(signal.SIGINT, previous)
    done = first.extra["workload"]
    assert first.interrupted and done["state"] == "interrupted" and "run the same command again" in done["message"]
    finished = len(first.results)
    assert 2 <= finished < 6  # the regions before the interruption, and perhaps the one it landed in
    second = run(cfg, llm=make_model(ModelConfig(name="oracle", kind="oracle")), pool=pool)
    out = capsys.readouterr().out
    assert f"reusing the extraction in {done['folder']}" in out
    assert f"{finished} problem(s) finished earlier are skipped" in out
    assert second.extra["workload"]["state"] == "correct", second.extra["workload"]["message"]
    assert second.extra["workload"]["folder"] == done["folder"]
    client, parents, problems = runs_of(tmp_path)
    assert sum(r.info.status == "FINISHED" for r in problems) == 6  # each region finished once
    newest = max(parents, key=lambda r: r.info.start_time)
    assert newest.data.metrics["problems_skipped"] == finished and newest.data.tags[WTags.STATE] == "correct"


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
