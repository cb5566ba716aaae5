"""The two numerics one run judges a candidate's outputs in, so one verification answers both rule sets.

* **kforge**: against the *exact* reference, TF32 off; at a reduced ``verify.precision`` that reference holds the
  same rounded weights in float32 and runs on the cast inputs upcast, so a bf16 kernel is judged against the
  truth rather than against another bf16 rounding, at a tolerance from the precision's unit roundoff and the
  reduction length (`kforge.precision.tolerance`); at fp32, the dtype's tolerance or the problem's own.
* **kernelbench**: as KernelBench's harness decides: against the *native* reference (the model in the precision,
  PyTorch's default math settings: cuDNN's TF32 on) at its tolerance (1e-4 fp32, 1e-2 half types).

Where the two references and tolerances coincide (fp32 on a CPU, most often) one comparison serves both. A
numerical mismatch in one view does not stop the run while the other still passes: the run goes on (timing
included) and the failed view's first mismatch is kept (`Views.failed`); the rule sets read each from the
verdict's facets. Shape, dtype and integrity failures hold in both views and stop the run.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Any

from ..precision import reduction_length, tolerance
from ..sandbox.harness import HarnessVerdict
from ..sandbox.settings import Swap
from .compare import Mismatch, as_outputs, check_degenerate, check_structure, compare_tensor

VIEWS = ("kforge", "kernelbench")


@dataclass
class Refs:
    """One trial's reference outputs in each view."""

    exact: list
    native: list | None = None
    """None: the same as ``exact`` (the views' references coincide)."""
    kb_outputs: list | None = None
    """The candidate's outputs run again under KernelBench's numerics, where those change what PyTorch computes
    (CUDA at fp32 or tf32: cuDNN's TF32); None: its outputs from the harness's numerics serve both views."""

    def of(self, view: str) -> list:
        return self.native if view == "kernelbench" and self.native is not None else self.exact

    @property
    def expected(self) -> list:
        """What the outputs' structure (shapes, dtypes) must be: the model's own in the precision."""
        return self.native if self.native is not None else self.exact


@dataclass
class Views:
    failed: dict[str, HarnessVerdict] = field(default_factory=dict)
    """Each view's first numerical mismatch, while the other view still passed."""

    def live(self) -> list[str]:
        return [v for v in VIEWS if v not in self.failed]

    def record(self, failures: dict[str, HarnessVerdict]) -> None:
        """Keep each view's first mismatch; raise the kforge view's once no view passes."""
        for view, v in failures.items():
            self.failed.setdefault(view, v)
        if not self.live():
            raise self.failed["kforge"]


class NumericsChecks:
    """Mixed into `kforge.verify.trials.Trials`: the references and the comparison in both views."""

    def setup_views(self) -> None:
        """After `Harness.setup`: whether the views' references differ on this device and precision."""
        s = self.settings
        flags_differ = any(s.defaults.get(k) != v for k, v in s.strict.items() if k.endswith("allow_tf32"))
        self.native_differs = self.precision.reduced or self.precision.name == "tf32" or (
            self.device.type == "cuda" and flags_differ)
        self.candidate_numerics_differ = self.device.type == "cuda" and not self.precision.reduced and flags_differ
        """KernelBench runs the candidate too with PyTorch's default numerics: where they differ from the harness's
        (cuDNN's TF32 on a GPU), a correctness trial runs the candidate once more under them for that view."""
        self.views = Views()
        self._rng_after_reference = None

    def candidate_in_kernelbench_numerics(self, model, inputs: list, rng_seed: int | None, where: str) -> list:
        """The candidate called as KernelBench calls it: PyTorch's default numerics, and for a stochastic problem the
        RNG not seeded again after the reference's call (its harness seeds once, before the reference), so a
        candidate drawing its own dropout mask draws the next one, not the reference's."""
        with Swap(self.settings, "kernelbench"):
            if rng_seed is not None and self._rng_after_reference is not None:
                _set_rng_state(self.torch, self._rng_after_reference)
                rng_seed = None
            return self.candidate(model, inputs, rng_seed, where)

    def kernelbench_calls_again(self, mode: str | None) -> bool:
        """Whether a correctness trial calls the candidate once more for the kernelbench view: where PyTorch's
        default numerics change what it computes, or where the problem draws random numbers (KernelBench does not
        seed again between the two calls). A stateful model is called once a trial (`kforge.verify.stateful`)."""
        return mode is None and not self.stateful and (self.candidate_numerics_differ or "stochastic" in self.flags)

    def reference(self, inputs: list, rng_seed: int | None, exact_within=contextlib.nullcontext) -> Refs:
        """The reference's outputs: the exact one (run inside ``exact_within()``, e.g. a profiler's range), and the
        native one where it differs. For a stochastic problem the RNG's state after the native run is kept: under
        KernelBench's harness the candidate's call draws on from there (`candidate_in_kernelbench_numerics`)."""
        exact_in = [x.float() if isinstance(x, self.torch.Tensor) and x.is_floating_point() else x
                    for x in inputs] if self.precision.reduced else inputs
        # In the backward mode a model's program is its training step (`kforge.verify.backward`).
        with exact_within():
            exact = self._reference_run(self.program(self.ref_exact), exact_in, "exact", rng_seed)
        native = self._reference_run(self.program(self.ref_model), inputs, "default", rng_seed) \
            if self.native_differs or rng_seed is not None else None
        self._rng_after_reference = _rng_state(self.torch) if rng_seed is not None else None
        return Refs(exact, native)

    def _reference_run(self, model, inputs: list, numerics: str, rng_seed: int | None) -> list:
        with Swap(self.settings, numerics):
            if rng_seed is not None:
                self.torch.random.manual_seed(rng_seed)
            outs = as_outputs(model(*inputs))
            self.clock.sync()
        return outs

    def _tolerance(self, view: str, ref, index: int, outs: list) -> tuple[float, float]:
        cfg, p = self.cfg, self.precision
        if cfg.atol is not None and cfg.rtol is not None:
            return cfg.atol, cfg.rtol
        if view == "kernelbench":  # KernelBench's get_tolerance_for_precision: no per-problem tolerance
            kb = p.kernelbench_tol
            return (cfg.atol if cfg.atol is not None else kb), (cfg.rtol if cfg.rtol is not None else kb)
        if p.name == "fp32":
            return cfg.tolerance(str(ref.dtype).removeprefix("torch."), self.problem.tolerance)
        audit = getattr(self, "audit", None)
        flops = (audit.flops if audit else None) or self.problem.flops
        elements = sum(o.numel() for o in outs if isinstance(o, self.torch.Tensor))
        rms = float(self.torch.linalg.vector_norm(ref, dtype=self.torch.float32)) / math.sqrt(max(1, ref.numel()))
        atol, rtol = tolerance(p, reduction_length(flops, elements), rms if math.isfinite(rms) else 0.0)
        return (cfg.atol if cfg.atol is not None else atol), (cfg.rtol if cfg.rtol is not None else rtol)

    def _outputs_for(self, view: str, outs: list, refs: Refs) -> list:
        return refs.kb_outputs if view == "kernelbench" and refs.kb_outputs is not None else outs

    def _values(self, view: str, outs: list, refs: Refs, where: str) -> HarnessVerdict | None:
        """The first output outside the view's tolerance, as a verdict; None when all are within it. The kforge
        view also refuses a constant output where the reference varies (KernelBench asks only allclose)."""
        torch = self.torch
        expected = refs.of(view)
        if view == "kernelbench" and refs.kb_outputs is None and self.candidate_numerics_differ:
            expected = refs.exact  # the candidate ran in the harness's numerics: KernelBench's reference in them
        try:
            for i, (o, r) in enumerate(zip(outs, expected)):
                if isinstance(r, torch.Tensor):
                    atol, rtol = self._tolerance(view, r, i, expected)
                    compare_tensor(o, r, atol, rtol, i)
            if view == "kforge":
                for i, (o, r) in enumerate(zip(outs, expected)):
                    if isinstance(r, torch.Tensor):
                        check_degenerate(o, r, i)
        except Mismatch as m:
            return _as_verdict(m, where, view)
        return None

    def compare_outputs(self, outs: list, refs: Refs, where: str) -> dict[str, HarnessVerdict]:
        """The structure (shapes, dtypes: every view; raises), then the values in each view still passing:
        the views that fail now, with their verdicts. One comparison serves both where they coincide."""
        try:
            check_structure(outs, refs.expected, self.device)
        except Mismatch as m:
            raise _as_verdict(m, where, None) from None
        failures: dict[str, HarnessVerdict] = {}
        live = self.views.live()
        exact = refs.native is None
        for view in live:
            if view == "kernelbench" and exact and "kforge" in live and self._same_tolerance(refs):
                kforge = failures.get("kforge")
                if kforge is not None and not kforge.extra["evidence"]["mismatch"].get("degenerate"):
                    kforge.extra["evidence"]["mismatch"]["numerics"] = "kforge, kernelbench"  # one check for both
                    failures[view] = kforge
                continue
            found = self._values(view, self._outputs_for(view, outs, refs), refs, where)
            if found is not None:
                failures[view] = found
        return failures

    def _same_tolerance(self, refs: Refs) -> bool:
        return all(self._tolerance("kforge", r, i, refs.exact) == self._tolerance("kernelbench", r, i, refs.exact)
                   for i, r in enumerate(refs.exact) if isinstance(r, self.torch.Tensor))


def _rng_state(torch) -> tuple:
    return torch.get_rng_state(), (torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None)


def _set_rng_state(torch, state: tuple) -> None:
    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


def _as_verdict(m: Mismatch, where: str, view: str | None) -> HarnessVerdict:
    state = {"shape": "shape_mismatch", "numerical": "numerical_mismatch"}.get(m.kind, "cheat_detected")
    rule = "output_not_plain_tensor" if state == "cheat_detected" else None
    ev: dict[str, Any] = {"mismatch": {"trial": where, **m.details, **({"numerics": view} if view else {})}}
    return HarnessVerdict(state, f"{m.message} ({where})", rule=rule, evidence=ev)
