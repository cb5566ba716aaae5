"""At each shape variant the candidate's forward is profiled beside the reference's (`kforge.verify.variant_work`): a
kernel kept for the shape it was shown, with PyTorch at every other shape and a call into a kernel of its own beside
it, passed the call count alone."""

from kforge.problems import problem_from_source
from kforge.verify import State, Verifier
from tests.helpers import candidate, fast_config

RELU = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


batch_size = 64
dim = 16384  # large enough that the work, not each call's overhead, decides the shares


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

HONEST = candidate("cpu", "relu_ok.py")
# "Fast path for the benchmark shape; generic shapes use PyTorch (the kernel is warmed either way)."
SHOWN_SHAPE_ONLY = HONEST.replace("        return ext.relu_fwd(x)",
                                  "        if x.shape == (64, 16384):\n            return ext.relu_fwd(x)\n"
                                  "        ext.relu_fwd(x[:1])  # keep the kernel warm\n        return torch.relu(x)")


def test_pytorch_at_other_shapes_beside_a_kernel_call_is_kernel_unused(pool):
    p = problem_from_source(RELU, where="relu.py", name="relu")
    verifier = Verifier(fast_config(variants=True, skip_timing=True), pool=pool)
    v = verifier.verify(p, SHOWN_SHAPE_ONLY, "cpu")
    assert v.state is State.KERNEL_UNUSED and v.rule == "reference_replayed", v.summary()
    assert v.message.startswith("on shape variant batch_size=47, dim=12287: PyTorch ran every operator of the "
                                "reference at this shape"), v.message
    assert v.states["kernelbench"] == "correct", v.summary()
    honest = verifier.verify(p, HONEST, "cpu")
    assert honest.state is State.CORRECT, honest.summary()


# The other shapes computed with other operators than the reference's (no replay by name), then its own kernel run
# again on PyTorch's answer.
OTHER_OPERATORS = HONEST.replace("        return ext.relu_fwd(x)",
                                 "        if x.shape == (64, 16384):\n            return ext.relu_fwd(x)\n"
                                 "        y = torch.where(x > 0, x, torch.zeros_like(x))  # generic path\n"
                                 "        return ext.relu_fwd(y)")


def test_other_operators_at_other_shapes_are_kernel_unused_by_the_share_of_the_work(pool):
    p = problem_from_source(RELU, where="relu.py", name="relu")
    v = Verifier(fast_config(variants=True, skip_timing=True), pool=pool).verify(p, OTHER_OPERATORS, "cpu")
    assert v.state is State.KERNEL_UNUSED and v.rule == "kernel_share_dropped", v.summary()
    assert "its kernels serve the shape it was shown, and PyTorch the others" in v.message, v.message
    assert v.states["kernelbench"] == "correct", v.summary()


def test_a_share_that_falls_on_the_same_path_is_not_pytorch_instead():
    """An im2col convolution, PyTorch's unfold beside the candidate's own GEMM at every shape, did 69% of the work at
    the problem's shape and 5% at an odd bf16 variant on a CPU: the same operators, another balance. torch.clamp
    appearing where the candidate's ReLU kernel ran is PyTorch instead."""
    from kforge.verify.variant_work import share_fell
    from kforge.verify.verdict import Attribution, KernelUse

    def at(share, *ops):
        top = [KernelUse(name="kforge::ext::gemm", origin="candidate", ms=1.0, calls=1, share=share)]
        top += [KernelUse(name=n, origin="torch", ms=1.0, calls=1, share=(1 - share) / len(ops)) for n in ops]
        return Attribution(kernel_share=share, top=top)

    assert share_fell(at(0.05, "aten::im2col", "aten::copy_"), 0.69, {"aten::im2col", "aten::copy_"}) == []
    assert share_fell(at(0.5, "aten::clamp"), 1.0, set()) == ["aten::clamp"]
    assert share_fell(at(0.8, "aten::clamp"), 1.0, set()) == []  # fell by less than SHARE_DROP
