"""KernelBench from the Hugging Face dataset: rows become a KernelBench layout; offline is a clear error."""

import pytest

from kforge.problems import ProblemError, load_directory
from kforge.problems.huggingface import load_huggingface, write_layout

CODE = ("import torch\nN = 8\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
        "def get_inputs():\n    return [torch.randn(N)]\ndef get_init_inputs():\n    return []\n")


def test_rows_become_a_kernelbench_layout(tmp_path):
    rows = [{"code": CODE, "level": 1, "name": "19_ReLU", "problem_id": 19},
            {"code": CODE, "level": 2, "name": "Gemm_Add.py", "problem_id": 3}]
    write_layout(rows, tmp_path)
    keys = [p.key for p in load_directory(tmp_path)]
    assert keys == ["level1/19_ReLU", "level2/3_Gemm_Add"]


def test_offline_download_says_what_to_do(monkeypatch, tmp_path):
    import huggingface_hub.constants as c
    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("KFORGE_CACHE_DIR", str(tmp_path / "kf"))
    with pytest.raises(ProblemError, match="cannot download the KernelBench dataset.*problems=kernelbench problems.root"):
        load_huggingface("ScalingIntelligence/KernelBench", levels=1)
