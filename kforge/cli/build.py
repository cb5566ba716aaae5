"""``kforge build``: compile candidates into the build cache, several at a time (warms a sweep's first iteration)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from ..problems import PRECISIONS
from .common import UsageError, backend_of, read_candidate_file


def add_parser(sub) -> None:
    b = sub.add_parser("build", help="compile candidates into the build cache, in parallel",
                       description="Build candidates' extensions into kforge's cache (nothing runs on a GPU), so "
                                   "their first verification does not wait for the compiler.")
    b.add_argument("candidates", nargs="*", help="candidate files")
    b.add_argument("--oracle", action="store_true", help="also build the built-in suite's solutions")
    b.add_argument("--precision", choices=tuple(PRECISIONS), default="fp32",
                   help="with --oracle: the solutions for this precision (its own ones where there are, default fp32)")
    b.add_argument("--backend", default="cpu", help="cpu or cuda (default: cpu)")
    b.add_argument("--device", choices=("cpu", "cuda"), help="override the backend's device")
    b.add_argument("--jobs", type=int, default=4, help="parallel builds (default 4)")
    b.set_defaults(func=cmd_build)


def cmd_build(args: argparse.Namespace) -> int:
    """Compile candidates into the build cache, several at a time (warms a sweep's first iteration)."""
    from concurrent.futures import ThreadPoolExecutor

    from ..candidate import Candidate
    from ..problems import builtin_solution_path, load_builtin
    from ..verify import WorkerPool
    from ..verify.protocol import BuildRequest, BuildResult
    backend = backend_of(args.backend, args.device)
    paths = [Path(p) for p in args.candidates]
    if args.oracle:
        oracle = [p for p in (builtin_solution_path(pr, backend.name, args.precision) for pr in load_builtin()) if p]
        if not oracle and not paths:
            raise UsageError(f"nothing to build: no built-in {backend.name} solution takes {args.precision} (which "
                             "folders serve which precision: docs/problems.md)")
        paths += oracle
    if not paths:
        raise UsageError("nothing to build: name candidate files, or --oracle for the built-in solutions")
    if args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs}: at least one build worker is needed")
    with WorkerPool(build_workers=args.jobs) as pool:
        arch = _arch(pool, backend)

        def one(path: Path):
            c = read_candidate_file(str(path)) if path.is_file() else Candidate(
                None, error="a directory, not a candidate file" if path.is_dir() else "no such file")
            if c.source is None:
                return path, "skipped", 0.0, c.error
            t0 = time.monotonic()
            reply = pool.request("build", BuildRequest(backend=backend.spec(), arch=arch), {"candidate.py": c.source},
                                 900)
            r = reply.result or BuildResult(compile_error=reply.error or ("timed out" if reply.timed_out else None))
            state = "failed" if r.compile_error else ("built" if r.built else
                                                      ("cached" if r.cached else "no extension"))
            return path, state, time.monotonic() - t0, (r.compile_error or "")[-300:]

        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=args.jobs) as ex:
            for path, state, secs, err in ex.map(one, paths):
                print(f"{state:12} {secs:6.1f} s  {path}" + (f"\n  {err}" if state in ("failed", "skipped") else ""),
                      flush=True)
        print(f"{len(paths)} candidate(s) in {time.monotonic() - t0:.1f} s with {args.jobs} build worker(s)")
    return 0


def _arch(pool, backend) -> str | None:
    """The GPU architecture to build for (CUDA: the first visible GPU's); None for other devices."""
    from ..sandbox.gpus import arch_of
    if backend.device != "cuda":
        return None
    kinds = pool.kinds_for(backend.device)
    if not kinds:
        raise UsageError("no CUDA GPU visible: the arch to build for comes from the GPU")
    info = pool.device_info(kinds[0], backend.spec())
    if not info.capability:
        raise UsageError(f"could not query the GPU: {info.error or info}")
    return arch_of(info.capability)
