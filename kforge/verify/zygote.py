"""A long-lived worker process per device that forks one child per candidate.

Started by `kforge.verify.pool` with a scrubbed environment (no API keys) and, for a GPU, a
``CUDA_VISIBLE_DEVICES`` of one device. It imports torch once but never touches CUDA itself, so each
forked child starts warm (no interpreter or torch start-up) yet with a fresh CUDA context and a clean
Python state. The child runs in its own session (process group) inside a per-candidate directory;
on timeout the whole group is killed, and after every candidate any process it left behind is too.

Protocol: one JSON request per line on stdin, one JSON reply per line on the original stdout.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
import traceback

OUTPUT_TAIL = 6000


# What a zygote imports before forking, most first. A GPU zygote falls back down this list when a level
# leaves its forked children unable to use CUDA (see _preload).
PRELOAD_LEVELS = (("torch.utils.cpp_extension", "torch._dynamo", "torch._inductor.compile_fx", "triton"),
                  ("torch.utils.cpp_extension", "torch._dynamo"), ())


def _preload(level: int) -> bool:
    """Import what every child needs once; False when that left forked children unable to use CUDA."""
    import importlib

    import torch  # the point is to have it imported before forking
    from . import worker  # noqa: F401
    for name in PRELOAD_LEVELS[level]:  # ~2.5 s a child would otherwise spend importing the compiler
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - optional (triton), or the compile reference reports its failure
            pass
    if os.environ.get("CUDA_VISIBLE_DEVICES", "") in ("", "-1"):
        return True
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


def _read_tail(path: str, n: int = OUTPUT_TAIL) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - n))
            data = fh.read().decode("utf-8", "replace")
        return data if size <= n else "..." + data
    except OSError:
        return ""


def _child(request: dict, wfd: int) -> None:
    """Runs in the forked child; never returns."""
    code = 0
    try:
        os.setsid()
        os.chdir(request["workdir"])
        out = os.open("output.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        # Close everything inherited except the result pipe: the zygote's protocol channel above all.
        os.closerange(3, wfd)
        os.closerange(wfd + 1, 1 << 16)
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        from .worker import handle
        result = {"result": handle(request)}
    except BaseException:  # noqa: BLE001 - report anything, including SystemExit from candidate code
        result = {"error": traceback.format_exc()[-OUTPUT_TAIL:]}
        code = 1
    try:
        data = json.dumps(result, default=str).encode()
        view = memoryview(data)
        while view:
            n = os.write(wfd, view)
            view = view[n:]
    finally:
        os._exit(code)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_forked(request: dict) -> dict:
    """Fork a child for one request, enforce its timeout, and describe how it ended."""
    timeout = float(request.get("timeout", 300))
    rfd, wfd = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        _child(request, wfd)
    os.close(wfd)
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
    status = None
    for _ in range(200):  # a process stuck in the driver can take a moment to die
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
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
    if chunks and not timed_out:
        try:
            reply.update(json.loads(b"".join(chunks)))
        except ValueError:
            reply["error"] = "the worker wrote an unreadable result"
    return reply


def main() -> None:
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything printed by imports goes to the log, never into the protocol
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in the caller's terminal is the caller's to handle
    level = int(os.environ.get("KFORGE_ZYGOTE_PRELOAD", "0"))
    if not _preload(level) and level + 1 < len(PRELOAD_LEVELS):
        # Start again importing less: slower children, but children that can use the GPU.
        print(f"kforge zygote: preload level {level} poisons CUDA in forked children; trying {level + 1}",
              file=sys.stderr)
        os.dup2(proto.fileno(), 1)
        os.environ["KFORGE_ZYGOTE_PRELOAD"] = str(level + 1)
        os.execv(sys.executable, [sys.executable, "-m", "kforge.verify.zygote"])
    proto.write(json.dumps({"ready": True, "pid": os.getpid(), "preload": list(PRELOAD_LEVELS[level])}) + "\n")
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            request = json.loads(line)
            reply = run_forked(request)
        except Exception:  # noqa: BLE001 - keep serving
            reply = {"error": traceback.format_exc()[-OUTPUT_TAIL:]}
        proto.write(json.dumps(reply, default=str) + "\n")


if __name__ == "__main__":
    main()
