"""The ``kforge`` command: list problems, verify a candidate.

The experiment pipeline (LLM agents, sweeps, MLflow) runs through Hydra: ``kforge-synthesize``.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path
from typing import Any

from . import __version__
from .problems import SIZES, ProblemError, load_builtin, load_directory, resolve_problem


class UsageError(Exception):
    """Bad command-line input: printed as ``kforge: ...`` with exit status 2."""


def _parse_set(items: list[str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise UsageError(f"--set expects NAME=VALUE, got {item!r}")
        name, value = item.split("=", 1)
        try:
            out[name.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            out[name.strip()] = value.strip()
    return out


def _fmt_num(x: float | None) -> str:
    if x is None:
        return "-"
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def cmd_problems(args: argparse.Namespace) -> int:
    overrides = _parse_set(args.set)
    if args.dir:
        problems = load_directory(args.dir, levels=args.level, ids=args.ids, size=args.size, overrides=overrides)
    else:
        problems = load_builtin(levels=args.level, ids=args.ids, size=args.size, overrides=overrides)
    if args.json:
        print(json.dumps([{k: v for k, v in p.to_dict().items() if k != "source"} for p in problems], indent=1))
        return 0
    print(f"{'problem':34} {'size':8} {'FLOPs':>8} {'bytes':>8}  constants")
    for p in problems:
        consts = ", ".join(f"{k}={v}" for k, v in p.constants.items() if isinstance(v, (int, float)))
        print(f"{p.key:34} {p.size:8} {_fmt_num(p.flops):>8} {_fmt_num(p.bytes):>8}  {consts}")
    print(f"\n{len(problems)} problem(s); sizes: " + ", ".join(SIZES) + " (--size), single constants with --set NAME=VALUE")
    return 0


def _read_candidate(path: str):
    from .candidate import Candidate
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{path}: no such candidate file")
    text = p.read_text(errors="replace")
    # A reply saved from a model (markdown) goes through the same extraction the agents use.
    if p.suffix in (".md", ".txt") or "```" in text:
        return Candidate.from_reply(text)
    return Candidate.from_source(text)


def cmd_verify(args: argparse.Namespace) -> int:
    from .backends import get_backend
    from .firstrun import PCH_NOTICE, pch_pending
    from .verify import BackendUnavailable, Verifier, VerifyConfig
    try:
        backend = get_backend(args.backend, device=args.device)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    size = args.size or ("cpu" if backend.device == "cpu" else "gpu")
    problem = resolve_problem(args.problem, size=size, overrides=_parse_set(args.set))
    candidate = _read_candidate(args.candidate)
    cfg = VerifyConfig(trials=args.trials, timeout_s=args.timeout, compile_ref=not args.no_compile_ref,
                       require_kernel=not args.no_kernel_check, seed=args.seed, skip_timing=args.no_timing)
    if args.atol is not None:
        cfg.atol = args.atol
    if args.rtol is not None:
        cfg.rtol = args.rtol
    if not args.json:
        print(f"verifying {problem.key} ({problem.size} size) on {backend.describe()} ...", file=sys.stderr)
    try:
        with Verifier(cfg) as verifier:
            if candidate.source and pch_pending(backend, verifier.pool.build_cache):
                print(f"kforge: {PCH_NOTICE}", file=sys.stderr, flush=True)
            verdict = verifier.verify(problem, candidate, backend)
    except BackendUnavailable as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps(verdict.to_dict(), default=str))
    else:
        print(verdict.summary())
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    """Compile candidates into the build cache, several at a time (warms a sweep's first iteration)."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from .backends import get_backend
    from .candidate import Candidate
    from .problems import builtin_solution_path, load_builtin
    from .verify import WorkerPool
    from .verify.gpus import arch_of
    try:
        backend = get_backend(args.backend, device=args.device)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    paths = [Path(p) for p in args.candidates]
    if args.oracle:
        paths += [p for p in (builtin_solution_path(pr, backend.name) for pr in load_builtin()) if p]
    if not paths:
        raise UsageError("nothing to build: name candidate files, or --oracle for the built-in solutions")
    with WorkerPool(build_workers=args.jobs) as pool:
        kinds = pool.kinds_for(backend.device)
        arch = None
        if backend.device == "cuda":
            if not kinds:
                raise UsageError("no CUDA GPU visible: the arch to build for comes from the GPU")
            info = pool.device_info(kinds[0], backend.spec())
            if "capability" not in info:
                raise UsageError(f"could not query the GPU: {info.get('error') or info}")
            arch = arch_of(info["capability"])

        def one(path: Path):
            c = _read_candidate(str(path)) if path.is_file() else Candidate(None, error="no such file")
            if c.source is None:
                return path, "skipped", 0.0, c.error
            t0 = time.monotonic()
            reply = pool.request("build", {"kind": "build", "backend": backend.spec(), "arch": arch},
                                 {"candidate.py": c.source}, 900)
            r = reply.get("result") or {}
            state = "failed" if r.get("compile_error") else ("built" if r.get("built") else
                                                            ("cached" if r.get("cached") else "no extension"))
            return path, state, time.monotonic() - t0, (r.get("compile_error") or "")[-300:]

        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=args.jobs) as ex:
            for path, state, secs, err in ex.map(one, paths):
                print(f"{state:12} {secs:6.1f} s  {path}" + (f"\n  {err}" if state == "failed" else ""), flush=True)
        print(f"{len(paths)} candidate(s) in {time.monotonic() - t0:.1f} s with {args.jobs} build worker(s)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kforge", description="kforge: LLM agents write compute kernels; kforge verifies and times them.",
        epilog="The agent pipeline runs through Hydra: kforge-synthesize --help")
    parser.add_argument("--version", action="version", version=f"kforge {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("problems", help="list problems (the built-in suite, or a KernelBench directory)",
                       description="List problems with their size, FLOPs and minimum bytes moved.")
    p.add_argument("--dir", help="a KernelBench checkout (or its KernelBench/ folder) instead of the built-in suite")
    p.add_argument("--level", help="level(s), e.g. 1 or 1,2")
    p.add_argument("--ids", help="problem ids, e.g. 1-5,19")
    p.add_argument("--size", choices=SIZES, default=None, help="size preset (default: the file's own constants)")
    p.add_argument("--set", action="append", metavar="NAME=VALUE", help="override a module constant (repeatable)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_problems)

    v = sub.add_parser("verify", help="verify a candidate against a problem",
                       description="Run a candidate (a .py defining ModelNew, or a model's reply in markdown) "
                                   "against a problem in isolated worker processes, and print the verdict. "
                                   "Exits 0 whatever the verdict; 2 for usage errors.")
    v.add_argument("problem", help="a problem file, or a built-in problem name (level1/1_ReLU, 1_ReLU, ReLU)")
    v.add_argument("candidate", help="the candidate program (.py) or a reply (.md/.txt) to extract it from")
    v.add_argument("--backend", default="cpu", help="cpu, cuda or triton (default: cpu)")
    v.add_argument("--device", choices=("cpu", "cuda"), help="override the backend's device "
                   "(triton on cpu runs Triton's interpreter: correctness only)")
    v.add_argument("--size", choices=SIZES, help="size preset (default: cpu for the cpu device, gpu for GPUs)")
    v.add_argument("--set", action="append", metavar="NAME=VALUE", help="override a module constant (repeatable)")
    v.add_argument("--trials", type=int, default=5, help="correctness trials (default 5)")
    v.add_argument("--timeout", type=float, default=300.0, help="run-phase wall-clock limit in seconds")
    v.add_argument("--atol", type=float, help="absolute tolerance (default: by dtype, 1e-4 for fp32)")
    v.add_argument("--rtol", type=float, help="relative tolerance (default: by dtype, 1e-4 for fp32)")
    v.add_argument("--seed", type=int, help="fix the secret seed (debugging only)")
    v.add_argument("--no-compile-ref", action="store_true", help="skip timing torch.compile of the reference")
    v.add_argument("--no-kernel-check", action="store_true", help="accept candidates without a kernel")
    v.add_argument("--no-timing", action="store_true", help="check correctness only")
    v.add_argument("--json", action="store_true", help="print the verdict as one JSON object")
    v.set_defaults(func=cmd_verify)

    b = sub.add_parser("build", help="compile candidates into the build cache, in parallel",
                       description="Build candidates' extensions into kforge's cache (nothing runs on a GPU), so "
                                   "their first verification does not wait for the compiler.")
    b.add_argument("candidates", nargs="*", help="candidate files")
    b.add_argument("--oracle", action="store_true", help="also build the built-in suite's solutions")
    b.add_argument("--backend", default="cpu", help="cpu or cuda (default: cpu)")
    b.add_argument("--device", choices=("cpu", "cuda"), help="override the backend's device")
    b.add_argument("--jobs", type=int, default=4, help="parallel builds (default 4)")
    b.set_defaults(func=cmd_build)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (UsageError, ProblemError) as exc:
        print(f"kforge: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kforge: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
