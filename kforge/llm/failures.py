"""What a failed model call means: retry it, the problem's own failure, or the job cannot go on.

A failure every call would meet whatever it asks (nothing answers at the address, the key is refused, the
model does not exist there, the server keeps failing or timing out after the retries) is `ModelUnreachable`:
the job stops and its problems are cut off for the same command to continue, instead of being recorded as the
model failing each of them and then skipped by a rerun. A failure of one request (its prompt exceeds the
context window, a content policy) stays an `LLMError`: that problem's ``generation_failure``.
"""

from __future__ import annotations

import json
import re

from .base import LLMError, ModelConfig, ModelUnreachable

# Worth retrying: the next attempt may well succeed.
_TRANSIENT = ("RateLimitError", "InternalServerError", "ServiceUnavailableError", "BadGatewayError",
              "APIConnectionError", "Timeout", "APIError")
# Client errors a retry may get past: a request timeout, a rate limit.
_RETRYABLE_4XX = (408, 429)

_UNREACHABLE = ("Connection refused", "Errno 111", "Name or service not known", "nodename nor servname",
                "Temporary failure in name resolution", "No route to host", "Failed to establish a new connection",
                "Cannot connect to host", "ConnectError")


def _unreachable(exc: BaseException) -> bool:
    """Whether a call failed because nothing answered at the server's address (not a reply it gave)."""
    seen, e = 0, exc
    while e is not None and seen < 8:
        if any(s in f"{type(e).__name__}: {e}" for s in _UNREACHABLE):
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


def _cause(exc: BaseException) -> str:
    text = str(exc)
    found = next((s for s in _UNREACHABLE if s in text), None)
    return found.lower() if found else type(exc).__name__


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


_PREFIX = re.compile(r"^(litellm\.)?\w+(Error|Exception)(:| -) ")


def _brief(exc: BaseException) -> str:
    """The error on one short line: its class and status, then the server's message without litellm's repeated
    class names (``litellm.AuthenticationError: AuthenticationError: Hosted_vllmException - {...}``)."""
    text = " ".join(str(exc).split())
    while _PREFIX.match(text):
        text = _PREFIX.sub("", text, count=1)
    try:  # an OpenAI-style error body: its message is what the server said
        body = json.loads(text)
        text = str(body["error"]["message"]) if isinstance(body.get("error"), dict) else text
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    status = _status(exc)
    return f"{type(exc).__name__}{f' {status}' if status else ''}: {text[:200]}"


def retryable(exc: BaseException) -> bool:
    """Whether the next attempt may succeed (rate limits, 5xx errors, timeouts, connection errors)."""
    name, status = type(exc).__name__, _status(exc)
    if status is not None and 400 <= status < 500 and status not in _RETRYABLE_4XX:
        return False  # the request itself, or the key, or the model's name: the same again fails the same way
    return any(t in name for t in _TRANSIENT) and "Authentication" not in name


def failure(exc: BaseException, c: ModelConfig, key_var: str | None = None) -> LLMError:
    """The error a call that failed for good (``exc``, after the retries where it was `retryable`) raises;
    ``key_var`` is the variable the key came from, if any."""
    name, status = type(exc).__name__, _status(exc)
    label = c.name if c.name == c.model else f"{c.name} ({c.model})"
    where = c.api_base or f"{c.model}'s provider"
    if _unreachable(exc):
        return ModelUnreachable(f"cannot reach {where} for model {c.name}: {_cause(exc)} (start the server, or set "
                                "model.api_base)")
    if status in (401, 403) or "Authentication" in name or "PermissionDenied" in name:
        key = f"the API key in {key_var}" if key_var else "the API key (model.api_key_env=NAME names its variable)"
        return ModelUnreachable(f"{where} refused model {label}: {_brief(exc)} (check {key}, and that it may use "
                                "this model)")
    if status == 404 or "NotFound" in name:
        return ModelUnreachable(f"{where} has no model {c.model!r}: {_brief(exc)} (check model.name"
                                f"{' and model.api_base' if c.api_base else ''})")
    if retryable(exc):
        attempts = f"{c.retries + 1} attempt(s)"
        if "Timeout" in name:
            return ModelUnreachable(f"{where} did not answer model {label} within model.timeout_s={c.timeout_s:g} s "
                                    f"in {attempts} (check the server, or raise model.timeout_s)")
        return ModelUnreachable(f"{where} kept failing for model {label} in {attempts}: {_brief(exc)} (check the "
                                "server or the provider's status, or raise model.retries)")
    return LLMError(f"{c.name} ({c.model}): {name}: {str(exc)[:500]}")
