"""Program surgery: renaming respects Python's scopes, closure keeps what a class needs."""

from __future__ import annotations

import pytest

from kforge.workload.source import (
    SourceError,
    closure,
    import_bindings,
    module_names,
    rename_top_level,
    strip_entry_points,
)

KERNEL = '''
import torch
import torch.nn as nn

BLOCK = 256
try:
    from torch.utils.cpp_extension import load_inline
    _ext = object()
except Exception:
    _ext = None


def launch(x, BLOCK=BLOCK):
    return x * BLOCK


def helper(x):
    global _ext
    n = BLOCK
    return launch(x, n) if _ext is not None else x


class ModelNew(nn.Module):
    BLOCK = 4

    def __init__(self):
        super().__init__()
        self.block = BLOCK

    def forward(self, x):
        BLOCK = 2
        return helper(x) + BLOCK + self.BLOCK
'''


def run(source: str) -> dict:
    scope: dict = {}
    exec(compile(source, "<test>", "exec"), scope)  # our own fixture text, not a candidate
    return scope


def test_rename_keeps_meaning_and_scopes():
    renamed, mapping = rename_top_level(KERNEL, "_kf_r1_")
    assert {"BLOCK", "_ext", "launch", "helper", "ModelNew"} <= set(mapping)
    assert "load_inline" not in mapping and "torch" not in mapping  # imports keep their names
    before, after = run(KERNEL), run(renamed)
    import torch
    x = torch.ones(2)
    assert torch.equal(before["ModelNew"]()(x), after["_kf_r1_ModelNew"]()(x))
    assert after["_kf_r1_ModelNew"].BLOCK == 4  # a class attribute is not a module-level name
    assert "_kf_r1_BLOCK" in renamed and "def launch(x, BLOCK=_kf_r1_BLOCK)" in renamed.replace("_kf_r1_launch",
                                                                                                    "launch")


def test_module_names_include_guarded_definitions():
    assert {"_ext", "BLOCK"} <= module_names(KERNEL)


def test_closure_keeps_what_a_class_needs():
    src = "import math\nA = 2\nB = 3\ndef f(x):\n    return x * A\nclass C:\n    k = f(1)\nclass D:\n    pass\n"
    kept = closure(src, "C")
    assert "A = 2" in kept and "def f" in kept and "import math" in kept
    assert "B = 3" not in kept and "class D" not in kept
    with pytest.raises(SourceError, match="no top-level `E`"):
        closure(src, "E")


def test_strip_entry_points_and_import_bindings():
    src = "import torch.nn as nn\nKFORGE = {}\nclass Model: pass\ndef get_inputs(): return []\n" \
          "def get_init_inputs(): return []\n"
    out = strip_entry_points(src)
    assert "get_inputs" not in out and "KFORGE" not in out and "class Model" in out
    assert import_bindings(src) == {"nn": "torch.nn"}


def test_import_bindings_read_spellings_of_one_binding_alike():
    # KernelBench's 31_VisionAttention region imports torch.nn.modules.linear (for MultiheadAttention's
    # out_proj type) beside the model's `import torch`: both bind `torch` to the torch package.
    assert import_bindings("import torch.nn.modules.linear") == import_bindings("import torch") == {"torch": "torch"}
    assert import_bindings("from torch import nn") == import_bindings("import torch.nn as nn")
    assert import_bindings("from . import a as b") == {"b": ".a"}
    assert import_bindings("import numpy as nn") != import_bindings("import torch.nn as nn")
