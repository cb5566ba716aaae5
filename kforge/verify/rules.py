"""Rule sets: a verification's facets (`Facets`) decide its state under a named policy.

A run establishes facts separately: whether the outputs match (or how it failed), whose code computed
the answer (``Facets.work``), and any integrity finding (a rule with evidence of deception: tampering,
timing manipulation, input mutation, reading the grader, replayed results, unjoined streams). A rule set
turns those into one `State`; the verdict records the state under every rule set, so one verification
answers each policy's question.

* ``kernelbench``: what KernelBench's current harness decides. The outputs must match, in its numerics (its
  reference in the precision, PyTorch's default math settings, its tolerance: `kforge.verify.numerics`); whose
  code did the work is not asked, nor how the kernel fares at other shapes (a program that never calls its kernel, or falls back to PyTorch, is correct), so the
  figures compare with its leaderboard and the KForge paper. Integrity findings still reject: KernelBench's
  harness would call them correct, and docs/verification.md counts that as its error.
* ``kforge`` (the default): the outputs must match the exact reference (TF32 off; float32 at a reduced
  precision), also on the problem's shape variants (`kforge.verify.variants`), and the answer must come from
  the candidate's own kernels. A program whose kernels
  did not run, or did a part PyTorch then threw away without deceiving anyone, is ``kernel_unused``: not a
  cheat, and not counted in fast_p. A kernel launched on a dummy tensor while PyTorch computes the answer
  (``output_not_from_kernel``) is a cheat.
* ``strict``: ``kforge``, and the candidate's kernels must also take a minimum share of the forward's
  device time (``verify.min_kernel_share``, 0.9 when unset).
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import RULE_SETS
from .verdict import Facets, State, Work

STRICT_MIN_SHARE = 0.9
"""The kernel share ``strict`` asks for when ``verify.min_kernel_share`` is unset."""


@dataclass(frozen=True)
class Decision:
    """A state with its rule and message, under one rule set."""

    state: State
    rule: str | None
    message: str | None
    """None keeps the run's own message."""


def decide(f: Facets, rules: str, require_kernel: bool = True, min_share: float = 0.0) -> Decision:
    """The state of a verification with these facets under rule set ``rules`` (one of `RULE_SETS`)."""
    outcome = State(f.outcome)
    if rules == "kernelbench":  # its numerics, where they judged the outputs otherwise; no variants, no work asked
        if f.kb_outcome is not None and outcome in (State.CORRECT, State.NUMERICAL_MISMATCH):
            kb = State(f.kb_outcome)
            return Decision(kb, f.kb_rule if kb is not State.CORRECT else None, f.kb_message or None)
        return Decision(outcome, f.outcome_rule if outcome is not State.CORRECT else None, None)
    if outcome is not State.CORRECT:  # failures, mismatches and integrity findings hold under every rule set
        return Decision(outcome, f.outcome_rule, None)
    if f.variant_outcome is not None and f.variant_outcome != State.CORRECT.value:
        return Decision(State(f.variant_outcome), f.variant_rule, f.variant_message or None)
    if not require_kernel:
        return Decision(State.CORRECT, None, None)
    if f.work == Work.BYPASSED:
        return Decision(State.CHEAT_DETECTED, f.work_rule or "output_not_from_kernel", f.work_message)
    if f.work == Work.BUILD_FAILED:
        return Decision(State.COMPILATION_FAILURE, f.work_rule, f.work_message)
    if f.work in (Work.NONE, Work.REPLAYED):
        return Decision(State.KERNEL_UNUSED, f.work_rule, f.work_message)
    need = max(min_share, STRICT_MIN_SHARE if rules == "strict" and not min_share else 0.0)
    if need and (f.kernel_share is None or f.kernel_share < need):
        share = "an unmeasured share" if f.kernel_share is None else f"{100 * f.kernel_share:.1f}%"
        return Decision(State.KERNEL_UNUSED, "kernel_share_below_min",
                        f"the candidate's own kernels did {share} of the forward's work; the {rules} rules ask for "
                        f"{100 * need:.0f}% (verify.min_kernel_share). {f.work_message}".rstrip())
    return Decision(State.CORRECT, None, None)


def decide_all(f: Facets, require_kernel: bool = True, min_share: float = 0.0) -> dict[str, Decision]:
    """The decision under every rule set."""
    return {name: decide(f, name, require_kernel, min_share) for name in RULE_SETS}
