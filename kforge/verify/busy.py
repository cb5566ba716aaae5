"""Runs that ended without a verdict because other processes held the device's memory (`kforge.sandbox.memory`):
tried again, on another device first where there is one, until ``VerifyConfig.device_busy_wait_s`` has passed;
then the verification raises `DeviceBusy` (no verdict: `kforge eval` writes an error row that a rerun tries again,
`kforge verify` says so and exits 1)."""

from __future__ import annotations

import logging
import random
import time
from typing import Callable

from ..sandbox.memory import DeviceBusy
from ..sandbox.protocol import Reply

log = logging.getLogger(__name__)

FIRST_PAUSE_S = 5.0
"""The pause before the first try again; each later one doubles, up to `MAX_PAUSE_S`, and each is stretched by up
to half at random, so that verifiers sharing a GPU, and running out of memory because of each other, do not try
again in step."""
MAX_PAUSE_S = 60.0


def retry_while_busy(ask: Callable[[list[str]], Reply], kinds: list[str], wait_s: float,
                     sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
                     jitter: Callable[[], float] = random.random) -> Reply:
    """``ask(kinds)``'s reply, asked again while it is busy (`Reply.busy`) and ``wait_s`` allows another pause;
    raises `DeviceBusy`, saying how often and how long it tried, once it does not."""
    started, pause, tries = clock(), FIRST_PAUSE_S, 1
    reply = ask(kinds)
    while reply.busy:
        waited, this = clock() - started, pause * (1 + jitter() / 2)
        if waited + this > wait_s:
            raise DeviceBusy(f"{reply.busy}; tried {tries} time(s) over {waited:.0f} s "
                             f"(verify.device_busy_wait_s, --busy-wait on the command line: {wait_s:g} s)")
        log.warning("kforge: %s; trying again in %.0f s", reply.busy, this)
        sleep(this)
        pause = min(2 * pause, MAX_PAUSE_S)
        reply = ask([k for k in kinds if k != reply.slot] or kinds)
        tries += 1
    return reply
