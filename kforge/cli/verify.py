"""``kforge verify``: one candidate against one problem, in isolated worker processes; prints the verdict."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from pathlib import Path

from ..problems import resolve_problem
from .common import UsageError, add_verify_options, backend_of, parse_set, read_candidate_file, verify_config

log = logging.getLogger(__name__)
RESIDENT_IDLE_S = 600.0
"""How long resident workers wait for the next `kforge verify` (`kforge.sandbox.resident`)."""


def _resident_default() -> float | None:
    value = os.environ.get("KFORGE_RESIDENT", "")
    if value in ("", "0"):
        return None
    try:
        return float(value) if float(value) > 1 else RESIDENT_IDLE_S  # KFORGE_RESIDENT=1: the default idle time
    except ValueError:
        return RESIDENT_IDLE_S


def add_parser(sub) -> None:
    v = sub.add_parser("verify", help="verify a candidate against a problem",
                       description="Run a candidate (a .py defining ModelNew, or a model's reply in markdown) "
                                   "against a problem in isolated worker processes, and print the verdict. "
                                   "Exits 0 whatever the verdict; 2 for usage errors; 1 when no verdict could be given "
                                   "because other processes held the device's memory (tried again for "
                                   "--busy-wait seconds first).")
    v.add_argument("problem", help="a problem file, or a built-in problem name (level1/1_ReLU, 1_ReLU, ReLU)")
    v.add_argument("candidate", help="the candidate program (.py) or a reply (.md/.txt) to extract it from")
    add_verify_options(v)
    v.add_argument("--set", action="append", metavar="NAME=VALUE", help="override a module constant (repeatable)")
    v.add_argument("--json", action="store_true", help="print the verdict as one JSON object")
    v.add_argument("-v", "--verbose", action="store_true", help="also print where the time went (stderr)")
    v.add_argument("--resident", nargs="?", type=float, const=RESIDENT_IDLE_S, default=_resident_default(),
                   metavar="SECONDS", help="keep the workers for the next `kforge verify` (their torch imported, their "
                   f"CUDA context made) until SECONDS pass with none (default {RESIDENT_IDLE_S:g}; KFORGE_RESIDENT=1 "
                   "does the same for every call)")
    v.set_defaults(func=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    from ..sandbox.memory import DeviceBusy
    from ..verify import BackendUnavailable, Verifier, WorkerPool
    age = _process_age()
    backend = backend_of(args.backend, args.device)
    problem, candidate = _inputs(args, backend)  # usage errors first, before any worker starts
    started = time.monotonic()
    try:
        with WorkerPool(build_workers=1, light=True, resident=args.resident or 0.0) as pool, \
                Verifier(verify_config(args), pool=pool) as verifier:
            # The device worker first: it imports torch (seconds), and everything below (the static checks, the
            # build, or knowing it is not needed) happens while it does.
            booting = [verifier.start_workers(backend, build=False)]
            if not args.json:
                log.info("verifying %s (%s size%s) on %s ...", problem.key, problem.size,
                         ", a training step: forward and backward" if args.backward else "", backend.describe())
            if not verifier.build_known(problem, candidate, backend):  # a program built before needs no build worker
                booting.append(verifier.start_workers(backend, devices=False))
                _pch_notice(backend, pool, candidate)
                if backend.device == "cuda":
                    # The GPU idles while the candidate builds: the problem's audit and baselines are timed then (a
                    # run waits for them; a build that fails does not, and leaves the thread to the pool's closing).
                    # Not on a CPU, where they would be timed beside the compiler and kept for a week.
                    threading.Thread(target=verifier.prepare, args=(problem, backend), daemon=True).start()
            verdict = verifier.verify(problem, candidate, backend)
            for thread in booting:
                thread.join()
    except BackendUnavailable as exc:
        raise UsageError(str(exc)) from None
    except DeviceBusy as exc:  # no verdict: the device's memory was other processes' (`kforge.sandbox.memory`)
        if args.json:  # as `kforge eval` writes a file it could not judge: state `error`, and why
            print(json.dumps({"state": "error", "correct": False, "error": str(exc), "message": str(exc)}))
        print(f"kforge: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(verdict.to_dict(), default=str))
    else:
        print(verdict.summary())
    if args.verbose:
        print(_where_the_time_went(verifier, verdict, time.monotonic() - started, age), file=sys.stderr)
    return 0


def _inputs(args: argparse.Namespace, backend):
    from ..problems import default_size
    problem = resolve_problem(args.problem, size=args.size or default_size(backend.device),
                              overrides=parse_set(args.set))
    return problem, read_candidate_file(args.candidate)


def _pch_notice(backend, pool, candidate) -> None:
    from ..job.firstrun import PCH_NOTICE, pch_pending
    if candidate.source and pch_pending(backend, pool.build_cache, candidate.source):
        log.info("kforge: %s", PCH_NOTICE)


def _process_age() -> float | None:
    """Seconds since this process started (Linux), so `-v` can say what Python and kforge's imports took."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return uptime - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _where_the_time_went(verifier, verdict, total: float, age: float | None = None) -> str:
    """One verification's wall time by step: start-up, worker start-up, waiting, build, run phases."""
    lines = [f"where the {total:.1f} s went" + (f" (and {age:.2f} s of Python and kforge's imports before):"
                                                  if age is not None else ":")]
    for kind, t in sorted(verifier.pool.time_s.items()):
        lines.append(f"  worker {kind:8} started in {t['start']:.2f} s, requests waited {t['wait']:.2f} s, "
                     f"served in {t['serve']:.2f} s")
    lines.append("  verifier: " + ", ".join(f"{k} {v:.2f} s" for k, v in verifier.time_s.items()))
    if verdict.build:
        b = verdict.build
        how = "remembered: built cleanly before, no build worker" if b.get("remembered") else \
            f"built {len(b.get('built', []))}, cached {len(b.get('cached', []))}"
        lines.append(f"  build: {b.get('seconds', 0):.2f} s ({how})")
    if verdict.phases:
        lines.append("  run: " + ", ".join(f"{k} {v:.2f} s" for k, v in verdict.phases.items()))
    return "\n".join(lines)
