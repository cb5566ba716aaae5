"""Shape variants, the candidate's side: each variant `kforge.verify.variants` derives, one correctness trial each.

A candidate can also bake in the first shape it is called at (an output buffer, a workspace or a CUDA graph made
on the first call and reused): the first variant whose model is built as the problem's own (the same init inputs)
is called after one call at the problem's own shape (`VariantChecks._seen_first`).

The check runs after the verification's run, in a process of its own (request ``variants``), so a kernel that
crashes or corrupts the device at a size it did not expect costs only the kforge rules' verdict, and the
message names the variant it died on (the worker's phase marker says which): the ``kernelbench`` rules ignore
variants, as KernelBench does. Timing is on the problem's own shape only.
"""

from __future__ import annotations

from pathlib import Path

from ..sandbox.harness import HarnessVerdict, first_line
from ..sandbox.imports import import_candidate, import_file
from ..sandbox.progress import phase
from .protocol import Outcome, ShapeVariant, VariantsResult
from .variant_constants import derived_from, model_reads, restated_take_the_variant, shown_and_followed
from .variant_work import WORK_RULES, work_at_variant
from .variants import describe


def _same(torch, a: list, b: list) -> bool:
    """Whether two lists of init inputs are the same values (tensors by shape, dtype and contents)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == y.shape
                    and x.dtype == y.dtype and torch.equal(x.cpu(), y.cpu())):
                return False
        else:
            try:
                if type(x) is not type(y) or bool(x != y):
                    return False
            except Exception:  # noqa: BLE001 - values that do not compare plainly are not known to be the same
                return False
    return True


class VariantChecks:
    """Mixed into `kforge.verify.trials.Trials`: the candidate on each variant, one trial each."""

    def check_variants(self, variants: list[ShapeVariant], count_kernels: bool = False,
                       kernel_share: float | None = None, others: list[str] = ()) -> VariantsResult:
        """The candidate at each variant; with ``count_kernels`` (its kernels' calls were counted at the problem's
        own shape), its kernels must be called at each variant too, and do the work there
        (`kforge.verify.variant_work`) about as they did at that shape (``kernel_share``, beside PyTorch's and
        libraries' operators ``others``)."""
        checked, skipped = [], []
        self._count_kernels, self._primary_share, self._primary_others = count_kernels, kernel_share, set(others)
        # what the problem's own shape needs, for the first variant its model is called at after it (`_seen_first`)
        self._own = (self.ref_mod, self.init_inputs) if self.cfg.audit and self.steps is None and not self.stateful \
            else None
        for i, v in enumerate(variants):
            ran = self._variant_reference_at(v, i, skipped)
            if ran is None:
                continue
            shape, label, path, overrides, inputs, refs, rng_seed, ref_in = ran
            where = f"shape variant {shape}"
            try:
                self._variant_candidate(path, overrides, inputs, (refs, ref_in), rng_seed, where)
            except HarnessVerdict as fail:
                ev = fail.extra.get("evidence") or {}
                return VariantsResult(failure=Outcome(state=fail.state, message=f"on {where}: {fail.message}",
                                                      rule=fail.extra.get("rule"), mismatch=ev.get("mismatch")),
                                      checked=checked, skipped=skipped)
            checked.append(label)
        return VariantsResult(checked=checked, skipped=skipped)

    def _seen_first(self, followed: dict) -> list | None:
        """Inputs at the problem's own shape for the model to see before the variant's, once per verification: at the
        first variant that builds the same model (the same init inputs, no constant the model reads changed). A
        candidate that sizes a buffer, a workspace or a captured CUDA graph by its first call and reuses it is
        right at whichever shape comes first, and wrong at the next; a model in a workload sees many shapes. None
        where that does not apply: a stateful problem (its history is the reference's to match; without the problem
        audit, which finds them, none is known not to be), the backward mode, or a variant that builds another model."""
        if self._own is None or followed or not _same(self.torch, self._own[1], self.init_inputs):
            return None
        module, self._own = self._own[0], None
        variant, self.ref_mod = self.ref_mod, module
        try:
            return self.inputs(self.draw())
        finally:
            self.ref_mod = variant

    def _variant_reference_at(self, v: ShapeVariant, i: int, skipped: list[str]):
        """(shape, its label among the checked, path, inputs, references, rng seed, the inputs as the reference
        left them) of the variant, or of the first of its fallbacks the reference runs at where it fails at the
        variant; None, and a note in ``skipped``, where it fails at every one."""
        tries = [(v.overrides, v.source), *zip(v.fallbacks, v.fallback_sources)]
        failed = []
        for j, (overrides, source) in enumerate(tries):
            shape = describe(overrides)
            phase("shape variants", f"shape variant {shape}")  # a kernel that crashes here is reported with its shape
            path = Path(f"variant_{i}_{j}.py")
            path.write_text(source)
            try:
                ran = self._variant_reference(path, f"{i}_{j}")
            except Exception as exc:  # noqa: BLE001 - the problem itself does not run at this size
                self.raise_if_busy(exc)
                failed.append(f"{shape}: the reference fails there ({type(exc).__name__}: {first_line(exc)})")
                continue
            label = f"{shape} (for {describe(v.overrides)}, where the reference fails)" if j else shape
            return (shape, label, path, overrides, *ran)
        skipped.append("; ".join(failed))
        return None

    def _variant_reference(self, path: Path, i: str):
        """Make the variant the harness's problem: its module, init inputs, both reference models; draw inputs and
        run the reference on a copy of them, which is what the candidate must leave its own inputs as."""
        torch = self.torch
        self.ref_mod = import_file(path, f"kforge_variant_{i}")
        torch.random.manual_seed(self.weight_seed)
        with torch.device(self.device):
            self.init_inputs = [self.cast(x) for x in self.listed(self.ref_mod.get_init_inputs(), "get_init_inputs()")]
        self.build_references()
        inputs = self.inputs(self.draw())
        rng_seed = self.draw() if "stochastic" in self.flags else None
        ref_in = self._clone(inputs)
        return inputs, self.reference(ref_in, rng_seed), rng_seed, ref_in

    def _variant_candidate(self, path: Path, overrides: dict, inputs: list, reference: tuple, rng_seed,
                           where: str) -> None:
        """The candidate at the variant: its outputs against ``reference`` (the references, and the inputs as the
        reference left them), then its inputs, which it must leave as the reference does. Where it was called at
        the problem's own shape first (`_seen_first`) and failed, a model built afresh is tried at the variant too,
        so that the message says which it is: a size baked in (the fresh model fails as well, and its failure is
        the verdict), or something kept from the first call."""
        reads = model_reads(self.problem.source)
        shown, followed = shown_and_followed(overrides, self.problem.constants, reads,
                                             derived_from(self.problem.source, set(overrides)))
        seen = self._seen_first(followed)
        followed = {**followed, **self._derived_values(followed, reads)}
        try:
            self._variant_call(path, shown, followed, inputs, reference, rng_seed, where, seen)
        except HarnessVerdict as failed:
            if seen is None or failed.extra.get("rule") in WORK_RULES:  # whose work it is, not a size kept
                raise
            self._variant_call(path, shown, followed, inputs, reference, rng_seed, where, None)
            raise HarnessVerdict(failed.state, f"{failed.message}; a model built afresh is correct at this shape: it "
                                 "kept something sized by its first call", **failed.extra) from None

    def _derived_values(self, followed: dict, reads: set[str]) -> dict:
        """The variant's values of the constants the problem's model reads that are computed from ``followed``
        (``scale = dim ** -0.5``): a candidate that restates them with the problem's values takes the variant's,
        as it does for ``dim`` itself."""
        if not followed:
            return {}
        names = derived_from(self.problem.source, set(followed)) & reads
        variant = vars(self.ref_mod)
        return {n: variant[n] for n in names if n in variant and n in self.problem.constants}

    def _variant_call(self, path: Path, shown: dict, followed: dict, inputs: list, reference: tuple, rng_seed,
                      where: str, seen: list | None) -> None:
        """One model of the candidate, built in the variant's namespace, at the variant (after a call on ``seen``,
        the problem's own shape, where given)."""
        refs, ref_in = reference
        try:
            module = import_candidate("candidate.py", path, shown=shown)
            restated_take_the_variant(vars(module), followed, self.problem.constants)
            model = self._construct(module.ModelNew)
        except BaseException as exc:  # noqa: BLE001 - its own failure at this size
            raise self._fail_exception(exc, "while building ModelNew") from None
        self._share_weights(model, self.uncalled_reference())
        cand_in = self._clone(inputs)
        after = ", after a call at the problem's own shape" if seen is not None else ""
        # Poisoned as in the primary trials: rows a baked-in loop bound leaves unwritten would otherwise hold
        # whatever the allocator last freed there, often the reference's own values at this very shape.
        with self._poisoned_allocations():
            if seen is not None:
                self.candidate(model, seen, rng_seed, "in forward at the problem's own shape, before the variant's")
            self.recorder.start("count")
            try:
                outs = self.candidate(self.program(model, own=True), cand_in, rng_seed, f"in forward{after}")  # or a step
            finally:
                calls = self.recorder.calls + self.recorder.graph_replays
                self.recorder.stop()
        self.trip(where)
        failures = self.compare_results(outs, refs, f"the variant's trial{after}")
        if "kforge" in failures:
            raise failures["kforge"]
        self.inputs_unchanged(cand_in, ref_in, "the variant's trial")  # it may write them only at sizes it was not shown
        if getattr(self, "_count_kernels", False) and not calls:
            raise HarnessVerdict("kernel_unused", "the candidate's own kernels did not run at this shape, so PyTorch "
                                 "computed it: its kernels serve the shape it was shown alone", rule="kernel_not_run")
        if getattr(self, "_count_kernels", False):
            work_at_variant(self, model, inputs, rng_seed, f"in forward{after}", self._primary_share,
                            self._primary_others)
