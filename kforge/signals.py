"""A scheduler's SIGTERM taken as a Ctrl-C, by the commands that keep what they finished when interrupted."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager


@contextmanager
def sigterm_as_interrupt():
    """Within it, SIGTERM raises KeyboardInterrupt in the main thread, so the command ends as a Ctrl-C ends it: what
    it finished kept (a job's problems in MLflow, an evaluation's rows), its workers closed, a line saying so. On
    another thread, nothing changes (signals reach the main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
