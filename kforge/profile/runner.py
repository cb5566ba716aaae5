"""Runs a candidate (or the reference) a few times for an external profiler: ``python -m kforge.profile.runner DIR``.

DIR holds ``request.json`` (a `ProfileRequest`: the program, ``which``, ``iterations``, ``warmup``),
``problem.py`` and ``candidate.py``. The program is loaded exactly as the verifier loads it, warmed
up, then each profiled call is wrapped in an NVTX range named ``kforge`` (profilers filter on it), with
L2 flushed before each call. In the backward mode (``verify.backward``) a call is a training step, forward
then backward (`kforge.verify.backward`), and its range is a process-wide start/end range rather than a
push/pop one: autograd launches a CUDA backward from threads of its own, which a thread's push/pop range
does not cover.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace

from .protocol import ProfileRequest

NVTX_RANGE = "kforge"


def run_under(prefix: list[str], workdir: str | os.PathLike, request: ProfileRequest, files: dict[str, str], *,
              gpu: int | None, timeout: float, iterations: int) -> tuple[int, str, float]:
    """Run this runner under a profiler (``prefix`` is its command line): (exit code, output, seconds).

    The runner process gets a scrubbed environment and its own session; past ``timeout`` the whole
    group is killed and `TimeoutError` raised.
    """
    import signal
    import subprocess
    import time
    from pathlib import Path

    from ..sandbox.env import scrubbed_env
    wd = Path(workdir)
    wd.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (wd / name).write_text(text)
    (wd / "request.json").write_text(json.dumps(replace(request, iterations=iterations).to_wire()))
    extra = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    if gpu is not None:
        extra["CUDA_VISIBLE_DEVICES"] = str(gpu)
    start = time.monotonic()
    proc = subprocess.Popen([*prefix, sys.executable, "-m", "kforge.profile.runner", str(wd)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=scrubbed_env(extra), cwd=str(wd),
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise TimeoutError(f"{prefix[0]} did not finish within {timeout:g} s") from None
    (wd / "profiler.log").write_text(out)
    return proc.returncode, out, time.monotonic() - start


def load_program(req: ProfileRequest):
    """The harness set up as the verifier sets it up, and the program to profile (the candidate, or the
    reference when ``which`` says so), in the backward mode its training step; raises `HarnessVerdict` when it
    cannot be loaded."""
    from ..sandbox.harness import Harness
    from ..verify.config import VerifyConfig
    cfg = VerifyConfig.from_dict(req.config)
    h = Harness(req, cfg)
    h.setup(flush_l2=True)
    h.load_reference()
    steps = None
    if cfg.backward:  # made before candidate code is imported, as the verifier makes it
        from ..verify.backward import Backward
        steps = Backward.of(h)
        steps.checking = False
        steps.upstream.reseed(h.draw())
    program = h.load_candidate() if req.which == "candidate" else h.ref_model
    return h, (steps.step(program) if steps is not None else program)


def training_step(req: ProfileRequest) -> bool:
    """Whether a profiled call is a training step (``verify.backward``)."""
    return bool(req.config.get("backward"))


def main(argv: list[str] | None = None) -> int:
    argv = argv if argv is not None else sys.argv[1:]
    workdir = argv[0]
    os.chdir(workdir)
    with open("request.json") as fh:
        req = ProfileRequest.from_wire(json.load(fh))
    from ..sandbox.harness import HarnessVerdict
    try:
        h, model = load_program(req)
    except HarnessVerdict as v:
        print(f"kforge-runner: cannot load: {v.state}: {v.message}", file=sys.stderr)
        return 3
    torch = h.torch
    inputs = h.inputs(h.draw())
    cuda = h.device.type == "cuda"
    step = training_step(req)
    with torch.no_grad():
        for _ in range(req.warmup):
            model(*inputs)
        h.clock.sync()
        for _ in range(req.iterations):
            h.clock.flush()
            h.clock.sync()
            if cuda:
                rid = torch.cuda.nvtx.range_start(NVTX_RANGE) if step else torch.cuda.nvtx.range_push(NVTX_RANGE)
            model(*inputs)
            if cuda:
                torch.cuda.nvtx.range_end(rid) if step else torch.cuda.nvtx.range_pop()
            h.clock.sync()
    return 0


if __name__ == "__main__":
    sys.exit(main())
