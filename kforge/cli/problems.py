"""``kforge problems``: list problems (the built-in suite, or a KernelBench directory), audit their references."""

from __future__ import annotations

import argparse
import json
import sys

from ..problems import BUILTIN_DIR, PRECISIONS, SIZES, builtin_solution_path, load_builtin, load_directory
from .common import UsageError, backend_of, fmt_num, parse_set


def add_parser(sub) -> None:
    p = sub.add_parser("problems", help="list problems (the built-in suite, or a KernelBench directory)",
                       description="List problems with their size, FLOPs and minimum bytes moved. With --audit, "
                                   "exits 1 when a problem's reference fails on its own.")
    p.add_argument("--dir", help="a KernelBench checkout (or its KernelBench/ folder) instead of the built-in suite")
    p.add_argument("--level", help="level(s), e.g. 1 or 1,2")
    p.add_argument("--ids", help="problem ids, e.g. 1-5,19")
    p.add_argument("--size", choices=SIZES, default=None,
                   help="size preset (default: the one `kforge verify --backend` runs, cpu for the cpu backend; "
                        "default: the file's own constants)")
    p.add_argument("--set", action="append", metavar="NAME=VALUE", help="override a module constant (repeatable)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--audit", action="store_true",
                   help="run each reference on the device and report its flags (stochastic, degenerate, "
                        "launch_bound), time, FLOPs, bytes and memory; cached per problem, size and device")
    p.add_argument("--backend", default="cpu", help="whose device's size preset to list and, with --audit, to audit "
                   "on (cpu, cuda, triton); with --solution: whose solution")
    p.add_argument("--solution", metavar="NAME", help="print the path of a built-in problem's hand-written solution "
                   "(what the oracle answers), e.g. level1/1_ReLU: a candidate to try from any install")
    p.add_argument("--precision", choices=tuple(PRECISIONS), default="fp32",
                   help="with --solution: the precision's own solution where there is one; with --audit: the "
                        "precision the references run in (inputs and weights cast), as kforge verify --precision "
                        "(default fp32)")
    p.add_argument("--backward", action="store_true", help="with --solution: the solution for a training step "
                   "(forward and backward kernels, for kforge verify --backward)")
    p.add_argument("--where", action="store_true", help="print the built-in suite's directory (KernelBench's layout)")
    p.set_defaults(func=cmd_problems)


def cmd_problems(args: argparse.Namespace) -> int:
    if args.where:
        print(BUILTIN_DIR)
        return 0
    if args.solution:
        return _print_solution(args.solution, args.backend, args.precision, args.backward)
    overrides = parse_set(args.set)
    if args.size is None:  # what `kforge verify` runs on this backend's device, not the file's constants
        args.size = _default_size(args)
    if args.dir:
        problems = load_directory(args.dir, levels=args.level, ids=args.ids, size=args.size, overrides=overrides)
    else:
        problems = load_builtin(levels=args.level, ids=args.ids, size=args.size, overrides=overrides)
    if args.audit:
        return _audit_problems(problems, args)
    if args.precision != "fp32":  # the list itself is the files' own: say so rather than ignore the option
        print(f"kforge: --precision {args.precision} changes --audit and --solution only; this list is the files' own "
              "(bytes count float32 elements)", file=sys.stderr)
    if args.json:
        print(json.dumps([{k: v for k, v in p.to_dict().items() if k != "source"} for p in problems], indent=1))
        return 0
    print(f"{'problem':34} {'size':8} {'FLOPs':>8} {'bytes':>8}  constants")
    for p in problems:
        consts = ", ".join(f"{k}={tuple(v) if isinstance(v, list) else v}" for k, v in p.constants.items()
                           if isinstance(v, (int, float, tuple, list)))
        print(f"{p.key:34} {p.size:8} {fmt_num(p.flops):>8} {fmt_num(p.bytes):>8}  {consts}")
    own = sum(1 for p in problems if p.size != args.size)  # files with no such preset run at their own sizes
    print(f"\n{len(problems)} problem(s) at the {args.size} size preset"
          + (f" ({own} with none run at their file's own sizes: size default)" if own else "")
          + (f", what `kforge verify` runs with --backend {args.backend}" if args.size == _default_size(args) else "")
          + "; other presets: " + ", ".join(s for s in SIZES if s != args.size)
          + " (--size; default is the file's own constants), single constants with --set NAME=VALUE")
    return 0


def _default_size(args: argparse.Namespace) -> str:
    from ..problems import default_size
    return default_size(backend_of(args.backend).device)


def _print_solution(name: str, backend: str, precision: str = "fp32", backward: bool = False) -> int:
    """The path of a built-in problem's solution for a backend at a precision (for a training step with
    ``backward``); a usage error where there is none."""
    problem = load_builtin(names=[name])[0]
    path = builtin_solution_path(problem, backend, precision, backward)
    if path is None:
        kind = f"{backend} training-step (backward)" if backward else backend
        raise UsageError(f"no built-in {kind} solution for {problem.key} at {precision} "
                         f"(see {BUILTIN_DIR / 'solutions'})")
    print(path)
    return 0


def _audit_problems(problems, args: argparse.Namespace) -> int:
    """Run each problem's reference through the audit on the backend's device (cached after the first time)."""
    from tqdm import tqdm

    from ..verify import BackendUnavailable, Verifier, VerifyConfig
    backend = backend_of(args.backend)
    rows = []
    try:
        with Verifier(VerifyConfig(precision=args.precision)) as verifier:
            for p in tqdm(problems, desc=f"auditing on {backend.device}", unit="problem", disable=args.json,
                          file=sys.stderr):
                try:
                    rows.append((p, verifier.audit(p, backend), None))
                except RuntimeError as exc:
                    rows.append((p, None, str(exc)[-300:]))
    except BackendUnavailable as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        out = []
        for p, audit, error in rows:
            d = {k: v for k, v in p.to_dict().items() if k != "source"}
            d.update(flags=audit.flags if audit else [], audit=audit.to_wire() if audit else {"error": error})
            out.append(d)
        print(json.dumps(out, indent=1))
        return 0
    print(f"{'problem':40} {'flags':28} {'ref ms':>9} {'FLOPs':>8} {'bytes':>8} {'memory':>8}")
    for p, a, error in rows:
        if a is None:
            print(f"{p.key:40} {'-':28} {'':>9} {'':>8} {'':>8} {'':>8}  error: {error}")
            continue
        mem = a.input_bytes + a.out_bytes + (a.peak_bytes or 0)
        print(f"{p.key:40} {','.join(a.flags) or '-':28} {a.ref_ms:9.4f} "
              f"{fmt_num(p.flops or a.flops):>8} {fmt_num(p.bytes or a.bytes):>8} {fmt_num(mem):>8}")
    flagged = {f: sum(bool(a) and f in a.flags for _, a, _ in rows)
               for f in ("stochastic", "degenerate", "degenerate_kernelbench", "launch_bound")}
    failed = sum(a is None for _, a, _ in rows)
    print(f"\n{len(rows) - failed} problem(s) audited on {backend.device} at {args.precision}"
          + (f" ({failed} failed on their own: error rows above)" if failed else "") + ": "
          + ", ".join(f"{n} {f}" for f, n in flagged.items()))
    return 1 if failed else 0
