"""``kforge verify``: one candidate against one problem, in isolated worker processes; prints the verdict."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

from ..problems import resolve_problem
from .common import UsageError, add_verify_options, backend_of, parse_set, read_candidate_file, verify_config

log = logging.getLogger(__name__)


def add_parser(sub) -> None:
    v = sub.add_parser("verify", help="verify a candidate against a problem",
                       description="Run a candidate (a .py defining ModelNew, or a model's reply in markdown) "
                                   "against a problem in isolated worker processes, and print the verdict. "
                                   "Exits 0 whatever the verdict; 2 for usage errors.")
    v.add_argument("problem", help="a problem file, or a built-in problem name (level1/1_ReLU, 1_ReLU, ReLU)")
    v.add_argument("candidate", help="the candidate program (.py) or a reply (.md/.txt) to extract it from")
    add_verify_options(v)
    v.add_argument("--set", action="append", metavar="NAME=VALUE", help="override a module constant (repeatable)")
    v.add_argument("--json", action="store_true", help="print the verdict as one JSON object")
    v.add_argument("-v", "--verbose", action="store_true", help="also print where the time went (stderr)")
    v.set_defaults(func=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    from ..job.firstrun import PCH_NOTICE, pch_pending
    from ..verify import BackendUnavailable, Verifier, WorkerPool
    backend = backend_of(args.backend, args.device)
    size = args.size or __import__("kforge.problems", fromlist=["default_size"]).default_size(backend.device)
    problem = resolve_problem(args.problem, size=size, overrides=parse_set(args.set))
    candidate = read_candidate_file(args.candidate)
    cfg = verify_config(args)
    if not args.json:
        log.info("verifying %s (%s size%s) on %s ...", problem.key, problem.size,
                 ", a training step: forward and backward" if cfg.backward else "", backend.describe())
    started = time.monotonic()
    try:
        with WorkerPool(build_workers=1, light=True) as pool, Verifier(cfg, pool=pool) as verifier:
            if candidate.source and pch_pending(backend, verifier.pool.build_cache, candidate.source):
                log.info("kforge: %s", PCH_NOTICE)
            # One verification needs one build worker and a device worker: start both now, side by side,
            # instead of the device's after the build (each imports torch and its compiler stack).
            booting = verifier.start_workers(backend)
            verdict = verifier.verify(problem, candidate, backend)
            booting.join()
    except BackendUnavailable as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps(verdict.to_dict(), default=str))
    else:
        print(verdict.summary())
    if args.verbose:
        print(_where_the_time_went(verifier, verdict, time.monotonic() - started), file=sys.stderr)
    return 0


def _where_the_time_went(verifier, verdict, total: float) -> str:
    """One verification's wall time by step: worker start-up, waiting, build, run phases."""
    lines = [f"where the {total:.1f} s went:"]
    for kind, t in sorted(verifier.pool.time_s.items()):
        lines.append(f"  worker {kind:8} started in {t['start']:.2f} s, requests waited {t['wait']:.2f} s, "
                     f"served in {t['serve']:.2f} s")
    lines.append("  verifier: " + ", ".join(f"{k} {v:.2f} s" for k, v in verifier.time_s.items()))
    if verdict.build:
        lines.append(f"  build: {verdict.build.get('seconds', 0):.2f} s (built {len(verdict.build.get('built', []))}, "
                     f"cached {len(verdict.build.get('cached', []))})")
    if verdict.phases:
        lines.append("  run: " + ", ".join(f"{k} {v:.2f} s" for k, v in verdict.phases.items()))
    return "\n".join(lines)
