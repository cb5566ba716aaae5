"""The generation agent: single shot, then fixes from the verifier's evidence, then optimisations."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..backends import Backend
from ..candidate import Candidate
from ..llm import LLM, CallContext, LLMError, LLMResponse, ModelUnreachable
from ..problems import Problem
from ..verify import Verdict
from .prompts import Prompts

TAIL_LINES = 40


@dataclass
class Reference:
    """A working implementation of the same problem for another accelerator (reference transfer)."""

    backend: str
    backend_language: str
    code: str
    source: str = ""
    """Where it came from (``oracle``, an MLflow run id, ...)."""


@dataclass
class Attempt:
    """One generation call: the prompt, the reply, and the program extracted from it."""

    phase: str
    """``single_shot``, ``fix`` or ``optimise``."""
    messages: list[dict[str, Any]]
    candidate: Candidate
    response: LLMResponse | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def prompt_text(self) -> str:
        return "\n\n".join(f"### {m['role']}\n{m['content']}" for m in self.messages
                           if isinstance(m.get("content"), str))


def _tail(text: str | None, lines: int = TAIL_LINES) -> str | None:
    if not text:
        return None
    kept = text.strip().splitlines()[-lines:]
    return "\n".join(kept)


def cut_off(max_tokens: int | None) -> str:
    """The generation_failure message for a reply the token limit cut off before its program was complete: it
    reaches the model in the fix prompt and the user on the console."""
    limit = f" ({max_tokens} tokens)" if max_tokens else ""
    return (f"the reply was cut off at the model's token limit{limit} before its program was complete: answer more "
            "briefly, with the whole program in one ```python block and little prose around it (or raise "
            "model.max_tokens)")


class GenerationAgent:
    """Writes programs for one backend with one model, for candidates judged at one precision."""

    def __init__(self, llm: LLM, backend: Backend, prompts: Prompts | None = None, device_name: str = "",
                 precision: str = "fp32", backward: bool = False):
        self.llm = llm
        self.backend = backend
        self.prompts = prompts or Prompts()
        self.device_name = device_name or ("a CPU" if backend.device == "cpu" else "an NVIDIA GPU")
        self.precision = precision
        """``fp32``, ``tf32``, ``bf16`` or ``fp16``: picks the one-shot example and the prompt's precision block."""
        self.backward = backward
        """The verifier judges a training step (``verify.backward``): the prompts ask for backward kernels, show the
        backward example, and the oracle answers with its backward solutions."""
        self._example = backend.example(precision, backward)
        self._example_precision = backend.example_precision(precision, backward)

    def _common(self, problem: Problem) -> dict[str, Any]:
        return {"backend": self.backend, "device_name": self.device_name, "problem": problem,
                "precision": self.precision, "backward": self.backward}

    def _ask(self, phase: str, user: str, problem: Problem, iteration: int) -> Attempt:
        system = self.prompts.render("system", **self._common(problem))
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        ctx = CallContext(problem_key=problem.key, backend=self.backend.name, phase=phase, iteration=iteration,
                          problem=problem, precision=self.precision, backward=self.backward)
        try:
            resp = self.llm.complete(messages, ctx)
        except ModelUnreachable:  # no answer at all: not the model's failure on this problem; the job stops
            raise
        except LLMError as exc:
            return Attempt(phase, messages, Candidate(None, error=f"the model call failed: {exc}"))
        if resp.note:
            candidate = Candidate(None, reply=resp.text, error=resp.note)
        else:
            # A reply cut off at the token limit counts only for a program it closed before the cut.
            candidate = Candidate.from_reply(resp.text, complete_only=resp.truncated)
            if resp.truncated and candidate.source is None:
                candidate = Candidate(None, reply=resp.text, error=cut_off(self.llm.config.max_tokens))
        return Attempt(phase, messages, candidate, resp)

    def single_shot(self, problem: Problem, reference: Reference | None = None, iteration: int = 0) -> Attempt:
        user = self.prompts.render("single_shot", **self._common(problem), example_model=self._example[0],
                                   example_new=self._example[1], example_precision=self._example_precision,
                                   reference=reference, ops=list(problem.ops))
        return self._ask("single_shot", user, problem, iteration)

    def fix(self, problem: Problem, code: str | None, verdict: Verdict, iteration: int) -> Attempt:
        ev = verdict.evidence
        mismatch = {k: v for k, v in (ev.mismatch or {}).items() if v is not None} or None
        user = self.prompts.render("fix", **self._common(problem), code=code, state=verdict.state.value,
                                   message=verdict.message, compiler_log=_tail(ev.compiler_log),
                                   traceback=_tail(ev.traceback), mismatch=mismatch,
                                   output_tail=_tail(ev.output_tail, 15) if not (ev.compiler_log or ev.traceback)
                                   else None)
        return self._ask("fix", user, problem, iteration)

    def optimise(self, problem: Problem, code: str, verdict: Verdict, recommendation: str, iteration: int) -> Attempt:
        user = self.prompts.render(
            "optimise", **self._common(problem), code=code, runtime_ms=verdict.runtime.median_ms,
            ref_ms=verdict.ref.median_ms, speedup_eager=verdict.speedup_eager or 0.0,
            compile_ms=verdict.compile_ref.median_ms if verdict.compile_ref else None,
            speedup_compile=verdict.speedup_compile or 0.0, floor_ms=verdict.floor_ms, recommendation=recommendation)
        return self._ask("optimise", user, problem, iteration)
