"""Correctness trials in a worker, and the run-time judgement of whose kernels did the work.

Each trial draws fresh inputs from the secret seed, runs the reference on them (strict fp32, the
harness's settings) and the candidate on its own copy, and compares. The last two trials, after timing and
in random order, are also measured, one profiled and one traced (`kforge.verify.measured`), and `judge` then
records whose code did the work (the ``work`` facet): the candidate's own kernels ran and the output derives from
them, they did not run (``kernel_not_run``), they ran on a decoy while other code computed the output
(``output_not_from_kernel``), or the forward re-ran every operator of the reference in PyTorch with nothing traced
to the kernels (``reference_replayed``). The rule sets (`kforge.verify.rules`, docs/verification.md) decide what
each means.

In the backward mode (``verify.backward``) what the trials call is a training step (`kforge.verify.backward`):
`program` wraps the reference and the candidate, `_compare` also judges the gradients
(`kforge.verify.gradients`), and `judge` asks whose code did each pass's work.
"""

from __future__ import annotations

import contextlib
from functools import partial

from ..precision import PRECISIONS, ROUNDINGS, get_precision
from ..sandbox.harness import PROBLEM_ERROR, Harness, HarnessVerdict, first_line
from ..sandbox.protocol import ProgramRequest
from . import gradients
from .backward import Backward
from .compare import as_outputs, rms
from .config import VerifyConfig
from .measured import MeasuredTrials
from .numerics import NumericsChecks, Refs
from .protocol import WorkFacet
from .stateful import FreshModels
from .variant_checks import VariantChecks
from .verdict import Attribution

MEASURED_TRIALS = 2
"""Correctness trials that also measure (one profiled, one traced); more run when fewer are asked for."""



def _explained(exc: BaseException) -> str:
    """A reference's failure, and what it means where it is one models often meet."""
    if "backward through the graph a second time" in str(exc):
        return (f"{type(exc).__name__}: trying to backward through the graph a second time: its state keeps the "
                "autograd graph of the call before, as a hidden state not detached does, so each training step "
                "backpropagates into the one before, whose graph is freed: it has no training step past its first call")
    return f"{type(exc).__name__}: {first_line(exc)}"


NOT_THEIRS = "not the candidate's"


class Trials(MeasuredTrials, NumericsChecks, VariantChecks, FreshModels, Harness):
    """The correctness part of a verification run (`kforge.verify.worker` adds timing)."""

    WATCHED = Harness.WATCHED + tuple(("kforge.verify.compare", f) for f in
                                      ("compare_tensor", "check_structure", "check_degenerate"))
    """The comparisons judge the candidate: one it replaced is a ``monkey_patch``."""

    def __init__(self, req: ProgramRequest):
        super().__init__(req, VerifyConfig.from_dict(req.config))
        self.trials_done = 0
        self.flags: list[str] = []
        self.attribution: Attribution | None = None
        self._ops: dict | None = None
        self._flow: bool | None = None
        self._handed: str | None = None
        self.input_scale: float | None = None
        """The RMS of the largest floating input last drawn (`kforge.verify.numerics` scales the fp32 tolerance)."""
        """What held the answer when the candidate's kernel got it (`kforge.verify.dataflow.Dataflow.handed`)."""
        self._profiled_calls = 0
        self.work: WorkFacet | None = None
        """Whose code did the work, from `judge`."""
        self.build_log: str | None = None
        """The compiler's log of an extension whose failed build the candidate caught."""
        self.audit = None
        """The problem's audit (`kforge.verify.protocol.ProblemAudit`), once the run has it."""
        self._mirrored: str | None = None
        """What the candidate's discarded kernel results mirror of the reference's own dead code (`deadcode`)."""
        self.steps: Backward | None = None
        """The backward mode's plan (None: the forward alone is judged)."""
        self._first: tuple | None = None
        """What `reference_alone` drew and ran, for trial 0: seed, RNG seed, inputs before and after, references."""

    # -- the backward mode (kforge.verify.backward) -----------------------------------------------------
    def load_reference(self) -> None:
        super().load_reference()
        if (held := self._held_in_reduced_precision()) is not None:
            self.precision, self.storage = held, getattr(self.torch, held.storage)
            if hasattr(self.ref_model, "to"):  # the float32 truth beside the model as the file has it
                self.ref_exact = self._exact_copy()
            self.setup_views()
            self.notes.append(f"the problem's own floating-point inputs and parameters are {held.storage}: judged as "
                              f"at --precision {held.name}, against a float32 truth from them at {held.name}'s "
                              f"tolerance (judged against PyTorch's own {held.name} result, a kernel that computes in "
                              "float32 and rounds once, closer to the truth, would fail)")
        self._note_kernelbench_cast()
        if self.precision.name == "tf32" and self.device.type != "cuda":
            self.notes.append("tf32 on a CPU: PyTorch runs no TF32 there, so the reference and the baselines are "
                              "float32; only the tolerance is TF32's")
        if self.cfg.backward:  # before any candidate code: it takes the functions it trusts now
            self.steps = Backward.of(self)

    def _note_kernelbench_cast(self) -> None:
        """Where KernelBench's harness would cast an input this run does not (an integer target or index, a mask, a
        tensor of another floating type), the kernelbench state of a kforge-rules run is judged on the inputs as kforge
        gives them: say so (a cross-entropy's int64 targets cast to bf16 fail KernelBench's own reference)."""
        if self.cast_all:
            return
        cast_to = get_precision(self.cfg.precision).storage  # KernelBench's, whatever this run judged the file at
        other = sorted(self.input_dtypes - {cast_to})
        if other:
            self.notes.append(f"KernelBench's harness casts every input to {cast_to}, its "
                              f"{', '.join(other)} ones too, which this run does not: the kernelbench state here is "
                              f"judged on the inputs as kforge gives them (--rules kernelbench casts them as it does)")

    def _held_in_reduced_precision(self):
        """The reduced precision a problem file holds all its floating-point inputs and parameters in, run as it is
        (``fp32``, not under the kernelbench rules, which cast them as KernelBench does): None where it holds any in
        another type or holds none. Judged in their own type against PyTorch's bf16 result, a kernel more exact than
        it was a mismatch (`kforge.precision`)."""
        torch = self.torch
        if self.precision.name != "fp32" or self.cast_all:
            return None
        model = self.ref_model
        held = [*model.parameters(), *model.buffers()] if isinstance(model, torch.nn.Module) else []
        dtypes = {str(x.dtype).replace("torch.", "") for x in held if x.is_floating_point()}
        dtypes |= {d for d in self.input_dtypes if getattr(torch, d).is_floating_point}
        return next((p for p in PRECISIONS.values() if p.reduced and dtypes == {p.storage}), None)

    def reference_alone(self) -> None:
        """Run the trials' references once before any candidate code where the audit (the model's forward in the
        precision) has not: the float32 truth at a reduced precision, the training steps in the backward mode. A
        failure there is the problem's (on an H100, KernelBench's AvgPool2d at its size: the truth's own backward
        raised a CUDA error, and was the candidate's `runtime_error`); later it could be the candidate's doing. These
        are trial 0's draws and references: it takes them over rather than running the reference again."""
        if self.steps is None and not self.precision.reduced:
            return
        runs = (["its training step"] if self.steps is not None else []) + (
            [f"in float32 and in {self.precision.name}"] if self.precision.reduced else [])
        try:
            seed = self.draw()  # trial 0's draws: it takes these references over (`trial`)
            inputs = self.inputs(seed)
            pristine = self._clone(inputs)  # the reference may change its inputs
            rng_seed = self.draw() if "stochastic" in self.flags else None
            self._first = (seed, rng_seed, pristine, inputs, self.reference(inputs, rng_seed))
            if self.stateful and self.steps is not None:  # its trials call one reference a step each, in lockstep
                runs.append("a second training step, on the state the first left")
                self.reference(self._clone(pristine), rng_seed)
        except HarnessVerdict:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever the reference raises on its own is the problem's
            self.raise_if_busy(exc)
            raise HarnessVerdict(PROBLEM_ERROR, f"the reference program fails when run on its own as the trials run "
                                 f"it ({'; '.join(runs)}): {_explained(exc)}; "
                                 f"{self.blame('a bug in the problem or beyond PyTorch at this size', NOT_THEIRS)}"
                                 f"{self.cast_note(exc)}", evidence={"traceback": self.problem_traceback(exc)}) from None

    def program(self, module, own: bool = False):
        """What a trial or a timed round calls: the module, or in the backward mode its training step (``own``: the
        candidate's, whose passes are measured and checked)."""
        return module if self.steps is None else self.steps.step(module, own)

    def inputs(self, seed: int) -> list:
        if self.steps is not None:  # the upstream gradient belongs to the input set, and is drawn with it
            self.steps.upstream.reseed(seed)
        drawn = super().inputs(seed)
        self.input_scale = max((rms(x) for x in drawn if isinstance(x, self.torch.Tensor) and x.is_floating_point()
                                and x.numel()), default=None)
        return drawn

    def _fail_exception(self, exc: BaseException, where: str) -> HarnessVerdict:
        return super()._fail_exception(exc, self.steps.where(where) if self.steps is not None else where)

    # -- the trials -----------------------------------------------------------------------------------
    @property
    def _plain_trials(self) -> int:
        """The trials before timing: all that were asked for, less the measured ones (at least one)."""
        plain = self.cfg.trials - MEASURED_TRIALS if self.cfg.attribution else self.cfg.trials
        return max(plain, min(1, self.cfg.trials))

    @property
    def _all_trials(self) -> int:
        measured = MEASURED_TRIALS if self.cfg.attribution and self.cfg.trials > 0 else 0
        return self._plain_trials + measured

    def correctness(self, model) -> None:
        """The trials before timing (`_plain_trials`)."""
        for trial in range(self._plain_trials):
            self.trials_done = trial + 1
            self.trial(model, trial)
        self._first = None  # no trial asked for (a build check): timing need not hold these references

    def measured(self, model) -> None:
        """The last two correctness trials, in random order, also measure whose code did the work; then the
        policy. They run after timing: the profiler's CUPTI hooks stay in the process once used and slowed
        every later launch (seen on an H100: a launch-bound network's eager time 2.4x longer). Counting them
        among the trials asked for keeps attribution's cost to the measuring itself."""
        if not self.cfg.attribution or self.cfg.trials <= 0:  # no trials asked (a build check): nothing to measure
            return
        self.attribution = Attribution()
        for mode in self.rng.sample(["profile", "dataflow"], 2):
            self.trials_done += 1
            self.trial(model, self.trials_done - 1, mode)
        self.judge()

    def trial(self, model, trial: int, mode: str | None = None) -> None:
        # a stateful problem's models: fresh before the first trial, then called once a trial in lockstep
        label = f"trial {trial + 1} of {self._all_trials}"  # counted from one, as "5 trials" is
        lockstep = mode is None and trial > 0
        if self.stateful and trial > 0 and not lockstep:  # a mismatch here, after the lockstep calls matched, is
            # state kept outside the model (a global, a C++ static) carried into the new one: say which call it was
            label += ", the first call of a freshly built pair of models"
        model = self.fresh_for_trial(model, label, lockstep=lockstep)
        first, self._first = self._first, None
        if first is not None and mode is None and not self.stateful:  # the references `reference_alone` ran
            seed, rng_seed, pristine, inputs, refs = first
        else:
            seed, pristine, refs = self.draw(), None, None
            inputs = self.inputs(seed)
            rng_seed = self.draw() if "stochastic" in self.flags else None
        where = f"in forward ({label})"
        # The profiled trial leaves uninitialised memory alone: the NaN fills would count as PyTorch's kernels.
        # Every other trial poisons it, and those catch outputs left unwritten.
        with self._poisoned_allocations() if mode != "profile" else contextlib.nullcontext():
            # Before the reference runs (it may change its inputs); `reference_alone` kept a copy from before its run.
            cand_in = self._clone(inputs) if pristine is None else pristine
            kb_in = self._clone(cand_in) if self.kernelbench_calls_again(mode) else None
            if mode == "profile":
                refs, outs = self._profiled(model, inputs, cand_in, rng_seed, where)
            else:
                refs = refs if refs is not None else self.reference(inputs, rng_seed)
                if mode == "dataflow":
                    outs = self._traced(model, cand_in, rng_seed, where, seed,
                                        refs.expected if self.steps is None else ())
                else:
                    outs = self.candidate(model, cand_in, rng_seed, where)
                    if kb_in is not None:
                        refs.kb_outputs = self.candidate_in_kernelbench_numerics(model, kb_in, rng_seed, where)
        self.trip(f"correctness {label}")
        self._check(outs, refs, cand_in, inputs, f"correctness {label}", traced=mode == "dataflow")

    def candidate(self, model, inputs: list, rng_seed: int | None, where: str) -> list:
        if rng_seed is not None:
            self.torch.random.manual_seed(rng_seed)
        raw = self._call(model, inputs, where)
        self.cand_returns = None if isinstance(raw, self.torch.Tensor) else type(raw).__name__
        return as_outputs(raw)

    def _check(self, outs, refs: Refs, cand_in, ref_in, where: str, traced: bool = False,
               recheck: bool = False) -> None:
        """Compare as a caller would read the outputs: on the current stream, with no extra synchronize, in both
        numerics (`kforge.verify.numerics`); then the inputs, which the candidate must leave as they were.

        An output that is wrong there but right after a full device synchronize was computed off the
        stream the candidate was called on (a side stream nobody waited for): a race, and a timing dodge.
        In the backward mode the results are a training step's: its outputs, then a gradient per input and parameter.
        A ``traced`` trial's values do not count for the kernelbench view: KernelBench's harness calls the program
        plainly, and under a dispatch mode torch may compute otherwise (torch 2.11's cumprod backward takes its
        composite-compliant path and rounds differently in bf16). Nor does a timing ``recheck``'s: KernelBench judges
        its correctness trials alone, and a bf16 kernel right on those was its mismatch at a recheck's draw.
        """
        failures = self.compare_results(outs, refs, where)
        if failures and self.device.type == "cuda":
            self.torch.cuda.synchronize()
            again = self.compare_results(outs, refs, where)
            if any(view not in again for view in failures):
                raise HarnessVerdict("cheat_detected", f"the output is wrong when read on the calling stream and "
                                     f"right only after a full device synchronize ({where}): the work ran on a "
                                     "stream the calling stream does not wait for", rule="unsynchronized_work")
        if traced or recheck:
            failures.pop("kernelbench", None)
        hint = self.backend.hint("mismatch", self.candidate_source(), "", self.precision.name) if failures else ""
        for v in failures.values():
            if hint and v.state == "numerical_mismatch" and hint not in v.message:
                v.message += hint
        self.views.record(failures)
        self.inputs_unchanged(cand_in, ref_in, where)

    def inputs_unchanged(self, cand_in, ref_in, where: str) -> None:
        """The candidate's inputs after its call against an untouched copy: a change is in-place mutation."""
        for k, (a, b) in enumerate(zip(cand_in, ref_in)):
            if isinstance(a, self.torch.Tensor) and not self.torch.equal(a, b):
                raise HarnessVerdict("cheat_detected", f"the candidate modified input {k} in place ({where}); the "
                                     "reference leaves it as it was", rule="input_mutation")

    def compare_results(self, outs: list, refs: Refs, where: str) -> dict[str, HarnessVerdict]:
        """The outputs in both numerics (`compare_outputs`); in the backward mode a training step's results, whose
        gradients are judged too. KernelBench has no backward: a missing or malformed gradient, or a wrong one at
        fp32, fails every view. At a reduced precision the kforge view judges the values against the float32
        truth's gradients, the kernelbench view against PyTorch's own in the precision at KernelBench's tolerance
        (as its outputs are), so a step that computes as PyTorch does stays correct there when that is far from
        the truth."""
        if self.steps is None:
            return self.compare_outputs(outs, refs, where)
        gradients.integrity(self.steps.report, where)
        outs, grads = self.steps.split(outs)
        refs, ref_grads, truths = self._step_refs(refs)
        failures = self.compare_outputs(outs, refs, where)
        compare = partial(gradients.compare, self.torch, self.steps.labels, grads, ref_grads, where, self.device,
                          own_names=self.steps.own_names)
        try:
            notes = compare(self._grad_tolerance, truths)
        except HarnessVerdict as v:
            if truths is None or v.state != "numerical_mismatch":
                raise
            failures.setdefault("kforge", v)
            notes = []
        if truths is not None:
            try:
                compare(lambda dtype: (self.precision.kernelbench_tol,) * 2)
            except HarnessVerdict as v:
                if v.state != "numerical_mismatch":
                    raise
                failures.setdefault("kernelbench", v)
        for note in notes:
            if not any(n.startswith(note.split(" is outside")[0]) for n in self.notes):  # one per gradient
                self.notes.append(note)
        return failures

    def _step_refs(self, refs: Refs) -> tuple[Refs, list, list | None]:
        """A training step's references as the outputs' (both numerics), the gradients to judge against, and at a
        reduced precision the float32 truth's: there the reference's own gradients in the precision give the
        structure (the candidate's are in it) and the truth the values, as for the outputs."""
        split = self.steps.split
        exact_out, exact_grads = split(refs.exact)
        native = split(refs.native) if refs.native is not None else None
        kb = split(refs.kb_outputs)[0] if refs.kb_outputs is not None else None
        reduced = native is not None and self.precision.reduced
        grads = native[1] if reduced else exact_grads
        return Refs(exact_out, native[0] if native is not None else None, kb), grads, exact_grads if reduced else None

    def _grad_tolerance(self, dtype: str) -> tuple[float, float]:
        """A gradient's (atol, rtol) before `kforge.verify.gradients` scales atol by its RMS: the dtype's, or at a
        reduced precision four of its roundings (`kforge.precision.ROUNDINGS`)."""
        if self.precision.reduced:
            tol = ROUNDINGS * self.precision.unit_roundoff
            return (self.cfg.atol if self.cfg.atol is not None else tol), (self.cfg.rtol if self.cfg.rtol is not None
                                                                            else tol)
        return self.cfg.tolerance(dtype, self.problem.tolerance)
