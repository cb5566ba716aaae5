"""Kept compile references (`kforge.verify.compile_ref`): a run waits for one being timed ahead of it."""

import threading
import time

from kforge.verify.compile_ref import CompileRefs
from kforge.verify.verdict import TimingStats


def _stats(ms: float) -> TimingStats:
    return TimingStats.from_samples([ms] * 5, [ms] * 5)


def test_a_run_waits_for_the_reference_timed_ahead_of_it(tmp_path):
    refs = CompileRefs(tmp_path)
    assert refs.claim("k") and not refs.claim("k")  # one timing per key
    found = []
    waiter = threading.Thread(target=lambda: found.append(refs.known("k", wait=True)))
    waiter.start()
    time.sleep(0.2)
    assert waiter.is_alive() and refs.known("k") is None  # without wait: not kept yet, no waiting
    refs.keep("k", _stats(2.0), _stats(4.0), ahead=True)
    refs.release("k")
    waiter.join(5)
    assert found and found[0].eager_ms == 4.0 and "ahead of this verification" in found[0].note
    assert not refs.claim("k")  # kept: nothing to claim
    assert CompileRefs(tmp_path).known("k").eager_ms == 4.0  # and on disk for the next process


def test_a_claim_that_ends_without_a_figure_releases_its_waiters(tmp_path):
    refs = CompileRefs(tmp_path)
    assert refs.claim("k")
    refs.release("k")
    assert refs.known("k", wait=True) is None and refs.claim("k")


def test_a_reference_is_kept_per_precision_and_per_input_casting():
    # The compile reference is timed in the precision (bf16 eager and compile are other programs than fp32's), and
    # KernelBench's rules cast integer inputs too: a figure kept for one must not serve another, as it did when the
    # key left the precision out (a precision ablation's bf16 jobs reused the fp32 ratio).
    from kforge.problems import resolve_problem
    from tests.helpers import fast_config
    relu = resolve_problem("level1/1_ReLU", size="cpu")
    keys = {CompileRefs.key(relu, "some GPU", fast_config(compile_ref=True, precision=p, rules=r))
            for p in ("fp32", "tf32", "bf16", "fp16") for r in ("kforge", "kernelbench")}
    assert len(keys) == 8 and None not in keys
    same = CompileRefs.key(relu, "some GPU", fast_config(compile_ref=True, precision="bf16", rules="strict"))
    assert same == CompileRefs.key(relu, "some GPU", fast_config(compile_ref=True, precision="bf16"))
