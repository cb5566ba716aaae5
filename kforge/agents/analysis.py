"""The performance-analysis agent, and the advisor the loop asks before each optimisation pass.

The advisor profiles the best kernel (``profiler=none|torch|ncu|nsys``), digests the profile against
the roofline, and gets one recommendation from the rule-based analyst (``analysis=rules``, no LLM),
from a model (``analysis=llm``, optionally seeing the digest as a picture: ``analysis.visual=true``),
or a generic one (``analysis=off``).
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..backends import Backend
from ..llm import LLM, CallContext, LLMError
from ..problems import Problem
from ..profile import Profiler, ProfilerUnavailable
from ..profile.digest import Digest, build
from ..profile.render import render_png
from ..profile.rules import classify, findings
from ..verify import Verdict
from .prompts import Prompts

ANALYSES = ("off", "rules", "llm")
GENERIC_RECOMMENDATION = ("Make it faster: find the largest cost (memory traffic, launch count, "
                          "arithmetic) and remove it, keeping the results the same.")
#: Distinct directions when no profile names several (beam search with analysis=off, or to fill up
#: the rules that fit): (category, action). The first is the iterative loop's generic request.
GENERIC_DIRECTIONS = (
    ("generic", GENERIC_RECOMMENDATION),
    ("memory_traffic", "Move fewer bytes: read each input once, write only the output, fuse the stages so "
                       "intermediates stay in registers or cache."),
    ("launch_overhead", "Cut launch and host overhead: do the whole forward in one kernel launch, with no extra "
                        "allocations, copies or conversions around it."),
    ("parallelism", "Use the device's parallelism fully: spread the work over every core or SM (threads, blocks, "
                    "OpenMP, SIMD lanes) with balanced, contiguous chunks per worker."),
    ("arithmetic", "Do fewer instructions per output: hoist index arithmetic out of inner loops, unroll, and use "
                   "exact cheaper forms of expensive functions."),
    ("restructure", "Restructure the algorithm rather than tune it: a different decomposition, tiling or algebraic "
                    "simplification that changes what the computation costs."),
)


@dataclass
class CallUsage:
    """What the analysis model's call cost: the loop adds it to its iteration's figures."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    cached: bool = False
    """Answered from the cache or by replay: no call was made (`kforge.llm.replay`)."""


@dataclass
class Recommendation:
    """One optimisation to try next, with why (the analysis agent's output), and what the advice left to
    keep with the iteration it leads to."""

    action: str
    bottleneck: str = "unknown"
    evidence: str = ""
    source: str = "generic"
    """``generic``, ``rules`` or the model that wrote it."""
    category: str = "generic"
    """The bottleneck class, as a short key (a rule's name, a generic direction, the model's bottleneck in
    snake case): beam search keeps survivors of different classes."""
    prompt: str | None = None
    """The analysis model's prompt (``analysis=llm``)."""
    usage: CallUsage | None = None
    """The analysis model's call; None when no model was asked."""
    files: dict[str, str] = field(default_factory=dict)
    """The profiler's files and the digest (JSON, PNG), name -> path: kept under the iteration's ``profile/``."""
    speed_of_light: float | None = None
    """The digest's share of the roofline, where the verdict has none."""
    profile_s: float = 0.0
    """Seconds the profile took."""
    analysis_s: float = 0.0
    """Seconds the advice took in all (beam search: on the first of a node's recommendations only)."""

    def text(self) -> str:
        parts = [f"Bottleneck: {self.bottleneck}." if self.bottleneck != "unknown" else "",
                 f"Evidence: {self.evidence}" if self.evidence else "", f"Do this: {self.action}"]
        return "\n".join(p for p in parts if p)

_FIELD = re.compile(r"^[\s*#>-]*(BOTTLENECK|EVIDENCE|ACTION)\**\s*[:\-]\**\s*(.*?)"
                    r"(?=^[\s*#>-]*(?:BOTTLENECK|EVIDENCE|ACTION)\**\s*[:\-]|\Z)",
                    re.MULTILINE | re.DOTALL | re.IGNORECASE)


def parse_recommendation(text: str, source: str) -> Recommendation:
    """``BOTTLENECK: / EVIDENCE: / ACTION:`` lines; a reply without them becomes the action as a whole."""
    fields = {m.group(1).upper(): m.group(2).strip() for m in _FIELD.finditer(text or "")}
    if fields.get("ACTION"):
        return Recommendation(action=fields["ACTION"], bottleneck=fields.get("BOTTLENECK") or "unstated",
                              evidence=fields.get("EVIDENCE", ""), source=source)
    body = (text or "").strip()
    return Recommendation(action=body[:2000] or GENERIC_RECOMMENDATION, bottleneck="unstated", source=source)


def generic_directions(k: int, taken: set[str] | frozenset[str] = frozenset()) -> list[Recommendation]:
    """Up to ``k`` generic recommendations of categories not in ``taken``."""
    return [Recommendation(action=a, source="generic", category=c) for c, a in GENERIC_DIRECTIONS
            if c not in taken][:k]


def category_of(bottleneck: str) -> str:
    """A model's free-text bottleneck as a class key (``Memory bandwidth!`` -> ``memory_bandwidth``)."""
    return "_".join(re.findall(r"[a-z0-9]+", bottleneck.lower()))[:48] or "unstated"


_BLOCK = re.compile(r"^(?=[\s*#>-]*BOTTLENECK\**\s*[:\-])", re.MULTILINE | re.IGNORECASE)


def parse_recommendations(text: str, source: str) -> list[Recommendation]:
    """Several ``BOTTLENECK: / EVIDENCE: / ACTION:`` blocks, one per distinct bottleneck class, in order."""
    out: list[Recommendation] = []
    for block in _BLOCK.split(text or ""):
        rec = parse_recommendation(block, source)
        if rec.bottleneck == "unstated":  # no ACTION line: text around the blocks, not a recommendation
            continue
        rec.category = category_of(rec.bottleneck)
        if all(r.category != rec.category for r in out):
            out.append(rec)
    return out


class AnalysisAgent:
    """Asks a model for one recommendation from the kernel, its timing and its profile digest."""

    def __init__(self, llm: LLM, backend: Backend, prompts: Prompts | None = None, device_name: str = "",
                 visual: bool = False, raw_metrics: bool = False, backward: bool = False):
        self.llm, self.backend, self.prompts = llm, backend, prompts or Prompts()
        self.device_name = device_name or backend.device
        self.visual, self.raw_metrics = visual, raw_metrics
        self.backward = backward
        """The timing and the profile are a training step's (``verify.backward``): forward and backward kernels."""
        if visual and not llm.config.multimodal:
            raise ValueError(f"analysis.visual=true sends the digest as an image, but model {llm.config.name} is not "
                             "marked multimodal (set the analysis model's multimodal: true)")

    def messages(self, problem: Problem, code: str, verdict: Verdict, digest: Digest | None,
                 png: Path | None, directions: int = 1) -> list[dict[str, Any]]:
        raw = dict(digest.kernels[0].metrics) if self.raw_metrics and digest and digest.kernels else None
        text = self.prompts.render(
            "analysis", backend=self.backend, device_name=self.device_name, problem=problem, code=code,
            runtime_ms=verdict.runtime.median_ms, ref_ms=verdict.ref.median_ms, speedup=verdict.speedup_eager or 0.0,
            digest=digest.text() if digest else "(no profile available: judge from the code and the timing)",
            raw_metrics=raw, image=bool(self.visual and png), directions=directions, backward=self.backward)
        if self.visual and png:
            data = base64.b64encode(Path(png).read_bytes()).decode()
            content: Any = [{"type": "text", "text": text},
                            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}]
        else:
            content = text
        return [{"role": "user", "content": content}]

    def _call(self, messages: list[dict[str, Any]], problem: Problem, iteration: int):
        ctx = CallContext(problem_key=problem.key, backend=self.backend.name, phase="analysis", iteration=iteration,
                          problem=problem)
        return self.llm.complete(messages, ctx)

    @staticmethod
    def _keep_call(rec: Recommendation, messages: list[dict[str, Any]], resp) -> None:
        """The call's usage and prompt go with ``rec`` (the loop adds the usage to its iteration's cost)."""
        rec.usage = CallUsage(resp.prompt_tokens, resp.completion_tokens, resp.cost_usd, resp.cached)
        rec.prompt = messages[0]["content"] if isinstance(messages[0]["content"], str) \
            else messages[0]["content"][0]["text"]

    def analyse(self, problem: Problem, code: str, verdict: Verdict, digest: Digest | None,
                png: Path | None = None, iteration: int = 0) -> Recommendation:
        messages = self.messages(problem, code, verdict, digest, png)
        try:
            resp = self._call(messages, problem, iteration)
        except LLMError as exc:
            return Recommendation(GENERIC_RECOMMENDATION, source="generic",
                                  evidence=f"(the analysis model failed: {exc})")
        rec = parse_recommendation(resp.text if not resp.note else "", self.llm.config.name)
        rec.category = category_of(rec.bottleneck) if rec.bottleneck != "unstated" else "generic"
        self._keep_call(rec, messages, resp)
        return rec

    def analyse_many(self, problem: Problem, code: str, verdict: Verdict, digest: Digest | None, k: int,
                     png: Path | None = None, iteration: int = 0) -> list[Recommendation]:
        """Up to ``k`` recommendations of distinct bottleneck classes from one call (the prompt asks for ``k``);
        generic directions make up for a model that names fewer, so the result always holds ``k``."""
        messages = self.messages(problem, code, verdict, digest, png, directions=k)
        try:
            resp = self._call(messages, problem, iteration)
        except LLMError:
            return generic_directions(k)
        recs = parse_recommendations(resp.text if not resp.note else "", self.llm.config.name)[:k]
        recs += generic_directions(k - len(recs), {r.category for r in recs})
        self._keep_call(recs[0], messages, resp)  # one call: its cost is counted once, with the first
        return recs


class ProfilingAdvisor:
    """profile → digest → analyse: the loop's `Advisor` for optimisation passes."""

    def __init__(self, backend: Backend, profiler: Profiler | None, analysis: str, workdir: str | Path, *,
                 agent: AnalysisAgent | None = None, ceilings: dict[str, Any] | None = None, render: bool = True,
                 verify: dict[str, Any] | None = None):
        if analysis not in ANALYSES:
            raise ValueError(f"unknown analysis {analysis!r} (choose from {', '.join(ANALYSES)})")
        if analysis == "llm" and agent is None:
            raise ValueError("analysis=llm needs an analysis agent (a model)")
        self.backend, self.profiler, self.analysis, self.agent = backend, profiler, analysis, agent
        self.workdir = Path(workdir)
        self.ceilings = ceilings
        self.render = render
        self.verify = verify
        """The job's verify settings (`kforge.verify.VerifyConfig` as a dict): the profiled run loads the
        kernel as the verifier did (None: the verifier's defaults)."""

    @property
    def model_calls(self) -> int:
        """Model calls one recommendation (or one `recommend_many`) costs: beam search budgets them."""
        return 1 if self.analysis == "llm" else 0

    def recommend(self, problem: Problem, code: str, verdict: Verdict, iteration: int = 0) -> Recommendation:
        return self._advise(problem, code, verdict, 1, iteration)[0]

    def recommend_many(self, problem: Problem, code: str, verdict: Verdict, k: int,
                       iteration: int = 0) -> list[Recommendation]:
        """``k`` recommendations of distinct classes from one profile: the rules that fit (then generic
        directions), or the analysis model's distinct bottlenecks."""
        return self._advise(problem, code, verdict, k, iteration)

    def _advise(self, problem: Problem, code: str, verdict: Verdict, k: int, iteration: int) -> list[Recommendation]:
        profile, notes = None, []
        if self.profiler is not None:
            try:
                profile = self.profiler.run(problem, code, self.backend, config=self.verify)
            except ProfilerUnavailable as exc:
                notes.append(f"profiling failed: {exc}")
        digest = build(problem, profile, time_ms=verdict.runtime.median_ms if verdict.runtime else None,
                       floor_ms=verdict.floor_ms, ceilings=self.ceilings, device=verdict.device,
                       precision=verdict.precision)
        digest.notes.extend(notes)
        out = self.workdir / f"analysis-{uuid.uuid4().hex[:8]}"
        out.mkdir(parents=True, exist_ok=True)
        files = dict(profile.raw_files) if profile else {}
        png = None
        if self.render and (profile is not None or self.analysis != "off"):
            try:
                png = render_png(digest, out / "digest.png")
                files["digest_png"] = str(png)
            except Exception as exc:  # noqa: BLE001 - a picture is a convenience, never worth a problem
                png = None
                digest.notes.append(f"could not draw the digest: {type(exc).__name__}: {exc}")
        (out / "digest.json").write_text(json.dumps(digest.to_dict(), indent=1, default=str))
        files["digest"] = str(out / "digest.json")
        if self.analysis == "llm":
            recs = ([self.agent.analyse(problem, code, verdict, digest, png, iteration=iteration)] if k == 1 else
                    self.agent.analyse_many(problem, code, verdict, digest, k, png, iteration=iteration))
        elif self.analysis == "rules":
            found = [classify(digest)] if k == 1 else findings(digest, k)
            recs = [Recommendation(action=f.action, bottleneck=f.bottleneck, evidence=f.evidence,
                                   source=f"rules:{f.rule}", category=f.rule) for f in found]
            recs += generic_directions(k - len(recs), {r.category for r in recs})
        else:
            recs = generic_directions(k)
        for rec in recs:  # the profile is shared; each child's iteration keeps it
            rec.files, rec.speed_of_light = dict(files), digest.speed_of_light
            rec.profile_s = profile.seconds if profile else 0.0
        return recs
