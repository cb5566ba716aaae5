"""Extraction: regions as problem files at the shapes seen, workload.json, each region verifying against itself."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from kforge.problems import load_problem_file
from kforge.verify import Verifier, VerifyConfig
from kforge.workload.assemble import RegionKernel, assemble
from kforge.workload.extract import Workload, extract, identity_candidate
from kforge.workload.profile import WorkloadError, profile_model

from .helpers import BLOCK

IDENTITY = VerifyConfig(require_kernel=False, skip_timing=True, compile_ref=False, trials=2, attribution=False)
#: The assembled model builds its regions at the sizes they were extracted at, so, as `evaluate` does, without the
#: model file's shape variants (its literal sizes would be changed under regions that cannot follow).
WHOLE = replace(IDENTITY, variants=False)


@pytest.fixture(scope="module")
def block(pool, tmp_path_factory):
    problem = load_problem_file(BLOCK, size="cpu")
    prof = profile_model(problem, "cpu", pool, iterations=2, warmup=1)
    return problem, prof, extract(prof, problem, tmp_path_factory.mktemp("block"), cover=1.0)


def test_regions_are_problems_at_the_shapes_seen(block):
    _, prof, w = block
    assert {r.path for r in w.regions} == {"attn", "norm", "up", "gate", "gate_norm", "down"}
    assert w.coverage == pytest.approx(sum(r.share for r in w.regions))
    assert w.coverage == pytest.approx(1.0 - prof.module("").self_ms / prof.total_ms, abs=1e-6)
    assert all(r.style == "class" and r.weights == ("", r.path + ".") for r in w.regions)
    gate = w.region("gate")
    problem = w.load_region(gate)
    assert "torch.randn((256, 256), dtype=torch.float32)" in problem.source
    assert {r.path: r.equivalent for r in w.regions} == {
        "attn": "level3/2_AttentionBlock", "norm": "level1/3_LayerNorm", "up": "level2/1_Gemm_Bias_GELU",
        "gate": "level1/4_Matmul", "down": "level1/4_Matmul", "gate_norm": "level2/4_RMSNorm_SiLUGate"}
    saved = json.loads((w.region_file(gate).parent / "workload.json").read_text())
    assert saved["coverage"] == pytest.approx(w.coverage) and len(saved["regions"]) == 6
    again = Workload.load(w.region_file(gate).parent)
    assert again.regions == w.regions


def test_top_and_cover_choose_the_hottest(block, tmp_path):
    problem, prof, w = block
    top2 = extract(prof, problem, tmp_path / "top2", top=2)
    hottest = sorted(w.regions, key=lambda r: -r.share)[:2]
    assert [r.path for r in top2.regions] == [r.path for r in hottest]
    half = extract(prof, problem, tmp_path / "half", cover=0.5)
    assert half.coverage >= 0.5 and half.coverage - half.regions[-1].share < 0.5
    with pytest.raises(WorkloadError, match="--cover"):
        extract(prof, problem, tmp_path / "x", cover=1.5)


def test_every_region_verifies_against_its_own_model(block, pool):
    _, _, w = block
    with Verifier(IDENTITY, pool=pool) as verifier:
        for r in w.regions:
            problem = w.load_region(r)
            verdict = verifier.verify(problem, identity_candidate(problem.source), "cpu")
            assert verdict.correct, (r.name, verdict.state, verdict.message)


def _extracted(source: str, pool, tmp_path):
    """(the problem, its workload) for a model file's source, profiled on the cpu and extracted whole."""
    path = tmp_path / "model.py"
    path.write_text(source)
    problem = load_problem_file(path)
    prof = profile_model(problem, "cpu", pool, iterations=2, warmup=1)
    return problem, extract(prof, problem, tmp_path / "regions", cover=1.0)


def _every_region_and_the_whole_model_correct(w: Workload, problem, pool) -> None:
    kernels = {r.name: identity_candidate(w.load_region(r).source) for r in w.regions}
    with Verifier(IDENTITY, pool=pool) as verifier:
        for r in w.regions:
            verdict = verifier.verify(w.load_region(r), kernels[r.name], "cpu")
            assert verdict.correct, (r.name, verdict.state, verdict.message)
        whole = verifier.verify(problem, assemble(w, kernels), "cpu", WHOLE)
        assert whole.correct, (whole.state, whole.message)


SEQ_MODEL = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(approximate="tanh"), nn.Linear(hidden, dim))
        self.norm = nn.LayerNorm(dim, eps=1e-3)
        self.head = nn.Linear(dim, 3, bias=False)

    def forward(self, x, scale: float = 1.0):
        return self.head(self.norm(x + self.mlp(x)) * scale)


def get_inputs():
    return [torch.randn(64, 32), 0.5]


def get_init_inputs():
    return [32, 64]
'''


def test_torch_modules_become_wrapper_regions_and_reassemble(pool, tmp_path):
    problem, w = _extracted(SEQ_MODEL, pool, tmp_path)
    by_path = {r.path: r for r in w.regions}
    assert set(by_path) == {"mlp", "norm", "head"}
    assert by_path["norm"].weights == ("norm.", "norm.") and by_path["norm"].style == "wrapper"
    source = w.load_region(by_path["mlp"]).source
    assert "nn.Sequential(nn.Linear(32, 64), nn.GELU(approximate='tanh'), nn.Linear(64, 32))" in source
    assert "nn.LayerNorm(32, eps=0.001)" in w.load_region(by_path["norm"]).source
    assert "nn.Linear(32, 3, bias=False)" in w.load_region(by_path["head"]).source
    _every_region_and_the_whole_model_correct(w, problem, pool)


RNN_MODEL = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """As KernelBench's level-3 LSTMs are written: the initial state on self, handed over as a tuple."""

    def __init__(self, input_size, hidden_size, num_layers, batch_size):
        super().__init__()
        self.h0 = torch.randn((num_layers, batch_size, hidden_size))
        self.c0 = torch.randn((num_layers, batch_size, hidden_size))
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers, batch_first=True)
        self.fc = nn.Linear(hidden_size, 4)

    def forward(self, x):
        self.h0 = self.h0.to(x.device)
        self.c0 = self.c0.to(x.device)
        out, _ = self.lstm(x, (self.h0, self.c0))
        return self.fc(out[:, -1, :])


def get_inputs():
    return [torch.randn(3, 5, 8)]


def get_init_inputs():
    return [8, 16, 2, 3]
'''


def test_a_tuple_of_tensors_becomes_inputs_of_the_region_packed_again(pool, tmp_path):
    problem, w = _extracted(RNN_MODEL, pool, tmp_path)
    lstm = w.region("lstm")
    source = w.load_region(lstm).source
    # each tensor its own input, so the verifier moves it to the device; the module gets its tuple back
    assert "def forward(self, x0, x1_0, x1_1):" in source and "self.lstm(x0, (x1_0, x1_1))" in source
    assert "torch.randn((2, 3, 16), dtype=torch.float32)" in source
    kernels = {r.name: identity_candidate(w.load_region(r).source) for r in w.regions}
    with Verifier(IDENTITY, pool=pool) as verifier:
        verdict = verifier.verify(w.load_region(lstm), kernels[lstm.name], "cpu")
        assert verdict.correct, (verdict.state, verdict.message)
        # nn.LSTM returns (out, (h, c)): the nested state is an output too, compared like the rest
        half = kernels[lstm.name].replace("return self.lstm(x0, (x1_0, x1_1))",
                                          "out, (h, c) = self.lstm(x0, (x1_0, x1_1))\n        return out, (h, h)")
        assert half != kernels[lstm.name]
        assert verifier.verify(w.load_region(lstm), half, "cpu").state == "numerical_mismatch"
        whole = verifier.verify(problem, assemble(w, kernels), "cpu", WHOLE)
        assert whole.correct, (whole.state, whole.message)
        wrong = kernels[lstm.name].replace("return self.lstm(x0, (x1_0, x1_1))", "return self.lstm(x0, (x1_0, x1_0))")
        assert wrong != kernels[lstm.name]
        assert not verifier.verify(problem, assemble(w, {lstm.name: wrong}), "cpu", WHOLE).correct


ENCODER_MODEL = '''
import copy

import torch
import torch.nn as nn


def _get_clones(module, n):
    return nn.ModuleList([copy.deepcopy(module) for _ in range(n)])


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        return x + self.fc(self.norm(x))


class Model(nn.Module):
    """Layers deep-copied from one prototype: torch's own (as KernelBench's 28_VisionTransformer builds its
    encoder) and the model's (as DETR-style code does with _get_clones)."""

    def __init__(self, dim, heads, depth):
        super().__init__()
        self.embed = nn.Linear(16, dim)
        layer = nn.TransformerEncoderLayer(d_model=dim, nhead=heads, dim_feedforward=2 * dim, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, num_layers=depth, enable_nested_tensor=False)
        self.blocks = _get_clones(Block(dim), depth)

    def forward(self, x):
        x = self.encoder(self.embed(x))
        for block in self.blocks:
            x = block(x)
        return x


def get_inputs():
    return [torch.randn(12, 2, 16)]


def get_init_inputs():
    return [32, 4, 2]
'''


def test_layers_deep_copied_from_a_prototype_can_be_regions(pool, tmp_path):
    problem, w = _extracted(ENCODER_MODEL, pool, tmp_path)
    assert not [s for s in w.skipped if "construction was not seen" in s["why"]], w.skipped
    # torch's TransformerEncoder reads layers[0].self_attn.batch_first itself: the encoder is one region,
    # written down through its deep-copied layer's constructor call, and nothing inside it is a region
    assert {r.path for r in w.regions} == {"embed", "encoder", "blocks.0", "blocks.1"}
    encoder = w.load_region(w.region("encoder")).source
    assert "nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0" in encoder
    # the clones were never constructed, yet are built as their prototype was
    assert w.region("blocks.1").style == "class" and w.region("blocks.1").init_args == ["32"]
    _every_region_and_the_whole_model_correct(w, problem, pool)


def test_a_model_profiled_in_bf16_is_extracted_as_written_and_verified_in_bf16(pool, tmp_path):
    """At bf16 the model runs cast (inputs, weights), as `kforge verify --precision bf16` casts a problem; the
    regions are written as the model file is (float32, with a wrapper's weights not pinned to bf16), the
    workload remembers its precision, and a folder extracted at another precision is not reused."""
    from kforge.workload.assemble import evaluate
    from kforge.workload.prepare import prepare
    problem = load_problem_file(BLOCK, size="cpu")
    prof = profile_model(problem, "cpu", pool, iterations=1, warmup=1, config=VerifyConfig(precision="bf16"))
    assert prof.precision == "bf16"
    assert prof.module("gate").inputs["args"][0]["dtype"] == "torch.bfloat16"  # what ran was cast
    assert prof.module("up.linear").param_dtypes == ["torch.bfloat16"]
    w = extract(prof, problem, tmp_path / "bf16", cover=1.0)
    assert w.precision == "bf16" and Workload.load(tmp_path / "bf16").precision == "bf16"
    gate = w.load_region(w.region("gate"))
    assert "torch.randn((256, 256), dtype=torch.float32)" in gate.source and "bfloat16" not in gate.source
    assert "--precision bf16" in gate.source
    bf16 = replace(WHOLE, precision="bf16")
    verifier = Verifier(bf16, pool=pool)
    kernels = {r.name: RegionKernel(identity_candidate(w.region_file(r).read_text()), None) for r in w.regions}
    result = evaluate(w, verifier, "cpu", kernels, config=bf16)
    assert result.correct and result.precision == "bf16", result.summary()
    assert result.summary().startswith("whole model in bf16: correct")
    with pytest.raises(WorkloadError, match=r"cpu, bf16\), not of .* fp32\)"):
        prepare(problem, "cpu", pool, tmp_path / "bf16", precision="fp32")
    again, reused = prepare(problem, "cpu", pool, tmp_path / "bf16", precision="bf16")
    assert reused and again.precision == "bf16"
