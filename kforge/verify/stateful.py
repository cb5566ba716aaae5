"""Problems whose model keeps state between calls, judged as KernelBench judges them.

A reference whose ``forward`` reassigns one of its module attributes (KernelBench level 3's RNN cells: a hidden state
drawn with ``torch.randn`` in ``__init__``, replaced by every call) answers a call from its history: its second call
on the same inputs differs from its first. The problem audit (`kforge.verify.audit`) flags such a problem
``stateful`` (`reassigned` finds the attributes). Its verification then builds both models afresh from the
weight seed for every correctness trial and calls each once, as KernelBench's harness does, so their histories are
equal (`FreshModels.fresh_for_trial`); timing still calls the models it times as often as it likes, and its
rechecks compare a fresh reference with a fresh candidate on the refilled inputs rather than two outputs whose
call histories differ (`FreshModels.recheck_reference`, `FreshModels.recheck_outputs`).
"""

from __future__ import annotations

from typing import Any

from ..sandbox.progress import candidate_code
from .compare import as_outputs

STATEFUL = "stateful"
"""The audit's flag."""


def held_tensors(torch, model) -> dict[str, Any]:
    """Every tensor a module holds by name (plain attributes, parameters and buffers), of it and its submodules."""
    if not isinstance(model, torch.nn.Module):
        return {}
    out: dict[str, Any] = {}
    for prefix, m in model.named_modules():
        for table in (vars(m), m._parameters, m._buffers):
            for k, v in table.items():
                if isinstance(v, torch.Tensor):
                    out[f"{prefix}.{k}" if prefix else k] = v
    return out


def reassigned(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Attributes that hold another tensor than before a call (or that the call added or removed)."""
    return sorted(k for k in set(before) | set(after) if before.get(k) is not after.get(k))


def note(attrs: list[str]) -> str:
    shown = ", ".join(f"self.{a}" for a in attrs[:4]) + (", ..." if len(attrs) > 4 else "")
    return (f"the problem keeps state between calls (its forward reassigns {shown}): each correctness trial builds "
            "both models afresh from one seed and calls each once, as KernelBench does, and timing rechecks compare "
            "a fresh reference with a fresh candidate")


class FreshModels:
    """For a `Harness` subclass (`kforge.verify.trials.Trials`): fresh models where the problem is stateful."""

    @property
    def stateful(self) -> bool:
        return STATEFUL in getattr(self, "flags", ())

    def fresh_candidate(self, where: str):
        """A new candidate model from the weight seed, with the reference's weights, as the first was built."""
        try:
            with candidate_code():
                model = self._construct(self.model_new)
        except BaseException as exc:  # noqa: BLE001 - its construction is its own, as at load
            raise self._fail_exception(exc, f"while constructing ModelNew again ({where})") from None
        self._share_weights(model)
        return model

    def fresh_for_trial(self, model, where: str):
        """For a stateful problem, a fresh reference (now ``ref_model``) and a fresh candidate, returned; else
        ``model`` as it is."""
        if not self.stateful:
            return model
        self.build_references()
        return self.program(self.fresh_candidate(where), own=True)

    def recheck_reference(self, inputs: list, rng_seed: int | None) -> list:
        """The expected outputs of a timing recheck: of a fresh reference where the problem is stateful."""
        if not self.stateful:
            return self.reference(inputs, rng_seed)
        timed = self.ref_model, self.ref_exact
        self.build_references()
        try:
            return self.reference(inputs, rng_seed)
        finally:
            self.ref_model, self.ref_exact = timed

    def recheck_outputs(self, out, snapshot: list, rng_seed: int | None, where: str) -> list:
        """What a timing recheck compares: the timed call's output, or, for a stateful problem, a fresh candidate's
        on a copy of the same inputs (the timed model has been called many times, the fresh reference once)."""
        if not self.stateful:
            return as_outputs(out)
        return self.candidate(self.program(self.fresh_candidate(where), own=True), self._clone(snapshot), rng_seed,
                              where)
