"""Assembly: one program, names kept apart, weights copied in; Amdahl's bound."""

from __future__ import annotations

import pytest
import torch

from kforge.problems import load_problem_file
from kforge.workload.assemble import amdahl_bound, assemble
from kforge.workload.profile import WorkloadError

from .helpers import BLOCK, block_workload, own_class


def _load(source: str) -> dict:
    scope: dict = {"__name__": "assembled"}
    exec(compile(source, "<assembled>", "exec"), scope)  # our own model and kernels, not a candidate's
    return scope


def _run_both(program: str, seed: int = 0):
    problem = load_problem_file(BLOCK, size="cpu")
    ref = _load(problem.source)
    new = _load(program)
    torch.manual_seed(seed)
    model = ref["Model"](*ref["get_init_inputs"]())
    torch.manual_seed(seed + 1)  # a different seed: the weights must come from the model, not from luck
    assembled = new["ModelNew"](*ref["get_init_inputs"]())
    assembled.load_state_dict(model.state_dict())
    x = ref["get_inputs"]()
    with torch.no_grad():
        return model(*x), assembled(*x), assembled


def test_assembled_from_pytorch_kernels_matches_the_model():
    w = block_workload()
    kernels = {r.name: own_class(r.type) for r in w.regions}
    kernels["4_gate_Matmul"] = kernels["6_down_Matmul"]  # one kernel for two regions
    program = assemble(w, kernels)
    assert program.count("class _kf_r") == 5  # the two Matmul regions share one copy of their kernel
    want, got, model = _run_both(program)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert type(model.attn).__name__ == "_kf_r1_ModelNew"  # replaced, not merely the original running


def test_region_without_kernel_keeps_the_module_and_a_wrong_kernel_shows():
    w = block_workload()
    wrong = own_class("Norm").replace("return self.norm(x)", "return self.norm(x) * 1.01")
    program = assemble(w, {"norm": wrong})
    want, got, model = _run_both(program)
    assert type(model.attn).__name__ == "_kf_model_AttentionBlock"
    assert not torch.allclose(got, want, atol=1e-4, rtol=1e-4)


def test_kernel_with_other_parameter_names_is_refused_when_built():
    w = block_workload()
    renamed = own_class("Norm").replace("self.norm", "self.ln")
    with pytest.raises(RuntimeError, match="keep the region Model's parameter names"):
        _run_both(assemble(w, {"norm": renamed}))


def test_bad_kernels_are_refused_with_the_region_named():
    w = block_workload()
    with pytest.raises(WorkloadError, match="no region nope"):
        assemble(w, {"nope": "class ModelNew: pass"})
    with pytest.raises(WorkloadError, match="2_norm_Norm defines no ModelNew"):
        assemble(w, {"norm": "class Model: pass"})
    with pytest.raises(WorkloadError, match="does not parse"):
        assemble(w, {"norm": "def ("})
    with pytest.raises(WorkloadError, match="binds `nn`"):
        assemble(w, {"norm": "import numpy as nn\nclass ModelNew: pass"})


def test_a_kernel_spelling_its_imports_otherwise_than_the_model_assembles():
    # Models write `from torch import nn` where the block writes `import torch.nn as nn`, and library code
    # extracted from KernelBench imports `torch.nn.modules.linear`: the same bindings, so no clash.
    w = block_workload()
    norm = own_class("Norm")
    for line in ("import torch.nn as nn", "import torch\n"):
        norm = norm.replace(line, "")
    norm = "from torch import nn\nimport torch.nn.modules.linear\nimport torch.nn.functional as F\n" + norm
    want, got, model = _run_both(assemble(w, {"norm": norm}))
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert type(model.norm).__name__.endswith("ModelNew")


def test_amdahl_bound():
    assert amdahl_bound([], []) == 1.0
    assert amdahl_bound([0.5], [2.0]) == pytest.approx(1 / (0.5 + 0.25))
    assert amdahl_bound([0.6, 0.3], [3.0, 1.5]) == pytest.approx(1 / (0.1 + 0.2 + 0.2))
    assert amdahl_bound([1.0], [4.0]) == pytest.approx(4.0)
    assert amdahl_bound([0.5], [0.5]) == pytest.approx(1 / 1.5)  # a slower kernel slows the model
    with pytest.raises(ValueError):
        amdahl_bound([0.7, 0.7], [2.0, 2.0])
    with pytest.raises(ValueError):
        amdahl_bound([0.5], [0.0])
