"""A long-lived worker process per device that forks one child per candidate.

Started by `kforge.sandbox.pool` with a scrubbed environment (no API keys) and, for a GPU, a
``CUDA_VISIBLE_DEVICES`` of one device. It imports torch once but never touches CUDA itself, so each
forked child starts warm (no interpreter or torch start-up) yet with a fresh CUDA context and a clean
Python state. The child runs in its own session (process group) inside a per-candidate directory;
on timeout the whole group is killed, and after every candidate any process it left behind is too.

A GPU zygote keeps one child ahead: forked as soon as the previous one starts, it makes its CUDA context
(0.3-0.4 s on an H200, the largest part of a short verification) while the previous one works, then waits
for its request. It runs no candidate code until then, so each candidate still gets a process and a context
of its own. Making a context never overlaps a candidate's timing: both hold the device's quiet lock
(`kforge.sandbox.quiet`), which a handler takes before timing.

What a child does with its request is looked up by the request's kind (`kforge.sandbox.dispatch`).

Protocol: one JSON request per line on stdin, one JSON reply per line on the original stdout.

A child answers through a pipe that candidate code, running in the same process, could write to as well.
So each request carries a fresh nonce, which the child takes out of the request before the candidate is
imported and puts into its answer; an answer without it (or a second answer) is reported as ``forged``.
Candidate code could still find the nonce by reading the harness's frames, which the static rules deny
(`introspection`); the nonce stops a candidate that only writes to a pipe.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import select
import signal
import sys
import time
import traceback

from . import dispatch, progress, resident
from .quiet import QUIET_LOCK_ENV, take_quiet_lock

OUTPUT_TAIL = 6000
#: What the harness's profilers print (USDT probe notices, Kineto's stages): not the candidate's output.
PROFILER_NOISE = re.compile(r"^.*(?:\bUSDT\b|^STAGE:).*\n?", re.MULTILINE)
SPARE_ENV = "KFORGE_ZYGOTE_SPARE"
"""``0`` stops a GPU zygote keeping a spare (the pool's ``spare=False``, Hydra's ``workers.spare=false``)."""


# What a zygote imports before forking, most first. A GPU zygote falls back down this list when a level
# leaves its forked children unable to use CUDA (see _preload). A pool started for one verification
# begins at LIGHT_LEVEL: the compiler stack costs seconds to import and one candidate may never need it.
PRELOAD_LEVELS = (("torch.utils.cpp_extension", "torch._dynamo", "torch._inductor.compile_fx", "triton"),
                  ("torch.utils.cpp_extension", "torch._dynamo"), ("torch.utils.cpp_extension",), ())
LIGHT_LEVEL = 2
PRELOAD_ENV = "KFORGE_ZYGOTE_PRELOAD"
"""The zygote's first preload level (an index into ``PRELOAD_LEVELS``)."""
PROFILE_ENV = "KFORGE_PROFILE_CHILD"
"""A folder: each child writes a cProfile of its request there (see `_handle`)."""


def _preload(level: int) -> bool:
    """Import what every child needs once; False when that left forked children unable to use CUDA."""
    import importlib

    import torch  # the point is to have it imported before forking
    dispatch.preload()  # the request handlers' modules, so no child imports them
    for name in PRELOAD_LEVELS[level]:  # ~2.5 s a child would otherwise spend importing the compiler
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - optional (triton), or the compile reference reports its failure
            pass
    if os.environ.get("CUDA_VISIBLE_DEVICES", "") in ("", "-1"):
        return True
    release_nvml()
    # cpp_extension and inductor call torch.cuda.is_available() at import. Unless NVML answers it (the
    # pool sets PYTORCH_NVML_BASED_CUDA_CHECK=1), the CUDA runtime does, and every later fork then fails
    # with "Cannot re-initialize CUDA in forked subprocess" while torch.cuda stays uninitialised here:
    # only a forked child can tell. One probe fork settles it, whoever started this process.
    if torch.cuda.is_initialized():
        return False
    pid = os.fork()
    if pid == 0:
        os._exit(1 if torch.cuda._is_in_bad_fork() else 0)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def release_nvml() -> None:
    """Shut NVML down before forking, so children do not inherit its open device files.

    torch's NVML-based availability check (``PYTORCH_NVML_BASED_CUDA_CHECK``, set by the pool) calls
    ``nvmlInit`` at import of the compiler stack and never ``nvmlShutdown``. A child closes what it
    inherits (`_Child`), but NVML's copied state still names those descriptor numbers, and torch asks
    NVML for the device count again in the child: it then talks to whatever the child opened under the
    same numbers. Seen on 2x H200: a spare holding one more file open than usual while making its
    context could not use the GPU ("invalid argument to exchangeDevice").
    """
    import ctypes
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:  # no NVML, so nothing of it to inherit
        return
    for _ in range(256):  # one shutdown per init: torch inits on every check and never shuts down
        if nvml.nvmlShutdown() != 0:  # NVML_ERROR_UNINITIALIZED: all released
            break


def _read_tail(path: str, n: int = OUTPUT_TAIL) -> str:
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - n))
            data = PROFILER_NOISE.sub("", fh.read().decode("utf-8", "replace"))
        return data if size <= n else "..." + data  # its start was cut
    except OSError:
        return ""


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
        # Inherited descriptors were closed at fork (`_Child`); what is open now is the driver's, if a spare
        # made its CUDA context: closing those breaks it ("OS call failed", seen on an H200).
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        result = {"result": _handle(request), "pid": os.getpid()}  # which process served it
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


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(pid: int, wait_s: float = 10.0) -> int | None:
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


class _Child:
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
        _kill_group(self.pid)
        try:  # a spare killed before its setsid() is not yet a group of its own
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if not self.reaped:
            os.waitpid(self.pid, 0)
            self.reaped = True


def _keeps_spare() -> bool:
    return os.environ.get("CUDA_VISIBLE_DEVICES", "") not in ("", "-1") and os.environ.get(SPARE_ENV, "1") != "0"


_spare: _Child | None = None


def run_forked(request: dict) -> dict:
    """Fork a child for one request (or take the spare), enforce its timeout, and describe how it ended."""
    global _spare
    timeout = float(request.get("timeout", 300))
    child, _spare = _spare, None
    if child is not None and not child.alive():
        child.discard()
        child = None
    child = child or _Child(warm=False)
    start = time.monotonic()
    nonce = secrets.token_hex(16)
    try:
        child.send(dict(request, nonce=nonce))
    except OSError:  # the spare died between the check and now
        child.discard()
        child = _Child(warm=False)
        child.send(dict(request, nonce=nonce))
    if _keeps_spare():
        try:
            _spare = _Child(warm=True)
        except OSError:  # no process to spare now (a fork limit): the next request forks its own
            _spare = None
    pid, rfd = child.pid, child.rfd
    chunks: list[bytes] = []
    timed_out = False
    deadline = start + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        ready, _, _ = select.select([rfd], [], [], min(left, 1.0))
        if ready:
            data = os.read(rfd, 1 << 16)
            if not data:
                break
            chunks.append(data)
    # Whatever happened, nothing the candidate started may outlive it.
    _kill_group(pid)
    status = _reap(pid)
    os.close(rfd)
    reply: dict = {"wall_s": time.monotonic() - start, "timed_out": timed_out}
    workdir = request["workdir"]
    reply["output_tail"] = _read_tail(os.path.join(workdir, "output.txt"))
    try:
        with open(os.path.join(workdir, "phase")) as fh:
            reply["phase"] = fh.read().strip()
    except OSError:
        reply["phase"] = None
    if status is not None and os.WIFSIGNALED(status) and not timed_out:
        reply["signal"] = signal.Signals(os.WTERMSIG(status)).name
    elif status is not None and os.WIFEXITED(status):
        reply["exit_code"] = os.WEXITSTATUS(status)
    if chunks:  # a child stopped at its timeout still says what it had established (`kforge.sandbox.progress`)
        reply.update(_answer(b"".join(chunks), nonce, timed_out))
    return reply


def _answer(data: bytes, nonce: str, timed_out: bool = False) -> dict:
    """The child's answer, checked: its progress records and one JSON object, all carrying ``nonce``; or ``forged``
    / ``error``. A child that timed out has no answer, only its progress."""
    text, objects = data.decode("utf-8", "replace").strip(), []
    decoder, pos = json.JSONDecoder(), 0
    try:
        while pos < len(text):
            obj, end = decoder.raw_decode(text, pos)
            objects.append(obj)
            pos = len(text) - len(text[end:].lstrip())
    except ValueError:
        if not objects:
            return {} if timed_out else {"error": "the worker wrote an unreadable result"}
        objects.append(None)  # something after an answer that is not one: not the harness's doing
    records, answers, strangers = [], [], 0
    for obj in objects:
        if isinstance(obj, dict) and obj.get("nonce") == nonce:
            obj.pop("nonce")
            (records if set(obj) == {"progress"} and isinstance(obj["progress"], dict) else answers).append(obj)
        else:
            strangers += 1
    out: dict = {"progress": progress.merge([r["progress"] for r in records])} if records else {}
    if strangers or len(answers) > 1:
        out["forged"] = f"{len(answers) + strangers} answer(s) in the reply pipe, not the one the harness writes"
    elif answers and not timed_out:  # none: the child died or was stopped before answering (its status says which)
        out.update(answers[0])
    return out


def main() -> None:
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything printed by imports goes to the log, never into the protocol
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in the caller's terminal is the caller's to handle
    level = int(os.environ.get(PRELOAD_ENV, "0"))
    if not _preload(level) and level + 1 < len(PRELOAD_LEVELS):
        # Start again importing less: slower children, but children that can use the GPU.
        print(f"kforge zygote: preload level {level} poisons CUDA in forked children; trying {level + 1}",
              file=sys.stderr)
        os.dup2(proto.fileno(), 1)
        os.environ[PRELOAD_ENV] = str(level + 1)
        os.execv(sys.executable, [sys.executable, "-m", "kforge.sandbox.zygote"])
    global _spare
    if _keeps_spare():
        os.environ[QUIET_LOCK_ENV] = os.path.abspath(f".quiet-{os.getpid()}.lock")
        _spare = _Child(warm=True)  # the first request finds its context made
    hello = json.dumps({"ready": True, "pid": os.getpid(), "preload": list(PRELOAD_LEVELS[level])}) + "\n"
    if os.environ.get(resident.SOCKET_ENV):  # a resident worker: pools connect to it (`kforge.sandbox.resident`)
        resident.serve(os.environ[resident.SOCKET_ENV], float(os.environ.get(resident.IDLE_ENV, "600")), hello, _serve)
        return
    proto.write(hello)
    _serve(sys.stdin, proto)


def _serve(lines, out) -> None:
    """One request per line in, one reply per line out, until the caller closes its end."""
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            request = json.loads(line)
            reply = run_forked(request)
        except Exception:  # noqa: BLE001 - keep serving
            reply = {"error": traceback.format_exc()[-OUTPUT_TAIL:]}
        out.write(json.dumps(reply, default=str) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
