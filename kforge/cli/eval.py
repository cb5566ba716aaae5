"""``kforge eval``: verify many candidate files in one worker pool; rows, then a summary."""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from ..metrics import BASELINES
from .common import UsageError, add_verify_options, backend_of, default_jobs, verify_config

log = logging.getLogger(__name__)

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
  MANIFEST.kforge_eval.jsonl): problem, problem_ref, level, problem_id, sample_id, candidate,
  candidate_hash, backend, and the verdict (state, correct, speedup_eager, speedup_compile,
  runtime_ms, ref_runtime_ms, rule, message, trimmed evidence, ...). A file kforge cannot
  verify (its problem is missing) gets state "error" and an `error` field. A rerun skips
  files whose path and content already have a row there for the same problem and backend;
  an error row is tried again and replaced, so the file keeps one row per candidate and problem. A rerun that judges otherwise
  (another --precision, --rules, --size, ...) than the file's rows refuses: use another --out.
  The summary (per level: correct %, fast_0/1/1.5/2, geomean speedup, states) is printed
  and written beside the rows: FILE.summary.json and FILE.summary.md.

Exits 0 whatever the verdicts; 2 for usage errors (a missing directory, a bad manifest).
"""


def add_parser(sub) -> None:
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
    add_verify_options(e)
    e.add_argument("--baseline", choices=BASELINES, default="eager",
                   help="speedup that fast_p and the geomean use (default: eager, as KernelBench)")
    e.add_argument("--jobs", type=int, default=default_jobs(),
                   help=f"parallel build workers (default: half the cores, at most 16; here {default_jobs()})")
    e.add_argument("--mlflow", nargs="?", const="", metavar="URI",
                   help="log a run, with a nested run per file (URI, or a path ending in .db; default: sqlite:///mlflow.db here; "
                        "without a URI, put it after the directories)")
    e.add_argument("--experiment", default="kforge-eval", help="MLflow experiment (default: kforge-eval)")
    e.add_argument("--no-progress", action="store_true", help="no progress bar (it shows on a terminal only)")
    e.set_defaults(func=cmd_eval)


def cmd_eval(args: argparse.Namespace) -> int:
    """Verify many candidate files in one pool; rows to --out, the summary printed and written beside it."""
    from ..evaluate import load_results, render_text, run_eval, summarise, write_summary
    from ..evaluate.judged import resume_conflict
    from ..evaluate.rows import not_a_rows_file
    from ..verify import BackendUnavailable, Verifier, WorkerPool
    jobs, source, out = _inputs(args)
    backends = {name: backend_of(name, args.device) for name in sorted({j.backend for j in jobs})}

    def size_of(name: str) -> str:
        return args.size or __import__("kforge.problems", fromlist=["default_size"]).default_size(backends[name].device)

    if args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs}: at least one build worker is needed")
    if refused := not_a_rows_file(out):
        raise UsageError(refused)
    if args.mlflow is not None:
        from ..tracking.store import tracking_uri
        args.mlflow = tracking_uri(args.mlflow)  # x.db as sqlite:///; a folder refused (ConfigError: exit 2)
    # Before any worker or MLflow run: rows judged under other settings would pass for this run's verdicts.
    if conflict := resume_conflict(out, load_results(out), verify_config(args), size_of, backends):
        raise UsageError(conflict)
    tracker = parent = None
    started = time.monotonic()
    from ..signals import sigterm_as_interrupt
    # A scheduler's SIGTERM ends it as Ctrl-C does: rows kept, workers closed, "kforge: interrupted" (exit 130)
    with sigterm_as_interrupt(), WorkerPool(build_workers=args.jobs) as pool, \
            Verifier(verify_config(args), pool=pool) as verifier:
        try:
            slots = {k for b in backends.values() for k in verifier.device_kinds(b)}
        except BackendUnavailable as exc:
            raise UsageError(str(exc)) from None
        cfg = verifier.config
        log.info("kforge eval: %d file(s) from %s on %s at %s under the %s rules; %d build worker(s), run slots %s; "
                 "rows to %s", len(jobs), source, ", ".join(backends), cfg.precision, cfg.rules, args.jobs,
                 ", ".join(sorted(slots)), out)
        if args.mlflow is not None:
            tracker, parent = _start_tracking(args, source, out, backends)
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


def _inputs(args: argparse.Namespace) -> tuple[list, str, Path]:
    """The files to verify (from a manifest or KernelBench's folders), where they came from, and the rows' file."""
    from ..evaluate import EvalInputError, discover, read_manifest
    try:
        if args.manifest:
            if args.problems_dir or args.generations_dir:
                raise UsageError("give either PROBLEMS_DIR GENERATIONS_DIR or --manifest FILE, not both")
            if args.level or args.ids:
                raise UsageError("--level and --ids select files of a generations folder; a manifest lists its own")
            out = Path(args.out or Path(args.manifest).with_suffix(".kforge_eval.jsonl"))
            return read_manifest(args.manifest, args.backend), args.manifest, out
        if not (args.problems_dir and args.generations_dir):
            raise UsageError("name PROBLEMS_DIR and GENERATIONS_DIR (KernelBench's layout), or --manifest FILE; "
                             "see kforge eval --help")
        _check_selection(args)
        found = discover(args.problems_dir, args.generations_dir, args.backend, args.level, args.ids)
    except EvalInputError as exc:
        raise UsageError(str(exc)) from None
    if found.ignored:
        log.warning("ignoring %d .py file(s) not named level_L_problem_ID_sample_S_kernel.py: %s",
                    len(found.ignored), ", ".join(found.ignored[:5]) + (" ..." if len(found.ignored) > 5 else ""))
    return found.jobs, args.generations_dir, Path(args.out or Path(args.generations_dir) / "kforge_eval.jsonl")


def _check_selection(args: argparse.Namespace) -> None:
    """A --level or --ids that is not numbers and ranges, named by its flag (`parse_ids` says "problem id")."""
    from ..problems import ProblemError, parse_ids
    for flag, value in (("--level", args.level), ("--ids", args.ids)):
        try:
            parse_ids(value, flag)
        except ProblemError as exc:
            raise UsageError(str(exc)) from None


def _start_tracking(args: argparse.Namespace, source: str, out: Path, backends: dict):
    """An MLflow run for this evaluation (``--mlflow``): the tracker and the parent run's id."""
    from ..tracking import Tracker
    from ..tracking.schema import Tags
    tracker = Tracker(args.mlflow, experiment=args.experiment)
    parent = tracker.start_eval(f"eval {Path(source).name}", params={
        "source": str(Path(source).resolve()), "problems_dir": args.problems_dir, "out": str(out),
        "backends": ",".join(backends), "size": args.size, "baseline": args.baseline,
        "verify": verify_config(args).to_dict()}, tags={Tags.SOURCE: str(source)})
    return tracker, parent
