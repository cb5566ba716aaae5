"""A worker process as the pool holds it: the long-lived fork server (`kforge.sandbox.zygote`) it started, or a
resident one (`kforge.sandbox.resident`) it found, and the line protocol both speak: one JSON request per line,
one JSON reply per line."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..errors import KforgeError

ZYGOTE = [sys.executable, "-m", "kforge.sandbox.zygote"]
"""The command that starts a worker process."""


CLOSE_GRACE_S = 15.0
"""How long a closing pool gives a busy zygote to stop its child (reaping takes up to 10 s) before killing it."""


class WorkerLost(KforgeError, RuntimeError):
    """The slot's process died while serving a request (it has been replaced); ``kind`` names the slot."""

    kind: str = ""


class WorkerProcess:
    """The pool's handle on one long-lived worker process (a `kforge.sandbox.zygote`, the fork server) and its
    line protocol."""

    _busy = False  # a request in flight

    def __init__(self, label: str, env: dict[str, str], root: Path, start_timeout: float = 300.0):
        self.label = label
        self.log_path = root / f"{label}.log"
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(ZYGOTE, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._log, env=env, cwd=str(root),
                                     start_new_session=True)
        self._buf = b""
        self.kind = ""
        self._handshake(start_timeout)

    def _handshake(self, timeout: float) -> None:
        """Read the worker's first line, which says it is ready and what it preloaded."""
        ready = self._read_line(timeout)
        hello = json.loads(ready) if ready else {}
        if not hello.get("ready"):
            self.close()
            raise WorkerLost(f"worker {self.label} did not start: {self.log_tail()}")
        self.preload: list[str] = hello.get("preload", [])  # modules its children start with
        self.pid: int | None = hello.get("pid")
        """The worker's process (a resident worker outlives the pool that started it)."""

    def _fd(self) -> int:
        return self.proc.stdout.fileno()

    def _send(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def _read_line(self, timeout: float) -> str | None:
        fd = self._fd()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if ready:
                data = os.read(fd, 1 << 16)
                if not data:
                    return None
                self._buf += data
            elif not self.alive():
                return None
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode()

    def request(self, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
        try:
            self._send((json.dumps(payload) + "\n").encode())
        except (BrokenPipeError, OSError):
            raise WorkerLost(f"worker {self.label} is gone: {self.log_tail()}") from None
        # The zygote enforces the timeout itself; the margin covers killing and reaping.
        self._busy = True
        try:
            line = self._read_line(timeout + 60)
        finally:
            self._busy = False
        if line is None:
            raise WorkerLost(f"worker {self.label} stopped answering: {self.log_tail()}")
        return json.loads(line)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self._busy and self.proc.poll() is None:
            # A request in flight (the pool closed by Ctrl-C, say): its child runs in a session of its own, which
            # killing the zygote would leave at work. Hanging up makes the zygote stop it and end.
            try:
                self.proc.stdin.close()
                self.proc.wait(CLOSE_GRACE_S)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        self.proc.wait()
        for fh in (self.proc.stdin, self.proc.stdout):
            try:
                fh.close()
            except OSError:
                pass
        self._log.close()


class ResidentWorker(WorkerProcess):
    """The pool's handle on a resident worker (`kforge.sandbox.resident`): the same line protocol over a Unix socket;
    closing it leaves the worker running for the next pool."""

    def __init__(self, label: str, sock, log_path: Path, timeout: float):
        self.label, self.log_path, self._sock = label, log_path, sock
        self._buf = b""
        self.kind = ""
        self._handshake(timeout)

    def _fd(self) -> int:
        return self._sock.fileno()

    def _send(self, data: bytes) -> None:
        self._sock.sendall(data)

    def alive(self) -> bool:
        return self._sock.fileno() >= 0

    def close(self) -> None:
        self._sock.close()
