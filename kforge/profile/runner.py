"""Runs a candidate (or the reference) a few times for an external profiler: ``python -m kforge.profile.runner DIR``.

DIR holds ``request.json`` (the verifier's run request plus ``which``, ``iterations``, ``warmup``),
``problem.py`` and ``candidate.py``. The program is loaded exactly as the verifier loads it, warmed
up, then each profiled call is wrapped in an NVTX range named ``kforge`` (profilers filter on it), with
L2 flushed before each call.
"""

from __future__ import annotations

import json
import os
import sys

NVTX_RANGE = "kforge"


def main(argv: list[str] | None = None) -> int:
    argv = argv if argv is not None else sys.argv[1:]
    workdir = argv[0]
    os.chdir(workdir)
    with open("request.json") as fh:
        req = json.load(fh)
    from ..verify.worker import Harness, _Verdict
    h = Harness(req)
    try:
        h.setup(flush_l2=True)
        h.load_reference()
        model = h.load_candidate() if req.get("which", "candidate") == "candidate" else h.ref_model
    except _Verdict as v:
        print(f"kforge-runner: cannot load: {v.state}: {v.message}", file=sys.stderr)
        return 3
    torch = h.torch
    inputs = h.inputs(h.draw())
    cuda = h.device.type == "cuda"
    with torch.no_grad():
        for _ in range(int(req.get("warmup", 2))):
            model(*inputs)
        h.clock.sync()
        for _ in range(int(req.get("iterations", 3))):
            h.clock.flush()
            h.clock.sync()
            if cuda:
                torch.cuda.nvtx.range_push(NVTX_RANGE)
            model(*inputs)
            if cuda:
                torch.cuda.nvtx.range_pop()
            h.clock.sync()
    return 0


if __name__ == "__main__":
    sys.exit(main())
