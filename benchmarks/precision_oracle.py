"""The built-in suite's bf16 oracle kernels against bf16 eager PyTorch, on a GPU.

    python benchmarks/precision_oracle.py [--backends cuda,triton] [--problems 4_Matmul,...] [--size gpu]
                                          [--precision bf16] [--json out.json]

For every built-in problem at its size (``gpu`` by default) and each backend, the solution the oracle gives at
the precision (``solutions/<backend>/bf16/`` first, else the backend's dtype-generic file) is verified at that
precision through the normal `Verifier` (inputs and weights cast as KernelBench's ``precision=`` does, judged
under the verifier's rules, timed beside eager PyTorch at the same precision). fp32 eager is the reference as
written, timed by the verifier's audit. The table: problem, backend, state, oracle ms, eager ms at the
precision, speedup over it, fp32 eager ms.

Where the verifier does not take a precision yet (``VerifyConfig`` has no ``precision`` field), the script
says so and uses a harness of its own in this process instead: the same casting, a check against fp32
computed from the same cast values (relative tolerance 4 unit roundoffs plus the same share of the output's
rms), and CUDA-event medians with the L2 flushed before each call (wall-clock medians on a CPU). Its
numbers are labelled ``own``; prefer the verifier's.

``--backends cpu --size cpu`` runs anywhere (the cpu solutions are dtype-generic); CI checks it so, with
``--quick`` (two correctness trials, a short timing budget: a check that the path works, not figures to quote).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import statistics
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from kforge.backends import get_backend  # noqa: E402
from kforge.precision import ROUNDINGS, get_precision  # noqa: E402
from kforge.problems import builtin_solution_path, load_builtin  # noqa: E402
from kforge.verify import TimingConfig, Verifier, VerifyConfig, WorkerPool  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class Row:
    """One problem on one backend."""

    problem: str
    backend: str
    state: str
    """The verdict's state (``correct``, ``numerical_mismatch``, ...), or ``no solution``."""
    oracle_ms: float | None = None
    eager_ms: float | None = None
    """Eager PyTorch at the precision."""
    fp32_eager_ms: float | None = None
    solution: str = ""
    """The solution file, relative to the suite's solutions folder."""
    harness: str = "verifier"
    """``verifier``, or ``own`` where the verifier took no precision."""
    message: str = ""

    @property
    def speedup(self) -> float | None:
        return self.eager_ms / self.oracle_ms if self.oracle_ms and self.eager_ms else None


def verifier_takes_precision() -> bool:
    return "precision" in {f.name for f in dataclasses.fields(VerifyConfig)}


# -- the verifier's path ------------------------------------------------------------------------------------
def _settings(quick: bool) -> dict:
    """The verifier's settings besides the precision: its defaults, or ``--quick``'s few trials and short timing."""
    if not quick:
        return dict(compile_ref=False)
    return dict(compile_ref=False, trials=2, variants=False,
                timing=TimingConfig(warmup=1, min_trials=3, max_trials=6, budget_s=1.0, input_sets=2))


def run_verifier(problems, backends, precision: str, quick: bool = False) -> list[Row]:
    rows = []
    with WorkerPool() as pool:
        judged = Verifier(VerifyConfig(precision=precision, **_settings(quick)), pool=pool)
        fp32 = Verifier(VerifyConfig(**_settings(quick)), pool=pool)
        for p in problems:
            for name in backends:
                backend = get_backend(name)
                path = builtin_solution_path(p, name, precision)
                if path is None:
                    rows.append(Row(p.key, name, "no solution"))
                    continue
                v = judged.verify(p, path.read_text(), backend)
                try:
                    fp32_ms = fp32.audit(p, backend).ref_ms
                except RuntimeError as exc:
                    fp32_ms, v.message = None, f"{v.message} (fp32 audit: {str(exc)[:120]})"
                ok = v.state.value == "correct"
                rows.append(Row(p.key, name, v.state.value, v.runtime.median_ms if ok and v.runtime else None,
                                v.ref.median_ms if v.ref else None, fp32_ms, _rel(path),
                                message="" if ok else v.message[:200]))
                print(_line(rows[-1]), flush=True)
    return rows


# -- the own harness (until the verifier takes a precision) -------------------------------------------------
def _module(source: str, name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), mod.__dict__)
    return mod


def _cast(values, dtype, device):
    return [v.to(device=device, dtype=dtype) if isinstance(v, torch.Tensor) and v.is_floating_point()
            else (v.to(device) if isinstance(v, torch.Tensor) else v) for v in values]


def _median_ms(fn, device: str, reps: int = 20) -> float:
    """Median of ``reps`` calls after 3 warm-up calls; on a GPU each call is event-timed after an L2 flush."""
    for _ in range(3):
        fn()
    times = []
    if device == "cuda":
        flush = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device=device)
        for _ in range(reps):
            flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _outputs(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _mismatch(outs, refs, dtype, rtol: float) -> str:
    for i, (o, r) in enumerate(zip(outs, refs)):
        if o.dtype != dtype or o.shape != r.shape:
            return f"output {i}: {o.dtype} {tuple(o.shape)}, expected {dtype} {tuple(r.shape)}"
        r = r.float()
        allowed = rtol * (r.abs() + r.pow(2).mean().sqrt())
        worst = ((o.float() - r).abs() / allowed).max().item()
        if not worst <= 1.0:
            return f"output {i}: error {worst:.2f}x the tolerance"
    return ""


def run_own(problems, backends, precision: str, device: str, quick: bool = False) -> list[Row]:
    from kforge import cache_dir
    from kforge.backends.build import Builder
    Builder(cache_dir() / "ext").install()  # extensions build through kforge's cache, as in a worker
    dtype, rows = DTYPES[precision], []
    for p in problems:
        ref_mod = _module(p.source, "reference")
        for name in backends:
            path = builtin_solution_path(p, name, precision)
            if path is None:
                rows.append(Row(p.key, name, "no solution", harness="own"))
                continue
            row = Row(p.key, name, "correct", solution=_rel(path), harness="own")
            try:
                with torch.no_grad():
                    _own_one(ref_mod, path.read_text(), dtype, device, ROUNDINGS * get_precision(precision).unit_roundoff, row,
                             reps=3 if quick else 20)
            except Exception as exc:  # a row that says what went wrong; the other problems go on
                row.state, row.message = "runtime_error", f"{type(exc).__name__}: {str(exc)[:200]}"
            rows.append(row)
            print(_line(row), flush=True)
    return rows


def _own_one(ref_mod, source: str, dtype, device: str, rtol: float, row: Row, reps: int = 20) -> None:
    cand_mod = _module(source, "candidate")
    torch.manual_seed(0)
    init = ref_mod.get_init_inputs()
    torch.manual_seed(1)
    inputs32 = _cast(ref_mod.get_inputs(), torch.float32, device)
    inputs = _cast(inputs32, dtype, device)
    torch.manual_seed(2)
    model = ref_mod.Model(*_cast(init, dtype, device)).to(device=device, dtype=dtype)
    torch.manual_seed(2)
    new = cand_mod.ModelNew(*_cast(init, dtype, device)).to(device=device, dtype=dtype)
    outs = _outputs(new(*inputs))
    wide = [x.float() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    refs = _outputs(copy.deepcopy(model).float()(*wide))  # widening is exact: the same values, in fp32
    row.message = _mismatch(outs, refs, dtype, rtol)
    if row.message:
        row.state = "numerical_mismatch"
        return
    row.oracle_ms = _median_ms(lambda: new(*inputs), device, reps)
    row.eager_ms = _median_ms(lambda: model(*inputs), device, reps)
    torch.manual_seed(2)
    model32 = ref_mod.Model(*init).to(device=device)
    row.fp32_eager_ms = _median_ms(lambda: model32(*inputs32), device, reps)


# -- output ---------------------------------------------------------------------------------------------------
def _rel(path: Path) -> str:
    parts = path.parts
    return "/".join(parts[parts.index("solutions") + 1:])


def _ms(v: float | None) -> str:
    return f"{v:10.4f}" if v is not None else f"{'-':>10}"


HEADER = (f"{'problem':30} {'backend':8} {'state':20} {'oracle ms':>10} {'eager ms':>10} {'speedup':>8} "
          f"{'fp32 ms':>10}  harness")


def _line(r: Row) -> str:
    speed = f"{r.speedup:7.2f}x" if r.speedup else f"{'-':>8}"
    tail = f"  {r.message}" if r.message else ""
    return (f"{r.problem:30} {r.backend:8} {r.state:20} {_ms(r.oracle_ms)} {_ms(r.eager_ms)} {speed} "
            f"{_ms(r.fp32_eager_ms)}  {r.harness}{tail}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backends", default="cuda,triton", help="comma-separated (default cuda,triton)")
    ap.add_argument("--problems", default="", help="comma-separated names (default: the whole suite)")
    ap.add_argument("--size", default="gpu", choices=("cpu", "gpu", "default"), help="size preset (default gpu)")
    ap.add_argument("--precision", default="bf16", choices=sorted(DTYPES), help="default bf16")
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--quick", action="store_true",
                    help="two correctness trials and a 1 s timing budget: checks the path, not figures to quote")
    args = ap.parse_args(argv)
    backends = [b for b in args.backends.split(",") if b]
    names = [n for n in args.problems.split(",") if n] or None
    problems = load_builtin(names=names, size=args.size)
    print(f"{args.precision} oracle solutions at the {args.size} size; eager at {args.precision} and fp32")
    if verifier_takes_precision():
        print(HEADER)
        rows = run_verifier(problems, backends, args.precision, args.quick)
    else:
        device = "cpu" if all(get_backend(b).device == "cpu" for b in backends) else "cuda"
        print(f"(the verifier takes no precision yet: this script's own harness, on {device})")
        print(HEADER)
        rows = run_own(problems, backends, args.precision, device, args.quick)
    correct = [r for r in rows if r.state == "correct"]
    faster = [r for r in correct if r.speedup and r.speedup > 1]
    print(f"\n{len(correct)}/{len(rows)} correct, {len(faster)} faster than {args.precision} eager")
    if args.json:
        Path(args.json).write_text(json.dumps([{**dataclasses.asdict(r), "speedup": r.speedup} for r in rows],
                                              indent=1))
        print(f"wrote {args.json}")
    return 0 if len(correct) == len([r for r in rows if r.state != "no solution"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
