"""The model protocol, its configuration and its response — shared by every model kind."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import KforgeError
from ..strict import StrictConfig


class LLMError(KforgeError, RuntimeError):
    """A model call failed for good (after retries); the message says what to do."""


class MissingAPIKey(LLMError):
    """A real model was chosen but its API key is not in the environment."""


class ModelUnreachable(LLMError):
    """The model cannot answer any call: its server could not be reached (connection refused, no such host), it
    refused the key (401/403) or knows no such model (404), or it kept failing or timing out after the retries
    (`kforge.llm.failures`). No verdict on any problem, so the job stops rather than record the outage as the
    model's failure; the message says what to check."""


@dataclass
class ModelConfig(StrictConfig):
    """One model, as ``conf/model/*.yaml`` describes it."""

    name: str
    """Short name used in runs and tables (e.g. ``gpt-5``)."""
    kind: str = "litellm"
    """``litellm`` (a real model), ``oracle`` (hand-written solutions) or ``scripted`` (replays replies)."""
    model: str | None = None
    """litellm model string, e.g. ``openai/gpt-5``, ``anthropic/claude-opus-4-6``, ``hosted_vllm/NAME``."""
    temperature: float | None = None
    """Sampling temperature (None: the provider's default; reasoning models often accept only that)."""
    max_tokens: int | None = 16384
    """Upper bound on the reply's tokens."""
    reasoning_effort: str | None = None
    """``low``/``medium``/``high`` for reasoning models that take it."""
    api_base: str | None = None
    """Endpoint of a local OpenAI-compatible server (vLLM, Ollama, SGLang)."""
    api_key_env: str | None = None
    """Environment variable holding the key, when it is not the provider's usual one."""
    timeout_s: float = 600.0
    """Per-request timeout."""
    retries: int = 4
    """Retries with exponential backoff on rate limits, 5xx errors, timeouts and connection errors."""
    backoff_s: float = 2.0
    """First backoff; doubles each retry."""
    cache: bool = True
    """Replay identical requests from the on-disk response cache (bit-identical reruns, no cost)."""
    multimodal: bool = False
    """The model accepts images (for the analysis agent's visual mode)."""
    replies: list[str] = field(default_factory=list)
    """For ``scripted``: the replies, in order."""
    latency_s: float = 0.0
    """For offline models: seconds each call waits, simulating an LLM's latency (throughput benchmarks)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Any other litellm.completion keyword arguments."""

    @property
    def label(self) -> str:
        if self.kind == "oracle":
            return f"{self.name} (oracle, not an LLM)"
        if self.kind == "scripted":
            return f"{self.name} (scripted replies, not an LLM)"
        return self.name


@dataclass
class LLMResponse:
    """One reply and what it cost."""

    text: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    """What the call cost: litellm's price where it knows one, else None; 0 for a cache replay."""
    latency_s: float = 0.0
    cached: bool = False
    """Replayed from the on-disk cache (no call made)."""
    note: str | None = None
    """For offline models: why there is no code (e.g. the oracle has no solution for this backend)."""
    truncated: bool = False
    """The reply stopped at the token limit (``finish_reason=length``), not where the model ended it."""


@dataclass
class CallContext:
    """What the call is for; offline models answer from it, real ones ignore it."""

    problem_key: str = ""
    backend: str = ""
    phase: str = ""
    iteration: int = 0
    problem: Any = None
    """The `Problem` itself (the oracle reads its level and name)."""
    precision: str = "fp32"
    """The precision the candidate is judged at (the oracle answers with that precision's solution)."""
    backward: bool = False
    """The answer is judged as a training step (``verify.backward``): the oracle answers with a backward solution."""


class LLM(Protocol):
    """Anything that answers a list of chat messages."""

    config: ModelConfig

    def check(self) -> None:
        """Raise `MissingAPIKey` (or another `LLMError`) before any problem starts, if it cannot work."""

    def complete(self, messages: list[dict[str, Any]], context: CallContext | None = None) -> LLMResponse:
        """One completion."""
