"""``kforge workload profile|extract|assemble``: profile a model by module, extract its hot modules as problems,
put kernels back (docs/workload.md). It parses and prints; the work is `kforge.workload`'s."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..errors import KforgeError
from ..precision import PRECISIONS
from ..problems import SIZES
from ..workload.prepare import resolve_model, write_profile
from .common import backend_of

PRECISION_NAMES = tuple(PRECISIONS)


def _profile(args):
    from ..verify import VerifyConfig, WorkerPool
    from ..workload.profile import profile_model
    backend = backend_of(args.backend, args.device)
    problem = resolve_model(args.model, args.size, backend.device)  # a model file or a built-in workload's name
    with WorkerPool(build_workers=1, light=True) as pool:
        return problem, profile_model(problem, backend, pool, iterations=args.iterations,
                                      config=VerifyConfig(precision=args.precision))


def cmd_profile(args: argparse.Namespace) -> int:
    from ..workload.profile import plot, render_table
    _, prof = _profile(args)
    if args.json:
        print(json.dumps(prof.to_dict()))
    else:
        print(render_table(prof, top=args.rows))
    if args.plot:
        print(f"picture: {plot(prof, args.plot)}", file=sys.stderr)
    return 0


def cmd_extract(args: argparse.Namespace) -> int:
    from ..workload.extract import extract
    problem, prof = _profile(args)
    out = Path(args.out_dir)
    if (out / "workload.json").is_file():  # said, not silent: an earlier extraction's regions are rewritten
        print(f"kforge: replacing the extraction already in {out} (its workload.json and region files)",
              file=sys.stderr)
    workload = extract(prof, problem, out, top=args.top, cover=args.cover, min_share=args.min_share)
    write_profile(prof, out)
    print(f"{len(workload.regions)} regions cover {workload.coverage * 100:.1f}% of {Path(workload.model).name}'s "
          f"operator time on {workload.device} in {workload.precision}:")
    for r in workload.regions:
        same = f"  (= {r.equivalent})" if r.equivalent else ""
        print(f"  {r.share * 100:5.1f}%  {r.file:40} {r.path} [{r.type}, {r.style}]{same}")
    for s in workload.skipped:
        if s["share"] >= 0.01:
            print(f"  {s['share'] * 100:5.1f}%  not a region: {s['path'] or '(model)'}: {s['why']}")
    print(f"wrote {out / 'workload.json'}, profile.txt and profile.png")
    return 0


def _kernels(args, workload) -> dict[str, str]:
    from ..problems import builtin_solution_path
    from ..problems.equivalent import builtin_equivalent
    from ..workload.extract import identity_candidate
    kernels: dict[str, str] = {}
    for item in args.kernel or []:
        key, sep, path = item.partition("=")
        if not sep or not Path(path).is_file():
            raise KforgeError(f"--kernel expects REGION=FILE with an existing file, got {item!r}")
        kernels[workload.region(key).name] = Path(path).read_text()
    for r in workload.regions:
        if r.name in kernels:
            continue
        source = workload.region_file(r).read_text()
        if args.identity:
            kernels[r.name] = identity_candidate(source)
        elif args.oracle:
            same = builtin_equivalent(source)
            path = builtin_solution_path(same, args.backend, args.precision or workload.precision) \
                if same is not None else None
            if path is not None:
                kernels[r.name] = path.read_text()
    return kernels


def cmd_assemble(args: argparse.Namespace) -> int:
    from ..workload.assemble import assemble, check_regions, evaluate
    from ..workload.extract import Workload
    workload = Workload.load(args.workload)
    kernels = _kernels(args, workload)
    if not args.verify:
        text = assemble(workload, kernels)
        if args.out:
            Path(args.out).write_text(text)
            print(f"wrote {args.out} ({len(kernels)}/{len(workload.regions)} regions replaced)")
        else:
            print(text)
        return 0
    from ..verify import Verifier, VerifyConfig, WorkerPool
    backend = backend_of(args.backend, args.device)
    cfg = VerifyConfig(trials=args.trials, compile_ref=not args.no_compile_ref, skip_timing=args.no_timing,
                       require_kernel=not (args.no_kernel_check or args.identity),
                       precision=args.precision or workload.precision)
    with WorkerPool(build_workers=1, light=True) as pool, Verifier(cfg, pool=pool) as verifier:
        best, verdicts = check_regions(workload, verifier, backend, kernels, config=cfg)
        for name, verdict in verdicts.items():
            print(f"region {name}: {verdict.state}" + (f" ({verdict.message})" if not verdict.correct else ""))
        result = evaluate(workload, verifier, backend, best, config=cfg)
    if args.out:
        Path(args.out).write_text(result.source)
    print(result.summary())
    return 0


def add_parser(sub) -> argparse.ArgumentParser:
    """Add ``workload`` and its three subcommands to an ``add_subparsers()`` object."""
    w = sub.add_parser("workload", help="profile a model, extract its hot regions as problems, put kernels back",
                       description="Whole-workload mode (docs/workload.md). MODEL is a KernelBench-format file "
                                   "(Model, get_inputs, get_init_inputs) or a built-in workload name "
                                   "(transformer_block).")
    ws = w.add_subparsers(dest="workload_command", required=True)

    def common(p):
        p.add_argument("model", metavar="MODEL", help="a model file or a built-in workload name")
        p.add_argument("--backend", default="cpu", help="whose device runs the model: cpu, cuda, triton (default cpu)")
        p.add_argument("--device", choices=("cpu", "cuda"), help="override the backend's device")
        p.add_argument("--size", choices=SIZES, help="size preset (default: cpu on the cpu device, else gpu)")
        p.add_argument("--iterations", type=int, default=3, help="profiled forward calls (default 3)")
        p.add_argument("--precision", choices=PRECISION_NAMES, default="fp32",
                       help="the precision the model runs in (default fp32: as the file is; bf16, fp16: floating "
                            "inputs, parameters and buffers cast, as `kforge verify --precision` casts them)")

    p = ws.add_parser("profile", help="time by module and by operator, as a table (and a PNG with --plot)")
    common(p)
    p.add_argument("--plot", metavar="FILE.png", help="also draw the shares as bar charts")
    p.add_argument("--rows", type=int, default=15, help="rows per table (default 15)")
    p.add_argument("--json", action="store_true", help="print the profile as JSON")
    p.set_defaults(func=_guarded(cmd_profile))

    e = ws.add_parser("extract", help="write the hot regions as problem files and workload.json")
    common(e)
    e.add_argument("out_dir", metavar="OUT_DIR")
    e.add_argument("--top", type=int, help="at most this many regions")
    e.add_argument("--cover", type=float, default=0.8, help="stop once regions cover this share (default 0.8)")
    e.add_argument("--min-share", type=float, default=0.0, help="skip regions with this share or less")
    e.set_defaults(func=_guarded(cmd_extract))

    a = ws.add_parser("assemble", help="put region kernels into the model; with --verify, check it whole")
    a.add_argument("workload", metavar="WORKLOAD", help="workload.json or its folder")
    a.add_argument("--kernel", action="append", metavar="REGION=FILE", help="a region's kernel (name or module path)")
    a.add_argument("--identity", action="store_true", help="every other region gets its own Model as kernel")
    a.add_argument("--oracle", action="store_true", help="every other region whose Model is a built-in "
                   "problem's gets that problem's hand-written solution")
    a.add_argument("--out", metavar="FILE.py", help="write the assembled program here")
    a.add_argument("--verify", action="store_true", help="verify each region's kernel, then the assembled model")
    a.add_argument("--backend", default="cpu", help="cpu, cuda or triton (default cpu)")
    a.add_argument("--device", choices=("cpu", "cuda"), help="override the backend's device")
    a.add_argument("--trials", type=int, default=5)
    a.add_argument("--no-compile-ref", action="store_true", help="skip timing torch.compile")
    a.add_argument("--no-timing", action="store_true", help="check correctness only")
    a.add_argument("--no-kernel-check", action="store_true", help="accept kernels written in PyTorch")
    a.add_argument("--precision", choices=PRECISION_NAMES,
                   help="verify in this precision (default: the one the workload was profiled in)")
    a.set_defaults(func=_guarded(cmd_assemble))
    return w


def _guarded(fn):
    """A kforge error is the user's to fix: print it and exit 2, as the CLI does for usage errors."""
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except KforgeError as exc:
            print(f"kforge: {exc}", file=sys.stderr)
            return 2
    return run
