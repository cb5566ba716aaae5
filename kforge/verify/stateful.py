"""Problems whose model keeps state between calls, judged as KernelBench judges them.

A reference whose ``forward`` reassigns one of its module attributes (KernelBench level 3's RNN cells: a hidden state
drawn with ``torch.randn`` in ``__init__``, replaced by every call) answers a call from its history: its second call
on the same inputs differs from its first. So does one that changes a tensor it holds in place (a running mean in a
buffer, a cache written by index) where its output depends on it. The problem audit (`kforge.verify.audit`) flags such
a problem ``stateful`` (`reassigned` finds the attributes; `changed_in_place` the tensors, and `values_changed` the
plain values, a counter or a list of past batches; these count where the output follows them and no random numbers
were drawn: the second call on the same inputs differs, or a call after one on other inputs does. BatchNorm's running
statistics change in training mode, but its output there comes from the batch). Its verification then builds both
models afresh from the weight seed before the first correctness trial and calls each once per trial, as KernelBench's
harness does, so the k-th trial compares their k-th calls (`FreshModels.fresh_for_trial`): a candidate that ignores
its history fails from the second. Each model the trials run is called once a trial: where the native reference
differs from the exact one at full precision (TF32, a GPU's cuDNN flags) it is a copy
(`kforge.sandbox.harness.Harness.build_references`). The two measured trials and each shape variant build a fresh pair
and call it once. Timing still calls the models it times as often as it likes, and its rechecks compare a fresh
reference with a fresh candidate on the refilled inputs rather than two outputs whose call histories differ
(`FreshModels.recheck_reference`, `FreshModels.recheck_outputs`).
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


#: Plain attributes a module keeps for PyTorch's own bookkeeping, not a model's state.
_NOT_STATE = frozenset({"training"})
#: Of a container, the elements whose values a fingerprint covers (a longer one is also told by its length).
_SHOWN = 256


def held_values(torch, model) -> dict[str, Any]:
    """A fingerprint of every other public attribute a module and its submodules hold: numbers and strings by value,
    a list, tuple, dict or set by its identity, its length and its first elements' fingerprints (a tensor in one by
    its identity and version). A counter a forward advances (``self.step += 1``) or a list it appends to (a history
    of batch means) is a state as much as a tensor it replaces."""
    if not isinstance(model, torch.nn.Module):
        return {}
    out: dict[str, Any] = {}
    for prefix, m in model.named_modules():
        for k, v in vars(m).items():
            if k.startswith("_") or k in _NOT_STATE or isinstance(v, (torch.Tensor, torch.nn.Module)):
                continue
            out[f"{prefix}.{k}" if prefix else k] = _fingerprint(torch, v)
    return out


def _fingerprint(torch, v: Any, depth: int = 0) -> Any:
    if v is None or isinstance(v, (bool, int, float, complex, str, bytes)):
        return v
    if isinstance(v, torch.Tensor):
        return ("tensor", id(v), _version(v))
    if depth < 2 and isinstance(v, (list, tuple, dict, set, frozenset)):
        if isinstance(v, (set, frozenset)):
            items = []  # unordered: told by its length
        else:
            items = list(v.items() if isinstance(v, dict) else v)[:_SHOWN]
        return (type(v).__name__, id(v), len(v),
                tuple(_fingerprint(torch, x, depth + 1) for x in items))
    return ("object", id(v))


def values_changed(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Plain attributes whose fingerprint a call changed (or that it added or removed)."""
    return sorted(k for k in set(before) | set(after) if k not in before or k not in after or before[k] != after[k])


def versions(held: dict[str, Any]) -> dict[str, int]:
    """Each held tensor's version counter, which every in-place operation on it (or a view of it) advances; a tensor
    made under ``torch.inference_mode`` keeps none and is left out."""
    out = {}
    for k, v in held.items():
        version = _version(v)
        if version is not None:
            out[k] = version
    return out


def changed_in_place(before: dict[str, int], held: dict[str, Any]) -> list[str]:
    """Tensors held before and after a call (the same names) whose version counter the call advanced."""
    return sorted(k for k, v in held.items() if k in before and _version(v) != before[k])


def _version(tensor) -> int | None:
    try:
        return tensor._version
    except RuntimeError:  # "Inference tensors do not track version counter."
        return None


def note(attrs: list[str]) -> str:
    shown = ", ".join(f"self.{a}" for a in attrs[:4]) + (", ..." if len(attrs) > 4 else "")
    return (f"the problem keeps state between calls (its forward reassigns or changes in place {shown}): both "
            "models are built afresh from one seed before the correctness trials and called once each a trial, as "
            "KernelBench does, so trial k compares their k-th calls; timing rechecks compare a fresh reference with "
            "a fresh candidate")


class FreshModels:
    """For a `Harness` subclass (`kforge.verify.trials.Trials`): fresh models where the problem is stateful."""

    @property
    def stateful(self) -> bool:
        return STATEFUL in getattr(self, "flags", ())

    def fresh_candidate(self, where: str, weights_from=None):
        """A new candidate model from the weight seed, with the reference's weights (``weights_from``'s, else
        ``ref_model``'s, which must not have been called: its buffers may hold state), as the first was built."""
        try:
            with candidate_code():
                model = self._construct(self.model_new)
        except BaseException as exc:  # noqa: BLE001 - its construction is its own, as at load
            raise self._fail_exception(exc, f"while constructing ModelNew again ({where})") from None
        self._share_weights(model, weights_from)
        return model

    def uncalled_reference(self):
        """For a stateful problem, a reference built afresh to copy weights from (None: ``ref_model`` will do): one
        that has been called may hold its state in its buffers (a running mean in a buffer, copied over with the
        weights, failed the reference judged against itself)."""
        return self._construct(self.ref_mod.Model) if self.stateful else None

    def fresh_for_trial(self, model, where: str, lockstep: bool = False):
        """For a stateful problem, a fresh reference (now ``ref_model``) and a fresh candidate, returned; else
        ``model`` as it is. With ``lockstep``, the pair the last lockstep trial was given instead, to be called once
        more each: KernelBench calls one pair of models once per correctness trial, so its k-th trial compares their
        k-th calls, and a candidate that ignores its history fails from the second."""
        if not self.stateful:
            return model
        if lockstep and getattr(self, "_lockstep", None) is not None:
            return self._lockstep
        self.build_references()
        self._lockstep = self.program(self.fresh_candidate(where), own=True)
        return self._lockstep

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
        fresh = self.fresh_candidate(where, weights_from=self.uncalled_reference())
        return self.candidate(self.program(fresh, own=True), self._clone(snapshot), rng_seed, where)
