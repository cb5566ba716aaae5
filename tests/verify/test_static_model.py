"""The static rules follow however a program binds ``ModelNew`` to the class it names."""

import ast
from pathlib import Path

import pytest

from kforge.backends import get_backend
from kforge.verify.static import check
from kforge.verify.static_model import model_classes, model_methods

KERNEL = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_ext = load_inline(name="kf_relu", cpp_sources=["torch::Tensor relu_fwd(torch::Tensor x);"], functions=["relu_fwd"])
'''

CALLS = '''
class FusedRelu(nn.Module):
    def forward(self, x):
        return _ext.relu_fwd(x)
'''

IGNORES = '''
class FusedRelu(nn.Module):
    def forward(self, x):
        return torch.relu(x)
'''

BINDINGS = {
    "alias": "ModelNew = FusedRelu\n",
    "alias of an alias": "_Impl = FusedRelu\nModelNew = _Impl\n",
    "subclass adding nothing": "class ModelNew(FusedRelu):\n    pass\n",
    "factory returning the class": "def make_model():\n    return FusedRelu\n\nModelNew = make_model()\n",
    "factory as ModelNew": "def ModelNew(*args):\n    return FusedRelu(*args)\n",
    "conditional": "USE_KERNEL = True\nModelNew = FusedRelu if USE_KERNEL else nn.Identity\n",
    "partial": "import functools\nModelNew = functools.partial(FusedRelu)\n",
    "registry": "MODELS = {'fused': FusedRelu}\nModelNew = MODELS['fused']\n",
    "global in a function": "def _register():\n    global ModelNew\n    ModelNew = FusedRelu\n\n_register()\n",
}


def names(source: str) -> list[str]:
    return [c.name for c in model_classes(ast.parse(source))]


@pytest.mark.parametrize("binding", BINDINGS.values(), ids=BINDINGS.keys())
def test_the_binding_leads_to_the_class_and_its_forward(binding):
    tree = ast.parse(KERNEL + CALLS + binding)
    assert [f.name for f in model_methods(tree, "forward")] == ["forward"]
    findings = check(KERNEL + CALLS + binding, get_backend("cpu"))
    assert "kernel_not_called" not in {f.rule for f in findings}, findings
    ignoring = check(KERNEL + IGNORES + binding, get_backend("cpu"))
    assert "kernel_not_called" in {f.rule for f in ignoring}, binding


def test_a_class_made_inside_a_factory_is_found():
    source = KERNEL + '''
def build_model_cls(use_kernel=True):
    class _Relu(nn.Module):
        def forward(self, x):
            return _ext.relu_fwd(x)
    return _Relu

ModelNew = build_model_cls()
'''
    assert names(source) == ["_Relu"]
    assert "kernel_not_called" not in {f.rule for f in check(source, get_backend("cpu"))}


def test_a_class_bound_global_inside_a_function_is_found_in_its_scope():
    source = KERNEL + '''
def _register():
    global ModelNew

    class _Relu(nn.Module):
        def forward(self, x):
            return torch.relu(x)

    ModelNew = _Relu


_register()
'''
    assert names(source) == ["_Relu"]
    assert "kernel_not_called" in {f.rule for f in check(source, get_backend("cpu"))}


def test_a_forward_inherited_from_the_problems_model_is_not_the_kernel():
    """``class ModelNew(Model)`` with no forward of its own runs the reference's forward."""
    source = KERNEL + "class ModelNew(Model):\n    def __init__(self):\n        super().__init__()\n"
    assert names(source) == ["ModelNew"] and model_methods(ast.parse(source), "forward") == []
    assert "kernel_not_called" in {f.rule for f in check(source, get_backend("cpu"))}


def test_what_the_source_does_not_define_resolves_to_nothing():
    for binding in ("from fused import FusedRelu as ModelNew\n", "ModelNew = type('M', (nn.Module,), {})\n",
                    "ModelNew = Model\n"):  # the problem's own Model: its namespace, not the source
        assert names(KERNEL + binding) == [], binding
        assert "kernel_not_called" not in {f.rule for f in check(KERNEL + binding, get_backend("cpu"))}


def test_a_cycle_ends():
    assert names("A = B\nB = A\nModelNew = A\n") == []


# As models write a training step: an autograd Function whose forward and backward call the extension.
THROUGH_A_FUNCTION = KERNEL + '''

class _ReluFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return _ext.relu_fwd(x)

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return grad_out * (x > 0)


class ModelNew(nn.Module):
    def forward(self, x):
        return _ReluFn.apply(x)
'''


def test_a_kernel_called_through_an_autograd_function_is_called():
    """The Function's `forward` shares ModelNew's forward's name: it was taken as already seen, and every such
    candidate (the backward one-shot example among them) was told its kernel is never called."""
    assert "kernel_not_called" not in {f.rule for f in check(THROUGH_A_FUNCTION, get_backend("cpu"))}
    example = Path(__file__).parents[2] / "prompts" / "examples" / "cpu" / "backward" / "model_new.py"
    assert "kernel_not_called" not in {f.rule for f in check(example.read_text(), get_backend("cpu"))}
    torch_only = THROUGH_A_FUNCTION.replace("return _ext.relu_fwd(x)", "return x.clamp_min(0)")
    assert "kernel_not_called" in {f.rule for f in check(torch_only, get_backend("cpu"))}
