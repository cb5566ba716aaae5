"""Whose code computes a shape variant's answer (`work_at_variant`), for `kforge.verify.variant_checks`.

A kernel kept for the shape it was shown, with PyTorch at every other, passed the variants' call count whenever the
other path also touched a kernel of its own (a copy "kept warm", its own ReLU run again on PyTorch's result). So each
variant's call is profiled beside the reference's, as the measured trials profile theirs: where PyTorch ran every
operator of the reference there (`reference_replayed`), or where the candidate's own kernels did far less of its
forward's work than at the problem's shape while PyTorch ran work there that it did not run at that shape
(`kernel_share_dropped`: ``torch.clamp`` in place of the reference's ``relu`` is no replay by name; PyTorch's im2col
beside the candidate's own GEMM, slower at an odd bf16 shape, is the same path), its kernels serve the shape it was
shown alone.
"""

from __future__ import annotations

from ..sandbox.harness import HarnessVerdict
from .attribution import AGAIN, CANDIDATE, LAYOUT, REFERENCE, attribute, replayed

SHARE_DROP = 0.4
"""How much lower than at the problem's shape the candidate's kernel share at a variant may be: a kernel beside a
PyTorch op (a bias added in PyTorch) moves by a few points between sizes; one that runs on PyTorch's answer at other
shapes falls by half or more."""
NEW_WORK = 0.1
"""The share of a variant's forward an operator the problem's shape did not run (in its attribution's top) must take
for a fallen share to be PyTorch's work instead of the candidate's."""
WORK_RULES = ("reference_replayed", "kernel_share_dropped")


def work_at_variant(t, model, inputs: list, rng_seed, where: str, primary_share: float | None,
                    primary_others: set[str] = frozenset()) -> None:
    """Raise ``kernel_unused`` where PyTorch computed this variant's answer (``t``: the trials at the variant, after
    its comparison passed). On a CPU the candidate's forward runs a few times before the profiled call and each
    operator counts its least time, as in the measured trials. Not for a stateful problem (another call changes its
    history) or a training step; a profile that cannot be taken leaves the call count as what is known."""
    if t.stateful or t.steps is not None:
        return
    from torch.autograd.profiler import profile, record_function
    cuda = t.device.type == "cuda"
    program = t.program(model, own=True)
    copies = [t._clone(inputs) for _ in range(t._host_repeats() + 2)]  # made outside the profiled sections
    try:
        with profile(use_device="cuda" if cuda else None, use_kineto=True, record_shapes=True) as prof:
            t.reference(copies.pop(), rng_seed, exact_within=lambda: record_function(REFERENCE))
            t.recorder.start("profile")  # its calls into its own kernels appear as `kforge::` ranges
            try:
                while len(copies) > 1:
                    with record_function(AGAIN):
                        t.candidate(program, copies.pop(), rng_seed, where)
                t.recorder.start("profile")  # the judged call's alone
                with record_function(CANDIDATE):
                    t.candidate(program, copies.pop(), rng_seed, where)
            finally:
                t.recorder.stop()
        found, ops = attribute(prof.function_events, cuda, t.recorder.so_paths, t.recorder.triton_names)
    except HarnessVerdict:
        raise
    except Exception:  # noqa: BLE001 - no profiler here (no CUPTI)
        return
    if (names := replayed(ops)) is not None:
        raise HarnessVerdict("kernel_unused", f"PyTorch ran every operator of the reference at this shape "
                             f"({', '.join(names)}), the candidate's own kernels beside them: its kernels serve the "
                             "shape it was shown alone", rule="reference_replayed")
    if share_fell(found, primary_share, primary_others):
        torch_ops = ", ".join(u.name for u in found.top if u.origin != "candidate")
        raise HarnessVerdict("kernel_unused", f"the candidate's own kernels did {found.kernel_share:.0%} of its "
                             f"forward's work at this shape and {primary_share:.0%} at the problem's ({torch_ops} the "
                             "rest): its kernels serve the shape it was shown, and PyTorch the others",
                             rule="kernel_share_dropped")


def share_fell(found, primary_share: float | None, primary_others: set[str]) -> list[str]:
    """PyTorch's operators that took the work from the candidate's kernels at a variant (``found``: its attribution):
    the share fell by `SHARE_DROP` or more, and an operator the problem's shape did not run takes `NEW_WORK` of it.
    A path of the candidate's own at every size (PyTorch's im2col beside its own GEMM) may take another share at
    another shape (69% and 5% at an odd bf16 shape on a CPU); ``torch.clamp`` in place of its ReLU kernel is new."""
    share = found.kernel_share
    if primary_share is None or share is None or share >= primary_share - SHARE_DROP:
        return []
    return [u.name for u in found.top if u.origin != "candidate" and u.name not in primary_others
            and u.name not in LAYOUT and u.share >= NEW_WORK]
