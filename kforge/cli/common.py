"""What several ``kforge`` commands share: the usage error, ``--set``, the verifier's options, reading a
candidate file."""

from __future__ import annotations

import argparse
import ast
import os
from pathlib import Path
from typing import Any

from ..errors import KforgeError
from ..precision import PRECISIONS
from ..problems import SIZES
from ..verify.config import RULE_SETS


class UsageError(KforgeError):
    """Bad command-line input: printed as ``kforge: ...`` with exit status 2."""


def parse_set(items: list[str] | None) -> dict[str, Any]:
    """``--set NAME=VALUE`` options as a dict, each value a Python literal where it reads as one."""
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


def fmt_num(x: float | None) -> str:
    """A count in three significant digits with a k/M/G/T suffix (``-`` for none)."""
    if x is None:
        return "-"
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def backend_of(name: str, device: str | None = None):
    """The named backend, or a usage error naming the valid ones."""
    from ..backends import get_backend
    try:
        return get_backend(name, device=device)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def read_candidate_file(path: str):
    """A candidate from a file: a program, or a model's reply (markdown) to extract it from."""
    from ..evaluate import read_candidate
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{path} is a directory: give one candidate file (a .py defining ModelNew, or a model's "
                         "reply); to judge a folder of generations, use `kforge eval PROBLEMS_DIR GENERATIONS_DIR`")
    if not p.is_file():
        raise UsageError(f"{path}: no such candidate file")
    # A reply saved from a model (markdown) goes through the same extraction the agents use.
    return read_candidate(p)


def verify_config(args: argparse.Namespace):
    """The verifier's config from the options `add_verify_options` adds; out-of-range numbers are usage errors."""
    from ..errors import ConfigError
    from ..verify import VerifyConfig
    if args.trials < 1:
        raise UsageError(f"--trials {args.trials}: at least one correctness trial is needed")
    try:
        return VerifyConfig(trials=args.trials, timeout_s=args.timeout, device_busy_wait_s=args.busy_wait,
                            compile_ref=not args.no_compile_ref, atol=args.atol, rtol=args.rtol,
                            require_kernel=not args.no_kernel_check, seed=args.seed, skip_timing=args.no_timing,
                            rules=args.rules, precision=args.precision, variants=not args.no_variants,
                            backward=args.backward)
    except ConfigError as exc:  # in the options' own names
        names = {"verify.timeout_s": "--timeout", "verify.device_busy_wait_s": "--busy-wait", "verify.atol": "--atol",
                 "verify.rtol": "--rtol"}
        message = str(exc)
        for key, flag in names.items():
            message = message.replace(key, flag)
        raise UsageError(message) from None


def add_verify_options(p: argparse.ArgumentParser) -> None:
    """The verifier's options, the same for `kforge verify` and `kforge eval` (read by `verify_config`)."""
    from ..backends import BACKENDS
    p.add_argument("--backend", default="cpu", help=f"{', '.join(BACKENDS)} (default: cpu; opencl runs on PoCL "
                   "without a GPU)")
    p.add_argument("--device", choices=("cpu", "cuda"), help="override the backend's device "
                   "(triton on cpu runs Triton's interpreter: correctness only)")
    p.add_argument("--size", choices=SIZES, help="size preset (default: cpu for the cpu device, gpu for GPUs)")
    p.add_argument("--trials", type=int, default=5, help="correctness trials (default 5), 2 of them the ones that "
                   "measure whose code did the work, so at least 3 run")
    p.add_argument("--timeout", type=float, default=300.0, help="run-phase wall-clock limit per candidate, seconds")
    p.add_argument("--busy-wait", type=float, default=300.0, metavar="SECONDS",
                   help="how long a run that ran out of GPU memory other processes held is tried again before it "
                   "gives up without a verdict (default 300; 0: not tried again)")
    p.add_argument("--atol", type=float, help="absolute tolerance (default: by dtype, 1e-4 for fp32)")
    p.add_argument("--rtol", type=float, help="relative tolerance (default: by dtype, 1e-4 for fp32)")
    p.add_argument("--seed", type=int, help="fix the secret seed (debugging only)")
    p.add_argument("--no-compile-ref", action="store_true", help="skip timing torch.compile of the reference")
    p.add_argument("--no-kernel-check", action="store_true",
                   help="accept candidates without a kernel of their own (attribution is still reported)")
    p.add_argument("--no-timing", action="store_true", help="check correctness only (no speedups)")
    p.add_argument("--precision", choices=tuple(PRECISIONS), default="fp32",
                   help="the precision the workload runs in (default fp32: as the file is; tf32: tensor-core matrix "
                        "work on float32; bf16, fp16: inputs and weights cast, as KernelBench's precision= does). "
                        "Baselines are timed in it")
    p.add_argument("--no-variants", action="store_true",
                   help="skip the shape variants (sizes the candidate was not shown; the kforge rules ask for them)")
    p.add_argument("--backward", action="store_true",
                   help="judge a training step: the outputs and every input's and parameter's gradient against "
                        "autograd's on the reference, timed forward plus backward (docs/verification.md)")
    p.add_argument("--rules", choices=RULE_SETS, default="kforge",
                   help="the rule set that decides the state (default kforge: the candidate's own kernels must do "
                        "the work; kernelbench: what KernelBench's harness decides, matching outputs suffice; "
                        "strict: kforge and a 90%% kernel share). The state under every rule set is recorded too")


def default_jobs() -> int:
    """Half the cores as build workers: each compiles with cores/workers threads (MAX_JOBS), so all are used."""
    return max(1, min(16, (os.cpu_count() or 2) // 2))
