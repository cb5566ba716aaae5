"""A worker that outlives its pool, for one-shot commands: the next ``kforge verify --resident`` finds its torch
already imported and its spare's CUDA context made, instead of waiting seconds for a new worker to start.

A resident worker is a zygote (`kforge.sandbox.zygote`) started in a session of its own that serves one pool at a
time over a Unix socket instead of its stdin, and exits after ``idle_s`` seconds with no pool connected. Its socket
lives in a directory only this user can enter (``$TMPDIR/kforge-UID``, mode 0700), named after everything that
makes a worker what it is: its environment (GPU, preload level, request kinds, ...), the Python executable and
kforge's own code (the newest modification time of its modules), so a pool never talks to a worker made otherwise.
A pool that finds the resident busy with another pool starts a private worker as it always did; so does one that
cannot make the directory safely. Every request still runs in a child of its own, forked for it: the resident
keeps nothing of one candidate for the next (`kforge.sandbox.zygote`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import select
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, TextIO

from .. import PACKAGE_DIR

SOCKET_ENV = "KFORGE_RESIDENT_SOCKET"
"""Where a zygote started as a resident worker listens (set only for such a zygote)."""
IDLE_ENV = "KFORGE_RESIDENT_IDLE_S"
"""How long a resident worker waits for a pool before it exits."""
BUSY_WAIT_S = 1.0
"""How long a pool waits for a resident to greet it before taking it as busy and starting its own."""


def directory() -> Path | None:
    """The user's directory for resident workers' sockets, made private; None where it cannot be made so."""
    path = Path(tempfile.gettempdir()) / f"kforge-{os.getuid()}"
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        st = path.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None  # someone else's, or open to others: no resident worker rather than a shared socket
    return path


def code_stamp() -> str:
    """kforge's code as it is now on disk: a resident worker started from other code is not used."""
    newest, count = 0, 0
    for f in PACKAGE_DIR.rglob("*.py"):
        with contextlib.suppress(OSError):
            newest, count = max(newest, f.stat().st_mtime_ns), count + 1
    return f"{newest}:{count}"


# What a shell changes from one command to the next, and no worker depends on.
VOLATILE = frozenset({"PWD", "OLDPWD", "SHLVL", "_", "COLUMNS", "LINES"})


def key(env: dict[str, str], label: str) -> str:
    what = [sorted((k, v) for k, v in env.items() if k not in VOLATILE), sys.executable, code_stamp(), label]
    return hashlib.sha256(json.dumps(what).encode()).hexdigest()[:20]


def serve(path: str, idle_s: float, hello: str, handle: Callable[[TextIO, TextIO], None]) -> None:
    """The zygote's side: greet and serve one pool at a time on a Unix socket; return after ``idle_s`` with none."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    os.chmod(path, 0o600)
    srv.listen(16)
    try:
        while select.select([srv], [], [], idle_s)[0]:
            conn, _ = srv.accept()
            try:
                with conn.makefile("r", encoding="utf-8") as rf, conn.makefile("w", encoding="utf-8") as wf:
                    wf.write(hello)
                    wf.flush()
                    handle(rf, wf)
            except OSError:  # the pool went away mid-line: wait for the next
                pass
            finally:
                conn.close()
    finally:
        srv.close()
        with contextlib.suppress(OSError):
            os.unlink(path)


def _connect(path: Path) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
        return sock
    except OSError:
        sock.close()
        return None


def connect(command: list[str], label: str, env: dict[str, str], idle_s: float, start_timeout: float, make):
    """A pool's side: the resident worker for this slot, started (``command``, the zygote's) if there is none; None when there is one but it
    serves another pool, or none can be had (the pool then starts a private worker). ``make(sock, log_path,
    timeout)`` wraps a connected socket as the pool's worker handle, or raises (the pool's ``WorkerLost``, a
    RuntimeError) when no greeting comes."""
    base = directory()
    if base is None:
        return None
    k = key(env, label)
    path, log = base / f"{k}.sock", base / f"{k}.log"
    with open(base / f"{k}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one pool starts it; the others wait and connect
        sock = _connect(path)
        if sock is not None:
            try:
                return make(sock, log, BUSY_WAIT_S)
            except RuntimeError:  # no greeting: it serves another pool
                return None
        with open(log, "ab") as out:
            proc = subprocess.Popen(command, env={
                **env, SOCKET_ENV: str(path), IDLE_ENV: str(idle_s)}, cwd=str(base), stdin=subprocess.DEVNULL,
                stdout=out, stderr=out, start_new_session=True)
        deadline = time.monotonic() + start_timeout
        while time.monotonic() < deadline and proc.poll() is None:
            if (sock := _connect(path)) is not None:
                return make(sock, log, max(1.0, deadline - time.monotonic()))
            time.sleep(0.05)
        return None
