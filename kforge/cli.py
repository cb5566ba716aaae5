"""The ``kforge`` command: list problems, verify a candidate, evaluate many, build ahead.

The experiment pipeline (LLM agents, sweeps, MLflow) runs through Hydra: ``kforge-synthesize``.
"""

from __future__ import annotations

import argparse
import ast
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from . import __version__
from .errors import KforgeError
from .log import setup as setup_logging
from .metrics import BASELINES
from .problems import SIZES, ProblemError, load_builtin, load_directory, resolve_problem

log = logging.getLogger(__name__)


class UsageError(KforgeError):
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
    if args.audit:
        return _audit_problems(problems, args)
    if args.json:
        print(json.dumps([{k: v for k, v in p.to_dict().items() if k != "source"} for p in problems], indent=1))
        return 0
    print(f"{'problem':34} {'size':8} {'FLOPs':>8} {'bytes':>8}  constants")
    for p in problems:
        consts = ", ".join(f"{k}={v}" for k, v in p.constants.items() if isinstance(v, (int, float)))
        print(f"{p.key:34} {p.size:8} {_fmt_num(p.flops):>8} {_fmt_num(p.bytes):>8}  {consts}")
    print(f"\n{len(problems)} problem(s); sizes: " + ", ".join(SIZES) + " (--size), single constants with --set NAME=VALUE")
    return 0


def _audit_problems(problems, args: argparse.Namespace) -> int:
    """Run each problem's reference through the audit on the backend's device (cached after the first time)."""
    from tqdm import tqdm

    from .backends import get_backend
    from .verify import BackendUnavailable, Verifier, VerifyConfig
    try:
        backend = get_backend(args.backend)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    rows = []
    try:
        with Verifier(VerifyConfig()) as verifier:
            for p in tqdm(problems, desc=f"auditing on {backend.device}", unit="problem", disable=args.json,
                          file=sys.stderr):
                try:
                    audit = verifier.audit(p, backend)
                except RuntimeError as exc:
                    audit = {"flags": [], "error": str(exc)[-300:]}
                rows.append((p, audit))
    except BackendUnavailable as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        out = []
        for p, audit in rows:
            d = {k: v for k, v in p.to_dict().items() if k != "source"}
            d.update(flags=audit.get("flags", []), audit=audit)
            out.append(d)
        print(json.dumps(out, indent=1))
        return 0
    print(f"{'problem':40} {'flags':28} {'ref ms':>9} {'FLOPs':>8} {'bytes':>8} {'memory':>8}")
    for p, a in rows:
        mem = (a.get("input_bytes") or 0) + (a.get("out_bytes") or 0) + (a.get("peak_bytes") or 0)
        print(f"{p.key:40} {','.join(a.get('flags', [])) or '-':28} {a.get('ref_ms', float('nan')):9.4f} "
              f"{_fmt_num(p.flops or a.get('flops')):>8} {_fmt_num(p.bytes or a.get('bytes')):>8} {_fmt_num(mem):>8}"
              + (f"  error: {a['error']}" if a.get("error") else ""))
    flagged = {f: sum(f in a.get("flags", []) for _, a in rows) for f in ("stochastic", "degenerate", "launch_bound")}
    print(f"\n{len(rows)} problem(s) audited on {backend.device}: " + ", ".join(f"{n} {f}" for f, n in flagged.items()))
    return 0


def _read_candidate(path: str):
    from .evaluate import read_candidate
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{path}: no such candidate file")
    # A reply saved from a model (markdown) goes through the same extraction the agents use.
    return read_candidate(p)


def _verify_config(args: argparse.Namespace):
    from .verify import VerifyConfig
    cfg = VerifyConfig(trials=args.trials, timeout_s=args.timeout, compile_ref=not args.no_compile_ref,
                       require_kernel=not args.no_kernel_check, seed=args.seed, skip_timing=args.no_timing)
    if args.atol is not None:
        cfg.atol = args.atol
    if args.rtol is not None:
        cfg.rtol = args.rtol
    return cfg


def cmd_verify(args: argparse.Namespace) -> int:
    from .backends import get_backend
    from .firstrun import PCH_NOTICE, pch_pending
    from .verify import BackendUnavailable, Verifier, WorkerPool
    try:
        backend = get_backend(args.backend, device=args.device)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    size = args.size or ("cpu" if backend.device == "cpu" else "gpu")
    problem = resolve_problem(args.problem, size=size, overrides=_parse_set(args.set))
    candidate = _read_candidate(args.candidate)
    cfg = _verify_config(args)
    if not args.json:
        log.info("verifying %s (%s size) on %s ...", problem.key, problem.size, backend.describe())
    started = time.monotonic()
    try:
        with WorkerPool(build_workers=1, light=True) as pool, Verifier(cfg, pool=pool) as verifier:
            if candidate.source and pch_pending(backend, verifier.pool.build_cache):
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


def cmd_eval(args: argparse.Namespace) -> int:
    """Verify many candidate files in one pool; rows to --out, the summary printed and written beside it."""
    from .backends import get_backend
    from .eval_summary import render_text, write_summary, summarise
    from .evaluate import EvalInputError, discover, read_manifest, run_eval
    from .verify import BackendUnavailable, Verifier, WorkerPool
    try:
        if args.manifest:
            if args.problems_dir or args.generations_dir:
                raise UsageError("give either PROBLEMS_DIR GENERATIONS_DIR or --manifest FILE, not both")
            if args.level or args.ids:
                raise UsageError("--level and --ids select files of a generations folder; a manifest lists its own")
            jobs, source = read_manifest(args.manifest, args.backend), args.manifest
            out = Path(args.out or Path(args.manifest).with_suffix(".kforge_eval.jsonl"))
        else:
            if not (args.problems_dir and args.generations_dir):
                raise UsageError("name PROBLEMS_DIR and GENERATIONS_DIR (KernelBench's layout), or --manifest FILE; "
                                 "see kforge eval --help")
            found = discover(args.problems_dir, args.generations_dir, args.backend, args.level, args.ids)
            if found.ignored:
                log.warning("ignoring %d .py file(s) not named level_L_problem_ID_sample_S_kernel.py: %s",
                            len(found.ignored), ", ".join(found.ignored[:5]) + (" ..." if len(found.ignored) > 5 else ""))
            jobs, source = found.jobs, args.generations_dir
            out = Path(args.out or Path(args.generations_dir) / "kforge_eval.jsonl")
    except EvalInputError as exc:
        raise UsageError(str(exc)) from None
    backends = {}
    for name in sorted({j.backend for j in jobs}):
        try:
            backends[name] = get_backend(name, device=args.device)
        except ValueError as exc:
            raise UsageError(str(exc)) from None

    def size_of(name: str) -> str:
        return args.size or ("cpu" if backends[name].device == "cpu" else "gpu")

    tracker = parent = None
    started = time.monotonic()
    with WorkerPool(build_workers=args.jobs) as pool, Verifier(_verify_config(args), pool=pool) as verifier:
        try:
            slots = {k for b in backends.values() for k in verifier.device_kinds(b)}
        except BackendUnavailable as exc:
            raise UsageError(str(exc)) from None
        log.info("kforge eval: %d file(s) from %s on %s; %d build worker(s), run slots %s; rows to %s", len(jobs),
                 source, ", ".join(backends), args.jobs, ", ".join(sorted(slots)), out)
        if args.mlflow is not None:
            from .tracking import Tracker, default_uri
            from .tracking.schema import Tags
            tracker = Tracker(args.mlflow or default_uri(), experiment=args.experiment)
            parent = tracker.start_eval(f"eval {Path(source).name}", params={
                "source": str(Path(source).resolve()), "problems_dir": args.problems_dir, "out": str(out),
                "backends": ",".join(backends), "size": args.size, "baseline": args.baseline,
                "verify": _verify_config(args).to_dict()}, tags={Tags.SOURCE: str(source)})
        try:
            result = run_eval(jobs, verifier, backends, size_of=size_of, out=out, threads=args.jobs + 2 * len(slots),
                              progress=False if args.no_progress else None,
                              on_row=(lambda row, src: tracker.log_candidate(parent, row, src)) if tracker else None)
        except BaseException:
            if tracker:
                tracker.kill(parent)
            raise
    summary = summarise(result.rows, args.baseline)
    summary.update(files=len(result.rows), verified_now=result.verified, resumed=result.resumed,
                   wall_s=round(time.monotonic() - started, 1), results=str(out))
    js, md = write_summary(out, summary, title=f"kforge eval: {source}")
    if tracker:
        tracker.end_eval(parent, summary, [out, js, md])
    print(f"{len(result.rows)} file(s): {result.verified} verified now, {result.resumed} already in {out.name}, "
          f"{summary['wall_s']:.1f} s")
    print(render_text(summary))
    print(f"rows: {out}\nsummary: {js}, {md}" + (f"\nMLflow run {parent} in {tracker.uri}" if tracker else ""))
    return 0


def _default_jobs() -> int:
    """Half the cores as build workers: each compiles with cores/workers threads (MAX_JOBS), so all are used."""
    return max(1, min(16, (os.cpu_count() or 2) // 2))


EVAL_HELP = """\
Verify many candidates in one worker pool: builds in parallel, runs on every visible GPU.

inputs, either
  kforge eval PROBLEMS_DIR GENERATIONS_DIR
      KernelBench's layout. GENERATIONS_DIR holds files named
      level_{L}_problem_{ID}_sample_{S}_kernel.py, as KernelBench's scripts/generate_samples.py
      writes them into runs/RUN_NAME/; each is verified against PROBLEMS_DIR/level{L}/{ID}_*.py.
      PROBLEMS_DIR is a KernelBench checkout or its inner KernelBench/ folder. Other files are
      ignored (.py ones are listed).
  kforge eval --manifest FILE
      A CSV with a header row, or JSONL (one object a line), with the columns problem,
      candidate and optionally backend (else --backend). problem is a problem file or a
      built-in name (level1/1_ReLU), as `kforge verify` takes it; relative paths are taken
      from the manifest's folder.
  A candidate is a program defining ModelNew, or a model's reply (.md/.txt, or fenced code).

output
  One JSONL row per file in --out (default GENERATIONS_DIR/kforge_eval.jsonl, or
  MANIFEST.kforge_eval.jsonl): problem, level, problem_id, sample_id, candidate,
  candidate_hash, backend, and the verdict (state, correct, speedup_eager, speedup_compile,
  runtime_ms, ref_runtime_ms, rule, message, trimmed evidence, ...). A file kforge cannot
  verify (its problem is missing) gets state "error" and an `error` field. A rerun skips
  files whose path and content already have a row there (error rows are tried again).
  The summary (per level: correct %, fast_0/1/1.5/2, geomean speedup, states) is printed
  and written beside the rows: FILE.summary.json and FILE.summary.md.

Exits 0 whatever the verdicts; 2 for usage errors (a missing directory, a bad manifest).
"""


def cmd_build(args: argparse.Namespace) -> int:
    """Compile candidates into the build cache, several at a time (warms a sweep's first iteration)."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from .backends import get_backend
    from .candidate import Candidate
    from .problems import builtin_solution_path, load_builtin
    from .sandbox.gpus import arch_of
    from .verify import WorkerPool
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


def _verify_options(p: argparse.ArgumentParser) -> None:
    """The verifier's options, the same for `kforge verify` and `kforge eval` (read by `_verify_config`)."""
    p.add_argument("--backend", default="cpu", help="cpu, cuda or triton (default: cpu)")
    p.add_argument("--device", choices=("cpu", "cuda"), help="override the backend's device "
                   "(triton on cpu runs Triton's interpreter: correctness only)")
    p.add_argument("--size", choices=SIZES, help="size preset (default: cpu for the cpu device, gpu for GPUs)")
    p.add_argument("--trials", type=int, default=5, help="correctness trials (default 5; 2 more measure whose "
                   "code did the work)")
    p.add_argument("--timeout", type=float, default=300.0, help="run-phase wall-clock limit per candidate, seconds")
    p.add_argument("--atol", type=float, help="absolute tolerance (default: by dtype, 1e-4 for fp32)")
    p.add_argument("--rtol", type=float, help="relative tolerance (default: by dtype, 1e-4 for fp32)")
    p.add_argument("--seed", type=int, help="fix the secret seed (debugging only)")
    p.add_argument("--no-compile-ref", action="store_true", help="skip timing torch.compile of the reference")
    p.add_argument("--no-kernel-check", action="store_true",
                   help="accept candidates without a kernel of their own (attribution is still reported)")
    p.add_argument("--no-timing", action="store_true", help="check correctness only (no speedups)")


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
    p.add_argument("--audit", action="store_true",
                   help="run each reference on the device and report its flags (stochastic, degenerate, "
                        "launch_bound), time, FLOPs, bytes and memory; cached per problem, size and device")
    p.add_argument("--backend", default="cpu", help="with --audit: whose device to audit on (cpu, cuda, triton)")
    p.set_defaults(func=cmd_problems)

    v = sub.add_parser("verify", help="verify a candidate against a problem",
                       description="Run a candidate (a .py defining ModelNew, or a model's reply in markdown) "
                                   "against a problem in isolated worker processes, and print the verdict. "
                                   "Exits 0 whatever the verdict; 2 for usage errors.")
    v.add_argument("problem", help="a problem file, or a built-in problem name (level1/1_ReLU, 1_ReLU, ReLU)")
    v.add_argument("candidate", help="the candidate program (.py) or a reply (.md/.txt) to extract it from")
    _verify_options(v)
    v.add_argument("--set", action="append", metavar="NAME=VALUE", help="override a module constant (repeatable)")
    v.add_argument("--json", action="store_true", help="print the verdict as one JSON object")
    v.add_argument("-v", "--verbose", action="store_true", help="also print where the time went (stderr)")
    v.set_defaults(func=cmd_verify)

    e = sub.add_parser("eval", help="verify many candidates (KernelBench's generations, or a manifest) in one pool",
                       description=EVAL_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    e.add_argument("problems_dir", nargs="?", metavar="PROBLEMS_DIR",
                   help="a KernelBench checkout (or its KernelBench/)")
    e.add_argument("generations_dir", nargs="?", metavar="GENERATIONS_DIR",
                   help="a folder of level_L_problem_ID_sample_S_kernel.py files")
    e.add_argument("--manifest", metavar="FILE", help="a CSV or JSONL of problem,candidate[,backend] instead")
    e.add_argument("--out", metavar="FILE.jsonl", help="results rows (default: see above); the summary goes beside it")
    e.add_argument("--level", help="only these levels of a generations folder, e.g. 1 or 1,2")
    e.add_argument("--ids", help="only these problem ids of a generations folder, e.g. 1-10,19")
    _verify_options(e)
    e.add_argument("--baseline", choices=BASELINES, default="eager",
                   help="speedup that fast_p and the geomean use (default: eager, as KernelBench)")
    e.add_argument("--jobs", type=int, default=_default_jobs(),
                   help=f"parallel build workers (default: half the cores, at most 16; here {_default_jobs()})")
    e.add_argument("--mlflow", nargs="?", const="", metavar="URI",
                   help="log a run, with a nested run per file (default URI: sqlite:///mlflow.db here; "
                        "without a URI, put it after the directories)")
    e.add_argument("--experiment", default="kforge-eval", help="MLflow experiment (default: kforge-eval)")
    e.add_argument("--no-progress", action="store_true", help="no progress bar (it shows on a terminal only)")
    e.set_defaults(func=cmd_eval)

    b = sub.add_parser("build", help="compile candidates into the build cache, in parallel",
                       description="Build candidates' extensions into kforge's cache (nothing runs on a GPU), so "
                                   "their first verification does not wait for the compiler.")
    b.add_argument("candidates", nargs="*", help="candidate files")
    b.add_argument("--oracle", action="store_true", help="also build the built-in suite's solutions")
    b.add_argument("--backend", default="cpu", help="cpu or cuda (default: cpu)")
    b.add_argument("--device", choices=("cpu", "cuda"), help="override the backend's device")
    b.add_argument("--jobs", type=int, default=4, help="parallel builds (default 4)")
    b.set_defaults(func=cmd_build)

    from .workload.cli import add_subcommand as add_workload
    add_workload(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    setup_logging()
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
