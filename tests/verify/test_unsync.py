"""``unsynchronized_work`` is decided from a gap that persists when re-timed beside the reference, never from a
busy host's stretched host times."""

import itertools

from kforge.verify.unsync import REPEATS, Gap, persistent, retime, suspicious


def gap(event_ms: float, host_ms: list[float]) -> Gap:
    return Gap([event_ms] * len(host_ms), host_ms)


def test_a_busy_host_raises_a_suspicion_that_retiming_clears():
    # Issue 41: 0.0204 ms of events, the host waiting >= 0.1 ms while 16 builds ran beside the worker.
    busy_cand, busy_ref = gap(0.0204, [0.10, 0.12, 0.31]), gap(0.5, [0.52, 0.50, 0.9])
    assert suspicious(busy_cand, busy_ref, own_streams=False)
    # Re-timed settled, back to back: the host is still busy now and then, but some calls get a quiet moment.
    cand = gap(0.0204, [0.35, 0.031, 0.09, 0.028, 0.6, 0.03, 0.2, 0.04])
    ref = gap(0.5, [0.9, 0.51, 0.52, 0.7, 0.51, 0.8, 0.52, 0.53])
    assert not persistent(cand, ref)


def test_work_on_a_side_stream_shows_in_every_call():
    side = gap(0.02, [1.52, 1.50, 1.71, 1.51, 2.3, 1.50, 1.6, 1.55])  # the kernel's 1.5 ms escape every event
    ref = gap(1.5, [1.53, 1.52, 1.9, 1.51, 1.52, 1.6, 1.52, 1.53])
    assert suspicious(side, ref, own_streams=True) and persistent(side, ref)


def test_a_gap_the_reference_shows_too_is_the_hosts():
    cand = gap(0.02, [0.3, 0.31, 0.3, 0.32])  # e.g. a host whose synchronize costs 0.28 ms for everyone
    ref = gap(0.5, [0.78, 0.79, 0.8, 0.78])
    assert not persistent(cand, ref)


def test_a_device_other_processes_share_is_not_an_accusation():
    # Measured on an H200 that three verifiers shared: an honest kernel on a stream it joins back waits for a time
    # slice at each of its stream waits, the reference at its one launch; neither leaves work behind.
    honest = gap(0.0109, [0.5249, 0.61, 0.55, 0.71, 0.5312, 0.58, 0.66, 0.5401])
    ref = gap(0.0076, [0.2963, 0.35, 0.31, 0.42, 0.30, 0.33, 0.38, 0.2990])
    assert suspicious(honest, ref, own_streams=True) and not persistent(honest, ref)
    # A time slice that fell between one reference call's events: its gap is near zero, the others' are not.
    sliced = Gap([0.0076] * 7 + [0.30], [0.2963, 0.35, 0.31, 0.42, 0.30, 0.33, 0.38, 0.3102])
    assert sliced.smallest_gap_ms < 0.02 and not persistent(honest, sliced)
    # Hidden work of a millisecond on that same device still shows: its whole length is in every call.
    side = gap(0.0109, [1.52 + d for d in (0.5249, 0.61, 0.55, 0.71, 0.5312, 0.58, 0.66, 0.5401)])
    assert persistent(side, ref) and persistent(side, sliced)


class ScriptedClock:
    """A clock whose host times are the event times plus a scripted delay; records what was timed, and how."""

    def __init__(self, event_ms: dict, delays: dict):
        self.event_ms, self.delays, self.calls = event_ms, {k: itertools.cycle(v) for k, v in delays.items()}, []

    def time(self, fn, settled=False):
        label = fn()
        self.calls.append((label, settled))
        return self.event_ms[label], self.event_ms[label] + next(self.delays[label]), label


def test_retime_alternates_and_settles_every_call():
    clock = ScriptedClock({"cand": 0.02, "ref": 0.5}, {"cand": [0.4, 0.01], "ref": [0.02, 0.3]})
    cand, ref = retime(clock, lambda: "cand", lambda: "ref")
    assert len(cand.host_ms) == len(ref.host_ms) == REPEATS
    assert all(settled for _, settled in clock.calls)
    assert [c for c, _ in clock.calls[:4]] == ["cand", "ref", "ref", "cand"]
    assert cand.smallest_gap_ms < 0.02 and not persistent(cand, ref)
