"""Profiling a model in a worker: time by module and by operator, constructors and inputs read."""

from __future__ import annotations

import pytest

from kforge.problems import load_problem_file
from kforge.workload.profile import WorkloadError, plot, profile_model, render_table

from .helpers import BLOCK


@pytest.fixture(scope="module")
def block_profile(pool):
    return profile_model(load_problem_file(BLOCK, size="cpu"), "cpu", pool, iterations=2, warmup=1)


def test_shares_by_module_and_operator_sum_to_one(block_profile):
    prof = block_profile
    assert prof.total_ms > 0
    assert sum(m.self_ms for m in prof.modules) == pytest.approx(prof.total_ms, rel=1e-6)
    assert sum(o.share for o in prof.ops) == pytest.approx(1.0, abs=1e-6)
    assert prof.module("").share == pytest.approx(1.0)
    paths = {m.path for m in prof.modules}
    assert {"attn", "attn.qkv", "norm.norm", "up.linear", "gate", "gate_norm", "down"} <= paths
    attn = prof.module("attn")
    assert attn.total_ms == pytest.approx(attn.self_ms + sum(prof.module(c).total_ms for c in attn.children))
    assert any(o.name in ("aten::mm", "aten::addmm", "aten::bmm") for o in prof.ops)


def test_constructors_and_first_call_inputs(block_profile):
    prof = block_profile
    attn = prof.module("attn")
    assert attn.ctor == "AttentionBlock(256, 4)" and attn.init_args == ["256", "4"] and attn.in_model
    assert prof.module("attn.qkv").ctor == "nn.Linear(256, 768)"
    assert prof.module("gate_norm").init_args == ["512", "1e-06"]
    gate = prof.module("gate")
    assert gate.calls == 1
    assert [a["shape"] for a in gate.inputs["args"]] == [[256, 256], [256, 512]]
    assert gate.inputs["args"][0]["dtype"] == "torch.float32"


def test_table_and_picture(block_profile, tmp_path):
    text = render_table(block_profile)
    assert "attn" in text and "AttentionBlock" in text and "aten::" in text
    png = plot(block_profile, tmp_path / "p.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


BROKEN = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        return self.fc(x).view(3, -1, 7)


def get_inputs():
    return [torch.randn(4, 16)]


def get_init_inputs():
    return [{init}]
'''


def test_a_model_that_fails_says_where_and_why(pool, tmp_path):
    bad_init = tmp_path / "bad_init.py"
    bad_init.write_text(BROKEN.format(init="'sixteen'"))
    with pytest.raises(WorkloadError, match=r"bad_init.py: the model failed to build: TypeError"):
        profile_model(load_problem_file(bad_init), "cpu", pool)
    bad_run = tmp_path / "bad_run.py"
    bad_run.write_text(BROKEN.format(init="16"))
    with pytest.raises(WorkloadError, match=r"bad_run.py: the model failed to run: RuntimeError: shape"):
        profile_model(load_problem_file(bad_run), "cpu", pool)


class _Event:
    """The fields of torch.profiler's FunctionEvent that `attribute` reads."""

    def __init__(self, name, parent=None, device="DeviceType.CPU", cpu=0.0, device_us=None, old_name=False):
        self.name, self.cpu_parent, self.device_type = name, parent, device
        self.self_cpu_time_total = self.cpu_time_total = cpu
        if device_us is not None:
            setattr(self, "self_cuda_time_total" if old_name else "self_device_time_total", device_us)


def test_gpu_time_is_charged_to_the_launching_operator_and_its_innermost_module():
    from kforge.workload.worker import FORWARD, MODULE_RANGE, attribute
    fwd = _Event(FORWARD, cpu=900.0)
    attn = _Event(MODULE_RANGE + "attn", fwd)
    qkv = _Event(MODULE_RANGE + "attn.qkv", attn)
    linear = _Event("aten::linear", qkv, device_us=0.0)  # launches nothing itself
    events = [fwd, attn, qkv, linear,
              _Event("aten::addmm", linear, device_us=300.0),
              _Event("ampere_sgemm_128x64_tn", device="DeviceType.CUDA", device_us=300.0),  # counted via addmm
              _Event("aten::softmax", attn, device_us=100.0, old_name=True),  # an older torch's name
              _Event("aten::add", fwd, device_us=200.0, cpu=50.0)]
    out = attribute(events, cuda=True, iters=2)
    assert out["self_ms"] == {"attn.qkv": 0.15, "attn": 0.05, "": 0.1}
    assert out["total_ms"] == 0.3 and out["wall_ms"] == 0.45
    assert {o.name: o.ms for o in out["ops"]} == {"aten::addmm": 0.15, "aten::softmax": 0.05, "aten::add": 0.1}
    cpu = attribute(events, cuda=False, iters=2)
    assert cpu["self_ms"] == {"": 0.025}  # on a CPU: operators' own CPU time
