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

That margin measures whatever stretches the reference's waits, and a host whose cores are oversubscribed stretches
them too: seen on an H200 beside 32 CPU hogs on 16 cores, twice the reference's median gap grew past the work (about
3 ms there) a side-stream exploit hid, and the exploit was called `correct`. So each re-timed call also reads how long the
worker's thread sat runnable without a core (`kforge.backends.clocks.RunDelay`), and the re-timing goes on (up to
`MAX_CALLS`) until each program has `REPEATS` quiet calls, preempted for less than `QUIET_MS`. The decision reads
the quiet calls alone: preemption is then out of every figure, and what stays in the margin is the device's
contention, which no run delay shows. Where the kernel keeps no run delay, or too few calls were quiet, all calls
are read, as before.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..sandbox.harness import HarnessVerdict
from ..sandbox.settings import Swap

REPEATS = 8
"""Re-timed calls of each program before an accusation (quiet ones, where the run delay is known)."""
MAX_CALLS = 4 * REPEATS
"""At most this many re-timed calls of each program while waiting for quiet ones."""
MIN_GAP_MS = 0.05
"""A gap below this (or below half the event time) is launch and synchronisation noise."""
QUIET_MS = MIN_GAP_MS / 2
"""A call whose thread waited less than this for a core is quiet: preemption alone cannot make a gap of it."""
MIN_QUIET = 3
"""Fewest quiet calls of each program for the decision to read the quiet calls alone."""


@dataclass(frozen=True)
class Gap:
    """What one program's calls show: event times and host times (ms)."""

    device_ms: list[float]
    host_ms: list[float]
    delay_ms: list[float | None] | None = None
    """Per call, how long the timing thread waited for a core (None: not known)."""

    def quiet(self) -> Gap:
        """The calls the host was not preempted in."""
        keep = [i for i, d in enumerate(self.delay_ms or []) if d is not None and d < QUIET_MS]
        return Gap([self.device_ms[i] for i in keep], [self.host_ms[i] for i in keep], [self.delay_ms[i] for i in keep])

    @property
    def calls(self) -> int:
        return len(self.host_ms)

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


def quiet_pair(cand: Gap, ref: Gap) -> tuple[Gap, Gap]:
    """The quiet calls of both, where each has at least `MIN_QUIET`; else all calls of both."""
    qc, qr = cand.quiet(), ref.quiet()
    return (qc, qr) if min(qc.calls, qr.calls) >= MIN_QUIET else (cand, ref)


def persistent(cand: Gap, ref: Gap) -> bool:
    """The re-timing's decision (both timed settled, read on their quiet calls where there are enough): the
    candidate's smallest gap stays large beyond the reference's smallest, in every call, and by more than twice the
    reference's median (a device other processes share)."""
    cand, ref = quiet_pair(cand, ref)
    ref_gap = max(0.0, ref.smallest_gap_ms)
    contention = 2 * max(0.0, ref.typical_gap_ms)
    return _large(cand, ref_gap) and cand.smallest_gap_ms - ref_gap > max(MIN_GAP_MS, 0.5 * cand.event_ms, contention)


def retime(clock, candidate, reference, repeats: int = REPEATS, max_calls: int = MAX_CALLS) -> tuple[Gap, Gap]:
    """Time the candidate and the reference (callables of no argument returning their output) back to back,
    alternating which goes first, each with the device settled before its start event; with the clock's run delay
    read around each call, until each has ``repeats`` quiet calls (at most ``max_calls`` each)."""
    run_delay = getattr(getattr(clock, "run_delay", None), "ms", lambda: None)
    known = run_delay() is not None
    got: dict[str, Gap] = {"cand": Gap([], [], []), "ref": Gap([], [], [])}
    for i in range(max_calls):
        order = (("cand", candidate), ("ref", reference)) if i % 2 == 0 else (("ref", reference), ("cand", candidate))
        for label, fn in order:
            before = run_delay()
            device_ms, host_ms, out = clock.time(fn, settled=True)
            after = run_delay()
            del out
            gap = got[label]
            gap.device_ms.append(device_ms)
            gap.host_ms.append(host_ms)
            gap.delay_ms.append(None if before is None or after is None else after - before)
        if i + 1 >= repeats and (not known or min(g.quiet().calls for g in got.values()) >= repeats):
            break
    return got["cand"], got["ref"]


def message(cand: Gap, ref: Gap) -> str:
    used, used_ref = quiet_pair(cand, ref)
    which = f"{used.calls} of {cand.calls} calls re-timed" + (", the quiet ones," if used is not cand else "")
    return (f"the candidate's work is not on the timed stream: events see {used.event_ms:.4f} ms, the host waits at "
            f"least {used.host_min_ms:.4f} ms for the device in each of {which} with the device settled (the "
            f"reference, timed beside it: {used_ref.event_ms:.4f} vs at least {used_ref.host_min_ms:.4f} ms)")


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
    used, _ = quiet_pair(cand, ref)
    calls = f"{used.calls} quiet calls of {cand.calls}" if used is not cand else f"{cand.calls} calls"
    run.notes.append(f"events and host time disagreed while timing; re-timed settled beside the reference "
                     f"({calls}), the gap did not persist (a busy host): no unsynchronized work")
