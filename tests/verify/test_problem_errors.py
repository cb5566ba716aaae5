"""A problem that fails on its own is the problem's error, with its own traceback; and the candidate runs in
the problem's namespace, as KernelBench's harness runs it."""

import pytest

from kforge.problems import problem_from_source
from kforge.verify import State, Verifier
from kforge.verify.verifier import ProblemFails
from tests.helpers import fast_config

GOOD = {
    "init": "def get_init_inputs():\n    return [D]\n",
    "model": "class Model(nn.Module):\n    def __init__(self, d):\n        super().__init__()\n"
             "        self.scale = nn.Parameter(torch.ones(d))\n\n    def forward(self, x):\n        return x * self.scale\n",
    "inputs": "def get_inputs():\n    return [torch.randn(N, D)]\n",
}
BROKEN = {
    "init": "def get_init_inputs():\n    return [D, load_weights_from_disk()]  # kf-init-line\n",
    "model": "class Model(nn.Module):\n    def __init__(self, d):\n        super().__init__()\n"
             "        raise ValueError('kf-model-line: no such layer')\n\n    def forward(self, x):\n        return x\n",
    "inputs": "def get_inputs():\n    return [torch.randn(N, D, dtype='float32')]  # kf-inputs-line\n",
}


def problem(broken: str | None = None):
    parts = {k: (BROKEN if k == broken else GOOD)[k] for k in ("model", "inputs", "init")}
    src = "import torch\nimport torch.nn as nn\n\nN = 8\nD = 64\n\n" + "\n".join(parts.values())
    return problem_from_source(src, where=f"broken_{broken}", name=f"broken_{broken}")


# Written as KernelBench generations often are: the reference's __init__ copied, its constants used as given.
USES_THE_PROBLEMS_CONSTANTS = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(D))  # D: the problem's module-level constant

    def forward(self, x):
        assert x.shape == (N, D)
        return x * self.scale
"""


@pytest.fixture(scope="module")
def verifier(pool):
    return Verifier(fast_config(skip_timing=True), pool=pool)


@pytest.mark.parametrize("broken,line", [("init", "kf-init-line"), ("model", "kf-model-line"),
                                         ("inputs", "kf-inputs-line")])
def test_a_failing_problem_raises_its_own_error(verifier, broken, line):
    with pytest.raises(ProblemFails, match="bug in the problem") as err:
        verifier.verify(problem(broken), USES_THE_PROBLEMS_CONSTANTS, "cpu")
    assert line in err.value.traceback and line in str(err.value)
    assert "_Run" not in str(err.value)  # not the harness's own error
    # As its author reads it: from the problem's own frame on, under the problem's name, no harness frame first.
    frames = [ln for ln in err.value.traceback.splitlines() if ln.lstrip().startswith("File ")]
    assert frames[0].lstrip().startswith(f'File "broken_{broken}", line'), err.value.traceback
    assert "kforge/sandbox" not in err.value.traceback and "problem.py" not in err.value.traceback


def test_a_problem_failing_at_the_sizes_set_on_it_says_so_not_that_it_is_broken(verifier):
    """``--set D=63`` where the model views its rows as 8 x D/8: the file is right at its own sizes, and "a bug in the
    problem" sent its author looking for one."""
    src = ("import torch\nimport torch.nn as nn\n\nN = 8\nD = 64\n\n\nclass Model(nn.Module):\n"
           "    def forward(self, x):\n        return x.view(N, 8, D // 8).sum(-1)\n\n\n"
           "def get_inputs():\n    return [torch.randn(N, D)]\n\n\ndef get_init_inputs():\n    return []\n")
    at_63 = problem_from_source(src, where="viewed", name="viewed", overrides={"D": 63})
    with pytest.raises(ProblemFails) as err:
        verifier.verify(at_63, "ModelNew = None\n", "cpu")
    assert "the problem fails at D=63, set on top of its own sizes (--set" in str(err.value), str(err.value)
    assert "bug in the problem" not in str(err.value)


def test_a_problem_that_asks_for_cuda_on_a_cpu_worker_says_how_to_run_it(verifier):
    """Older problem files put their inputs on the GPU themselves (``.cuda()``); on a CPU worker torch's own
    complaint does not say what to change."""
    import torch
    if torch.cuda.is_available():
        pytest.skip("the worker has CUDA here")
    src = problem().source.replace("torch.randn(N, D)]", "torch.randn(N, D).cuda()]")
    with pytest.raises(ProblemFails, match="it puts tensors on CUDA and this worker runs on the CPU; create them on "
                                           "the CPU"):
        verifier.verify(problem_from_source(src, where="on_cuda", name="on_cuda"), USES_THE_PROBLEMS_CONSTANTS, "cpu")


def test_the_candidate_sees_the_problems_module_level_names(verifier):
    v = verifier.verify(problem(), USES_THE_PROBLEMS_CONSTANTS, "cpu")
    # It computes the answer in PyTorch: correct as KernelBench judges, kernel_unused under kforge's rules.
    assert v.states["kernelbench"] == "correct", v.summary()
    assert v.state is State.KERNEL_UNUSED and v.states["kforge"] == "kernel_unused", v.summary()


# A reference that runs in the precision but not as the float32 truth, or whose backward fails: the audit runs only
# its forward in the precision, and the failure once surfaced in the first correctness trial as the candidate's
# `runtime_error` (on an H100, KernelBench's AvgPool2d: a CUDA error in the truth's own backward).
BF16_ONLY = GOOD["model"].replace("        return x * self.scale\n", """        if x.dtype == torch.float32:
            raise NotImplementedError("kf-bf16-only: this layer has no float32 path")
        return x * self.scale
""")
NO_BACKWARD = GOOD["model"].replace("        return x * self.scale\n", """        return NoGrad.apply(x) * self.scale
""")
NO_GRAD_FN = """class NoGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        raise RuntimeError("kf-no-backward: the backward of this layer is not written")
"""


@pytest.mark.parametrize("case", ["bf16 only", "no backward"])
def test_a_reference_whose_truth_or_step_fails_is_the_problems_error_not_the_candidates(pool, case):
    model, extra = (BF16_ONLY, "") if case == "bf16 only" else (NO_BACKWARD, NO_GRAD_FN)
    src = ("import torch\nimport torch.nn as nn\n\nN = 8\nD = 64\n\n" + extra + "\n\n" + model + "\n"
           + GOOD["inputs"] + "\n" + GOOD["init"])
    p = problem_from_source(src, where="p.py", name="p")
    cfg = fast_config(skip_timing=True, require_kernel=False, precision="bf16", backward=case == "no backward")
    with pytest.raises(ProblemFails, match="fails when run on its own") as err:
        Verifier(cfg, pool=pool).verify(p, src + "\n\nModelNew = Model\n", "cpu")
    assert ("kf-bf16-only" if case == "bf16 only" else "kf-no-backward") in str(err.value), err.value


LOOKUP = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, num, dim):
        super().__init__()
        self.table = nn.Embedding(num, dim)

    def forward(self, idx):
        return self.table(idx)


num, dim, tokens = 100, 16, 32


def get_inputs():
    return [torch.randint(0, num, (tokens,))]


def get_init_inputs():
    return [num, dim]
"""


def test_kernelbenchs_casting_of_integer_inputs_is_named_when_the_reference_fails_on_it(pool):
    """KernelBench's `precision=bf16` casts every input tensor, indices too, and an embedding then fails on its own:
    the problem's error, with the cast named; the kforge rules cast floating-point inputs only."""
    p = problem_from_source(LOOKUP, where="lookup.py", name="lookup")
    cfg = dict(skip_timing=True, require_kernel=False, precision="bf16")
    with pytest.raises(ProblemFails, match="bug in the problem") as err:
        Verifier(fast_config(rules="kernelbench", **cfg), pool=pool).verify(p, LOOKUP + "\nModelNew = Model\n", "cpu")
    assert "cast every input tensor to bfloat16, integer ones too" in str(err.value), err.value
    v = Verifier(fast_config(**cfg), pool=pool).verify(p, LOOKUP + "\nModelNew = Model\n", "cpu")
    assert v.state is State.CORRECT and v.precision == "bf16", v.summary()


def test_a_reference_with_no_tensor_to_compare_is_the_problems_error(verifier):
    """A forward returning None passed any candidate (`correct`), and at a size of 0 an honest kernel read as
    `cheat_detected`: nothing there is a verdict on the candidate."""
    from kforge.problems import resolve_problem
    none = problem_from_source("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
                               "        return None\n\n\ndef get_inputs():\n    return [torch.randn(4, 8)]\n\n\n"
                               "def get_init_inputs():\n    return []\n", where="none.py", name="none")
    with pytest.raises(ProblemFails, match="its forward returns no tensor"):
        verifier.verify(none, USES_THE_PROBLEMS_CONSTANTS, "cpu")
    empty = resolve_problem("level1/1_ReLU", size="cpu", overrides={"BATCH": 0, "DIM": 64})
    relu = "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n" \
           "        return torch.relu(x)\n"
    with pytest.raises(ProblemFails, match="its outputs are empty at these sizes"):
        verifier.verify(empty, relu, "cpu")


@pytest.mark.parametrize("returned, said", [
    ("torch.randn(N, D)", "get_inputs() returned a tensor, not a list of arguments: return [x]"),
    ("None", "get_inputs() returned None, not a list of arguments (a missing return?)"),
])
def test_get_inputs_returning_a_bare_tensor_or_nothing_is_said_plainly(verifier, returned, said):
    """A bare tensor was listed row by row ("forward() takes 2 positional arguments but 9 were given"), None said
    "'NoneType' object is not iterable", each under a traceback of kforge's own frames."""
    src = ("import torch\nimport torch.nn as nn\n\nN = 8\nD = 64\n\n\nclass Model(nn.Module):\n"
           "    def forward(self, x):\n        return x * 2\n\n\n"
           f"def get_inputs():\n    return {returned}\n\n\ndef get_init_inputs():\n    return []\n")
    with pytest.raises(ProblemFails) as err:
        verifier.verify(problem_from_source(src, where="gi.py", name="gi"), "ModelNew = None\n", "cpu")
    assert said in str(err.value), str(err.value)
    assert "kforge/" not in err.value.traceback and "Traceback" not in err.value.traceback, err.value.traceback
