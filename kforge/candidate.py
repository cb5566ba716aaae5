"""A candidate program, and the code-extraction helper that turns a model's reply into one."""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+#.\-]*)[^\n]*\n(.*?)(?:^[ \t]*\1[ \t]*$|\Z)",
                    re.DOTALL | re.MULTILINE)
_MODELNEW = re.compile(r"^\s*class\s+ModelNew\b", re.MULTILINE)
_PY_LANGS = {"", "python", "py", "python3", "python3.10", "py3"}


@dataclass(frozen=True)
class Candidate:
    """Program text proposed for a problem; ``source`` is None when the reply held no usable code."""

    source: str | None
    """The Python program defining ``ModelNew`` (None: generation failure)."""
    reply: str | None = None
    """The model's whole reply, when the candidate came from a model."""
    error: str | None = None
    """Why there is no source, for a generation failure."""

    @property
    def hash(self) -> str:
        return hashlib.sha256((self.source or "").encode()).hexdigest()[:16]

    @classmethod
    def from_source(cls, source: str) -> "Candidate":
        """A program given directly (a .py file); it must still define ``ModelNew``."""
        if not _MODELNEW.search(source or ""):
            return cls(None, reply=source, error="the program defines no `class ModelNew`")
        return cls(source)

    @classmethod
    def from_reply(cls, reply: str | None) -> "Candidate":
        """Extract the program from a model reply (see `extract_code`)."""
        source, error = extract_code(reply or "")
        return cls(source, reply=reply, error=error)


def code_blocks(text: str) -> list[tuple[str, str, bool]]:
    """Fenced blocks in a reply as (language, code, closed); an unclosed last fence runs to the end."""
    out = []
    for m in _FENCE.finditer(text):
        body = m.group(3)
        closed = not (m.end() == len(text) and not re.search(rf"^[ \t]*{re.escape(m.group(1))}[ \t]*$",
                                                             text[m.start(3):], re.MULTILINE))
        out.append((m.group(2).lower(), body.rstrip() + "\n", closed))
    return out


def extract_code(reply: str) -> tuple[str | None, str | None]:
    """Pick the program from a reply: the last fenced Python block that defines ``ModelNew``.

    Falls back to the whole reply when it is itself a Python program defining ``ModelNew``.
    Returns (source, None) or (None, reason) — the reason becomes a ``generation_failure`` message.
    """
    if not reply or not reply.strip():
        return None, "the reply is empty"
    blocks = code_blocks(reply)
    with_model = [(lang, code, closed) for lang, code, closed in blocks if _MODELNEW.search(code)]
    python_like = [b for b in with_model if b[0] in _PY_LANGS]
    chosen = (python_like or with_model)[-1] if with_model else None
    if chosen:
        return chosen[1], None
    if not blocks and _MODELNEW.search(reply):
        try:
            ast.parse(reply)
            return reply, None
        except SyntaxError:
            pass
    if blocks:
        return None, (f"the reply has {len(blocks)} code block(s) but none defines `class ModelNew`; "
                      "put the whole program, including ModelNew, in one ```python block")
    return None, "the reply contains no code block; answer with the whole program in one ```python block"
