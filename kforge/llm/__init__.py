"""Model access: real models through litellm, and two offline models (scripted, oracle)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import cache_dir
from .base import LLM, CallContext, LLMError, LLMResponse, MissingAPIKey, ModelConfig, ModelUnreachable
from .cache import ResponseCache
from .offline import OracleModel, ScriptedModel
from .replay import ReplayingModel, replaying


def make_model(config: ModelConfig | dict[str, Any], cache_root: str | Path | None = None) -> LLM:
    """Build the model a config names; raises `LLMError` for an unknown kind, `ConfigError` for an unknown
    setting in a dict."""
    if isinstance(config, dict):
        config = ModelConfig.from_dict(config, "model")  # strict: a misspelt setting is an error
    if config.kind == "oracle":
        return OracleModel(config)
    if config.kind == "scripted":
        return ScriptedModel(config)
    if config.kind == "litellm":
        from .litellm_model import LiteLLMModel
        cache = ResponseCache(Path(cache_root) if cache_root else cache_dir() / "llm") if config.cache else None
        return LiteLLMModel(config, cache)
    raise LLMError(f"unknown model kind {config.kind!r} (choose from litellm, oracle, scripted)")


__all__ = ["CallContext", "LLM", "LLMError", "LLMResponse", "MissingAPIKey", "ModelConfig", "ModelUnreachable",
           "ResponseCache", "OracleModel", "ReplayingModel", "ScriptedModel", "make_model", "replaying"]
