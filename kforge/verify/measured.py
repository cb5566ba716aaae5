"""The two measured correctness trials (`kforge.verify.trials.Trials.measured`), and the judgement of whose code
did the work from what they measured.

* the *profile* trial runs both under ``torch.profiler``: kernel share, top kernels by origin, and the
  PyTorch operators each side ran (`kforge.verify.attribution`);
* the *dataflow* trial traces which memory the candidate's kernels wrote and whether the output derives
  from it (`kforge.verify.dataflow`).

`MeasuredTrials.judge` then records the ``work`` facet; the rule sets (`kforge.verify.rules`) decide what it means.
"""

from __future__ import annotations

import time

from ..sandbox.budget import BudgetSpent
from ..sandbox.harness import HarnessVerdict, first_line, tail
from ..sandbox.progress import candidate_code
from .attribution import AGAIN, CANDIDATE, REFERENCE, attribute, replayed
from .compare import as_outputs
from .protocol import WorkFacet
from .verdict import Attribution, Work

HOST_PROFILE_CALLS = 4
"""On a CPU, the profiled trial's calls of the candidate's forward (`MeasuredTrials._host_repeats`), each operator's
least time counting: on a busy 2-core machine one preempted call read a 36% share as 92%."""
HOST_REPEATS_S = 1.0
"""No more of those calls once they have taken this long: a scheduler's slice (milliseconds) matters little to a
forward this slow. Under Triton's interpreter the Triton example's forward took about 4 s on a 2-core machine, and
three more calls added 13 s to its test."""


class MeasuredTrials:
    """Mixed into `kforge.verify.trials.Trials`: its measured trials' two ways of calling the candidate, and `judge`."""

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

    def _traced(self, model, cand_in, rng_seed, where, seed, answers=()):
        from .dataflow import Dataflow
        flow = Dataflow(self.torch, self.clock.sync, answers, cand_in)
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
        self.cand_returns = None if isinstance(out, self.torch.Tensor) else type(out).__name__
        outs = as_outputs(out)
        if graphs:
            self.attribution.notes.append(f"{graphs} CUDA graph replay(s): their writes cannot be traced")
        else:
            self._flow, self._handed = flow.reaches(outs), flow.handed
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
            return _facet(Work.BUILD_FAILED, None, "the candidate's extension does not build; its code caught the "
                         "error and ran without its kernels")
        if a.output_from_kernel is False and self._ops is not None and self._profiled_calls == 0:
            ran = False  # kernels of unknown origin ran (cuDNN's, ...), but no call into the candidate's own was seen
        if ran is False:
            hint = self.backend.hint("not_run", self.candidate_source(), "", self.precision.name)
            return _facet(Work.NONE, "kernel_not_run", "the candidate's own kernels did not run in its forward, so "
                         "other code computed the answer (PyTorch's, or the candidate's own on the host, NumPy's say)"
                         f"{hint}. " + self._who())
        if a.output_from_kernel is False and self._mirrored:  # no decoy: the reference throws the same value away
            return _facet(Work.NONE, "kernel_result_discarded", "no output derives from what the candidate's kernels "
                         f"computed ({self._mirrored}), and none of the reference's derives from the same values, "
                         "which it computes and discards too: no decoy, but PyTorch computed the answer. "
                         + self._who())
        if a.output_from_kernel is False:
            return _facet(Work.BYPASSED, "output_not_from_kernel", "no output derives from what the candidate's "
                         "kernels wrote: other code computed the answer (a kernel on a dummy tensor, a result thrown "
                         "away, a C++ function that calls a torch operator, NumPy on the host). " + self._who())
        if a.output_from_kernel is True and self._handed:
            return _facet(Work.REPLAYED, "answer_precomputed", f"the candidate's kernel was handed the answer: "
                         f"{self._handed} that no kernel of its own wrote already held the output's values, so other "
                         "code computed them (PyTorch's operators, NumPy on the host) and the kernel only carried them "
                         "to the output. " + self._who())
        if a.replayed_ops:  # its kernels replaced no operator that takes 1% of the reference's time
            traced = a.output_from_kernel is True
            return _facet(Work.REPLAYED, "kernel_sliver" if traced else "reference_replayed", "the candidate's "
                         f"forward runs every operator of the reference that matters in PyTorch "
                         f"({', '.join(a.replayed_ops)}); its own kernels "
                         + ("compute the output from that, a sliver of the work (what they replace takes under "
                            "1% of the reference's time, whatever share of the candidate's own they take). " if traced else
                            "add to that, and what they wrote could not be traced to the output. ") + self._who())
        if ran is None and a.output_from_kernel is None:
            return None  # nothing measured: the static rules speak, if any did
        return _facet(Work.OWN, None, self._who())

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


def _facet(work: str, rule: str | None, message: str) -> WorkFacet:
    return WorkFacet(work=work, work_rule=rule, work_message=message)
