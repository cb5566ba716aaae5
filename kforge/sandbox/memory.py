"""Whose device memory a run ran out of.

A CUDA out-of-memory error that the device would have met with nothing else on it is the program's: the
candidate's verdict, or the problem's. One met because other processes held the memory (another job on a shared
GPU, a harness running beside kforge) is the machine's load: a verdict from it would move with the load, so the
run ends without one (`DeviceBusy`) and the verifier runs it again later (``VerifyConfig.device_busy_wait_s``).

The harness decides from what it measures itself when the error reaches it (the device's free and total memory,
and what torch's allocator holds for this process), not from the exception alone: a candidate that raises an
out-of-memory error of its own on an idle device is still judged.
"""

from __future__ import annotations

import re

from ..errors import KforgeError

CONTEXT_ALLOWANCE = 2 << 30
"""Memory this process holds outside torch's allocator (its CUDA context, kernels' modules, libraries'
workspaces): counted as its own, never as other processes'."""

_ASKED = re.compile(r"Tried to allocate ([\d.]+) (GiB|MiB|KiB|B)\b")
_UNIT = {"GiB": 1 << 30, "MiB": 1 << 20, "KiB": 1 << 10, "B": 1}


class DeviceBusy(KforgeError, RuntimeError):
    """Other processes held the device memory a verification needed: it ended without a verdict."""


def asked_bytes(message: str) -> int:
    """The allocation torch's out-of-memory message says failed (0 where it says none)."""
    m = _ASKED.search(message)
    return int(float(m.group(1)) * _UNIT[m.group(2)]) if m else 0


def held_by_others(free: int, total: int, own: int, asked: int) -> int | None:
    """Bytes other processes held when an allocation of ``asked`` failed with ``own`` held by this process, where
    that allocation would have fit on the device with nothing else on it and the others held more than it asked;
    None otherwise (the program's own demand: its verdict stands)."""
    others = total - free - own - CONTEXT_ALLOWANCE
    if own + asked + CONTEXT_ALLOWANCE > total or others < max(asked, 1 << 30):
        return None
    return others


def busy_after(torch, exc: BaseException, device) -> DeviceBusy | None:
    """A `DeviceBusy` where ``exc`` is a CUDA out-of-memory error that other processes' memory caused (measured
    now, on ``device``); None for any other error, and on other devices."""
    oom = getattr(torch, "OutOfMemoryError", None)
    if oom is None or not isinstance(exc, oom) or getattr(device, "type", None) != "cuda":
        return None
    try:
        free, total = torch.cuda.mem_get_info(device)
        own = torch.cuda.memory_reserved(device)
    except Exception:  # noqa: BLE001 - a device that cannot say is judged as before
        return None
    asked = asked_bytes(str(exc))
    others = held_by_others(free, total, own, asked)
    if others is None:
        return None
    return DeviceBusy(f"the device ran out of memory while other processes held {_gib(others)} of its "
                      f"{_gib(total)} (this run held {_gib(own)} and asked for {_gib(asked)} more): that is the "
                      "machine's load, not the candidate's or the problem's doing, so no verdict was given")


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"
