"""The analysis agent: prompt, reply parsing, visual mode."""

import pytest

from kforge.agents import AnalysisAgent, parse_recommendation
from kforge.backends import get_backend
from kforge.llm import ModelConfig, make_model
from kforge.problems import resolve_problem
from kforge.profile import KernelStat, Profile
from kforge.profile.digest import build
from kforge.profile.render import render_png
from kforge.verify import State, TimingStats, Verdict

REPLY = ("After looking at the numbers:\n**BOTTLENECK:** memory-bound, poorly coalesced loads\n"
         "EVIDENCE: DRAM throughput 35% of peak while the SMs idle\n"
         "ACTION: load float4 per thread and make consecutive threads read consecutive addresses\n")


def test_parse_three_fields():
    r = parse_recommendation(REPLY, "gpt-5")
    assert r.bottleneck == "memory-bound, poorly coalesced loads" and r.evidence.startswith("DRAM throughput 35%")
    assert r.action.startswith("load float4") and r.source == "gpt-5"
    assert "Do this: load float4" in r.text()


def test_parse_free_text_becomes_the_action():
    r = parse_recommendation("Use shared memory tiling.", "m")
    assert r.action == "Use shared memory tiling." and r.bottleneck == "unstated"


def setup(multimodal=False, visual=False):
    llm = make_model(ModelConfig(name="analyst", kind="scripted", replies=[REPLY], multimodal=multimodal))
    agent = AnalysisAgent(llm, get_backend("cuda"), device_name="an NVIDIA H100 GPU", visual=visual)
    problem = resolve_problem("level1/1_ReLU", size="gpu")
    verdict = Verdict(State.CORRECT, "ok", runtime=TimingStats(2.0, 2.0, 0, 10, 2.0),
                      ref=TimingStats(1.0, 1.0, 0, 10, 1.0))
    digest = build(problem, Profile("ncu", "H100", [KernelStat("relu_kernel", 2.0, 1, {"dram_pct": 35})], 2.0),
                   time_ms=2.0, ceilings={"bandwidth_bytes_per_s": 3e12, "fp32_flops": 5e13})
    return llm, agent, problem, verdict, digest


def test_prompt_holds_code_digest_and_speedup():
    llm, agent, problem, verdict, digest = setup()
    rec = agent.analyse(problem, "CODE_OF_THE_KERNEL", verdict, digest)
    text = llm.prompts[0][0]["content"]
    assert "CODE_OF_THE_KERNEL" in text and "relu_kernel" in text and "dram_pct=35" in text and "0.50x" in text
    assert rec.action.startswith("load float4") and rec.usage.prompt_tokens == 0


def test_visual_mode_sends_the_png(tmp_path):
    llm, agent, problem, verdict, digest = setup(multimodal=True, visual=True)
    png = render_png(digest, tmp_path / "d.png")
    agent.analyse(problem, "code", verdict, digest, png)
    content = llm.prompts[0][0]["content"]
    assert content[0]["type"] == "text" and "picture of the digest" in content[0]["text"]
    assert content[1]["image_url"]["url"].startswith("data:image/png;base64,iVBOR")


def test_visual_mode_needs_a_multimodal_model():
    with pytest.raises(ValueError, match="multimodal"):
        setup(multimodal=False, visual=True)
