"""The backward mode (``verify.backward``): a verification judges one training step, forward then backward.

With it, what a trial or a timed round calls is a `TrainingStep` of a module (the reference, its
``torch.compile``, the candidate): the floating tensors among the inputs become leaves that require grad, the
module's forward runs, and ``torch.autograd.grad`` takes its outputs back to each such input and to every
parameter the reference trains (looked up by the reference's parameter names, so the candidate keeps them on
its module as the reference does), with an upstream gradient applied to each floating output: unit normal in
the output's dtype, drawn from a secret seed that belongs to the input set (`Upstream`). The step returns the
outputs and then one gradient per input and parameter, so the trials, the rechecks and the timing take it as
they take a forward; `kforge.verify.gradients` judges the gradients.

Gradients come from ``torch.autograd.grad``, never from ``.grad``: what a candidate writes into ``.grad`` itself
counts for nothing, and is an integrity finding (``grad_written``). Before timing, each candidate step is also
checked for a backward that changes in place the outputs its caller holds or the upstream gradient
(``saved_tensor_mutated``, ``input_mutation``).

Whose code did the work is judged pass by pass (`Backward.judge`): the forward as without the backward mode but
measured on the forward alone, then the backward: the candidate's kernels ran in it (else
``backward_kernel_not_run``), a gradient derives from what they wrote there (else ``gradient_not_from_kernel``),
and it did not re-run every operator of the reference's backward in PyTorch (``backward_replayed``). Each pass
runs inside a ``record_function`` range (`FORWARD`, `BACKWARD`) while a profiler records, so the profile splits.
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass, field, replace
from typing import Any

from ..sandbox.harness import PROBLEM_ERROR, HarnessVerdict
from .attribution import attribute, replayed
from .compare import as_outputs
from .protocol import WorkFacet
from .verdict import Attribution, Work

FORWARD, BACKWARD = "kforge.forward", "kforge.backward"
"""The ranges a profiled step's passes run in (no ``::``: they are neither operators nor the candidate's calls)."""


class Upstream:
    """The upstream gradient of one input set: per floating output, unit normal in its dtype, from a seed derived
    from the set's own (never equal to the draw of the inputs: the gradient of a ReLU would then be its output)."""

    def __init__(self, torch):
        self.torch = torch
        self._randn, self._generator = torch.randn, torch.Generator  # the harness's, taken before candidate code
        self.seed = 0
        self._drawn: dict[tuple, Any] = {}
        self._shapes: list[tuple] = []
        self.rounding = None
        """At a reduced precision its dtype: every floating output's gradient is drawn in it, so the float32
        truth's step (`kforge.verify.gradients`) gets the same values, upcast, as the steps in the precision."""

    def reseed(self, seed: int) -> None:
        """A new input set: a new gradient, drawn now for the outputs seen so far (not inside a timed or profiled
        call: a draw there would count as the program's work)."""
        self.seed = random.Random(seed).getrandbits(62)
        self._drawn = {key: self._draw(key) for key in self._shapes}

    def _draw(self, key: tuple):
        index, shape, dtype, device = key
        gen = self._generator(device=device)
        gen.manual_seed(self.seed + index)
        drawn = self.rounding or dtype
        g = self._randn(shape, generator=gen, dtype=drawn, device=device)
        return g if drawn == dtype else g.to(dtype)

    def gradients(self, outs: list) -> list:
        """One upstream gradient per output: a tensor for each floating one, else None."""
        torch, found = self.torch, []
        for k, o in enumerate(outs):
            if not (isinstance(o, torch.Tensor) and o.is_floating_point()):
                found.append(None)
                continue
            key = (k, tuple(o.shape), o.dtype, o.device)
            if key not in self._drawn:
                self._drawn[key] = self._draw(key)
                self._shapes.append(key)
            found.append(self._drawn[key])
        return found

    def changed(self, used: list) -> list[int]:
        """Outputs whose upstream gradient no longer holds what was drawn (a backward wrote into it)."""
        torch = self.torch
        return [k for k, g in enumerate(used) if g is not None and
                not same(torch, g, self._draw((k, tuple(g.shape), g.dtype, g.device)))]


@dataclass
class StepReport:
    """What the last checked candidate step did besides its results (`Backward.integrity` judges it)."""

    grad_written: list[str] = field(default_factory=list)
    """Inputs and parameters whose ``.grad`` the candidate set itself."""
    outputs_changed: list[int] = field(default_factory=list)
    """Outputs its backward changed in place."""
    upstream_changed: list[int] = field(default_factory=list)
    """Outputs whose upstream gradient its backward changed in place."""


class TrainingStep:
    """One training step of ``module`` as one call: ``step(*inputs)`` returns its outputs, then a gradient (or None)
    per input and parameter of the plan, in `Backward.labels`' order."""

    def __init__(self, plan: "Backward", module, own: bool):
        self.plan, self.module, self.own = plan, module, own
        torch = plan.torch
        trained = getattr(module, "_orig_mod", module)  # a compiled module's parameters are its original's
        named = dict(trained.named_parameters()) if isinstance(trained, torch.nn.Module) else {}
        self.params = [named.get(name) for name in plan.param_names]
        if own:
            plan.own_names = list(named)  # for the message where one of the reference's names is not among them

    def __call__(self, *inputs):
        plan, torch = self.plan, self.plan.torch
        leaves = [x.detach().requires_grad_() if k in plan.input_slots else x for k, x in enumerate(inputs)]
        # Checked in the plain trials only: a measured trial would count the copies as the candidate's work.
        checking = self.own and plan.checking and (plan.recorder is None or plan.recorder.mode in (None, "count"))
        plan.failed_in = "forward"
        with torch.enable_grad():
            with plan.range(FORWARD):
                outs = as_outputs(self.module(*leaves))
            if self.own:
                plan.mark("forward", outs)
            before = [o.detach().clone() if isinstance(o, torch.Tensor) else None for o in outs] if checking else None
            plan.failed_in = "backward"
            with plan.range(BACKWARD):
                used = plan.upstream.gradients(outs)
                grads = self._gradients(leaves, outs, used)
        plan.failed_in = None
        if self.own:
            plan.mark("backward", [g for g in grads if g is not None])
            plan.report = self._report(leaves, outs, before, used if checking else None)
        return (*outs, *grads)

    def _gradients(self, leaves: list, outs: list, used: list) -> list:
        plan = self.plan
        roots = [(o, g) for o, g in zip(outs, used) if g is not None and o.requires_grad]
        targets = [leaves[k] for k in plan.input_slots] + list(self.params)
        wanted = [t for t in targets if t is not None and t.requires_grad]
        if not self.own and not (roots and wanted):
            raise HarnessVerdict(PROBLEM_ERROR, "the backward mode has nothing to check on this problem: "
                                 + ("no output of the reference carries a gradient" if not roots else
                                    "it has no floating input nor parameter to differentiate") +
                                 "; verify it without verify.backward (--backward)")
        got = iter(plan.grad([o for o, _ in roots], wanted, [g for _, g in roots], allow_unused=True)
                   if roots and wanted else [None] * len(wanted))
        grads = [next(got) if t is not None and t.requires_grad else None for t in targets]
        # A gradient that is the upstream tensor itself (an identity's) is copied: the harness NaN-fills what a
        # timed call returns, and the upstream gradient is used again.
        drawn = {g.untyped_storage().data_ptr() for g in used if g is not None}
        return [g.clone() if g is not None and g.untyped_storage().data_ptr() in drawn else g for g in grads]

    def _report(self, leaves: list, outs: list, before: list | None, used: list | None) -> StepReport:
        """``.grad`` written is looked for on every step (it costs nothing); in-place writes where there are copies
        to compare with (``before``, ``used``: the plain trials)."""
        torch = self.plan.torch
        labels = self.plan.labels
        written = [labels[i] for i, k in enumerate(self.plan.input_slots) if leaves[k].grad is not None]
        written += [labels[len(self.plan.input_slots) + i] for i, p in enumerate(self.params)
                    if p is not None and p.grad is not None]
        changed = [k for k, (o, b) in enumerate(zip(outs, before or [])) if b is not None
                   and not same(torch, o.detach(), b)]
        return StepReport(written, changed, self.plan.upstream.changed(used) if used is not None else [])


def same(torch, a, b) -> bool:
    """Equal element by element, NaN equal to NaN (an unwritten output element stays NaN through a backward)."""
    if a.is_floating_point():
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    return torch.equal(a, b)


class Backward:
    """The backward mode of one run: the reference's inputs and parameters to differentiate, the upstream gradient,
    and what the candidate's steps showed. Made with the reference, before any candidate code is imported."""

    def __init__(self, torch, ref_model, inputs: list, recorder=None, sync=None):
        self.torch, self.recorder = torch, recorder
        self.sync = sync or (lambda: None)
        """The harness's device synchronisation (the trusted clock's)."""
        self.grad = torch.autograd.grad  # the harness's, taken before candidate code
        self.upstream = Upstream(torch)
        self.input_slots = [k for k, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.is_floating_point()]
        named = ref_model.named_parameters() if isinstance(ref_model, torch.nn.Module) else []
        self.param_names = [name for name, p in named if p.requires_grad and p.is_floating_point()]
        self.labels = [f"input {k}" for k in self.input_slots] + [f"parameter {n}" for n in self.param_names]
        """What each gradient is of, in the order a step returns them."""
        self.checking = True
        """Check each candidate step for in-place writes (off while timing: the copies would be timed)."""
        self.report = StepReport()
        self.own_names: list[str] | None = None
        """The candidate's parameters by name, once its step is made."""
        self.failed_in: str | None = None
        """The pass the last step raised in."""
        self.calls: dict[str, int] = {}
        """Profiled: calls into the candidate's kernels in each pass."""
        self.flows: dict[str, bool | None] = {}
        """Traced: whether the pass's results derive from what its kernels wrote (None: could not tell)."""
        self.passes: dict[str, tuple[Attribution, dict]] = {}
        """Profiled: each pass's attribution and operator tables."""

    @classmethod
    def of(cls, harness) -> "Backward":
        """For a harness whose reference is loaded."""
        plan = cls(harness.torch, harness.ref_model, harness.inputs(harness.draw()), getattr(harness, "recorder", None),
                   harness.clock.sync)
        if harness.precision.reduced:
            plan.upstream.rounding = getattr(harness.torch, harness.precision.storage)
        return plan

    def step(self, module, own: bool = False) -> TrainingStep:
        """``module``'s training step; ``own``: the candidate's, whose passes are measured and checked."""
        return TrainingStep(self, module, own)

    def split(self, flat: list) -> tuple[list, list]:
        """A step's flattened results as (outputs, gradients)."""
        n = len(self.labels)
        return list(flat[:len(flat) - n]), list(flat[len(flat) - n:])

    def where(self, where: str) -> str:
        """A failure's place, saying the backward pass when the step raised there."""
        return where.replace("in forward", "in backward", 1) if self.failed_in == "backward" else where

    def extra_bytes(self, input_bytes: int, param_bytes: int, peak_bytes: int) -> int:
        """What a training step holds beyond a forward: the intermediates kept for the backward, a gradient per
        input and parameter, the upstream gradient and what the backward allocates (as much again, at most)."""
        return 2 * peak_bytes + 2 * (input_bytes + param_bytes)

    # -- measuring ------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def range(self, name: str):
        """A profiler range for one pass, only while a profiler records (a range costs microseconds a timed step
        would count). The device is synchronised before it closes: a pass's kernels run after their launches,
        and the profile assigns a kernel to the range it started in."""
        if not self.torch._C._autograd._profiler_enabled():
            yield
            return
        with self.torch.autograd.profiler.record_function(name):
            yield
            self.sync()

    def mark(self, done: str, results: list) -> None:
        """The candidate's step finished pass ``done``: count its calls there, and in a traced trial judge the
        pass's results and start the next pass afresh."""
        rec = self.recorder
        if rec is None or rec.mode is None:
            return
        if rec.mode == "profile":
            self.calls[done] = rec.calls - (self.calls.get("forward", 0) if done == "backward" else 0)
        elif rec.mode == "dataflow" and rec.flow is not None:
            self.flows[done] = None if rec.graph_replays else rec.flow.next_pass(results)

    def profiled(self, events, cuda: bool, so_paths: list[str], triton_names: set[str]) -> None:
        """The profiled trial's events, read pass by pass."""
        for name, window in (("forward", FORWARD), ("backward", BACKWARD)):
            self.passes[name] = attribute(events, cuda, so_paths, triton_names, window=window)

    # -- whose code did the work ----------------------------------------------------------------------
    def judge(self, trials) -> WorkFacet | None:
        """The work facet of a training step (`kforge.verify.trials.Trials.judge` in the backward mode): the
        forward's, measured on the forward alone; where that is the candidate's own, the backward's."""
        a, cuda = trials.attribution, trials.device.type == "cuda"
        fa, f_ops = self.passes.get("forward", (None, None))
        ba, b_ops = self.passes.get("backward", (None, None))
        a.output_from_kernel, a.gradient_from_kernel = self.flows.get("forward"), self.flows.get("backward")
        a.backward_share = ba.kernel_share if ba else None
        if any(u.origin == "torch" and u.name.startswith("triton_") for u in a.top):
            a.output_from_kernel = a.gradient_from_kernel = None  # torch.compile generated code: writes untraced
            a.notes.append("kernels generated by torch.compile ran: their writes cannot be traced")
        a.replayed_ops = replayed(f_ops) if f_ops else None
        forward = replace(a, shares=fa.shares if fa else {}, kernel_share=fa.kernel_share if fa else None)
        ran = self._ran(fa, "forward", cuda)
        if forward.output_from_kernel is False and self.calls.get("forward") == 0:
            ran = False
        first = trials._work(ran, forward)
        if first is not None and first.work != Work.OWN:
            return first
        back = self._backward(ba, b_ops, cuda, a.gradient_from_kernel)
        if back is not None:
            a.notes.append(back.work_message)
            return WorkFacet(work=back.work, work_rule=back.work_rule, work_message=back.work_message + " "
                             + trials._who()) if back.work != Work.OWN else (first or back)
        return first

    def _ran(self, pa: Attribution | None, name: str, cuda: bool) -> bool | None:
        if cuda and pa is not None and pa.kernel_share is not None:
            return bool(pa.shares.get("candidate") or pa.shares.get("unknown"))
        return self.calls[name] > 0 if name in self.calls else None

    def _backward(self, ba, b_ops, cuda: bool, derived: bool | None) -> WorkFacet | None:
        ran = self._ran(ba, "backward", cuda)
        if derived is False and self.calls.get("backward") == 0:
            ran = False
        if ran is False:
            return WorkFacet(work=Work.NONE, work_rule="backward_kernel_not_run", work_message=(
                "no kernel of the candidate's ran in its backward pass, so autograd computed the gradients through "
                "PyTorch's operators (a backward written in PyTorch, a straight-through trick, or no backward of its "
                "own: write the backward as kernels behind a torch.autograd.Function)."))
        if derived is False:
            return WorkFacet(work=Work.BYPASSED, work_rule="gradient_not_from_kernel", work_message=(
                "the candidate's kernels ran in its backward pass, but no gradient derives from what they wrote "
                "there: PyTorch computed the gradients."))
        again = replayed(b_ops) if b_ops else None
        if again:
            return WorkFacet(work=Work.REPLAYED, work_rule="backward_replayed", work_message=(
                f"the candidate's backward pass runs every operator of the reference's backward that matters in "
                f"PyTorch ({', '.join(again)})."))
        if ran is None and derived is None:
            return None
        return WorkFacet(work=Work.OWN, work_message="its own kernels computed the outputs and the gradients.")
