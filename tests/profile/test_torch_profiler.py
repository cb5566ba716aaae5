"""torch.profiler through a worker process, on the CPU."""

from pathlib import Path

from kforge.backends import get_backend
from kforge.problems import resolve_problem
from kforge.profile import Profiler
from kforge.profile.digest import build
from kforge.profile.rules import classify
from tests.helpers import candidate


def test_torch_profiler_on_cpu(pool, tmp_path):
    problem = resolve_problem("level1/1_ReLU", size="cpu", overrides={"BATCH": 8, "DIM": 4096})
    prof = Profiler("torch", pool, tmp_path, iterations=2).run(problem, candidate("cpu", "relu_ok.py"),
                                                               get_backend("cpu"))
    names = [k.name for k in prof.kernels]
    assert prof.tool == "torch" and prof.total_ms > 0 and "candidate code (outside torch operators)" in names
    assert any(n.startswith("aten::empty") for n in names)  # the output allocation shows as an operator
    assert "Self CPU" in open(prof.raw_files["torch_table"]).read()
    f = classify(build(problem, prof, time_ms=prof.total_ms))
    assert f.rule in ("cpu_own_code", "cpu_overhead")


def test_in_the_backward_mode_a_training_step_is_profiled_and_its_backward_marked(pool, tmp_path):
    from kforge.verify import VerifyConfig
    problem = resolve_problem("level1/3_LayerNorm", size="cpu", overrides={"BATCH": 16, "DIM": 64})
    code = (Path(__file__).parents[1] / "idioms" / "cpu" / "d_backward_in_pytorch.py").read_text()  # a PyTorch backward
    prof = Profiler("torch", pool, tmp_path, iterations=2).run(problem, code, get_backend("cpu"),
                                                               config=VerifyConfig(backward=True).to_dict())
    names = [k.name for k in prof.kernels]
    assert any(n.endswith("[backward]") for n in names), names  # e.g. aten::sum [backward]
    assert any("training step" in n for n in prof.notes)
    digest = build(problem, prof, time_ms=prof.total_ms).text()
    assert "[backward]" in digest and "training step" in digest
