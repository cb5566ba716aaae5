"""The recorder wraps Triton's launcher without importing Triton itself: when the candidate imports it."""

import subprocess
import sys

import pytest

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
