"""The first shape variant whose model is built as the problem's own is called after a call at the problem's own
shape (`kforge.verify.variant_checks.VariantChecks._seen_first`): a candidate that sizes a buffer by its first call and
reuses it is right at whichever shape comes first and wrong at the next, and a model in a workload sees many."""

from kforge.problems import problem_from_source
from kforge.verify import State, Verifier
from tests.helpers import fast_config
from tests.verify.test_variant_constants import LINEAR, PROBLEM, RESTATED

# Written the way models "optimise": the output preallocated on the first call and reused, no allocation per call.
CACHED_OUTPUT = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale
        self._out = None

    def forward(self, x):
        if self._out is None:
            self._out = torch.empty_like(x)
        self._out.copy_(x).clamp_min_(0)  # (torch's own out= would resize it)
        return self._out.mul_(self.scale)
'''

# A workspace cached by the first call's batch, in a Linear whose init inputs the first variant changes.
CACHED_WORKSPACE = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.workspace = None

    def forward(self, x):
        if self.workspace is None:
            self.workspace = torch.empty(x.shape[0], self.linear.out_features, device=x.device, dtype=x.dtype)
        self.workspace.copy_(self.linear.bias)
        self.workspace.addmm_(x, self.linear.weight.t())
        return torch.relu(self.workspace)
'''


def test_a_buffer_sized_by_the_first_call_fails_at_the_next_shape(pool):
    verifier = Verifier(fast_config(variants=True, require_kernel=False, skip_timing=True), pool=pool)
    p = problem_from_source(PROBLEM, where="scaled_relu.py", name="scaled_relu")
    v = verifier.verify(p, CACHED_OUTPUT, "cpu")
    assert v.states["kernelbench"] == "correct", v.summary()
    assert v.state is not State.CORRECT, v.summary()
    assert v.message.startswith("on shape variant batch_size=11, dim=3071:") and \
        "after a call at the problem's own shape" in v.message, v.message
    assert v.message.endswith("a model built afresh is correct at this shape: it kept something sized by its first "
                              "call"), v.message
    # a size baked in fails a fresh model too: that failure is the verdict, with nothing said of a first call
    baked = verifier.verify(p, RESTATED, "cpu")
    assert baked.state is not State.CORRECT and "first call" not in baked.message and \
        "after a call" not in baked.message, baked.message
    # sized again whenever the shape changes: correct
    resized = CACHED_OUTPUT.replace("if self._out is None:", "if self._out is None or self._out.shape != x.shape:")
    fine = verifier.verify(p, resized, "cpu")
    assert fine.state is State.CORRECT, fine.summary()

    # The first variant changes the features, so builds another model; the batch-only one after it does not.
    linear = problem_from_source(LINEAR, where="linear_relu.py", name="linear_relu")
    w = verifier.verify(linear, CACHED_WORKSPACE, "cpu")
    assert w.state is not State.CORRECT and w.states["kernelbench"] == "correct", w.summary()
    assert "on shape variant batch_size=" in w.message and "in_features" not in w.message.split(":")[0], w.message
    assert "after a call at the problem's own shape" in w.message, w.message
