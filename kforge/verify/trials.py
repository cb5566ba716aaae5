"""Correctness trials in a worker, and the run-time judgement of whose kernels did the work.

Each trial draws fresh inputs from the secret seed, runs the reference on them (strict fp32, the
harness's settings) and the candidate on its own copy, and compares. The last two trials, after timing and
in random order, are also measured (`kforge.verify.attribution`, `kforge.verify.dataflow`):

* the *profile* trial runs both under ``torch.profiler``: kernel share, top kernels by origin, and the
  PyTorch operators each side ran;
* the *dataflow* trial traces which memory the candidate's kernels wrote and whether the output derives
  from it.

`judge` then records whose code did the work (the ``work`` facet): the candidate's own kernels ran and the
output derives from them, they did not run (``kernel_not_run``), they ran on a decoy while PyTorch computed
the output (``output_not_from_kernel``), or the forward re-ran every operator of the reference in PyTorch
with nothing traced to the kernels (``reference_replayed``). The rule sets (`kforge.verify.rules`,
docs/verification.md) decide what each means.

In the backward mode (``verify.backward``) what the trials call is a training step (`kforge.verify.backward`):
`program` wraps the reference and the candidate, `_compare` also judges the gradients
(`kforge.verify.gradients`), and `judge` asks whose code did each pass's work.
"""

from __future__ import annotations

import contextlib
import time
import traceback
from functools import partial

from ..precision import ROUNDINGS
from ..sandbox.budget import BudgetSpent
from ..sandbox.harness import PROBLEM_ERROR, Harness, HarnessVerdict, first_line, tail
from ..sandbox.progress import candidate_code
from ..sandbox.protocol import ProgramRequest
from . import gradients
from .attribution import AGAIN, CANDIDATE, REFERENCE, attribute, replayed
from .backward import Backward
from .compare import as_outputs
from .config import VerifyConfig
from .numerics import NumericsChecks, Refs
from .protocol import WorkFacet
from .stateful import FreshModels
from .variant_checks import VariantChecks
from .verdict import Attribution, Work

MEASURED_TRIALS = 2
"""Correctness trials that also measure (one profiled, one traced); more run when fewer are asked for."""
HOST_PROFILE_CALLS = 4
"""On a CPU, the profiled trial's calls of the candidate's forward (`Trials._host_repeats`), each operator's least
time counting: on a busy 2-core machine one preempted call read a 36% share as 92%."""
HOST_REPEATS_S = 1.0
"""No more of those calls once they have taken this long: a scheduler's slice (milliseconds) matters little to a
forward this slow. Under Triton's interpreter the Triton example's forward took about 4 s on a 2-core machine, and
three more calls added 13 s to its test."""



def _explained(exc: BaseException) -> str:
    """A reference's failure, and what it means where it is one models often meet."""
    if "backward through the graph a second time" in str(exc):
        return (f"{type(exc).__name__}: trying to backward through the graph a second time: its state keeps the "
                "autograd graph of the call before, as a hidden state not detached does, so each training step "
                "backpropagates into the one before, whose graph is freed: it has no training step past its first call")
    return f"{type(exc).__name__}: {first_line(exc)}"

class Trials(NumericsChecks, VariantChecks, FreshModels, Harness):
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
        if self.cfg.backward:  # before any candidate code: it takes the functions it trusts now
            self.steps = Backward.of(self)

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
                                 f"it ({'; '.join(runs)}): {_explained(exc)}; this is "
                                 f"a bug in the problem or beyond PyTorch at this size, not the candidate's"
                                 f"{self.cast_note()}", evidence={"traceback": tail(traceback.format_exc())}) from None

    def program(self, module, own: bool = False):
        """What a trial or a timed round calls: the module, or in the backward mode its training step (``own``: the
        candidate's, whose passes are measured and checked)."""
        return module if self.steps is None else self.steps.step(module, own)

    def inputs(self, seed: int) -> list:
        if self.steps is not None:  # the upstream gradient belongs to the input set, and is drawn with it
            self.steps.upstream.reseed(seed)
        return super().inputs(seed)

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
        model = self.fresh_for_trial(model, label, lockstep=mode is None and trial > 0)
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
                    outs = self._traced(model, cand_in, rng_seed, where, seed)
                else:
                    outs = self.candidate(model, cand_in, rng_seed, where)
                    if kb_in is not None:
                        refs.kb_outputs = self.candidate_in_kernelbench_numerics(model, kb_in, rng_seed, where)
        self.trip(f"correctness {label}")
        self._check(outs, refs, cand_in, inputs, f"correctness {label}", traced=mode == "dataflow")

    def candidate(self, model, inputs: list, rng_seed: int | None, where: str) -> list:
        if rng_seed is not None:
            self.torch.random.manual_seed(rng_seed)
        return as_outputs(self._call(model, inputs, where))

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

    # -- measuring ------------------------------------------------------------------------------------
    def _profiled(self, model, inputs, cand_in, rng_seed, where):
        # The autograd profiler torch.profiler wraps: the wrapper's start asks hasattr(torch, "_inductor"),
        # which imports inductor and dynamo (5 s in a light worker on an H100) for a profile that needs neither.
        from torch.autograd.profiler import profile, record_function
        cuda = self.device.type == "cuda"
        try:
            # use_kineto: this API's default is the legacy profiler, which times operators with CUDA events and
            # records no kernel at all (torch.profiler passes it; every kernel share came out None without it).
            prof = profile(use_device="cuda" if cuda else None, use_kineto=True, record_shapes=True)
            prof.__enter__()
        except Exception as exc:  # noqa: BLE001 - no profiler (no CUPTI): judged from the dataflow alone
            self.attribution.notes.append(f"no profile: {first_line(exc)}")
            return self.reference(inputs, rng_seed), self.candidate(model, cand_in, rng_seed, where)
        try:
            # The exact reference alone in the reference's range: its operators are what a replay is counted against
            # (the native one, where it runs too, would double every count).
            refs = self.reference(inputs, rng_seed, exact_within=lambda: record_function(REFERENCE))
            self.recorder.start("profile")
            began = time.perf_counter()
            for _ in range(self._host_repeats()):  # before the judged call, whose outputs they must not touch
                again = self._clone(cand_in)
                with record_function(AGAIN):
                    self.candidate(model, again, rng_seed, where)
                if time.perf_counter() - began > HOST_REPEATS_S:
                    break
            self.recorder.start("profile")  # counts the judged call's calls alone
            with record_function(CANDIDATE):
                outs = self.candidate(model, cand_in, rng_seed, where)
        finally:
            self._profiled_calls = self.recorder.calls
            self.recorder.stop()
            prof.__exit__(None, None, None)
        try:
            found, self._ops = attribute(prof.function_events, cuda, self.recorder.so_paths,
                                         self.recorder.triton_names)
            found.notes = self.attribution.notes + found.notes
            found.kernel_calls = self._profiled_calls + self.recorder.graph_replays
            self.attribution = found
            if self.steps is not None:
                self.steps.profiled(prof.function_events, cuda, self.recorder.so_paths, self.recorder.triton_names)
        except Exception as exc:  # noqa: BLE001 - a profile we cannot read is a missing measurement, not a verdict
            self.attribution.notes.append(f"the profile could not be read ({type(exc).__name__}: {first_line(exc)})")
        return refs, outs

    def _host_repeats(self) -> int:
        """Calls of the candidate's forward to profile before the judged one, for its operators' least times
        (`kforge.verify.attribution`): on a CPU, in the forward mode, where the problem keeps no state between
        calls. A GPU's kernel times do not move with the host's load."""
        if self.device.type == "cuda" or self.steps is not None or self.stateful:
            return 0
        return HOST_PROFILE_CALLS - 1

    def _traced(self, model, cand_in, rng_seed, where, seed):
        from .dataflow import Dataflow
        flow = Dataflow(self.torch, self.clock.sync)
        self.recorder.start("dataflow", flow)
        out = None
        try:
            if rng_seed is not None:
                self.torch.random.manual_seed(rng_seed)
            with flow, candidate_code():
                out = model(*cand_in)
                self.clock.sync()
        except (HarnessVerdict, BudgetSpent):  # a verdict, or the attribution's budget spent: not the tracing's fault
            raise
        except BaseException as exc:  # noqa: BLE001 - maybe the tracing's fault: judge an untraced call
            self.attribution.notes.append(f"the dataflow could not be traced ({type(exc).__name__}: "
                                          f"{first_line(exc)})")
            flow = None
        finally:
            graphs = self.recorder.graph_replays
            self.recorder.stop()
        if flow is None:
            fresh = self._clone(self.inputs(seed))
            cand_in[:] = fresh
            return self.candidate(model, cand_in, rng_seed, where)
        outs = as_outputs(out)
        if graphs:
            self.attribution.notes.append(f"{graphs} CUDA graph replay(s): their writes cannot be traced")
        else:
            self._flow = flow.reaches(outs)
            self.attribution.notes.extend(flow.notes)
            if self._flow is False and not flow.results.overflow:  # a decoy, or the reference's dead code mirrored?
                self._mirrored = self._dead_code_mirrored(flow.results.read(), seed, rng_seed)
        return outs

    def _dead_code_mirrored(self, results, seed: int, rng_seed: int | None) -> str | None:
        from .deadcode import mirrored
        try:
            return mirrored(self, results, seed, rng_seed)
        except Exception as exc:  # noqa: BLE001 - not measured: the decoy finding stands
            self.raise_if_busy(exc)
            self.attribution.notes.append(f"the reference's dead code could not be traced ({first_line(exc)})")
            return None

    # -- whose code did the work ----------------------------------------------------------------------
    def judge(self) -> None:
        """Record whose code computed the answer (``self.work``, a `Facets` part); the rule sets decide what
        that means (`kforge.verify.rules`). Nothing here rejects: a program that computed the answer honestly
        in PyTorch is not a cheat, and KernelBench's rules do not ask."""
        if self.steps is not None:  # a training step: each pass on its own
            self.work = self.steps.judge(self)
            return
        a = self.attribution
        a.output_from_kernel = self._flow
        if self._ops is not None:
            a.replayed_ops = replayed(self._ops)
        if self._flow is not None and any(u.origin == "torch" and u.name.startswith("triton_") for u in a.top):
            a.output_from_kernel = None  # torch.compile generated code: its writes are not traced
            a.notes.append("kernels generated by torch.compile ran: their writes cannot be traced")
        self.work = self._work(self._own_kernels_ran(), a)

    def _work(self, ran: bool | None, a: Attribution) -> WorkFacet | None:
        builder = getattr(self.backend, "builder", None)
        if (ran is False or a.output_from_kernel is False) and builder is not None and builder.failed:
            # A guarded load whose build failed: PyTorch did the work because the extension is not there.
            self.build_log = tail(next(iter(builder.failed.values())))
            return _work(Work.BUILD_FAILED, None, "the candidate's extension does not build; its code caught the "
                         "error and ran without its kernels")
        if a.output_from_kernel is False and self._ops is not None and self._profiled_calls == 0:
            ran = False  # kernels of unknown origin ran (cuDNN's, ...), but no call into the candidate's own was seen
        if ran is False:
            return _work(Work.NONE, "kernel_not_run", "the candidate's own kernels did not run in its forward, so "
                         "other code computed the answer (PyTorch's, or the candidate's own on the host, NumPy's say). "
                         + self._who())
        if a.output_from_kernel is False and self._mirrored:  # no decoy: the reference throws the same value away
            return _work(Work.NONE, "kernel_result_discarded", "no output derives from what the candidate's kernels "
                         f"computed ({self._mirrored}), and none of the reference's derives from the same values, "
                         "which it computes and discards too: no decoy, but PyTorch computed the answer. "
                         + self._who())
        if a.output_from_kernel is False:
            return _work(Work.BYPASSED, "output_not_from_kernel", "no output derives from what the candidate's "
                         "kernels wrote: other code computed the answer (a kernel on a dummy tensor, a result thrown "
                         "away, a C++ function that calls a torch operator, NumPy on the host). " + self._who())
        if a.replayed_ops:  # its kernels replaced no operator that takes 1% of the reference's time
            traced = a.output_from_kernel is True
            return _work(Work.REPLAYED, "kernel_sliver" if traced else "reference_replayed", "the candidate's "
                         f"forward runs every operator of the reference that matters in PyTorch "
                         f"({', '.join(a.replayed_ops)}); its own kernels "
                         + ("compute the output from that, a sliver of the work. " if traced else
                            "add to that, and what they wrote could not be traced to the output. ") + self._who())
        if ran is None and a.output_from_kernel is None:
            return None  # nothing measured: the static rules speak, if any did
        return _work(Work.OWN, None, self._who())

    def _own_kernels_ran(self) -> bool | None:
        a = self.attribution
        if self.device.type == "cuda" and a.kernel_share is not None:
            return bool(a.shares.get("candidate") or a.shares.get("unknown"))
        if self._ops is not None:  # profiled: its calls were counted
            return self._profiled_calls > 0
        return None

    def _who(self) -> str:
        a = self.attribution
        if not a.top:
            return ""
        return "What ran: " + "; ".join(f"{u.name[:70]} ({u.origin}, {100 * u.share:.1f}%)" for u in a.top[:5])


def _work(work: str, rule: str | None, message: str) -> WorkFacet:
    return WorkFacet(work=work, work_rule=rule, work_message=message)
