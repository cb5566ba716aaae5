"""The model layer: litellm (through mock_response), the response cache, retries, keys, offline models."""

import pytest

from kforge.llm import CallContext, LLMError, MissingAPIKey, ModelConfig, ResponseCache, make_model
from kforge.llm.litellm_model import PROVIDER_KEYS
from kforge.problems import resolve_problem

MESSAGES = [{"role": "user", "content": "write a kernel"}]


def mock_model(tmp_path, reply="```python\nclass ModelNew: pass\n```", **kw):
    cfg = ModelConfig(name="mock", model="openai/gpt-4o", extra={"mock_response": reply}, **kw)
    return make_model(cfg, cache_root=tmp_path / "llm")


def test_litellm_call_reports_tokens_and_cost(tmp_path):
    m = mock_model(tmp_path)
    r = m.complete(MESSAGES)
    assert "ModelNew" in r.text and r.prompt_tokens > 0 and r.completion_tokens > 0
    assert r.cost_usd is not None and r.cost_usd > 0  # litellm knows gpt-4o's price
    assert not r.cached and m.calls == 1


def test_unknown_price_is_none(tmp_path):
    cfg = ModelConfig(name="local", model="hosted_vllm/my-model", api_base="http://127.0.0.1:9/v1",
                      extra={"mock_response": "hi"}, cache=False)
    r = make_model(cfg).complete(MESSAGES)
    assert r.text == "hi" and r.cost_usd is None


def test_cache_replays_without_calling(tmp_path, monkeypatch):
    m = mock_model(tmp_path)
    first = m.complete(MESSAGES)
    import litellm
    monkeypatch.setattr(litellm, "completion", lambda **kw: pytest.fail("the model was called"))
    again = make_model(m.config, cache_root=tmp_path / "llm").complete(MESSAGES)
    assert again.cached and again.text == first.text and again.cost_usd == 0.0
    assert again.prompt_tokens == first.prompt_tokens
    # Different messages or parameters are different requests.
    key1 = ResponseCache.key("m", MESSAGES, {"temperature": 0.0})
    assert key1 != ResponseCache.key("m", MESSAGES, {"temperature": 1.0})


def test_cache_can_be_switched_off(tmp_path):
    m = mock_model(tmp_path, cache=False)
    m.complete(MESSAGES)
    assert not m.complete(MESSAGES).cached and m.calls == 2


def test_retries_transient_errors_then_succeeds(tmp_path, monkeypatch):
    import litellm
    real = litellm.completion
    calls = {"n": 0}

    def flaky(**kw):
        calls["n"] += 1
        if calls["n"] < 3:
            return real(**dict(kw, mock_response="litellm.RateLimitError"))
        return real(**kw)

    monkeypatch.setattr(litellm, "completion", flaky)
    m = mock_model(tmp_path, backoff_s=0.01, cache=False)
    assert "ModelNew" in m.complete(MESSAGES).text and calls["n"] == 3


def test_gives_up_after_retries(tmp_path):
    m = mock_model(tmp_path, reply="litellm.RateLimitError", retries=1, backoff_s=0.01, cache=False)
    with pytest.raises(LLMError, match="RateLimitError"):
        m.complete(MESSAGES)


def test_missing_key_names_the_variable(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(MissingAPIKey, match="OPENAI_API_KEY"):
        make_model(ModelConfig(name="gpt-5", model="openai/gpt-5")).check()
    monkeypatch.delenv("MY_KEY", raising=False)
    with pytest.raises(MissingAPIKey, match="MY_KEY"):
        make_model(ModelConfig(name="x", model="openai/gpt-5", api_key_env="MY_KEY")).check()
    make_model(ModelConfig(name="local", model="hosted_vllm/x", api_base="http://127.0.0.1:9")).check()


def test_a_known_providers_key_is_checked_without_importing_litellm(monkeypatch):
    from kforge.llm import litellm_model
    monkeypatch.setattr(litellm_model, "_litellm", lambda: pytest.fail("imported litellm to check a key"))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(MissingAPIKey, match="claude-opus \\(anthropic/claude-opus-4-5\\) needs ANTHROPIC_API_KEY"):
        make_model(ModelConfig(name="claude-opus", model="anthropic/claude-opus-4-5")).check()
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    make_model(ModelConfig(name="claude-opus", model="anthropic/claude-opus-4-5")).check()


@pytest.mark.parametrize("provider", sorted(PROVIDER_KEYS))
def test_the_fast_key_table_says_what_litellm_says(provider, monkeypatch):
    import litellm
    monkeypatch.delenv(PROVIDER_KEYS[provider], raising=False)
    assert litellm.validate_environment(model=f"{provider}/some-model")["missing_keys"] == [PROVIDER_KEYS[provider]]
    monkeypatch.setenv(PROVIDER_KEYS[provider], "sk-test")
    assert litellm.validate_environment(model=f"{provider}/some-model")["keys_in_environment"]


def test_scripted_replays_in_order_and_runs_out():
    m = make_model(ModelConfig(name="s", kind="scripted", replies=["one", "two"]))
    assert [m.complete(MESSAGES).text for _ in range(2)] == ["one", "two"]
    assert "not an LLM" in m.config.label
    with pytest.raises(LLMError, match="ran out of replies"):
        m.complete(MESSAGES)


def test_oracle_answers_from_the_builtin_suite():
    m = make_model(ModelConfig(name="oracle", kind="oracle"))
    p = resolve_problem("level1/1_ReLU")
    r = m.complete(MESSAGES, CallContext(problem_key=p.key, backend="cpu", problem=p))
    assert "oracle, not an LLM" in r.text and "load_inline" in r.text and r.note is None
    missing = m.complete(MESSAGES, CallContext(problem_key=p.key, backend="metal", problem=p))
    assert missing.note and "no solution for level1/1_ReLU on the metal backend at fp32" in missing.note


def test_oracle_answers_with_the_precisions_own_solution():
    m = make_model(ModelConfig(name="oracle", kind="oracle"))
    p = resolve_problem("level1/4_Matmul")
    fp32 = m.complete(MESSAGES, CallContext(problem_key=p.key, backend="cuda", problem=p)).text
    bf16 = m.complete(MESSAGES, CallContext(problem_key=p.key, backend="cuda", problem=p, precision="bf16")).text
    assert "mma.sync" in bf16 and "kBFloat16" in bf16 and "mma.sync" not in fp32


def test_oracle_answers_only_with_kernels_that_take_the_precision():
    """fp32-only kernels (opencl's, cuda's fp32 files, every training step's) given bf16 inputs fail: at a
    precision none of a backend's folders serves, the oracle says so instead of answering with one."""
    m = make_model(ModelConfig(name="oracle", kind="oracle"))
    p = resolve_problem("level1/2_Softmax")

    def ask(backend, precision, backward=False):
        return m.complete(MESSAGES, CallContext(problem_key=p.key, backend=backend, problem=p, precision=precision,
                                                backward=backward))
    for backend, precision, backward in [("opencl", "bf16", False), ("opencl", "fp16", False),
                                         ("cuda", "fp16", False), ("cpu", "bf16", True), ("cuda", "bf16", True)]:
        r = ask(backend, precision, backward)
        assert r.note and f"solution for level1/2_Softmax on the {backend} backend at {precision}" in r.note, r.text
    assert "cl.Program" in ask("opencl", "tf32").text  # float32 storage: the fp32 kernel serves it
    assert "__nv_bfloat16" in ask("cuda", "bf16").text and "Any float storage" in ask("triton", "fp16").text
    assert "AT_DISPATCH_FLOATING_TYPES_AND2" in ask("cpu", "fp16").text


def test_replay_by_place_ignores_measured_numbers_in_the_prompt(tmp_path, monkeypatch):
    from kforge.llm import ReplayingModel, replaying
    ctx = CallContext(problem_key="level1/1_ReLU", backend="cpu", phase="optimise", iteration=1)
    first = replaying(mock_model(tmp_path), scope="sweep-a")
    assert isinstance(first, ReplayingModel)
    r1 = first.complete([{"role": "user", "content": "your kernel: 1.2345 ms"}], ctx)
    import litellm
    monkeypatch.setattr(litellm, "completion", lambda **kw: pytest.fail("the model was called on a replay"))
    again = replaying(mock_model(tmp_path), scope="sweep-a")  # a rerun: a new process, the same cache
    r2 = again.complete([{"role": "user", "content": "your kernel: 1.1987 ms"}], ctx)
    assert r2.cached and r2.text == r1.text and again.replayed == 1 and again.calls == 0
    # Another place, or another sweep configuration, is a new call.
    other = [replaying(mock_model(tmp_path), scope="sweep-a").complete, replaying(mock_model(tmp_path), "sweep-b").complete]
    with pytest.raises(BaseException, match="the model was called"):
        other[0]([{"role": "user", "content": "x"}], CallContext(problem_key="level1/1_ReLU", phase="fix", iteration=1))
    with pytest.raises(BaseException, match="the model was called"):
        other[1]([{"role": "user", "content": "x"}], ctx)
    # Offline models and models without a cache are left as they are.
    oracle = make_model(ModelConfig(name="oracle", kind="oracle"))
    assert replaying(oracle, "s") is oracle and replaying(mock_model(tmp_path, cache=False), "s").__class__ is not \
        ReplayingModel


def test_unknown_provider_is_refused_before_any_call():
    with pytest.raises(LLMError, match="does not know the provider of model 'nosuchprovider/x'"):
        make_model(ModelConfig(name="x", model="nosuchprovider/x")).check()


def test_litellm_prints_no_info_lines_and_no_banners(tmp_path, capsys, caplog):
    import logging
    caplog.set_level(logging.INFO)  # a root handler at INFO, as Hydra installs one
    mock_model(tmp_path, cache=False).complete(MESSAGES)
    with pytest.raises(LLMError):
        mock_model(tmp_path, reply="litellm.RateLimitError", retries=0, cache=False).complete(MESSAGES)
    out = capsys.readouterr()
    assert not [r for r in caplog.records if r.name.startswith("LiteLLM")]
    assert "LiteLLM" not in out.out + out.err and "Give Feedback" not in out.out + out.err


def test_a_server_nothing_answers_at_is_unreachable_not_a_failed_reply(tmp_path):
    """A real litellm call to a closed port (no network needed): the outage was recorded as the model's
    `generation_failure` on every problem, which a rerun then counted as finished."""
    from kforge.llm import ModelUnreachable
    cfg = ModelConfig(name="local", model="hosted_vllm/my-model", api_base="http://127.0.0.1:9/v1", retries=0,
                      cache=False, timeout_s=20)
    with pytest.raises(ModelUnreachable, match=r"cannot reach http://127.0.0.1:9/v1 for model local"):
        make_model(cfg).complete(MESSAGES)


@pytest.mark.parametrize("answer, calls, why", [
    ({"status": 401, "message": "Incorrect API key provided"}, 1,
     "refused model local (hosted_vllm/m): AuthenticationError 401: Incorrect API key provided (check the API key"),
    ({"status": 403}, 1, "refused model local (hosted_vllm/m): APIError 403: stub error 403"),
    ({"status": 404, "message": "The model `m` does not exist."}, 1,
     "has no model 'hosted_vllm/m': NotFoundError 404: The model `m` does not exist. (check model.name"),
    ({"status": 500}, 3, "kept failing for model local (hosted_vllm/m) in 3 attempt(s): InternalServerError 500: "
                         "stub error 500 (check the server"),
    ({"status": 429}, 3, "kept failing for model local (hosted_vllm/m) in 3 attempt(s): RateLimitError 429"),
    ({"sleep": 3, "content": "late"}, 3, "did not answer model local (hosted_vllm/m) within model.timeout_s=0.5 s "
                                         "in 3 attempt(s) (check the server, or raise model.timeout_s)"),
], ids=["401", "403", "404", "500", "429", "hang"])
def test_a_model_no_call_can_get_an_answer_from_stops_the_job(answer, calls, why):
    """A refused key, an unknown model, and 5xx errors, rate limits or timeouts that outlast the retries were
    each problem's `generation_failure`, and a rerun skipped those problems: now `ModelUnreachable` (the job stops),
    after the retries only where a retry may help. A real litellm call to a local server."""
    from kforge.llm import ModelUnreachable
    from tests.llm.stub_server import StubServer
    with StubServer([answer]) as server:
        cfg = ModelConfig(name="local", model="hosted_vllm/m", api_base=server.api_base, retries=2, backoff_s=0.01,
                          timeout_s=0.5 if "sleep" in answer else 20, cache=False)  # a busy machine answers late
        with pytest.raises(ModelUnreachable) as err:
            make_model(cfg).complete(MESSAGES)
        assert len(server.requests) == calls
    assert why in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_a_failure_of_one_request_stays_the_problems_failure():
    """A prompt over the context window (a 400) fails that request alone: the problem's generation_failure."""
    from kforge.llm import ModelUnreachable
    from tests.llm.stub_server import StubServer
    too_long = {"status": 400, "message": "This model's maximum context length is 8192 tokens. However, your "
                                          "messages resulted in 9000 tokens"}
    with StubServer([too_long]) as server:
        cfg = ModelConfig(name="local", model="hosted_vllm/m", api_base=server.api_base, retries=2, backoff_s=0.01,
                          cache=False)
        with pytest.raises(LLMError, match="ContextWindowExceededError") as err:
            make_model(cfg).complete(MESSAGES)
        assert len(server.requests) == 1  # not retried: the same request fails the same way
    assert not isinstance(err.value, ModelUnreachable)
