"""Prompt rendering (StrictUndefined) and the generation agent's use of replies."""

import jinja2
import pytest

from kforge.agents import GenerationAgent, Prompts, Reference
from kforge.backends import get_backend
from kforge.llm import ModelConfig, make_model
from kforge.problems import resolve_problem
from kforge.verify import Evidence, State, TimingStats, Verdict

PROGRAM = "import torch\nclass ModelNew(torch.nn.Module):\n    pass\n"


@pytest.fixture
def relu():
    return resolve_problem("level1/1_ReLU", size="cpu")


def agent(replies):
    return GenerationAgent(make_model(ModelConfig(name="s", kind="scripted", replies=replies)), get_backend("cpu"))


def test_templates_refuse_missing_variables():
    with pytest.raises(jinja2.UndefinedError):
        Prompts().render("fix", backend=get_backend("cpu"))


def test_single_shot_prompt_has_example_problem_and_ops(relu):
    a = agent([f"```python\n{PROGRAM}```"])
    att = a.single_shot(relu)
    system, user = att.messages[0]["content"], att.messages[1]["content"]
    assert "C++" in system and "ModelNew" in system
    assert "add_scale" in user and relu.source.strip() in user and "relu" in user
    assert "working implementation for another accelerator" not in user
    assert att.candidate.source == PROGRAM and att.phase == "single_shot"


def test_single_shot_with_reference(relu):
    ref = Reference(backend="cuda", backend_language="CUDA C++", code="# the cuda program", source="oracle")
    att = agent([f"```python\n{PROGRAM}```"]).single_shot(relu, ref)
    assert "working implementation for another accelerator" in att.messages[1]["content"]
    assert "# the cuda program" in att.messages[1]["content"]


def test_fix_prompt_carries_the_evidence(relu):
    v = Verdict(State.COMPILATION_FAILURE, "the candidate does not build",
                evidence=Evidence(compiler_log="main.cpp:11:15: error: expected ';' before '}' token"))
    att = agent([f"```python\n{PROGRAM}```"]).fix(relu, "old program text", v, iteration=1)
    user = att.messages[1]["content"]
    assert "compilation_failure" in user and "expected ';'" in user and "old program text" in user
    v = Verdict(State.NUMERICAL_MISMATCH, "output 0: 10 elements outside",
                evidence=Evidence(mismatch={"max_abs_err": 0.5, "trial": "correctness trial 0"}))
    user = agent(["x"]).fix(relu, None, v, iteration=1).messages[1]["content"]
    assert "max_abs_err: 0.5" in user and "contained no usable program" in user


def test_optimise_prompt_has_timing_and_recommendation(relu):
    t = TimingStats(1.0, 1.0, 0.0, 10, 1.0)
    v = Verdict(State.CORRECT, "ok", runtime=t, ref=TimingStats(2.0, 2.0, 0.0, 10, 2.0))
    user = agent(["x"]).optimise(relu, PROGRAM, v, "Fuse the two passes.", iteration=2).messages[1]["content"]
    assert "1.0000 ms" in user and "2.00x" in user and "Fuse the two passes." in user


def test_reply_without_code_is_a_generation_failure(relu):
    att = agent(["I would rather explain."]).single_shot(relu)
    assert att.candidate.source is None and "no code block" in att.candidate.error


def test_failed_model_call_becomes_a_failed_attempt(relu):
    att = agent([]).single_shot(relu)  # the scripted model has nothing to say
    assert att.candidate.source is None and "model call failed" in att.candidate.error


class _Recording:
    """A model that remembers what each call was for."""

    def __init__(self):
        from kforge.llm import ModelConfig
        self.config = ModelConfig(name="rec", kind="scripted")
        self.contexts = []

    def check(self):
        pass

    def complete(self, messages, context=None):
        from kforge.llm import LLMResponse
        self.contexts.append(context)
        return LLMResponse(text=f"```python\n{PROGRAM}```", model="rec")


def test_precision_picks_the_example_and_states_the_contract(relu):
    model = _Recording()
    att = GenerationAgent(model, get_backend("cuda"), precision="bf16").single_shot(relu)
    system, user = att.messages[0]["content"], att.messages[1]["content"]
    assert "Precision of this job: bf16" in system and "torch.bfloat16" in system and "tensor cores" in system
    assert "wmma::mma_sync" in user and ", for bf16" in user  # the bf16 one-shot example, not add_scale
    assert model.contexts[0].precision == "bf16"  # the oracle answers from the precision's folder
    fp32 = GenerationAgent(_Recording(), get_backend("cuda")).single_shot(relu)
    assert "Precision of this job" not in fp32.messages[0]["content"]
    assert "add_scale" in fp32.messages[1]["content"] and "wmma" not in fp32.messages[1]["content"]


def test_cpu_prompt_at_bf16_asks_for_float_accumulation_not_tensor_cores(relu):
    att = GenerationAgent(_Recording(), get_backend("cpu"), precision="bf16").single_shot(relu)
    system, user = att.messages[0]["content"], att.messages[1]["content"]
    assert "compute and accumulate in float32" in system and "tensor cores" not in system
    assert "at::BFloat16" in user


def test_a_precision_without_its_own_example_falls_back_and_the_prompt_says_which_it_shows(relu):
    """fp16 fell back to the float32 example, labelled "for fp16" beside a system prompt saying float16 arrives."""
    cpu = get_backend("cpu")
    assert cpu.example_dir("fp16").name == "bf16" and cpu.example_precision("fp16") == "bf16"
    assert cpu.example_dir("bf16").name == "bf16" and cpu.example_precision("tf32") == "fp32"
    with pytest.raises(ValueError, match="unknown precision 'int4'"):
        cpu.example("int4")
    user = GenerationAgent(_Recording(), cpu, precision="fp16").single_shot(relu).messages[1]["content"]
    assert ", for bf16" in user and ", for fp16" not in user
    assert "This example is written for bf16; the program below runs at fp16" in user
    opencl = GenerationAgent(_Recording(), get_backend("opencl"), precision="bf16").single_shot(relu)
    user = opencl.messages[1]["content"]
    assert ", for bf16" not in user and "This example is written for fp32; the program below runs at bf16" in user
    same = GenerationAgent(_Recording(), cpu, precision="bf16").single_shot(relu).messages[1]["content"]
    assert "This example is written for" not in same


def test_a_backend_without_a_training_example_refuses_the_backward_mode():
    with pytest.raises(ValueError, match=r"backend opencl has no training-step example .*: cpu, cuda, triton"):
        get_backend("opencl").example_dir("fp32", backward=True)
    assert get_backend("cpu").example_precision("bf16", backward=True) == "fp32"  # backward/ is float32's


def test_in_the_backward_mode_the_prompts_ask_for_backward_kernels_and_show_the_training_example(relu):
    a = GenerationAgent(make_model(ModelConfig(name="s", kind="scripted", replies=[f"```python\n{PROGRAM}```"] * 3)),
                        get_backend("cpu"), backward=True)
    att = a.single_shot(relu)
    system, user = att.messages[0]["content"], att.messages[1]["content"]
    assert "training step" in system and ".grad" in system
    assert "## The backward pass" in user and "torch.autograd.Function" in user and "add_scale_backward" in user
    forward = agent([f"```python\n{PROGRAM}```"]).single_shot(relu).messages
    assert "backward" not in forward[0]["content"] + forward[1]["content"]  # the forward's prompts as they were
    v = Verdict(State.NUMERICAL_MISMATCH, "the gradient of input 0: 3 of 8 elements outside",
                evidence=Evidence(mismatch={"gradient": "input 0"}))
    assert "Checked as a training step" in a.fix(relu, PROGRAM, v, iteration=1).messages[1]["content"]
    t = TimingStats(1.0, 1.0, 0.0, 10, 1.0)
    v = Verdict(State.CORRECT, "ok", runtime=t, ref=TimingStats(2.0, 2.0, 0.0, 10, 2.0), floor_ms=0.1)
    user = a.optimise(relu, PROGRAM, v, "fuse", iteration=2).messages[1]["content"]
    assert "one training step" in user and "of the forward alone" in user


@pytest.mark.parametrize("backend", ["cpu", "cuda", "triton"])
def test_the_oracle_answers_the_backward_mode_with_its_backward_solution(backend):
    problem = resolve_problem("level1/3_LayerNorm", size="cpu")
    oracle = make_model(ModelConfig(name="oracle", kind="oracle"))
    code = GenerationAgent(oracle, get_backend(backend), backward=True).single_shot(problem).candidate.source
    assert "torch.autograd.Function" in code and "oracle, not an LLM" in code
    forward = GenerationAgent(oracle, get_backend(backend)).single_shot(problem).candidate.source
    assert "autograd" not in forward
    none = GenerationAgent(oracle, get_backend(backend), backward=True).single_shot(
        resolve_problem("level1/6_Conv2d", size="cpu"))
    assert none.candidate.source is None and "no backward solution" in none.candidate.error


def test_a_reply_cut_off_at_max_tokens_says_so(relu, tmp_path):
    """``finish_reason=length`` was never read: a reply cut before ModelNew was "none binds ModelNew", one cut
    inside forward a Python syntax error. A real litellm call to a local server that cuts its replies off."""
    from tests.llm.stub_server import StubServer
    head = "```python\nimport torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x."
    replies = [{"content": "```python\nimport torch\ncpp = '''\nint f(", "finish_reason": "length"},
               {"content": head, "finish_reason": "length"},
               {"content": f"```python\n{PROGRAM}```\n\nWhy it is fast: the", "finish_reason": "length"}]
    with StubServer(replies) as server:
        cfg = ModelConfig(name="local", model="hosted_vllm/m", api_base=server.api_base, max_tokens=777, retries=0)

        def ask(n):
            llm = make_model(cfg, cache_root=tmp_path / f"llm{n}")  # one prompt: a cache of its own for each reply
            return GenerationAgent(llm, get_backend("cpu")).single_shot(relu, iteration=n).candidate
        cut_before, cut_inside, complete = ask(0), ask(1), ask(2)
        replayed = ask(0)  # the same request again: from the response cache, no call
        assert len(server.requests) == 3
    for c in (cut_before, cut_inside, replayed):
        assert c.source is None and c.error.startswith("the reply was cut off at the model's token limit (777 tokens)")
        assert "answer more briefly" in c.error and "model.max_tokens" in c.error
    assert complete.source == PROGRAM and complete.error is None  # the program closed before the cut: used
    v = Verdict(State.GENERATION_FAILURE, cut_inside.error)
    user = agent(["x"]).fix(relu, None, v, iteration=1).messages[1]["content"]
    assert "cut off at the model's token limit" in user
