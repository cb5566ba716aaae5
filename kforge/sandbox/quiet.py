"""A GPU's quiet lock: held by a child while it makes a CUDA context or times a program.

A GPU zygote's spare makes its context while the previous child works (`kforge.sandbox.zygote`);
the lock keeps that from overlapping anyone's timing. Handlers that time take it before they start.
"""

from __future__ import annotations

import os
import time

QUIET_LOCK_ENV = "KFORGE_QUIET_LOCK"
"""Names the file whose flock a GPU's children hold while making a CUDA context or timing."""
QUIET_WAIT_S = 10.0
"""How long a spare waits for the quiet lock before making its context anyway (a leaked holder)."""


def take_quiet_lock(wait_s: float = QUIET_WAIT_S) -> int | None:
    """Take this GPU's quiet lock, held until the returned descriptor closes or the process exits.

    None off a GPU zygote. Waits at most ``wait_s``, then goes on without it: a holder that leaked (a
    process a candidate hid from the kill) must not stall the device.
    """
    path = os.environ.get(QUIET_LOCK_ENV)
    if not path:
        return None
    import fcntl
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                return fd
            time.sleep(0.005)
