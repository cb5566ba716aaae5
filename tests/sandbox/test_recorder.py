"""The recorder wraps Triton's launcher and CuPy's kernels without importing either: when the candidate does."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import kforge

SCRIPT = r"""
import sys
import torch  # noqa: F401
from kforge.sandbox.recorder import Recorder
Recorder().install()
assert "triton" not in sys.modules, "install imported triton"
from triton.runtime.jit import JITFunction
assert getattr(JITFunction.run, "_kforge", False), "triton's launcher was not wrapped on import"
print("ok")
"""


def test_triton_is_wrapped_when_someone_imports_it_not_before():
    pytest.importorskip("triton")
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


# A stand-in for CuPy (not installed in CI): kernel types whose launches write the memory of the arrays they are
# given through its address, as CuPy's do, and arrays made from a tensor that share its memory.
FAKE_CUPY = r'''
import ctypes


class _Memory:
    def __init__(self, ptr):
        self.ptr = ptr


class ndarray:
    def __init__(self, tensor):
        self.data, self.size = _Memory(tensor.data_ptr()), tensor.numel()


def asarray(tensor):
    return ndarray(tensor)


def _relu(x, y):
    src = (ctypes.c_float * x.size).from_address(x.data.ptr)
    dst = (ctypes.c_float * y.size).from_address(y.data.ptr)
    for i in range(x.size):
        dst[i] = max(src[i], 0.0)


class RawKernel:
    def __init__(self, code, name):
        self.name = name

    def __call__(self, grid, block, args, **kwargs):
        _relu(*args)


class _Function:
    def __call__(self, grid, block, args):
        _relu(*args)


class RawModule:
    def __init__(self, code):
        pass

    def get_function(self, name):
        return _Function()
'''

CUPY_SCRIPT = r"""
import torch
from kforge.sandbox.recorder import Recorder
from kforge.verify.dataflow import Dataflow
rec = Recorder()
rec.install()
import cupy as cp
assert getattr(cp.RawKernel, "_kforge", False), "RawKernel was not wrapped on import"
kernel = cp.RawKernel("...", "relu_kernel")
function = cp.RawModule("...").get_function("relu_kernel")
x = torch.randn(64)
y = torch.empty_like(x)
kernel((1,), (64,), (cp.asarray(x), cp.asarray(y)))  # not recording: straight through
assert torch.equal(y, torch.relu(x)) and rec.calls == 0
for launch in (kernel, function):
    flow = Dataflow(torch, lambda: None)
    rec.start("dataflow", flow)
    with flow:
        y = torch.empty_like(x)
        launch((1,), (64,), (cp.asarray(x), cp.asarray(y)))
        out = y + 0
    rec.stop()
    assert rec.calls == 1 and flow.reaches(out) is True and torch.equal(out, torch.relu(x)), launch
print("ok")
"""


def test_cupy_launches_are_recorded_and_their_writes_followed(tmp_path):
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text(FAKE_CUPY)
    root = str(Path(kforge.__file__).parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), root])}
    out = subprocess.run([sys.executable, "-c", CUPY_SCRIPT], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
