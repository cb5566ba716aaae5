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

Protocol: one JSON request per line on stdin, one JSON reply per line on the original stdout. A caller that
hangs up while a child works (its process killed, the pool closed) has the child stopped then, not at its
timeout; a private zygote then ends, a resident one waits for the next pool.

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
from .children import OUTPUT_TAIL, PROFILE_ENV, Child, kill_group, reap  # noqa: F401 - PROFILE_ENV: tests
from .quiet import QUIET_LOCK_ENV

#: What the harness's profilers print (USDT probe notices, Kineto's stages): not the candidate's output.
PROFILER_NOISE = re.compile(r"^.*(?:\bUSDT\b|^STAGE:).*\n?", re.MULTILINE)
#: A caller that hung up: a pipe's writers all closed, a socket's peer gone.
CALLER_GONE = select.POLLHUP | select.POLLERR | select.POLLNVAL | getattr(select, "POLLRDHUP", 0)
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
    inherits (`Child`), but NVML's copied state still names those descriptor numbers, and torch asks
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


def _keeps_spare() -> bool:
    return os.environ.get("CUDA_VISIBLE_DEVICES", "") not in ("", "-1") and os.environ.get(SPARE_ENV, "1") != "0"


_spare: Child | None = None


def run_forked(request: dict, caller: int | None = None) -> dict:
    """Fork a child for one request (or take the spare), enforce its timeout, and describe how it ended.
    ``caller``: the descriptor the request came on; should the caller hang up meanwhile (a pool killed, say, by
    its job's time limit), the child is stopped then rather than at its timeout, minutes of a GPU later."""
    global _spare
    timeout = float(request.get("timeout", 300))
    child, _spare = _spare, None
    if child is not None and not child.alive():
        child.discard()
        child = None
    child = child or Child(warm=False)
    start = time.monotonic()
    nonce = secrets.token_hex(16)
    try:
        child.send(dict(request, nonce=nonce))
    except OSError:  # the spare died between the check and now
        child.discard()
        child = Child(warm=False)
        child.send(dict(request, nonce=nonce))
    if _keeps_spare():
        try:
            _spare = Child(warm=True)
        except OSError:  # no process to spare now (a fork limit): the next request forks its own
            _spare = None
    pid, rfd = child.pid, child.rfd
    chunks: list[bytes] = []
    timed_out = False
    deadline = start + timeout
    watch = select.poll()
    watch.register(rfd, select.POLLIN)
    if caller is not None:  # only its hang-up counts: the caller sends nothing while it waits for the reply
        watch.register(caller, CALLER_GONE)
    abandoned = False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        events = dict(watch.poll(min(left, 1.0) * 1000))
        if caller is not None and events.get(caller, 0) & CALLER_GONE:
            abandoned = True  # killed, Ctrl-C'd or closed: nobody will read the verdict, so stop the GPU work now
            break
        if events.get(rfd):
            data = os.read(rfd, 1 << 16)
            if not data:
                break
            chunks.append(data)
    # Whatever happened, nothing the candidate started may outlive it.
    kill_group(pid)
    status = reap(pid)
    os.close(rfd)
    reply: dict = {"wall_s": time.monotonic() - start, "timed_out": timed_out}
    if abandoned:
        reply["abandoned"] = True
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
        _spare = Child(warm=True)  # the first request finds its context made
    hello = json.dumps({"ready": True, "pid": os.getpid(), "preload": list(PRELOAD_LEVELS[level])}) + "\n"
    if os.environ.get(resident.SOCKET_ENV):  # a resident worker: pools connect to it (`kforge.sandbox.resident`)
        resident.serve(os.environ[resident.SOCKET_ENV], float(os.environ.get(resident.IDLE_ENV, "600")), hello, _serve)
        return
    proto.write(hello)
    _serve(sys.stdin, proto)


def _serve(lines, out) -> None:
    """One request per line in, one reply per line out, until the caller closes its end."""
    try:
        caller = lines.fileno()
    except (AttributeError, OSError, ValueError):  # not a real descriptor (a test's list of lines)
        caller = None
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            request = json.loads(line)
            reply = run_forked(request, caller)
        except Exception:  # noqa: BLE001 - keep serving
            reply = {"error": traceback.format_exc()[-OUTPUT_TAIL:]}
        if reply.get("abandoned"):  # nobody to answer: a private worker ends, a resident one awaits the next pool
            return
        out.write(json.dumps(reply, default=str) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
