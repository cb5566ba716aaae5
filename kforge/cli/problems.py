"""``kforge problems``: list problems (the built-in suite, or a KernelBench directory), audit their references."""

from __future__ import annotations

import argparse
import json
import sys

from ..problems import SIZES, load_builtin, load_directory
from .common import UsageError, backend_of, fmt_num, parse_set


def add_parser(sub) -> None:
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


def cmd_problems(args: argparse.Namespace) -> int:
    overrides = parse_set(args.set)
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
        print(f"{p.key:34} {p.size:8} {fmt_num(p.flops):>8} {fmt_num(p.bytes):>8}  {consts}")
    print(f"\n{len(problems)} problem(s); sizes: " + ", ".join(SIZES)
          + " (--size), single constants with --set NAME=VALUE")
    return 0


def _audit_problems(problems, args: argparse.Namespace) -> int:
    """Run each problem's reference through the audit on the backend's device (cached after the first time)."""
    from tqdm import tqdm

    from ..verify import BackendUnavailable, Verifier, VerifyConfig
    backend = backend_of(args.backend)
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
              f"{fmt_num(p.flops or a.get('flops')):>8} {fmt_num(p.bytes or a.get('bytes')):>8} {fmt_num(mem):>8}"
              + (f"  error: {a['error']}" if a.get("error") else ""))
    flagged = {f: sum(f in a.get("flags", []) for _, a in rows) for f in ("stochastic", "degenerate", "launch_bound")}
    print(f"\n{len(rows)} problem(s) audited on {backend.device}: " + ", ".join(f"{n} {f}" for f, n in flagged.items()))
    return 0
