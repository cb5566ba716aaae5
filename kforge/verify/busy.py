"""Runs that ended without a verdict because other processes held the device's memory (`kforge.sandbox.memory`):
tried again, on another device first where there is one, until ``VerifyConfig.device_busy_wait_s`` has passed;
then the verification raises `DeviceBusy` (no verdict: `kforge eval` writes an error row that a rerun tries again,
`kforge verify` says so and exits 1)."""

from __future__ import annotations

import logging
import time
from typing import Callable

from ..sandbox.memory import DeviceBusy
from ..sandbox.protocol import Reply

log = logging.getLogger(__name__)

FIRST_PAUSE_S = 5.0
"""The pause before the first try again; each later one doubles, up to `MAX_PAUSE_S`."""
MAX_PAUSE_S = 60.0


def retry_while_busy(ask: Callable[[list[str]], Reply], kinds: list[str], wait_s: float,
                     sleep: Callable[[float], None] = time.sleep,
                     clock: Callable[[], float] = time.monotonic) -> Reply:
    """``ask(kinds)``'s reply, asked again while it is busy (`Reply.busy`) and ``wait_s`` allows another pause;
    raises `DeviceBusy`, saying how often and how long it tried, once it does not."""
    started, pause, tries = clock(), FIRST_PAUSE_S, 1
    reply = ask(kinds)
    while reply.busy:
        waited = clock() - started
        if waited + pause > wait_s:
            raise DeviceBusy(f"{reply.busy}; tried {tries} time(s) over {waited:.0f} s "
                             f"(verify.device_busy_wait_s={wait_s:g})")
        log.warning("kforge: %s; trying again in %.0f s", reply.busy, pause)
        sleep(pause)
        pause = min(2 * pause, MAX_PAUSE_S)
        reply = ask([k for k in kinds if k != reply.slot] or kinds)
        tries += 1
    return reply
