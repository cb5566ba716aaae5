"""One verification's facts become its `Verdict` here, and only here: the rule sets decide the state once.

The verifier gathers `Facts` from wherever its verification ended (the model's reply had no code, a static
rule denied it, the build failed, or the run replied) and calls `conclude`; nothing edits a verdict after.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from .config import VerifyConfig
from .protocol import Outcome
from .rules import decide_all
from .verdict import Attribution, Evidence, Facets, State, TimingStats, Verdict


@dataclass(frozen=True)
class Facts:
    """Everything one verification established, before a rule set decides its state."""

    facets: Facets
    message: str
    evidence: Evidence = field(default_factory=Evidence)
    device: str = ""
    trials: int = 0
    phases: dict[str, float] = field(default_factory=dict)
    attribution: Attribution | None = None
    runtime: TimingStats | None = None
    ref: TimingStats | None = None
    compile_ref: TimingStats | None = None
    ref_strict: TimingStats | None = None
    problem_flags: list[str] = field(default_factory=list)
    floor_ms: float | None = None
    build: dict[str, Any] | None = None

    @classmethod
    def ended(cls, state: State, message: str, rule: str | None = None, **kw: Any) -> "Facts":
        """A verification that ended before a run measured anything: its state is its outcome."""
        return cls(Facets(outcome=state.value, outcome_rule=rule), message, **kw)

    def with_variants(self, outcome: Outcome) -> "Facts":
        """These facts with the shape variants' outcome (the kforge rules read it; `kforge.verify.rules`)."""
        facets = replace(self.facets, variant_outcome=outcome.state, variant_rule=outcome.rule,
                         variant_message=outcome.message)
        evidence = self.evidence
        if outcome.mismatch and not evidence.mismatch:
            evidence = replace(evidence, mismatch=outcome.mismatch)
        return replace(self, facets=facets, evidence=evidence)


@dataclass(frozen=True)
class Subject:
    """What was verified, and how long it took."""

    problem: str
    backend: str
    source_hash: str = ""
    wall_s: float = 0.0


def conclude(facts: Facts, cfg: VerifyConfig, subject: Subject) -> Verdict:
    """The verdict: the state under every rule set from the facets, ``state`` under ``cfg.rules``."""
    decisions = decide_all(facts.facets, cfg.require_kernel, cfg.min_kernel_share)
    chosen = decisions[cfg.rules]
    return Verdict(state=chosen.state, message=chosen.message or facts.message, rule=chosen.rule,
                   problem=subject.problem, backend=subject.backend, device=facts.device, runtime=facts.runtime,
                   ref=facts.ref, compile_ref=facts.compile_ref, evidence=facts.evidence, trials=facts.trials,
                   wall_s=subject.wall_s, source_hash=subject.source_hash, floor_ms=facts.floor_ms, build=facts.build,
                   phases=dict(facts.phases), attribution=facts.attribution, ref_strict=facts.ref_strict,
                   problem_flags=list(facts.problem_flags), rules=cfg.rules,
                   states={name: d.state.value for name, d in decisions.items()}, facets=facts.facets,
                   precision=cfg.precision)
