"""Real models through ``litellm.completion`` — the only call path to an LLM in kforge.

litellm is imported lazily: the verifier and its workers never need it.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from .base import CallContext, LLMError, LLMResponse, MissingAPIKey, ModelConfig
from .cache import ResponseCache
from .failures import failure, retryable

#: The one variable litellm reads for each of these providers' keys (``litellm.validate_environment``), so a
#: missing key is answered without importing litellm (seconds of CPU, half a minute on a busy machine);
#: tests/llm/test_litellm_model.py checks each entry against litellm. Other providers ask litellm.
PROVIDER_KEYS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "mistral": "MISTRAL_API_KEY",
                 "groq": "GROQ_API_KEY", "deepseek": "DEEPSEEK_API_KEY", "xai": "XAI_API_KEY",
                 "openrouter": "OPENROUTER_API_KEY", "together_ai": "TOGETHERAI_API_KEY",
                 "fireworks_ai": "FIREWORKS_AI_API_KEY", "cohere": "COHERE_API_KEY"}

def _litellm():
    """litellm, imported once and quietened: no help banners on errors, and no INFO line per call (kforge
    prints its own per iteration; through Hydra's root handler each also came out twice)."""
    import litellm
    if not getattr(litellm, "_kforge_quiet", False):
        litellm.suppress_debug_info = True
        for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
            logger = logging.getLogger(name)
            logger.setLevel(logging.WARNING)
            logger.propagate = False  # its own handler prints what is left, once
        litellm._kforge_quiet = True
    return litellm


class LiteLLMModel:
    """A model served by a provider or a local OpenAI-compatible server."""

    def __init__(self, config: ModelConfig, cache: ResponseCache | None = None):
        if not config.model:
            raise LLMError(f"model {config.name!r} has no litellm model string (set model.model, e.g. openai/gpt-5)")
        self.config = config
        self.cache = cache if config.cache else None
        self.calls = 0
        """Calls that reached litellm (cache replays excluded)."""

    def params(self) -> dict[str, Any]:
        """The request parameters that change the reply (and so key the cache)."""
        c = self.config
        p: dict[str, Any] = {"max_tokens": c.max_tokens}
        if c.temperature is not None:
            p["temperature"] = c.temperature
        if c.reasoning_effort:
            p["reasoning_effort"] = c.reasoning_effort
        if c.api_base:
            p["api_base"] = c.api_base
        p.update(c.extra)
        return p

    def check(self) -> None:
        """Fail before any problem starts on a provider litellm does not know or a missing key (litellm knows
        which variables each provider reads; local servers need none)."""
        c = self.config
        label = c.model if c.name == c.model else f"{c.name} ({c.model})"
        if c.api_key_env:
            if not os.environ.get(c.api_key_env):
                raise MissingAPIKey(f"model {label} needs an API key: set {c.api_key_env} in the environment, or "
                                    "pick an offline model: model=oracle")
        provider, slash, _ = c.model.partition("/")
        if slash and provider in PROVIDER_KEYS and not c.api_base and "mock_response" not in c.extra:
            var = c.api_key_env or PROVIDER_KEYS[provider]
            if not os.environ.get(var):
                raise MissingAPIKey(f"model {label} needs {var} set in the environment (e.g. export {var}=...), or "
                                    "pick an offline model: model=oracle")
            return  # a provider litellm knows, its key set: nothing left to ask litellm
        litellm = _litellm()
        try:
            litellm.get_llm_provider(c.model, api_base=c.api_base)
        except Exception as exc:  # noqa: BLE001 - litellm raises its BadRequestError for an unknown provider
            raise LLMError(f"litellm does not know the provider of model {c.model!r}: write PROVIDER/MODEL with one "
                           "of https://docs.litellm.ai/docs/providers (e.g. openai/gpt-5, anthropic/claude-opus-4-5, "
                           f"hosted_vllm/NAME with model.api_base=URL) ({type(exc).__name__})") from None
        if c.api_key_env:
            return
        if c.api_base or "mock_response" in c.extra:
            return
        env = litellm.validate_environment(model=c.model)
        if not env.get("keys_in_environment", False):
            missing = env.get("missing_keys") or ["the provider's API key"]
            raise MissingAPIKey(f"model {label} needs {', '.join(missing)} set in the environment (e.g. export "
                                f"{missing[0]}=...), or pick an offline model: model=oracle")

    def complete(self, messages: list[dict[str, Any]], context: CallContext | None = None) -> LLMResponse:
        c = self.config
        params = self.params()
        key = ResponseCache.key(c.model, messages, params) if self.cache else None
        if key:
            hit = self.cache.get(key)
            if hit is not None:
                return hit
        litellm = _litellm()
        kwargs = dict(params, model=c.model, messages=messages, timeout=c.timeout_s)
        if c.api_key_env:
            kwargs["api_key"] = os.environ.get(c.api_key_env)
        delay = c.backoff_s
        for attempt in range(c.retries + 1):
            start = time.monotonic()
            try:
                resp = litellm.completion(**kwargs)
                break
            except Exception as exc:  # noqa: BLE001 - classify by name: litellm maps every provider's errors
                if not retryable(exc) or attempt == c.retries:
                    raise failure(exc, c, c.api_key_env or PROVIDER_KEYS.get(c.model.partition("/")[0])) from exc
                time.sleep(delay)
                delay *= 2
        self.calls += 1
        usage = getattr(resp, "usage", None)
        text = resp.choices[0].message.content or ""
        # "length": the reply hit max_tokens (litellm maps every provider's own word for it to this one).
        truncated = getattr(resp.choices[0], "finish_reason", None) == "length"
        try:
            cost = float(litellm.completion_cost(completion_response=resp))
        except Exception:  # noqa: BLE001 - litellm has no price for this model (local servers, new models)
            cost = None
        out = LLMResponse(text=text, model=c.model, prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
                          completion_tokens=getattr(usage, "completion_tokens", 0) or 0, cost_usd=cost,
                          latency_s=time.monotonic() - start, truncated=truncated)
        if key:
            self.cache.put(key, out)
        return out
