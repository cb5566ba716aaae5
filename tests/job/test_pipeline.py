"""The synthesis pipeline end to end on CPU: loop, agents, verifier, MLflow, Hydra."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from kforge import REPO_DIR
from kforge.apps.hydra_conf import model_strings
from kforge.job.pipeline import ConfigError, run
from kforge.llm import ModelConfig, make_model
from kforge.tracking import STATE_CODES
from tests.helpers import FAST, config, fenced, scripted
from tests.llm.stub_server import StubServer


def problem_runs(tmp_path: Path, experiment: str = "kforge"):
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id])
    return client, [r for r in runs if r.data.tags.get("kforge.kind") == "problem"], \
        [r for r in runs if r.data.tags.get("kforge.kind") == "sweep-job"]


def test_iterative_fixes_compile_error_then_mismatch(tmp_path, pool):
    model = scripted(fenced("relu_syntax_error.py"), fenced("relu_wrong_math.py"), fenced("relu_ok.py"))
    result = run(config(tmp_path, "loop.iterations=3"), llm=model, pool=pool)
    states = [r.state for r in result.results[0].records]
    assert states == ["compilation_failure", "numerical_mismatch", "correct"]
    assert [r.phase for r in result.results[0].records] == ["single_shot", "fix", "fix"]
    # The fix prompts carried the evidence: the compiler's words, then the mismatch statistics.
    assert "expected" in model.prompts[1][1]["content"] and "max_abs_err" in model.prompts[2][1]["content"]
    client, problems, parents = problem_runs(tmp_path)
    assert len(problems) == 1 and len(parents) == 1
    run_id = problems[0].info.run_id
    history = sorted(client.get_metric_history(run_id, "state_index"), key=lambda m: m.step)
    assert [(m.step, m.value) for m in history] == [(0, STATE_CODES["compilation_failure"]),
                                                    (1, STATE_CODES["numerical_mismatch"]), (2, STATE_CODES["correct"])]
    files = {f.path for d in ("iter_000", "iter_001", "iter_002") for f in client.list_artifacts(run_id, d)}
    for d in ("iter_000", "iter_001", "iter_002"):
        assert {f"{d}/kernel.py", f"{d}/prompt.md", f"{d}/reply.md", f"{d}/verdict.json"} <= files
    kernel = client.download_artifacts(run_id, "iter_000/kernel.py", str(tmp_path))
    assert "missing semicolon" in Path(kernel).read_text()
    tags = problems[0].data.tags
    assert tags["problem"] == "level1/1_ReLU" and tags["backend"] == "cpu" and tags["loop_mode"] == "iterative"
    assert tags["model"] == "scripted" and tags["reference"] == "none" and tags["profiler"] == "none"
    assert problems[0].data.metrics["best_correct"] == 1.0 and problems[0].info.status == "FINISHED"
    # The state reads as a word beside its index: per iteration in its record.json (logged once), and the
    # problem's outcome as a tag.
    import json
    records = [json.loads(Path(client.download_artifacts(run_id, f"iter_00{i}/record.json", str(tmp_path))).read_text())
               for i in range(3)]
    assert [r["state"] for r in records] == states and tags["state"] == "correct"
    assert not any(k.startswith("state.") for k in tags)
    assert tags["best_kernel"] == tags["kernel.2"] != tags["kernel.0"]
    assert problems[0].data.metrics["best_speedup_vs_eager"] > 0 and "speedup_vs_eager" in problems[0].data.metrics
    # Whose code did the work, per iteration and for the best kernel; the audit's flags as a tag.
    assert 0 < problems[0].data.metrics["kernel_share"] <= 1 and 0 < problems[0].data.metrics["best_kernel_share"] <= 1
    assert "problem_flags" in problems[0].data.tags
    parent = parents[0].data
    assert parent.metrics["fast_0"] == 1.0 and parent.metrics["correctness_rate"] == 1.0
    assert parent.metrics["problems"] == 1 and parent.metrics["geomean_speedup_vs_eager"] > 0
    assert "| level1/1_ReLU | correct |" in parent.tags["mlflow.note.content"]
    assert "loop.mode" in parent.params and parent.params["model.name"] == "scripted"


def test_single_shot_stops_after_one(tmp_path, pool):
    model = scripted(fenced("relu_wrong_math.py"), fenced("relu_ok.py"))
    result = run(config(tmp_path, "loop=single_shot"), llm=model, pool=pool)
    assert [r.state for r in result.results[0].records] == ["numerical_mismatch"] and model.calls == 1


def test_reply_without_code_is_generation_failure(tmp_path, pool):
    result = run(config(tmp_path, "loop=single_shot"), llm=scripted("I think you should use CUDA."), pool=pool)
    rec = result.results[0].records[0]
    assert rec.state == "generation_failure" and "no code block" in rec.message


def test_litellm_mock_response_end_to_end_and_cache_replay(tmp_path, pool, monkeypatch):
    monkeypatch.setenv("KFORGE_CACHE_DIR", str(tmp_path / "cache"))  # a fresh response cache

    def gpt5():  # the real litellm path; mock_response makes litellm answer without a network
        return make_model(ModelConfig(name="gpt-5", model="openai/gpt-5", extra={"mock_response": fenced("relu_ok.py")}))

    first = run(config(tmp_path, "loop=single_shot"), llm=gpt5(), pool=pool)
    rec = first.results[0].records[0]
    assert rec.state == "correct" and rec.prompt_tokens > 0 and not rec.cached_reply
    import litellm
    monkeypatch.setattr(litellm, "completion", lambda **kw: pytest.fail("the model was called on a replay"))
    again = run(config(tmp_path, "loop=single_shot", "resume=false"), llm=gpt5(), pool=pool)
    rec2 = again.results[0].records[0]
    assert rec2.cached_reply and rec2.state == "correct" and rec2.cost_usd == 0.0
    # Replayed, not made: counted as a replayed call, its tokens not counted again.
    assert rec2.replayed_calls == 1 and rec2.prompt_tokens == rec2.completion_tokens == 0
    assert again.stats["replayed_calls"] == 1 and again.stats["total_prompt_tokens"] == 0


def test_rerun_with_resume_false_calls_no_model(tmp_path, pool, monkeypatch, capsys):
    """A local OpenAI-compatible server counts the requests: the rerun sends none, although its
    optimise prompt carries fresh timings (it is replayed by its place in the sweep)."""
    monkeypatch.setenv("KFORGE_CACHE_DIR", str(tmp_path / "cache"))  # a fresh response cache
    with StubServer([fenced("relu_ok.py")]) as server:
        model = ["model=hosted_vllm/stub-coder", f"model.api_base={server.api_base}", "loop.iterations=2"]
        first = run(config(tmp_path, *model), pool=pool)
        assert len(server.requests) == 2 and "ms (speedup" in server.requests[1]["messages"][1]["content"]
        again = run(config(tmp_path, *model, "resume=false"), pool=pool)
        assert len(server.requests) == 2  # none more
    assert [r.phase for r in first.results[0].records] == ["single_shot", "optimise"]
    assert [(r.phase, r.cached_reply) for r in again.results[0].records] == [("single_shot", True), ("optimise", True)]
    out = capsys.readouterr().out
    # One numbering of iterations: iter_000 is MLflow's step 0 and the folder iter_000/.
    assert "iter_000 (1 of 2) single_shot" in out and "iter_001 (2 of 2) optimise" in out
    assert "cost unknown" in out  # litellm has no price for this model: no made-up $0
    client, problems, parents = problem_runs(tmp_path)
    assert len(problems) == 2 and len(parents) == 2
    for r in problems:
        assert r.data.tags["model"] == "hosted_vllm/stub-coder"  # what answered, not the config's name
        assert sorted(m.step for m in client.get_metric_history(r.info.run_id, "state_index")) == [0, 1]
        assert "total_cost_usd" not in r.data.metrics
    for p in parents:
        assert "gpu" not in p.data.tags and p.data.tags["device_name"].startswith("cpu")
        assert "total_cost_usd" not in p.data.metrics


def test_readme_model_overrides_and_any_litellm_model_string(tmp_path):
    cfg = config(tmp_path, "model=gpt-5", "model.cache=false", "model.api_key_env=MY_KEY")
    assert cfg.model.cache is False and cfg.model.api_key_env == "MY_KEY" and cfg.model.model == "openai/gpt-5"
    assert set(cfg.model) == set(ModelConfig.__dataclass_fields__)  # every setting can be overridden
    oracle = config(tmp_path, "model=oracle").model
    defaults = ModelConfig(name="x")
    assert all(oracle[k] == getattr(defaults, k) for k in ModelConfig.__dataclass_fields__ if k not in ("name", "kind"))
    generic = config(tmp_path, "model=litellm", "model.name=anthropic/claude-opus-4-5").model
    assert (generic.kind, generic.model) == ("litellm", "anthropic/claude-opus-4-5")
    short = config(tmp_path, "model=ollama_chat/qwen2.5-coder:32b", "model.api_base=http://localhost:11434").model
    assert (short.name, short.model, short.api_base) == ("ollama_chat/qwen2.5-coder:32b",) * 2 + ("http://localhost:11434",)
    assert model_strings(["model=gpt-5,openai/gpt-4o,hosted_vllm/a/b", "loop=single_shot"]) == \
        ["openai/gpt-4o", "hosted_vllm/a/b"]


def test_cuda_without_a_gpu_suggests_the_hydra_override(tmp_path, pool):
    from kforge.sandbox.gpus import detect_gpus
    if detect_gpus():
        pytest.skip("a GPU is visible")
    with pytest.raises(ConfigError, match="use backend=cpu") as err:
        run(config(tmp_path, "backend=cuda"), llm=scripted(fenced("relu_ok.py")), pool=pool)
    assert "--backend" not in str(err.value)


def test_the_backward_mode_on_a_backend_without_a_training_example_is_refused_before_any_worker(tmp_path, pool):
    """It crashed with FileNotFoundError on prompts/examples/opencl/backward/model.py, a Hydra traceback."""
    with pytest.raises(ConfigError, match="backend opencl has no training-step example"):
        run(config(tmp_path, "backend=opencl", "verify.backward=true"), llm=scripted(fenced("relu_ok.py")), pool=pool)


def test_missing_key_fails_before_any_problem(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    res = subprocess.run([sys.executable, str(REPO_DIR / "pipelines" / "synthesize.py"), "model=openai/gpt-5",
                          f"tracking.uri=sqlite:///{tmp_path}/mlflow.db"], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=300)
    assert res.returncode == 2 and "OPENAI_API_KEY" in res.stderr, res.stderr[-2000:]
    # Nothing started, and the folder Hydra made for the job is taken back: no outputs/DATE/TIME/ left.
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("override, answer", [
    ("backend=metal9", "unknown choice backend=metal9; valid backend choices: cpu, cuda, cute, opencl, tilelang, triton"),
    ("model=gtp-5", "unknown choice model=gtp-5 (did you mean model=gpt-5?); valid model choices: claude-opus, gpt-5"),
    ("problems=builtin_l9", "unknown choice problems=builtin_l9 (did you mean problems=builtin_l3?); valid problems "
                            "choices: builtin_all, builtin_l1"),
    ("experiment=nope", "unknown choice experiment=nope; valid experiment choices: backward_ablation, demo, iterative_vs_beam"),
])
def test_an_unknown_choice_is_answered_like_a_misspelt_key(tmp_path, override, answer):
    res = subprocess.run([sys.executable, str(REPO_DIR / "pipelines" / "synthesize.py"), override],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert res.returncode == 2 and f"kforge: {answer}" in res.stderr, res.stderr[-2000:]
    assert "Config search path" not in res.stderr and list(tmp_path.iterdir()) == []


def test_multirun_over_loop_modes_makes_two_parent_runs(tmp_path):
    cmd = [sys.executable, str(REPO_DIR / "pipelines" / "synthesize.py"), "-m", "loop=single_shot,iterative",
           "model=oracle", "loop.iterations=2", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", *FAST]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    _, problems, parents = problem_runs(tmp_path)
    assert sorted(p.data.tags["loop_mode"] for p in parents) == ["iterative", "single_shot"]
    assert len(problems) == 2 and all(p.data.metrics["best_correct"] == 1.0 for p in problems)
    assert "oracle, not an LLM" in res.stdout


def test_rules_recommendation_reaches_the_optimise_prompt(tmp_path, pool):
    model = scripted(fenced("relu_ok.py"), fenced("relu_ok.py"))
    run(config(tmp_path, "loop.iterations=2", "profiler=torch", "analysis=rules"), llm=model, pool=pool)
    optimise = model.prompts[1][1]["content"]
    assert "## Recommendation" in optimise and "Bottleneck:" in optimise and "Do this:" in optimise
    client, problems, _ = problem_runs(tmp_path)
    run_id = problems[0].info.run_id
    files = {f.path for f in client.list_artifacts(run_id, "iter_001/profile")}
    assert {"iter_001/profile/digest.json", "iter_001/profile/digest.png"} <= files
    assert any(f.endswith(".txt") for f in files)  # torch.profiler's raw table
    rec = Path(client.download_artifacts(run_id, "iter_001/recommendation.md", str(tmp_path))).read_text()
    assert rec.startswith("source: rules:") and problems[0].data.tags["profiler"] == "torch"


def test_llm_analyst_recommendation_reaches_the_optimise_prompt(tmp_path, pool):
    # One scripted model plays both roles, in call order: generate, analyse, generate.
    model = scripted(fenced("relu_ok.py"), "BOTTLENECK: loop overhead\nEVIDENCE: 90% in own code\n"
                     "ACTION: unroll the inner loop by 4", fenced("relu_ok.py"))
    run(config(tmp_path, "loop.iterations=2", "profiler=torch", "analysis=llm"), llm=model, pool=pool)
    assert "Profile digest" in model.prompts[1][0]["content"]
    assert "Do this: unroll the inner loop by 4" in model.prompts[2][1]["content"]


def test_a_kforge_bug_fails_that_problem_loudly_and_keeps_its_record(tmp_path, pool, monkeypatch, capsys):
    from kforge.agents import GenerationAgent

    def broken(self, problem, *args, **kwargs):
        raise RuntimeError("boom inside kforge")
    monkeypatch.setattr(GenerationAgent, "single_shot", broken)  # inside the loop, past the observers' start
    result = run(config(tmp_path, "loop=single_shot"), llm=scripted(fenced("relu_ok.py")), pool=pool)
    assert "boom inside kforge" in result.results[0].error
    assert "kforge failed on this problem (RuntimeError: boom inside kforge)" in capsys.readouterr().out
    client, problems, _ = problem_runs(tmp_path)
    assert problems[0].info.status == "FAILED"
    error = client.download_artifacts(problems[0].info.run_id, "error.txt", str(tmp_path))
    assert "boom inside kforge" in Path(error).read_text()


def test_without_timing_the_loop_stops_at_the_first_correct_kernel(tmp_path, pool):
    """verify.skip_timing leaves nothing to optimise against: no optimisation pass is asked for."""
    model = scripted(fenced("relu_wrong_math.py"), fenced("relu_ok.py"), fenced("relu_ok.py"))
    result = run(config(tmp_path, "loop.iterations=3", "verify.skip_timing=true"), llm=model, pool=pool)
    assert [r.state for r in result.results[0].records] == ["numerical_mismatch", "correct"] and model.calls == 2
    assert result.results[0].correct and not result.results[0].error


def test_static_deny_from_hydra_rejects_a_matching_candidate(tmp_path, pool):
    """verify.static reaches the verifier whole: a deny regex given as an override rejects the candidate
    before it is built, and warn_only (another of its lists) turns that rule into a warning."""
    deny = r"verify.static.deny=[pragma\s+omp]"
    result = run(config(tmp_path, "loop=single_shot", deny), llm=scripted(fenced("relu_ok.py")), pool=pool)
    rec = result.results[0].records[0]
    assert rec.state == "cheat_detected" and "deny pattern" in rec.message, rec.message
    warned = run(config(tmp_path, "loop=single_shot", deny, "verify.static.warn_only=[deny_pattern]"),
                 llm=scripted(fenced("relu_ok.py")), pool=pool)
    assert warned.results[0].records[0].state == "correct"


def test_unknown_key_in_a_typed_group_names_the_valid_ones(tmp_path):
    with pytest.raises(ConfigError, match=r"verify\.static\.denny .*deny"):
        run(config(tmp_path, "+verify.static.denny=[x]"), llm=scripted(fenced("relu_ok.py")))
    # From the command line, without a "+" too (Hydra alone would say "not in struct"): one line to act on,
    # exit status 2, nothing started.
    res = subprocess.run([sys.executable, str(REPO_DIR / "pipelines" / "synthesize.py"), "loop.iteratons=3",
                          f"tracking.uri=sqlite:///{tmp_path}/mlflow.db"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=300)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "kforge: unknown setting loop.iteratons (valid under loop: " in res.stderr and "iterations" in res.stderr
    assert not (tmp_path / "mlflow.db").exists()
