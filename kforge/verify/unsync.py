"""``unsynchronized_work`` decided so that a busy host cannot fake it.

On a GPU each timed call is measured twice: CUDA events on the calling stream, and host time around a full device
synchronize. Work left running on a stream nobody waits for (a side stream, a thread) escapes the events and not
the host: a gap. But a host whose cores are busy (a cold ``kforge eval`` builds 16 extensions beside the worker)
also stretches host times, for the reference as much as for the candidate, and by different amounts from call to
call: a verdict read from one noisy round moved with the machine's load.

So the timing rounds only raise a suspicion (`suspicious`); before accusing, the candidate and the eager reference
are timed again, back to back, `REPEATS` times each, both with the device settled before the start event (so
neither host time holds the L2 flush or any earlier work), and `persistent` accuses only when the candidate's
smallest gap over all those calls is still large, larger than the reference's smallest gap by as much, and far
above its event time. Load only ever adds to a host time, so the smallest of several is what the call itself
costs; work on another stream adds its whole length to every one of them.

A GPU that other processes use too (time-sliced between their contexts) is load no minimum removes: every wait
for the device can wait for a time slice, and a program that synchronises streams of its own waits more often
than the reference. Seen on an H200 shared by three verifiers: an honest kernel on a stream it joins back had a
smallest gap of 0.49-0.51 ms, the reference 0.28-0.29 ms in most calls (a time slice that falls between a call's
events moves into its event time, so the reference's smallest gap can be near zero). So the excess must also be
more than twice the reference's median gap, which measures that contention; on a quiet device that gap is a few
microseconds and changes nothing.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..sandbox.harness import HarnessVerdict
from ..sandbox.settings import Swap

REPEATS = 8
"""Re-timed calls of each program before an accusation."""
MIN_GAP_MS = 0.05
"""A gap below this (or below half the event time) is launch and synchronisation noise."""


@dataclass(frozen=True)
class Gap:
    """What one program's calls show: event times and host times (ms)."""

    device_ms: list[float]
    host_ms: list[float]

    @property
    def event_ms(self) -> float:
        return statistics.median(self.device_ms)

    @property
    def host_min_ms(self) -> float:
        return min(self.host_ms)

    @property
    def typical_gap_ms(self) -> float:
        """The median host-minus-event gap: what a wait for the device costs this program as things are."""
        return statistics.median(h - d for d, h in zip(self.device_ms, self.host_ms))

    @property
    def smallest_gap_ms(self) -> float:
        """The smallest host-minus-event gap of one call: what the host waits beyond the timed stream, at least."""
        return min(h - d for d, h in zip(self.device_ms, self.host_ms))


def _large(cand: Gap, ref_gap_ms: float) -> bool:
    return cand.event_ms < 0.5 * cand.host_min_ms and \
        cand.host_min_ms - cand.event_ms - ref_gap_ms > max(MIN_GAP_MS, 0.5 * cand.event_ms)


def suspicious(cand: Gap, ref: Gap, own_streams: bool) -> bool:
    """The timing rounds' screen: event time far below the host's (at its smallest) beyond the reference's gap. A
    candidate with streams of its own was timed settled, so its host time holds only its own call and is held to
    that directly (the reference's gap, timed unsettled, holds the L2 flush)."""
    return _large(cand, 0.0 if own_streams else ref.host_min_ms - ref.event_ms)


def persistent(cand: Gap, ref: Gap) -> bool:
    """The re-timing's decision (both timed settled): the candidate's smallest gap stays large beyond the
    reference's smallest, in every call, and by more than twice the reference's median (a device other processes
    share)."""
    ref_gap = max(0.0, ref.smallest_gap_ms)
    contention = 2 * max(0.0, ref.typical_gap_ms)
    return _large(cand, ref_gap) and cand.smallest_gap_ms - ref_gap > max(MIN_GAP_MS, 0.5 * cand.event_ms, contention)


def retime(clock, candidate, reference, repeats: int = REPEATS) -> tuple[Gap, Gap]:
    """Time the candidate and the reference (callables of no argument returning their output) back to back,
    alternating which goes first, each with the device settled before its start event."""
    got: dict[str, tuple[list[float], list[float]]] = {"cand": ([], []), "ref": ([], [])}
    for i in range(repeats):
        order = (("cand", candidate), ("ref", reference)) if i % 2 == 0 else (("ref", reference), ("cand", candidate))
        for label, fn in order:
            device_ms, host_ms, out = clock.time(fn, settled=True)
            del out
            got[label][0].append(device_ms)
            got[label][1].append(host_ms)
    return Gap(*got["cand"]), Gap(*got["ref"])


def message(cand: Gap, ref: Gap, repeats: int = REPEATS) -> str:
    return (f"the candidate's work is not on the timed stream: events see {cand.event_ms:.4f} ms, the host waits at "
            f"least {cand.host_min_ms:.4f} ms for the device in each of {repeats} calls re-timed with the device "
            f"settled (the reference, timed beside it: {ref.event_ms:.4f} vs at least {ref.host_min_ms:.4f} ms)")


def check(run, sampler, own_streams: bool, model, inputs) -> None:
    """``run`` (`kforge.verify.worker`'s, after its timing rounds) accuses the candidate only if a suspicion from the
    rounds persists when re-timed beside the reference, settled; else a note says the gap was the host's."""
    cand = Gap(sampler.samples["cand"], sampler.host["cand"])
    ref = Gap(sampler.samples["ref"], sampler.host["ref"])
    if not suspicious(cand, ref, own_streams):
        return
    with Swap(run.settings, "default", timed=True):  # warm the reference's default numerics (cuDNN's algorithms) once
        run.ref_model(*inputs)

    def baseline():
        with Swap(run.settings, "default", timed=True):
            return run.ref_model(*inputs)
    cand, ref = retime(run.clock, lambda: model(*inputs), baseline)
    if persistent(cand, ref):
        raise HarnessVerdict("cheat_detected", message(cand, ref), rule="unsynchronized_work")
    run.notes.append(f"events and host time disagreed while timing; re-timed settled {REPEATS} times beside the "
                     "reference, the gap did not persist (a busy host): no unsynchronized work")
