"""The facts of a worker reply that carries no result: killed at its time limit, forged, dead of a signal, or
failed in the harness — and the one case among them that is still a verdict on the candidate, a run stopped in
kforge's own measuring after its correctness trials passed (`established`)."""

from __future__ import annotations

from typing import Any

from ..sandbox.protocol import ProtocolError, Reply
from .conclude import Facts
from .config import VerifyConfig
from .protocol import RunProgress, WorkFacet
from .verdict import Evidence, Facets, State, Work


def established(reply: Reply, cfg: VerifyConfig, soft: list[dict[str, Any]], findings: list,
                device: str) -> Facts | None:
    """A run stopped at its time limit in kforge's own measuring (timing, attribution), after its correctness
    trials passed and not in candidate code: judged from what it had established, never as the candidate's
    timeout (`kforge.verify.phases`). None when that is not the case."""
    p = reply.progress
    if not reply.timed_out or p is None or p.in_candidate or "run" not in p.milestones:
        return None
    try:
        ran = RunProgress.from_wire(p.milestones["run"])
    except ProtocolError:
        return None
    if ran.trials <= 0:
        return None
    missing = (["its timings"] if ran.runtime is None else []) + ["whose code did the work"]
    note = (f"the run reached its time limit ({cfg.timeout_s:g} s) during {reply.phase or 'its measuring'}, "
            f"kforge's own measuring, after the correctness trials passed: {' and '.join(missing)} "
            f"{'were' if len(missing) > 1 else 'was'} not measured (verify.timeout_s, verify.timing.limit_s, "
            "verify.attribution_budget_s)")
    kforge, kb = ran.mismatch.get("kforge"), ran.mismatch.get("kernelbench")
    views = {"kb_outcome": (kb.state if kb else State.CORRECT.value), "kb_rule": kb.rule if kb else None,
             "kb_message": kb.message if kb else ""} if bool(kforge) != bool(kb) else {}
    facets = Facets(outcome=kforge.state if kforge else State.CORRECT.value, outcome_rule=kforge.rule if kforge
                    else None, **views, **({} if not soft else unmeasured(soft[0]).to_wire()))
    evidence = Evidence(notes=[*ran.notes, note], findings=[f.to_dict() for f in findings],
                        output_tail=reply.output_tail or None)
    message = kforge.message if kforge else f"matches the reference on {ran.trials} trials"
    return Facts(facets, message, evidence, device=device, trials=ran.trials, runtime=ran.runtime, ref=ran.ref,
                 compile_ref=ran.compile_ref, ref_strict=ran.ref_strict,
                 problem_flags=list(ran.audit.flags) if ran.audit else [])


def no_result(reply: Reply, cfg: VerifyConfig) -> Facts:
    """A run that gave no result: killed at its timeout, forged, dead of a signal, or failed in the harness."""
    tail = reply.output_tail or None
    phase = reply.phase or "start-up"
    if reply.timed_out:
        hang = (": a hang at a size it was not shown, most often a loop or barrier bounded by the sizes it was shown, "
                "or memory written past the data" if "shape variant" in phase else "")
        return Facts.ended(State.TIMEOUT, f"killed after {cfg.timeout_s:g} s (during {phase}{hang})",
                           evidence=Evidence(output_tail=tail))
    if reply.forged:  # before the signal: a forger may well have killed its process afterwards
        return forged(reply)
    if reply.signal:
        # Not kforge's (a timeout is reported as one): where nothing in the program kills itself, the
        # system's out-of-memory killer is the usual sender, and a user should look at memory first.
        hint = (" (SIGKILL from outside: most often the system's out-of-memory killer, when the reference and "
                "the candidate together need more memory than the machine has)" if reply.signal == "SIGKILL"
                else _crash_hint(phase, cfg.precision) if reply.signal in CRASHES else "")
        return Facts.ended(State.RUNTIME_ERROR, f"the candidate's process died with {reply.signal} during "
                           f"{phase}{hint}", evidence=Evidence(output_tail=tail))
    return Facts.ended(State.RUNTIME_ERROR, f"the worker failed during {phase}",
                       evidence=Evidence(traceback=reply.error, output_tail=tail))


#: Signals of a program that touched memory it does not own (or asserted, or divided by zero).
CRASHES = ("SIGSEGV", "SIGBUS", "SIGABRT", "SIGFPE")
#: Bytes an element of each reduced precision's storage takes, for the hint below.
ELEMENT_BYTES = {"bf16": 2, "fp16": 2}


def _crash_hint(phase: str, precision: str) -> str:
    """What a crash most often means where it happened: at a size the candidate was not shown, an access past the
    data (sizes baked in, no bounds check or mask on the last block); at a reduced precision, a kernel that reads
    its 2-byte inputs as float."""
    if "shape variant" in phase:
        return (" (a crash at a size it was not shown: most often an access past the data, from sizes baked in or "
                "no bounds check or mask on the last block)")
    if precision in ELEMENT_BYTES:
        return (f" (the problem runs at {precision}: its inputs and parameters take {ELEMENT_BYTES[precision]} bytes "
                "an element, and a kernel that reads them as float reads past them)")
    return ""


def forged(reply: Reply) -> Facts:
    """The candidate wrote into the worker's reply channel: a cheat under every rule set."""
    return Facts.ended(State.CHEAT_DETECTED, f"the candidate wrote an answer of its own into the worker's reply "
                       f"channel ({reply.forged})", "forged_result",
                       evidence=Evidence(output_tail=reply.output_tail or None))


def unmeasured(finding: dict[str, Any]) -> WorkFacet:
    """A static finding about whose code did the work, standing where the run measured none."""
    return WorkFacet(work=Work.NONE, work_rule=finding["rule"],
                     work_message=f"{finding['message']} (the run could not measure it)")
