"""A candidate's settings judged by evidence: what it sets for its own code does not reach its baselines."""

from kforge.problems import resolve_problem
from kforge.verify import Verifier
from tests.helpers import candidate, fast_config

# A model tuning inductor for its own torch.compile, here with a C++ compiler this machine does not have: had the
# setting reached the compile reference (compiled in the same process), its compile would fail.
OWN_COMPILER = '''
import torch
import torch._inductor.config

torch._inductor.config.cpp.cxx = ("kforge-no-such-cxx",)
torch._inductor.config.coordinate_descent_tuning = True
'''


def test_inductor_configuration_set_by_the_candidate_does_not_reach_the_compile_reference(pool):
    relu = resolve_problem("level1/1_ReLU", size="cpu", overrides={"BATCH": 8, "DIM": 4096})
    source = OWN_COMPILER + candidate("cpu", "relu_ok.py")
    v = Verifier(fast_config(compile_ref=True, compile_ref_reuse=False), pool=pool).verify(relu, source, "cpu")
    assert v.correct and v.states["kernelbench"] == "correct", v.summary()
    assert v.compile_ref is not None and not any("torch.compile" in n and "failed" in n for n in v.evidence.notes), \
        v.summary()
