"""A worker's forked children: each serves one request in a process of its own, in its own session, and is killed
with its process group when done (`kforge.sandbox.zygote` forks them and reads their answers). A GPU worker's spare
child makes its CUDA context ahead of its request, under the device's quiet lock."""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
import traceback

from . import dispatch, progress
from .memory import DeviceBusy
from .quiet import take_quiet_lock

OUTPUT_TAIL = 6000
PROFILE_ENV = "KFORGE_PROFILE_CHILD"
"""A folder: each child writes a cProfile of its request there (see `_handle`)."""


def _child(request: dict, wfd: int) -> None:
    """Runs in the forked child; never returns."""
    code = 0
    nonce = request.pop("nonce", None)  # before any candidate code runs: see the module's docstring
    progress.connect(wfd, nonce)  # progress records go into the same pipe, with the same nonce
    try:
        os.chdir(request["workdir"])
        out = os.open("output.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        os.close(devnull)
        # Inherited descriptors were closed at fork (`Child`); what is open now is the driver's, if a spare
        # made its CUDA context: closing those breaks it ("OS call failed", seen on an H200).
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        result = {"result": _handle(request), "pid": os.getpid()}  # which process served it
    except DeviceBusy as exc:  # no verdict: other processes held the device's memory (`kforge.sandbox.memory`)
        result = {"busy": str(exc), "pid": os.getpid()}
    except BaseException:  # noqa: BLE001 - report anything, including SystemExit from candidate code
        result = {"error": traceback.format_exc()[-OUTPUT_TAIL:]}
        code = 1
    result["nonce"] = nonce
    try:
        data = json.dumps(result, default=str).encode()
        view = memoryview(data)
        while view:
            n = os.write(wfd, view)
            view = view[n:]
    finally:
        os._exit(code)


def _handle(request: dict):
    """The request's handler; under cProfile when ``KFORGE_PROFILE_CHILD`` names a folder (a debugging aid:
    where a child's seconds go on a device, written as ``<kind>-<pid>.prof`` for ``python -m pstats``)."""
    folder = os.environ.get(PROFILE_ENV)
    if not folder:
        return dispatch.handle(request)
    import cProfile
    profiler = cProfile.Profile()
    try:
        return profiler.runcall(dispatch.handle, request)
    finally:
        os.makedirs(folder, exist_ok=True)
        profiler.dump_stats(os.path.join(folder, f"{request.get('kind', 'request')}-{os.getpid()}.prof"))


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def reap(pid: int, wait_s: float = 10.0) -> int | None:
    """Wait for a killed child to be gone; its wait status, or None if it is still stuck (in the driver).

    Woken by the child's pidfd the moment it exits: a verification's reply waits for this, and polling
    cost up to 50 ms of device slot each time.
    """
    deadline = time.monotonic() + wait_s
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux >= 5.3: poll, briefly at first
        pidfd = None
    delay = 0.001
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if pidfd is not None:
                select.select([pidfd], [], [], left)
            else:
                time.sleep(min(delay, left))
                delay = min(2 * delay, 0.05)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _make_context() -> None:
    """A spare's CUDA context, made under the quiet lock so no candidate is being timed meanwhile."""
    fd = take_quiet_lock()
    try:
        import torch
        torch.cuda.set_device(0)
        torch.cuda.synchronize()  # the context exists from here on
    except Exception:  # noqa: BLE001 - the request's own set-up meets the same failure and reports it
        pass
    finally:
        if fd is not None:
            os.close(fd)


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


class Child:
    """A forked child waiting for its request (with ``warm``, its CUDA context already made)."""

    def __init__(self, warm: bool):
        req_r, self.req_w = os.pipe()
        self.rfd, wfd = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            try:
                os.setsid()
                # Keep nothing of the zygote's (its protocol pipe above all), only our two pipes; done here,
                # before any CUDA context, whose driver descriptors must stay open.
                lo, hi = sorted((req_r, wfd))
                os.closerange(3, lo)
                os.closerange(lo + 1, hi)
                os.closerange(hi + 1, 1 << 16)
                if warm:
                    _make_context()
                path = b""
                while chunk := os.read(req_r, 4096):
                    path += chunk
                if not path:  # the zygote went away or discarded this spare
                    os._exit(0)
                os.close(req_r)
                with open(path.decode()) as fh:
                    request = json.load(fh)
                os.unlink(path.decode())  # the candidate's directory keeps no copy of the request
            except BaseException:  # noqa: BLE001 - never return into the zygote's loop
                os._exit(1)
            _child(request, wfd)
        os.close(req_r)
        os.close(wfd)
        self.reaped = False

    def alive(self) -> bool:
        if not self.reaped and os.waitpid(self.pid, os.WNOHANG)[0]:
            self.reaped = True
        return not self.reaped

    def send(self, request: dict) -> None:
        """Hand over the request (as a file in its work directory: a pipe write could block)."""
        path = os.path.join(request["workdir"], "request.json")
        with open(path, "w") as fh:
            json.dump(request, fh)
        os.write(self.req_w, path.encode())
        fd, self.req_w = self.req_w, -1
        os.close(fd)

    def discard(self) -> None:
        for fd in (self.req_w, self.rfd):
            if fd >= 0:
                _close(fd)
        self.req_w = self.rfd = -1
        kill_group(self.pid)
        try:  # a spare killed before its setsid() is not yet a group of its own
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if not self.reaped:
            os.waitpid(self.pid, 0)
            self.reaped = True
